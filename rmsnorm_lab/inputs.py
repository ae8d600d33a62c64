"""The seeded inputs each side by side draws, for its benchmark and for the config sweep alike.

A leaf of the lab: :mod:`rmsnorm_lab.layernorm_bench` and :mod:`rmsnorm_lab.fused_add_bench` time on these, and
:func:`rmsnorm_lab.tuning.inputs` sweeps on them, so that a configuration is chosen on the rows it is then timed
on. Every tensor comes from :func:`rmsnorm.testing.make_inputs`, drawn on the device where it is CUDA.
"""

from __future__ import annotations

import torch

from rmsnorm.testing import make_inputs


def layernorm_inputs(M: int, N: int, dtype: torch.dtype, weight_dtype: torch.dtype, device) -> tuple:
    """(x, weight, bias, dy): x off centre (mean 0.5, std 2), which the LayerNorm's variance is about; weight and
    bias in ``weight_dtype``."""
    on_device = torch.device(device).type == "cuda"
    x, weight, dy = make_inputs(M, N, dtype, device, seed=0, weight_dtype=weight_dtype, draw_on_device=on_device)
    _, bias, _ = make_inputs(1, N, dtype, device, seed=1, weight_dtype=weight_dtype, draw_on_device=on_device)
    return (x * 2 + 0.5).to(dtype), weight, bias - 1, dy


def fused_add_inputs(M: int, N: int, dtype: torch.dtype, device) -> tuple:
    """(x, residual, weight, dy, d_residual_out), all in ``dtype``."""
    on_device = torch.device(device).type == "cuda"
    x, weight, dy = make_inputs(M, N, dtype, device, seed=0, draw_on_device=on_device)
    residual, _, d_residual_out = make_inputs(M, N, dtype, device, seed=1, draw_on_device=on_device)
    return x, residual, weight, dy, d_residual_out

"""LayerNorm on the fast path, the launchers: the RMSNorm's own kernels with ``IS_LAYERNORM`` on, and its contract.

For each row of x (M, N), computed in float32 and rounded once to x's dtype::

    mean = Σ x / N,   var = Σ (x − mean)² / N,   rstd = 1 / sqrt(var + eps)
    x̂ = (x − mean) · rstd,   y = x̂ · weight + bias
    u = dy · weight,   dx = rstd · (u − x̂ · mean(u · x̂) − mean(u))
    dweight = Σ_rows dy · x̂,   dbias = Σ_rows dy

The design: constexpr switches in the RMSNorm's kernels (``IS_LAYERNORM`` and ``HAS_BIAS`` in
:func:`~rmsnorm.forward.rmsnorm_fast_forward_kernel` and :func:`~rmsnorm.backward.rmsnorm_fast_backward_kernel`), as
QuACK's ``is_layernorm`` and as the fused add's ``HAS_RESIDUAL``. The two norms differ by a mean, a bias and one
more term of dx; everything else is one piece of code: the tile shapes, the column loop and the persistent grid, the
configuration table (:mod:`rmsnorm.config`: the LayerNorm moves the RMSNorm's bytes plus a bias and a mean, but its
forward reads the weight and the bias with every row block and takes its own rules first,
:data:`~rmsnorm.config.LAYERNORM_FORWARD_RULES`, and its backward, two partials live, holds no row wider than
:data:`~rmsnorm.config.LAYERNORM_BACKWARD_ONE_BLOCK_MAX_N` in one block), the direct launch and its cache
(:mod:`rmsnorm.launch`, the LayerNorm's keys end in its own fields), the contract (:mod:`rmsnorm.contract`; the bias
obeys the weight's rules), the fixed-order sum of the (P, N) float32 partials (dbias takes its own partials through
the same reduction kernel) and the eager/compile/torch.func plumbing of :mod:`rmsnorm.autograd`. Switched off, none
of it is compiled: the RMSNorm kernels' PTX is the recorded one (tests/library/test_plain_ptx.py).

The variance, and why so:

- a row in one block is held in registers, so it is read once and reduced twice: the mean, then
  Σ (x − mean)² around it (two passes on chip, exact to float32's rounding whatever the mean);
- a row that loops over column blocks is read from memory once for its statistics, as the RMSNorm's
  is: a shifted sum, Σ d and Σ d² with d = x − x[0], gives var = E[d²] − E[d]². The naive
  E[x²] − E[x]² cancels every digit of the variance when the mean is large against the spread (a row
  of mean 1e4 and std 1: E[x²] ≈ 1e8 has an ulp of 8 in float32); shifted by one of the row's own
  elements, both sums are of the spread's size. Welford's update would be as safe, at a division per
  element; a third pass over x would cost a read. tests/library/test_layernorm.py holds both shapes
  to the float64 oracle on such a row.

The backward's looped rows compute mean(u · x̂) from u · (x − mean), never from u · x − mean · u, for the
same reason.

The operators, the autograd and :func:`~rmsnorm.layernorm_fast` are in :mod:`rmsnorm.layernorm`.

Source: Triton's tutorial 05-layer-norm; quack ``rmsnorm.py`` (``is_layernorm``); Liger-Kernel
``ops/layer_norm.py``; llm.c ``doc/layernorm``.
"""

from __future__ import annotations

import torch

from . import contract, device, native_launch
from .backward import run_backward
from .config import FastConfig
from .contract import (
    ContractError,
    _require_device,
    _require_dtype,
    _require_like,
    _require_rstd,
    _require_tensor,
    _require_unit_last_stride,
    check_fast_inputs,
    refuse_dtensor,
)
from .forward import _run, check_config

#: torch.nn.LayerNorm's and F.layer_norm's default.
LAYERNORM_EPS = 1e-5


def check_layernorm_inputs(x: torch.Tensor, weight: torch.Tensor | None, bias: torch.Tensor | None, eps) -> None:
    """x, weight and eps as :func:`~rmsnorm.contract.check_fast_inputs`; the bias under the weight's rules.

    Raises:
        ContractError: naming the tensor, the rule and the value seen, before anything is allocated.
    """
    check_fast_inputs(x, weight, eps)
    if bias is None or contract.quick_check(x, bias, eps):  # the common case: the weight's rules, in a few reads
        return
    _require_tensor("bias", bias)
    refuse_dtensor("bias", bias)
    _require_dtype("bias", bias)
    _require_device("bias", bias, x.device)
    if tuple(bias.shape) != (x.shape[1],):
        raise ContractError(f"bias must have shape (N,) = ({x.shape[1]},); got {tuple(bias.shape)}")
    _require_unit_last_stride("bias", bias)


def check_layernorm_backward_inputs(x, weight, bias, mean, rstd, dy) -> None:
    """What the backward reads: x, weight, bias as in the forward; mean and rstd (M,) float32; dy like x."""
    check_layernorm_inputs(x, weight, bias, 1.0)
    _require_rstd(mean, x, "mean")
    _require_rstd(rstd, x)
    _require_like("dy", dy, x, "x", x.dtype)


def launch_layernorm_forward(x, weight, bias, eps: float, config: FastConfig | None = None):
    """The forward, unchecked: (y (M, N) in x's dtype, mean (M,) float32, rstd (M,) float32).

    With the native launch on and the default configuration, from one C call once a plan is kept
    (:mod:`rmsnorm.native_launch`, csrc/fast_path.cpp), as the RMSNorm's forward.
    """
    out = native_launch.launch_from_c("forward_layernorm", config, x, weight, bias, eps)  # a plan _run kept
    if out is not None:
        return out
    M, N = x.shape
    check_config(config, x, plain=False)
    y = device.new_output((M, N), x.dtype, x.device)
    mean = device.new_output((M,), torch.float32, x.device)
    rstd = device.new_output((M,), torch.float32, x.device)
    _run(x, weight, eps, config, 0.0, y, rstd, None, None, mean, bias)
    return y, mean, rstd


def layernorm_fast_forward(x: torch.Tensor, weight: torch.Tensor | None, bias: torch.Tensor | None,
                           eps: float = LAYERNORM_EPS, *, config: FastConfig | None = None):
    """Launch the LayerNorm forward on a 2-D input; not differentiable (see :func:`layernorm_fast`).

    Args:
        x: (M, N) float32/float16/bfloat16, 1 ≤ N ≤ 262144, unit column stride, any row stride.
        weight, bias: (N,) float32/float16/bfloat16 (each may differ from x's dtype), or None.
        eps: finite real number >= 0.
        config: launch configuration; default :func:`~rmsnorm.config.layernorm_forward_config` (N, x.dtype).

    Returns:
        (y, mean, rstd): y (M, N) contiguous in x's dtype; mean and rstd (M,) float32.

    Raises:
        ContractError: for anything outside the contract, before anything is allocated.
    """
    check_layernorm_inputs(x, weight, bias, eps)
    return launch_layernorm_forward(x, weight, bias, float(eps), config)


def layernorm_fast_backward(x, weight, bias, mean, rstd, dy, *, config: FastConfig | None = None):
    """Launch the fused backward and the fixed-order sums of dweight and dbias.

    Args:
        x: (M, N) forward input; weight, bias: as in the forward; mean, rstd: (M,) float32 from it;
        dy: (M, N) in x's dtype, unit column stride, any row stride.
        config: launch configuration; default :func:`~rmsnorm.config.layernorm_backward_config` (N, x.dtype).

    Returns:
        (dx, dweight, dbias): dx (M, N) in x's dtype; dweight and dbias (N,) in weight's and bias's
        dtypes (zeros when M = 0), or None. Scratch: (P, N) float32 for each of them.

    Raises:
        ContractError: for anything outside the contract, before anything is allocated.
    """
    check_layernorm_backward_inputs(x, weight, bias, mean, rstd, dy)
    return launch_layernorm_backward(x, weight, bias, mean, rstd, dy, config)


def launch_layernorm_backward(x, weight, bias, mean, rstd, dy, config: FastConfig | None = None):
    """The backward, unchecked: (dx, dweight or None, dbias or None), as :func:`layernorm_fast_backward`.

    With the native launch on and the default configuration, the backward kernel and the sums of dweight and dbias
    from one C call once their plans are kept (:mod:`rmsnorm.native_launch`, csrc/fast_path.cpp).
    """
    out = native_launch.launch_from_c("backward_layernorm", config, x, weight, bias, mean, rstd, dy)
    if out is not None:  # from plans run_backward kept
        return out
    return run_backward(x, weight, rstd, dy, config, 0.0, None, mean, bias)

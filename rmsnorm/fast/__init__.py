"""The fast path [lessons 09–12]: one-pass fused backward, bf16, rows up to 262144, row strides.

Beside the article's path, not instead of it: the files mirror the article's
ones (forward.py, backward.py, autograd.py, contract.py), the kernels have
their own names, and there are no teaching seams (no ``kernel=``, no CALLS).

Public API:

- :func:`rmsnorm_fast` (x, gamma, eps) — differentiable, any (..., N); eager calls
  go through an ``autograd.Function`` that launches directly, ``torch.compile``
  (``fullgraph=True``) traces two registered operators whole (see autograd.py).
- :class:`FastRMSNorm` — a ``torch.nn.RMSNorm`` subclass that calls it.
- :func:`rmsnorm_fast_forward`, :func:`rmsnorm_fast_backward` — the launchers.
- :class:`FastConfig`, :func:`forward_config`, :func:`backward_config`, :func:`grid_size`,
  :func:`row_alignment`, :func:`row_align_hint` — the knobs.
- :func:`check_fast_inputs`, :func:`refuse_dtensor`, :data:`FAST_MAX_N` — the contract (DTensors refused).
- :func:`swap_rmsnorm` — a model's RMSNorm modules swapped for FastRMSNorm, recognised by
  behaviour, the weight Parameters kept; :func:`randomise_norm_weights` (lesson 13).

Source: notebooks/09_the_long_row.ipynb … 13_into_a_model.ipynb.
"""

from .autograd import FastRMSNorm, rmsnorm_fast
from .backward import rmsnorm_fast_backward, rmsnorm_fast_backward_kernel, rmsnorm_fast_dgamma_kernel
from .config import (
    FastConfig,
    backward_config,
    forward_config,
    grid_size,
    num_programs,
    row_align_hint,
    row_alignment,
)
from .contract import FAST_DTYPES, FAST_MAX_N, INTERPRETER_BF16_REASON, check_fast_inputs, refuse_dtensor
from .forward import rmsnorm_fast_forward, rmsnorm_fast_forward_kernel
from .swap import randomise_norm_weights, swap_rmsnorm

__all__ = [
    "FAST_DTYPES",
    "FAST_MAX_N",
    "FastConfig",
    "FastRMSNorm",
    "INTERPRETER_BF16_REASON",
    "backward_config",
    "check_fast_inputs",
    "forward_config",
    "grid_size",
    "num_programs",
    "randomise_norm_weights",
    "refuse_dtensor",
    "rmsnorm_fast",
    "rmsnorm_fast_backward",
    "rmsnorm_fast_backward_kernel",
    "rmsnorm_fast_dgamma_kernel",
    "rmsnorm_fast_forward",
    "rmsnorm_fast_forward_kernel",
    "row_align_hint",
    "row_alignment",
    "swap_rmsnorm",
]

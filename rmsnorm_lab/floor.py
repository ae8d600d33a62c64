"""The floor of the whole-call benchmark: the fast kernels behind the thinnest autograd.Function.

What any Triton path costs the host on this machine: one ``torch.autograd.Function``, the
fast path's allocations (forward: y, rstd; backward: dx, the (P, N) float32 dgamma partials,
an (M,) scratch for rows wider than one block, dgamma) and one launch per kernel through
Triton's launcher ``kernel[grid](...)``, and nothing else: no contract checks, no custom
operator, no reshaping. Configurations are looked up once per (N, dtype); the grid comes
from M on every call. The kernels and the config functions are rmsnorm's own.

Not for models: it trusts its inputs (2-D, unit column stride, a weight, dy like x)
and refuses nothing. The benchmark runs it only where the fast path's contract
allows, and checks its outputs against the oracle like every other provider's.

Source: issue 15 ("the floor"); notebooks/07_benchmark.ipynb (whole calls); PyTorch
"Extending torch.autograd".
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import torch
import triton

from rmsnorm import (
    FastConfig,
    backward_config,
    forward_config,
    num_programs,
    rmsnorm_fast_backward_kernel,
    rmsnorm_fast_dgamma_kernel,
    rmsnorm_fast_forward_kernel,
    row_align_hint,
)
from rmsnorm.backward import REDUCE_BLOCK_N, REDUCE_BLOCK_P, TRITON_DTYPE
from rmsnorm.config import row_arithmetic_dtype


@dataclass(frozen=True)
class FloorPlan:
    """What the floor computes once per (N, dtype): configs and compile-time arguments."""

    forward: FastConfig
    backward: FastConfig
    forward_constants: dict
    backward_constants: dict
    backward_block_m: int
    mean_ux_dtype: torch.dtype | None  # dtype of the (M,) scratch of a looped backward; None: one block


@functools.lru_cache(maxsize=None)
def floor_plan(N: int, dtype: torch.dtype) -> FloorPlan:
    """The fast path's blocked table choice for rows of N columns in ``dtype``, with its kernels' constexprs.

    The floor launches the blocked kernels: at dense short odd rows, where the library takes the flat kernels
    (:mod:`rmsnorm.flat`), it is the floor of the blocked path, not of the library's call."""
    fwd, bwd = forward_config(N, dtype), backward_config(N, dtype)
    one_block = bwd.one_block(N)
    return FloorPlan(
        fwd, bwd,
        dict(HAS_WEIGHT=True, OFFSET=0.0, ONE_BLOCK=fwd.one_block(N), BLOCK_M=fwd.BLOCK_M, BLOCK_N=fwd.BLOCK_N,
             NUM_STAGES=fwd.num_stages, STATIC_N=fwd.static(N), num_warps=fwd.num_warps),
        dict(HAS_WEIGHT=True, OFFSET=0.0, COMPUTE=TRITON_DTYPE[row_arithmetic_dtype(N, dtype)], ONE_BLOCK=one_block,
             BLOCK_M=bwd.BLOCK_M if one_block else 1, BLOCK_N=bwd.BLOCK_N, NUM_STAGES=bwd.num_stages,
             STATIC_N=bwd.static(N), num_warps=bwd.num_warps),
        bwd.BLOCK_M if one_block else 1,
        None if one_block else row_arithmetic_dtype(N, dtype),
    )


class FloorFunction(torch.autograd.Function):
    """y = RMSNorm(x) · weight with the fast kernels and no checks; backward → (dx, dgamma)."""

    @staticmethod
    def forward(ctx, x, weight, eps, plan):
        M, N = x.shape
        y = torch.empty_like(x)
        rstd = torch.empty(M, dtype=torch.float32, device=x.device)
        row_blocks = triton.cdiv(M, plan.forward.BLOCK_M)
        P = num_programs(plan.forward, x.device, row_blocks)
        if M:  # the kernel's grid is at most its row blocks (one program at M = 0 would write row 0)
            rmsnorm_fast_forward_kernel[(P,)](x, x.stride(0), weight, y, y.stride(0), rstd, M, N, eps,
                                              PERSISTENT=P < row_blocks,
                                              ROW_ALIGN=row_align_hint(x.element_size(), N, x.stride(0), y.stride(0)),
                                              **plan.forward_constants)
        ctx.save_for_backward(x, weight, rstd)
        ctx.plan = plan
        return y

    @staticmethod
    def backward(ctx, dy):
        x, weight, rstd = ctx.saved_tensors
        plan = ctx.plan
        M, N = x.shape
        P = num_programs(plan.backward, x.device, triton.cdiv(M, plan.backward_block_m))
        dx = torch.empty_like(x)
        partial = torch.empty((P, N), dtype=torch.float32, device=x.device)
        mean_ux = rstd if plan.mean_ux_dtype is None else torch.empty(M, dtype=plan.mean_ux_dtype, device=x.device)
        align = row_align_hint(x.element_size(), N, x.stride(0), dy.stride(0), dx.stride(0))
        rmsnorm_fast_backward_kernel[(P,)](x, x.stride(0), weight, rstd, dy, dy.stride(0), dx, dx.stride(0), partial,
                                           mean_ux, M, N, ROW_ALIGN=align, **plan.backward_constants)
        dgamma = torch.empty(N, dtype=weight.dtype, device=x.device)
        rmsnorm_fast_dgamma_kernel[(triton.cdiv(N, REDUCE_BLOCK_N),)](partial, dgamma, P, N, BLOCK_P=REDUCE_BLOCK_P,
                                                                     BLOCK_N=REDUCE_BLOCK_N,
                                                                     ROW_ALIGN=row_align_hint(dgamma.element_size(), N),
                                                                     num_warps=4)
        return dx, dgamma, None, None


def floor_rmsnorm(x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """The floor's call: ``FloorFunction.apply`` with the plan of (N, x.dtype); no checks.

    Args:
        x: (M, N), unit column stride, inside the fast path's contract (unchecked); M = 0 launches no forward.
        weight: (N,) γ on x's device (unchecked).
        eps: float > 0 (unchecked).

    Returns:
        y: (M, N) in x's dtype; differentiable in x and weight (dy must have unit column stride).
    """
    return FloorFunction.apply(x, weight, eps, floor_plan(x.shape[1], x.dtype))

"""Backward kernel: one program per row computes dx and the dgamma partials.

For one row, with u = dy · gamma and rstd saved by the forward:

    dx      = rstd · u − x · rstd³ · mean(u · x)     (mean over the N columns)
    partial = dy · x · rstd                            (summed over rows later)

Source: notebooks/04_backward_derivation.ipynb.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from .. import device
from .contract import check_contract, check_dy, check_rstd
from .forward import num_warps_for


@triton.jit
def rmsnorm_dx_kernel(
    x_ptr,  # (M, N) input of the forward, float32 or float16
    gamma_ptr,  # (N,) weight, dtype of x
    dy_ptr,  # (M, N) gradient of the loss with respect to y, dtype of x
    rstd_ptr,  # (M,) float32, saved by the forward
    dx_ptr,  # (M, N) output: gradient with respect to x, dtype of x
    partial_ptr,  # (M, N) float32 output: dy · x · rstd, one row of dgamma terms
    row_stride,  # elements between rows; x, dy, dx and partial share it
    N,  # real row length: mean(u · x) divides by N, never by BLOCK_SIZE
    BLOCK_SIZE: tl.constexpr,  # next_power_of_2(N)
):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK_SIZE)
    mask = cols < N
    offsets = row * row_stride + cols
    x = tl.load(x_ptr + offsets, mask=mask, other=0).to(tl.float32)
    gamma = tl.load(gamma_ptr + cols, mask=mask, other=0).to(tl.float32)
    dy = tl.load(dy_ptr + offsets, mask=mask, other=0).to(tl.float32)
    rstd = tl.load(rstd_ptr + row)
    u = dy * gamma
    mean_ux = tl.sum(u * x, axis=0) / N
    dx = rstd * u - x * rstd * rstd * rstd * mean_ux
    tl.store(dx_ptr + offsets, dx, mask=mask)
    tl.store(partial_ptr + offsets, dy * x * rstd, mask=mask)


# torch.compile breaks the graph here and runs the launch eagerly: Dynamo cannot trace a kernel
# that runs in Triton's CPU interpreter, and eager's numbers are the contract (the fast path's custom
# op is the one meant to be traced whole).
@torch.compiler.disable
def backward_rows(
    x: torch.Tensor, weight: torch.Tensor, dy: torch.Tensor, rstd: torch.Tensor, eps: float,
    *, kernel=rmsnorm_dx_kernel,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Run the dx kernel: dx and the float32 dgamma partials, row by row.

    Args:
        x: (M, N) float32/float16, contiguous: the forward's input.
        weight: (N,) γ, dtype and device of ``x``.
        dy: (M, N) upstream gradient, same shape, dtype and device as ``x``,
            contiguous (the autograd wrapper makes it so; this function
            rejects anything else).
        rstd: (M,) float32 from :func:`forward_op`.
        eps: the forward's eps. The kernel does not use it: ``rstd``
            already includes it, and dx depends on eps only through
            rstd. It stays in the signature (the article's) and is checked
            like the forward's (finite, > 0), so that a bad value is refused
            the same way on both passes; nothing checks that it is the
            value the forward used.
        kernel: a kernel with the signature of :func:`rmsnorm_dx_kernel`.

    Returns:
        (dx, partial): dx is (M, N) in the dtype of ``x``; partial is (M, N)
        float32, dy · x · rstd, to be summed over rows by
        :func:`reduce_gamma_gradient`.

    Raises:
        ContractError: (a ValueError) for any contract violation of x, weight,
            eps, dy or rstd, before anything is allocated.

    Source: notebooks/04_backward_derivation.ipynb.
    """
    check_contract(x, weight, eps)
    check_dy(x, dy)
    check_rstd(x, rstd)
    M, N = x.shape
    dx = device.new_output((M, N), x.dtype, x.device)
    partial = device.new_output((M, N), torch.float32, x.device)
    if M == 0:
        return dx, partial
    BLOCK_SIZE = triton.next_power_of_2(N)
    kernel[(M,)](
        x, weight, dy, rstd, dx, partial,
        N, N,  # row stride == N: all four are contiguous (M, N)
        BLOCK_SIZE=BLOCK_SIZE, num_warps=num_warps_for(BLOCK_SIZE),
    )
    return dx, partial

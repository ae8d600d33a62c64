"""Deliberately wrong kernels for the N-vs-BLOCK lesson: divide by BLOCK_SIZE, not N.

Each kernel here is its correct counterpart with ONE line changed (a test
checks that with difflib, so the two cannot drift apart). They exist only to
be caught: never use them for anything else.

At N = 256 = BLOCK_SIZE they are right, so a test at N = 256 misses the bug;
at N = 257 (BLOCK_SIZE = 512) a row of ones gives ≈ 1.411458 instead of
≈ 0.9999995, and the dx check fails.

Source: notebooks/08_n_vs_block_exercise.ipynb.
"""

from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def rmsnorm_forward_kernel_block_mean(
    x_ptr,  # (M, N) input, float32 or float16, row-major
    gamma_ptr,  # (N,) weight, dtype of x
    y_ptr,  # (M, N) output, dtype of x
    rstd_ptr,  # (M,) float32 output: 1 / sqrt(mean(x²) + eps), kept for backward
    x_row_stride,  # elements from one row of x to the next (N when contiguous)
    y_row_stride,  # elements from one row of y to the next
    N,  # real row length: the mean divides by N, never by BLOCK_SIZE
    eps,  # added to mean(x²) before the square root
    BLOCK_SIZE: tl.constexpr,  # next_power_of_2(N): lanes one program works on
):
    row = tl.program_id(0).to(tl.int64)  # int64 before row * stride: no overflow
    cols = tl.arange(0, BLOCK_SIZE)
    mask = cols < N  # lanes N..BLOCK_SIZE-1 are padding, not data
    x = tl.load(x_ptr + row * x_row_stride + cols, mask=mask, other=0).to(tl.float32)
    gamma = tl.load(gamma_ptr + cols, mask=mask, other=0).to(tl.float32)
    rstd = tl.rsqrt(tl.sum(x * x, axis=0) / BLOCK_SIZE + eps)  # BUG: padding counted in the mean
    y = x * rstd * gamma
    tl.store(y_ptr + row * y_row_stride + cols, y, mask=mask)  # cast to y's dtype
    tl.store(rstd_ptr + row, rstd)


@triton.jit
def rmsnorm_dx_kernel_block_mean(
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
    mean_ux = tl.sum(u * x, axis=0) / BLOCK_SIZE  # BUG: padding counted in the mean
    dx = rstd * u - x * rstd * rstd * rstd * mean_ux
    tl.store(dx_ptr + offsets, dx, mask=mask)
    tl.store(partial_ptr + offsets, dy * x * rstd, mask=mask)


#: Each wrong kernel with the correct one it was copied from (for the diff test).
PAIRS = {
    "rmsnorm_forward_kernel": rmsnorm_forward_kernel_block_mean,
    "rmsnorm_dx_kernel": rmsnorm_dx_kernel_block_mean,
}

__all__ = ["rmsnorm_forward_kernel_block_mean", "rmsnorm_dx_kernel_block_mean", "PAIRS"]

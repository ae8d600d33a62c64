"""The looped forward kernel of exercise 09: a row wider than its block [lesson 09].

One program per row, a BLOCK_SIZE that may be smaller than N: pass 1 sums x² block by block,
pass 2 reads x again, normalises and writes y. It is the exercise's reference, the signature
the checker launches (:mod:`rmsnorm_course.checkers.ex09_long_row`), and the solution's kernel
(tests/course/test_teaching.py checks that solutions/09_the_long_row.ipynb has this very code).

Source: solutions/09_the_long_row.ipynb; Triton's layer-norm tutorial (05-layer-norm.py) and
Triton-Puzzles' "Long Sum" for the loop.
"""

from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def long_row_forward_kernel(
    x_ptr,  # (M, N) input, float32 or float16, unit column stride
    gamma_ptr,  # (N,) weight, dtype of x
    y_ptr,  # (M, N) output, dtype of x, same row stride as x
    rstd_ptr,  # (M,) float32 output: 1 / sqrt(mean(x²) + eps) per row
    row_stride,  # elements from one row of x (and of y) to the next
    N,  # real row length: the mean divides by N
    eps,  # added to mean(x²) before the square root
    BLOCK_SIZE: tl.constexpr,  # columns per block, a power of two, may be smaller than N
):
    """The exercise's reference (its signature is the one the checker launches): one program per row."""
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK_SIZE)
    x_row = x_ptr + row * row_stride
    sum_sq = tl.zeros([BLOCK_SIZE], dtype=tl.float32)
    for start in range(0, N, BLOCK_SIZE):  # pass 1: the whole row's sum of squares
        mask = start + cols < N
        x = tl.load(x_row + start + cols, mask=mask, other=0.0).to(tl.float32)
        sum_sq += x * x
    rstd = tl.rsqrt(tl.sum(sum_sq, axis=0) / N + eps)
    for start in range(0, N, BLOCK_SIZE):  # pass 2: read x again, normalise, write y
        mask = start + cols < N
        x = tl.load(x_row + start + cols, mask=mask, other=0.0).to(tl.float32)
        gamma = tl.load(gamma_ptr + start + cols, mask=mask, other=0.0).to(tl.float32)
        tl.store(y_ptr + row * row_stride + start + cols, x * rstd * gamma, mask=mask)
    tl.store(rstd_ptr + row, rstd)

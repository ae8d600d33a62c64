"""The per-program loop of exercise 10's one-pass backward: dx and a dgamma partial [lesson 10].

A persistent grid of P programs: program p takes rows p, p + P, p + 2P, …, writes their dx and
keeps Σ dy · x̂ over its rows in a float32 accumulator, stored once in row p of the (P, N)
``partial``. It is the exercise's reference, the signature the checker launches
(:mod:`rmsnorm_course.checkers.ex10_one_pass`), and the solution's kernel (tests/course/test_teaching.py
checks that solutions/10_one_pass_backward.ipynb has this very code).

Source: solutions/10_one_pass_backward.ipynb; Liger-Kernel's ``ops/rms_norm.py`` (rows per program,
one fp32 partial buffer).
"""

from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def one_pass_backward_kernel(
    x_ptr,  # (M, N) forward input, float32 or float16, unit column stride
    gamma_ptr,  # (N,) weight, dtype of x
    rstd_ptr,  # (M,) float32, saved by the forward
    dy_ptr,  # (M, N) upstream gradient, dtype of x
    dx_ptr,  # (M, N) output, dtype of x
    partial_ptr,  # (P, N) float32 output: row p holds Σ dy · x̂ over program p's rows
    row_stride,  # elements between rows; x, dy and dx share it
    M,  # rows
    N,  # real row length (N <= BLOCK_SIZE)
    BLOCK_SIZE: tl.constexpr,  # next_power_of_2(N)
):
    """The exercise's reference (its signature is the one the checker launches): a persistent grid."""
    pid = tl.program_id(0)
    P = tl.num_programs(0)
    cols = tl.arange(0, BLOCK_SIZE)
    mask = cols < N
    gamma = tl.load(gamma_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    dgamma_acc = tl.zeros([BLOCK_SIZE], dtype=tl.float32)
    for row in range(pid, M, P):  # step P: every row belongs to exactly one program
        offsets = tl.cast(row, tl.int64) * row_stride + cols
        x = tl.load(x_ptr + offsets, mask=mask, other=0.0).to(tl.float32)
        dy = tl.load(dy_ptr + offsets, mask=mask, other=0.0).to(tl.float32)
        rstd = tl.load(rstd_ptr + row)
        x_hat = x * rstd
        u = dy * gamma
        mean_ux = tl.sum(u * x_hat, axis=0) / N
        tl.store(dx_ptr + offsets, (u - x_hat * mean_ux) * rstd, mask=mask)
        dgamma_acc += dy * x_hat
    tl.store(partial_ptr + pid * N + cols, dgamma_acc, mask=mask)  # once, after the loop

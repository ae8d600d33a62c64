"""Exercise 15's kernels: LayerNorm, forward (one row per program) and backward (a persistent grid) [lesson 15].

The forward takes the row's mean, then the mean of the squared deviations from it (two passes over
the row, both in registers: the row is read from memory once), and writes
y = (x − mean) · rstd · weight + bias, with mean and rstd = 1/sqrt(var + eps) kept for the backward;
var divides by N (the biased variance, as ``torch.nn.LayerNorm``). The backward runs on P programs, as
exercise 10's: program p takes rows p, p + P, …, writes their dx, a row reduction with one more term
than RMSNorm's, dx = rstd · (u − mean(u) − x̂ · mean(u · x̂)), u = dy · weight, and keeps two column
sums over its rows in float32, Σ dy · x̂ (dweight) and Σ dy (dbias), stored once in row p of two
(P, N) partials.

They are the exercise's references (the signatures the checker launches,
:mod:`rmsnorm_course.checkers.ex15_layernorm`) and the solution's kernels (tests/course/test_teaching.py
checks that solutions/15_layernorm.ipynb has this very code).

Source: solutions/15_layernorm.ipynb; Triton's tutorial ``05-layer-norm.py``; Liger-Kernel
``ops/layer_norm.py``; llm.c ``doc/layernorm``.
"""

from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def layernorm_forward_kernel(
    x_ptr,  # (M, N) input, float32 or float16, unit column stride
    weight_ptr,  # (N,) weight (γ), x's dtype
    bias_ptr,  # (N,) bias (β), x's dtype
    y_ptr,  # (M, N) output, x's dtype
    mean_ptr,  # (M,) float32 output: the row's mean, kept for the backward
    rstd_ptr,  # (M,) float32 output: 1/sqrt(var + eps), kept for the backward
    row_stride,  # elements between rows; x and y share it
    N,  # real row length (N <= BLOCK_SIZE)
    eps,  # added to the variance before the square root
    BLOCK_SIZE: tl.constexpr,  # next_power_of_2(N)
):
    """The exercise's reference (its signature is the one the checker launches): program ``row`` owns one row."""
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK_SIZE)
    mask = cols < N
    x = tl.load(x_ptr + row * row_stride + cols, mask=mask, other=0.0).to(tl.float32)
    mean = tl.sum(x, axis=0) / N  # first pass: the masked lanes add zeros
    diff = tl.where(mask, x - mean, 0.0)  # a masked lane's 0 - mean is not a deviation of the row
    var = tl.sum(diff * diff, axis=0) / N  # second pass, on the deviations: nothing large cancels
    rstd = tl.rsqrt(var + eps)
    weight = tl.load(weight_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    bias = tl.load(bias_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    tl.store(y_ptr + row * row_stride + cols, diff * rstd * weight + bias, mask=mask)
    tl.store(mean_ptr + row, mean)
    tl.store(rstd_ptr + row, rstd)


@triton.jit
def layernorm_backward_kernel(
    x_ptr,  # (M, N) forward input, float32 or float16, unit column stride
    weight_ptr,  # (N,) weight (γ), x's dtype
    mean_ptr,  # (M,) float32, saved by the forward
    rstd_ptr,  # (M,) float32, saved by the forward
    dy_ptr,  # (M, N) upstream gradient, x's dtype
    dx_ptr,  # (M, N) output, x's dtype
    dweight_partial_ptr,  # (P, N) float32 output: row p holds Σ dy · x̂ over program p's rows
    dbias_partial_ptr,  # (P, N) float32 output: row p holds Σ dy over program p's rows
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
    weight = tl.load(weight_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    dweight_acc = tl.zeros([BLOCK_SIZE], dtype=tl.float32)
    dbias_acc = tl.zeros([BLOCK_SIZE], dtype=tl.float32)
    for row in range(pid, M, P):  # step P: every row belongs to exactly one program
        offsets = tl.cast(row, tl.int64) * row_stride + cols
        x = tl.load(x_ptr + offsets, mask=mask, other=0.0).to(tl.float32)
        dy = tl.load(dy_ptr + offsets, mask=mask, other=0.0).to(tl.float32)
        mean = tl.load(mean_ptr + row)
        rstd = tl.load(rstd_ptr + row)
        x_hat = (x - mean) * rstd  # a masked lane's x̂ is not 0, but its dy is: it adds nothing below
        u = dy * weight
        mean_u = tl.sum(u, axis=0) / N  # the term RMSNorm does not have: the gradient through the mean
        mean_ux = tl.sum(u * x_hat, axis=0) / N
        tl.store(dx_ptr + offsets, (u - mean_u - x_hat * mean_ux) * rstd, mask=mask)
        dweight_acc += dy * x_hat  # summed over rows (axis M), column by column
        dbias_acc += dy
    tl.store(dweight_partial_ptr + pid * N + cols, dweight_acc, mask=mask)  # once, after the loop
    tl.store(dbias_partial_ptr + pid * N + cols, dbias_acc, mask=mask)

"""Exercise 14's kernels: the residual add fused into the norm, forward and backward, one row per program [lesson 14].

The forward forms h = x + residual, stores it in ``residual_out`` (rounded to its dtype, as torch
rounds ``x + residual``) and normalises that rounded h: y = h · rstd · (weight + OFFSET). The backward
takes h (the forward's residual_out), dy and d_residual_out and writes the gradient of h, the norm's
backward plus d_residual_out, which is dx and d_residual at once (h = x + residual passes it to both).

They are the exercise's references (the signatures the checker launches,
:mod:`rmsnorm_course.checkers.ex14_fused_add`) and the solution's kernels (tests/course/test_teaching.py
checks that solutions/14_fusing_the_residual.ipynb has this very code). The library's own fused add is
:func:`rmsnorm.rmsnorm_add`, the fast kernels with ``HAS_RESIDUAL`` and ``HAS_DRES`` switched on.

Source: solutions/14_fusing_the_residual.ipynb; Liger-Kernel ``ops/fused_add_rms_norm.py``.
"""

from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def fused_add_forward_kernel(
    x_ptr,  # (M, N) the sublayer's output, float32 or float16, unit column stride
    residual_ptr,  # (M, N) the residual stream, x's dtype or float32
    weight_ptr,  # (N,) weight, x's dtype
    y_ptr,  # (M, N) output, x's dtype: the norm of h
    residual_out_ptr,  # (M, N) output, residual's dtype: h = x + residual, the stream for the next layer
    rstd_ptr,  # (M,) float32 output: 1/sqrt(mean(h²) + eps), kept for the backward
    row_stride,  # elements between rows; the four (M, N) tensors share it
    N,  # real row length (N <= BLOCK_SIZE)
    eps,  # added to mean(h²) before the square root
    OFFSET: tl.constexpr,  # y = ĥ · (weight + OFFSET): 0.0 (Llama) or 1.0 (Gemma's 1 + weight)
    BLOCK_SIZE: tl.constexpr,  # next_power_of_2(N)
):
    """The exercise's reference (its signature is the one the checker launches): program ``row`` owns one row."""
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK_SIZE)
    mask = cols < N
    offsets = row * row_stride + cols
    x = tl.load(x_ptr + offsets, mask=mask, other=0.0).to(tl.float32)
    residual = tl.load(residual_ptr + offsets, mask=mask, other=0.0).to(tl.float32)
    h = (x + residual).to(residual_out_ptr.dtype.element_ty)  # rounded once, as torch rounds x + residual
    tl.store(residual_out_ptr + offsets, h, mask=mask)
    h = h.to(tl.float32)  # the norm reads the h the caller gets back
    rstd = tl.rsqrt(tl.sum(h * h, axis=0) / N + eps)
    weight = tl.load(weight_ptr + cols, mask=mask, other=0.0).to(tl.float32) + OFFSET
    tl.store(y_ptr + offsets, h * rstd * weight, mask=mask)
    tl.store(rstd_ptr + row, rstd)


@triton.jit
def fused_add_backward_kernel(
    h_ptr,  # (M, N) the forward's residual_out, h = x + residual, float32 or float16
    weight_ptr,  # (N,) weight, h's dtype
    rstd_ptr,  # (M,) float32, saved by the forward
    dy_ptr,  # (M, N) gradient of y, h's dtype
    dres_ptr,  # (M, N) gradient of residual_out, h's dtype
    dh_ptr,  # (M, N) output, h's dtype: the gradient of h, which is dx and d_residual
    row_stride,  # elements between rows; the four (M, N) tensors share it
    N,  # real row length (N <= BLOCK_SIZE)
    OFFSET: tl.constexpr,  # u = dy · (weight + OFFSET), as in the forward
    BLOCK_SIZE: tl.constexpr,  # next_power_of_2(N)
):
    """The exercise's reference (its signature is the one the checker launches): program ``row`` owns one row."""
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK_SIZE)
    mask = cols < N
    offsets = row * row_stride + cols
    h = tl.load(h_ptr + offsets, mask=mask, other=0.0).to(tl.float32)
    dy = tl.load(dy_ptr + offsets, mask=mask, other=0.0).to(tl.float32)
    dres = tl.load(dres_ptr + offsets, mask=mask, other=0.0).to(tl.float32)
    rstd = tl.load(rstd_ptr + row)
    weight = tl.load(weight_ptr + cols, mask=mask, other=0.0).to(tl.float32) + OFFSET
    h_hat = h * rstd
    u = dy * weight
    mean_uh = tl.sum(u * h_hat, axis=0) / N
    dh = (u - h_hat * mean_uh) * rstd + dres  # the norm's backward, plus the gradient that goes around it
    tl.store(dh_ptr + offsets, dh, mask=mask)

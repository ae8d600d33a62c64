"""A first Triton kernel, before the forward's: subtract each row's mean [lesson 03 §3].

It uses each of the five pieces the forward kernel needs once (``program_id``,
``arange``, masked ``load`` and ``store``, ``sum``, a ``constexpr`` block), and
nothing else: no gamma, no row strides, float32 only.

Source: notebooks/03_forward_kernel.ipynb §3.
"""

from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def center_rows_kernel(
    x_ptr,  # (M, N) float32 input, row-major
    y_ptr,  # (M, N) float32 output: each row minus its mean
    N,  # real row length
    BLOCK_SIZE: tl.constexpr,  # lanes per program: a power of two >= N, fixed at compile time
):
    row = tl.program_id(0)  # the row this program owns: 0 … M−1
    cols = tl.arange(0, BLOCK_SIZE)  # lane numbers 0 … BLOCK_SIZE−1
    mask = cols < N  # lanes past the row's end are padding
    x = tl.load(x_ptr + row * N + cols, mask=mask, other=0.0)  # masked lanes read nothing, get 0
    mean = tl.sum(x, axis=0) / N  # one number per program; the padding added 0
    tl.store(y_ptr + row * N + cols, x - mean, mask=mask)  # masked lanes write nothing

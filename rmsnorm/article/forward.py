"""Forward kernel: one program per row computes rstd and y = x · rstd · gamma.

Source: notebooks/03_forward_kernel.ipynb; the layout follows Triton's
tutorial 05-layer-norm.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from .. import device
from .contract import check_contract


@triton.jit
def rmsnorm_forward_kernel(
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
    rstd = tl.rsqrt(tl.sum(x * x, axis=0) / N + eps)  # padding adds 0 to the sum
    y = x * rstd * gamma
    tl.store(y_ptr + row * y_row_stride + cols, y, mask=mask)  # cast to y's dtype
    tl.store(rstd_ptr + row, rstd)


def num_warps_for(block_size: int) -> int:
    """Warps per program for a row of ``block_size`` lanes: 4 up to 2048, else 8."""
    return 4 if block_size <= 2048 else 8


# torch.compile breaks the graph here and runs the launch eagerly: Dynamo cannot trace a kernel
# that runs in Triton's CPU interpreter, and eager's numbers are the contract (the fast path's custom
# op is the one meant to be traced whole).
@torch.compiler.disable
def forward_op(
    x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6, *, kernel=rmsnorm_forward_kernel
) -> tuple[torch.Tensor, torch.Tensor]:
    """Run the forward kernel on a 2-D input.

    Args:
        x: (M, N) float32 or float16, contiguous, CUDA (or CPU under the
            interpreter), 1 ≤ N ≤ 4096.
        weight: (N,) γ, same dtype and device as ``x``.
        eps: finite real number > 0.
        kernel: a kernel with the signature of :func:`rmsnorm_forward_kernel`
            (the exercises and the N-vs-BLOCK lesson launch their own).

    Returns:
        (y, rstd): y is (M, N) in the dtype of ``x``; rstd is (M,) float32,
        1 / sqrt(mean(x²) + eps) per row. M = 0 returns empty tensors
        without launching a kernel.

    Raises:
        ContractError: (a ValueError) for any contract violation, before
            anything is allocated.

    Source: notebooks/03_forward_kernel.ipynb.
    """
    check_contract(x, weight, eps)
    M, N = x.shape
    y = device.new_output((M, N), x.dtype, x.device)
    rstd = device.new_output((M,), torch.float32, x.device)
    if M == 0:
        return y, rstd
    BLOCK_SIZE = triton.next_power_of_2(N)
    kernel[(M,)](
        x, weight, y, rstd,
        x.stride(0), y.stride(0), N, float(eps),
        BLOCK_SIZE=BLOCK_SIZE, num_warps=num_warps_for(BLOCK_SIZE),
    )
    return y, rstd

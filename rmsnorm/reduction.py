"""dgamma: a second kernel sums the float32 partials over rows, column by column.

Every row used the same gamma, so dgamma gathers a contribution from every
row: dgamma[j] = Σ_rows partial[row, j]. Instead of atomics (whose order of
addition varies from run to run), each row wrote its own private partials and
this kernel sums each column in a fixed order: the result is deterministic,
bitwise identical across runs on the same device.

Source: notebooks/05_gamma_reduction.ipynb.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from .contract import check_partial
from .device import new_output

#: Columns per program and rows per step of the column sum (the article's 32 × 32 tile).
BLOCK_N = 32
BLOCK_M = 32


@triton.jit
def rmsnorm_dgamma_kernel(
    partial_ptr,  # (M, N) float32: dy · x · rstd from the dx kernel
    dgamma_ptr,  # (N,) output, dtype of gamma
    M,  # rows to sum over
    N,  # columns
    partial_row_stride,  # elements between rows of partial (N when contiguous)
    BLOCK_M: tl.constexpr,  # rows added per step
    BLOCK_N: tl.constexpr,  # columns owned by one program
):
    pid = tl.program_id(0)
    cols = pid * BLOCK_N + tl.arange(0, BLOCK_N)
    col_mask = cols < N
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for start in range(0, M, BLOCK_M):  # fixed order: deterministic
        rows = start + tl.arange(0, BLOCK_M)
        mask = (rows[:, None] < M) & col_mask[None, :]
        offsets = rows[:, None].to(tl.int64) * partial_row_stride + cols[None, :]
        acc += tl.load(partial_ptr + offsets, mask=mask, other=0.0)
    dgamma = tl.sum(acc, axis=0)  # a sum over rows, not a mean
    tl.store(dgamma_ptr + cols, dgamma, mask=col_mask)  # cast to gamma's dtype


def reduce_gamma_gradient(partial: torch.Tensor, dtype: torch.dtype, *, kernel=rmsnorm_dgamma_kernel) -> torch.Tensor:
    """Sum the partials over rows in float32, then cast: dgamma.

    Args:
        partial: (M, N) float32, contiguous, from :func:`backward_rows`.
        dtype: dtype of gamma (float32 or float16); dgamma is returned in it.
        kernel: a kernel with the signature of :func:`rmsnorm_dgamma_kernel`.

    Returns:
        dgamma: (N,) in ``dtype``. M = 0 gives zeros without launching.

    Raises:
        ContractError: (a ValueError) for a partial that is not 2-D float32
            contiguous, too wide, too large, on the wrong device, or a dtype
            other than float32/float16.

    Source: notebooks/05_gamma_reduction.ipynb.
    """
    check_partial(partial, dtype)
    M, N = partial.shape
    if M == 0:
        return torch.zeros(N, device=partial.device, dtype=dtype)
    dgamma = new_output((N,), dtype, partial.device)
    grid = (triton.cdiv(N, BLOCK_N),)
    kernel[grid](
        partial, dgamma, M, N, partial.stride(0), BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N,
    )
    return dgamma

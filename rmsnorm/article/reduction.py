"""dgamma: a second kernel sums the float32 partials over rows, column by column.

Every row used the same gamma, so dgamma gathers a contribution from every
row: dgamma[j] = Σ_rows partial[row, j]. Instead of atomics (whose order of
addition varies from run to run), each row wrote its own private partials and
this kernel sums each column in a fixed order: the result is deterministic,
bitwise identical across runs on the same device.

The sum stays in float32 but is compensated (Kahan): each tile of BLOCK_M rows
is summed as a tree, and the rounding error of adding it to the running total
is carried into the next step. A plain float32 running sum of 4096 cancelling
terms missed the declared fp32 tolerance on the H200 (4096×4096: one column off
by 1.8e-5, 1e-5 + 1e-4·|ref| allowed); compensated, it stays near the error
already in the float32 partials.

Source: notebooks/05_gamma_reduction.ipynb.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from .. import device
from .contract import check_partial

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
    total = tl.zeros((BLOCK_N,), dtype=tl.float32)
    lost = tl.zeros((BLOCK_N,), dtype=tl.float32)  # Kahan: low bits the running total dropped
    for start in range(0, M, BLOCK_M):  # fixed order: deterministic
        rows = start + tl.arange(0, BLOCK_M)
        mask = (rows[:, None] < M) & col_mask[None, :]
        offsets = rows[:, None].to(tl.int64) * partial_row_stride + cols[None, :]
        tile = tl.load(partial_ptr + offsets, mask=mask, other=0.0)  # (BLOCK_M, BLOCK_N)
        step = tl.sum(tile, axis=0) - lost  # a sum over rows, not a mean
        new_total = total + step
        lost = (new_total - total) - step  # what rounding removed from step
        total = new_total
    tl.store(dgamma_ptr + cols, total, mask=col_mask)  # cast to gamma's dtype


# torch.compile breaks the graph here and runs the launch eagerly: Dynamo cannot trace a kernel
# that runs in Triton's CPU interpreter, and eager's numbers are the contract (the fast path's custom
# op is the one meant to be traced whole).
@torch.compiler.disable
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
    dgamma = device.new_output((N,), dtype, partial.device)
    grid = (triton.cdiv(N, BLOCK_N),)
    kernel[grid](
        partial, dgamma, M, N, partial.stride(0), BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N,
    )
    return dgamma

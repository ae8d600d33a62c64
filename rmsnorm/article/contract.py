"""The input contract of the kernels: checked before anything is allocated or written.

The kernels assume row-major (contiguous) float32/float16 tensors on one
device, a row of at most 4096 columns and at most 64 MiB of float32 scratch
for the dgamma partials. Anything else is refused with a :class:`ContractError`
that names the tensor, the rule and the value seen. There is no silent
fallback to the reference and no silent copy.

Source: notebooks/03_forward_kernel.ipynb (memory contract) and
notebooks/05_gamma_reduction.ipynb (scratch budget).
"""

from __future__ import annotations

import torch

from ..contract import ContractError, _require_device, _require_kernel_device, _require_tensor
from ..contract import check_eps as _check_eps

#: Widest row the kernels accept: one program holds a whole row in registers.
MAX_N = 4096
#: Bytes of float32 scratch (M × N × 4) the dgamma partials may take: 64 MiB.
MAX_SCRATCH_BYTES = 64 * 1024 * 1024
#: Dtypes the kernels accept (the reference also accepts float64).
KERNEL_DTYPES = (torch.float32, torch.float16)


def check_eps(eps, name: str = "eps") -> None:
    """Raise unless ``eps`` is a finite real number > 0 (bool excluded): the article's rule, stricter than torch's
    (and the fast path's) eps ≥ 0, so that a row of zeros never divides by zero.

    Raises:
        ContractError: for 0, negatives, NaN, ±inf, bool, tensors, strings, None.
    """
    _check_eps(eps, name, allow_zero=False)


def scratch_bytes(M: int, N: int) -> int:
    """Bytes of the float32 ``partial`` buffer for an (M, N) input: ``M * N * 4``."""
    return M * N * 4


def _require_contiguous(name: str, t: torch.Tensor) -> None:
    if not t.is_contiguous():
        raise ContractError(
            f"{name} must be contiguous (row-major); got shape {tuple(t.shape)} with strides "
            f"{tuple(t.stride())}. Views such as a transpose are rejected, not copied: "
            f"call .contiguous() yourself if a copy is what you want"
        )


def check_contract(x: torch.Tensor, weight: torch.Tensor, eps) -> None:
    """Check x, weight and eps against the kernels' contract.

    Rules: x is a 2-D (M, N) contiguous float32/float16 tensor; weight is a
    contiguous (N,) tensor of the same dtype and device; 1 ≤ N ≤ 4096;
    M × N × 4 bytes ≤ 64 MiB; the device is CUDA, or the CPU while Triton's
    interpreter is active; eps is a finite real number > 0.

    Args:
        x: (M, N) activations.
        weight: (N,) γ.
        eps: the stabiliser added to mean(x²).

    Raises:
        ContractError: naming the tensor, the rule and the value seen.
            Nothing has been allocated or written when it is raised.

    Source: notebooks/03_forward_kernel.ipynb.
    """
    _require_tensor("x", x)
    _require_tensor("weight", weight)
    if x.dim() != 2:
        raise ContractError(f"x must be 2-D (M, N); got {x.dim()}-D shape {tuple(x.shape)}")
    if x.dtype not in KERNEL_DTYPES:
        raise ContractError(f"x must be float32 or float16 for the kernels; got {x.dtype}")
    if weight.dtype != x.dtype:
        raise ContractError(f"weight must have the dtype of x ({x.dtype}); got {weight.dtype}")
    _require_device("weight", weight, x.device)
    _require_kernel_device("x", x)
    _require_contiguous("x", x)
    _require_contiguous("weight", weight)
    M, N = x.shape
    if not 1 <= N <= MAX_N:
        raise ContractError(f"x must have 1 <= N <= {MAX_N} columns; got N = {N}")
    if tuple(weight.shape) != (N,):
        raise ContractError(f"weight must have shape (N,) = ({N},); got {tuple(weight.shape)}")
    if scratch_bytes(M, N) > MAX_SCRATCH_BYTES:
        raise ContractError(
            f"x of shape ({M}, {N}) needs M*N*4 = {scratch_bytes(M, N):,} bytes of dgamma scratch; "
            f"the limit is {MAX_SCRATCH_BYTES:,} bytes (64 MiB)"
        )
    check_eps(eps)


def check_dy(x: torch.Tensor, dy: torch.Tensor) -> None:
    """Check the upstream gradient: same shape, dtype and device as x, contiguous.

    Raises:
        ContractError: naming the rule and the value seen.
    """
    _require_tensor("dy", dy)
    if tuple(dy.shape) != tuple(x.shape):
        raise ContractError(f"dy must have the shape of x {tuple(x.shape)}; got {tuple(dy.shape)}")
    if dy.dtype != x.dtype:
        raise ContractError(f"dy must have the dtype of x ({x.dtype}); got {dy.dtype}")
    _require_device("dy", dy, x.device)
    _require_contiguous("dy", dy)


def check_rstd(x: torch.Tensor, rstd: torch.Tensor) -> None:
    """Check the saved ``rstd``: float32, shape (M,), contiguous, on x's device.

    Raises:
        ContractError: naming the rule and the value seen.
    """
    _require_tensor("rstd", rstd)
    if rstd.dtype != torch.float32:
        raise ContractError(f"rstd must be float32 (one per row); got {rstd.dtype}")
    if tuple(rstd.shape) != (x.shape[0],):
        raise ContractError(f"rstd must have shape (M,) = ({x.shape[0]},); got {tuple(rstd.shape)}")
    _require_device("rstd", rstd, x.device)
    _require_contiguous("rstd", rstd)


def check_partial(partial: torch.Tensor, dtype: torch.dtype) -> None:
    """Check the dgamma partials before the column sum.

    Rules: 2-D float32 contiguous (M, N) with 1 ≤ N ≤ 4096 and M × N × 4 bytes
    ≤ 64 MiB, on CUDA or on the CPU under the interpreter; ``dtype`` (of
    dgamma) is float32 or float16.

    Raises:
        ContractError: naming the rule and the value seen.
    """
    _require_tensor("partial", partial)
    if partial.dim() != 2 or partial.dtype != torch.float32:
        raise ContractError(
            f"partial must be a 2-D float32 tensor (M, N); got {partial.dim()}-D {partial.dtype}"
        )
    if dtype not in KERNEL_DTYPES:
        raise ContractError(f"dgamma dtype must be float32 or float16; got {dtype}")
    _require_kernel_device("partial", partial)
    _require_contiguous("partial", partial)
    M, N = partial.shape
    if not 1 <= N <= MAX_N:
        raise ContractError(f"partial must have 1 <= N <= {MAX_N} columns; got N = {N}")
    if scratch_bytes(M, N) > MAX_SCRATCH_BYTES:
        raise ContractError(
            f"partial of shape ({M}, {N}) takes {scratch_bytes(M, N):,} bytes; "
            f"the limit is {MAX_SCRATCH_BYTES:,} bytes (64 MiB)"
        )

"""RMSNorm as an nn.Module: a drop-in for torch.nn.RMSNorm over the last dimension.

The parameter is named ``weight``, so ``state_dict()`` loads into
``torch.nn.RMSNorm(N, eps=...)`` and back.

Source: notebooks/06_autograd_and_training.ipynb.
"""

from __future__ import annotations

import numbers

import torch
from torch import nn

from .autograd import rmsnorm
from .contract import MAX_N, ContractError, check_eps


class RMSNorm(nn.Module):
    """RMSNorm over the last dimension, computed by the Triton kernels.

    Args:
        normalized_shape: N, as an int or a 1-tuple (only the last dimension
            is normalised), 1 ≤ N ≤ 4096.
        eps: finite real number > 0 (default 1e-6, the article's value;
            note torch.nn.RMSNorm's own default is the dtype's machine epsilon).
        device, dtype: of ``weight`` (float32 or float16 for the kernels).

    Raises:
        ContractError: (a ValueError) for a bad normalized_shape or eps.

    Source: notebooks/06_autograd_and_training.ipynb.
    """

    def __init__(self, normalized_shape, eps: float = 1e-6, device=None, dtype=None) -> None:
        super().__init__()
        if isinstance(normalized_shape, numbers.Integral) and not isinstance(normalized_shape, bool):
            normalized_shape = (int(normalized_shape),)
        normalized_shape = tuple(normalized_shape)
        if len(normalized_shape) != 1 or not 1 <= normalized_shape[0] <= MAX_N:
            raise ContractError(
                f"normalized_shape must be (N,) with 1 <= N <= {MAX_N}; got {normalized_shape}"
            )
        check_eps(eps)
        self.normalized_shape = normalized_shape
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(normalized_shape, device=device, dtype=dtype))

    def reset_parameters(self) -> None:
        """Set ``weight`` back to ones."""
        nn.init.ones_(self.weight)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """y = rmsnorm(x, weight, eps) for x of shape (..., N)."""
        return rmsnorm(x, self.weight, self.eps)

    def extra_repr(self) -> str:
        return f"{self.normalized_shape}, eps={self.eps}"

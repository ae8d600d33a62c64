"""Autograd wiring: RMSNormFunction connects the three kernels to PyTorch.

forward saves (x, weight, rstd) and eps; backward makes dy contiguous,
runs the dx kernel, then the dgamma reduction, and returns one gradient per
input of forward: (dx, dgamma, None) — None for eps, which is not
differentiated by this interface (it still changes y).

Source: notebooks/06_autograd_and_training.ipynb; PyTorch "Extending
torch.autograd" (custom Function).
"""

from __future__ import annotations

import torch
from torch.autograd.function import once_differentiable

from ..contract import _functorch_wrapped
from .backward import backward_rows
from .contract import ContractError, _require_contiguous, _require_tensor
from .forward import forward_op
from .reduction import reduce_gamma_gradient


class CallCounter(dict):
    """Counts passes through :class:`RMSNormFunction`: ``{"forward": n, "backward": n}``.

    These are passes through the wrapper, not GPU launches (one backward
    launches two kernels). ``CALLS.reset()`` sets both to 0.
    """

    def __init__(self) -> None:
        super().__init__(forward=0, backward=0)

    def reset(self) -> None:
        """Set both counts back to 0."""
        self["forward"] = 0
        self["backward"] = 0


#: Global pass counter of the autograd wrapper.
CALLS = CallCounter()


class RMSNormFunction(torch.autograd.Function):
    """RMSNorm with Triton forward and backward, for 2-D (M, N) inputs.

    Double backward is not supported (the backward is not itself
    differentiable): asking for it raises a RuntimeError.
    """

    @staticmethod
    def forward(ctx, x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
        y, rstd = forward_op(x, weight, eps)
        if x.is_inference():  # made under torch.inference_mode(): autograd cannot save it, a copy it can
            x = x.clone()
        ctx.save_for_backward(x, weight, rstd)
        ctx.eps = eps
        CALLS["forward"] += 1
        return y

    @staticmethod
    @once_differentiable
    def backward(ctx, dy: torch.Tensor):
        x, weight, rstd = ctx.saved_tensors
        dx, partial = backward_rows(x, weight, dy.contiguous(), rstd, ctx.eps)
        dgamma = reduce_gamma_gradient(partial, weight.dtype)
        CALLS["backward"] += 1
        return dx, dgamma, None


def rmsnorm(x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """RMSNorm over the last dimension with the Triton kernels, differentiable.

    Args:
        x: (..., N) float32/float16, contiguous; leading dimensions are
            flattened into M rows (a view, never a copy) and restored.
        weight: (N,) γ, same dtype and device.
        eps: finite real number > 0.

    Returns:
        y: the shape and dtype of ``x``.

    Raises:
        ContractError: (a ValueError) for any contract violation, including a
            0-D or non-contiguous ``x``, before anything is written; under a
            ``torch.func`` transform (``vmap``, ``grad``, ``jacrev``), which this
            classic ``autograd.Function`` (``forward(ctx, ...)``, as lesson 06
            writes it) does not support: ``rmsnorm.rmsnorm`` does.

    Source: notebooks/06_autograd_and_training.ipynb.
    """
    _require_tensor("x", x)
    # Dynamo cannot trace functorch's C check (a graph break); a transform it traces meets torch's own error
    if not torch.compiler.is_compiling() and _functorch_wrapped(x, weight):
        raise ContractError(
            "rmsnorm.article.rmsnorm under a torch.func transform (vmap, grad, jacrev): the article's "
            "autograd.Function is written as lesson 06 writes it (forward(ctx, ...)), which torch.func cannot "
            "transform. Use the fast path, rmsnorm.rmsnorm (or rmsnorm.RMSNorm), which supports torch.func"
        )
    if x.dim() == 0:
        raise ContractError("x must have at least 1 dimension (..., N); got a 0-D tensor")
    if x.shape[-1] == 0:
        raise ContractError(f"x must have 1 <= N columns; got shape {tuple(x.shape)}")
    _require_contiguous("x", x)  # before view(): a reshape would copy silently
    rows = x.view(-1, x.shape[-1])  # (M, N)
    return RMSNormFunction.apply(rows, weight, eps).view(x.shape)

"""The fast path as a PyTorch custom op: autograd, torch.compile without a graph break, a module.

Two operators are registered with ``torch.library.custom_op``:

- ``rmsnorm_fast::forward(x, gamma, eps) -> (y, rstd)``
- ``rmsnorm_fast::backward(x, gamma, rstd, dy) -> (dx, dgamma)`` (dgamma empty when gamma is None)

each with a fake (meta) implementation, so ``torch.compile(model,
fullgraph=True)`` traces through them as opaque nodes (no graph break, the
same kernels as in eager mode), and ``torch.library.opcheck`` passes. The
forward's autograd formula calls the backward op; the backward op itself is
not differentiable, and a double backward raises a clear RuntimeError.

File order as in Liger and quack: kernels and launchers (forward.py,
backward.py) → operators and autograd → functional → module.

Source: notebooks/11_extending_the_contract.ipynb; PyTorch "Python Custom
Operators" (torch.library.custom_op, register_fake, register_autograd).
"""

from __future__ import annotations

from typing import Optional

import torch

from ..contract import ContractError, _require_tensor, check_epsilon
from .backward import rmsnorm_fast_backward
from .forward import rmsnorm_fast_forward


@torch.library.custom_op("rmsnorm_fast::forward", mutates_args=())
def _forward_op(x: torch.Tensor, gamma: Optional[torch.Tensor], eps: float) -> tuple[torch.Tensor, torch.Tensor]:
    return rmsnorm_fast_forward(x, gamma, eps)


@_forward_op.register_fake
def _(x, gamma, eps):
    return x.new_empty(x.shape), x.new_empty(x.shape[:1], dtype=torch.float32)


@torch.library.custom_op("rmsnorm_fast::backward", mutates_args=())
def _backward_op(
    x: torch.Tensor, gamma: Optional[torch.Tensor], rstd: torch.Tensor, dy: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    dx, dgamma = rmsnorm_fast_backward(x, gamma, rstd, dy)
    return dx, (x.new_empty(0) if dgamma is None else dgamma)  # an op returns tensors: empty = no weight


@_backward_op.register_fake
def _(x, gamma, rstd, dy):
    return x.new_empty(x.shape), (x.new_empty(0) if gamma is None else gamma.new_empty(gamma.shape))


def _setup_context(ctx, inputs, output):
    x, gamma, _eps = inputs
    _y, rstd = output
    ctx.save_for_backward(x, gamma, rstd)
    ctx.mark_non_differentiable(rstd)


def _backward(ctx, dy, _drstd):
    x, gamma, rstd = ctx.saved_tensors
    dy = dy if dy.stride(-1) == 1 or dy.shape[-1] == 1 else dy.contiguous()  # unit column stride
    dx, dgamma = _backward_op(x, gamma, rstd, dy)
    return dx, (None if gamma is None else dgamma), None


_forward_op.register_autograd(_backward, setup_context=_setup_context)


def _no_double_backward(ctx, *grads):
    raise RuntimeError(
        "rmsnorm_fast: double backward (a gradient of the gradient) is not supported; "
        "the fused backward kernel is not itself differentiable. Use torch.nn.functional.rms_norm "
        "for higher-order gradients"
    )


def _setup_nothing(ctx, inputs, output):
    pass


_backward_op.register_autograd(_no_double_backward, setup_context=_setup_nothing)


def _as_rows(t: torch.Tensor) -> torch.Tensor:
    """(…, N) → (M, N) with unit column stride: a view when possible, else one copy.

    ``reshape`` is a view when the leading dimensions collapse to one row
    stride (``buf[:, :N]``, ``buf[..., :N]``) and one contiguous copy when
    they do not (a head view ``qkv[:, :H * D].view(T, H, D)``, transposed
    leading dimensions). It decides from sizes and strides, so torch.compile
    traces it; a ``view`` tried inside ``try``/``except`` cannot be traced.
    """
    if t.shape[-1] > 1 and t.stride(-1) != 1:
        t = t.contiguous()
    return t.reshape(-1, t.shape[-1])


def rmsnorm_fast(x: torch.Tensor, gamma: torch.Tensor | None, eps: float = 1e-6) -> torch.Tensor:
    """RMSNorm over the last dimension with the fast kernels; differentiable, compilable.

    Args:
        x: (..., N) float32/float16/bfloat16, 1 ≤ N ≤ 65536, on CUDA (or the
            CPU under the interpreter, bf16 excepted). Leading dimensions are
            flattened into M rows. Layout: when the last dimension has unit
            stride and the leading ones collapse to one row stride (e.g.
            ``buf[:, :N]``, a slice of a fused QKV buffer), rows are read in
            place; any other layout is copied once with ``.contiguous()``.
        gamma: (N,) weight, float32/float16/bfloat16 (may differ from x's
            dtype), or None for no weight.
        eps: finite real number > 0.

    Returns:
        y: shape of ``x``, dtype of ``x`` (also with a weight of another
        dtype: activations stay in their dtype, as in Liger and quack),
        contiguous. Gradients: dx
        in x's dtype, dgamma in gamma's dtype (the upstream dy may have any
        layout).

    Raises:
        ContractError: (a ValueError) for anything outside the fast contract,
            before anything is written.
        RuntimeError: on a double backward.

    Source: notebooks/09_the_long_row.ipynb … 12_tuning_and_side_by_side.ipynb.
    """
    _require_tensor("x", x)
    if x.dim() == 0:
        raise ContractError("x must have at least 1 dimension (..., N); got a 0-D tensor")
    if x.shape[-1] == 0:
        raise ContractError(f"x must have 1 <= N columns; got shape {tuple(x.shape)}")
    check_epsilon(eps, "eps")  # before the op: its schema would refuse a non-float less clearly
    y, _rstd = _forward_op(_as_rows(x), gamma, float(eps))
    return y.view(x.shape)


class FastRMSNorm(torch.nn.RMSNorm):
    """``torch.nn.RMSNorm`` whose forward runs the fast kernels.

    Same constructor (``normalized_shape`` must be (N,) with N ≤ 65536),
    ``reset_parameters`` and state_dict as ``torch.nn.RMSNorm``;
    ``eps=None`` means, as there, the machine epsilon of the dtype the norm is
    computed in, not of x's dtype: ``torch.finfo(torch.float32).eps`` ≈ 1.19e-7
    for float32, float16 and bfloat16 x alike (``torch.finfo(torch.float16).eps``,
    9.8e-4, would swamp mean(x²) for small activations);
    ``elementwise_affine=False`` runs without a weight. y has x's dtype, as
    ``torch.nn.RMSNorm`` gives for every (x, weight) dtype pair.

    Raises:
        ContractError: for a normalized_shape of more than one dimension or
            wider than 65536, or an eps that is not None and not a finite
            real number > 0 (at construction); for inputs or an eps outside
            the fast contract (at call time).

    Source: notebooks/11_extending_the_contract.ipynb; quack ``QuackRMSNorm``.
    """

    def __init__(self, normalized_shape, eps: float | None = None, elementwise_affine: bool = True,
                 device=None, dtype=None) -> None:
        super().__init__(normalized_shape, eps=eps, elementwise_affine=elementwise_affine, device=device, dtype=dtype)
        from .contract import FAST_MAX_N

        if len(self.normalized_shape) != 1 or not 1 <= self.normalized_shape[0] <= FAST_MAX_N:
            raise ContractError(
                f"FastRMSNorm normalises the last dimension only: normalized_shape must be (N,) "
                f"with 1 <= N <= {FAST_MAX_N}; got {tuple(self.normalized_shape)}"
            )
        if eps is not None:
            check_epsilon(eps, "eps")  # as the article's RMSNorm does: the mistake shows where it is made

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """y = rmsnorm_fast(x, weight, eps) for x of shape (..., N)."""
        # eps=None: torch takes the epsilon of its computation dtype (torch._decomp's _fused_rms_norm),
        # float32 for every dtype the fast path accepts, and the kernels compute in float32 too
        eps = self.eps if self.eps is not None else torch.finfo(torch.float32).eps
        return rmsnorm_fast(x, self.weight, eps)

"""The modules: ``FastRMSNorm``, a ``torch.nn.RMSNorm`` whose forward is :func:`~rmsnorm.autograd.rmsnorm_fast`,
and ``FastLayerNorm``, a ``torch.nn.LayerNorm`` whose forward is :func:`~rmsnorm.layernorm.layernorm_fast`.

Source: notebooks/11_extending_the_contract.ipynb; quack ``QuackRMSNorm``.
"""

from __future__ import annotations

import math

import torch

from .autograd import _rmsnorm
from .contract import FAST_MAX_N, ContractError, check_eps, check_offset
from .layernorm import layernorm_fast


class FastRMSNorm(torch.nn.RMSNorm):
    """``torch.nn.RMSNorm`` whose forward runs the fast kernels.

    Same constructor, ``reset_parameters`` and state_dict as ``torch.nn.RMSNorm``; a ``normalized_shape``
    of several dimensions is normalised over all of them, as torch does: the last ``len(normalized_shape)``
    dimensions of x are read as one row of their product (at most 262144 elements), and the weight as a view
    of that length;
    ``eps=None`` means, as there, the machine epsilon of the dtype the norm is
    computed in, not of x's dtype: ``torch.finfo(torch.float32).eps`` ≈ 1.19e-7
    for float32, float16 and bfloat16 x alike (``torch.finfo(torch.float16).eps``,
    9.8e-4, would swamp mean(x²) for small activations);
    ``elementwise_affine=False`` runs without a weight. y has x's dtype, as
    ``torch.nn.RMSNorm`` gives for every (x, weight) dtype pair; under CUDA's ``torch.autocast``, float32,
    as ``torch.nn.RMSNorm`` returns there (autocast casts rms_norm's inputs to float32).

    ``autocast_to_float32`` (keyword, default True, torch's) False keeps y in x's dtype under autocast too,
    as Hugging Face's norms give (they cast to float32 and back themselves, in ops autocast leaves alone):
    :func:`~rmsnorm.swap_rmsnorm` sets it for every norm it replaces other than a ``torch.nn.RMSNorm``.

    ``offset`` (keyword, default 0.0) makes y = x̂ · (weight + offset), one rounding at the end:
    ``offset=1.0`` is Gemma's and Qwen3.5's ``1 + weight`` (QuACK's ``weight_offset``, Liger's
    ``offset``). It is an attribute, not state: the state_dict holds the weight only, as
    Gemma's. ``reset_parameters`` then sets the weight to 1 − offset (zeros for 1.0, as Gemma).

    Under DDP and FSDP2 (``fully_shard``, which unshards the weight before the
    forward) it trains as on one device; a DTensor input (tensor or sequence
    parallelism) or a weight still sharded is refused, as in :func:`rmsnorm_fast`.

    Raises:
        ContractError: for a normalized_shape of more than 262144 elements,
            or an eps that is not None and not a finite
            real number >= 0, or an offset that is not a finite real number, or not 0.0
            with ``elementwise_affine=False`` (at construction); for inputs or an eps outside
            the fast contract, a DTensor x or weight included (at call time).

    Source: notebooks/11_extending_the_contract.ipynb; quack ``QuackRMSNorm``.
    """

    #: The default, as a class attribute too: a FastRMSNorm pickled before the attribute existed unpickles with it.
    autocast_to_float32 = True

    def __init__(self, normalized_shape, eps: float | None = None, elementwise_affine: bool = True,
                 device=None, dtype=None, *, offset: float = 0.0, autocast_to_float32: bool = True) -> None:
        check_offset(offset, True if elementwise_affine else None)  # before the weight is allocated
        if not isinstance(autocast_to_float32, bool):
            raise ContractError(f"autocast_to_float32 must be True or False; got {autocast_to_float32!r}")
        self.autocast_to_float32 = autocast_to_float32
        self.offset = float(offset) + 0.0  # -0.0 → 0.0: one kernel for "no offset"
        super().__init__(normalized_shape, eps=eps, elementwise_affine=elementwise_affine, device=device, dtype=dtype)

        self._N = _row_length(self.normalized_shape, "FastRMSNorm")
        if not 1 <= self._N <= FAST_MAX_N:
            raise ContractError(f"FastRMSNorm normalises rows of 1 to {FAST_MAX_N} elements; normalized_shape "
                                f"{tuple(self.normalized_shape)} has {self._N}")
        if eps is not None:
            check_eps(eps)  # as the article's RMSNorm does: the mistake shows where it is made

    def reset_parameters(self) -> None:
        """weight = 1 − offset: the module starts at scale 1 (ones, as torch's; zeros for Gemma's offset 1.0)."""
        super().reset_parameters()
        if self.weight is not None and self.offset != 0.0:
            with torch.no_grad():
                self.weight.fill_(1.0 - self.offset)

    def extra_repr(self) -> str:
        """torch.nn.RMSNorm's, and the offset and autocast_to_float32 where they are not the defaults."""
        return (super().extra_repr() + (f", offset={self.offset}" if self.offset != 0.0 else "")
                + ("" if self.autocast_to_float32 else ", autocast_to_float32=False"))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """y = rmsnorm_fast(x, weight, eps, offset) over the last len(normalized_shape) dims (eps=None as there);
        with autocast_to_float32 False, in x's dtype under autocast too."""
        k = len(self.normalized_shape)
        if k == 1:
            if isinstance(x, torch.Tensor) and (x.dim() == 0 or x.shape[-1] != self.normalized_shape[0]):
                raise ContractError(
                    f"x's last dimension must be N = {self.normalized_shape[0]} (this module's normalized_shape); "
                    f"got x of shape {tuple(x.shape)}"
                )
            return _rmsnorm(x, self.weight, self.eps, self.offset, self.autocast_to_float32)
        weight = None if self.weight is None else self.weight.reshape(self._N)
        rows = _one_row(x, self.normalized_shape)
        return _rmsnorm(rows, weight, self.eps, self.offset, self.autocast_to_float32).view_as(x)


class FastLayerNorm(torch.nn.LayerNorm):
    """``torch.nn.LayerNorm`` whose forward runs the fast kernels (:func:`~rmsnorm.layernorm.layernorm_fast`).

    Same constructor (``eps`` 1e-5, ``elementwise_affine``, ``bias``), ``reset_parameters`` and state_dict
    as ``torch.nn.LayerNorm``. A ``normalized_shape`` of several dimensions is normalised over all of them,
    as torch does: the last ``len(normalized_shape)`` dimensions of x are read as one row of their product
    (at most 262144 elements), and the weight and bias as views of that length. y has x's dtype, except
    under CUDA's ``torch.autocast``, where it is float32 as ``torch.nn.LayerNorm``'s is.

    Raises:
        ContractError: for a normalized_shape of more than 262144 elements or an eps that is not a finite
            real number >= 0 (at construction); for x whose trailing dimensions are not normalized_shape, or
            inputs outside the fast contract (at call time).

    Source: quack ``QuackRMSNorm`` (a torch module subclassed, its state kept); Liger ``LigerLayerNorm``.
    """

    def __init__(self, normalized_shape, eps: float = 1e-5, elementwise_affine: bool = True, bias: bool = True,
                 device=None, dtype=None) -> None:
        check_eps(eps)  # before the parameters are allocated, as the article's RMSNorm does
        super().__init__(normalized_shape, eps=eps, elementwise_affine=elementwise_affine, bias=bias, device=device,
                         dtype=dtype)
        self._N = _row_length(self.normalized_shape, "FastLayerNorm")
        if not 1 <= self._N <= FAST_MAX_N:
            raise ContractError(f"FastLayerNorm normalises rows of 1 to {FAST_MAX_N} elements; normalized_shape "
                                f"{tuple(self.normalized_shape)} has {self._N}")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """y = layernorm_fast over the last len(normalized_shape) dimensions of x."""
        rows = _one_row(x, self.normalized_shape)
        if rows is x:
            return layernorm_fast(x, self.weight, self.bias, self.eps)
        weight, bias = (None if p is None else p.reshape(self._N) for p in (self.weight, self.bias))
        return layernorm_fast(rows, weight, bias, self.eps).view_as(x)


def _row_length(normalized_shape: tuple[int, ...], module: str) -> int:
    """The number of elements one row of ``normalized_shape`` holds.

    Raises:
        ContractError: an empty ``normalized_shape``, which torch's norms refuse at the call ("Expected
            normalized_shape to be at least 1-dimensional"): it would normalise each element by itself.
    """
    if not normalized_shape:
        raise ContractError(f"{module}: normalized_shape must have at least one dimension, as torch's norms ask; "
                            "got ()")
    return math.prod(normalized_shape)


def _one_row(x: torch.Tensor, normalized_shape: tuple[int, ...]) -> torch.Tensor:
    """x with its last ``len(normalized_shape)`` dimensions read as one row of their product N (a view where it can;
    x itself for one dimension).

    Raises:
        ContractError: x's trailing dimensions are not ``normalized_shape`` (a tensor of another type goes on to
            the functional, which names it).
    """
    k = len(normalized_shape)
    if not isinstance(x, torch.Tensor):
        return x
    if tuple(x.shape[max(x.dim() - k, 0):]) != tuple(normalized_shape):
        raise ContractError(f"x's last dimensions must be normalized_shape {tuple(normalized_shape)}; "
                            f"got x of shape {tuple(x.shape)}")
    return x if k == 1 else x.flatten(-k)  # flatten, not a reshape to sizes read here: a trace replays it at any rank

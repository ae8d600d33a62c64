"""Swap a model's LayerNorms for :class:`~rmsnorm.FastLayerNorm`, keeping their Parameters.

A module is a LayerNorm to swap when it claims to be one (``torch.nn.LayerNorm``, or "LayerNorm" in its class
name: GPT-2's, ViT's and Phi's ``ln_*``/``layernorm*`` are ``torch.nn.LayerNorm`` itself) and its parameters
have a shape FastLayerNorm holds. A class that is not ``torch.nn.LayerNorm``'s forward is run once on a probe
(random parameters, rows of different scales with a non-zero mean) and held to ``F.layer_norm`` in float64
within the declared float32 tolerance. What cannot be reproduced is **refused** by name with the reason, and
nothing is replaced: a bias without a weight (FastLayerNorm, as torch.nn.LayerNorm, has a bias only beside a
weight), ``elementwise_affine=False`` on a module that still holds a weight or a bias (its forward uses them;
FastLayerNorm without one would drop them), other state (a buffer), hooks, a dtype or a width outside the fast
contract, a forward that computes something else. A ``normalized_shape`` of several dimensions is swapped:
FastLayerNorm normalises over all of them, as torch does.

Source: rmsnorm/swap.py (swap_rmsnorm, the same rules for the RMSNorm); Liger-Kernel's ``LigerLayerNorm``.
"""

from __future__ import annotations

import copy
import math
import numbers

import torch
import torch.nn.functional as F

from .contract import FAST_DTYPES, FAST_MAX_N, ContractError
from .module import FastLayerNorm
from .probe import PROBE_SEED, probe_input
from .swap import Swapped, _eps_refusal, _hooks_refusal, _norm_places, _other_state
from .testing import TOLERANCES

__all__ = ["swap_layernorm"]


def _claims_layernorm(module) -> bool:
    return isinstance(module, torch.nn.LayerNorm) or "layernorm" in type(module).__name__.lower()


def _shape_of(module) -> tuple[int, ...] | None:
    shape = getattr(module, "normalized_shape", None)
    if shape is None and isinstance(getattr(module, "weight", None), torch.Tensor):
        shape = module.weight.shape
    if isinstance(shape, numbers.Integral):
        shape = (shape,)
    return None if shape is None else tuple(int(n) for n in shape)


def _structure(module) -> str | None:
    """Why the module cannot become a FastLayerNorm holding its Parameters, or None."""
    weight, bias = getattr(module, "weight", None), getattr(module, "bias", None)
    shape, eps = _shape_of(module), getattr(module, "eps", None)
    if shape is None:
        return "it has neither a normalized_shape nor a weight: its row length is unknown"
    if weight is None and bias is not None:
        return ("it has a bias without a weight; FastLayerNorm, as torch.nn.LayerNorm, holds a bias only beside a "
                "weight")
    if getattr(module, "elementwise_affine", True) is False and (weight is not None or bias is not None):
        return ("elementwise_affine is False, yet it holds a weight or a bias, which its forward uses; "
                "FastLayerNorm(elementwise_affine=False) would drop them")
    for name, p in (("weight", weight), ("bias", bias)):
        if p is not None and (not isinstance(p, torch.Tensor) or tuple(p.shape) != shape):
            return f"its {name} is not a tensor of its normalized_shape {shape}"
        if p is not None and p.dtype not in FAST_DTYPES:
            return f"its {name} is {p.dtype}; the fast path takes float32, float16 or bfloat16"
    if not 1 <= math.prod(shape) <= FAST_MAX_N:
        return f"its rows have {math.prod(shape)} elements; the fast path takes 1 to {FAST_MAX_N}"
    if refusal := _eps_refusal(eps):
        return refusal
    others = _other_state(module, {"weight", "bias"})
    if others:
        return f"it has state other than a weight and a bias ({', '.join(others)}), which the swap would drop"
    return _hooks_refusal(module)


def _probe(module) -> str | None:
    """None when the module computes F.layer_norm(x, normalized_shape, weight, bias, eps) on the probe, else why not."""
    if type(module).forward is torch.nn.LayerNorm.forward:
        return None
    shape = _shape_of(module)
    twin = copy.deepcopy(module).float()
    g = torch.Generator().manual_seed(PROBE_SEED)
    with torch.no_grad():
        for p in twin.parameters():
            p.copy_(torch.randn(p.shape, generator=g) * 0.5 + 1.0)
    x = probe_input(math.prod(shape), torch.float32, float(module.eps)).reshape(-1, *shape) + 2.0
    try:
        with torch.no_grad():
            got = twin.to("cpu")(x)
    except Exception as error:  # noqa: BLE001  a forward that cannot run on the probe is refused, with its error
        return f"its forward failed on the probe: {type(error).__name__}: {error}"
    params = [None if p is None else p.detach().double() for p in (getattr(twin, "weight", None),
                                                                    getattr(twin, "bias", None))]
    want = F.layer_norm(x.double(), shape, *params, float(module.eps))
    if not isinstance(got, torch.Tensor) or got.shape != want.shape or not torch.allclose(
            got.double(), want, **TOLERANCES[torch.float32]):
        return f"it computes something other than F.layer_norm(x, {shape}, weight, bias, eps) on the probe"
    return None


def swap_layernorm(model: torch.nn.Module) -> Swapped:
    """Replace every LayerNorm below ``model`` with FastLayerNorm, keeping eps and the very weight and bias Parameters.

    The new module's ``weight`` and ``bias`` *are* the old Parameter objects (an optimizer built before the swap
    still trains them; state_dict keys and values are unchanged), its training flag is the old one's, and a
    module shared by several parents is replaced by one new module.

    Args:
        model: any module tree; its own root is not replaced.

    Returns:
        :class:`~rmsnorm.swap.Swapped`: an ``int``, the number of modules replaced, with ``names`` (their dotted
        names), ``left`` (empty: a LayerNorm is swapped or refused) and ``already`` (FastLayerNorms held before).

    Raises:
        ContractError: before anything is replaced, naming every LayerNorm that cannot become a FastLayerNorm
            and why (module docstring), or when ``model`` itself is one.

    Source: the module docstring; tests/library/test_swap_layernorm.py.
    """
    verdicts: dict[int, str | None] = {}
    places, names, refused = [], [], {}
    already = sum(isinstance(m, FastLayerNorm) for m in model.modules())
    for parent, name, child, full in _norm_places(model, FastLayerNorm, _claims_layernorm):
        if id(child) not in verdicts:
            verdicts[id(child)] = _structure(child) or _probe(child)
            if verdicts[id(child)] is not None:
                refused.setdefault(verdicts[id(child)], []).append(f"{full!r} ({type(child).__name__})")
        if verdicts[id(child)] is None:
            places.append((parent, name, child))
            names.append(full)
    refusals = [f"{', '.join(where)}: {reason}" for reason, where in refused.items()]
    if _claims_layernorm(model) and not isinstance(model, FastLayerNorm):
        refusals.append(f"the model itself ({type(model).__name__}) is a LayerNorm: swap it in its parent, or build "
                        "a FastLayerNorm")
    if refusals:
        raise ContractError("swap_layernorm replaced nothing: " + "; ".join(refusals))
    new: dict[int, FastLayerNorm] = {}
    for parent, name, child in places:
        if id(child) not in new:
            weight, bias = getattr(child, "weight", None), getattr(child, "bias", None)
            module = FastLayerNorm(_shape_of(child), eps=float(child.eps), elementwise_affine=weight is not None,
                                   bias=bias is not None, device="meta")
            if weight is not None:
                module.weight = weight  # the very Parameter objects
            if bias is not None:
                module.bias = bias
            new[id(child)] = module.train(child.training)
        setattr(parent, name, new[id(child)])
    return Swapped(len(new), {}, names, already)

"""Put the fast path into a model: find its RMSNorm modules by behaviour and swap them for ``FastRMSNorm``.

:func:`swap_rmsnorm` walks a ``torch.nn.Module`` tree. A module is a **candidate** when it has a
``weight`` and an epsilon (``eps`` as in ``torch.nn.RMSNorm`` and Gemma, ``variance_epsilon`` as
in Llama, Qwen2, Qwen3 and Mistral). Each candidate is then judged by what it computes, once, on
a probe: a deep copy of it, its parameters set to random values first (at init Llama's weights
are ones and Gemma's zeros, so an unrandomised probe could not tell ``w`` from ``1 + w``), is run
on six rows of different scales (one with mean(x²) ≈ eps, so that where eps is added shows), and
its output is held to the float64 oracle ``x · rstd · (weight + offset)`` within the declared
tolerance of the probe's dtype (:data:`rmsnorm.testing.TOLERANCES`), with the probe's dtype as
output dtype, for each offset of :data:`OFFSETS`: 0.0 (Llama, Qwen3, OLMo2, ``torch.nn.RMSNorm``)
and 1.0 (the zero-centred weight of Gemma 3 and Qwen3.5, ``1 + weight``).

A candidate that passes is replaced by a ``FastRMSNorm`` with that offset. A norm whose forward
takes more than x (Qwen3.5's ``Qwen3_5RMSNormGated(x, gate)``) is **left** in place, as is one
that fails the probe without claiming to be an RMSNorm (a LayerNorm, a BatchNorm); the result
names each left module and why. One that fails and claims to be an RMSNorm (``torch.nn.RMSNorm``,
or "RMSNorm" in its class name) is **refused**: then nothing is replaced at all, and the
:class:`ContractError` names every refused module and why.

Source: notebooks/13_into_a_model.ipynb; Liger-Kernel's ``apply_liger_kernel_to_llama`` and
``LigerRMSNormForGemma`` (one module per formula; a formula you do not reproduce is refused).
"""

from __future__ import annotations

import inspect
from typing import Callable

import torch

from .contract import FAST_DTYPES, FAST_MAX_N, ContractError, check_eps
from .fused_layers import fuse_decoder_layers
from .module import FastRMSNorm
from .probe import OFFSETS, _candidate, _eps_of, _probe, probe_input, randomise_norm_weights

__all__ = ["OFFSETS", "Swapped", "probe_input", "randomise_norm_weights", "swap_rmsnorm"]

Build = Callable[..., torch.nn.Module]  # build(N, eps, weight) or build(N, eps, weight, offset=1.0)


class Swapped(int):
    """What :func:`swap_rmsnorm` returns: the number of modules replaced (an ``int``, as it always was).

    Attributes:
        names: the dotted names of the modules replaced (a module shared by several parents: each name).
        left: {module name: why it was left in place}, for each norm-like module (a weight and an
            eps) that was not replaced: a gated norm (Qwen3.5's ``linear_attn.norm``), a LayerNorm.
        already: how many FastRMSNorm modules the model held before the call (a second swap: all of them).
        fused: with ``fuse_residual=True``, the dotted names of the decoder layers this call patched
            (:mod:`rmsnorm.fused_layers`); ``left`` then also names each decoder layer not patched, and why.
        already_fused: the decoder layers patched before the call (a second call: all of them, ``fused`` empty).
    """

    names: tuple[str, ...]
    left: dict[str, str]
    already: int
    fused: tuple[str, ...]
    already_fused: tuple[str, ...]

    def __new__(cls, count: int, left: dict[str, str], names: tuple[str, ...] = (), already: int = 0, *,
                fused: tuple[str, ...] = (), already_fused: tuple[str, ...] = ()):
        swapped = super().__new__(cls, count)
        swapped.left, swapped.names, swapped.already = left, tuple(names), already
        swapped.fused, swapped.already_fused = tuple(fused), tuple(already_fused)
        return swapped

    def __repr__(self) -> str:
        extra = "".join(f", {k}={v!r}" for k, v in (("already", self.already), ("fused", self.fused),
                                                     ("already_fused", self.already_fused)) if v)
        return f"Swapped({int(self)}, left={self.left!r}{extra})"


def _fast(n: int, eps, weight, offset: float = 0.0, autocast_to_float32: bool = True) -> torch.nn.Module:
    norm = FastRMSNorm(n, eps=eps, elementwise_affine=weight is not None, device="meta", offset=offset,
                       autocast_to_float32=autocast_to_float32)
    if weight is not None:
        norm.weight = weight  # the very Parameter object: an optimizer built before the swap still trains it
    return norm


def _follows_torch_autocast(module) -> bool:
    """Whether ``module`` computes through ``torch.nn.RMSNorm``'s forward, which CUDA autocast casts to float32."""
    return isinstance(module, torch.nn.RMSNorm) and type(module).forward is torch.nn.RMSNorm.forward


def _claims_rmsnorm(module) -> bool:
    return isinstance(module, torch.nn.RMSNorm) or "rmsnorm" in type(module).__name__.lower()


def _structure(module) -> str | None:
    """Why the module's shape of parameters cannot become a FastRMSNorm, or None."""
    weight, (_, eps) = module.weight, _eps_of(module)
    if isinstance(module, torch.nn.RMSNorm) and len(module.normalized_shape) != 1:
        return (f"it normalises over more than the last dimension (normalized_shape {tuple(module.normalized_shape)}); "
                "the swap checks and reproduces norms of the last one (FastRMSNorm(normalized_shape) built by hand "
                "normalises over several, as torch.nn.RMSNorm does)")
    if weight is not None and weight.dim() != 1:
        return f"its weight has shape {tuple(weight.shape)}: a norm over more than the last dimension"
    if weight is not None and not 1 <= weight.shape[0] <= FAST_MAX_N:
        return f"its weight has {weight.shape[0]} elements; the fast path takes 1 <= N <= {FAST_MAX_N}"
    if weight is not None and weight.dtype not in FAST_DTYPES:
        return f"its weight is {weight.dtype}; the fast path takes float32, float16 or bfloat16"
    others = _other_state(module, {"weight"})
    if others:
        return (f"it has state other than its weight ({', '.join(others)}): FastRMSNorm holds a weight only, "
                "so the swap would drop them (a bias, a buffer)")
    if not (eps is None and isinstance(module, torch.nn.RMSNorm)) and (refusal := _eps_refusal(eps)):
        return refusal
    return _hooks_refusal(module)


def _norm_places(model: torch.nn.Module, fast: type, candidate: Callable[[torch.nn.Module], bool]):
    """(parent, name, child, dotted name) for every child below ``model`` that ``candidate`` accepts and that is
    not already a ``fast`` module; a module held by several parents, or in several slots of one parent
    (``Sequential(norm, norm)``, ``self.a = self.b = norm``), comes once for each."""
    for parent_name, parent in model.named_modules(remove_duplicate=False):
        for name, child in parent._modules.items():  # named_children() would give a child in two slots once
            if child is not None and not isinstance(child, fast) and candidate(child):
                yield parent, name, child, f"{parent_name}.{name}" if parent_name else name


def _other_state(module, kept: set[str]) -> list[str]:
    """The names in the module's state_dict beyond ``kept``, sorted: what a swap would drop."""
    return sorted(set(module.state_dict()) - kept)


def _eps_refusal(eps) -> str | None:
    """Why the fast contract refuses a module's eps (:func:`rmsnorm.contract.check_eps`'s message), or None."""
    try:
        check_eps(eps)
    except ContractError as refused:
        return f"its eps is refused by the fast path: {refused}"
    return None


def _hooks_refusal(module) -> str | None:
    """Why the module's hooks stop a swap (the new module would not have them), or None without hooks."""
    if module._forward_hooks or module._forward_pre_hooks or module._backward_hooks:
        return ("it has hooks registered, which the new module would not have: remove them (handle.remove()), "
                "swap, then register them on the new module")
    return None


def _takes_more_than_x(module) -> str | None:
    """Why the module's forward cannot be called as forward(x) (a gate, a residual), or None."""
    try:
        params = list(inspect.signature(module.forward).parameters.values())
    except (TypeError, ValueError):  # a builtin without a signature: the probe will tell
        return None
    required = [p.name for p in params[1:] if p.default is inspect.Parameter.empty
                and p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]
    if not required:
        return None
    return (f"its forward takes {', '.join(required)} besides x (a gated norm, y · silu(gate), such as "
            "Qwen3.5's Qwen3_5RMSNormGated); FastRMSNorm takes x only, so it stays as it is")


def swap_rmsnorm(model: torch.nn.Module, *, dtype: torch.dtype | None = None, build: Build | None = None,
                 fuse_residual: bool = False) -> Swapped:
    """Replace every RMSNorm below ``model`` with ``FastRMSNorm``, keeping eps and the same weight Parameter.

    Covers ``torch.nn.RMSNorm`` and Hugging Face's ``LlamaRMSNorm``, ``Qwen2RMSNorm``,
    ``Qwen3RMSNorm`` (also the per-head ``q_norm``/``k_norm``, N = head_dim), ``MistralRMSNorm``
    and ``Olmo2RMSNorm`` (offset 0.0), and the zero-centred ``Gemma3RMSNorm`` (q/k norms included),
    ``Qwen3_5RMSNorm`` and ``GemmaRMSNorm`` (``1 + weight``: offset 1.0), recognised by what they
    compute (module docstring), not by class name: any module with a weight and an eps that passes
    the probe is replaced. The new module's ``weight`` *is* the old Parameter object (an optimizer
    built before the swap still trains it; state_dict keys and values are unchanged), its training
    flag is the old one's, and a module shared by several parents is replaced by one new module.

    Qwen3.5's gated norm, ``Qwen3_5RMSNormGated`` (``linear_attn.norm``: weight · x̂ rounded to x's
    dtype, times silu(gate) in float32), is left in place and named in the result's ``left``, while
    the model's other norms are swapped. Supporting it is not a flag: the kernels would take a second
    input (gate), compute silu and return dgate, and reproduce its two roundings.

    Order of operations and roundings:

    - Gemma 3 and Qwen3.5 compute x.float() → x̂ = x · rstd → x̂ · (1 + weight.float()) → cast to x's
      dtype: one rounding, at the end, as ``FastRMSNorm(offset=1.0)`` does (float32 arithmetic).
      The two differ only in the order of the float32 sum of x² (at most an ulp of the output; most
      elements are bitwise equal, tests/library/test_swap.py counts them).
    - ``LlamaRMSNorm`` (and Qwen2, Qwen3, Mistral) rounds twice: x̂ to x's dtype, then x̂ · weight;
      the swap keeps the fast path's single rounding. In float32 the two differ by float32 roundings
      (about 1e-7 relative); in bf16 or fp16 an element may differ by a rounding of the output
      (2⁻⁸ relative in bf16), FastRMSNorm's being the closer to the exact value. A swapped Llama is
      therefore equal to the original within the declared tolerance of its dtype, not bit for bit.

    Args:
        model: any module tree; its own root is not replaced. Norms' x: (..., N), N their weight's size.
        dtype: the dtype of the activations the norms will see: float32, float16 or bfloat16
            (default: each norm's weight dtype, the case of a model cast with ``.to(dtype)``).
            With float32 weights and bf16 activations (``torch.autocast``), pass ``torch.bfloat16``:
            the probe runs each norm as autocast would feed it. Gemma 3 and Qwen3.5 then return bf16
            computed in float32, which FastRMSNorm reproduces (its weight stays float32), so they are
            swapped; a Llama norm returns float32, which FastRMSNorm does not, and it is refused.
        build: ``build(N, eps, weight) -> module`` makes the replacement (default: a FastRMSNorm
            holding ``weight``); it must keep that Parameter as its ``weight``. For norms with
            ``1 + weight`` it is called as ``build(N, eps, weight, offset=1.0)``, so it must take
            ``offset`` then. The benchmark swaps Liger's norm in the same way.
        fuse_residual: also patch each pre-norm decoder layer (this model's instances, not the classes)
            so that its ``h = residual + attn_out; x = post_attention_layernorm(h)`` is one
            :func:`rmsnorm.rmsnorm_add` call (:mod:`rmsnorm.fused_layers`: what is fused, what is not,
            which layers, the dtype rules). A layer whose post-attention norm is not a FastRMSNorm
            (``build`` made another module) is left.

    Returns:
        :class:`Swapped`: an ``int``, the number of modules replaced (0 when there is none), whose
        ``names`` are the replaced modules' dotted names, ``left`` maps each norm-like module left in
        place to why (a gated norm; a LayerNorm), and ``already`` counts the FastRMSNorm modules the
        model held before (a second swap returns 0 with ``already`` > 0); with ``fuse_residual``,
        ``fused`` names the layers patched, ``already_fused`` those patched before (a second call is
        harmless: it patches nothing and says so there), and ``left`` also maps each decoder layer not
        patched to why (Gemma 3's sandwich norms, a forward other than the pre-norm one).

    Raises:
        ContractError: (a ValueError) before anything is replaced, naming each module that
            claims to be an RMSNorm (``torch.nn.RMSNorm``, or "RMSNorm" in its class name)
            but cannot become a FastRMSNorm, and why: a bias, a norm over more than the last
            dimension, an output dtype other than x's (a Llama norm's float32 weight on bf16
            activations), N > 262144, hooks; also when ``model`` itself is one, when ``build``
            does not keep the weight, or needs to take ``offset`` and does not.

    Source: notebooks/13_into_a_model.ipynb; tests/library/test_swap.py.
    """
    if dtype is not None and dtype not in FAST_DTYPES:
        raise ContractError(f"dtype must be float32, float16 or bfloat16 for the fast path; got {dtype}")
    if not isinstance(fuse_residual, bool):
        raise ContractError(f"fuse_residual must be True or False; got {fuse_residual!r}")
    verdicts: dict[int, tuple[str | None, float]] = {}
    places, replaced, refused, left = [], [], {}, {}  # refused: reason -> the modules refused for it, named once each
    already = sum(isinstance(m, FastRMSNorm) for m in model.modules())
    for parent, name, child, full in _norm_places(model, FastRMSNorm, _candidate):
        if id(child) not in verdicts:
            verdicts[id(child)] = _verdict(child, dtype)
            reason = verdicts[id(child)][0]
            if reason is not None and _claims_rmsnorm(child) and not _takes_more_than_x(child):
                refused.setdefault(reason, []).append(f"{full!r} ({type(child).__name__})")
        reason, offset = verdicts[id(child)]
        if reason is None:
            places.append((parent, name, child, offset))
            replaced.append(full)
        else:
            left[full] = f"{type(child).__name__}: {reason}"
    refusals = [f"{', '.join(names)}: {reason}" for reason, names in refused.items()]
    if _candidate(model) and _claims_rmsnorm(model) and not isinstance(model, FastRMSNorm):
        refusals.append(f"the model itself ({type(model).__name__}) is a norm: swap it in its parent, "
                        "or build a FastRMSNorm")
    if build is not None and any(offset for *_, offset in places) and not _takes_offset(build):
        refusals.append(f"build {getattr(build, '__name__', build)!r} does not take offset=, which the norms "
                        f"that scale by (1 + weight) need: {', '.join(_names(model, places, nonzero=True))}")
    if refusals:
        raise ContractError("swap_rmsnorm replaced nothing: " + "; ".join(refusals))
    new: dict[int, torch.nn.Module] = {}
    for _, _, child, offset in places:
        if id(child) not in new:
            weight = child.weight
            n = weight.shape[0] if weight is not None else child.normalized_shape[0]
            eps = _eps_of(child)[1]
            if build is None:  # torch's norm is cast to float32 under CUDA autocast; Hugging Face's are not
                module = _fast(n, eps, weight, offset, autocast_to_float32=_follows_torch_autocast(child))
            else:
                module = build(n, eps, weight, offset=offset) if offset else build(n, eps, weight)
            if getattr(module, "weight", None) is not weight:
                raise ContractError(f"build must keep the weight Parameter it is given; "
                                    f"{type(module).__name__} did not")
            new[id(child)] = module.train(child.training)
    for parent, name, child, _ in places:
        setattr(parent, name, new[id(child)])
    if not fuse_residual:
        return Swapped(len(new), left, replaced, already)
    fused, already_fused, layers_left = fuse_decoder_layers(model)
    return Swapped(len(new), {**left, **layers_left}, replaced, already, fused=fused, already_fused=already_fused)


def _verdict(module, dtype) -> tuple[str | None, float]:
    """(None, offset) for a module to replace; (why not, 0.0) for one to leave or refuse."""
    structure = _structure(module)
    if structure is not None:
        return structure, 0.0
    return (_takes_more_than_x(module), 0.0) if _takes_more_than_x(module) else _probe(module, dtype)


def _takes_offset(build) -> bool:
    try:
        params = inspect.signature(build).parameters
    except (TypeError, ValueError):
        return True  # cannot tell: let the call say
    return "offset" in params or any(p.kind is p.VAR_KEYWORD for p in params.values())


def _names(model, places, nonzero: bool) -> list[str]:
    """The dotted names of the places (with a non-zero offset when ``nonzero``), each module once."""
    wanted = {id(child) for *_, child, offset in places if offset or not nonzero}
    return [n for n, m in model.named_modules() if id(m) in wanted]

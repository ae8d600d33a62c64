"""Put the fast path into a model: find its RMSNorm modules by behaviour and swap them for ``FastRMSNorm``.

:func:`swap_rmsnorm` walks a ``torch.nn.Module`` tree. A module is a **candidate** when it has a
``weight`` and an epsilon (``eps`` as in ``torch.nn.RMSNorm`` and Gemma, ``variance_epsilon`` as
in Llama, Qwen2, Qwen3 and Mistral). Each candidate is then judged by what it computes, once, on
a probe: a deep copy of it, its parameters set to random values first (at init Llama's weights
are ones and Gemma's zeros, so an unrandomised probe could not tell ``w`` from ``1 + w``), is run
on six rows of different scales (one with mean(x²) ≈ eps, so that where eps is added shows), and
its output is held to the float64 oracle ``x · rstd · weight`` within the declared tolerance of
the probe's dtype (:data:`rmsnorm.testing.TOLERANCES`), with the probe's dtype as output dtype.

A candidate that passes is replaced. One that fails is left alone when it does not claim to be
an RMSNorm (a LayerNorm, a BatchNorm) and **refused** when it does (``torch.nn.RMSNorm``, or
"RMSNorm" in its class name): then nothing is replaced at all, and the :class:`ContractError`
names every refused module and why.

Source: notebooks/13_into_a_model.ipynb; Liger-Kernel's ``apply_liger_kernel_to_llama`` and
``LigerRMSNormForGemma`` (one module per formula; a formula you do not reproduce is refused).
"""

from __future__ import annotations

import copy
import math
import numbers
from typing import Callable

import torch

from .contract import FAST_DTYPES, FAST_MAX_N, ContractError
from .module import FastRMSNorm
from .reference import rmsnorm_reference
from .testing import TOLERANCES

#: Seed of the probe's random weights and rows (fixed: a verdict does not change between runs).
PROBE_SEED = 1234
#: Scales of the probe's six rows; the first is replaced by sqrt(eps), where eps matters.
PROBE_SCALES = (0.0, 1.0, 4.0, 0.25, 30.0, 0.01)
EPS_NAMES = ("eps", "variance_epsilon")

Build = Callable[[int, "float | None", "torch.nn.Parameter | None"], torch.nn.Module]


def _fast(n: int, eps, weight) -> torch.nn.Module:
    norm = FastRMSNorm(n, eps=eps, elementwise_affine=weight is not None, device="meta")
    if weight is not None:
        norm.weight = weight  # the very Parameter object: an optimizer built before the swap still trains it
    return norm


def _eps_of(module):
    for name in EPS_NAMES:
        if hasattr(module, name):
            return True, getattr(module, name)
    return False, None


def _claims_rmsnorm(module) -> bool:
    return isinstance(module, torch.nn.RMSNorm) or "rmsnorm" in type(module).__name__.lower()


def _candidate(module) -> bool:
    has_eps, _ = _eps_of(module)
    weight = getattr(module, "weight", 0)
    return has_eps and (isinstance(weight, torch.Tensor) or (weight is None and isinstance(module, torch.nn.RMSNorm)))


def _structure(module) -> str | None:
    """Why the module's shape of parameters cannot become a FastRMSNorm, or None."""
    weight, (_, eps) = module.weight, _eps_of(module)
    if isinstance(module, torch.nn.RMSNorm) and len(module.normalized_shape) != 1:
        return (f"it normalises over more than the last dimension (normalized_shape {tuple(module.normalized_shape)}); "
                "FastRMSNorm normalises the last one only")
    if weight is not None and weight.dim() != 1:
        return f"its weight has shape {tuple(weight.shape)}: a norm over more than the last dimension"
    if weight is not None and not 1 <= weight.shape[0] <= FAST_MAX_N:
        return f"its weight has {weight.shape[0]} elements; the fast path takes 1 <= N <= {FAST_MAX_N}"
    if weight is not None and weight.dtype not in FAST_DTYPES:
        return f"its weight is {weight.dtype}; the fast path takes float32, float16 or bfloat16"
    others = sorted(set(module.state_dict()) - {"weight"})
    if others:
        return (f"it has state other than its weight ({', '.join(others)}): FastRMSNorm holds a weight only, "
                "so the swap would drop them (a bias, a buffer)")
    if not (eps is None and isinstance(module, torch.nn.RMSNorm)):
        if isinstance(eps, bool) or not isinstance(eps, numbers.Real) or not 0 < eps < math.inf:
            return f"its epsilon is {eps!r}; the fast path needs a finite real number > 0"
    if module._forward_hooks or module._forward_pre_hooks or module._backward_hooks:
        return "it has hooks registered, which the new module would not have"
    return None


def _effective_eps(module) -> float:
    eps = _eps_of(module)[1]
    return torch.finfo(torch.float32).eps if eps is None else float(eps)  # as FastRMSNorm and torch.nn.RMSNorm


def probe_input(n: int, dtype: torch.dtype, eps: float, device="cpu") -> torch.Tensor:
    """The probe: (2, 3, n) rows of different scales with a non-zero mean (LayerNorm differs), one at sqrt(eps).

    Returns:
        (2, 3, n) tensor of ``dtype`` on ``device``, the same values on every device (drawn on the CPU, seeded).
    """
    g = torch.Generator().manual_seed(PROBE_SEED)
    scales = torch.tensor((math.sqrt(eps),) + PROBE_SCALES[1:], dtype=torch.float64)
    x = (torch.randn(len(scales), n, generator=g, dtype=torch.float64) + 0.3) * scales[:, None]
    return x.reshape(2, 3, n).to(device=device, dtype=dtype)


def _randomise(module: torch.nn.Module, seed: int) -> None:
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in module.parameters(recurse=False):  # weight (and a bias, if any): 1 + 0.5·N(0, 1)
            p.copy_((1.0 + 0.5 * torch.randn(p.shape, generator=g)).to(p.dtype))


def randomise_norm_weights(model: torch.nn.Module, seed: int = 0) -> int:
    """Set the parameters of every norm candidate (a module with a weight and an eps) to 1 + 0.5·N(0, 1).

    What a test or a benchmark does before comparing norms: with ones (Llama's init) or zeros
    (Gemma's), ``w`` and ``1 + w`` cannot be told apart. Seeded per module, in tree order.

    Returns:
        The number of modules changed (in place, on their device and dtype).
    """
    count = 0
    for module in model.modules():
        if _candidate(module) and module.weight is not None:
            _randomise(module, seed + count)
            count += 1
    return count


def _alternatives(x64, w64, eps):
    """Formulas a norm might compute instead, in float64: (what it does, y)."""
    rows = lambda t: t.reshape(-1, t.shape[-1])  # noqa: E731
    both = x64 * torch.rsqrt(x64.square().mean((-2, -1), keepdim=True) + eps) * w64
    centred = x64 - x64.mean(-1, keepdim=True)
    return [
        ("it scales by (1 + weight), as Gemma's norm does; FastRMSNorm scales by weight",
         rmsnorm_reference(x64, 1 + w64, eps)),
        ("it ignores its weight", rmsnorm_reference(x64, torch.ones_like(w64), eps)),
        ("it normalises over more than the last dimension", both),
        ("it subtracts the row's mean (that is LayerNorm)",
         rmsnorm_reference(centred, w64, eps) if centred.shape[-1] > 1 else None),
        ("it adds eps outside the square root", x64 / (x64.square().mean(-1, keepdim=True).sqrt() + eps) * w64),
        ("it uses another eps than its attribute says",
         rows(x64) * torch.rsqrt(rows(x64).square().mean(-1, keepdim=True)) * w64),
    ]


def _probe(module: torch.nn.Module, dtype: torch.dtype | None) -> str | None:
    """Run a randomised copy on the probe; None when it computes x · rstd · weight, else why not."""
    twin = copy.deepcopy(module)
    if twin.weight is not None and twin.weight.device.type == "meta":
        twin = twin.to_empty(device="cpu")
    _randomise(twin, PROBE_SEED)
    weight = twin.weight
    dtype = dtype or (weight.dtype if weight is not None else torch.float32)
    n = weight.shape[0] if weight is not None else module.normalized_shape[0]
    eps = _effective_eps(module)
    x = probe_input(n, dtype, eps, device=weight.device if weight is not None else "cpu")
    try:
        with torch.no_grad():
            y = twin(x)
    except Exception as error:  # noqa: BLE001  (any failure is a reason to refuse, reported as such)
        return f"it raised {type(error).__name__} on a {tuple(x.shape)} {dtype} probe: {error}"
    if not isinstance(y, torch.Tensor) or y.shape != x.shape:
        return f"it returns {type(y).__name__} {tuple(getattr(y, 'shape', ()))} for a {tuple(x.shape)} input"
    if y.dtype != x.dtype:
        return (f"it returns {y.dtype} for {x.dtype} input (its {weight.dtype} weight promotes the product), "
                f"FastRMSNorm returns the input's dtype; to swap it, cast the model to the activations' dtype "
                f"first (e.g. model.to({x.dtype})), so that the weight is {x.dtype} too")
    x64 = x.detach().to("cpu", torch.float64)
    w64 = torch.ones(n, dtype=torch.float64) if weight is None else weight.detach().to("cpu", torch.float64)
    y64, tol = y.detach().to("cpu", torch.float64), TOLERANCES[dtype]
    close = lambda a, b: bool(torch.all((a - b).abs() <= tol["atol"] + tol["rtol"] * b.abs()))  # noqa: E731
    if close(y64, rmsnorm_reference(x64, w64, eps)):
        return None
    what = next((w for w, alt in _alternatives(x64, w64, eps) if alt is not None and close(y64, alt)), None)
    worst = float((y64 - rmsnorm_reference(x64, w64, eps)).abs().max())
    return ((what + ": " if what else "") + f"its output differs from x · rstd · weight (eps = {eps:g}) by up to "
            f"{worst:.3g} on the probe, beyond {dtype}'s declared tolerance "
            f"(atol {tol['atol']:g}, rtol {tol['rtol']:g})")


def swap_rmsnorm(model: torch.nn.Module, *, dtype: torch.dtype | None = None, build: Build | None = None) -> int:
    """Replace every RMSNorm below ``model`` with ``FastRMSNorm``, keeping eps and the same weight Parameter.

    Covers ``torch.nn.RMSNorm`` and Hugging Face's ``LlamaRMSNorm``, ``Qwen2RMSNorm``,
    ``Qwen3RMSNorm`` (also the per-head ``q_norm``/``k_norm``, N = head_dim) and
    ``MistralRMSNorm``, recognised by what they compute (module docstring), not by class
    name: any module with a weight and an eps that passes the probe is replaced. The new
    module's ``weight`` *is* the old Parameter object (an optimizer built before the swap
    still trains it; state_dict keys and values are unchanged), its training flag is the
    old one's, and a module shared by several parents is replaced by one new module.

    Bit-equality: ``LlamaRMSNorm`` computes x̂ = x·rstd in float32, rounds x̂ to x's dtype, then
    multiplies by the weight (a second rounding, in the weight's dtype); ``FastRMSNorm``
    computes x·rstd·weight in float32 and rounds once, to x's dtype. In float32 the two
    differ by float32 roundings (about 1e-7 relative); in bf16 or fp16 an element may differ
    by one rounding of the output (2⁻⁸ relative in bf16), FastRMSNorm's being the closer to
    the exact value. A swapped model is therefore equal to the original within the declared
    tolerance of its dtype, not bit for bit.

    Args:
        model: any module tree; its own root is not replaced. Norms' x: (..., N), N their weight's size.
        dtype: the dtype of the activations the norms will see: float32, float16 or bfloat16
            (default: each norm's weight dtype, the case of a model cast with ``.to(dtype)``).
            With float32 weights and bf16 activations, pass ``torch.bfloat16``: a Llama norm
            then returns float32, which FastRMSNorm does not, and it is refused.
        build: ``build(N, eps, weight) -> module`` makes the replacement (default: a
            FastRMSNorm holding ``weight``); it must keep that Parameter as its ``weight``.
            The benchmark swaps Liger's norm in the same way.

    Returns:
        The number of modules replaced (0 when there is none).

    Raises:
        ContractError: (a ValueError) before anything is replaced, naming each module that
            claims to be an RMSNorm (``torch.nn.RMSNorm``, or "RMSNorm" in its class name)
            but cannot become a FastRMSNorm, and why: Gemma's ``(1 + weight)``, a bias, a
            norm over more than the last dimension, an output dtype other than x's (a float32
            weight on bf16 activations), N > 262144, hooks; also when ``model`` itself is one,
            or ``build`` does not keep the weight.

    Source: notebooks/13_into_a_model.ipynb; tests/library/test_swap.py.
    """
    if dtype is not None and dtype not in FAST_DTYPES:
        raise ContractError(f"dtype must be float32, float16 or bfloat16 for the fast path; got {dtype}")
    build = build or _fast
    verdicts: dict[int, str | None] = {}
    places, refused = [], {}  # refused: reason -> the modules refused for it, named once each
    for parent_name, parent in model.named_modules(remove_duplicate=False):
        for name, child in parent.named_children():
            if isinstance(child, FastRMSNorm) or not _candidate(child):
                continue
            if id(child) not in verdicts:
                verdicts[id(child)] = _structure(child) or _probe(child, dtype)
                if verdicts[id(child)] is not None and _claims_rmsnorm(child):
                    full = f"{parent_name}.{name}" if parent_name else name
                    refused.setdefault(verdicts[id(child)], []).append(f"{full} ({type(child).__name__})")
            if verdicts[id(child)] is None:
                places.append((parent, name, child))
    refusals = [f"{', '.join(names)}: {reason}" for reason, names in refused.items()]
    if _candidate(model) and _claims_rmsnorm(model) and not isinstance(model, FastRMSNorm):
        refusals.append(f"the model itself ({type(model).__name__}) is a norm: swap it in its parent, "
                        "or build a FastRMSNorm")
    if refusals:
        raise ContractError("swap_rmsnorm replaced nothing: " + "; ".join(refusals))
    new: dict[int, torch.nn.Module] = {}
    for _, _, child in places:
        if id(child) not in new:
            weight = child.weight
            n = weight.shape[0] if weight is not None else child.normalized_shape[0]
            module = build(n, _eps_of(child)[1], weight)
            if getattr(module, "weight", None) is not weight:
                raise ContractError(f"build must keep the weight Parameter it is given; "
                                    f"{type(module).__name__} did not")
            new[id(child)] = module.train(child.training)
    for parent, name, child in places:
        setattr(parent, name, new[id(child)])
    return len(new)

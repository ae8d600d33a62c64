"""The benchmarks' one provider list: what each implementation is, how a model calls it, what it refuses.

A :class:`Provider` holds three things about one implementation:

- ``norm``: the public entry point a model calls, bound to a weight (``FastRMSNorm``'s
  forward, ``rmsnorm.article.rmsnorm``, ``F.rms_norm``, ``quack.rmsnorm`` …);
- ``passes``: its launchers, when it has its own (``fast``, ``article``), so that a forward
  or a backward can be timed alone; otherwise both are derived from ``norm``;
- ``refuses``: why it cannot run given inputs (an import that fails, a contract that says
  no), in one line; it never runs something else instead.

From a provider, :func:`pass_calls` builds the forward and backward passes on their own
(kernel time, lesson 12) and :func:`whole_calls` the calls a model makes (whole-call
time, lesson 07 and ``scripts/benchmark_whole_call.py``). :func:`check_calls` is the one
oracle check in front of every timing: every output against the float64 oracle, with the
declared tolerances, kernel outputs poisoned with NaN first. :func:`prepare` does all of it
and says why a provider is not timed.

:data:`PROVIDERS`, in order: ``fast``, ``floor``, ``article``, ``reference``, ``eager``,
``eager_native``, ``compile``, ``compile_nomix``, ``liger``, ``quack`` (see each one's ``description``).

Source: notebooks/07_benchmark.ipynb, notebooks/12_tuning_and_side_by_side.ipynb; quack
``benchmarks/benchmark_rmsnorm.py`` (named providers), llm.c ``dev/cuda`` (check, then time).
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import re
from dataclasses import dataclass
from typing import Any, Callable, ContextManager, Mapping, NamedTuple

import torch
import torch.nn.functional as F

from rmsnorm import FastRMSNorm, check_fast_inputs, rmsnorm_fast_backward, rmsnorm_fast_forward
from rmsnorm.article.autograd import rmsnorm
from rmsnorm.article.backward import backward_rows
from rmsnorm.article.contract import check_contract
from rmsnorm.article.forward import forward_op
from rmsnorm.article.reduction import reduce_gamma_gradient
from rmsnorm.contract import ContractError
from rmsnorm.reference import rmsnorm_reference
from rmsnorm.testing import assert_close, dgamma_tolerance, inductor_unavailable, oracle, poisoned_outputs, rstd_oracle
from .eager import native_refuses
from .floor import floor_rmsnorm

#: eps of every benchmark (the article's epsilon).
EPS = 1e-6
#: The calls :func:`whole_calls` builds: a forward whose inputs and weight do not require
#: grad (inference: no autograd graph), a forward whose inputs and weight do (the graph is
#: recorded, then dropped), and a forward with its ``.backward(dy)`` through autograd.
WHOLE_CALL_PASSES = ("forward", "forward_grad", "forward_backward")
#: The passes :func:`pass_calls` builds: each alone, on saved state (kernel time).
PASSES = ("forward", "backward")

Call = Callable[[], Any]


class Norm(NamedTuple):
    """A public call bound to its weight: ``call(x) -> y``; after a backward, ``weight.grad`` is dgamma."""

    call: Callable[[torch.Tensor], torch.Tensor]
    weight: torch.Tensor


@dataclass(frozen=True)
class Provider:
    """One implementation the benchmarks time.

    Attributes:
        name: its name in code and in every CSV column (``article`` for the article's kernels).
        description: what is called, in one line.
        norm: ``norm(weight, eps, requires_grad) -> Norm``: the public call a model makes, on a
            copy of weight (N,) whose ``requires_grad`` is given.
        refuses: ``refuses(x, weight, eps) -> str | None``: None when it runs on these inputs,
            else why not (its contract's own message, or the import that failed).
        passes: ``passes(x, weight, dy, eps) -> (forward, backward)`` with its own launchers:
            forward → y or (y, rstd), backward → (dx, dgamma) from saved state; None: derived
            from ``norm`` (forward without grad; backward through ``torch.autograd.grad``).
        setup: a context manager entered while its calls run for the first time (torch.compile
            compiles then), or None when the first call needs nothing.
    """

    name: str
    description: str
    norm: Callable[[torch.Tensor, float, bool], Norm]
    refuses: Callable[[torch.Tensor, torch.Tensor, float], str | None]
    passes: Callable[..., tuple[Call, Call]] | None = None
    setup: Callable[[], ContextManager] | None = None


# ----------------------------------------------------------------------------- the providers' pieces


def _weight(weight: torch.Tensor, requires_grad: bool) -> torch.Tensor:
    return weight.detach().clone().requires_grad_(requires_grad)


def _functional(fn: Callable[[torch.Tensor, torch.Tensor, float], torch.Tensor]):
    """``norm`` for a functional ``fn(x, weight, eps)``."""
    def norm(weight, eps, requires_grad):
        w = _weight(weight, requires_grad)
        return Norm(lambda x: fn(x, w, eps), w)
    return norm


def module_norm(cls):
    """``norm`` for a ``torch.nn.RMSNorm``-like class: a module of N = weight's length, its weight a copy."""
    def norm(weight, eps, requires_grad) -> Norm:
        module = cls(weight.shape[0], eps=eps, device=weight.device, dtype=weight.dtype)
        with torch.no_grad():
            module.weight.copy_(weight)
        module.requires_grad_(requires_grad)
        return Norm(module, module.weight)
    return norm


_fast_module = module_norm(FastRMSNorm)


def _by_contract(check, who: str):
    """``refuses`` from a contract check that raises ContractError."""
    def refuses(x, weight, eps):
        try:
            check(x, weight, eps)
        except ContractError as err:
            return f"{who} contract: {err}"
        return None
    return refuses


def _refuses_nothing(x, weight, eps) -> None:
    return None


def cuda_only(who: str, importer: Callable[[], tuple[Any, str | None]]):
    """A provider's ``refuses``: the reason ``importer`` gives (a peer not installed), or x not on a CUDA GPU."""
    def refuses(x, weight, eps):
        _, reason = importer()
        if reason:
            return reason
        return None if x.device.type == "cuda" else f"{who} runs on a CUDA GPU only; x is on {x.device}"
    return refuses


@functools.lru_cache(maxsize=None)
def imported(module: str, attribute: str) -> tuple[Any, str | None]:
    """``module.attribute`` imported once: (it, None), or (None, why the import failed, in one line).

    For the providers that are not dependencies of the package (Liger-Kernel, QuACK).
    """
    try:
        return getattr(importlib.import_module(module), attribute), None
    except Exception as err:  # noqa: BLE001  ImportError, or a version mismatch raised at import
        return None, f"`from {module} import {attribute}` failed: {one_line(err)}"


def _liger(x, w, eps):
    liger, _ = imported("liger_kernel.ops.rms_norm", "LigerRMSNormFunction")
    return liger.apply(x, w, eps, 0.0, "llama", False)  # offset 0, casting "llama", not in place (would overwrite dy)


def _quack(x, w, eps):
    return imported("quack", "rmsnorm")[0](x, w, eps=eps)


def quack_refuses(x, weight, eps):
    """QuACK's ``refuses`` (plain or fused add): not importable, not on CUDA, or a GPU older than SM90."""
    reason = cuda_only("QuACK", lambda: imported("quack", "rmsnorm"))(x, weight, eps)
    capability = torch.cuda.get_device_capability(x.device) if reason is None else None
    if capability is not None and capability < (9, 0):
        return f"QuACK's CuTe-DSL kernels need compute capability 9.0 or newer; this GPU has {capability}"
    return reason


def _compiled(mix_order_reduction: bool):
    """``norm`` and ``setup`` of ``torch.compile(F.rms_norm)``, with Inductor's MixOrderReduction on or off."""
    def norm(weight, eps, requires_grad):
        N = weight.shape[0]
        compiled = torch.compile(lambda a, g: F.rms_norm(a, (N,), g, eps), dynamic=False)
        w = _weight(weight, requires_grad)
        return Norm(lambda x: compiled(x, w), w)

    @contextlib.contextmanager
    def setup():
        import torch._inductor.config as inductor_config

        torch._dynamo.reset()  # every compiled lambda shares one code object: start its cache afresh
        with inductor_config.patch({"triton.mix_order_reduction": mix_order_reduction}):
            yield
    return norm, setup


def _fast_passes(x, weight, dy, eps):
    _, rstd = rmsnorm_fast_forward(x, weight, eps)
    return (lambda: rmsnorm_fast_forward(x, weight, eps)), (lambda: rmsnorm_fast_backward(x, weight, rstd, dy))


def _article_passes(x, weight, dy, eps):
    _, rstd = forward_op(x, weight, eps)

    def backward():
        dx, partial = backward_rows(x, weight, dy, rstd, eps)
        return dx, reduce_gamma_gradient(partial, weight.dtype)
    return (lambda: forward_op(x, weight, eps)), backward


def _eager(x, w, eps):
    return F.rms_norm(x, (x.shape[-1],), w, eps)


_COMPILE, _COMPILE_SETUP = _compiled(True)
_COMPILE_NOMIX, _COMPILE_NOMIX_SETUP = _compiled(False)
_LIGER_IMPORT = functools.partial(imported, "liger_kernel.ops.rms_norm", "LigerRMSNormFunction")

#: Every implementation the benchmarks know, in one list.
PROVIDERS: tuple[Provider, ...] = (
    Provider("fast", "rmsnorm: FastRMSNorm(N, eps) called on x; launchers rmsnorm_fast_forward/_backward",
             _fast_module, _by_contract(check_fast_inputs, "the fast path's"), _fast_passes),
    Provider("floor", "the fast kernels behind a minimal autograd.Function, no checks (rmsnorm_lab.floor)",
             _functional(floor_rmsnorm), _by_contract(check_fast_inputs, "the fast kernels'")),
    Provider("article", "the article's kernels: rmsnorm.article.rmsnorm(x, weight, eps); launchers forward_op, …",
             _functional(rmsnorm), _by_contract(check_contract, "the article's"), _article_passes),
    Provider("reference", "the article's PyTorch reference, rmsnorm.rmsnorm_reference, through autograd",
             _functional(rmsnorm_reference), _refuses_nothing),
    Provider("eager", "torch.nn.functional.rms_norm(x, (N,), weight, eps) through autograd, as this torch routes it "
             "(aten; torch._native's QuACK where the environment's eager_rms_norm says native-quack)",
             _functional(_eager), _refuses_nothing),
    Provider("eager_native", "F.rms_norm routed by torch._native (torch >= 2.13) to its vendored QuACK kernel "
             "(SM90/SM100, nvidia-cutlass-dsl); refused where that route is not taken",
             _functional(_eager), native_refuses),
    Provider("compile", "torch.compile(F.rms_norm), Inductor's MixOrderReduction on (torch 2.11's default)",
             _COMPILE, lambda x, weight, eps: inductor_unavailable(x.device), setup=_COMPILE_SETUP),
    Provider("compile_nomix", "torch.compile(F.rms_norm), torch._inductor.config.triton.mix_order_reduction = False",
             _COMPILE_NOMIX, lambda x, weight, eps: inductor_unavailable(x.device), setup=_COMPILE_NOMIX_SETUP),
    Provider("liger", "Liger-Kernel's LigerRMSNormFunction.apply(x, weight, eps, 0.0, 'llama', in_place=False)",
             _functional(_liger), cuda_only("Liger-Kernel", _LIGER_IMPORT)),
    Provider("quack", "QuACK's quack.rmsnorm(x, weight, eps=eps) (CuTe DSL; autograd)",
             _functional(_quack), quack_refuses),
)
#: Their names, in the list's order.
PROVIDER_NAMES = tuple(p.name for p in PROVIDERS)


def provider(name: str) -> Provider:
    """The provider called ``name``.

    Raises:
        KeyError: no provider has that name (the message lists them).
    """
    for p in PROVIDERS:
        if p.name == name:
            return p
    raise KeyError(f"no provider {name!r}; the providers are {', '.join(PROVIDER_NAMES)}")


# ----------------------------------------------------------------------------- the calls


@contextlib.contextmanager
def _first_calls(p: Provider, calls: dict[str, Call]):
    """Build ``calls`` inside the provider's setup and, when it has one, run each once before leaving it."""
    with p.setup() if p.setup is not None else contextlib.nullcontext():
        yield
        if p.setup is not None:
            for call in calls.values():
                call()


def pass_calls(p: Provider, x, weight, dy, eps: float = EPS, passes=PASSES) -> dict[str, Call]:
    """The forward and the backward, each alone, as zero-argument callables (kernel time).

    ``forward`` returns y, or (y, rstd) for a provider with launchers; ``backward`` returns
    (dx, dgamma) from saved state (its launcher, or ``torch.autograd.grad`` on a graph kept
    with ``retain_graph=True``). A provider with a ``setup`` has run each call once inside it.

    Args:
        p: a provider from :data:`PROVIDERS` (or one built the same way).
        x: (M, N) on the device the provider runs on; weight (N,); dy like x.
        eps: finite real number >= 0.
        passes: which of :data:`PASSES` to build.

    Returns:
        ``{pass name: callable}``.
    """
    calls: dict[str, Call] = {}
    with _first_calls(p, calls):
        if p.passes is not None:
            forward, backward = p.passes(x, weight, dy, eps)
        else:
            frozen, trained = p.norm(weight, eps, False), p.norm(weight, eps, True)
            x_leaf = x.detach().clone().requires_grad_(True)
            y = trained.call(x_leaf) if "backward" in passes else None
            forward = lambda: frozen.call(x)  # noqa: E731
            backward = lambda: torch.autograd.grad(y, (x_leaf, trained.weight), dy, retain_graph=True)  # noqa: E731
        calls.update((name, call) for name, call in (("forward", forward), ("backward", backward)) if name in passes)
    return calls


def whole_calls(p: Provider, x, weight, dy, eps: float = EPS, passes=WHOLE_CALL_PASSES) -> dict[str, Call]:
    """The calls a model makes, through the provider's public entry point (whole-call time).

    ``forward``: ``norm(x)`` with x and the weight not requiring grad → y. ``forward_grad``:
    the same on a leaf copy of x and a weight that require grad (the autograd graph is
    recorded, then dropped) → y. ``forward_backward``: ``norm(x).backward(dy)`` on those
    leaves, their ``.grad`` set to None first (each call does the same work) → (dx, dgamma).

    Args:
        p, x, weight, dy, eps: as in :func:`pass_calls`.
        passes: which of :data:`WHOLE_CALL_PASSES` to build.

    Returns:
        ``{pass name: callable}``.
    """
    calls: dict[str, Call] = {}
    with _first_calls(p, calls):
        frozen = p.norm(weight, eps, False) if "forward" in passes else None
        trained = p.norm(weight, eps, True)
        x_leaf = x.detach().clone().requires_grad_(True)

        def forward_backward():
            x_leaf.grad = None
            trained.weight.grad = None
            trained.call(x_leaf).backward(dy)
            return x_leaf.grad, trained.weight.grad

        every = {"forward": lambda: frozen.call(x), "forward_grad": lambda: trained.call(x_leaf),
                 "forward_backward": forward_backward}
        calls.update((name, every[name]) for name in WHOLE_CALL_PASSES if name in passes)
    return calls


# ----------------------------------------------------------------------------- the one oracle check


def check_calls(calls: Mapping[tuple[str, str], Call], x, weight, dy, eps: float = EPS) -> list[str]:
    """The one oracle check: run every callable once and compare its outputs with the float64 oracle.

    Kernel outputs start as NaN (:func:`rmsnorm.testing.poisoned_outputs`), so an element
    never written fails. A forward (``forward``, ``forward_grad``) is compared on y, and on
    rstd when it returns (y, rstd); a backward (``backward``, ``forward_backward``) on dx and
    dgamma. Tolerances are the declared ones (:data:`rmsnorm.testing.TOLERANCES` for x's
    dtype; :func:`rmsnorm.testing.dgamma_tolerance` for dgamma, a sum over M rows).

    Args:
        calls: ``{(pass name, provider name): callable}`` built on x, weight, dy, eps.
        x: (M, N); weight: (N,); dy: (M, N); eps: what the callables were built with.

    Returns:
        One line per comparison that passed, e.g. ``'forward/article y 128x257 float32'``.

    Raises:
        AssertionError: the first comparison that fails (then nothing should be timed).
    """
    y64, dx64, dgamma64 = oracle(x, weight, dy, eps, on=x.device)
    rstd64 = rstd_oracle(x, eps)
    M, N = x.shape
    shape = f"{M}x{N} {str(x.dtype).removeprefix('torch.')}"
    dgamma_tol = dgamma_tolerance(M, x.dtype, weight.dtype)
    passed = []
    with poisoned_outputs():
        for (pass_, name), call in calls.items():
            try:
                out = call()
            except AssertionError as err:  # the provider's own assert: a failure to run, not a wrong number
                raise RuntimeError(f"{pass_}/{name} raised AssertionError: {err}") from err
            if pass_ in ("forward", "forward_grad"):
                y, rstd = out if isinstance(out, tuple) else (out, None)
                pairs = [("y", y, y64, None)] + ([("rstd", rstd, rstd64, None)] if rstd is not None else [])
            else:
                pairs = [("dx", out[0], dx64, None), ("dgamma", out[1], dgamma64, dgamma_tol)]
            for what, actual, expected, tol in pairs:
                label = f"{pass_}/{name} {what} {shape}"
                assert_close(actual, expected, dtype=x.dtype, tol=tol, msg=lambda m, label=label: f"{label}: {m}")
                passed.append(label)
    return passed


#: Terminal colour codes, which some libraries (QuACK's CuTe DSL) put into their error messages.
_ANSI = re.compile(r"\x1b\[[0-9;]*m")
#: Lines of ``torch.testing.assert_close``'s message that say by how much, kept after the first line.
_HOW_FAR = ("Mismatched elements", "Greatest absolute difference", "Greatest relative difference")


def one_line(err: BaseException) -> str:
    """An exception as ``'Type: first line of its message'`` for a CSV cell, at most 400 characters.

    Terminal colour codes are removed; when the message is ``torch.testing.assert_close``'s, its
    mismatch count and greatest differences follow the first line, joined by ``"; "``, so that a
    "wrong" verdict says by how much.
    """
    text = [line.strip() for line in _ANSI.sub("", str(err)).strip().splitlines()]
    kept = [line for line in text[1:] if line.startswith(_HOW_FAR)]
    return "; ".join([f"{type(err).__name__}: {text[0] if text else ''}"] + kept)[:400]


def prepare(p: Provider, build, x, weight, dy, eps: float = EPS, passes=None) -> tuple[dict[str, Call] | None, str]:
    """Build a provider's calls and check them against the oracle; say why when they cannot be timed.

    Args:
        p: the provider.
        build: :func:`pass_calls` or :func:`whole_calls`.
        x, weight, dy, eps: the inputs.
        passes: passed on to ``build`` (default: all of its passes).

    Returns:
        ``(calls, "ok")``, or ``(None, reason)`` with reason ``"refused: …"`` (the provider's
        own refusal), ``"failed: …"`` (building or calling it raised) or ``"wrong: …"`` (an
        output did not match the oracle). Never raises for a provider's fault.
    """
    reason = p.refuses(x, weight, eps)
    if reason:
        return None, f"refused: {reason}"
    try:
        calls = build(p, x, weight, dy, eps) if passes is None else build(p, x, weight, dy, eps, passes=passes)
    except Exception as err:  # noqa: BLE001  a provider that cannot be set up is reported, not timed
        return None, f"failed: {one_line(err)}"
    try:
        check_calls({(name, p.name): call for name, call in calls.items()}, x, weight, dy, eps)
    except AssertionError as err:
        return None, f"wrong: {one_line(err)}"
    except Exception as err:  # noqa: BLE001
        return None, f"failed: {one_line(err)}"
    return calls, "ok"

"""The fused residual add + RMSNorm side by side: each pass's kernel time, L2 cold, and the whole call.

A pre-norm decoder layer does ``h = h + sublayer_out; x = norm(h)``. The providers of :data:`PROVIDERS` each
compute, from x, residual (M, N) and weight (N,), the pair (y, residual_out) with residual_out = x + residual
and y = RMSNorm(residual_out) · weight, and take both gradients back (dy and d residual_out, random):

- ``fast_fused``: :func:`rmsnorm.rmsnorm_add`, one launch each way;
- ``fast_unfused``: eager ``x + residual``, then :func:`rmsnorm.rmsnorm_fast` (two launches forward; backward
  the norm's, then autograd's add of d residual_out);
- ``liger``: Liger-Kernel's ``LigerFusedAddRMSNormFunction.apply(x, residual, weight, eps, 0.0, "llama",
  False)`` (liger_kernel/ops/fused_add_rms_norm.py; not in place: dy is not overwritten);
- ``quack``: ``quack.rmsnorm(x, weight, residual=residual, prenorm=True, eps=eps)`` → (out, residual_out);
  prenorm is what makes its backward take d residual_out;
- ``compile``: ``torch.compile`` of :func:`add_then_norm` (h = x + residual; F.rms_norm(h); both returned);
- ``eager``: :func:`add_then_norm` itself.

Method: :func:`check` compares every output of a provider's calls with the float64 oracle at h = x + residual
rounded as eager rounds it (:func:`rmsnorm.testing.oracle`; residual_out with the exact sum), kernel outputs
poisoned with NaN first; only then is a call timed. A provider that cannot run (an import, no CUDA, a
contract) is recorded as ``refused: <why>``, one that fails the check as ``wrong: …``; neither is timed.
Kernel time (:func:`kernel_rows`): :func:`rmsnorm_lab.kernel_time_us` of the forward alone (no grad) and the
backward alone (``torch.autograd.grad`` on a kept graph). Every provider is charged the same declared bytes,
:func:`rmsnorm_lab.fused_add_forward_bytes` and :func:`~rmsnorm_lab.fused_add_backward_bytes`: rates are lower
bounds. Whole call (:func:`whole_call_rows`): lesson 07's timers through :func:`rmsnorm_lab.wholecall.fill_times`
(CUDA events around back-to-back calls, host µs beside, kernel µs). Never asserts a speed-up.

Source: scripts/benchmark_offset.py, rmsnorm_lab/sidebyside.py, rmsnorm_lab/wholecall.py; issue 39.
"""

from __future__ import annotations

import contextlib
from typing import Callable

import torch
import torch.nn.functional as F

from rmsnorm import check_fast_inputs, rmsnorm_add, rmsnorm_fast
from rmsnorm.contract import ContractError
from rmsnorm.testing import (
    assert_close,
    assert_sum_close,
    dgamma_tolerance,
    inductor_unavailable,
    oracle,
    poisoned_outputs,
)
from . import checked_rows
from .checked_rows import PASSES, WHOLE_CALL_PASSES, Side, prepared  # noqa: F401  (the passes: this module's too)
from .inputs import fused_add_inputs
from .providers import EPS, cuda_only, imported, quack_refuses
from .results import fused_add_backward_bytes, fused_add_forward_bytes
from .sidebyside import GRID as MAIN_GRID
from .timing import kernel_time_us
from .wholecall import HOST_BOUND

#: Kernel-time shapes (M, N, dtype): two LLM widths in bf16 (hidden 5120 and 8192), then the side-by-side's main
#: grid. The LLM widths come first: a run whose budget is spent loses the main grid's last shapes, not them.
GRID = ((16384, 5120, torch.bfloat16), (32768, 8192, torch.bfloat16)) + MAIN_GRID
#: Whole-call shapes: where the host sets the pace (rmsnorm_lab.wholecall.HOST_BOUND), then two where the GPU does
#: (issue 39's fused-against-unfused target is a whole call at GPU-bound shapes).
WHOLE_CALL_SHAPES = HOST_BOUND + ((32768, 4096, torch.bfloat16), (16384, 5120, torch.bfloat16))
PROVIDERS = ("fast_fused", "fast_unfused", "liger", "quack", "compile", "eager")
DESCRIPTIONS = {
    "fast_fused": "rmsnorm.rmsnorm_add(x, residual, weight, eps) -> (y, residual_out)",
    "fast_unfused": "h = x + residual (eager); rmsnorm.rmsnorm_fast(h, weight, eps): two launches",
    "liger": "liger_kernel.ops.fused_add_rms_norm.LigerFusedAddRMSNormFunction.apply(x, residual, weight, eps, "
             "0.0, 'llama', False)",
    "quack": "quack.rmsnorm(x, weight, residual=residual, prenorm=True, eps=eps) -> (out, residual_out)",
    "compile": "torch.compile(add_then_norm, dynamic=False): h = x + residual; (F.rms_norm(h, (N,), weight, eps), h)",
    "eager": "add_then_norm uncompiled: h = x + residual; (F.rms_norm(h, (N,), weight, eps), h)",
}
KERNEL_COLUMNS = ("M", "N", "dtype", "provider", "pass_", "us", "bytes", "gbps", "check")
WHOLE_CALL_COLUMNS = ("M", "N", "dtype", "provider", "pass_", "whole_call_us", "host_us", "kernel_us", "check")

Fused = Callable[[torch.Tensor, torch.Tensor, torch.Tensor], tuple]


def add_then_norm(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float = EPS) -> tuple:
    """The eager formula: (F.rms_norm(h, (N,), weight, eps), h) with h = x + residual."""
    h = x + residual
    return F.rms_norm(h, (h.shape[-1],), weight, eps), h


def _liger(x, residual, weight, eps):
    function = imported("liger_kernel.ops.fused_add_rms_norm", "LigerFusedAddRMSNormFunction")[0]
    return function.apply(x, residual, weight, eps, 0.0, "llama", False)


def _quack(x, residual, weight, eps):
    return imported("quack", "rmsnorm")[0](x, weight, residual=residual, prenorm=True, eps=eps)


def refuses(name: str, x: torch.Tensor, weight: torch.Tensor, eps: float = EPS) -> str | None:
    """Why provider ``name`` cannot run on these inputs (its contract, an import, the device), or None."""
    if name in ("fast_fused", "fast_unfused"):
        try:
            check_fast_inputs(x, weight, eps)
        except ContractError as err:
            return f"the fast path's contract: {err}"
        return None
    if name == "liger":
        return cuda_only("Liger-Kernel", lambda: imported("liger_kernel.ops.fused_add_rms_norm",
                                                             "LigerFusedAddRMSNormFunction"))(x, weight, eps)
    if name == "quack":
        return quack_refuses(x, weight, eps)
    if name == "compile":
        return inductor_unavailable(x.device)
    if name == "eager":
        return None
    raise KeyError(f"no provider {name!r}; the providers are {', '.join(PROVIDERS)}")


def fused_call(name: str, eps: float = EPS) -> tuple[Fused, Callable[[], contextlib.AbstractContextManager]]:
    """Provider ``name``'s call ``(x, residual, weight) -> (y, residual_out)`` and the context its first calls need.

    ``compile`` resets dynamo in that context: every shape compiles :func:`add_then_norm`'s one code object again,
    and without a reset dynamo's recompile limit is reached after a few shapes and the rest run eagerly, unnoticed.
    """
    calls = {"fast_fused": lambda x, r, w: rmsnorm_add(x, r, w, eps),
             "liger": lambda x, r, w: _liger(x, r, w, eps), "quack": lambda x, r, w: _quack(x, r, w, eps),
             "eager": lambda x, r, w: add_then_norm(x, r, w, eps)}
    if name == "fast_unfused":
        def unfused(x, r, w):
            h = x + r
            return rmsnorm_fast(h, w, eps), h
        return unfused, contextlib.nullcontext
    if name == "compile":
        compiled = torch.compile(add_then_norm, dynamic=False)

        @contextlib.contextmanager
        def reset():
            torch._dynamo.reset()
            yield
        return (lambda x, r, w: compiled(x, r, w, eps)), reset
    return calls[name], contextlib.nullcontext


def build_calls(name: str, x, residual, weight, dy, d_residual_out, eps: float = EPS, passes=PASSES) -> dict:
    """Zero-argument calls of ``passes``, each run once inside the provider's setup.

    ``forward``: the call on inputs that do not require grad (no graph) → (y, residual_out). ``backward``:
    ``torch.autograd.grad`` of a kept graph → (dx, d residual, dweight). ``forward_backward``: the call on leaves
    whose ``.grad`` is cleared, then ``torch.autograd.backward`` of both outputs → (dx, d residual, dweight).
    """
    fn, setup = fused_call(name, eps)
    leaves = [t.detach().clone().requires_grad_() for t in (x, residual, weight)]

    def forward():  # x, residual and weight do not require grad: no graph is recorded
        return fn(x, residual, weight)

    def forward_backward():
        for leaf in leaves:
            leaf.grad = None
        torch.autograd.backward(fn(*leaves), (dy, d_residual_out))
        return tuple(leaf.grad for leaf in leaves)

    calls = {}
    with setup():
        if "backward" in passes:
            kept = fn(*leaves)
            calls["backward"] = lambda: torch.autograd.grad(kept, leaves, (dy, d_residual_out), retain_graph=True)
        if "forward" in passes:
            calls["forward"] = forward
        if "forward_backward" in passes:
            calls["forward_backward"] = forward_backward
        for call in calls.values():
            call()
    return {p: calls[p] for p in passes}


def check(calls: dict, x, residual, weight, dy, d_residual_out, eps: float = EPS, label: str = "") -> None:
    """Every output of ``calls`` against the float64 oracle at h = x + residual (eager's rounding).

    y: the oracle's norm of h; residual_out: x + residual summed in float64; dx and d residual: the oracle's
    d h plus d residual_out, each term allowed its own rounding (:func:`rmsnorm.testing.assert_sum_close`:
    the unfused providers round the norm's d h before autograd adds d residual_out, which is within the
    dtype's rule for each term but not for a sum that nearly cancels); dweight: within
    :func:`rmsnorm.testing.dgamma_tolerance`.

    Raises:
        AssertionError: the first output outside its declared tolerance (the message names it).
    """
    h = x + residual
    M, N = x.shape
    y64, dh64, dweight64 = oracle(h, weight, dy, eps, on=x.device)
    terms64 = (dh64, d_residual_out.double())  # d h of the norm, and the gradient residual_out brings
    sum64 = x.double() + residual.double()
    with poisoned_outputs():
        for pass_, call in calls.items():
            out = call()
            named = ([("y", y64, x.dtype, None), ("residual_out", sum64, residual.dtype, None)] if len(out) == 2 else
                     [("dx", terms64, x.dtype, None), ("d_residual", terms64, residual.dtype, None),
                      ("dweight", dweight64, x.dtype, dgamma_tolerance(M, x.dtype, weight.dtype))])
            for actual, (what, expected, dtype, tol) in zip(out, named):
                where = f"{label} {pass_} {what}"
                assert actual is not None, f"{where}: not returned"
                if isinstance(expected, tuple):
                    assert_sum_close(actual, expected, dtype=dtype, msg=where)
                else:
                    assert_close(actual, expected, dtype=dtype, tol=tol, msg=lambda m, where=where: f"{where}: {m}")


def prepare(name: str, x, residual, weight, dy, d_residual_out, passes, eps: float = EPS):
    """(calls, "ok") once checked, or (None, "refused: …" / "failed: …" / "wrong: …"); never raises for a peer."""
    def build_and_check():
        calls = build_calls(name, x, residual, weight, dy, d_residual_out, eps, passes)
        check(calls, x, residual, weight, dy, d_residual_out, eps, label=name)
        return calls
    return prepared(refuses(name, x, weight, eps), build_and_check)


#: Seeded x, residual, weight, dy, d_residual_out: :func:`rmsnorm_lab.inputs.fused_add_inputs` (the sweep's too).
inputs = fused_add_inputs


#: This side-by-side's declarations for rmsnorm_lab.checked_rows: the residual in x's dtype, charged as such.
SIDE = Side(KERNEL_COLUMNS, WHOLE_CALL_COLUMNS, inputs, prepare,
            lambda M, N, dtype: fused_add_forward_bytes(M, N, dtype, dtype),
            lambda M, N, dtype: fused_add_backward_bytes(M, N, dtype, dtype))


def kernel_rows(shapes=GRID, providers=PROVIDERS, *, calls: int = 20, deadline: float | None = None,
                device="cuda", log=print) -> list[dict]:
    """Check, then time every provider's forward and backward alone, L2 cold: rows of :data:`KERNEL_COLUMNS`.

    ``us``: :func:`rmsnorm_lab.kernel_time_us` (``calls`` profiled calls), NaN when not timed; ``bytes`` the
    declared fused-add bytes of the pass; ``gbps`` = bytes / µs / 1e3. After ``deadline`` (a
    ``time.perf_counter()`` value) no provider is started: its rows say :data:`~rmsnorm_lab.wholecall.OUT_OF_TIME`.
    """
    return checked_rows.kernel_rows(SIDE, shapes, providers, kernel_time_us=kernel_time_us, calls=calls,
                                    deadline=deadline, device=device, log=log)


def whole_call_rows(shapes=WHOLE_CALL_SHAPES, providers=PROVIDERS, *, samples: int | None = None,
                    deadline: float | None = None, device="cuda", log=print) -> list[dict]:
    """Check, then time every provider's whole calls (forward without grad, forward + backward): rows of
    :data:`WHOLE_CALL_COLUMNS`, µs per call from :func:`rmsnorm_lab.wholecall.fill_times`."""
    return checked_rows.whole_call_rows(SIDE, shapes, providers, samples=samples, deadline=deadline, device=device,
                                        log=log)

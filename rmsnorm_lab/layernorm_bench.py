"""The fast LayerNorm side by side: each pass's kernel time, L2 cold, and the whole call.

Providers (:data:`PROVIDERS`), each computing y = LayerNorm(x) · weight + bias and its gradients (dy random):

- ``fast``: :func:`rmsnorm.layernorm_fast`;
- ``liger``: Liger-Kernel's ``LigerLayerNormFunction.apply(x, weight, bias, eps)`` (liger_kernel/ops/layer_norm.py);
- ``quack``: QuACK's ``quack.rmsnorm.layernorm_fwd`` for the forward. QuACK 0.6.5 asserts float32 weight and
  bias and has no autograd wrapper for its LayerNorm, so it runs at the shapes whose declared weight dtype is
  float32, and its backward is timed through its own backward function where the installed version has one
  (``layernorm_bwd``), else recorded as refused with that reason;
- ``compile``: ``torch.compile(F.layer_norm)``; ``eager``: ``F.layer_norm``.

Method, as rmsnorm_lab.fused_add_bench: :func:`check` compares every output with ``F.layer_norm`` and its autograd
in float64 on the same inputs (kernel outputs poisoned with NaN first); only then is a call timed. Refused, failed
and wrong providers are recorded with the reason and not timed. Every provider is charged the same declared bytes
(:func:`rmsnorm_lab.layernorm_forward_bytes`, :func:`~rmsnorm_lab.layernorm_backward_bytes`). Never asserts a
speed-up.

Source: rmsnorm_lab/fused_add_bench.py; issue 40.
"""

from __future__ import annotations

import contextlib
import inspect

import torch
import torch.nn.functional as F

from rmsnorm import layernorm_fast
from rmsnorm.contract import ContractError
from rmsnorm.layernorm_launchers import check_layernorm_inputs
from rmsnorm.testing import assert_close, dgamma_tolerance, inductor_unavailable, poisoned_outputs
from . import checked_rows
from .checked_rows import PASSES, WHOLE_CALL_PASSES, Side, prepared  # noqa: F401  (the passes: this module's too)
from .inputs import layernorm_inputs
from .providers import cuda_only, imported, quack_refuses
from .results import layernorm_backward_bytes, layernorm_forward_bytes
from .sidebyside import GRID as MAIN_GRID
from .timing import kernel_time_us
from .wholecall import HOST_BOUND

EPS = 1e-5
#: Kernel-time shapes (M, N, x dtype, weight and bias dtype): GPT-2/ViT and Phi widths with float32 parameters
#: (mixed precision's usual layout, and the one QuACK takes), then the RMSNorm's main grid with parameters in x's
#: dtype. The LayerNorm widths come first: a run whose budget is spent loses the main grid's last shapes.
GRID = ((65536, 768, torch.float16, torch.float32), (65536, 768, torch.bfloat16, torch.float32),
        (16384, 1280, torch.float16, torch.float32), (16384, 1280, torch.bfloat16, torch.float32),
        (4096, 12288, torch.bfloat16, torch.float32)) + tuple((M, N, d, d) for M, N, d in MAIN_GRID)
#: Whole-call shapes: where the host sets the pace (rmsnorm_lab.wholecall.HOST_BOUND), parameters in x's dtype.
WHOLE_CALL_SHAPES = tuple((M, N, d, d) for M, N, d in HOST_BOUND)
PROVIDERS = ("fast", "liger", "quack", "compile", "eager")
DESCRIPTIONS = {
    "fast": "rmsnorm.layernorm_fast(x, weight, bias, eps)",
    "liger": "liger_kernel.ops.layer_norm.LigerLayerNormFunction.apply(x, weight, bias, eps)",
    "quack": "quack.rmsnorm.layernorm_fwd(x, weight, bias, eps) (float32 weight and bias only); backward: "
             "quack.rmsnorm.layernorm_bwd where it exists",
    "compile": "torch.compile(F.layer_norm, dynamic=False)",
    "eager": "F.layer_norm(x, (N,), weight, bias, eps)",
}
KERNEL_COLUMNS = ("M", "N", "dtype", "weight_dtype", "provider", "pass_", "us", "bytes", "gbps", "check")
WHOLE_CALL_COLUMNS = ("M", "N", "dtype", "weight_dtype", "provider", "pass_", "whole_call_us", "host_us", "kernel_us",
                      "check")


def _eager(x, weight, bias, eps=EPS):
    return F.layer_norm(x, (x.shape[-1],), weight, bias, eps)


def _liger(x, weight, bias, eps=EPS):
    return imported("liger_kernel.ops.layer_norm", "LigerLayerNormFunction")[0].apply(x, weight, bias, eps)


def _quack_forward(x, weight, bias, eps=EPS):
    """QuACK's forward, (y, mean, rstd) or y: the keywords its installed signature takes."""
    forward = imported("quack.rmsnorm", "layernorm_fwd")[0]
    wanted = {"return_rstd": True, "return_mean": True}
    kwargs = {k: v for k, v in wanted.items() if k in inspect.signature(forward).parameters}
    return forward(x, weight, bias, eps, **kwargs)


def refuses(name: str, x, weight, bias, eps: float = EPS) -> str | None:
    """Why provider ``name`` cannot run on these inputs (its contract, an import, the device), or None."""
    if name == "fast":
        try:
            check_layernorm_inputs(x, weight, bias, eps)
        except ContractError as err:
            return f"the fast path's contract: {err}"
        return None
    if name == "liger":
        return cuda_only("Liger-Kernel", lambda: imported("liger_kernel.ops.layer_norm", "LigerLayerNormFunction"))(
            x, weight, eps)
    if name == "quack":
        reason = quack_refuses(x, weight, eps) or imported("quack.rmsnorm", "layernorm_fwd")[1]
        if reason is None and (weight.dtype != torch.float32 or bias.dtype != torch.float32):
            reason = f"QuACK's layernorm_fwd asserts float32 weight and bias; this shape declares {weight.dtype}"
        return reason
    if name == "compile":
        return inductor_unavailable(x.device)
    if name == "eager":
        return _eager_refuses(x, weight, bias, eps)
    raise KeyError(f"no provider {name!r}; the providers are {', '.join(PROVIDERS)}")


def _eager_refuses(x, weight, bias, eps) -> str | None:
    """F.layer_norm's own refusal of parameters in another dtype than x's, asked of one row, forward and backward
    (CUDA's kernels raise on float16 rows with float32 weight where the CPU's take them), or None."""
    if weight.dtype == x.dtype and bias.dtype == x.dtype:
        return None
    row, w, b = (t.detach()[:1].clone().requires_grad_() if t is x else t.detach().clone().requires_grad_()
                 for t in (x, weight, bias))
    try:
        _eager(row, w, b, eps).sum().backward()
    except torch.cuda.OutOfMemoryError:
        raise  # the machine's state, not F.layer_norm's contract
    except RuntimeError as err:
        return f"F.layer_norm raises on {x.dtype} rows with {weight.dtype} weight and bias on {x.device.type}: {err}"
    return None


def _quack_calls(x, weight, bias, dy, eps, passes) -> dict:
    """QuACK's forward, and its backward through its own function (no autograd wrapper); KeyError when it has none."""
    calls = {"forward": lambda: _first(_quack_forward(x, weight, bias, eps))}
    if set(passes) & {"backward", "forward_backward"}:
        backward, why = imported("quack.rmsnorm", "layernorm_bwd")
        if why:
            raise KeyError(f"QuACK has no LayerNorm backward function to time: {why}")
        _y, rstd, mean = _quack_forward(x, weight, bias, eps)  # 0.6.5 returns (out, rstd, mean)
        calls["backward"] = lambda: backward(x, weight, dy, rstd, mean)
        calls["forward_backward"] = lambda: backward(x, weight, dy, *_quack_forward(x, weight, bias, eps)[1:])
    return calls


def _first(out):
    return out[0] if isinstance(out, tuple) else out


def build_calls(name: str, x, weight, bias, dy, eps: float = EPS, passes=PASSES) -> dict:
    """Zero-argument calls of ``passes``, each run once: ``forward`` → y; ``backward`` (a kept graph) and
    ``forward_backward`` (the call on leaves, then backward) → (dx, dweight, dbias)."""
    if name == "quack":
        calls = _quack_calls(x, weight, bias, dy, eps, passes)
        return {p: calls[p] for p in passes}
    setup = contextlib.nullcontext
    fn = {"fast": layernorm_fast, "liger": _liger, "eager": _eager}.get(name)
    if name == "compile":
        compiled = torch.compile(_eager, dynamic=False)
        fn = compiled

        @contextlib.contextmanager
        def setup():  # every shape compiles _eager again; without a reset the recompile limit runs the rest eagerly
            torch._dynamo.reset()
            yield
    leaves = [t.detach().clone().requires_grad_() for t in (x, weight, bias)]

    def forward_backward():
        for leaf in leaves:
            leaf.grad = None
        fn(*leaves, eps).backward(dy)
        return tuple(leaf.grad for leaf in leaves)

    calls = {}
    with setup():
        if "backward" in passes:
            kept = fn(*leaves, eps)
            calls["backward"] = lambda: torch.autograd.grad(kept, leaves, dy, retain_graph=True)
        calls["forward"] = lambda: fn(x, weight, bias, eps)
        calls["forward_backward"] = forward_backward
        for p in passes:
            calls[p]()
    return {p: calls[p] for p in passes}


def check(calls: dict, x, weight, bias, dy, eps: float = EPS, label: str = "") -> None:
    """Every output of ``calls`` against F.layer_norm and its autograd in float64 on x's device.

    Raises:
        AssertionError: the first output outside its declared tolerance (the message names it).
    """
    leaves = [t.detach().double().requires_grad_() for t in (x, weight, bias)]
    y64 = _eager(*leaves, eps)
    y64.backward(dy.double())
    M = x.shape[0]
    with poisoned_outputs():
        for pass_, call in calls.items():
            out = call()
            named = ([("y", y64.detach(), x.dtype, None)] if pass_ == "forward" else
                     [("dx", leaves[0].grad, x.dtype, None)]
                     + [(what, leaf.grad, x.dtype, dgamma_tolerance(M, x.dtype, given.dtype))
                        for what, leaf, given in (("dweight", leaves[1], weight), ("dbias", leaves[2], bias))])
            for actual, (what, expected, dtype, tol) in zip(out if pass_ != "forward" else (out,), named):
                where = f"{label} {pass_} {what}"
                assert actual is not None, f"{where}: not returned"
                assert_close(actual, expected, dtype=dtype, tol=tol, msg=lambda m, where=where: f"{where}: {m}")


def prepare(name: str, x, weight, bias, dy, passes, eps: float = EPS):
    """(calls, "ok") once checked, or (None, "refused: …" / "failed: …" / "wrong: …"); never raises for a peer."""
    def build_and_check():
        calls = build_calls(name, x, weight, bias, dy, eps, passes)
        check(calls, x, weight, bias, dy, eps, label=name)
        return calls
    return prepared(refuses(name, x, weight, bias, eps), build_and_check)


#: Seeded x (off centre), weight, bias, dy: :func:`rmsnorm_lab.inputs.layernorm_inputs`, which the sweep draws too.
inputs = layernorm_inputs


#: This side-by-side's declarations for rmsnorm_lab.checked_rows: a shape names x's dtype and the parameters'.
SIDE = Side(KERNEL_COLUMNS, WHOLE_CALL_COLUMNS, inputs, prepare, layernorm_forward_bytes, layernorm_backward_bytes)


def kernel_rows(shapes=GRID, providers=PROVIDERS, *, calls: int = 20, deadline: float | None = None,
                device="cuda", log=print) -> list[dict]:
    """Check, then time every provider's forward and backward alone, L2 cold: rows of :data:`KERNEL_COLUMNS`.

    A provider that runs one pass only (QuACK without a backward function) is refused for both: the check covers
    the passes it is timed at.
    """
    return checked_rows.kernel_rows(SIDE, shapes, providers, kernel_time_us=kernel_time_us, calls=calls,
                                    deadline=deadline, device=device, log=log)


def whole_call_rows(shapes=WHOLE_CALL_SHAPES, providers=PROVIDERS, *, samples: int | None = None,
                    deadline: float | None = None, device="cuda", log=print) -> list[dict]:
    """Check, then time every provider's whole calls (forward without grad, forward + backward)."""
    return checked_rows.whole_call_rows(SIDE, shapes, providers, samples=samples, deadline=deadline, device=device,
                                        log=log)

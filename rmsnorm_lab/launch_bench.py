"""Issue 41's measurement: each launch path's whole call and host time, beside two floors and eager; its targets.

At the shapes of :data:`SHAPES` (the sizes where the host sets the pace) and the passes of :data:`PASSES`,
each provider of :data:`LAUNCH_PROVIDERS` is checked against the float64 oracle (but the C++ floor, whose
kernel is empty), then timed with lesson 07's timers:

- ``whole_call_us``: :func:`rmsnorm_lab.time_whole_calls`, CUDA events around back-to-back calls;
- ``host_us``: :func:`rmsnorm_lab.time_host_calls`, CPU wall time per call issued without synchronising.

The providers: ``fast`` (FastRMSNorm, launched as :func:`rmsnorm.launch_path` says: ``native`` where the
extension builds), ``fast_triton_launcher`` (the same module with the native launch switched off:
``CompiledKernel.run``, issue 15's path), ``floor`` (the old floor, ``kernel[grid]`` in a bare Function),
``cpp_floor`` (the new floor, :mod:`rmsnorm_lab.cpp_floor`: a ``torch.library`` C++ op launching an
empty kernel through the same kind of module), ``eager_module`` (``torch.nn.RMSNorm``, how a model calls
eager) and ``eager`` (``F.rms_norm``, as whole_call.csv times it). :func:`targets` reads issue 41's
targets off the table and the Llama step table; reported, never asserted.

Source: issue 41; rmsnorm_lab/wholecall.py (the same timers and oracle check).
"""

from __future__ import annotations

import dataclasses
import time

import numpy as np
import pandas as pd
import torch

from rmsnorm import native_launch
from rmsnorm.native_launch import set_native_launch
from rmsnorm.testing import make_inputs
from .providers import EPS, Provider, module_norm, one_line, prepare, provider, whole_calls
from .timing import require_cuda, time_host_calls, time_whole_calls

#: (M, N, dtype): issue 41's shapes, every one host-bound for the fast path.
SHAPES = ((1, 4096, torch.bfloat16), (64, 4096, torch.bfloat16), (4096, 4096, torch.bfloat16),
          (128, 257, torch.float32))
#: The calls timed (rmsnorm_lab.providers.whole_calls).
PASSES = ("forward", "forward_backward")
#: Columns of launch_path.csv; times in µs per call.
COLUMNS = ("M", "N", "dtype", "provider", "pass_", "whole_call_us", "host_us", "check")
#: ``check`` of the C++ floor, whose empty kernel computes nothing.
NOT_CHECKED = "not checked: an empty kernel (the C++ route's host cost, not a norm)"
OUT_OF_TIME = "not run: the run's time budget was spent"
LAUNCH_FILE, STEP_STEM = "launch_path.csv", "launch_path_model"


def _cpp_floor_module(N, eps, device, dtype):
    from .cpp_floor import CppFloorRMSNorm  # builds the C++ operators at the first module

    return CppFloorRMSNorm(N, eps=eps, device=device, dtype=dtype)


def _cuda_only(x, weight, eps):
    return None if x.is_cuda else "needs a CUDA GPU"


#: The providers, by name, in the table's order.
LAUNCH_PROVIDERS: dict[str, Provider] = {  # the targets' own first: a run cut by its budget loses the last ones
    "fast": provider("fast"),
    "eager_module": Provider("eager_module", "torch.nn.RMSNorm(N, eps) called on x",
                             module_norm(torch.nn.RMSNorm), lambda x, weight, eps: None),
    "cpp_floor": Provider("cpp_floor", "a torch.library C++ op launching an empty kernel (rmsnorm_lab.cpp_floor)",
                          module_norm(_cpp_floor_module), _cuda_only),
    "fast_triton_launcher": dataclasses.replace(
        provider("fast"), name="fast_triton_launcher",
        description="FastRMSNorm with rmsnorm.native_launch.set_native_launch(False): CompiledKernel.run"),
    "floor": provider("floor"),
    "eager": provider("eager"),
}


def measure_shape(M: int, N: int, dtype: torch.dtype, names=tuple(LAUNCH_PROVIDERS), *,
                  deadline: float | None = None, samples: int | None = None, log=print) -> list[dict]:
    """Check, then time, every provider's calls at one shape; rows of :data:`COLUMNS`.

    ``fast_triton_launcher`` runs with the native launch switched off, and it is switched on again after.
    A provider that fails or refuses gets NaN times and the reason in ``check``.
    """
    require_cuda()
    x, weight, dy = make_inputs(M, N, dtype, seed=0)
    timer_args = {} if samples is None else {"samples": samples}
    rows = []
    for name in names:
        p, started = LAUNCH_PROVIDERS[name], time.perf_counter()
        before = native_launch.state.enabled
        set_native_launch(name != "fast_triton_launcher")
        try:
            if deadline is not None and started > deadline:
                calls, status = None, OUT_OF_TIME
            elif name == "cpp_floor" and p.refuses(x, weight, EPS):
                calls, status = None, f"refused: {p.refuses(x, weight, EPS)}"
            elif name == "cpp_floor":
                try:
                    calls, status = whole_calls(p, x, weight, dy, EPS, passes=PASSES), NOT_CHECKED
                except Exception as err:  # noqa: BLE001  no compiler, no CUDA_HOME: reported, the run goes on
                    calls, status = None, f"failed: {one_line(err)}"
            else:
                calls, status = prepare(p, whole_calls, x, weight, dy, EPS, passes=PASSES)
            for pass_ in PASSES:
                row = dict(M=M, N=N, dtype=str(dtype).removeprefix("torch."), provider=name, pass_=pass_,
                           whole_call_us=np.nan, host_us=np.nan, check=status)
                if calls is not None:
                    row["whole_call_us"] = float(np.median(time_whole_calls(calls[pass_], **timer_args)))
                    row["host_us"] = float(np.median(time_host_calls(calls[pass_], **timer_args)))
                rows.append(row)
        finally:
            set_native_launch(before)
        shown = " ".join(f"{r['pass_']} {r['whole_call_us']:.1f}/{r['host_us']:.1f}" for r in rows[-len(PASSES):])
        log(f"  {M}x{N} {name:21s} {time.perf_counter() - started:5.1f} s  whole/host us: {shown}  {status[:60]}")
        torch.cuda.empty_cache()
    return rows


#: The fast forward's host time taken apart (:func:`host_pieces`): the module's call contains the function's, which
#: contains launch_forward's, which contains the launch alone and the two allocations (siblings).
PIECES = ("module, x requires grad", "rmsnorm_fast, no grad", "launch_forward", "the launch alone",
          "two allocations")
#: What each piece adds: its own µs less those of the pieces it contains (``adds`` sums to the module's µs).
PIECE_ADDS = {"module, x requires grad": "nn.Module call, autograd's graph and saved tensors",
              "rmsnorm_fast, no grad": "the contract's checks and the rows' view",
              "launch_forward": "the config, the key, the arguments (beside the launch and the allocations)",
              "the launch alone": "the cached kernel's launch (native or Triton's, as launch_path says)",
              "two allocations": "torch.empty of y and rstd"}
#: Where the native launch is on, launch_forward is the C path's one call (csrc/fast_path.cpp): the launch alone and
#: the Python allocations beside it are not what it runs, so its own share is what the C call saves against them.
PIECE_ADDS_NATIVE = {**PIECE_ADDS, "launch_forward": "one C call: the key, at::empty of y and rstd and the launch, "
                     "from a kept plan (below zero: what it saves against the two pieces below, timed from Python)"}
PIECES_FILE = "launch_path_pieces.csv"


def host_pieces(M: int, N: int, dtype: torch.dtype, *, samples: int | None = None, device="cuda") -> list[dict]:
    """Where the fast forward's host µs go: :data:`PIECES`, each timed with :func:`rmsnorm_lab.time_host_calls`.

    The launch alone replays the arguments of one real call of the forward's launcher (recorded by wrapping
    ``rmsnorm.forward._launch`` once, the native launch switched off for that call) into the outputs that call
    allocated, so it costs what a cache hit costs and allocates nothing; with the native launch on, launch_forward
    is the C path's one call (csrc/fast_path.cpp), whose share may then come out below zero; launch_forward's own
    share is its µs less the launch's and the allocations'. Rows: M,
    N, dtype, piece, host_us, adds (what :data:`PIECE_ADDS` names: the piece's µs less the pieces it contains),
    launch_path.
    """
    from rmsnorm import FastRMSNorm, forward, launch_path, rmsnorm_fast

    x, weight, _ = make_inputs(M, N, dtype, device, seed=0)
    module = FastRMSNorm(N, eps=EPS, device=device, dtype=dtype)
    leaf = x.detach().clone().requires_grad_()
    recorded = []
    real = forward._launch

    def record(*args, **kwargs):
        recorded.append((args, kwargs))
        return real(*args, **kwargs)

    forward._launch, native = record, native_launch.state.enabled
    set_native_launch(False)  # through the Python path, whose launch is recorded (the C path launches from a plan)
    try:
        forward.launch_forward(x, weight, EPS)
    finally:
        forward._launch = real
        set_native_launch(native)
    args, kwargs = recorded[0]

    def no_grad():
        with torch.no_grad():
            return rmsnorm_fast(x, weight, EPS)

    calls = {"module, x requires grad": lambda: module(leaf), "rmsnorm_fast, no grad": no_grad,
             "launch_forward": lambda: forward.launch_forward(x, weight, EPS),
             "the launch alone": lambda: real(*args, **kwargs),
             "two allocations": lambda: (torch.empty((M, N), dtype=dtype, device=device),
                                         torch.empty((M,), dtype=torch.float32, device=device))}
    timer_args = {} if samples is None else {"samples": samples}
    us = {piece: float(np.median(time_host_calls(calls[piece], **timer_args))) for piece in PIECES}
    module, function, launcher, launch, allocations = (us[piece] for piece in PIECES)
    adds = dict(zip(PIECES, (module - function, function - launcher, launcher - launch - allocations, launch,
                             allocations)))
    return [dict(M=M, N=N, dtype=str(dtype).removeprefix("torch."), piece=piece, host_us=us[piece],
                 adds=adds[piece], launch_path=launch_path()) for piece in PIECES]


def render_pieces(pieces: pd.DataFrame) -> str:
    """The pieces as a Markdown table: each piece's host µs, what it adds, and what that is (:data:`PIECE_ADDS`, or
    :data:`PIECE_ADDS_NATIVE` for rows timed with the native launch on)."""
    frame = pieces.assign(shape=[f"{r.M} × {r.N} {r.dtype}" for r in pieces.itertuples()],
                          what=[(PIECE_ADDS_NATIVE if r.launch_path == "native" else PIECE_ADDS)[r.piece]
                                for r in pieces.itertuples()])
    return _md(frame[["shape", "launch_path", "piece", "host_us", "adds", "what"]].rename(
        columns={"host_us": "host µs", "adds": "adds µs", "what": "what it adds"}))


def _value(table, shape, name, pass_, column) -> float:
    M, N, dtype = shape
    hit = table[(table.M == M) & (table.N == N) & (table.dtype == dtype) & (table.provider == name)
                & (table.pass_ == pass_)]
    return float(hit[column].iloc[0]) if len(hit) else float("nan")


def targets(table: pd.DataFrame, steps: pd.DataFrame | None = None) -> pd.DataFrame:
    """Issue 41's targets: the measured value, its limit, met or not (None where a number is missing).

    Args:
        table: rows of launch_path.csv (:data:`COLUMNS`).
        steps: rows of the Llama step table (rmsnorm_lab.model.COLUMNS), or None.

    Returns:
        DataFrame with columns target, shape, value, limit, met.
    """
    rows = []

    def add(target, shape, value, limit):
        met = None if np.isnan(value) or np.isnan(limit) else bool(value <= limit)
        rows.append(dict(target=target, shape=shape, value=value, limit=limit, met=met))

    for shape in table[["M", "N", "dtype"]].drop_duplicates().itertuples(index=False, name=None):
        label = f"{shape[0]} × {shape[1]} {shape[2]}"
        fast_fwd = _value(table, shape, "fast", "forward", "host_us")
        add("host, forward ≤ C++ floor + 10 µs", label, fast_fwd, _value(table, shape, "cpp_floor", "forward",
                                                                           "host_us") + 10)
        add("host, forward ≤ 1.5 × torch.nn.RMSNorm's (stretch)", label, fast_fwd,
            1.5 * _value(table, shape, "eager_module", "forward", "host_us"))
        add("whole call, forward + backward ≤ 1.5 × torch.nn.RMSNorm's", label,
            _value(table, shape, "fast", "forward_backward", "whole_call_us"),
            1.5 * _value(table, shape, "eager_module", "forward_backward", "whole_call_us"))
    if steps is not None:
        eager = steps[(steps["size"] == "host_bound") & (steps["mode"] == "eager")].set_index("variant")
        ratio = (float(eager["tokens_per_s"].get("fast", np.nan)) / float(eager["tokens_per_s"].get("original", np.nan))
                 if len(eager) else float("nan"))
        rows.append(dict(target="host-bound Llama step ≥ 1.05 × the original's tokens/s", shape="host_bound, eager",
                         value=ratio, limit=1.05, met=None if np.isnan(ratio) else bool(ratio >= 1.05)))
    return pd.DataFrame(rows, columns=["target", "shape", "value", "limit", "met"])


def summary(table: pd.DataFrame) -> pd.DataFrame:
    """One row per (shape, provider), one column per (pass, time): µs per call, in the run's order; then its check."""
    wide = table.pivot_table(index=["M", "N", "dtype", "provider"], columns="pass_",
                             values=["whole_call_us", "host_us"], sort=False, dropna=False)
    wide.columns = [f"{pass_} {value.removesuffix('_us')} µs" for value, pass_ in wide.columns]
    wide = wide[[f"{p} {v} µs" for p in PASSES for v in ("whole_call", "host") if f"{p} {v} µs" in wide.columns]]
    checks = table.groupby(["M", "N", "dtype", "provider"], sort=False)["check"].first()
    return wide.reindex(checks.index).assign(check=checks.str.slice(0, 70))  # measured rows, not the index's product


def _md(frame: pd.DataFrame, digits: int = 1) -> str:
    """``frame`` as a Markdown table (floats to ``digits`` places, NaN as "–"; no tabulate needed)."""
    def cell(v):
        if isinstance(v, float):
            return "–" if np.isnan(v) else f"{v:.{digits}f}"
        return str(v)
    lines = ["| " + " | ".join(map(str, frame.columns)) + " |", "|" + " --- |" * len(frame.columns)]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in frame.itertuples(index=False, name=None)]
    return "\n".join(lines)


def markdown(table: pd.DataFrame, steps: pd.DataFrame | None = None) -> str:
    """The whole-call table and issue 41's targets (the step's among them when ``steps`` is given); the step and
    decode tables themselves are :func:`rmsnorm_lab.pages.render_model_step` and ``render_decode``'s."""
    return "\n".join([_md(summary(table).reset_index()), "", "Targets (reported, never asserted):", "",
                      _md(targets(table, steps), 2)])

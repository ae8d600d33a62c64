"""Whole-call time: what one call of the norm costs a model, through each provider's public entry point.

Kernel time (lesson 12's side-by-side) is what the GPU spends; a model calls the norm as a
Python function, and feels the whole call: host, dispatch, launches and kernels. For every
shape of :data:`SHAPES` and provider of :data:`WHOLE_CALL`, the calls of
:func:`rmsnorm_lab.providers.whole_calls` (``forward`` without grad, ``forward_grad``,
``forward_backward``) are checked against the float64 oracle
(:func:`rmsnorm_lab.providers.prepare`), then timed with lesson 07's timers:

- ``whole_call_us``: :func:`rmsnorm_lab.time_whole_calls`, CUDA events around 20
  back-to-back calls, median of 50 samples (what a model's step sees);
- ``host_us``: :func:`rmsnorm_lab.time_host_calls`, CPU wall time per call of calls
  issued without synchronising, median of 20 samples of 50;
- ``graph_us``: :func:`rmsnorm_lab.time_graph_replay`, the calls captured in a CUDA
  graph and replayed (for :data:`GRAPH_PROVIDERS`; forward + backward captured whole);
- ``kernel_us``: :func:`rmsnorm_lab.kernel_time_us`, the kernels' own time, L2 flushed
  before every call (for ``forward`` and ``forward_backward``).

A provider that refuses a shape, fails to build or fails the oracle gets its rows with
NaN times and the reason in ``check``; the run goes on. ``floor`` (:mod:`rmsnorm_lab.floor`)
is what any Triton path costs the host: the fast kernels behind a bare autograd.Function.
Benchmarks never assert a speed-up: :func:`targets` reports issue 15's targets, met or not.

Source: notebooks/07_benchmark.ipynb (whole call vs kernel time); issue 15.
"""

from __future__ import annotations

import time

import numpy as np
import pandas as pd
import torch

from rmsnorm.testing import make_inputs
from .providers import EPS, WHOLE_CALL_PASSES, one_line, prepare, provider, whole_calls
from .timing import kernel_time_us, require_cuda, time_graph_replay, time_host_calls, time_whole_calls

#: The shapes (M, N, dtype): four host-bound for everyone, then one GPU-bound.
SHAPES = (
    (1, 4096, torch.bfloat16), (64, 4096, torch.bfloat16), (4096, 4096, torch.bfloat16),
    (128, 257, torch.float32), (32768, 4096, torch.bfloat16),
)
#: The shapes at which the host, not the GPU, sets the pace of every implementation.
HOST_BOUND = SHAPES[:4]
#: The providers timed, by name (rmsnorm_lab.providers).
WHOLE_CALL = ("fast", "floor", "article", "eager", "compile", "liger", "quack")
#: The providers also replayed from a CUDA graph.
GRAPH_PROVIDERS = ("fast", "eager")
#: The calls whose kernels are also timed on their own (forward_grad launches the forward's).
KERNEL_PASSES = ("forward", "forward_backward")
#: Columns of whole_call.csv; times in µs per call, NaN where not measured.
COLUMNS = ("M", "N", "dtype", "provider", "pass_", "whole_call_us", "host_us", "graph_us", "kernel_us", "check")
#: ``check`` of a provider that the run's time budget left out.
OUT_OF_TIME = "not run: the run's time budget was spent"


def fill_times(row: dict, name: str, pass_: str, fn, graph_providers, samples: dict) -> None:
    """Fill ``row``'s times (:data:`COLUMNS`, µs) for ``fn``; a timer that fails leaves NaN and says why in ``check``.

    Args:
        row: a row with ``check`` set; its time columns are written.
        name, pass_: the provider and the call (``kernel_us`` only for :data:`KERNEL_PASSES`).
        fn: the zero-argument call, checked against the oracle already.
        graph_providers: providers also replayed from a CUDA graph (``graph_us``).
        samples: keyword arguments of the whole-call and host timers (``{"samples": 5}``, or ``{}``).
    """
    timers = [("whole_call_us", lambda: float(np.median(time_whole_calls(fn, **samples)))),
              ("host_us", lambda: float(np.median(time_host_calls(fn, **samples))))]
    if pass_ in KERNEL_PASSES:
        timers.append(("kernel_us", lambda: kernel_time_us(fn)))
    if name in graph_providers:
        timers.append(("graph_us", lambda: time_graph_replay(fn)))
    for column, timer in timers:
        try:
            row[column] = timer()
        except Exception as err:  # noqa: BLE001  e.g. a call that cannot be captured in a graph
            row["check"] += f"; {column} failed: {one_line(err)}"


def measure_shape(
    M: int, N: int, dtype: torch.dtype, providers=WHOLE_CALL, *, passes=WHOLE_CALL_PASSES,
    graph_providers=GRAPH_PROVIDERS, deadline: float | None = None, samples: int | None = None, log=print,
) -> list[dict]:
    """Check, then time, every provider's whole calls at one shape.

    Args:
        M, N, dtype: the shape of x (seeded inputs on the default device, CUDA; eps = 1e-6).
        providers: provider names, timed in this order.
        passes: which of ``forward``, ``forward_grad``, ``forward_backward``.
        graph_providers: providers also timed as a CUDA-graph replay.
        deadline: ``time.perf_counter()`` value after which providers are left out (:data:`OUT_OF_TIME`).
        samples: samples of the whole-call and host timers (default: theirs, 50 and 20).
        log: called with one line per provider.

    Returns:
        One dict per (provider, pass) with the keys of :data:`COLUMNS`.

    Raises:
        BenchmarkUnavailableError: no CUDA GPU.
    """
    require_cuda()
    x, weight, dy = make_inputs(M, N, dtype, seed=0)
    dtype_name = str(dtype).removeprefix("torch.")
    rows = []
    for name in providers:
        started = time.perf_counter()
        if deadline is not None and started > deadline:
            calls, status = None, OUT_OF_TIME
        else:
            calls, status = prepare(provider(name), whole_calls, x, weight, dy, EPS, passes=passes)
        for pass_ in passes:
            row = dict(M=M, N=N, dtype=dtype_name, provider=name, pass_=pass_, whole_call_us=np.nan, host_us=np.nan,
                       graph_us=np.nan, kernel_us=np.nan, check=status)
            if calls is not None:
                fill_times(row, name, pass_, calls[pass_], graph_providers,
                           {} if samples is None else {"samples": samples})
            rows.append(row)
        shown = " ".join(f"{r['pass_']} {r['whole_call_us']:.1f}/{r['host_us']:.1f}" for r in rows[-len(passes):])
        log(f"  {M}x{N} {dtype_name:8s} {name:8s} {time.perf_counter() - started:5.1f} s  "
            + (f"whole/host us: {shown}" if calls is not None else status))
        del calls
        torch.cuda.empty_cache()
    return rows


def _shape_label(M, N, dtype) -> str:
    return f"{M} × {N} {dtype}"


def summary(table: pd.DataFrame, pass_: str = "forward_backward", value: str = "whole_call_us") -> pd.DataFrame:
    """One row per shape, one column per provider: ``value`` (µs) of ``pass_``, in the run's order.

    Args:
        table: rows of whole_call.csv (:data:`COLUMNS`).
        pass_: ``forward``, ``forward_grad`` or ``forward_backward``.
        value: a time column.

    Returns:
        DataFrame indexed by (M, N, dtype), columns the providers that have a row there.
    """
    keys = ["M", "N", "dtype"]
    sub = table[table["pass_"] == pass_]
    pivot = sub.pivot_table(index=keys, columns="provider", values=value, sort=False, dropna=False)
    order = [p for p in dict.fromkeys(sub["provider"]) if p in pivot.columns]
    return pivot[order]


def _value(table, M, N, dtype, name, pass_, column) -> float:
    at = (table.M == M) & (table.N == N) & (table.dtype == dtype)
    hit = table[at & (table.provider == name) & (table.pass_ == pass_)]
    return float(hit[column].iloc[0]) if len(hit) else float("nan")


def targets(table: pd.DataFrame) -> pd.DataFrame:
    """Issue 15's targets for the fast path, per shape: the measured value, the limit, met or not.

    Reported, never asserted. A target whose numbers are missing (a provider not timed)
    has ``met`` None.

    Returns:
        DataFrame with columns target, shape, value, limit (both µs), met (bool or None).
    """
    rows = []

    def add(target, shape, value, limit, strict=False):
        met = None if np.isnan(value) or np.isnan(limit) else bool(value < limit if strict else value <= limit)
        rows.append(dict(target=target, shape=_shape_label(*shape), value=value, limit=limit, met=met))

    host_bound = {(m, n, str(d).removeprefix("torch.")) for m, n, d in HOST_BOUND}
    for shape in table[["M", "N", "dtype"]].drop_duplicates().itertuples(index=False, name=None):
        def v(name, pass_, column, shape=shape):
            return _value(table, *shape, name, pass_, column)

        for pass_ in ("forward", "forward_grad"):
            add(f"host, {pass_} ≤ floor + 5 µs", shape, v("fast", pass_, "host_us"), v("floor", pass_, "host_us") + 5)
        add("host, forward + backward ≤ 1.5 × eager", shape, v("fast", "forward_backward", "host_us"),
            1.5 * v("eager", "forward_backward", "host_us"))
        add("CUDA graph, forward + backward ≤ 1.0 × eager's graph", shape, v("fast", "forward_backward", "graph_us"),
            v("eager", "forward_backward", "graph_us"))
        fast, eager = v("fast", "forward_backward", "whole_call_us"), v("eager", "forward_backward", "whole_call_us")
        if shape in host_bound:
            add("whole call, forward + backward ≤ 1.5 × eager", shape, fast, 1.5 * eager)
        else:
            add("whole call, forward + backward ≤ 1.0 × eager", shape, fast, eager)
        for other in ("compile", "quack", "liger"):
            add(f"whole call, forward + backward < {other}", shape, fast, v(other, "forward_backward", "whole_call_us"),
                strict=True)
    return pd.DataFrame(rows, columns=["target", "shape", "value", "limit", "met"])

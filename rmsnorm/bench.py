"""Timing helpers: the article's benchmark protocol, kernel-only time, and a small sweep.

Three ways to put a number on one call, from widest to narrowest:

- **Whole call** (the article's protocol): CUDA events around whole Python
  calls (allocations, contract checks, autograd and launches included);
  20 warm-up calls excluded; 50 samples of 20 calls each; per-call µs =
  sample time / 20; the median of the 50 samples is reported.
- **Graph replay** (``triton.testing.do_bench_cudagraph``): the same calls
  captured once in a CUDA graph and replayed, so the host (Python, dispatch,
  launch) is out of the interval; what is left is GPU work plus the short
  gaps between kernels.
- **Device kernels** (``torch.profiler``): the sum of the durations of the
  kernels (and memsets/copies) that one call puts on the GPU, with no gaps.

Benchmarks never assert a speed-up. Every timing function refuses to run
without CUDA (:class:`BenchmarkUnavailableError`): Triton's CPU interpreter
runs the kernels in NumPy, and its times say nothing about a GPU. Without a
GPU, read the committed H200 results with :func:`load_results`.

Needs pandas (the ``course``/``test`` extras), unlike the rest of the package.

Source: notebooks/07_benchmark.ipynb; the protocol is the original article's
("Quale tempo misura il benchmark?"); GB/s from the bytes moved follows
Triton's tutorials; graph replay follows ``triton.testing.do_bench_cudagraph``.
"""

from __future__ import annotations

import json
import platform
import subprocess
import warnings
from collections import Counter
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable

import numpy as np
import pandas as pd
import torch
import triton

from .autograd import rmsnorm
from .contract import MAX_SCRATCH_BYTES, scratch_bytes
from .device import default_device
from .forward import forward_op
from .reference import rmsnorm_reference
from .testing import assert_close, make_inputs, oracle, poisoned_outputs

#: Calls run and thrown away before any sample (compilation, caches, allocator).
WARMUP_CALLS = 20
#: Timed samples; the reported number is their median.
SAMPLES = 50
#: Calls inside one sample, between one pair of CUDA events (per-call µs = sample / 20).
CALLS_PER_SAMPLE = 20
#: The article's benchmark shape (M, N), in float32.
DEFAULT_SHAPE = (128, 257)
#: Sweep grid: every (M, N) whose dgamma scratch M·N·4 bytes fits MAX_SCRATCH_BYTES.
SWEEP_M = (128, 1024, 8192)
SWEEP_N = (257, 1024, 4096)
#: What is timed: the forward alone, or forward + backward through autograd.
PATHS = ("forward", "forward_backward")
#: Implementations: the package's kernels, the PyTorch reference, Liger-Kernel (when importable).
IMPLS = ("triton", "reference", "liger")
#: ``do_bench_cudagraph``'s repetition budget, in ms of GPU time per measurement.
GRAPH_REP_MS = 20
#: Calls recorded by the profiler for the device-kernel time.
PROFILED_CALLS = 20
#: Where the committed H200 results live.
RESULTS_DIR = Path(__file__).resolve().parent.parent / "results" / "h200"
#: Columns of the summary statistics (all in µs per call, except ``samples``).
STAT_COLUMNS = ("median_us", "mean_us", "min_us", "max_us", "std_us", "samples")


class BenchmarkUnavailableError(RuntimeError):
    """Timing was asked for on a machine without a CUDA GPU."""


def require_cuda() -> None:
    """Raise unless a CUDA GPU is usable: no silent CPU timing.

    Raises:
        BenchmarkUnavailableError: ``torch.cuda.is_available()`` is False.
    """
    if not torch.cuda.is_available():
        raise BenchmarkUnavailableError(
            "rmsnorm.bench: timing needs a CUDA GPU and this machine has none. Here the kernels run in "
            "Triton's CPU interpreter, whose times say nothing about a GPU. Read the committed H200 "
            "results with rmsnorm.bench.load_results() instead."
        )


# --------------------------------------------------------------------------- the calls


def _liger_function():
    """Liger-Kernel's RMSNorm autograd Function, or the reason it is not importable."""
    try:
        from liger_kernel.ops.rms_norm import LigerRMSNormFunction
    except Exception as err:  # ImportError, or a Liger/Triton version mismatch
        return None, f"{type(err).__name__}: {err}"
    return LigerRMSNormFunction, None


def liger_status() -> str | None:
    """None when Liger-Kernel's RMSNorm imports, else one line saying why not."""
    return _liger_function()[1]


def make_calls(
    x: torch.Tensor, gamma: torch.Tensor, dy: torch.Tensor, epsilon: float = 1e-6, *, include_liger: bool = True
) -> dict[tuple[str, str], Callable[[], Any]]:
    """The callables the benchmark times, keyed by (path, impl).

    ``forward``: ``forward_op(x, gamma)`` → (y, rstd); ``rmsnorm_reference``
    → y; Liger → y. ``forward_backward``: ``impl(x, gamma)`` then
    ``.backward(dy)`` through autograd, on private leaf copies of x and gamma
    whose ``.grad`` is set to None first (each call does the same work, no
    accumulation); returns (dx, dgamma). Liger runs with ``casting_mode="llama"``
    and ``in_place=False`` (in place, it would overwrite ``dy`` with dx).

    Args:
        x: (M, N) float32/float16, contiguous, CUDA (or CPU under the interpreter).
        gamma: (N,) weight, dtype and device of ``x``.
        dy: (M, N) upstream gradient, like ``x``.
        epsilon: finite real number > 0.
        include_liger: add Liger-Kernel's callables when it imports.

    Returns:
        dict mapping (path, impl) to a zero-argument callable.

    Source: notebooks/07_benchmark.ipynb.
    """
    impls: dict[str, Callable] = {"triton": rmsnorm, "reference": rmsnorm_reference}
    liger, _ = _liger_function() if include_liger else (None, None)
    if liger is not None:
        impls["liger"] = lambda a, g, e: liger.apply(a, g, e, 0.0, "llama", False)
    calls: dict[tuple[str, str], Callable[[], Any]] = {
        ("forward", "triton"): lambda: forward_op(x, gamma, epsilon),
        ("forward", "reference"): lambda: rmsnorm_reference(x, gamma, epsilon),
    }
    if "liger" in impls:
        calls[("forward", "liger")] = lambda: impls["liger"](x, gamma, epsilon)
    for impl, fn in impls.items():
        calls[("forward_backward", impl)] = _train_step(fn, x, gamma, dy, epsilon)
    return calls


def _train_step(fn, x, gamma, dy, epsilon) -> Callable[[], tuple[torch.Tensor, torch.Tensor]]:
    x_leaf = x.detach().clone().requires_grad_(True)
    gamma_leaf = gamma.detach().clone().requires_grad_(True)

    def step():
        x_leaf.grad = None
        gamma_leaf.grad = None
        fn(x_leaf, gamma_leaf, epsilon).backward(dy)
        return x_leaf.grad, gamma_leaf.grad

    return step


def check_calls(
    calls: dict[tuple[str, str], Callable[[], Any]], x: torch.Tensor, gamma: torch.Tensor, dy: torch.Tensor,
    epsilon: float = 1e-6,
) -> list[str]:
    """Compare every callable's outputs with the float64 oracle, before any timing.

    Runs each callable once with NaN-poisoned kernel outputs and compares y
    (and rstd, for ``forward_op``), or dx and dgamma, with
    :func:`rmsnorm.testing.oracle` through :func:`rmsnorm.testing.assert_close`
    (the declared tolerance of the dtype).

    Args:
        calls: from :func:`make_calls` on the same x, gamma, dy, epsilon.
        x, gamma, dy, epsilon: the inputs the callables were built on.

    Returns:
        One line per comparison that passed, e.g. ``'forward/triton y 128x257 float32'``.

    Raises:
        AssertionError: the first comparison that fails (nothing should be timed then).

    Source: notebooks/07_benchmark.ipynb.
    """
    y64, dx64, dgamma64 = oracle(x, gamma, dy, epsilon)
    rstd64 = torch.rsqrt(x.detach().cpu().double().square().mean(-1) + epsilon)
    shape = f"{x.shape[0]}x{x.shape[1]} {str(x.dtype).removeprefix('torch.')}"
    passed = []
    with poisoned_outputs():
        for (path, impl), call in calls.items():
            out = call()
            if path == "forward":
                y = out[0] if isinstance(out, tuple) else out
                pairs = [("y", y, y64)] + ([("rstd", out[1], rstd64)] if isinstance(out, tuple) else [])
            else:
                pairs = [("dx", out[0], dx64), ("dgamma", out[1], dgamma64)]
            for name, actual, expected in pairs:
                label = f"{path}/{impl} {name} {shape}"
                assert_close(actual, expected, dtype=x.dtype, msg=lambda m, label=label: f"{label}: {m}")
                passed.append(label)
    return passed


# --------------------------------------------------------------------------- the timers


def time_whole_calls(
    fn: Callable[[], Any], *, warmup: int = WARMUP_CALLS, samples: int = SAMPLES, calls_per_sample: int = CALLS_PER_SAMPLE
) -> np.ndarray:
    """The article's protocol: CUDA events around whole calls.

    ``warmup`` calls are run and not timed. Then, ``samples`` times: the GPU is
    synchronised, a start event is recorded, ``fn`` is called
    ``calls_per_sample`` times, an end event is recorded. The events measure an
    interval of the GPU's timeline: while the host is slower than the GPU (small
    shapes), it includes the time the GPU waits for the host's next launch.

    Args:
        fn: zero-argument callable that enqueues GPU work (its result is ignored).
        warmup: calls excluded before timing (the article's first "20").
        samples: timed samples (the article's 50).
        calls_per_sample: calls between one pair of events (the article's second "20").

    Returns:
        (samples,) float64 array: µs per call of each sample (sample time / calls_per_sample).

    Raises:
        BenchmarkUnavailableError: no CUDA GPU.

    Source: notebooks/07_benchmark.ipynb; the original article, "Quale tempo misura il benchmark?".
    """
    require_cuda()
    for _ in range(warmup):
        fn()
    events = []
    for _ in range(samples):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda.synchronize()  # each sample starts on an idle GPU
        start.record()
        for _ in range(calls_per_sample):
            fn()
        end.record()
        events.append((start, end))
    torch.cuda.synchronize()
    return np.array([s.elapsed_time(e) * 1e3 / calls_per_sample for s, e in events])  # ms → µs


def time_graph_replay(fn: Callable[[], Any], *, rep_ms: float = GRAPH_REP_MS) -> float:
    """Kernel-only time: the calls captured in a CUDA graph and replayed.

    Uses ``triton.testing.do_bench_cudagraph``: ``fn`` is captured many times in
    one graph (allocations come from the graph's private memory pool, so calls
    that allocate are safe to capture) and the replays are timed with CUDA
    events. The host's work is out of the interval.

    Args:
        fn: zero-argument callable of GPU work; must be warmed up (compiled) already.
        rep_ms: GPU time, in ms, that one replay should last.

    Returns:
        Median µs per call over do_bench_cudagraph's replays.

    Raises:
        BenchmarkUnavailableError: no CUDA GPU.

    Source: notebooks/07_benchmark.ipynb; ``triton.testing.do_bench_cudagraph``.
    """
    require_cuda()
    from triton.testing import do_bench_cudagraph

    torch.cuda.synchronize()
    return float(do_bench_cudagraph(fn, rep=rep_ms, return_mode="median")) * 1e3  # ms → µs


@dataclass(frozen=True)
class KernelProfile:
    """What one call puts on the GPU, from ``torch.profiler``.

    Attributes:
        device_us: summed duration of the call's device operations, µs per call.
        ops_per_call: device operations (kernels, memsets, copies) per call.
        by_name: per operation name: (launches per call, µs per call).
    """

    device_us: float
    ops_per_call: float
    by_name: dict[str, tuple[float, float]]


def profile_kernels(fn: Callable[[], Any], *, calls: int = PROFILED_CALLS, warmup: int = WARMUP_CALLS) -> KernelProfile:
    """Sum the device time of the kernels one call launches (``torch.profiler``).

    Args:
        fn: zero-argument callable of GPU work.
        calls: calls recorded (results are divided by it).
        warmup: calls run before recording.

    Returns:
        A :class:`KernelProfile` (µs per call; launch counts per call).

    Raises:
        BenchmarkUnavailableError: no CUDA GPU.
        RuntimeError: the profiler recorded no device operation.

    Source: notebooks/07_benchmark.ipynb; PyTorch profiler recipe.
    """
    require_cuda()
    from torch.profiler import ProfilerActivity, profile

    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    with warnings.catch_warnings():  # one profiling cycle: its "clears events" warning does not apply
        warnings.filterwarnings("ignore", message=".*Profiler clears events.*")
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            for _ in range(calls):
                fn()
            torch.cuda.synchronize()
    device_events = [
        e for e in prof.events()
        if e.device_type == torch.autograd.DeviceType.CUDA and not getattr(e, "is_user_annotation", False)
    ]
    if not device_events:
        raise RuntimeError("torch.profiler recorded no device operation (is CUPTI available?)")
    counts, durations = Counter(), Counter()
    for e in device_events:
        counts[e.name] += 1
        durations[e.name] += e.time_range.elapsed_us()
    by_name = {name: (counts[name] / calls, durations[name] / calls) for name in counts}
    return KernelProfile(sum(durations.values()) / calls, len(device_events) / calls, by_name)


def copy_bandwidth_gbps(nbytes: int = 1 << 30) -> float:
    """The device's copy ceiling: a large device-to-device copy, bytes read + written per second.

    Args:
        nbytes: size of the copied buffer in bytes (default 1 GiB, far larger than L2).

    Returns:
        GB/s (10⁹ bytes per second), counting 2 × ``nbytes`` per copy; median of ``triton.testing.do_bench``.

    Raises:
        BenchmarkUnavailableError: no CUDA GPU.

    Source: notebooks/07_benchmark.ipynb; /work/.library METHOD ("measure the two ceilings").
    """
    require_cuda()
    from triton.testing import do_bench

    src = torch.randint(0, 256, (nbytes,), dtype=torch.uint8, device="cuda")  # never zeros only
    dst = torch.empty_like(src)
    ms = do_bench(lambda: dst.copy_(src), return_mode="median")
    return gbps(2 * nbytes, ms * 1e3)


# --------------------------------------------------------------------------- bytes and rates


def forward_bytes(M: int, N: int, dtype: torch.dtype = torch.float32) -> int:
    """Bytes the forward kernel moves: reads x (M·N) and gamma (N), writes y (M·N) and rstd (M, float32).

    Returns:
        ``(2·M·N + N) · itemsize + 4·M`` bytes.
    """
    size = torch.empty((), dtype=dtype).element_size()
    return (2 * M * N + N) * size + 4 * M


def forward_backward_bytes(M: int, N: int, dtype: torch.dtype = torch.float32) -> int:
    """Bytes the three kernels of one forward + backward move.

    forward: reads x, gamma; writes y, rstd. dx kernel: reads x, gamma, dy,
    rstd; writes dx and the float32 partial (M·N·4). dgamma kernel: reads
    partial; writes dgamma (N).

    Returns:
        ``(5·M·N + 3·N) · itemsize + 8·M·N + 8·M`` bytes.
    """
    size = torch.empty((), dtype=dtype).element_size()
    return (5 * M * N + 3 * N) * size + 8 * M * N + 8 * M


def gbps(nbytes: float, us: float) -> float:
    """Rate in GB/s (10⁹ bytes/s) of ``nbytes`` bytes moved in ``us`` µs."""
    return nbytes / (us * 1e3)


def bytes_moved(path: str, M: int, N: int, dtype: torch.dtype = torch.float32) -> int:
    """:func:`forward_bytes` for ``path == 'forward'``, else :func:`forward_backward_bytes`."""
    return forward_bytes(M, N, dtype) if path == "forward" else forward_backward_bytes(M, N, dtype)


def sweep_shapes() -> tuple[list[tuple[int, int]], list[tuple[int, int]]]:
    """The sweep grid split by the scratch contract.

    Returns:
        (allowed, skipped): (M, N) pairs with M·N·4 bytes ≤ MAX_SCRATCH_BYTES, and the others.
    """
    grid = [(M, N) for M in SWEEP_M for N in SWEEP_N]
    allowed = [s for s in grid if scratch_bytes(*s) <= MAX_SCRATCH_BYTES]
    return allowed, [s for s in grid if s not in allowed]


# --------------------------------------------------------------------------- protocol runs


def _order(keys, turn: int):
    keys = list(keys)
    shift = turn % len(keys)
    return keys[shift:] + keys[:shift]  # rotate who goes first from one repeat to the next


def _checked_calls(M, N, dtype, epsilon, include_liger, seed) -> dict:
    """Seeded inputs of shape (M, N), their callables, every output checked against the oracle."""
    x, gamma, dy = make_inputs(M, N, dtype, device=default_device(), seed=seed)
    calls = make_calls(x, gamma, dy, epsilon, include_liger=include_liger)
    check_calls(calls, x, gamma, dy, epsilon)
    return calls


def run_protocol(
    M: int = DEFAULT_SHAPE[0], N: int = DEFAULT_SHAPE[1], dtype: torch.dtype = torch.float32, *,
    repeats: int = 1, epsilon: float = 1e-6, include_liger: bool = True, seed: int = 0,
) -> pd.DataFrame:
    """Check every callable against the oracle, then time it with the article's protocol.

    Args:
        M, N: shape of x.
        dtype: float32 or float16.
        repeats: full protocol runs per callable (their spread shows the noise).
        epsilon: finite real number > 0.
        include_liger: time Liger-Kernel too when it imports.
        seed: for :func:`rmsnorm.testing.make_inputs`.

    Returns:
        Long DataFrame, one row per sample: path, impl, repeat, sample, M, N,
        dtype, us_per_call (µs).

    Raises:
        BenchmarkUnavailableError: no CUDA GPU.
        AssertionError: an output does not match the oracle (nothing was timed).

    Source: notebooks/07_benchmark.ipynb.
    """
    require_cuda()
    calls = _checked_calls(M, N, dtype, epsilon, include_liger, seed)
    rows = []
    for repeat in range(repeats):
        for key in _order(calls, repeat):
            for i, us in enumerate(time_whole_calls(calls[key])):
                rows.append((*key, repeat, i, M, N, str(dtype).removeprefix("torch."), us))
    return pd.DataFrame(rows, columns=["path", "impl", "repeat", "sample", "M", "N", "dtype", "us_per_call"])


def measure_shape(
    M: int, N: int, dtype: torch.dtype = torch.float32, *, epsilon: float = 1e-6, include_liger: bool = True, seed: int = 0,
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Check, then time one shape three ways: whole calls, graph replay, device kernels.

    Returns:
        (rows, kernels): ``rows`` has one row per (path, impl) with M, N, dtype,
        bytes, whole_call_us (median), whole_call_mean_us, graph_us,
        device_us, device_ops_per_call, gbps_whole, gbps_graph, gbps_device;
        ``kernels`` one row per device operation name: path, impl, M, N,
        name, launches_per_call, us_per_call.

    Raises:
        BenchmarkUnavailableError: no CUDA GPU.
        AssertionError: an output does not match the oracle (nothing was timed).

    Source: notebooks/07_benchmark.ipynb.
    """
    require_cuda()
    calls = _checked_calls(M, N, dtype, epsilon, include_liger, seed)
    dtype_name = str(dtype).removeprefix("torch.")
    rows, kernels = [], []
    for (path, impl), fn in calls.items():
        whole = time_whole_calls(fn)
        graph = time_graph_replay(fn)
        prof = profile_kernels(fn)
        nbytes = bytes_moved(path, M, N, dtype)
        median = float(np.median(whole))
        rows.append({
            "path": path, "impl": impl, "M": M, "N": N, "dtype": dtype_name, "bytes": nbytes,
            "whole_call_us": median, "whole_call_mean_us": float(whole.mean()), "graph_us": graph,
            "device_us": prof.device_us, "device_ops_per_call": prof.ops_per_call,
            "gbps_whole": gbps(nbytes, median), "gbps_graph": gbps(nbytes, graph), "gbps_device": gbps(nbytes, prof.device_us),
        })
        for name, (launches, us) in sorted(prof.by_name.items(), key=lambda kv: -kv[1][1]):
            kernels.append({"path": path, "impl": impl, "M": M, "N": N, "name": name[:120],
                            "launches_per_call": launches, "us_per_call": us})
    return pd.DataFrame(rows), pd.DataFrame(kernels)


def run_sweep(dtype: torch.dtype = torch.float32, *, include_liger: bool = True) -> tuple[pd.DataFrame, pd.DataFrame]:
    """:func:`measure_shape` over every allowed shape of :func:`sweep_shapes`.

    Returns:
        (sweep, kernels): the concatenated DataFrames of :func:`measure_shape`.

    Raises:
        BenchmarkUnavailableError: no CUDA GPU.
        AssertionError: an output does not match the oracle.

    Source: notebooks/07_benchmark.ipynb.
    """
    require_cuda()
    parts = [measure_shape(M, N, dtype, include_liger=include_liger) for M, N in sweep_shapes()[0]]
    return pd.concat([p[0] for p in parts], ignore_index=True), pd.concat([p[1] for p in parts], ignore_index=True)


# --------------------------------------------------------------------------- tables (any machine)


def summarize(samples: pd.DataFrame, keys=("path", "impl", "repeat", "M", "N", "dtype")) -> pd.DataFrame:
    """Median, mean, min, max, std (µs per call) and sample count per group of samples.

    Args:
        samples: long DataFrame with a ``us_per_call`` column (from :func:`run_protocol`).
        keys: grouping columns present in ``samples``.

    Returns:
        One row per group: the keys, then :data:`STAT_COLUMNS`.
    """
    keys = [k for k in keys if k in samples.columns]
    stats = samples.groupby(keys, sort=False)["us_per_call"].agg(["median", "mean", "min", "max", "std", "count"])
    stats.columns = list(STAT_COLUMNS)
    return stats.reset_index()


def difference_table(table: pd.DataFrame, value: str = "median_us", keys=("path",), reference: str = "reference") -> pd.DataFrame:
    """The article's comparison: impl − reference in µs, and as % of the reference.

    ``percent = 100 · (impl − reference) / reference``: the difference divided
    by the reference's time, as in the article. Negative means the impl took
    less time than the reference on this measurement; nothing more.

    Args:
        table: one row per (keys…, impl) with a ``value`` column in µs.
        value: the column compared (``median_us``, ``whole_call_us``, ``graph_us``…).
        keys: the columns that identify one comparison (e.g. path, repeat, M, N).
        reference: the impl every other impl is compared with.

    Returns:
        Columns: keys…, impl, impl_us, reference_us, difference_us, percent.
    """
    keys = list(keys)
    ref = table[table["impl"] == reference][keys + [value]].rename(columns={value: "reference_us"})
    other = table[table["impl"] != reference][keys + ["impl", value]].rename(columns={value: "impl_us"})
    out = other.merge(ref, on=keys, how="inner", validate="many_to_one")
    out["difference_us"] = out["impl_us"] - out["reference_us"]
    out["percent"] = 100 * out["difference_us"] / out["reference_us"]
    return out.reset_index(drop=True)


# --------------------------------------------------------------------------- environment and files


def environment_info() -> dict[str, Any]:
    """Where and when: device, versions, date (UTC). Works without a GPU too.

    Returns:
        dict with ``date_utc`` (ISO 8601), ``python``, ``torch``, ``triton``,
        ``cuda`` (torch's CUDA runtime, None on CPU builds), ``numpy``, ``pandas``,
        ``liger_kernel`` (version, or None), and ``device``: name, compute
        capability, multiprocessors, memory and L2 in bytes, driver — or
        ``{"name": "none (no CUDA GPU)"}``.

    Source: notebooks/07_benchmark.ipynb.
    """
    info: dict[str, Any] = {
        "date_utc": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "triton": triton.__version__,
        "cuda": torch.version.cuda,
        "numpy": np.__version__,
        "pandas": pd.__version__,
    }
    try:
        from importlib.metadata import version

        info["liger_kernel"] = version("liger-kernel")
    except Exception:
        info["liger_kernel"] = None
    if not torch.cuda.is_available():
        info["device"] = {"name": "none (no CUDA GPU)"}
        return info
    props = torch.cuda.get_device_properties(0)
    info["device"] = {
        "name": props.name,
        "compute_capability": f"{props.major}.{props.minor}",
        "multiprocessors": props.multi_processor_count,
        "memory_bytes": props.total_memory,
        "l2_cache_bytes": getattr(props, "L2_cache_size", None),
    }
    try:
        smi = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=20, check=True)
        info["device"]["driver"] = smi.stdout.strip().splitlines()[0]
    except Exception:
        info["device"]["driver"] = None
    return info


@dataclass(frozen=True)
class Results:
    """The committed benchmark results (see :func:`load_results`).

    Attributes:
        samples: one row per sample of the 128×257 protocol (µs per call).
        summary: median/mean/min/max/std per (path, impl, repeat).
        differences: impl − reference per (path, repeat), µs and %.
        sweep: whole-call, graph-replay and device-kernel µs and GB/s per (path, impl, M, N).
        kernels: device operations per (path, impl, M, N): launches and µs per call.
        environment: device, versions, date, protocol parameters (environment.json).
    """

    samples: pd.DataFrame
    summary: pd.DataFrame
    differences: pd.DataFrame
    sweep: pd.DataFrame
    kernels: pd.DataFrame
    environment: dict[str, Any]


#: File names of :class:`Results`, one CSV per DataFrame plus environment.json.
RESULT_FILES = {name: f"{name}.csv" for name in ("samples", "summary", "differences", "sweep", "kernels")}


def load_results(path: str | Path | None = None) -> Results:
    """Read committed results (CSV files + environment.json) into pandas.

    Args:
        path: folder written by ``scripts/benchmark.py``; default :data:`RESULTS_DIR` (results/h200).

    Returns:
        A :class:`Results`.

    Raises:
        FileNotFoundError: a file is missing (names the file and how to make it).

    Source: notebooks/07_benchmark.ipynb.
    """
    folder = Path(path) if path is not None else RESULTS_DIR
    frames = {}
    for name, filename in RESULT_FILES.items():
        file = folder / filename
        if not file.is_file():
            raise FileNotFoundError(f"{file} is missing; run scripts/benchmark.py --out {folder} on a GPU")
        frames[name] = pd.read_csv(file)
    environment = json.loads((folder / "environment.json").read_text(encoding="utf-8"))
    return Results(**frames, environment=environment)

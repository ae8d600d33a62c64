"""Benchmark runs: the timed callables, their oracle check, the protocol and the sweep.

The callables come from the one provider list (:mod:`rmsnorm_lab.providers`),
and every run compares their outputs with the float64 oracle
(:func:`rmsnorm_lab.providers.check_calls`) before it times anything; a
callable that fails is not timed. Benchmarks never assert a speed-up.

Source: notebooks/07_benchmark.ipynb; quack's ``benchmarks/benchmark_rmsnorm.py``
(named providers, one declared byte count for every provider).
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np
import pandas as pd
import torch

from rmsnorm.article.contract import MAX_SCRATCH_BYTES, scratch_bytes
from rmsnorm.device import default_device
from rmsnorm.testing import make_inputs
from .providers import check_calls, imported, pass_calls, provider, whole_calls
from .results import bytes_moved
from .timing import gbps, kernel_time_us, profile_kernels, require_cuda, time_graph_replay, time_whole_calls

#: The article's benchmark shape (M, N), in float32.
DEFAULT_SHAPE = (128, 257)
#: Sweep grid: every (M, N) whose dgamma scratch M·N·4 bytes fits MAX_SCRATCH_BYTES.
SWEEP_M = (128, 1024, 8192)
SWEEP_N = (257, 1024, 4096)
#: What is timed: the forward alone, or forward + backward through autograd.
PATHS = ("forward", "forward_backward")
#: Implementations (provider names of rmsnorm_lab.providers): the article's kernels, the PyTorch reference,
#: Liger-Kernel (when it imports).
IMPLS = ("article", "reference", "liger")


def liger_status() -> str | None:
    """None when Liger-Kernel's RMSNorm imports, else one line saying why not."""
    return imported("liger_kernel.ops.rms_norm", "LigerRMSNormFunction")[1]


def make_calls(
    x: torch.Tensor, weight: torch.Tensor, dy: torch.Tensor, eps: float = 1e-6, *, include_liger: bool = True
) -> dict[tuple[str, str], Callable[[], Any]]:
    """The callables the benchmark times, keyed by (path, provider), from the one provider list.

    ``forward``: each provider's forward pass alone (:func:`rmsnorm_lab.providers.pass_calls`):
    ``forward_op(x, weight)`` → (y, rstd) for the article's kernels, ``rmsnorm_reference`` → y,
    Liger → y. ``forward_backward``: the whole call through autograd
    (:func:`rmsnorm_lab.providers.whole_calls`): ``rmsnorm(x, weight).backward(dy)`` and the
    like, on private leaf copies of x and weight whose ``.grad`` is set to None first (each call
    does the same work, no accumulation); returns (dx, dgamma). Liger runs with
    ``casting_mode="llama"`` and ``in_place=False`` (in place, it would overwrite ``dy`` with dx).

    Args:
        x: (M, N) float32/float16, contiguous, CUDA (or CPU under the interpreter).
        weight: (N,) γ, dtype and device of ``x``.
        dy: (M, N) upstream gradient, like ``x``.
        eps: finite real number > 0.
        include_liger: add Liger-Kernel's callables when it imports.

    Returns:
        dict mapping (path, provider name) to a zero-argument callable.

    Source: notebooks/07_benchmark.ipynb.
    """
    names = [i for i in IMPLS if i != "liger" or (include_liger and liger_status() is None)]
    calls: dict[tuple[str, str], Callable[[], Any]] = {}
    for path, build, pass_ in (
        ("forward", pass_calls, "forward"),
        ("forward_backward", whole_calls, "forward_backward"),
    ):
        for name in names:
            calls[(path, name)] = build(provider(name), x, weight, dy, eps, passes=(pass_,))[pass_]
    return calls


def sweep_shapes() -> tuple[list[tuple[int, int]], list[tuple[int, int]]]:
    """The sweep grid split by the scratch contract.

    Returns:
        (allowed, skipped): (M, N) pairs with M·N·4 bytes ≤ MAX_SCRATCH_BYTES, and the others.
    """
    grid = [(M, N) for M in SWEEP_M for N in SWEEP_N]
    allowed = [s for s in grid if scratch_bytes(*s) <= MAX_SCRATCH_BYTES]
    return allowed, [s for s in grid if s not in allowed]


def _order(keys, turn: int):
    keys = list(keys)
    shift = turn % len(keys)
    return keys[shift:] + keys[:shift]  # rotate who goes first from one repeat to the next


def _checked_calls(M, N, dtype, eps, include_liger, seed) -> dict:
    """Seeded inputs of shape (M, N), their callables, every output checked against the oracle."""
    x, weight, dy = make_inputs(M, N, dtype, device=default_device(), seed=seed)
    calls = make_calls(x, weight, dy, eps, include_liger=include_liger)
    check_calls(calls, x, weight, dy, eps)
    return calls


def run_protocol(
    M: int = DEFAULT_SHAPE[0], N: int = DEFAULT_SHAPE[1], dtype: torch.dtype = torch.float32, *,
    repeats: int = 1, eps: float = 1e-6, include_liger: bool = True, seed: int = 0,
) -> pd.DataFrame:
    """Check every callable against the oracle, then time it with the article's protocol.

    Args:
        M, N: shape of x.
        dtype: float32 or float16.
        repeats: full protocol runs per callable (their spread shows the noise).
        eps: finite real number > 0.
        include_liger: time Liger-Kernel too when it imports.
        seed: for :func:`rmsnorm.testing.make_inputs`.

    Returns:
        Long DataFrame, one row per sample: path, provider, repeat, sample, M, N,
        dtype, us_per_call (µs).

    Raises:
        BenchmarkUnavailableError: no CUDA GPU.
        AssertionError: an output does not match the oracle (nothing was timed).

    Source: notebooks/07_benchmark.ipynb.
    """
    require_cuda()
    calls = _checked_calls(M, N, dtype, eps, include_liger, seed)
    rows = []
    for repeat in range(repeats):
        for key in _order(calls, repeat):
            for i, us in enumerate(time_whole_calls(calls[key])):
                rows.append((*key, repeat, i, M, N, str(dtype).removeprefix("torch."), us))
    return pd.DataFrame(rows, columns=["path", "provider", "repeat", "sample", "M", "N", "dtype", "us_per_call"])


def measure_shape(
    M: int, N: int, dtype: torch.dtype = torch.float32, *,
    eps: float = 1e-6, include_liger: bool = True, seed: int = 0,
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Check, then time one shape: whole calls, graph replay, kernel time L2-warm and L2-cold.

    Four numbers per callable: the whole-call median (the article's protocol),
    graph replay, the profiler's kernel time back to back (``device_us``,
    L2-warm) and the profiler's kernel time with L2 flushed before every call
    (``cold_us``, :func:`rmsnorm_lab.kernel_time_us`). Rates divide the
    declared bytes (:func:`rmsnorm_lab.bytes_moved`, the same for every
    implementation) by each time.

    Returns:
        (rows, kernels): ``rows`` has one row per (path, provider) with M, N, dtype,
        bytes, whole_call_us (median), whole_call_mean_us, graph_us,
        device_us, device_ops_per_call, cold_us, gbps_whole, gbps_graph,
        gbps_device, gbps_cold; ``kernels`` one row per device operation name
        (L2-warm profile): path, provider, M, N, name, launches_per_call, us_per_call.

    Raises:
        BenchmarkUnavailableError: no CUDA GPU.
        AssertionError: an output does not match the oracle (nothing was timed).

    Source: notebooks/07_benchmark.ipynb.
    """
    require_cuda()
    calls = _checked_calls(M, N, dtype, eps, include_liger, seed)
    dtype_name = str(dtype).removeprefix("torch.")
    rows, kernels = [], []
    for (path, who), fn in calls.items():
        whole = time_whole_calls(fn)
        graph = time_graph_replay(fn)
        prof = profile_kernels(fn, flush=False)
        cold = kernel_time_us(fn)
        nbytes = bytes_moved(path, M, N, dtype)
        median = float(np.median(whole))
        rows.append({
            "path": path, "provider": who, "M": M, "N": N, "dtype": dtype_name, "bytes": nbytes,
            "whole_call_us": median, "whole_call_mean_us": float(whole.mean()), "graph_us": graph,
            "device_us": prof.device_us, "device_ops_per_call": prof.ops_per_call, "cold_us": cold,
            "gbps_whole": gbps(nbytes, median), "gbps_graph": gbps(nbytes, graph),
            "gbps_device": gbps(nbytes, prof.device_us), "gbps_cold": gbps(nbytes, cold),
        })
        for name, (launches, us) in sorted(prof.by_name.items(), key=lambda kv: -kv[1][1]):
            kernels.append({"path": path, "provider": who, "M": M, "N": N, "name": name[:120],
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



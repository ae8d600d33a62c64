"""Timers: whole calls (the article's protocol), graph replay, and L2-cold kernel time.

Four ways to put a number on one call, from widest to narrowest:

- **Whole call** (:func:`time_whole_calls`, the article's protocol): CUDA
  events around whole Python calls (allocations, contract checks, autograd and
  launches included); 20 warm-up calls excluded; 50 samples of 20 calls each;
  per-call µs = sample time / 20. Back-to-back calls on the same buffers: the
  caches are warm.
- **Host time** (:func:`time_host_calls`): CPU wall-clock time per call of
  back-to-back calls that never wait for the GPU: what the host spends issuing
  one call (Python, dispatch, checks, allocations, launches).
- **Graph replay** (:func:`time_graph_replay`, ``triton.testing.do_bench_cudagraph``):
  the same calls captured in a CUDA graph and replayed, so the host is out of
  the interval. Also back to back, so also L2-warm.
- **Kernel time, L2-cold** (:func:`kernel_time_us`): the summed duration of the
  kernels one call puts on the GPU (``torch.profiler``), with a buffer larger
  than the L2 cache written before every call, so that the call's inputs come
  from device memory, as in a real model where other layers ran in between.

Every timer refuses to run without CUDA (:class:`BenchmarkUnavailableError`):
Triton's CPU interpreter runs the kernels in NumPy, and its times say nothing
about a GPU.

Source: notebooks/07_benchmark.ipynb; the protocol is the original article's
("Quale tempo misura il benchmark?"); the L2 flush follows
``triton.testing.do_bench`` (which zeroes a 256 MB buffer before each call).
"""

from __future__ import annotations

import time
import warnings
from collections import Counter
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np
import torch
import triton
import triton.language as tl

#: Calls run and thrown away before any sample (compilation, caches, allocator).
WARMUP_CALLS = 20
#: Timed samples; the reported number is their median.
SAMPLES = 50
#: Calls inside one sample, between one pair of CUDA events (per-call µs = sample / 20).
CALLS_PER_SAMPLE = 20
#: Host-time samples (the reported number is their median) and calls per sample.
HOST_SAMPLES = 20
HOST_CALLS_PER_SAMPLE = 50
#: ``do_bench_cudagraph``'s repetition budget, in ms of GPU time per measurement.
GRAPH_REP_MS = 20
#: Calls recorded by the profiler for the device-kernel time.
PROFILED_CALLS = 20
#: Bytes written before each L2-cold call: 256 MiB, over 4× the H200's 60 MiB of L2.
L2_FLUSH_BYTES = 256 * 2**20
#: Name of the flush kernel, as the profiler reports it (its events are left out of every sum).
FLUSH_KERNEL_NAME = "rmsnorm_bench_l2_flush_kernel"


class BenchmarkUnavailableError(RuntimeError):
    """Timing was asked for on a machine without a CUDA GPU."""


def require_cuda() -> None:
    """Raise unless a CUDA GPU is usable: no silent CPU timing.

    Raises:
        BenchmarkUnavailableError: ``torch.cuda.is_available()`` is False.
    """
    if not torch.cuda.is_available():
        raise BenchmarkUnavailableError(
            "rmsnorm_lab: timing needs a CUDA GPU and this machine has none. Here the kernels run in "
            "Triton's CPU interpreter, whose times say nothing about a GPU. Read the committed H200 "
            "results with rmsnorm_lab.load_results() instead."
        )


def gbps(nbytes: float, us: float) -> float:
    """Rate in GB/s (10⁹ bytes/s) of ``nbytes`` bytes moved in ``us`` µs."""
    return nbytes / (us * 1e3)


def time_whole_calls(
    fn: Callable[[], Any], *,
    warmup: int = WARMUP_CALLS, samples: int = SAMPLES, calls_per_sample: int = CALLS_PER_SAMPLE,
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


def time_host_calls(
    fn: Callable[[], Any], *, warmup: int = WARMUP_CALLS, samples: int = HOST_SAMPLES,
    calls_per_sample: int = HOST_CALLS_PER_SAMPLE,
) -> np.ndarray:
    """Host time per call: CPU wall-clock time of back-to-back calls, with no synchronisation between them.

    ``warmup`` calls are run and not timed. Then, ``samples`` times: the GPU is
    synchronised (outside the interval), ``time.perf_counter`` is read, ``fn`` is called
    ``calls_per_sample`` times, ``time.perf_counter`` is read again. The interval is what
    the host spends issuing the calls (Python, dispatch, checks, allocations, kernel
    launches), not when the GPU finishes them: the GPU runs behind, in its own time. The
    host would wait only if CUDA's launch queue filled up (about a thousand pending
    launches); a sample of 50 calls stays well below that, so a call the GPU takes longer
    over than the host is still charged its host time only, unless the call itself
    synchronises (``.item()``, a copy to the host), which then shows here.

    Args:
        fn: zero-argument callable that enqueues GPU work (its result is ignored).
        warmup: calls excluded before timing.
        samples: timed samples.
        calls_per_sample: calls between the two clock readings.

    Returns:
        (samples,) float64 array: µs of host time per call of each sample.

    Raises:
        BenchmarkUnavailableError: no CUDA GPU.

    Source: notebooks/07_benchmark.ipynb; issue 15 (host µs per call, CPU wall time of N calls).
    """
    require_cuda()
    for _ in range(warmup):
        fn()
    out = np.empty(samples)
    for i in range(samples):
        torch.cuda.synchronize()  # the queue starts empty: no sample waits for an earlier one's kernels
        start = time.perf_counter()
        for _ in range(calls_per_sample):
            fn()
        out[i] = (time.perf_counter() - start) * 1e6 / calls_per_sample
    torch.cuda.synchronize()
    return out


def time_graph_replay(fn: Callable[[], Any], *, rep_ms: float = GRAPH_REP_MS) -> float:
    """Kernel-only time, L2-warm: the calls captured in a CUDA graph and replayed.

    Uses ``triton.testing.do_bench_cudagraph``: ``fn`` is captured many times in
    one graph (allocations come from the graph's private memory pool, so calls
    that allocate are safe to capture) and the replays are timed with CUDA
    events. The host's work is out of the interval; the calls run back to back
    on the same buffers, so a call whose bytes fit in L2 reads them from there.

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


@triton.jit
def rmsnorm_bench_l2_flush_kernel(
    buffer_ptr,  # (n,) int32 scratch larger than L2, overwritten with zeros
    n,  # elements in the buffer
    BLOCK_SIZE: tl.constexpr,  # elements written by one program
):
    offsets = tl.program_id(0).to(tl.int64) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    tl.store(buffer_ptr + offsets, tl.zeros((BLOCK_SIZE,), dtype=tl.int32), mask=offsets < n)


_FLUSH_BUFFERS: dict[tuple[int, int], torch.Tensor] = {}


def flush_l2(nbytes: int = L2_FLUSH_BYTES) -> None:
    """Write ``nbytes`` of zeros on the current CUDA device, evicting what L2 held.

    One launch of :func:`rmsnorm_bench_l2_flush_kernel` (its own name, so that
    the profiler's sums can leave it out); the buffer is allocated once per size.

    Raises:
        BenchmarkUnavailableError: no CUDA GPU.
        ValueError: ``nbytes`` does not exceed the device's L2 cache (it would not evict it).
    """
    require_cuda()
    l2_bytes = getattr(torch.cuda.get_device_properties(torch.cuda.current_device()), "L2_cache_size", 0)
    if nbytes <= l2_bytes:
        raise ValueError(f"an L2 flush of {nbytes} bytes cannot evict an L2 cache of {l2_bytes} bytes: write more")
    key = (torch.cuda.current_device(), nbytes)
    if key not in _FLUSH_BUFFERS:
        _FLUSH_BUFFERS[key] = torch.empty(nbytes // 4, dtype=torch.int32, device="cuda")
    buffer = _FLUSH_BUFFERS[key]
    block = 4096
    rmsnorm_bench_l2_flush_kernel[(triton.cdiv(buffer.numel(), block),)](buffer, buffer.numel(), BLOCK_SIZE=block)


@dataclass(frozen=True)
class KernelProfile:
    """What one call puts on the GPU, from ``torch.profiler``.

    Attributes:
        device_us: summed duration of the call's device operations, µs per call.
        ops_per_call: device operations (kernels, memsets, copies) per call.
        by_name: per operation name: (launches per call, µs per call).
        l2_cold: True when L2 was flushed before every call.
    """

    device_us: float
    ops_per_call: float
    by_name: dict[str, tuple[float, float]]
    l2_cold: bool


def profile_kernels(
    fn: Callable[[], Any], *, flush: bool = True, calls: int = PROFILED_CALLS, warmup: int = WARMUP_CALLS,
    flush_bytes: int = L2_FLUSH_BYTES,
) -> KernelProfile:
    """Sum the device time of the kernels one call launches (``torch.profiler``), per kernel name.

    With ``flush`` (the default), :func:`flush_l2` runs before every recorded
    call; the flush kernel's own events are left out of every sum and count.

    Args:
        fn: zero-argument callable of GPU work.
        flush: write ``flush_bytes`` before each recorded call (L2-cold); False: back to back (L2-warm).
        calls: calls recorded (results are divided by it).
        warmup: calls run before recording (compilation, allocator).
        flush_bytes: size of the flush, bytes; must exceed the device's L2.

    Returns:
        A :class:`KernelProfile` (µs per call; launch counts per call).

    Raises:
        BenchmarkUnavailableError: no CUDA GPU.
        ValueError: ``flush`` with ``flush_bytes`` not larger than the device's L2.
        RuntimeError: the profiler recorded no device operation of ``fn``.

    Source: notebooks/07_benchmark.ipynb; PyTorch profiler recipe; ``triton.testing.do_bench`` (the flush).
    """
    require_cuda()
    from torch.profiler import ProfilerActivity, profile

    for _ in range(warmup):
        fn()
    if flush:
        flush_l2(flush_bytes)  # allocate and compile the flush outside the recording
    torch.cuda.synchronize()
    with warnings.catch_warnings():  # one profiling cycle: its "clears events" warning does not apply
        warnings.filterwarnings("ignore", message=".*Profiler clears events.*")
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            for _ in range(calls):
                if flush:
                    flush_l2(flush_bytes)
                fn()
            torch.cuda.synchronize()
    device_events = [
        e for e in prof.events()
        if e.device_type == torch.autograd.DeviceType.CUDA and not getattr(e, "is_user_annotation", False)
        and e.name != FLUSH_KERNEL_NAME
    ]
    if not device_events:
        raise RuntimeError("torch.profiler recorded no device operation of the call (is CUPTI available?)")
    counts, durations = Counter(), Counter()
    for e in device_events:
        counts[e.name] += 1
        durations[e.name] += e.time_range.elapsed_us()
    by_name = {name: (counts[name] / calls, durations[name] / calls) for name in counts}
    return KernelProfile(sum(durations.values()) / calls, len(device_events) / calls, by_name, flush)


def kernel_time_us(
    fn: Callable[[], Any], *, flush: bool = True, calls: int = PROFILED_CALLS, warmup: int = WARMUP_CALLS
) -> float:
    """Kernel time of one call in µs, L2-cold: THE number to turn into GB/s.

    ``torch.profiler`` records ``calls`` calls of ``fn``; before each, a
    256 MiB buffer (:data:`L2_FLUSH_BYTES`, larger than any current L2) is
    overwritten, so the call reads its inputs from device memory. The result is
    the summed duration of the device operations ``fn`` launched (kernels,
    memsets, copies; the flush's own kernel excluded), divided by ``calls``.
    Gaps between kernels and host work are not in it. Shared by every
    implementation and every benchmark of the course, so that their rates are
    comparable: divide a declared byte count by it (:func:`gbps`).

    Args:
        fn: zero-argument callable that launches GPU work (result ignored);
            it is called ``warmup + calls`` times.
        flush: False measures back-to-back calls (L2-warm), for comparison only.
        calls: recorded calls.
        warmup: calls run first, not recorded (compilation, allocator).

    Returns:
        µs per call (float).

    Raises:
        BenchmarkUnavailableError: no CUDA GPU.
        RuntimeError: ``fn`` launched no device operation the profiler saw.

    Source: notebooks/07_benchmark.ipynb; ``triton.testing.do_bench`` (the L2 flush);
    PyTorch profiler recipe.
    """
    return profile_kernels(fn, flush=flush, calls=calls, warmup=warmup).device_us


def copy_bandwidth_gbps(nbytes: int = 1 << 30) -> float:
    """The device's copy ceiling: a large device-to-device copy, bytes read + written per second.

    Args:
        nbytes: size of the copied buffer in bytes (default 1 GiB, far larger than L2).

    Returns:
        GB/s (10⁹ bytes per second), counting 2 × ``nbytes`` per copy, over the copy's
        kernel time from :func:`kernel_time_us` — the same timer as every rate it is
        compared with. (Event timing, as ``triton.testing.do_bench`` does it, adds the
        launch gap: on the H200 it read the ceiling about 1 % low, and torch.compile's
        forward then appeared to beat the copy.)

    Raises:
        BenchmarkUnavailableError: no CUDA GPU.

    Source: notebooks/07_benchmark.ipynb; the roofline practice of measuring the achievable
    bandwidth rather than quoting the data sheet.
    """
    require_cuda()
    src = torch.randint(0, 256, (nbytes,), dtype=torch.uint8, device="cuda")  # never zeros only
    dst = torch.empty_like(src)
    return gbps(2 * nbytes, kernel_time_us(lambda: dst.copy_(src), calls=10, warmup=3))

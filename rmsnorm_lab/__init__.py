"""Benchmarks: time the kernels honestly, after checking them; read the committed results anywhere.

One concern per module:

- :mod:`rmsnorm_lab.providers` — the one provider list (fast, floor, article, reference,
  eager, compile, compile_nomix, liger, quack): how a model calls each, its passes on their
  own, what it refuses and why; the one oracle check in front of every timing.
- :mod:`rmsnorm_lab.floor` — the fast kernels behind a bare autograd.Function: what any
  Triton path costs the host.
- :mod:`rmsnorm_lab.cpp_floor` — a ``torch.library`` C++ op launching an empty kernel behind the
  same kind of module: what any C++ route costs the host. :mod:`rmsnorm_lab.launch_bench` — issue
  41's table: each launch path's whole call and host time beside both floors and eager; its targets.
- :mod:`rmsnorm_lab.timing` — the timers: whole calls (the article's protocol), host
  time, graph replay, and :func:`kernel_time_us`, the **L2-cold** kernel time (profiler,
  with L2 flushed before every call) that every rate of the course is computed from. They
  refuse to run without CUDA.
- :mod:`rmsnorm_lab.runs` — lesson 07: the 128 × 257 protocol and the M × N sweep.
- :mod:`rmsnorm_lab.sidebyside` — lesson 12: every provider's passes, kernel time; the
  table's checks. :mod:`rmsnorm_lab.tuning` — the fast path's config sweep.
- :mod:`rmsnorm_lab.wholecall` — what a model's call costs: whole call, host, graph
  replay and kernel time through each provider's public entry point.
- :mod:`rmsnorm_lab.model` — lesson 13: a Hugging Face Llama's training step with each norm
  (tokens/s, peak memory, the norm's share, the Amdahl bound); :mod:`rmsnorm_lab.step_profile`
  — which kernels of a profiled step are the norm's.
- :mod:`rmsnorm_lab.results` — the declared byte count (the minimum traffic, the same for
  every implementation: a lower bound), the summary and difference tables, the environment
  record, and the committed results (:func:`results_dir` finds them). Works on any machine.

The names used across lessons are re-exported here: ``from rmsnorm_lab import kernel_time_us``.
Needs pandas (the ``course``/``test`` extras), unlike the rest of the package.
Benchmarks never assert a speed-up.

Source: notebooks/07_benchmark.ipynb, notebooks/12_tuning_and_side_by_side.ipynb,
notebooks/13_into_a_model.ipynb.
"""

from rmsnorm.article.contract import MAX_SCRATCH_BYTES  # scripts/benchmark.py reads it as bench.MAX_SCRATCH_BYTES
from . import eager, providers, timing  # noqa: F401  (submodules: rmsnorm_lab.eager, .providers, .timing)
from .eager import eager_provenance, force_aten
from .providers import PROVIDER_NAMES, PROVIDERS, Provider, check_calls, pass_calls, prepare, provider, whole_calls
from .results import (
    BYTE_CONVENTION,
    RATE_COLUMNS,
    RESULT_FILES,
    RESULTS_DIR,
    STAT_COLUMNS,
    Results,
    backward_bytes,
    bytes_moved,
    difference_table,
    environment_info,
    forward_backward_bytes,
    forward_bytes,
    fused_add_backward_bytes,
    fused_add_forward_bytes,
    layernorm_backward_bytes,
    layernorm_forward_bytes,
    load_fast_table,
    load_results,
    load_whole_call,
    recompute_rates,
    results_dir,
    summarize,
)
from .runs import (
    DEFAULT_SHAPE,
    IMPLS,
    PATHS,
    SWEEP_M,
    SWEEP_N,
    liger_status,
    make_calls,
    measure_shape,
    run_protocol,
    run_sweep,
    sweep_shapes,
)
from .timing import (
    CALLS_PER_SAMPLE,
    FLUSH_KERNEL_NAME,
    GRAPH_REP_MS,
    HOST_CALLS_PER_SAMPLE,
    HOST_SAMPLES,
    L2_FLUSH_BYTES,
    PROFILED_CALLS,
    SAMPLES,
    WARMUP_CALLS,
    BenchmarkUnavailableError,
    KernelProfile,
    copy_bandwidth_gbps,
    flush_l2,
    gbps,
    kernel_time_us,
    profile_kernels,
    require_cuda,
    rmsnorm_bench_l2_flush_kernel,
    time_graph_replay,
    time_host_calls,
    time_whole_calls,
)

__all__ = [
    "BYTE_CONVENTION", "CALLS_PER_SAMPLE", "DEFAULT_SHAPE", "FLUSH_KERNEL_NAME", "GRAPH_REP_MS",
    "HOST_CALLS_PER_SAMPLE", "HOST_SAMPLES", "IMPLS", "L2_FLUSH_BYTES", "MAX_SCRATCH_BYTES", "PATHS",
    "PROFILED_CALLS", "PROVIDERS", "PROVIDER_NAMES", "RATE_COLUMNS", "RESULT_FILES", "RESULTS_DIR", "SAMPLES",
    "STAT_COLUMNS", "SWEEP_M", "SWEEP_N", "WARMUP_CALLS", "BenchmarkUnavailableError", "KernelProfile", "Provider",
    "Results", "backward_bytes", "bytes_moved", "check_calls", "copy_bandwidth_gbps",
    "difference_table", "eager_provenance", "environment_info", "force_aten",
    "flush_l2", "forward_backward_bytes", "forward_bytes", "fused_add_backward_bytes", "fused_add_forward_bytes",
    "layernorm_backward_bytes", "layernorm_forward_bytes",
    "gbps",
    "kernel_time_us", "liger_status", "load_fast_table", "load_results", "load_whole_call", "make_calls",
    "measure_shape", "pass_calls", "prepare", "profile_kernels", "provider", "recompute_rates", "require_cuda",
    "results_dir", "rmsnorm_bench_l2_flush_kernel", "run_protocol", "run_sweep", "summarize", "sweep_shapes",
    "time_graph_replay", "time_host_calls", "time_whole_calls", "whole_calls",
]

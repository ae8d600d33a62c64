"""Benchmarks: time the kernels honestly, after checking them; read the committed results anywhere.

Three modules, one concern each:

- :mod:`rmsnorm.bench.timing` — the timers: whole calls (the article's
  protocol), graph replay, and :func:`kernel_time_us`, the **L2-cold** kernel
  time (profiler, with L2 flushed before every call) that every rate of the
  course is computed from. They refuse to run without CUDA.
- :mod:`rmsnorm.bench.runs` — what is timed (the package's kernels, the PyTorch
  reference, Liger-Kernel when it imports), the oracle check in front of every
  timing, the 128 × 257 protocol and the M × N sweep.
- :mod:`rmsnorm.bench.results` — the declared byte count (the minimum traffic,
  the same for every implementation: a lower bound), the summary and difference
  tables, the environment record and the committed results. Works on any machine.

Every public name is re-exported here: ``from rmsnorm.bench import kernel_time_us``.
Needs pandas (the ``course``/``test`` extras), unlike the rest of the package.
Benchmarks never assert a speed-up.

Source: notebooks/07_benchmark.ipynb.
"""

from ..contract import MAX_SCRATCH_BYTES  # scripts/benchmark.py reads it as bench.MAX_SCRATCH_BYTES
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
    load_results,
    recompute_rates,
    summarize,
)
from .runs import (
    DEFAULT_SHAPE,
    IMPLS,
    PATHS,
    SWEEP_M,
    SWEEP_N,
    check_calls,
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
    time_whole_calls,
)

__all__ = [
    "BYTE_CONVENTION", "CALLS_PER_SAMPLE", "DEFAULT_SHAPE", "FLUSH_KERNEL_NAME", "GRAPH_REP_MS", "IMPLS",
    "L2_FLUSH_BYTES", "MAX_SCRATCH_BYTES", "PATHS", "PROFILED_CALLS", "RATE_COLUMNS", "RESULT_FILES", "RESULTS_DIR",
    "SAMPLES", "STAT_COLUMNS", "SWEEP_M", "SWEEP_N", "WARMUP_CALLS",
    "BenchmarkUnavailableError", "KernelProfile", "Results",
    "backward_bytes", "bytes_moved", "check_calls", "copy_bandwidth_gbps", "difference_table", "environment_info",
    "flush_l2", "forward_backward_bytes", "forward_bytes", "gbps", "kernel_time_us", "liger_status", "load_results",
    "make_calls", "measure_shape", "profile_kernels", "recompute_rates", "require_cuda", "rmsnorm_bench_l2_flush_kernel",
    "run_protocol", "run_sweep", "summarize", "sweep_shapes", "time_graph_replay", "time_whole_calls",
]

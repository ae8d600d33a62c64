"""Run the whole benchmark on a CUDA GPU and write results/<card>/ (CSV + environment.json).

    python3 scripts/benchmark.py --out results/h200      # the full run (about a minute on an H200)
    python3 scripts/benchmark.py --quick                 # self-check: one shape, 1 repeat, into build/bench-quick

1. Correctness first: every timed callable (Triton kernels through
   ``forward_op`` and autograd, the PyTorch reference, Liger-Kernel when it
   imports) is compared with the float64 oracle through
   ``rmsnorm.testing.assert_close``; a shape that fails is not timed, and the
   script exits with status 1 after writing what it has.
2. The article's protocol at 128×257 float32 (20 warm-up calls excluded,
   median of 50 samples of 20 calls), ``--repeats`` times, interleaved.
3. The sweep: whole-call, graph-replay and device-kernel time per shape, the
   latter both back to back (L2-warm) and with L2 flushed before every call
   (``rmsnorm_lab.kernel_time_us``), with GB/s from the declared bytes
   (the minimum traffic, the same for every implementation).
4. The device's copy ceiling (1 GiB device-to-device copy), and a check that
   the L2 flush works (a 16 MiB read must take longer L2-cold than L2-warm).

Benchmarks never assert a speed-up: this script reports, it does not judge.

Source: notebooks/07_benchmark.ipynb; rmsnorm_lab/.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import traceback
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the checkout, for `import rmsnorm`

import rmsnorm  # noqa: E402  (the checkout's package, found through the path above)

# isort: split
import pandas as pd  # noqa: E402
import torch  # noqa: E402

import rmsnorm_lab as bench  # noqa: E402


def check_flush() -> dict:
    """Kernel time of a 16 MiB sum, back to back and after each L2 flush: the flush must make it slower."""
    data = torch.ones(4 * 2**20, device="cuda")
    warm = bench.kernel_time_us(data.sum, flush=False)
    cold = bench.kernel_time_us(data.sum)
    return {"read_bytes": data.numel() * 4, "warm_us": round(warm, 3), "cold_us": round(cold, 3), "evicts": cold > warm}


def main(argv: list[str] | None = None) -> int:
    """Parse arguments, run everything, write the files; return the exit status."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--out", type=Path, default=bench.RESULTS_DIR, help="folder for the CSV files and environment.json"
    )
    parser.add_argument(
        "--repeats", type=int, default=3, help="full protocol runs at 128x257 (their spread is the noise)"
    )
    parser.add_argument("--no-liger", action="store_true", help="leave Liger-Kernel out even if it imports")
    parser.add_argument("--quick", action="store_true",
                        help="self-check: 1 repeat, the sweep at 128x257 only, "
                             "into build/bench-quick unless --out is given")
    args = parser.parse_args(argv)
    if args.quick:
        args.repeats = 1
        if args.out == bench.RESULTS_DIR:
            args.out = Path(__file__).resolve().parent.parent / "build" / "bench-quick"
    try:
        bench.require_cuda()
    except bench.BenchmarkUnavailableError as err:
        print(err)
        return 2
    args.out.mkdir(parents=True, exist_ok=True)
    include_liger = not args.no_liger
    liger_reason = bench.liger_status() if include_liger else "--no-liger given"
    print(f"kernels run on: {rmsnorm.describe_backend()}")
    print("liger: " + ("timed as a third column" if liger_reason is None else f"not timed ({liger_reason})"))
    started = time.perf_counter()
    failures: list[str] = []

    M, N = bench.DEFAULT_SHAPE
    try:
        samples = bench.run_protocol(M, N, torch.float32, repeats=args.repeats, include_liger=include_liger)
    except Exception as err:  # Liger may import yet fail to run with this torch/triton: go on without it
        if not include_liger or isinstance(err, bench.BenchmarkUnavailableError):
            raise
        traceback.print_exc()
        include_liger, liger_reason = False, f"failed at run time: {type(err).__name__}: {err}"
        print(f"liger: not timed ({liger_reason})")
        samples = bench.run_protocol(M, N, torch.float32, repeats=args.repeats, include_liger=False)
    summary = bench.summarize(samples)
    differences = bench.difference_table(summary, keys=("path", "repeat", "M", "N", "dtype"))
    print(f"protocol {M}x{N}: {len(samples)} samples in {time.perf_counter() - started:.1f} s")

    allowed, skipped = bench.sweep_shapes()
    if args.quick:
        allowed = [bench.DEFAULT_SHAPE]
    sweep_parts, kernel_parts, checked = [], [], []
    for M_, N_ in allowed:
        try:
            try:
                rows, kernels = bench.measure_shape(M_, N_, torch.float32, include_liger=include_liger)
            except Exception as err:
                if not include_liger or isinstance(err, AssertionError):
                    raise
                traceback.print_exc()  # Liger failed here: measure this shape without it
                failures.append(f"{M_}x{N_} (liger left out): {type(err).__name__}: {err}")
                rows, kernels = bench.measure_shape(M_, N_, torch.float32, include_liger=False)
        except Exception as err:  # noqa: BLE001  a failed check (AssertionError) means: not timed
            failures.append(f"{M_}x{N_}: {type(err).__name__}: {err}")
            traceback.print_exc()
            continue
        sweep_parts.append(rows)
        kernel_parts.append(kernels)
        checked.append(f"{M_}x{N_}")
        print(f"sweep {M_}x{N_} done at {time.perf_counter() - started:.1f} s")
    sweep = pd.concat(sweep_parts, ignore_index=True) if sweep_parts else pd.DataFrame()
    kernels = pd.concat(kernel_parts, ignore_index=True) if kernel_parts else pd.DataFrame()
    try:
        ceiling = bench.copy_bandwidth_gbps()
    except Exception as err:  # noqa: BLE001  (recorded among the failures; the run goes on)
        failures.append(f"copy ceiling: {type(err).__name__}: {err}")
        ceiling = None
    try:
        flush_check = check_flush()
    except Exception as err:  # noqa: BLE001  (recorded with the reason; reported below)
        flush_check = {"evicts": None, "error": f"{type(err).__name__}: {err}"}
    if not flush_check["evicts"]:  # then cold_us is not L2-cold: say so, exit 1
        failures.append(f"L2 flush check: {flush_check}")

    environment = bench.environment_info()
    environment["protocol"] = {
        "timing": "CUDA events around whole calls; GPU synchronised before each sample",
        "warmup_calls": bench.WARMUP_CALLS,
        "samples": bench.SAMPLES,
        "calls_per_sample": bench.CALLS_PER_SAMPLE,
        "statistic": "median of the per-call us of the samples",
        "repeats": args.repeats,
        "shape": list(bench.DEFAULT_SHAPE),
        "dtype": "float32",
        "eps": 1e-6,
        "forward": "forward_op(x, gamma) vs rmsnorm_reference(x, gamma) [vs Liger apply]",
        "forward_backward": ("impl(x, gamma).backward(dy) through autograd, "
                             "grads of x and gamma reset to None each call"),
        "graph_replay": f"triton.testing.do_bench_cudagraph(rep={bench.GRAPH_REP_MS} ms, return_mode='median')",
        "device_kernels": (f"torch.profiler, sum of device operation durations over {bench.PROFILED_CALLS} calls, "
                           "back to back (L2-warm)"),
        "l2_cold": ("cold_us: rmsnorm_lab.kernel_time_us, "
                    f"the profiler's sum with {bench.L2_FLUSH_BYTES} bytes written "
                    "before every call (the flush's own kernel excluded)"),
        "bytes": bench.BYTE_CONVENTION,
        "correctness": ("every timed output compared with the float64 oracle (rmsnorm.testing.assert_close) "
                        "before timing"),
    }
    environment["sweep"] = {
        "M": list(bench.SWEEP_M), "N": list(bench.SWEEP_N),
        "checked_and_timed": checked,
        "skipped": [{"M": m, "N": n,
                     "reason": f"M*N*4 = {m * n * 4} bytes of dgamma scratch > {bench.MAX_SCRATCH_BYTES}"}
                    for m, n in skipped],
    }
    environment["liger"] = "timed" if liger_reason is None else f"not timed: {liger_reason}"
    environment["copy_bandwidth_gbps"] = ceiling
    environment["l2_flush_check"] = flush_check
    environment["quick"] = args.quick
    environment["check_failures"] = failures
    environment["wall_seconds"] = round(time.perf_counter() - started, 1)

    for name, frame in {"samples": samples, "summary": summary, "differences": differences,
                        "sweep": sweep, "kernels": kernels}.items():
        frame.to_csv(args.out / bench.RESULT_FILES[name], index=False, float_format="%.6f")
    (args.out / "environment.json").write_text(json.dumps(environment, indent=2) + "\n", encoding="utf-8")

    pd.set_option("display.width", 200)
    print(summary[["path", "provider", "repeat", "median_us", "mean_us"]].to_string(index=False, float_format="%.2f"))
    print(differences[["path", "provider", "repeat", "impl_us", "reference_us", "difference_us", "percent"]]
          .to_string(index=False, float_format="%.2f"))
    if not sweep.empty:
        print(sweep[["path", "provider", "M", "N", "whole_call_us", "graph_us", "device_us", "cold_us",
                     "device_ops_per_call", "gbps_cold"]]
              .to_string(index=False, float_format="%.2f"))
    print(f"copy ceiling: {ceiling} GB/s; L2 flush check: {flush_check}; "
          f"wrote {args.out} in {environment['wall_seconds']} s")
    if failures:
        print("FAILURES (a shape that failed its check was not timed):", *failures, sep="\n  ")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

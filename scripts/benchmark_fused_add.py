"""The fused residual add + RMSNorm side by side on a GPU: kernel time L2 cold, then the whole call.

    python3 scripts/benchmark_fused_add.py --out results/h200 --budget-s 500
        # fused_add_kernel.csv, fused_add_whole_call.csv, fused_add_environment.json

Providers (rmsnorm_lab.fused_add_bench.PROVIDERS): ``fast_fused`` (rmsnorm.rmsnorm_add), ``fast_unfused`` (eager
add, then rmsnorm_fast: two launches), ``liger`` (LigerFusedAddRMSNormFunction), ``quack`` (quack.rmsnorm with
residual and prenorm=True), ``compile`` (torch.compile of add-then-F.rms_norm) and ``eager`` (the same,
uncompiled). Every call's outputs (y, residual_out; dx, d residual, dweight from random dy and d residual_out)
are checked against the float64 oracle before it is timed; a missing peer is recorded as refused with the reason.

1. Kernel time: the forward and the backward each alone, rmsnorm_lab.kernel_time_us (L2 flushed before each
   call), at 16384 x 5120 and 32768 x 8192 bf16, then the main grid (rmsnorm_lab.sidebyside.GRID); GB/s from
   the declared fused-add bytes, the same for everyone. Until --kernel-share of --budget-s is spent.
2. Whole call: forward (no grad) and forward + backward through each public call, CUDA events around
   back-to-back calls and host us beside (rmsnorm_lab.wholecall.fill_times), at the host-bound shapes of
   rmsnorm_lab.wholecall. Until --budget-s is spent.

A provider not started for want of time is recorded as such. The CSVs are rewritten after every shape, and the
environment file is written first and last (``complete``), so a run cut short keeps what it measured. Never
asserts a speed-up; without CUDA it says so in one line.

Source: scripts/benchmark_offset.py; rmsnorm_lab/fused_add_bench.py.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the checkout, for `import rmsnorm`

import rmsnorm  # noqa: E402

# isort: split
import torch  # noqa: E402

KERNEL_FILE, WHOLE_CALL_FILE, ENVIRONMENT_FILE = ("fused_add_kernel.csv", "fused_add_whole_call.csv",
                                                  "fused_add_environment.json")
PARTS = ("kernel", "whole_call")


def _version(distribution: str) -> str | None:
    """The installed version of a peer (None when absent), for the environment file."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(distribution)
    except PackageNotFoundError:
        return None


def _environment(args, providers, rows, started, *, complete: bool) -> dict:
    from rmsnorm_lab import environment_info, timing
    from rmsnorm_lab import fused_add_bench as bench

    env = environment_info() | {"quack": _version("quack-kernels"), "eps": bench.EPS}
    env["fused_add"] = {
        "parts": args.parts, "providers": {p: bench.DESCRIPTIONS[p] for p in providers},
        "kernel_shapes": [[m, n, str(d).removeprefix("torch.")] for m, n, d in bench.GRID],
        "whole_call_shapes": [[m, n, str(d).removeprefix("torch.")] for m, n, d in bench.WHOLE_CALL_SHAPES],
        "bytes": "rmsnorm_lab.fused_add_forward_bytes / fused_add_backward_bytes (residual in x's dtype), "
                 "the same for every provider; gbps = bytes / us / 1e3",
        "us": f"kernel_time_us: torch.profiler device time per call, L2 flushed before each, {args.calls} calls",
        "whole_call_us": f"time_whole_calls: CUDA events around {timing.CALLS_PER_SAMPLE} back-to-back calls, median "
                         f"of {args.samples or timing.SAMPLES} samples",
        "host_us": f"time_host_calls: CPU wall time of {timing.HOST_CALLS_PER_SAMPLE} calls without synchronising, "
                   f"median of {args.samples or timing.HOST_SAMPLES} samples",
        "backward": "torch.autograd.grad((y, residual_out), (x, residual, weight), (dy, d_residual_out)), dy and "
                    "d_residual_out random; forward_backward: the call on leaves, then autograd.backward of both",
        "check": "every output against the float64 oracle at h = x + residual (rmsnorm_lab.fused_add_bench.check)",
        "budget_s": args.budget_s, "kernel_share": args.kernel_share,
        "not_timed": sorted({f"{r['provider']}: {r['check']}" for r in rows if r["check"] != "ok"}),
        "wall_seconds": round(time.perf_counter() - started, 1), "complete": complete,
    }
    (args.out / ENVIRONMENT_FILE).write_text(json.dumps(env, indent=2, default=str) + "\n", encoding="utf-8")
    return env


def _ratios(table, value: str, keys):
    """One row per shape and pass, µs per provider, and each peer's µs / fast_fused's (> 1: fast_fused ahead)."""
    ok = table[table["check"] == "ok"]
    if ok.empty:
        return "nothing timed"
    pivot = ok.pivot_table(index=keys, columns="provider", values=value, sort=False)
    for other in [p for p in pivot.columns if p != "fast_fused" and "fast_fused" in pivot.columns]:
        pivot[f"{other}/fused"] = pivot[other] / pivot["fast_fused"]
    return pivot.round(2).to_string()


def main(argv=None) -> int:
    """Parse arguments, run, write the CSVs and the environment file; return the exit status."""
    from rmsnorm_lab import fused_add_bench as bench

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("results/h200"), help="folder for the CSVs and the json")
    parser.add_argument("--parts", default=",".join(PARTS), help="comma-separated: kernel, whole_call")
    parser.add_argument("--providers", default=",".join(bench.PROVIDERS), help="comma-separated, in order")
    parser.add_argument("--calls", type=int, default=20, help="profiled calls per kernel time")
    parser.add_argument("--samples", type=int, default=None, help="whole-call and host samples (default 50 and 20)")
    parser.add_argument("--budget-s", type=float, default=500.0, help="seconds after which no provider is started")
    parser.add_argument("--kernel-share", type=float, default=0.7, help="share of the budget the kernel part may use")
    args = parser.parse_args(argv)
    parts, providers = args.parts.split(","), args.providers.split(",")
    for what, given, known in (("parts", parts, PARTS), ("providers", providers, bench.PROVIDERS)):
        if set(given) - set(known):
            parser.error(f"--{what}: {', '.join(sorted(set(given) - set(known)))} unknown; known: {', '.join(known)}")
    if args.calls < 1 or (args.samples is not None and args.samples < 1):
        parser.error(f"--calls and --samples must be at least 1; got {args.calls} and {args.samples}")
    if not 0 < args.kernel_share <= 1:
        parser.error(f"--kernel-share must be in (0, 1]; got {args.kernel_share}")
    from rmsnorm_lab import timing

    try:
        timing.require_cuda()
    except timing.BenchmarkUnavailableError:
        print("benchmark_fused_add: no CUDA GPU here, nothing timed")
        return 0
    import pandas as pd

    started = time.perf_counter()
    args.out.mkdir(parents=True, exist_ok=True)
    device = "cuda" if torch.cuda.is_available() else "cpu"  # cpu: the tests' fake timers
    print(f"kernels run on: {rmsnorm.describe_backend()} | torch {torch.__version__} | budget {args.budget_s:.0f} s")
    kernel, whole = [], []
    _environment(args, providers, [], started, complete=False)
    if "kernel" in parts:
        deadline = started + args.kernel_share * args.budget_s
        for shape in bench.GRID:
            kernel += bench.kernel_rows([shape], providers, calls=args.calls, deadline=deadline, device=device)
            pd.DataFrame(kernel, columns=list(bench.KERNEL_COLUMNS)).to_csv(args.out / KERNEL_FILE, index=False,
                                                                            float_format="%.4g")
            print(f"{shape[0]}x{shape[1]} {str(shape[2])[6:]} done at {time.perf_counter() - started:.0f} s")
    if "whole_call" in parts:
        for shape in bench.WHOLE_CALL_SHAPES:
            whole += bench.whole_call_rows([shape], providers, samples=args.samples,
                                           deadline=started + args.budget_s, device=device)
            pd.DataFrame(whole, columns=list(bench.WHOLE_CALL_COLUMNS)).to_csv(args.out / WHOLE_CALL_FILE,
                                                                               index=False, float_format="%.4g")
            print(f"{shape[0]}x{shape[1]} {str(shape[2])[6:]} whole call done at {time.perf_counter() - started:.0f} s")
    env = _environment(args, providers, kernel + whole, started, complete=True)
    pd.set_option("display.width", 250)
    pd.set_option("display.max_columns", 30)
    if kernel:
        print("\nkernel time, µs (L2 cold):\n" + _ratios(pd.DataFrame(kernel), "us", ["M", "N", "dtype", "pass_"]))
    for value in ("whole_call_us", "host_us"):
        if whole:
            print(f"\n{value}, µs per call:\n" + _ratios(pd.DataFrame(whole), value, ["M", "N", "dtype", "pass_"]))
    print(f"\nwrote {args.out} in {env['fused_add']['wall_seconds']} s; not timed: "
          f"{env['fused_add']['not_timed'] or 'none'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

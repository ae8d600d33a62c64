"""The fast LayerNorm side by side on a GPU: kernel time L2 cold, then the whole call; and the results table.

    python3 scripts/benchmark_layernorm.py --out results/h200 --budget-s 480
        # layernorm_kernel.csv, layernorm_whole_call.csv, layernorm_environment.json
    python3 scripts/benchmark_layernorm.py --out results/h200 --table
        # the table of fast against the best of liger, quack and compile, from layernorm_kernel.csv (no GPU)

Providers (rmsnorm_lab.layernorm_bench.PROVIDERS): ``fast`` (rmsnorm.layernorm_fast), ``liger``
(LigerLayerNormFunction), ``quack`` (quack.rmsnorm.layernorm_fwd, float32 weight and bias only; its backward through
its own function where it has one), ``compile`` (torch.compile of F.layer_norm) and ``eager`` (F.layer_norm). Every
call's outputs (y; dx, dweight, dbias from a random dy) are checked against F.layer_norm in float64 before it is
timed; a missing peer is recorded as refused with the reason.

1. Kernel time: the forward and the backward each alone, rmsnorm_lab.kernel_time_us (L2 flushed before each
   call), at rmsnorm_lab.layernorm_bench.GRID (the weight dtype declared per shape); GB/s from the declared
   LayerNorm bytes, the same for everyone. Until --kernel-share of --budget-s is spent.
2. Whole call: forward (no grad) and forward + backward through each public call at the host-bound shapes of
   rmsnorm_lab.wholecall. Until --budget-s is spent.

The CSVs are rewritten after every shape, and the environment file is written first and last (``complete``), so
a run cut short keeps what it measured. Never asserts a speed-up; without CUDA it says so in one line.

Source: scripts/benchmark_fused_add.py; rmsnorm_lab/layernorm_bench.py.
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

KERNEL_FILE, WHOLE_CALL_FILE, ENVIRONMENT_FILE = ("layernorm_kernel.csv", "layernorm_whole_call.csv",
                                                  "layernorm_environment.json")
PARTS = ("kernel", "whole_call")
KEYS = ["M", "N", "dtype", "weight_dtype", "pass_"]


def _table(out: Path) -> int:
    """Print fast against the best of liger, quack and compile per shape and pass, and the geometric means."""
    import pandas as pd

    from rmsnorm_lab import layernorm_bench as bench

    table = bench.best_peer_table(pd.read_csv(out / KERNEL_FILE))
    print(table.to_markdown(index=False, floatfmt=".3g"))
    print("\ngeometric means of best peer / fast: " + ", ".join(
        f"{p} {g:.3f}" for p, g in bench.geometric_means(table).items()))
    return 0


def _version(distribution: str) -> str | None:
    """The installed version of a peer (None when absent), for the environment file."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(distribution)
    except PackageNotFoundError:
        return None


def _environment(args, providers, rows, started, *, complete: bool) -> dict:
    from rmsnorm_lab import environment_info, timing
    from rmsnorm_lab import layernorm_bench as bench

    env = environment_info() | {"quack": _version("quack-kernels"), "liger": _version("liger-kernel"),
                                "eps": bench.EPS}
    env["layernorm"] = {
        "parts": args.parts, "providers": {p: bench.DESCRIPTIONS[p] for p in providers},
        "kernel_shapes": [[m, n, str(d)[6:], str(w)[6:]] for m, n, d, w in bench.GRID],
        "whole_call_shapes": [[m, n, str(d)[6:], str(w)[6:]] for m, n, d, w in bench.WHOLE_CALL_SHAPES],
        "bytes": "rmsnorm_lab.layernorm_forward_bytes (2MNs + 2Ns_w + 8M) / layernorm_backward_bytes "
                 "(3MNs + 3Ns_w + 8M), the same for every provider; gbps = bytes / us / 1e3",
        "us": f"kernel_time_us: torch.profiler device time per call, L2 flushed before each, {args.calls} calls",
        "whole_call_us": f"time_whole_calls: CUDA events around {timing.CALLS_PER_SAMPLE} back-to-back calls, median "
                         f"of {args.samples or timing.SAMPLES} samples",
        "host_us": f"time_host_calls: CPU wall time of {timing.HOST_CALLS_PER_SAMPLE} calls without synchronising, "
                   f"median of {args.samples or timing.HOST_SAMPLES} samples",
        "backward": "torch.autograd.grad(y, (x, weight, bias), dy), dy random (QuACK: its own backward function); "
                    "forward_backward: the call on leaves, then backward",
        "check": "every output against F.layer_norm in float64 (rmsnorm_lab.layernorm_bench.check)",
        "budget_s": args.budget_s, "kernel_share": args.kernel_share,
        "not_timed": sorted({f"{r['provider']}: {r['check']}" for r in rows if r["check"] != "ok"}),
        "wall_seconds": round(time.perf_counter() - started, 1), "complete": complete,
    }
    (args.out / ENVIRONMENT_FILE).write_text(json.dumps(env, indent=2, default=str) + "\n", encoding="utf-8")
    return env


def _ratios(table, value: str, keys):
    """One row per shape and pass, µs per provider, and each peer's µs / fast's (> 1: fast ahead)."""
    ok = table[table["check"] == "ok"]
    if ok.empty:
        return "nothing timed"
    pivot = ok.pivot_table(index=keys, columns="provider", values=value, sort=False)
    for other in [p for p in pivot.columns if p != "fast" and "fast" in pivot.columns]:
        pivot[f"{other}/fast"] = pivot[other] / pivot["fast"]
    return pivot.round(2).to_string()


def main(argv=None) -> int:
    """Parse arguments, run, write the CSVs and the environment file; return the exit status."""
    from rmsnorm_lab import layernorm_bench as bench

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("results/h200"), help="folder for the CSVs and the json")
    parser.add_argument("--parts", default=",".join(PARTS), help="comma-separated: kernel, whole_call")
    parser.add_argument("--providers", default=",".join(bench.PROVIDERS), help="comma-separated, in order")
    parser.add_argument("--calls", type=int, default=20, help="profiled calls per kernel time")
    parser.add_argument("--samples", type=int, default=None, help="whole-call and host samples (default 50 and 20)")
    parser.add_argument("--budget-s", type=float, default=480.0, help="seconds after which no provider is started")
    parser.add_argument("--kernel-share", type=float, default=0.7, help="share of the budget the kernel part may use")
    parser.add_argument("--table", action="store_true", help="print the table from --out's kernel CSV")
    args = parser.parse_args(argv)
    if args.table:
        return _table(args.out)
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
        print("benchmark_layernorm: no CUDA GPU here, nothing timed")
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
        print("\nkernel time, µs (L2 cold):\n" + _ratios(pd.DataFrame(kernel), "us", KEYS))
    for value in ("whole_call_us", "host_us"):
        if whole:
            print(f"\n{value}, µs per call:\n" + _ratios(pd.DataFrame(whole), value, KEYS))
    print(f"\nwrote {args.out} in {env['layernorm']['wall_seconds']} s; not timed: "
          f"{env['layernorm']['not_timed'] or 'none'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

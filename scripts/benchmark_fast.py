"""The fast path side by side on a GPU: kernel time, L2 cold, every output checked first.

    python3 scripts/benchmark_fast.py --out results/h200            # the side-by-side table
    python3 scripts/benchmark_fast.py --out results/h200 --tune     # and the config sweep first
    python3 scripts/benchmark_fast.py --out results/h200 --grid weak  # the weak-shape grid: fast_weak.csv
    python3 scripts/benchmark_fast.py --out /tmp/t --tune-only --tune-at "bfloat16:1,3,257;float32:1"
        # the config sweep alone, at widths of the cliff sweep (x of 128 MiB), compiled in 15 processes first
    python3 scripts/benchmark_fast.py --out /tmp/t --tune-only --norm layernorm \
        --tune-at "bfloat16+float32:768,12288;bfloat16:16384"   # the LayerNorm's sweep (x dtype+weight dtype)

Runs :func:`rmsnorm_lab.sidebyside.side_by_side` over its GRID (fast,
article, eager, compile with MixOrderReduction on and off, Liger, QuACK where
installed), writes ``fast.csv`` (``fast_weak.csv`` for ``--grid weak``, the
WEAK_GRID; with --tune also ``fast_tuning.csv``, or with ``--norm layernorm``
``layernorm_tuning.csv``, the LayerNorm's sweep at rmsnorm_lab.layernorm_bench.GRID), ``fast_environment.json``
(device, versions, the measured copy rate), and prints the ratio table and the
geometric means against compile and against the best peer (the fastest of
compile, Liger and QuACK that passed the oracle at that shape). Never asserts a
speed-up; without a GPU it says so and exits 0.

Source: notebooks/12_tuning_and_side_by_side.ipynb; rmsnorm_lab/sidebyside.py.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the checkout, for `import rmsnorm`

import rmsnorm  # noqa: E402  (the checkout's package, found through the path above)

# isort: split
import torch  # noqa: E402


def _tune_at(parser, text: str) -> list[tuple[torch.dtype, torch.dtype, int]]:
    """``--tune-at``'s (x dtype, weight dtype, N) list: "bfloat16+float32:768,12288;float16:257" (the weight in
    x's dtype where no ``+`` names one); a parser error for a name that is not a float dtype or a width below 1."""
    shapes = []
    for part in filter(None, text.split(";")):
        names, _, widths = part.partition(":")
        dtypes = [getattr(torch, name, None) for name in names.split("+")]
        if not widths or len(dtypes) > 2 or not all(d in (torch.float32, torch.float16, torch.bfloat16)
                                                    for d in dtypes):
            parser.error(f"--tune-at: {part!r} is not 'dtype[+weight dtype]:N,N,...' with float32, float16 or "
                         "bfloat16")
        try:
            ns = [int(n) for n in widths.split(",")]
        except ValueError:
            ns = [0]
        if min(ns) < 1:
            parser.error(f"--tune-at: {widths!r} holds a width that is not a whole number of at least 1")
        shapes += [(dtypes[0], dtypes[-1], n) for n in ns]
    return shapes


def main(argv=None) -> int:
    """Parse arguments, run, write the files; return the exit status."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("results/h200"))
    parser.add_argument("--tune", action="store_true", help="run the config sweep first (fast_tuning.csv)")
    parser.add_argument("--tune-budget", type=float, default=240.0, help="seconds the sweep may take")
    parser.add_argument("--tune-passes", default="forward,backward", help="which passes the sweep covers")
    parser.add_argument("--tune-at", default="",
                        help="sweep these widths instead of the grid, x of 128 MiB (as the cliff sweep): "
                             "'bfloat16:1,3,257;float32:1'")
    parser.add_argument("--tune-only", action="store_true", help="run the config sweep and nothing else")
    parser.add_argument("--norm", choices=("rmsnorm", "layernorm", "rmsnorm_add"), default="rmsnorm",
                        help="the norm the sweep tunes (rmsnorm_lab.tuning.NORMS; other than rmsnorm: with "
                             "--tune-only, into <norm>_tuning.csv)")
    parser.add_argument("--compile-workers", type=int, default=15,
                        help="processes that compile the sweep's configurations first (0: compile while timing)")
    parser.add_argument("--grid", choices=("main", "weak"), default="main", help="GRID (fast.csv) or WEAK_GRID")
    parser.add_argument("--only", default="", help="comma-separated indices into the grid")
    parser.add_argument("--providers", default="", help="comma-separated provider names (default: all)")
    parser.add_argument("--budget-s", type=float, default=float("inf"),
                        help="seconds after which no further shape is started (the environment file lists them)")
    args = parser.parse_args(argv)
    if args.norm != "rmsnorm" and not args.tune_only:
        parser.error(f"--norm {args.norm} tunes only (--tune-only); its side by side is its own script")
    if args.norm != "rmsnorm" and (args.only or args.grid != "main"):
        parser.error(f"--norm {args.norm} sweeps its own grid or --tune-at's widths; --only and --grid choose "
                     "among the RMSNorm's shapes")
    tune_at = _tune_at(parser, args.tune_at)
    if not torch.cuda.is_available():
        print("benchmark_fast: no CUDA GPU here, nothing timed (the committed results are in results/h200/fast.csv)")
        return 0
    import pandas as pd

    from rmsnorm_lab import copy_bandwidth_gbps
    from rmsnorm_lab.eager import eager_provenance
    from rmsnorm_lab.results import code_provenance, environment_info
    from rmsnorm_lab.sidebyside import (
        GRID,
        SIDE_BY_SIDE,
        WEAK_GRID,
        best_peer_means,
        ratio_table,
        side_by_side,
        tune,
    )
    from rmsnorm_lab.timing import L2_FLUSH_BYTES

    args.out.mkdir(parents=True, exist_ok=True)
    grid = WEAK_GRID if args.grid == "weak" else GRID
    shapes = [grid[int(i)] for i in args.only.split(",")] if args.only else list(grid)
    providers = args.providers.split(",") if args.providers else list(SIDE_BY_SIDE)
    print(f"kernels run on: {rmsnorm.describe_backend()} | torch {torch.__version__}")
    if args.tune or args.tune_only:
        tune_shapes = shapes
        if args.norm == "layernorm":
            from rmsnorm_lab.layernorm_bench import GRID as tune_shapes
        if tune_at:
            from rmsnorm_lab.cliffs import rows_for

            tune_shapes = [(rows_for(n, dtype), n, dtype, weight_dtype) for dtype, weight_dtype, n in tune_at]
        rows = tune(tune_shapes, args.tune_budget, args.tune_passes.split(","), args.compile_workers, args.norm)
        stem = "fast_tuning" if args.norm == "rmsnorm" else f"{args.norm}_tuning"
        pd.DataFrame(rows).to_csv(args.out / f"{stem}.csv", index=False)
        sweep = {"norm": args.norm, "shapes": [[M, N, *(str(d).removeprefix("torch.") for d in rest)]
                                               for M, N, *rest in tune_shapes],
                 "budget_s": args.tune_budget, "passes": args.tune_passes,
                 "timing": "rmsnorm_lab.kernel_time_us(calls=10, warmup=2), L2 flushed before each call"}
        (args.out / f"{stem}_environment.json").write_text(json.dumps({**environment_info(), "sweep": sweep},
                                                                      indent=2) + "\n")
        if args.tune_only:
            return 0
    copy = copy_bandwidth_gbps()
    print(f"copy rate (1 GiB device-to-device, read + write): {copy:.0f} GB/s")
    started, parts, not_run = time.perf_counter(), [], []
    for shape in shapes:  # the CSV is rewritten after every shape: a run cut short keeps what it measured
        if time.perf_counter() - started > args.budget_s:
            not_run.append([shape[0], shape[1], *(str(d).removeprefix("torch.") for d in shape[2:])])
            continue
        parts.append(side_by_side([shape], providers, copy_gbps=copy))
        table = pd.concat(parts, ignore_index=True)
        table.to_csv(args.out / ("fast_weak.csv" if args.grid == "weak" else "fast.csv"), index=False)
    if not_run:
        print(f"budget of {args.budget_s:.0f} s spent; not run: {not_run}")
    if not parts:
        return 0
    import triton

    env = {"device": torch.cuda.get_device_name(0), "torch": torch.__version__, "triton": triton.__version__,
           "copy_rate_gbps": copy, "date": time.strftime("%Y-%m-%d"), "flush_bytes": L2_FLUSH_BYTES,
           "timing": "rmsnorm_lab.kernel_time_us: profiler kernel time, L2 flushed before each call",
           "providers": providers, "not_run": not_run, "wall_seconds": round(time.perf_counter() - started, 1),
           "eager_rms_norm": eager_provenance(), "code": code_provenance()}
    env_name = "fast_weak_environment.json" if args.grid == "weak" else "fast_environment.json"
    (args.out / env_name).write_text(json.dumps(env, indent=2) + "\n")
    pivot = ratio_table(table)
    pd.set_option("display.width", 250)
    pd.set_option("display.max_columns", 30)
    print(pivot.round(2).to_string())
    for pass_ in ("forward", "backward"):
        sub = pivot.xs(pass_, level="pass_")
        if "fast_vs_compile" in sub:
            gm = float(sub["fast_vs_compile"].prod() ** (1 / len(sub)))
            print(f"{pass_}: geometric mean of compile/fast over {len(sub)} shapes = {gm:.3f}")
    for pass_, mean in best_peer_means(table).items():
        print(f"{pass_}: geometric mean of best peer/fast = {mean:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Sweep 8 and the float32 backward's row arithmetic: float32 (past N = 64) against float64, one run.

    python3 scripts/probe_float32_arithmetic.py --out results/h200   # on a GPU (about 140 s on the H200)

In one process: the float32 backward's config sweep at eight widths (x of 128 MiB,
``rmsnorm_lab.tuning.tune``; its rows are sweep 8 of ``fast_tuning.csv``, the sweep columns
added when committed), then the fast path at ten widths with float32 arithmetic beside
torch.compile and Liger (``rmsnorm_lab.cliffs.measure``), the same widths with float64
arithmetic (``FLOAT64_MAX_N`` raised past every N: ``fast_float64``), and the same at the
benchmark's float32 shapes (``rmsnorm_lab.sidebyside.side_by_side``). Every output is
checked against the float64 oracle before it is timed. Writes ``sweep8.csv``,
``float32_arithmetic.csv`` and ``float32_arithmetic_environment.json`` (``rmsnorm_lab.environment_info``).
Never asserts a speed; without a GPU it says so and exits 0.

The committed run timed the table before sweep 8 (at fb1e5f4 with the arithmetic change); run
now, it times the table after it, so ``fast_float64`` is then today's configurations in float64
(one block of 16384 where the committed run looped), another baseline.

Source: lesson 12 §11 (float32 rows in float32 arithmetic); rmsnorm/config.py (``row_arithmetic_dtype``).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the checkout, for `import rmsnorm`

import rmsnorm  # noqa: E402,F401  (the checkout's package, found through the path above)

# isort: split
import torch  # noqa: E402

#: The widths of the sweep, and of the comparison (x of 128 MiB each).
SWEEP_WIDTHS = (257, 1000, 3000, 4096, 4097, 8192, 12289, 16384)
WIDTHS = (65, 257, 1000, 3000, 4096, 4097, 8192, 12289, 16384, 32768)


def main(argv=None) -> int:
    """Parse arguments, run, write the files; return the exit status."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("results/h200"))
    parser.add_argument("--tune-budget", type=float, default=130.0, help="seconds the sweep may take")
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        print("probe_float32_arithmetic: no CUDA GPU here, nothing timed "
              "(the committed run is results/h200/float32_arithmetic.csv)")
        return 0
    import pandas as pd

    import rmsnorm.backward as backward
    import rmsnorm.config as config
    from rmsnorm_lab import copy_bandwidth_gbps, environment_info
    from rmsnorm_lab.cliffs import measure, rows_for
    from rmsnorm_lab.sidebyside import GRID, WEAK_GRID, side_by_side
    from rmsnorm_lab.tuning import tune

    def arithmetic(max_n: int) -> None:
        config.FLOAT64_MAX_N = max_n  # read at every launch; the launch cache is keyed without it
        backward._launch.cache.clear()

    args.out.mkdir(parents=True, exist_ok=True)
    started, f32 = time.perf_counter(), torch.float32
    sweep = tune([(rows_for(n, f32), n, f32) for n in SWEEP_WIDTHS], args.tune_budget, ["backward"], 15)
    pd.DataFrame(sweep).to_csv(args.out / "sweep8.csv", index=False)
    copy, default = copy_bandwidth_gbps(), config.FLOAT64_MAX_N
    widths_new = pd.DataFrame(measure(WIDTHS, f32, ("fast", "compile", "liger"), deadline=started + 330))
    arithmetic(1 << 30)
    widths_old = pd.DataFrame(measure(WIDTHS, f32, ("fast",), deadline=started + 380)).assign(provider="fast_float64")
    shapes = [GRID[9], WEAK_GRID[19], (128, 257, f32, f32)]
    shapes_old = side_by_side(shapes, ("fast",), copy_gbps=copy).assign(provider="fast_float64")
    arithmetic(default)
    shapes_new = side_by_side(shapes, ("fast", "compile", "liger"), copy_gbps=copy)
    widths = pd.concat([widths_new, widths_old]).assign(measured_at="x of 128 MiB")
    widths["weight"] = widths["dtype"]
    columns = ["measured_at", "M", "N", "dtype", "weight", "pass_", "provider", "us", "bytes", "tbps", "check"]
    table = pd.concat([widths, pd.concat([shapes_new, shapes_old]).assign(measured_at="benchmark shape")])
    table[columns].to_csv(args.out / "float32_arithmetic.csv", index=False)
    env = {**environment_info(), "script": "scripts/probe_float32_arithmetic.py",
           "wall_seconds": round(time.perf_counter() - started, 1)}
    (args.out / "float32_arithmetic_environment.json").write_text(json.dumps(env, indent=2) + "\n", encoding="utf-8")
    print(f"wrote {args.out}/sweep8.csv, float32_arithmetic.csv and its environment "
          f"in {time.perf_counter() - started:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())

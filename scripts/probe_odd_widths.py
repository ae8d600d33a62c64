"""Sweep 9: the backward at the odd widths no sweep had timed, beside torch.compile and Liger, one run.

    python3 scripts/probe_odd_widths.py --out results/h200   # on a GPU (about 250 s on the H200)

Sweep 7 chose the odd-N rule at bf16 (257, 2047, 12289) and float32 4097; sweep 8 chose the short
odd float32 rule at 257 only. Float32 rows of 513-4095 still run sweep 7's bf16-chosen rule, the
short float32 rule was never timed at 65 or 511, and 16-bit rows of 4097-8191 keep the even table.
In one process: the backward's config sweep at those widths (x of 128 MiB,
``rmsnorm_lab.tuning.tune``; ``table_when_swept`` marks the table's own configuration, as in
sweeps 7 and 8), then the fast path (today's table), torch.compile and Liger at the same widths
(``rmsnorm_lab.cliffs.measure``: every output checked against the float64 oracle first).
Writes ``sweep9.csv``, ``odd_widths.csv`` and ``odd_widths_environment.json``. Never asserts a
speed; without a GPU it says so and exits 0.

Source: lesson 12 §10 (odd widths); rmsnorm/config.py (``backward_config``).
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

#: (dtype, N) of the sweep and of the comparison: each an odd width whose rule no sweep timed.
#: In the order swept: if the budget runs out, the last ones go untimed.
WIDTHS = (("float32", 65), ("float32", 1025), ("float32", 4095), ("bfloat16", 4097),
          ("float32", 511), ("bfloat16", 6143))


def main(argv=None) -> int:
    """Parse arguments, run, write the files; return the exit status."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("results/h200"))
    parser.add_argument("--tune-budget", type=float, default=170.0, help="seconds the sweep may take")
    parser.add_argument("--budget", type=float, default=300.0, help="seconds before no new comparison width starts")
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        print("probe_odd_widths: no CUDA GPU here, nothing timed (the committed run is results/h200/odd_widths.csv)")
        return 0
    import pandas as pd

    from rmsnorm_lab.cliffs import measure, rows_for
    from rmsnorm_lab.results import environment_info
    from rmsnorm_lab.tuning import tune

    args.out.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    shapes = [(rows_for(n, getattr(torch, d)), n, getattr(torch, d)) for d, n in WIDTHS]
    sweep = pd.DataFrame(tune(shapes, args.tune_budget, ["backward"], 15))
    sweep.to_csv(args.out / "sweep9.csv", index=False)
    rows = []
    for d in ("float32", "bfloat16"):
        widths = [n for dtype, n in WIDTHS if dtype == d]
        rows += measure(widths, getattr(torch, d), ("fast", "compile", "liger"), deadline=started + args.budget)
    pd.DataFrame(rows).to_csv(args.out / "odd_widths.csv", index=False)
    (args.out / "odd_widths_environment.json").write_text(json.dumps(environment_info(), indent=2) + "\n")
    print(f"wrote {args.out}/sweep9.csv and odd_widths.csv in {time.perf_counter() - started:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Record the configuration functions' choices at every N, run-length encoded, in a CSV.

    python tools/record_config.py [--out tests/data/config_before.csv]

One row per run of consecutive N of one parity with the same :class:`rmsnorm.FastConfig`:
``pass_, dtype, parity, N_first, N_last`` (the run is N_first, N_first + 2, …, N_last) and the
FastConfig's fields (an empty ``programs_per_sm`` is None: one program per row block). Parity is
a key because the backward's choice alternates between odd and even N up to 16384: runs over
every N would take 41,009 rows (2 MB), over each parity a few dozen. Both functions take
(N, x dtype, dense_rows); N runs over 1..MAX_N, the dtype over float32, float16 and bfloat16, and
``dense_rows`` over False (rows in any layout) and True (rows one dense run, where a flat rule may apply).
tests/library/test_config_table.py compares the functions with the committed file at every N, so a change
to the rule tables that moves any choice fails.
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # the checkout, for `import rmsnorm`

import torch  # noqa: E402

from rmsnorm import FastConfig, backward_config, forward_config  # noqa: E402

#: Widest row recorded (columns).
MAX_N = 262144
DTYPES = ("float32", "float16", "bfloat16")
PASSES = {"forward": forward_config, "backward": backward_config}
FIELDS = [f.name for f in dataclasses.fields(FastConfig)]
PARITIES = ("odd", "even")
HEADER = ["pass_", "dtype", "dense_rows", "parity", "N_first", "N_last", *FIELDS]


def config_runs(max_n: int = MAX_N) -> list[list]:
    """Rows ``[pass_, dtype, dense_rows, parity, N_first, N_last, *fields]``, one per run of equal configurations."""
    rows = []
    for pass_, choose in PASSES.items():
        choose = getattr(choose, "__wrapped__", choose)  # the uncached function: 3 M keys need no cache
        for dtype in DTYPES:
            for dense in (False, True):
                for start, parity in ((1, "odd"), (2, "even")):
                    first, last, values = start, start, None
                    for N in range(start, max_n + 1, 2):
                        cfg = choose(N, getattr(torch, dtype), dense)
                        now = [getattr(cfg, f) for f in FIELDS]
                        if now != values and values is not None:
                            rows.append([pass_, dtype, dense, parity, first, last, *values])
                            first = N
                        values, last = now, N
                    rows.append([pass_, dtype, dense, parity, first, last, *values])
    return rows


def _cell(v) -> str:
    return "" if v is None else str(v)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "tests" / "data" / "config_before.csv")
    args = parser.parse_args(argv)
    rows = config_runs()
    with open(args.out, "w", newline="") as f:
        writer = csv.writer(f, lineterminator="\n")
        writer.writerow(HEADER)
        writer.writerows([[_cell(v) for v in row] for row in rows])
    print(f"{len(rows)} runs written to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

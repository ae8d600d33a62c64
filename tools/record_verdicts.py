"""Write tests/data/verdicts.csv: what the checkers say about every answer the checker tests build.

Usage (on the CPU, Triton's interpreter; a few minutes)::

    PYTHONPATH=. python tools/record_verdicts.py [--only EXERCISE]

One row per answer of :func:`verdict_variants.variants` (tests/course/): exercise,
variant, verdict (passed / wrong / not done yet) and the Feedback's message,
normalised (:func:`verdict_variants.normalise`). tests/course/test_verdicts.py asserts
it: a checker's words change only with a line in this file's diff.
"""

from __future__ import annotations

import argparse
import csv
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests" / "course")]

import rmsnorm_course  # noqa: E402,F401  (first: the interpreter is switched on before triton is imported)
import verdict_variants  # noqa: E402
from rmsnorm_course.checkers import isolate  # noqa: E402


def record(only: str | None = None) -> list[dict]:
    rows = []
    for exercise, variant, run, hangs in verdict_variants.variants():
        if only is not None and exercise != only:
            continue
        begin = time.monotonic()
        limit = isolate.CASE_TIME_LIMIT_S
        isolate.CASE_TIME_LIMIT_S = verdict_variants.HANG_LIMIT_S if hangs else limit
        try:
            feedback = run()
        finally:
            isolate.CASE_TIME_LIMIT_S = limit
        rows.append({"exercise": exercise, "variant": variant, "verdict": feedback.status,
                     "message": verdict_variants.normalise(feedback.message)})
        print(f"{time.monotonic() - begin:5.1f} s  {exercise} · {variant}: {feedback.status}", flush=True)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=verdict_variants.FIXTURE)
    parser.add_argument("--only", help="one exercise (its rows are printed, the fixture is not written)")
    args = parser.parse_args()
    rows = record(args.only)
    if args.only is not None:
        for row in rows:
            print(row)
        return
    with args.out.open("w", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, fieldnames=verdict_variants.COLUMNS, lineterminator="\n")
        writer.writeheader()
        writer.writerows(rows)
    print(f"{len(rows)} verdicts written to {args.out}")


if __name__ == "__main__":
    main()

"""Write tests/data/verdicts.csv: what the checkers say about every answer the checker tests build.

Usage (on the CPU, Triton's interpreter; a few minutes)::

    PYTHONPATH=. python tools/record_verdicts.py [--only EXERCISE]   # EXERCISE: e.g. "15 backward"

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


def merged(old: list[dict], new: list[dict], order: list[tuple[str, str]]) -> list[dict]:
    """The fixture's rows with ``new``'s replacing theirs, in ``order`` ((exercise, variant), the answers' order)."""
    rows = {(row["exercise"], row["variant"]): row for row in old}
    rows.update({(row["exercise"], row["variant"]): row for row in new})
    return [rows[key] for key in order if key in rows]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=verdict_variants.FIXTURE)
    parser.add_argument("--only", help="one exercise, e.g. '15 backward': its rows are recorded again, the others kept")
    args = parser.parse_args()
    rows = record(args.only)
    if args.only is not None:
        if not rows:
            sys.exit(f"no answers of exercise {args.only!r}: the exercises are "
                     f"{sorted({exercise for exercise, *_ in verdict_variants.variants()})}")
        with args.out.open(newline="", encoding="utf-8") as f:
            old = [row for row in csv.DictReader(f) if row["exercise"] != args.only]
        rows = merged(old, rows, [(exercise, variant) for exercise, variant, *_ in verdict_variants.variants()])
    with args.out.open("w", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, fieldnames=verdict_variants.COLUMNS, lineterminator="\n")
        writer.writeheader()
        writer.writerows(rows)
    print(f"{len(rows)} verdicts written to {args.out}")


if __name__ == "__main__":
    main()

"""Write (or check) the fast path's H200 ratio table in README.md from results/h200/fast.csv.

    python tools/readme_fast_table.py          # rewrite the table between the markers
    python tools/readme_fast_table.py --check  # exit 1 if README.md differs from the CSV

The README's numbers are never typed: tests/test_sidebyside.py runs the check.
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

import pandas as pd

ROOT = Path(__file__).resolve().parent.parent
START, END = "<!-- fast-table:start -->", "<!-- fast-table:end -->"
OTHERS = ("compile", "compile_nomix", "eager", "liger", "article")


def render(table: pd.DataFrame) -> str:
    """The Markdown table: fast path µs and TB/s, and other/fast time ratios, per shape and pass."""
    fast = table[table.provider == "fast"].set_index(["M", "N", "dtype", "pass_"])
    keys = ["M", "N", "dtype", "pass_"]
    times = table.pivot_table(index=keys, columns="provider", values="us")
    times = times.reindex(pd.MultiIndex.from_frame(table[keys].drop_duplicates()))  # the run's order
    lines = [
        "| M × N, dtype | pass | fast µs | fast TB/s | vs compile | vs compile, no MixOrder | vs eager | vs Liger | vs article |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for (M, N, dtype, pass_), row in times.iterrows():
        f = fast.loc[(M, N, dtype, pass_)]
        ratios = [row.get(o, math.nan) / row["fast"] for o in OTHERS]
        cells = ["—" if math.isnan(r) else f"{r:.2f}×" for r in ratios]
        lines.append(f"| {M} × {N} {dtype} | {pass_} | {f.us:.1f} | {f.tbps:.2f} | " + " | ".join(cells) + " |")
    for pass_ in ("forward", "backward"):
        sub = times.xs(pass_, level="pass_")
        gm = math.exp(sum(math.log(v) for v in sub["compile"] / sub["fast"]) / len(sub))
        lines.append("")
        lines.append(f"{pass_.capitalize()}: geometric mean of compile / fast over {len(sub)} shapes = {gm:.2f}×.")
    return "\n".join(lines)


def updated(readme: str, table: pd.DataFrame) -> str:
    """README text with the block between the markers replaced by :func:`render`."""
    head, rest = readme.split(START, 1)
    _, tail = rest.split(END, 1)
    return f"{head}{START}\n{render(table)}\n{END}{tail}"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true")
    args = parser.parse_args(argv)
    readme_path = ROOT / "README.md"
    readme = readme_path.read_text()
    new = updated(readme, pd.read_csv(ROOT / "results" / "h200" / "fast.csv"))
    if args.check:
        if new != readme:
            print("README.md's fast-path table differs from results/h200/fast.csv: run tools/readme_fast_table.py")
            return 1
        return 0
    readme_path.write_text(new)
    return 0


if __name__ == "__main__":
    sys.exit(main())

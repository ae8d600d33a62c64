"""Write (or check) the generated blocks of README.md and results/*/README.md, from the committed results.

    python tools/readme_fast_table.py [--write]  # rewrite every block between its markers
    python tools/readme_fast_table.py --check    # exit 1 if a page differs from the results

Each results/<card>/README.md is rendered from the files of its own folder; README.md's summary and the lessons
read results/h200 (``rmsnorm_lab.results.results_dir``). Another card's page (results/h100) holds the blocks of
the runs made on it, and no fast.csv block.

README.md holds one block, ``summary-table``: the fast path against its peers, geometric means and the
worst shapes (fast.csv, fast_weak.csv; :func:`rmsnorm_lab.pages.render_summary`). results/h200/README.md
holds the rest: ``fast-table``, the side-by-side of kernel time (fast.csv, QuACK in the same run);
``weak-table``, the weak grid (fast_weak.csv); ``whole-call-table``, kernel time and whole-call time side
by side (whole_call.csv); ``host-probe`` (host_time_probe.txt); ``model-step-table`` (model_step.csv);
``model-step-gemma-table`` (model_step_gemma_qwen.csv, its Gemma 3 rows); ``model-step-qwen-table``
(model_step_qwen.csv, qwen_order.csv); ``offset-table`` (offset.csv, kernel_time_offset_zero.csv);
``sweeps-table`` (fast_tuning.csv); ``cliffs-table`` (cliffs.csv); ``fused-add-table`` (fused_add_kernel.csv,
fused_add_whole_call.csv); ``model-fused-table`` (model_fused.csv, model_fused_decode.csv) and
``launch-path-table`` (launch_path.csv and its model files), ``layernorm-table`` (layernorm_kernel.csv,
layernorm_whole_call.csv). A block whose
file is not committed stays empty. No figure of those pages is typed: tests/lab/test_sidebyside.py runs the check.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

import pandas as pd

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # the checkout, for `import rmsnorm`
START, END = "<!-- fast-table:start -->", "<!-- fast-table:end -->"
WHOLE_START, WHOLE_END = "<!-- whole-call-table:start -->", "<!-- whole-call-table:end -->"
WEAK_START, WEAK_END = "<!-- weak-table:start -->", "<!-- weak-table:end -->"
#: README.md's one block: the fast path against its peers, in short.
SUMMARY = "summary-table"
#: The weak grid's file (scripts/benchmark_fast.py --grid weak).
WEAK_FILE = "fast_weak.csv"
OTHERS = ("compile", "compile_nomix", "eager", "liger", "article", "quack")
#: Columns of the whole-call tables: (header, provider, time column).
WHOLE_COLUMNS = (
    ("fast: kernels", "fast", "kernel_us"), ("fast: whole call", "fast", "whole_call_us"),
    ("fast: host", "fast", "host_us"), ("fast: CUDA graph", "fast", "graph_us"),
    ("floor: whole call", "floor", "whole_call_us"), ("eager: kernels", "eager", "kernel_us"),
    ("eager: whole call", "eager", "whole_call_us"), ("eager: CUDA graph", "eager", "graph_us"),
    ("compile", "compile", "whole_call_us"), ("Liger", "liger", "whole_call_us"),
    ("QuACK", "quack", "whole_call_us"), ("article", "article", "whole_call_us"),
)


def _geometric_mean(ratios: pd.Series) -> float:
    ratios = ratios.dropna()
    return math.exp(sum(math.log(v) for v in ratios) / len(ratios))


_SHORT = {"bfloat16": "bf16", "float16": "fp16", "float32": "fp32"}
_NAMES = {"compile": "compile", "compile_nomix": "compile, no MixOrder", "eager": "eager", "liger": "Liger",
          "article": "article", "quack": "QuACK"}


def _not_timed(table: pd.DataFrame) -> list[str]:
    """One line per provider and shape that failed the oracle check, with its reason."""
    failed = table[(table["check"] != "ok") & table["us"].isna()]
    failed = failed.drop_duplicates(["M", "N", "dtype", "provider"])
    return [f"{row.provider} at {row.M} × {row.N} {row.dtype}: {row.check.rstrip('.!')}" for row in failed.itertuples()]


def _means_lines(table: pd.DataFrame, ratios: pd.DataFrame, others) -> list[str]:
    """Per pass: the geometric mean of each other's time over the fast path's, and of the best peer's."""
    from rmsnorm_lab.sidebyside import best_peer_means

    best = best_peer_means(table)
    lines = []
    for pass_ in ("forward", "backward"):
        sub = ratios.xs(pass_, level="pass_")
        means = [f"of {_NAMES[o]} / fast over {int(sub[f'fast_vs_{o}'].notna().sum())} shapes = "
                 f"{_geometric_mean(sub[f'fast_vs_{o}']):.2f}×" for o in others]
        lines += ["", f"{pass_.capitalize()}: geometric mean " + "; ".join(means)
                  + f"; of the best peer / fast = {best[pass_]:.2f}×."]
    return lines


def render(table: pd.DataFrame) -> str:
    """The Markdown table of fast.csv: fast path µs and TB/s, and other/fast time ratios, per shape and pass.

    Ratios and means come from :func:`rmsnorm_lab.sidebyside.ratio_table` and
    :func:`~rmsnorm_lab.sidebyside.best_peer_means` (the best peer: the fastest of compile,
    Liger and QuACK that passed the oracle), all from the one run. A provider the run lacks has no
    column; one that failed the oracle shows "—", and the line under the table names it with its
    reason, as it does the shapes the article's contract refuses.
    """
    from rmsnorm.article.contract import KERNEL_DTYPES
    from rmsnorm_lab.sidebyside import ratio_table

    ratios = ratio_table(table)
    others = [o for o in OTHERS if o in ratios.columns]
    fast = table[table.provider == "fast"].set_index(list(ratios.index.names))
    lines = ["| M × N, dtype | pass | fast µs | fast TB/s | " + " | ".join(f"vs {_NAMES[o]}" for o in others) + " |",
             "|---" * (4 + len(others)) + "|"]
    for key, row in ratios.iterrows():
        M, N, dtype, pass_ = key[0], key[1], key[2], key[-1]
        cells = ["—" if math.isnan(row[f"fast_vs_{o}"]) else f"{row[f'fast_vs_{o}']:.2f}×" for o in others]
        lines.append(f"| {M} × {N} {dtype} | {pass_} | {row['fast']:.1f} | {fast.loc[key, 'tbps']:.2f} | "
                     + " | ".join(cells) + " |")
    lines += _means_lines(table, ratios, [o for o in ("compile", "quack") if o in others])
    refused = _not_timed(table)
    shapes = table[["M", "N", "dtype"]].drop_duplicates()
    article = set(map(tuple, table.loc[table.provider == "article", ["M", "N", "dtype"]].to_numpy()))
    outside = sorted({d for m, n, d in shapes.itertuples(index=False) if (m, n, d) not in article})
    if "article" in others and outside:  # the article's path has no row where its contract refuses the shape
        allowed = " or ".join(str(d).removeprefix("torch.") for d in KERNEL_DTYPES)
        refused.append(f"the article at the {' and '.join(outside)} shapes: refused by its contract (lessons 03–08: "
                       f"x in {allowed})")
    if refused:
        lines += ["", "Not timed (—): " + "; ".join(refused) + "."]
    return "\n".join(lines)


def render_weak(table: pd.DataFrame) -> str:
    """The weak grid (fast_weak.csv): per shape and pass, the fast path's µs and TB/s and each peer's time over
    its own, the best peer named (:func:`rmsnorm_lab.sidebyside.best_peer_table`); geometric means over the
    grid; the peers that failed, with why."""
    from rmsnorm_lab.sidebyside import PEERS, best_peer_means, best_peer_table, ratio_table

    ratios = ratio_table(table)
    best, means = best_peer_table(table), best_peer_means(table)
    fast = table[table.provider == "fast"].set_index(list(ratios.index.names))
    others = [o for o in ("eager", *PEERS) if o in ratios.columns]
    lines = ["| M × N, dtype | pass | fast µs | fast TB/s | " + " | ".join(f"vs {_NAMES[o]}" for o in others)
             + " | vs best peer |", "|---" * (5 + len(others)) + "|"]
    for key, row in ratios.iterrows():
        M, N, dtype, weight, pass_ = key
        name = f"{M} × {N} {_SHORT[dtype]}" + (f", {_SHORT[weight]} weight" if weight != dtype else "")
        cells = ["—" if math.isnan(row[f"fast_vs_{o}"]) else f"{row[f'fast_vs_{o}']:.2f}×" for o in others]
        cells.append(f"{best.loc[key, 'ratio']:.2f}× ({_NAMES[best.loc[key, 'best_peer']]})")
        lines.append(f"| {name} | {pass_} | {row['fast']:.1f} | {fast.loc[key, 'tbps']:.2f} | "
                     + " | ".join(cells) + " |")
    for pass_, goal in (("forward", 0.97), ("backward", 1.0)):
        b = best["ratio"].xs(pass_, level="pass_")
        lines += ["", f"{pass_.capitalize()}: geometric mean of the best peer / fast over {len(b)} shapes = "
                  f"{means[pass_]:.2f}×; at or above {goal:.2f}× at {int((b >= goal).sum())} of {len(b)}."]
    return "\n".join(lines + ["", "Not timed (—): " + "; ".join(_not_timed(table)) + "."])


def _whole_table(table: pd.DataFrame, pass_: str) -> list[str]:
    sub = table[table.pass_ == pass_].set_index(["M", "N", "dtype", "provider"])
    lines = ["| M × N, dtype | " + " | ".join(h for h, _, _ in WHOLE_COLUMNS) + " |",
             "|---" * (len(WHOLE_COLUMNS) + 1) + "|"]
    for M, N, dtype in table[["M", "N", "dtype"]].drop_duplicates().itertuples(index=False):
        cells = []
        for _, provider, column in WHOLE_COLUMNS:
            value = sub[column].get((M, N, dtype, provider), math.nan)
            cells.append("—" if math.isnan(value) else f"{value:.1f}")
        lines.append(f"| {M} × {N} {dtype} | " + " | ".join(cells) + " |")
    return lines


def render_whole_call(table: pd.DataFrame) -> str:
    """The whole-call block: what a model feels, then forward + backward and forward tables (µs per call)."""
    fb = table[table.pass_ == "forward_backward"].set_index(["M", "N", "dtype", "provider"])
    fast = fb.xs("fast", level="provider")
    host_bound = int((fast["whole_call_us"] > 2 * fast["kernel_us"]).sum())
    floor = fb.xs("floor", level="provider")["whole_call_us"].reindex(fast.index)
    under_floor = int((fast["whole_call_us"] < floor).sum())
    timed = table[(table.check == "ok") & table.host_us.notna() & table.whole_call_us.notna()]
    over = timed[timed.host_us > timed.whole_call_us]
    worst = (over.host_us / over.whole_call_us).max() if len(over) else 1.0
    shown = {provider for _, provider, _ in WHOLE_COLUMNS}
    missing = table[(table.check != "ok") & table.provider.isin(shown)].drop_duplicates(["provider", "check"])
    lines = [
        "Kernel time is the GPU's share of a call. A model calls the norm as a Python function and feels the",
        "**whole call**: host, dispatch, launches and kernels, or, when it replays its step from a CUDA graph",
        "(`torch.cuda.graph`, `torch.compile(mode=\"reduce-overhead\")`), the **CUDA graph** column. Measured",
        "on an H200 in one run (`scripts/benchmark_whole_call.py`, committed in `results/h200/whole_call.csv`),",
        "through each one's public entry point (`FastRMSNorm`, `rmsnorm.article.rmsnorm`, `F.rms_norm`…), each output",
        "checked against the float64 oracle first. µs per call: *kernels* from `torch.profiler` with L2 flushed;",
        "*whole call* from CUDA events around 20 back-to-back calls (median of 50); *host* the CPU time to issue",
        "one call; *floor* the same kernels behind a bare `torch.autograd.Function` with no checks, launched",
        "through Triton's `kernel[grid]`: what a plain Triton path costs the host (the fast path launches below",
        f"that binder; its whole forward + backward is under the floor's at {under_floor} of {len(fast)} shapes).",
        f"At {host_bound} of {len(fast)} shapes the fast path's whole forward +",
        "backward is more than twice its kernel time: there the host, not the GPU, sets the pace.",
        f"*Host* and *whole call* come from two loops run one after the other. In {len(over)} of the",
        f"{len(timed)} timed rows the host time is above the whole call (by up to {worst:.2f}×), which one loop",
        "cannot give, since the GPU cannot finish calls before the host has issued them: the H200's host ran",
        "the same calls at different speeds in the two loops. Read the host column to within that, and",
        "compare implementations within a column, where every row was timed the same way.",
        "",
        "Forward + backward (`y = norm(x)`, then `y.backward(dy)`):",
        "",
        *_whole_table(table, "forward_backward"),
        "",
        "Forward, inference (x and the weight without `requires_grad`):",
        "",
        *_whole_table(table, "forward"),
    ]
    if len(missing):
        reasons = "; ".join(f"{r.provider}, {r.check.rstrip('.!')}" for r in missing.itertuples())
        lines += ["", f"Not timed (—): {reasons}."]
    return "\n".join(lines + ["", *_targets_lines(table)])


def _targets_lines(table: pd.DataFrame) -> list[str]:
    """The fast path's targets (issue 15; rmsnorm_lab.wholecall.targets) in this run: met at how many shapes."""
    from rmsnorm_lab.wholecall import HOST_BOUND, targets

    verdicts = targets(table)
    fb = table[table.pass_ == "forward_backward"].set_index(["M", "N", "dtype", "provider"])["whole_call_us"]
    ratio = (fb.xs("fast", level="provider") / fb.xs("eager", level="provider")).dropna()
    host_bound = ", ".join(f"{m} × {n} {str(d).removeprefix('torch.')}" for m, n, d in HOST_BOUND)
    lines = ["The fast path against its targets in this run (met at how many of the shapes it was timed at; the",
             "floor's and eager's host times, and *forward_grad*, the forward of an x that requires grad, are in",
             f"`whole_call.csv`; the host-bound shapes are {host_bound}):", ""]
    every = verdicts["shape"].nunique()
    for target, group in verdicts.groupby("target", sort=False):
        judged = group[group["met"].notna()]
        where = ""
        if len(judged) < every:  # a target for some shapes only: say which
            shapes = "the host-bound shapes" if len(judged) == len(HOST_BOUND) else ", ".join(judged["shape"])
            where = f" ({shapes})"
        lines.append(f"- {target}{where}: {int(judged['met'].sum())} of {len(judged)}")
    lines += ["", "Its whole forward + backward over eager's (fast ÷ eager: above 1, the fast path is slower): "
              + ", ".join(
        f"{ratio[key]:.2f}× at {key[0]} × {key[1]} {key[2]}" for key in ratio.index) + "."]
    return lines


def _replace(text: str, start: str, end: str, body: str) -> str:
    head, rest = text.split(start, 1)
    _, tail = rest.split(end, 1)
    return f"{head}{start}\n{body}{chr(10) if body else ''}{end}{tail}"


def updated(readme: str, table: pd.DataFrame, whole: pd.DataFrame | None = None,
            weak: pd.DataFrame | None = None) -> str:
    """Results-page text with the fast-table block rendered from ``table`` (fast.csv), the whole-call block
    from ``whole`` (whole_call.csv) and the weak-grid block from ``weak`` (fast_weak.csv); a block
    whose CSV is None is left empty."""
    text = _replace(readme, START, END, render(table))
    if WEAK_START in text:
        text = _replace(text, WEAK_START, WEAK_END, "" if weak is None else render_weak(weak))
    return _replace(text, WHOLE_START, WHOLE_END, "" if whole is None else render_whole_call(whole))


def _block(text: str, name: str, body) -> str:
    """``text`` with the ``name`` block rendered by ``body()`` (a block the page lacks is left alone)."""
    start, end = f"<!-- {name}:start -->", f"<!-- {name}:end -->"
    return _replace(text, start, end, body()) if start in text else text


def _environment(folder: Path, name: str) -> dict:
    return json.loads((folder / name).read_text())


def updated_summary(readme: str, folder: Path) -> str:
    """README.md with its ``summary-table`` block rendered from ``folder``'s fast.csv and fast_weak.csv."""
    from rmsnorm_lab.pages import render_summary
    from rmsnorm_lab.results import load_fast_table

    grids = [("tuned (fast.csv)", load_fast_table(folder))]
    environments = [_environment(folder, "fast_environment.json")]
    if (folder / WEAK_FILE).is_file():
        grids.append(("weak (fast_weak.csv)", pd.read_csv(folder / WEAK_FILE)))
        environments.append(_environment(folder, "fast_weak_environment.json"))
    return _block(readme, SUMMARY, lambda: render_summary(grids, environments))


ZERO_FILE = "kernel_time_offset_zero.csv"


def _model_fused(folder: Path, present) -> str:
    """The Llama steps with the fused add (model_fused.csv), then its decode table where committed."""
    from rmsnorm_lab import pages
    from rmsnorm_lab.model import load_model_step

    text = pages.render_model_step(load_model_step(folder, "model_fused"))
    if present("model_fused_decode.csv"):
        text += ("\n\nDecode, greedy `generate` (model_fused_decode.csv):\n\n"
                 + pages.render_decode(pd.read_csv(folder / "model_fused_decode.csv")))
    return text


def _launch_path(folder: Path, present) -> str:
    """Issue 41 (launch_path.csv): the whole call per launch path and the targets; then the fast forward's host
    time taken apart (launch_path_pieces.csv), the Llama steps and decode of the same run (launch_path_model.csv,
    …_decode.csv), each where committed."""
    from rmsnorm_lab import launch_bench, pages
    from rmsnorm_lab.model import load_model_step

    steps = load_model_step(folder, launch_bench.STEP_STEM) if present(f"{launch_bench.STEP_STEM}.csv") else None
    text = launch_bench.markdown(pd.read_csv(folder / "launch_path.csv"), steps)
    if present(launch_bench.PIECES_FILE):
        text += ("\n\nWhere the fast forward's host µs go: each call contains the ones below it (the launch and "
                 "the allocations are siblings inside launch_forward); *adds* is its own share.\n\n"
                 + launch_bench.render_pieces(pd.read_csv(folder / launch_bench.PIECES_FILE)))
    if steps is not None:
        text += "\n\n" + pages.render_model_step(steps)
    if present(f"{launch_bench.STEP_STEM}_decode.csv"):
        text += "\n\n" + pages.render_decode(pd.read_csv(folder / f"{launch_bench.STEP_STEM}_decode.csv"))
    return text


def updated_results(page: str, folder: Path) -> str:
    """results/h200/README.md with every block rendered from the files of ``folder``."""
    from rmsnorm_lab import pages
    from rmsnorm_lab.model import STEP_FILE, files, load_model_step
    from rmsnorm_lab.results import WHOLE_CALL_FILE, load_fast_table, load_whole_call

    def present(name):
        return (folder / name).is_file()

    text = page
    if START in page:  # the fast.csv page; another card's (results/h100) holds only the blocks of its own runs
        whole = load_whole_call(folder) if present(WHOLE_CALL_FILE) else None
        weak = pd.read_csv(folder / WEAK_FILE) if present(WEAK_FILE) else None
        text = updated(page, load_fast_table(folder), whole, weak)
    blocks = {
        "host-probe": ("host_time_probe.txt",
                       lambda: pages.render_host_probe((folder / "host_time_probe.txt").read_text())),
        "model-step-table": (STEP_FILE, lambda: pages.render_model_step(load_model_step(folder))),
        "model-step-gemma-table": (files("model_step_gemma_qwen")[0], lambda: pages.render_model_step(
            load_model_step(folder, "model_step_gemma_qwen").query("model == 'gemma3'"))),
        "model-step-qwen-table": (files("model_step_qwen")[0], lambda: pages.render_model_step(
            load_model_step(folder, "model_step_qwen")) + "\n\n" + pages.render_step_kernels(
            load_model_step(folder, "model_step_qwen"),
            load_model_step(folder, "qwen_order") if present("qwen_order.csv") else None)),
        "offset-table": ("offset.csv", lambda: pages.render_offset(
            pd.read_csv(folder / "offset.csv"),
            pd.read_csv(folder / ZERO_FILE) if present(ZERO_FILE) else None,
            _environment(folder, "offset_environment.json"))),
        "sweeps-table": ("fast_tuning.csv", lambda: pages.render_sweeps(pd.read_csv(folder / "fast_tuning.csv"))),
        "cliffs-table": ("cliffs.csv", lambda: pages.render_cliffs(pd.read_csv(folder / "cliffs.csv"),
                                                                   _environment(folder, "cliffs_environment.json"))),
        "fused-add-table": ("fused_add_kernel.csv", lambda: pages.render_fused_add(
            pd.read_csv(folder / "fused_add_kernel.csv"),
            pd.read_csv(folder / "fused_add_whole_call.csv") if present("fused_add_whole_call.csv") else None)),
        "model-fused-table": (files("model_fused")[0], lambda: _model_fused(folder, present)),
        "launch-path-table": ("launch_path.csv", lambda: _launch_path(folder, present)),
        "forward-ab-table": ("forward_layout_ab.csv", lambda: pages.render_ab(
            pd.read_csv(folder / "forward_layout_ab.csv"))),
        "layernorm-table": ("layernorm_kernel.csv", lambda: pages.render_layernorm(
            pd.read_csv(folder / "layernorm_kernel.csv"),
            pd.read_csv(folder / "layernorm_whole_call.csv") if present("layernorm_whole_call.csv") else None)),
    }
    for name, (source, body) in blocks.items():
        text = _block(text, name, body if present(source) else (lambda: ""))
    return text


def main(argv=None) -> int:
    """Rewrite both pages' blocks (or, with --check, exit 1 when either differs from the results)."""
    from rmsnorm_lab.results import results_dir

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if a page differs from the results")
    parser.add_argument("--write", action="store_true", help="rewrite the pages' blocks (the default)")
    parser.add_argument("--readme", type=Path, default=ROOT / "README.md")
    parser.add_argument("--results", type=Path, default=None, help="results folder (default: results/h200)")
    parser.add_argument("--results-readme", type=Path, default=None, help="default: README.md of the results folder")
    args = parser.parse_args(argv)
    folder = results_dir(args.results)
    pages = [(args.readme, updated_summary, folder), (args.results_readme or folder / "README.md", updated_results,
                                                      folder)]
    if args.results is None and args.results_readme is None:  # every other card's page, from its own folder
        pages += [(other, updated_results, other.parent) for other in sorted((ROOT / "results").glob("*/README.md"))
                  if other.parent.resolve() != folder.resolve()]
    stale = []
    for path, update, source in pages:
        old = path.read_text()
        new = update(old, source)
        if args.check and new != old:
            stale.append(str(path))
        elif not args.check:
            path.write_text(new)
    if stale:
        print(f"{' and '.join(stale)} differ from the results beside them: run tools/readme_fast_table.py")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The generated blocks of README.md and results/h200/README.md that are not kernel-time tables.

Each ``render_*`` function turns one committed result file into Markdown; tools/readme_fast_table.py
writes the blocks between their ``<!-- name:start -->`` / ``<!-- name:end -->`` markers and, with
``--check``, fails when a page differs from the files. No figure of those pages is typed by hand.

- :func:`render_summary` — README.md: the fast path against its peers, geometric means and worst shapes
  (fast.csv, fast_weak.csv and their environment records);
- :func:`render_model_step` — training steps of a model with each norm (model_step.csv and
  model_step_gemma_qwen.csv, one table per model);
- :func:`render_step_kernels` — what a host-bound model's step time cannot show: per size and mode, each norm's
  kernel time per step against the original's, and the original timed twice in one process (model_step_qwen.csv,
  qwen_order.csv);
- :func:`render_offset` — Gemma's (1 + weight): offset 1.0 against 0.0 and the peers with their offsets
  (offset.csv), and the plain norm's kernels before and after offset came in (kernel_time_offset_zero.csv);
- :func:`render_host_probe` — where the fast path's host time goes (host_time_probe.txt);
- :func:`render_sweeps` — the configuration table before each recorded sweep and the sweep's best
  (fast_tuning.csv, the runs that recorded ``table_when_swept``);
- :func:`render_cliffs` — the cliff sweep per dtype and pass (cliffs.csv);
- :func:`render_fused_add` — the fused residual add + norm against its peers, kernel time and whole call
  (fused_add_kernel.csv, fused_add_whole_call.csv);
- :func:`render_decode` — greedy decode tokens/s per norm (model_fused_decode.csv).

Source: notebooks/12_tuning_and_side_by_side.ipynb, notebooks/13_into_a_model.ipynb.
"""

from __future__ import annotations

import math
import re

import numpy as np
import pandas as pd

from .sidebyside import PEERS, best_peer_table, ratio_table

__all__ = [
    "FUSED_ADD_TARGETS", "OFFSET_COST", "fused_add_ratios", "fused_over_unfused", "offset_cost",
    "render_cliffs", "render_decode", "render_fused_add", "render_host_probe", "render_model_step", "render_offset",
    "render_step_kernels", "render_summary", "render_sweeps", "new_over_old", "ab_moved",
    "render_ab", "AB_TOLERANCE"
]

_SHORT = {"bfloat16": "bf16", "float16": "fp16", "float32": "fp32"}
_NAMES = {"compile": "compile", "liger": "Liger", "quack": "QuACK", "eager": "eager"}
_MODELS = {"llama": "Llama", "gemma3": "Gemma 3", "qwen3_5": "Qwen3.5"}


def _geomean(values: pd.Series) -> float:
    values = values.dropna()
    return float(np.exp(np.log(values).mean()))


def _shape(key: tuple, names: list[str]) -> str:
    row = dict(zip(names, key))
    text = f"{row['M']} × {row['N']} {_SHORT[row['dtype']]}"
    if "weight" in row and row["weight"] != row["dtype"]:
        text += f", {_SHORT[row['weight']]} weight"
    return text


def _versions(environments: list[dict]) -> str:
    pairs = sorted({(".".join(e["torch"].split(".")[:2]), ".".join(e["triton"].split(".")[:2])) for e in environments})
    return "; ".join(f"torch {t} and triton {tr}" for t, tr in pairs)


def render_summary(grids: list[tuple[str, pd.DataFrame]], environments: list[dict]) -> str:
    """The README's summary: per grid and pass, each peer's time over the fast path's (geometric mean over
    the shapes where both passed the oracle) and the shape where the best peer is furthest ahead.

    Args:
        grids: (label, side-by-side table) pairs, e.g. ``("tuned, fast.csv", fast)``.
        environments: the runs' environment records (their ``device``, ``torch`` and ``triton``).
    """
    devices = ", ".join(sorted({e["device"] for e in environments}))
    lines = [f"Kernel time on an {devices} ({_versions(environments)}), L2 flushed before every call, every output",
             "checked against a float64 oracle first. Each cell is the peer's time over the fast path's (above 1×:",
             "the fast path is faster), a geometric mean over the shapes where both were timed; *best peer* is the",
             "fastest of compile, Liger and QuACK at each shape.", "",
             "| grid | pass | shapes | vs compile | vs Liger | vs QuACK | vs best peer "
             "| worst shape (best peer / fast) |",
             "|---|---|---|---|---|---|---|---|"]
    for label, table in grids:
        ratios, best = ratio_table(table), best_peer_table(table)
        for pass_ in ("forward", "backward"):
            sub, b = ratios.xs(pass_, level="pass_"), best.xs(pass_, level="pass_")
            cells = [f"{_geomean(sub[f'fast_vs_{p}']):.2f}×" if f"fast_vs_{p}" in sub else "—" for p in PEERS]
            worst = b["ratio"].idxmin()
            where = (f"{_shape(worst, list(b.index.names))}: {b.loc[worst, 'ratio']:.2f}× "
                     f"({_NAMES[b.loc[worst, 'best_peer']]})")
            lines.append(f"| {label} | {pass_} | {len(sub)} | " + " | ".join(cells)
                         + f" | {_geomean(b['ratio']):.2f}× | {where} |")
    return "\n".join(lines)


def render_model_step(step: pd.DataFrame) -> str:
    """Training steps (model_step.csv): per model, size, mode and norm, the step's median, spread, the kernels'
    and the norm kernels' share of it, the Amdahl bound that share implies and the speed-up over the original.
    A file of one model gives one table; of several (``model`` column), one headed table each."""
    models = list(dict.fromkeys(step["model"])) if "model" in step else [None]
    if len(models) > 1:
        return "\n\n".join(f"**{_MODELS.get(m, m)}**\n\n" + render_model_step(step[step["model"] == m])
                           for m in models)
    lines = []
    for size, group in step.groupby("size", sort=False):
        first = group.iloc[0]
        lines.append(f"- **{size}**: {first['layers']:.0f} layers, hidden {first['hidden']:.0f}, {first['tokens']:.0f} "
                     f"tokens a step, median of {first['steps']:.0f} timed steps.")
    ok = step[step["check"] == "ok"].set_index(["size", "mode", "variant"])
    interval = "step_ms_lo" in ok and ok["step_ms_lo"].notna().all()  # an interleaved run: the median's 95 % interval
    lines += ["", "| size | mode | norm | step ms | " + ("median's 95 % interval, ms | " if interval else "")
              + "min–max ms | kernels / step | norm kernels / step | Amdahl bound | speed-up over the original |",
              "|---" * (10 if interval else 9) + "|"]
    for (size, mode, variant), r in ok.iterrows():
        original = ok.loc[(size, mode, "original"), "step_ms"]
        ci = f"{r.step_ms_lo:.1f}–{r.step_ms_hi:.1f} | " if interval else ""
        lines.append(f"| {size} | {mode} | {variant} | {r.step_ms:.1f} | {ci}{r.step_ms_min:.1f}–{r.step_ms_max:.1f} | "
                     f"{r.gpu_busy_ms / r.step_ms:.0%} | {r.norm_share:.1%} | {r.amdahl_bound:.3f}× | "
                     f"{original / r.step_ms:.3f}× |".replace("%", " %"))
    failed = step[step["check"] != "ok"]
    if len(failed):
        lines += ["", "Not timed: " + "; ".join(f"{r.size} {r.mode} {r.variant}: {r.check}"
                                                 for r in failed.itertuples()) + "."]
    return "\n".join(lines)


def render_step_kernels(step: pd.DataFrame, order: pd.DataFrame | None = None) -> str:
    """For a model whose step follows the host (``host_ms`` near ``step_ms``): per size and mode, the host's share
    of the step and each swapped norm's GPU-busy and norm-kernel time per step beside the original's; then, from a
    run that timed the original first and again last in one process (``order``), how far its step moved."""
    ok = step[step["check"] == "ok"].set_index(["size", "mode", "variant"])
    lines = ["| size | mode | norm | host ms / step ms | kernels ms / step | norm kernels ms / step |",
             "|---|---|---|---|---|---|"]
    for (size, mode, variant), r in ok.iterrows():
        lines.append(f"| {size} | {mode} | {variant} | {r.host_ms / r.step_ms:.0%} | {r.gpu_busy_ms:.1f} | "
                     f"{r.norm_ms:.2f} |".replace("%", " %"))
    if order is not None:
        originals = order[(order["variant"] == "original") & (order["check"] == "ok")]
        moved = [f"{size}: {g['step_ms'].iloc[0]:.1f} ms first, {g['step_ms'].iloc[-1]:.1f} ms last "
                 f"({g['step_ms'].iloc[-1] / g['step_ms'].iloc[0]:.2f}×)"
                 for size, g in originals.groupby("size", sort=False) if len(g) > 1]
        lines += ["", "The original norm timed first and again after the swapped variants, in one process "
                      f"(qwen_order.csv, eager, median of {int(originals['steps'].iloc[0])} steps): "
                      + "; ".join(moved) + "."]
    return "\n".join(lines)


#: Issue 38's target: offset 1.0 costs at most 3 % over offset 0.0 (offset 0.0 costs nothing: :data:`AB_TOLERANCE`).
OFFSET_COST = 1.03


def offset_cost(offset: pd.DataFrame) -> pd.DataFrame:
    """Per shape and pass (offset.csv): offset 0.0's and 1.0's kernel time (mean over runs), their ratio, and
    offset 0.0's run-to-run spread (max over min − 1; 0 with one run), beside each peer's time over offset 1.0's."""
    timed = offset[offset["check"] == "ok"]
    keys = ["M", "N", "dtype", "pass_"]
    mean = timed.pivot_table(index=keys, columns="provider", values="us", aggfunc="mean", sort=False)
    runs = timed[timed["provider"] == "fast_offset0"].groupby(keys, sort=False)["us"]
    table = pd.DataFrame({"offset0_us": mean["fast_offset0"], "offset1_us": mean["fast_offset1"]})
    table["offset1_over_0"] = table["offset1_us"] / table["offset0_us"]
    table["offset0_spread"] = runs.max() / runs.min() - 1
    for peer in ("liger", "quack", "compile"):
        if peer in mean:
            table[peer] = mean[peer] / table["offset1_us"]
    return table


#: How far a checkout's kernel time may move from the one before at a case the change is not for (issues 38 and 40:
#: "agree within 2 %"), either way.
AB_TOLERANCE = 0.02
#: The columns of a ``scripts/compare_commits.py`` CSV that name a case (``norm`` and ``weight_dtype`` where the
#: run has them), in the order its tables list them.
_AB_KEYS = ("norm", "M", "N", "dtype", "weight_dtype", "pass")


def new_over_old(before_after: pd.DataFrame) -> pd.DataFrame:
    """Per case of a ``scripts/compare_commits.py`` run: the new checkout's kernel time over the old one's (means
    over their runs), with each checkout's run-to-run spread; indexed by the case's columns (:data:`_AB_KEYS`)."""
    keys = [k for k in _AB_KEYS if k in before_after]
    by = before_after.groupby([*keys, "checkout"], sort=False)["kernel_us"]
    mean, spread = by.mean().unstack(), (by.max() / by.min() - 1).unstack()
    return pd.DataFrame({"old_us": mean["old"], "new_us": mean["new"], "new_over_old": mean["new"] / mean["old"],
                         "new_spread": spread["new"], "old_spread": spread["old"]})


def ab_moved(table: pd.DataFrame) -> pd.DataFrame:
    """The cases of a :func:`new_over_old` table whose new / old is beyond :data:`AB_TOLERANCE` either way."""
    return table[(table["new_over_old"] - 1).abs() > AB_TOLERANCE]



def render_offset(offset: pd.DataFrame, before_after: pd.DataFrame | None, environment: dict) -> str:
    """Gemma's (1 + weight) on the GPU: per main-grid shape and pass, offset 1.0's kernel time over 0.0's and each
    peer's (with its own offset) over offset 1.0's, the count within :data:`OFFSET_COST`; then offset 0.0 against
    the commit before offset (within :data:`AB_TOLERANCE`)."""
    table = offset_cost(offset)
    runs = environment.get("repeats", 1)
    peers = [p for p in ("liger", "quack", "compile") if p in table]
    lines = [f"Kernel time (profiler, L2 flushed, mean of {environment['calls']} calls, {runs} run"
             f"{'s' if runs > 1 else ''}; every output checked against the float64 oracle with its offset first), "
             f"{environment['device']['name']}, torch {environment['torch']}, triton {environment['triton']}, eager "
             f"{environment['eager_rms_norm']['verdict']}. Peers: ratio of their time to offset 1.0's (above 1: "
             f"the fast path is faster).", "",
             "| shape | pass | offset 0.0, µs | offset 1.0, µs | 1.0 / 0.0 | " + " | ".join(
                 f"{_NAMES.get(p, p)} / fast" for p in peers) + " |", "|---" * (5 + len(peers)) + "|"]
    for (M, N, dtype, pass_), r in table.iterrows():
        lines.append(f"| {M} × {N} {_SHORT[dtype]} | {pass_} | {r.offset0_us:.1f} | {r.offset1_us:.1f} | "
                     f"{r.offset1_over_0:.3f} | " + " | ".join(f"{r[p]:.2f}" for p in peers) + " |")
    within = int((table["offset1_over_0"] <= OFFSET_COST).sum())
    worst = table["offset1_over_0"].idxmax()
    lines += ["", f"Offset 1.0 is within {OFFSET_COST - 1:.0%} of offset 0.0 at {within} of {len(table)} shape-passes"
              f"; the largest ratio is {table['offset1_over_0'].max():.3f} ({worst[0]} × {worst[1]} "
              f"{_SHORT[worst[2]]} {worst[3]})."]
    if runs > 1:
        lines[-1] += f" Offset 0.0's own run-to-run spread there is {table.loc[worst, 'offset0_spread']:.1%}."
    if before_after is not None:
        zero = new_over_old(before_after)
        within = len(zero) - len(ab_moved(zero))
        lines += ["", f"Offset 0.0 against the kernels before offset (kernel_time_offset_zero.csv): new / old from "
                      f"{zero['new_over_old'].min():.3f} to {zero['new_over_old'].max():.3f}, within "
                      f"{AB_TOLERANCE:.0%} at {within} of {len(zero)} shape-passes; each checkout's "
                      f"run-to-run spread reaches {zero[['new_spread', 'old_spread']].max().max():.1%}."]
    return "\n".join(lines).replace("%", " %")


_PROBE_LINE = re.compile(r"multithreading=(\w+)\s+(.+?)\s+fwd\+bwd host\s+([\d.]+) us\s+fwd\s+([\d.]+) us")


def render_host_probe(text: str) -> str:
    """host_time_probe.txt's first lines as a table: host µs per forward + backward and per forward."""
    rows = _PROBE_LINE.findall(text)
    lines = ["| autograd multithreading | what is called | host µs, forward + backward | host µs, forward |",
             "|---|---|---|---|"]
    lines += [f"| {'on' if on == 'True' else 'off'} | {what} | {both} | {fwd} |" for on, what, both, fwd in rows]
    return "\n".join(lines)


def render_sweeps(tuning: pd.DataFrame) -> str:
    """Sweeps that recorded the table they were run against (``table_when_swept``): per sweep and shape (dtype, N,
    M) and pass, the fastest row of that table's configuration and the sweep's fastest row (µs, L2-cold)."""
    lines = ["| sweep | dtype | N | M | pass | table when swept, µs | sweep's best, µs | best / then |",
             "|---|---|---|---|---|---|---|---|"]
    swept = tuning[tuning["table_when_swept"].notna() & tuning["us"].notna()]
    for sweep, rows in swept.groupby("sweep"):
        keys = ["dtype", "N", "M", "pass_"]
        then = rows[rows["table_when_swept"] == 1].groupby(keys)["us"].min()
        best = rows.groupby(keys)["us"].min()
        for key in best.index:
            old = then.get(key, math.nan)
            cells = ("—", "—") if math.isnan(old) else (f"{old:.1f}", f"{best[key] / old:.2f}×")
            lines.append(f"| {sweep} | {key[0]} | {key[1]} | {key[2]} | {key[3]} | {cells[0]} | {best[key]:.1f} | "
                         f"{cells[1]} |")
    return "\n".join(lines)


def render_cliffs(cliffs: pd.DataFrame, environment: dict) -> str:
    """The cliff sweep (cliffs.csv): per dtype and pass, how many widths the fast path was timed at, its TB/s
    at 4096 and its slowest and fastest widths; the widths and peers that failed the oracle, with why."""
    fast = cliffs[cliffs["provider"] == "fast"]
    lines = [f"Widths declared: {environment['widths_declared']}; timed within the {environment['budget_s']:.0f} s "
             f"budget: " + ", ".join(f"{n} in {d}" for d, n in environment["widths_measured"].items()) + ".", "",
             "| dtype | pass | widths timed | TB/s at N = 4096 | slowest: TB/s at N | fastest: TB/s at N |",
             "|---|---|---|---|---|---|"]
    for (dtype, pass_), group in fast[fast["tbps"].notna()].groupby(["dtype", "pass_"]):
        rate = group.set_index("N")["tbps"]
        at = f"{rate[4096]:.2f}" if 4096 in rate.index else "—"
        lines.append(f"| {dtype} | {pass_} | {len(rate)} | {at} | {rate.min():.2f} at {rate.idxmin()} | "
                     f"{rate.max():.2f} at {rate.idxmax()} |")
    failed = cliffs[cliffs["check"] != "ok"]
    reasons = []
    for (provider, dtype), group in failed.groupby(["provider", "dtype"], sort=False):
        kind = group["check"].str.split(":").str[:2].str.join(":").iloc[0]
        reasons.append(f"{provider}, {dtype}, N = {', '.join(map(str, sorted(group['N'].unique())))} ({kind})")
    if reasons:
        lines += ["", "Failed the oracle or to run, not timed: " + "; ".join(reasons) + "."]
    return "\n".join(lines)


#: The per-shape targets of every side by side against the peers: forward at least 0.97× and backward at least 1.0×
#: the best of Liger, QuACK and compile (peer's time over ours), the plain norm's, and the fused add's and the
#: LayerNorm's alike.
PEER_TARGETS = {"forward": 0.97, "backward": 1.0}
#: The fused add's targets (lesson 14 reads them by this name): :data:`PEER_TARGETS`.
FUSED_ADD_TARGETS = PEER_TARGETS
_PEERS = ("liger", "quack", "compile")
_FUSED_COLUMNS = (("unfused", "fast_unfused"), ("Liger", "liger"), ("QuACK", "quack"), ("compile", "compile"),
                  ("eager", "eager"))
_LAYERNORM_COLUMNS = _FUSED_COLUMNS[1:]


def peer_ratios(kernel: pd.DataFrame, ours: str, providers, keys=("M", "N", "dtype", "pass_")) -> pd.DataFrame:
    """Per shape and pass (a kernel CSV's rows): ``ours``'s µs (``ours_us``) and each of ``providers``' µs over it
    (above 1: ours is faster), with the best of Liger, QuACK and compile (``best``) and who it is (``best_peer``);
    only the rows that passed the check count."""
    timed = kernel[kernel["check"] == "ok"]
    us = timed.pivot_table(index=list(keys), columns="provider", values="us", sort=False)
    table = pd.DataFrame({"ours_us": us[ours]})
    for provider in providers:
        if provider in us:
            table[provider] = us[provider] / us[ours]
    peers = [p for p in _PEERS if p in table]
    table["best"] = table[peers].min(axis=1)
    table["best_peer"] = table[peers].idxmin(axis=1)
    return table


def fused_add_ratios(kernel: pd.DataFrame) -> pd.DataFrame:
    """Per shape and pass (fused_add_kernel.csv): the fused op's µs (``fused_us``) and each provider's µs over it,
    as :func:`peer_ratios`."""
    return peer_ratios(kernel, "fast_fused", [p for _, p in _FUSED_COLUMNS]).rename(columns={"ours_us": "fused_us"})


def layernorm_ratios(kernel: pd.DataFrame) -> pd.DataFrame:
    """Per shape (with its weight dtype, level ``weight``) and pass (layernorm_kernel.csv): the fast LayerNorm's µs
    (``fast_us``) and each provider's µs over it, as :func:`peer_ratios`."""
    table = peer_ratios(kernel.rename(columns={"weight_dtype": "weight"}), "fast",
                        [p for _, p in _LAYERNORM_COLUMNS], ("M", "N", "dtype", "weight", "pass_"))
    return table.rename(columns={"ours_us": "fast_us"})


def _target_lines(table: pd.DataFrame, ours: str, geomean_targets: dict | None = None) -> list[str]:
    """Per pass of a :func:`peer_ratios` table: the best peer's geometric mean over ``ours`` (against its target
    where ``geomean_targets`` gives one), the worst shape, and the shapes under :data:`PEER_TARGETS`."""
    names, lines = list(table.index.names), []
    for pass_, target in PEER_TARGETS.items():
        sub = table.xs(pass_, level="pass_")
        worst = sub["best"].idxmin()
        under = [_shape((*k, pass_), names) for k, v in sub["best"].items() if v < target]
        mean = _geomean(sub["best"])
        wanted = "" if geomean_targets is None else (
            f" (target {geomean_targets[pass_]:.2f}×: {'met' if mean >= geomean_targets[pass_] else 'not met'})")
        lines.append(f"- {pass_}: best peer over {ours}, geometric mean {mean:.2f}×{wanted} over {len(sub)} shapes; "
                     f"worst {sub.loc[worst, 'best']:.2f}× at {_shape((*worst, pass_), names)} "
                     f"({_NAMES[sub.loc[worst, 'best_peer']]}); under {target:.2f}×: "
                     + ("; ".join(under) if under else "none") + ".")
    return lines


def _not_timed(kernel: pd.DataFrame) -> list[str]:
    """What a kernel CSV did not time: one line per provider and reason (its verdict, refused, failed or wrong,
    and the reason's first 80 characters), with the shapes (and the pass, where not both) it covers."""
    failed = kernel[kernel["check"] != "ok"].rename(columns={"weight_dtype": "weight"})
    first = failed["check"].str.split("; ").str[0]
    why = first.where(first.str.len() <= 80, first.str.slice(0, 80) + "…")
    keys = ["M", "N", "dtype"] + (["weight"] if "weight" in failed else [])
    lines = []
    for (provider, reason), rows in failed.groupby([failed["provider"], why], sort=False):
        passes = rows.groupby(keys, sort=False)["pass_"].agg(list)
        shapes = [_shape(key, keys) + ("" if len(p) > 1 else f" {p[0]}") for key, p in passes.items()]
        lines.append(f"- {_NAMES.get(provider, provider)} not timed ({reason}) at {len(shapes)} "
                     f"shape{'s' * (len(shapes) > 1)}: " + "; ".join(shapes) + ".")
    return lines


def _side_by_side(table: pd.DataFrame, kernel: pd.DataFrame, whole: pd.DataFrame | None, ours: str,
                  who: tuple[str, str], columns, tail=(), geomean_targets: dict | None = None) -> str:
    """A results block of a side by side against the peers: the kernel-time table of a :func:`peer_ratios`
    ``table`` (ours' µs, then each of ``columns``' ratio), the per-pass lines, ``tail``'s lines, what was not
    timed, then the whole call and host µs per call of provider ``ours`` and the others' ratios (``whole``).
    ``who``: what ours is called in a sentence and in a column ("fused op", "fused")."""
    names = list(table.index.names)
    shown = [(name, provider) for name, provider in columns if provider in table]
    name, short = who
    lines = [f"Kernel time, L2 cold: the {name}'s µs, then each provider's time over it (above 1: the {name} is "
             "faster).", "",
             f"| shape | pass | {short} µs | " + " | ".join(n for n, _ in shown)
             + " | best of Liger, QuACK, compile |", "|---" * (4 + len(shown)) + "|"]
    for key, r in table.iterrows():
        cells = [f"{r[p]:.2f}×" if not math.isnan(r[p]) else "—" for _, p in shown]
        lines.append(f"| {_shape(key, names)} | {key[-1]} | {r.iloc[0]:.1f} | " + " | ".join(cells)
                     + f" | {r.best:.2f}× ({_NAMES[r.best_peer]}) |")
    lines += ["", *_target_lines(table, short, geomean_targets), *tail, *_not_timed(kernel)]
    if whole is not None:  # its own providers: a kernel run may time fewer than the whole call's
        ok = whole[whole["check"] == "ok"]
        calls = ok.pivot_table(index=["M", "N", "dtype", "pass_"], columns="provider", values="whole_call_us",
                               sort=False)
        host = ok.pivot_table(index=["M", "N", "dtype", "pass_"], columns="provider", values="host_us", sort=False)
        shown = [(name, provider) for name, provider in columns if provider in calls]
        lines += ["", "Whole call (CUDA events around back-to-back calls) and host µs per call, at the host-bound "
                  f"shapes: the {name}'s µs, then each provider's over it.", "",
                  f"| shape | pass | {short}: whole call µs | {short}: host µs | "
                  + " | ".join(n for n, _ in shown) + " |", "|---" * (4 + len(shown)) + "|"]
        for key, r in calls.iterrows():
            cells = [f"{r[p] / r[ours]:.2f}×" if not math.isnan(r[p]) else "—" for _, p in shown]
            lines.append(f"| {_shape(key, list(calls.index.names))} | {key[-1]} | {r[ours]:.1f} | "
                         f"{host.loc[key, ours]:.1f} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def fused_over_unfused(ratios: pd.DataFrame) -> pd.DataFrame:
    """Per shape (:func:`fused_add_ratios`' rows): the fused op's and the unfused form's µs, forward + backward
    summed, and their ratio; shapes where either pass of either is missing are left out."""
    both = {"fused": ratios["fused_us"], "unfused": ratios["fused_us"] * ratios["fast_unfused"]}
    table = pd.DataFrame({name: us.unstack("pass_").sum(axis=1, min_count=2) for name, us in both.items()}).dropna()
    table["ratio"] = table["fused"] / table["unfused"]
    return table


def render_fused_add(kernel: pd.DataFrame, whole: pd.DataFrame | None = None) -> str:
    """The fused residual add + norm (fused_add_kernel.csv, fused_add_whole_call.csv): kernel time L2 cold per
    shape and pass as each provider's time over the fused op's; per pass the best peer's geometric mean, its worst
    shape and the shapes under :data:`FUSED_ADD_TARGETS`; fused over unfused for forward + backward; then the
    whole call and host µs at the host-bound shapes."""
    table = fused_add_ratios(kernel)
    tail = []
    if "fast_unfused" in table:
        ratio = fused_over_unfused(table)["ratio"]
        tail.append(f"- fused over unfused (the plain fast norm after eager's add), kernel time forward + backward: "
                    f"{ratio.min():.2f}–{ratio.max():.2f}× over {len(ratio)} shapes, geometric mean "
                    f"{_geomean(ratio):.2f}×.")
    return _side_by_side(table, kernel, whole, "fast_fused", ("fused op", "fused"), _FUSED_COLUMNS, tail)


#: Issue 40's targets for the geometric means of the best peer over the fast LayerNorm.
LAYERNORM_GEOMEAN_TARGETS = {"forward": 1.0, "backward": 1.10}


def render_layernorm(kernel: pd.DataFrame, whole: pd.DataFrame | None = None) -> str:
    """The fast LayerNorm (layernorm_kernel.csv, layernorm_whole_call.csv), as :func:`render_fused_add` renders the
    fused add: per shape (with its weight dtype) and pass each provider's kernel time over the fast LayerNorm's,
    the per-pass lines with the geometric means' targets (:data:`LAYERNORM_GEOMEAN_TARGETS`), what was not
    timed and why, then the whole call and host µs."""
    return _side_by_side(layernorm_ratios(kernel), kernel, whole, "fast", ("fast LayerNorm", "fast"),
                         _LAYERNORM_COLUMNS, geomean_targets=LAYERNORM_GEOMEAN_TARGETS)


_AB_NORMS = {"rmsnorm": "RMSNorm", "rmsnorm_add": "fused add", "layernorm": "LayerNorm"}


def render_ab(before_after: pd.DataFrame) -> str:
    """A ``scripts/compare_commits.py`` run across norms (forward_layout_ab.csv): per norm, shape and pass the old
    and new checkouts' kernel time (means of their runs) and new over old; then, per norm, the range and the cases
    beyond :data:`AB_TOLERANCE` (:func:`ab_moved`)."""
    table = new_over_old(before_after)
    names = ["M", "N", "dtype", "weight"]
    lines = ["| norm | shape | pass | old µs | new µs | new / old |", "|---|---|---|---|---|---|"]
    for (norm, M, N, dtype, weight, pass_), r in table.iterrows():
        lines.append(f"| {_AB_NORMS[norm]} | {_shape((M, N, dtype, weight), names)} | {pass_} | {r.old_us:.2f} | "
                     f"{r.new_us:.2f} | {r.new_over_old:.3f} |")
    lines.append("")
    for norm, group in table.groupby(level="norm", sort=False):
        where = "; ".join(f"{_shape((M, N, dtype, weight), names)} {pass_} {r.new_over_old:.3f}"
                          for (_, M, N, dtype, weight, pass_), r in ab_moved(group).iterrows()) or "none"
        lines.append(f"- {_AB_NORMS[norm]}: new / old {group['new_over_old'].min():.3f}–"
                     f"{group['new_over_old'].max():.3f} over {len(group)} cases; beyond ±{AB_TOLERANCE:.0%}: "
                     f"{where}.".replace("%", " %"))
    return "\n".join(lines)


def render_decode(decode: pd.DataFrame) -> str:
    """Greedy decode (model_*_decode.csv): per model size and batch, each variant's tokens/s with its 95 % interval,
    over the original's, and the share of generated tokens equal to the original's."""
    lines = ["| size | batch | norm | tokens/s | 95 % interval | over the original | tokens as the original's |",
             "|---|---|---|---|---|---|---|"]
    ok = decode[decode["check"] == "ok"].set_index(["size", "batch", "variant"])
    for (size, batch, variant), r in ok.iterrows():
        original = ok.loc[(size, batch, "original"), "tokens_per_s"]
        lines.append(f"| {size} | {batch} | {variant} | {r.tokens_per_s:.0f} | {r.tokens_per_s_lo:.0f}–"
                     f"{r.tokens_per_s_hi:.0f} | {r.tokens_per_s / original:.3f}× | {r.tokens_match:.0%} |"
                     .replace("%", " %"))
    failed = decode[decode["check"] != "ok"]
    if len(failed):
        lines += ["", "Not timed: " + "; ".join(f"{r.size} {r.variant} batch {r.batch}: {r.check}"
                                                 for r in failed.itertuples()) + "."]
    return "\n".join(lines)

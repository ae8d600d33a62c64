"""Checkers of exercise 12: read the side-by-side benchmark, then pick a configuration from a sweep.

1. :func:`check_copy_fraction`: the learner's ``copy_fraction(M, N, dtype,
   pass_, us, copy_rate_gbps)`` — the fraction of the device's measured copy
   rate that one call reaches, with the course's byte convention (forward
   2·M·N·s + N·s + 4·M, backward 3·M·N·s + 2·N·s + 4·M; s the bytes per
   element of ``dtype``, gamma in the same dtype; 4·M the float32 rstd; no
   scratch). Checked on a small case where every classic slip gives a
   different number, then on every row of the committed ``fast.csv``.
   Recognised: scratch charged (M·N float32 partials, written and read, or
   written only); µs taken as seconds or as milliseconds; 4 bytes per element
   whatever the dtype; the backward counted like the forward; reads only;
   gamma and rstd left out; a percentage instead of a fraction; the copy
   rate in GiB/s instead of GB/s.
2. :func:`check_pick_config`: the learner's ``pick_config(timings, M, N,
   dtype, pass_)`` — the configuration with the smallest **median** L2-cold
   time at one shape and pass. Checked on a small table built so that each
   slip picks a different configuration, then on the committed
   ``fast_tuning.csv``. Recognised: warm-L2 samples used; the mean of a
   skewed set of samples; the fastest single sample; the slowest
   configuration; rows of another shape; rows of the other pass.

Needs pandas (like :mod:`rmsnorm_lab`); imported only when called.

Source: solutions/12_tuning_and_side_by_side.ipynb; scripts/benchmark_fast.py
(the byte convention and the L2-cold timing).
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Mapping

import torch

from rmsnorm_lab.results import backward_bytes, forward_bytes
from .diagnose import fmt
from .feedback import Feedback, call_learner, name_of, passed, wrong

EXERCISE_FRACTION = "12 · fraction of the copy rate"
EXERCISE_PICK = "12 · picking a configuration"
#: |yours − expected| ≤ 1e-9 · |expected| + 1e-12 (pure arithmetic).
RTOL = 1e-9
KNOBS = ("BLOCK_M", "BLOCK_N", "num_warps", "programs_per_sm", "num_stages")


def _same(a: float, b: float) -> bool:
    return abs(a - b) <= RTOL * abs(b) + 1e-12


# --------------------------------------------------------------------------- 12.1 fraction of the copy rate


def minimum_bytes(M: int, N: int, dtype: str, pass_: str) -> int:
    """The course's byte convention (gamma in x's dtype) for a row of ``fast.csv``: :mod:`rmsnorm_lab`'s counts."""
    return (forward_bytes if pass_ == "forward" else backward_bytes)(M, N, getattr(torch, dtype))


def expected_fraction(M, N, dtype, pass_, us, copy_rate_gbps) -> float:
    """bytes / (us · 1e-6 s) / (copy_rate_gbps · 1e9 B/s)."""
    return minimum_bytes(M, N, dtype, pass_) / (us * 1e-6) / (copy_rate_gbps * 1e9)


def _fraction_slips(M, N, dtype, pass_, us, copy):
    s = getattr(torch, dtype).itemsize
    right = minimum_bytes(M, N, dtype, pass_)
    rate = lambda nbytes, seconds=us * 1e-6, ceiling=copy * 1e9: nbytes / seconds / ceiling  # noqa: E731
    small = N * s * (1 if pass_ == "forward" else 2) + 4 * M
    return [
        ("scratch was charged: the M·N float32 partials, written and read (2·M·N·4 bytes), are not in the convention",
         rate(right + 2 * M * N * 4)),
        ("scratch was charged: the M·N float32 partials (M·N·4 bytes) are not in the convention",
         rate(right + M * N * 4)),
        ("the time was taken in seconds: us is in microseconds (1 µs = 1e-6 s)", rate(right, seconds=us)),
        ("the time was taken in milliseconds: us is in microseconds (1 µs = 1e-6 s, not 1e-3 s)",
         rate(right, seconds=us * 1e-3)),
        (f"every element was counted as 4 bytes: {dtype} takes {s}",
         rate(minimum_bytes(M, N, "float32", pass_) if s != 4 else right + 1)),
        ("the backward was counted like the forward (2·M·N elements): it reads x and dy and writes dx, 3·M·N",
         rate(minimum_bytes(M, N, dtype, "forward")) if pass_ == "backward" else None),
        ("only the reads were counted: the writes (y, or dx) move as many bytes",
         rate(M * N * s * (1 if pass_ == "forward" else 2))),
        ("gamma and rstd were left out (N·s per read of gamma, 4·M for the float32 rstd): small, but in the convention",
         rate(right - small)),
        ("that is a percentage: return the fraction (between 0 and 1, not × 100)", 100 * rate(right)),
        ("the copy rate was taken in GiB/s (2^30 B/s): copy_rate_gbps is in GB/s, 1e9 B/s",
         rate(right, ceiling=copy * 2**30)),
    ]


#: The small case where every slip above gives a different number: (M, N, dtype, pass_, us, copy GB/s).
FRACTION_CASE = (100_000, 300, "float16", "backward", 100.0, 4000.0)


def check_copy_fraction(copy_fraction, fast_csv=None, copy_rate_gbps: float | None = None) -> Feedback:
    """Run :func:`judge_copy_fraction` on the learner's code in a child process with a time limit.

    Same arguments and result; a learner's code that crashes, hangs or raises
    becomes a "wrong" Feedback, never an exception or a hung notebook.
    """
    from . import isolate

    return isolate.run_python_check(
        EXERCISE_FRACTION,
        judge_copy_fraction,
        [copy_fraction, fast_csv, copy_rate_gbps],
        f"your {name_of(copy_fraction)}",
    )


def judge_copy_fraction(copy_fraction, fast_csv=None, copy_rate_gbps: float | None = None) -> Feedback:
    """Check ``copy_fraction(M, N, dtype, pass_, us, copy_rate_gbps) -> float``.

    Args:
        copy_fraction: the learner's function; dtype is a string ("float16", "bfloat16", "float32").
        fast_csv: the committed ``results/h200/fast.csv`` as a DataFrame (its
            ``copy_fraction`` column is the expected value), or None to skip that part.
        copy_rate_gbps: the copy rate those rows were divided by (``fast_environment.json``).

    Returns:
        Feedback: "passed", "not done yet" or "wrong" naming the slip. Never raises for a learner's mistake.

    Source: solutions/12_tuning_and_side_by_side.ipynb.
    """
    M, N, dtype, pass_, us, copy = FRACTION_CASE
    got, problem = call_learner(EXERCISE_FRACTION, copy_fraction, *FRACTION_CASE)
    if problem is not None:
        return problem
    if isinstance(got, bool) or not isinstance(got, numbers.Real) or not math.isfinite(float(got)):
        return wrong(EXERCISE_FRACTION, f"{name_of(copy_fraction)} must return a finite number; got {got!r}")
    expected = expected_fraction(*FRACTION_CASE)
    if not _same(float(got), expected):
        shown = (f"for M = {M}, N = {N}, {dtype}, {pass_}, {us} µs and a copy rate of {copy} GB/s you give "
                 f"{fmt(float(got))}, expected {expected:.4f} ({minimum_bytes(M, N, dtype, pass_):,} bytes in {us} µs)")
        what = next((w for w, v in _fraction_slips(*FRACTION_CASE) if v is not None and _same(float(got), v)), None)
        return wrong(EXERCISE_FRACTION, f"{what}: {shown}." if what else f"{shown}.")
    if fast_csv is not None:
        # a provider that failed its check has no time
        timed = fast_csv[fast_csv["us"].notna() & fast_csv["copy_fraction"].notna()]
        for row in timed.itertuples(index=False):
            got, problem = call_learner(EXERCISE_FRACTION, copy_fraction, int(row.M), int(row.N), row.dtype, row.pass_,
                                 float(row.us), float(copy_rate_gbps))
            if problem is not None:
                return problem
            if not isinstance(got, numbers.Real) or not math.isclose(float(got), row.copy_fraction, rel_tol=1e-6):
                return wrong(EXERCISE_FRACTION,
                             f"on fast.csv's row {row.M}×{row.N} {row.dtype} {row.pass_} {row.provider}: "
                             f"you give {got!r}, the file says {row.copy_fraction:.6f}.")
    rows = "" if fast_csv is None else f" and on all {len(timed)} timed rows of fast.csv"
    return passed(EXERCISE_FRACTION, f"right on the small case{rows}: {expected:.4f} of the copy rate for "
                  f"{minimum_bytes(M, N, dtype, pass_):,} bytes in {us} µs.")


# --------------------------------------------------------------------------- 12.2 picking a configuration


def _config(block_m, pps, stages, warps=4):
    return {"BLOCK_M": block_m, "BLOCK_N": 256, "num_warps": warps, "programs_per_sm": pps, "num_stages": stages}


#: The toy sweep: (label, config, shape/pass, cold samples µs, warm samples µs).
_RIGHT = _config(8, 2, 2)
_TOY = [
    ("right", _RIGHT, "here", (20, 21, 22, 90), (19, 19, 19, 19)),  # median 21.5; one slow outlier: mean 38.25
    ("warm", _config(4, 1, 1), "here", (30, 30, 31, 31), (5, 5, 5, 5)),  # fastest only with a warm L2
    ("mean", _config(16, 2, 2, 8), "here", (25, 25, 26, 26), (24, 24, 24, 24)),  # steady: the mean's winner
    ("min", _config(2, 4, 3), "here", (15, 40, 41, 42), (14, 30, 30, 30)),  # one lucky sample
    ("max", _config(1, 1, 1), "here", (60, 61, 62, 63), (50, 50, 50, 50)),  # the slowest
    ("shape", _config(32, 1, 1, 16), "other shape", (1, 1, 1, 1), (1, 1, 1, 1)),
    ("pass", _config(8, 1, 1), "other pass", (2, 2, 2, 2), (2, 2, 2, 2)),
]
TOY_SHAPE = (65536, 256, "float16", "backward")

_PICK_SLIPS = {
    "warm": "it picks a configuration that is fastest only with a warm L2 "
            "(its warm samples are 5 µs, its cold ones 30 µs). "
            "Keep the rows with l2 == 'cold': in a model, the norm's input does not sit in L2 waiting for it",
    "mean": "it ranks by the mean: one slow outlier (90 µs among 20, 21, 22) "
            "pulls the right winner's mean up to 38.25 µs. "
            "Rank by the median of each configuration's samples",
    "min": "it ranks by the fastest single sample (15 µs, next to 40, 41, 42): "
           "one lucky sample is not the typical time. "
           "Rank by the median",
    "max": "it picks the slowest configuration: take the smallest median time (idxmin, not idxmax)",
    "shape": "it picks a configuration timed at another shape: keep the rows of this M, N and dtype only",
    "pass": "it picks a configuration timed for the other pass (forward rows in a backward question): "
            "keep the rows of pass_",
}


def toy_timings():
    """The toy sweep as a long DataFrame: one row per sample (columns M, N, dtype, pass_, knobs, l2, us)."""
    import pandas as pd

    M, N, dtype, pass_ = TOY_SHAPE
    rows = []
    for _label, cfg, where, cold, warm in _TOY:
        m, p = (1024 if where == "other shape" else M), ("forward" if where == "other pass" else pass_)
        for l2, samples in (("cold", cold), ("warm", warm)):
            rows += [dict(M=m, N=N, dtype=dtype, pass_=p, **cfg, l2=l2, us=float(us)) for us in samples]
    return pd.DataFrame(rows)


def expected_pick(timings, M, N, dtype, pass_) -> dict | None:
    """The configuration with the smallest median L2-cold time at (M, N, dtype, pass_); None if none was timed."""
    t = timings[(timings["M"] == M) & (timings["N"] == N) & (timings["dtype"] == dtype)
                & (timings["pass_"] == pass_) & (timings["l2"] == "cold")]
    medians = t.groupby(list(KNOBS))["us"].median().dropna()
    return None if medians.empty else dict(zip(KNOBS, (int(v) for v in medians.idxmin())))


def _as_config(got) -> dict | None:
    if not isinstance(got, Mapping) or not all(k in got for k in KNOBS):
        return None
    try:
        return {k: int(got[k]) for k in KNOBS}
    except (TypeError, ValueError):
        return None


def check_pick_config(pick_config, tuning_csv=None, shapes=()) -> Feedback:
    """Run :func:`judge_pick_config` on the learner's code in a child process with a time limit.

    Same arguments and result; a learner's code that crashes, hangs or raises
    becomes a "wrong" Feedback, never an exception or a hung notebook.
    """
    from . import isolate

    return isolate.run_python_check(
        EXERCISE_PICK,
        judge_pick_config,
        [pick_config, tuning_csv, shapes],
        f"your {name_of(pick_config)}",
    )


def judge_pick_config(pick_config, tuning_csv=None, shapes=()) -> Feedback:
    """Check ``pick_config(timings, M, N, dtype, pass_) -> {knob: value}``.

    Args:
        pick_config: the learner's function; ``timings`` has one row per sample with
            columns M, N, dtype, pass_, BLOCK_M, BLOCK_N, num_warps, programs_per_sm,
            num_stages, l2 ("cold" or "warm") and us (µs).
        tuning_csv: the committed ``fast_tuning.csv`` (one L2-cold sample per row,
            several rows for a configuration timed in several sweeps; an ``l2``
            column of "cold" is added when it has none), or None to skip that part.
        shapes: (M, N, dtype, pass_) tuples of ``tuning_csv`` to check.

    Returns:
        Feedback: "passed", "not done yet" or "wrong" naming the slip. Never raises for a learner's mistake.

    Source: solutions/12_tuning_and_side_by_side.ipynb.
    """
    toy = toy_timings()
    got, problem = call_learner(EXERCISE_PICK, pick_config, toy.copy(), *TOY_SHAPE)
    if problem is not None:
        return problem
    config = _as_config(got)
    if config is None:
        return wrong(EXERCISE_PICK, f"{name_of(pick_config)} must return a dict with the keys {', '.join(KNOBS)}; "
                     f"got {got!r}")
    if config != _RIGHT:
        label = next((lab for lab, cfg, *_ in _TOY if cfg == config), None)
        shown = f"on the small sweep it returns {config}; the smallest median L2-cold time is {_RIGHT} (21.5 µs)"
        if label in _PICK_SLIPS:
            return wrong(EXERCISE_PICK, f"{_PICK_SLIPS[label]}: {shown}.")
        return wrong(EXERCISE_PICK, f"{shown}.")
    if tuning_csv is not None and "l2" not in tuning_csv.columns:
        tuning_csv = tuning_csv.assign(l2="cold")  # the committed sweep's samples are all L2-cold
    picked = []
    for M, N, dtype, pass_ in shapes:
        if expected_pick(tuning_csv, M, N, dtype, pass_) is None:
            continue  # that shape was not swept in this run of the benchmark
        got, problem = call_learner(EXERCISE_PICK, pick_config, tuning_csv.copy(), M, N, dtype, pass_)
        if problem is not None:
            return problem
        expected = expected_pick(tuning_csv, M, N, dtype, pass_)
        if _as_config(got) != expected:
            return wrong(EXERCISE_PICK, f"on fast_tuning.csv at {M}×{N} {dtype} {pass_}: you pick {got!r}, "
                         f"the smallest median L2-cold time is {expected}.")
        picked.append(f"{M}×{N} {dtype} {pass_}: {expected}")
    on_csv = f" On fast_tuning.csv — {'; '.join(picked)}." if picked else ""
    return passed(EXERCISE_PICK, "right on the small sweep (cold rows of this shape and pass, median per "
                  f"configuration, smallest).{on_csv}")

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

Each is a :class:`~rmsnorm_course.checkers.spec.FunctionSpec` (:data:`FRACTION_SPEC`, :data:`PICK_SPEC`),
judged by :func:`rmsnorm_course.checkers.functions.check`; the slips and the small sweep are in
:mod:`rmsnorm_course.checkers.ex12_symptoms`. Needs pandas (like :mod:`rmsnorm_lab`); imported only when called.

Source: solutions/12_tuning_and_side_by_side.ipynb; scripts/benchmark_fast.py
(the byte convention and the L2-cold timing).
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Mapping

from .diagnose import Case, Run, fmt
from .ex12_symptoms import (
    FRACTION_CASE,
    PICK_SLIPS,
    RIGHT,
    TOY,
    TOY_SHAPE,
    expected_fraction,
    fraction_slips,
    minimum_bytes,
    toy_timings,
)
from .feedback import Feedback, name_of
from .functions import calling, check
from .spec import FunctionSpec, Refused

EXERCISE_FRACTION = "12 · fraction of the copy rate"
EXERCISE_PICK = "12 · picking a configuration"
#: |yours − expected| ≤ 1e-9 · |expected| + 1e-12 (pure arithmetic).
RTOL = 1e-9
KNOBS = ("BLOCK_M", "BLOCK_N", "num_warps", "programs_per_sm", "num_stages")


def _same(a: float, b: float) -> bool:
    return abs(a - b) <= RTOL * abs(b) + 1e-12


# --------------------------------------------------------------------------- 12.1 fraction of the copy rate

def _fraction_cases(copy_fraction, fast_csv=None, copy_rate_gbps: float | None = None) -> list[Case]:
    """The small case, then every timed row of ``fast.csv`` (a provider that failed its check has no time)."""
    cases = [Case("the small case", {"args": FRACTION_CASE})]
    if fast_csv is not None:
        timed = fast_csv[fast_csv["us"].notna() & fast_csv["copy_fraction"].notna()]
        cases += [Case(f"fast.csv's row {row.M}×{row.N} {row.dtype} {row.pass_} {row.provider}",
                       {"args": (int(row.M), int(row.N), row.dtype, row.pass_, float(row.us), float(copy_rate_gbps)),
                        "row": row}) for row in timed.itertuples(index=False)]
    return cases


def _fraction_run(copy_fraction, case: Case) -> dict:
    got = calling(name_of(copy_fraction), copy_fraction, *case.inputs["args"])
    if "row" not in case.inputs and (
            isinstance(got, bool) or not isinstance(got, numbers.Real) or not math.isfinite(float(got))):
        raise Refused(f"{name_of(copy_fraction)} must return a finite number; got {got!r}")
    return {"fraction": got}


def _fraction_oracle(case: Case) -> dict:
    row = case.inputs.get("row")
    return {"fraction": expected_fraction(*FRACTION_CASE) if row is None else row.copy_fraction}


def _fraction_verify(run: Run) -> str | None:
    """The slip a wrong fraction shows on the small case, or the row of ``fast.csv`` it disagrees with."""
    got, expected = run.actual["fraction"], run.expected["fraction"]
    if "row" in run.case.inputs:
        if not isinstance(got, numbers.Real) or not math.isclose(float(got), expected, rel_tol=1e-6):
            return f"on {run.case.label}: you give {got!r}, the file says {expected:.6f}."
        return None
    if _same(float(got), expected):
        return None
    M, N, dtype, pass_, us, copy = FRACTION_CASE
    shown = (f"for M = {M}, N = {N}, {dtype}, {pass_}, {us} µs and a copy rate of {copy} GB/s you give "
             f"{fmt(float(got))}, expected {expected:.4f} ({minimum_bytes(M, N, dtype, pass_):,} bytes in {us} µs)")
    what = next((w for w, v in fraction_slips(*FRACTION_CASE) if v is not None and _same(float(got), v)), None)
    return f"{what}: {shown}." if what else f"{shown}."


def _fraction_success(runs) -> str:
    M, N, dtype, pass_, us, _copy = FRACTION_CASE
    rows = f" and on all {len(runs) - 1} timed rows of fast.csv" if len(runs) > 1 else ""
    return (f"right on the small case{rows}: {runs[0].expected['fraction']:.4f} of the copy rate for "
            f"{minimum_bytes(M, N, dtype, pass_):,} bytes in {us} µs.")


#: Exercise 12.1, declared: judged by :func:`rmsnorm_course.checkers.functions.check`; ``fast.csv`` and its copy
#: rate travel with the answer (``given``), each timed row one case after the small one.
FRACTION_SPEC = FunctionSpec(
    exercise=EXERCISE_FRACTION,
    reference=expected_fraction,
    cases=_fraction_cases,
    run=_fraction_run,
    oracle=_fraction_oracle,
    symptoms=(),
    success=_fraction_success,
    verify=_fraction_verify,
)


def check_copy_fraction(copy_fraction, fast_csv=None, copy_rate_gbps: float | None = None) -> Feedback:
    """Check ``copy_fraction(M, N, dtype, pass_, us, copy_rate_gbps) -> float``, in a child process with a time limit.

    Args:
        copy_fraction: the learner's function; dtype is a string ("float16", "bfloat16", "float32").
        fast_csv: the committed ``results/h200/fast.csv`` as a DataFrame (its
            ``copy_fraction`` column is the expected value), or None to skip that part.
        copy_rate_gbps: the copy rate those rows were divided by (``fast_environment.json``).

    Returns:
        Feedback: "passed", "not done yet" or "wrong" naming the slip. Never raises, never hangs.

    Source: solutions/12_tuning_and_side_by_side.ipynb.
    """
    return check(FRACTION_SPEC, copy_fraction, fast_csv=fast_csv, copy_rate_gbps=copy_rate_gbps)


# --------------------------------------------------------------------------- 12.2 picking a configuration

# --------------------------------------------------------------------------- 12.2 picking a configuration


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


def _pick_cases(pick_config, tuning_csv=None, shapes=()) -> list[Case]:
    """The small sweep, then each of ``shapes`` that ``tuning_csv`` has timings of."""
    cases = [Case("the small sweep", {"timings": toy_timings(), "shape": TOY_SHAPE})]
    if tuning_csv is not None and "l2" not in tuning_csv.columns:
        tuning_csv = tuning_csv.assign(l2="cold")  # the committed sweep's samples are all L2-cold
    for M, N, dtype, pass_ in shapes:
        if expected_pick(tuning_csv, M, N, dtype, pass_) is not None:  # else not swept in this run of the benchmark
            cases.append(Case(f"fast_tuning.csv at {M}×{N} {dtype} {pass_}",
                              {"timings": tuning_csv, "shape": (M, N, dtype, pass_), "csv": True}))
    return cases


def _pick_run(pick_config, case: Case) -> dict:
    got = calling(name_of(pick_config), pick_config, case.inputs["timings"].copy(), *case.inputs["shape"])
    if "csv" not in case.inputs and _as_config(got) is None:
        raise Refused(f"{name_of(pick_config)} must return a dict with the keys {', '.join(KNOBS)}; got {got!r}")
    return {"config": got}


def _pick_verify(run: Run) -> str | None:
    """The slip a wrong pick shows on the small sweep, or the shape of ``fast_tuning.csv`` it disagrees with."""
    got, expected = run.actual["config"], run.expected["config"]
    if _as_config(got) == expected:
        return None
    if "csv" in run.case.inputs:
        return f"on {run.case.label}: you pick {got!r}, the smallest median L2-cold time is {expected}."
    config = _as_config(got)
    label = next((lab for lab, cfg, *_ in TOY if cfg == config), None)
    shown = f"on the small sweep it returns {config}; the smallest median L2-cold time is {RIGHT} (21.5 µs)"
    return f"{PICK_SLIPS[label]}: {shown}." if label in PICK_SLIPS else f"{shown}."


def _pick_success(runs) -> str:
    picked = [f"{run.case.label.removeprefix('fast_tuning.csv at ')}: {run.expected['config']}" for run in runs[1:]]
    on_csv = f" On fast_tuning.csv — {'; '.join(picked)}." if picked else ""
    return f"right on the small sweep (cold rows of this shape and pass, median per configuration, smallest).{on_csv}"


#: Exercise 12.2, declared: judged by :func:`rmsnorm_course.checkers.functions.check`; ``fast_tuning.csv`` and
#: the shapes to pick at travel with the answer (``given``), each swept shape one case after the small sweep.
PICK_SPEC = FunctionSpec(
    exercise=EXERCISE_PICK,
    reference=expected_pick,
    cases=_pick_cases,
    run=_pick_run,
    oracle=lambda case: {"config": expected_pick(case.inputs["timings"], *case.inputs["shape"])},
    symptoms=(),
    success=_pick_success,
    verify=_pick_verify,
)


def check_pick_config(pick_config, tuning_csv=None, shapes=()) -> Feedback:
    """Check ``pick_config(timings, M, N, dtype, pass_) -> {knob: value}``, in a child process with a time limit.

    Args:
        pick_config: the learner's function; ``timings`` has one row per sample with
            columns M, N, dtype, pass_, BLOCK_M, BLOCK_N, num_warps, programs_per_sm,
            num_stages, l2 ("cold" or "warm") and us (µs).
        tuning_csv: the committed ``fast_tuning.csv`` (one L2-cold sample per row,
            several rows for a configuration timed in several sweeps; an ``l2``
            column of "cold" is added when it has none), or None to skip that part.
        shapes: (M, N, dtype, pass_) tuples of ``tuning_csv`` to check.

    Returns:
        Feedback: "passed", "not done yet" or "wrong" naming the slip. Never raises, never hangs.

    Source: solutions/12_tuning_and_side_by_side.ipynb.
    """
    return check(PICK_SPEC, pick_config, tuning_csv=tuning_csv, shapes=shapes)

"""Checker of exercise 13: the norm's share of a training step, and the Amdahl bound it implies, from a profile.

:func:`check_norm_share` (:data:`SPEC`, judged by :func:`rmsnorm_course.checkers.functions.check`): the
learner's ``norm_share(profile, step_ms) -> (share, bound)``. ``profile`` is one profiled step's kernel
table (the columns of ``model_step_kernels.csv``: kernel, part, norm, calls, us, host_us); ``step_ms``
the step's median time. The share is the norm kernels' device time over the whole step (rows with
``norm`` True, forward and backward, their ``us`` in µs, summed over the step's calls) divided by the
step time, a fraction; the bound is 1 / (1 − share). Checked first on a small profile where each classic
slip gives a different number, then on every timed row of the step table (the committed H200 run, or the
fixture that stands in for it until it is committed), against the benchmark's own ``norm_share`` and
``amdahl_bound``. Recognised: a percentage; the forward only (the backward ignored); the GPU's busy time
as the denominator; host time counted as GPU time; warm timings (the same kernels timed alone, back to
back); one call's time instead of the step's; ms and µs mixed; the rows selected (every kernel, the selection
inverted, none), combined (the mean instead of the sum) and converted (1e6 for 1e3), alone and
two at a time; otherwise the norm time the share stands for; and for the bound, 1 + share, 1 / share,
share / (1 − share) and 1 − share.

Needs pandas; imported only when called.

Source: solutions/13_into_a_model.ipynb; rmsnorm_lab/model.py (the share and the bound);
rmsnorm_lab/step_profile.py (what is the norm's).
"""

from __future__ import annotations

import math
import numbers

from .diagnose import Case, Run, fmt
from .feedback import Feedback, name_of
from .functions import calling, check
from .spec import FunctionSpec, Refused

EXERCISE = "13 · the norm's share and the Amdahl bound"
#: |yours − expected| ≤ RTOL · |expected|: the committed CSVs carry 6 significant digits.
RTOL = 1e-4

#: The small profile: (kernel, part, norm, calls, us, host_us, warm_us); a 40 ms step.
TOY_STEP_MS = 40.0
_TOY = [
    ("vectorized_elementwise_kernel<pow>", "forward", True, 9, 3000.0, 900.0, 2100.0),
    ("vectorized_elementwise_kernel<mul>", "backward", True, 9, 5000.0, 1500.0, 3600.0),
    ("sm90_xmma_gemm_bf16", "forward", False, 40, 10000.0, 400.0, math.nan),
    ("sm90_xmma_gemm_bf16", "backward", False, 80, 14000.0, 800.0, math.nan),
    ("multi_tensor_apply_kernel<AdamW>", "optimizer", False, 12, 3000.0, 100.0, math.nan),
]
COLUMNS = ("kernel", "part", "norm", "calls", "us", "host_us", "warm_us")


def toy_profile():
    """The small profile as a DataFrame (:data:`COLUMNS`; ``warm_us``: the norm's kernels timed alone, back to back)."""
    import pandas as pd

    return pd.DataFrame(_TOY, columns=list(COLUMNS))


def expected(profile, step_ms: float) -> tuple[float, float]:
    """(share, bound): the norm rows' ``us`` over the step (µs → ms), and 1 / (1 − share)."""
    share = float(profile.loc[profile["norm"].astype(bool), "us"].sum()) / 1e3 / step_ms
    return share, (1.0 / (1.0 - share) if share < 1 else math.inf)


def _share_slips(t, step_ms):
    norm = t[t["norm"]]
    busy_ms = t["us"].sum() / 1e3
    of_step = lambda us: us / 1e3 / step_ms  # noqa: E731
    right = of_step(norm["us"].sum())
    host = "host time was counted as GPU time: host_us is the CPU's time issuing those kernels; the GPU's work is us"
    return [
        (f"that is a percentage: return the fraction ({right:.3g}, not {100 * right:.3g})", 100 * right),
        ("only the forward was counted: the norm's backward kernels (part == 'backward') are in the step too",
         of_step(norm.loc[norm["part"] == "forward", "us"].sum())),
        (f"it is divided by the GPU's busy time (every kernel, {busy_ms:.1f} ms), not by the step ({step_ms:.1f} ms): "
         "the step also holds the time the GPU waits for the host", norm["us"].sum() / 1e3 / busy_ms),
        (host, of_step(norm["host_us"].sum())),
        (host, of_step(norm["host_us"].sum() + norm["us"].sum())),
        ("warm timings were used: warm_us is the same kernels timed alone, back to back (L2 warm), not what the "
         "step saw", of_step(norm["warm_us"].sum())),
        ("it takes one call's time: us is already the total over the step's calls (calls of them)",
         of_step((norm["us"] / norm["calls"]).sum())),
        ("us was multiplied by calls, but us is already the total over the step's calls: a share can never "
         "pass 1, and this one does", of_step((norm["us"] * norm["calls"]).sum())),
        ("ms and µs were mixed: us is in microseconds, step_ms in milliseconds", norm["us"].sum() / step_ms),
        ("the optimizer's time was taken out of the step: step_ms is the whole iteration (forward, backward and "
         "optimizer.step()), and a faster norm shortens that", norm["us"].sum() / 1e3
         / (step_ms - t.loc[t["part"] == "optimizer", "us"].sum() / 1e3)),
    ]


#: Which rows a share can be taken over: (words, rows of the profile). The norm's are those with ``norm`` True.
_SELECTIONS = (
    ("every kernel of the step was counted, not only the norm's: keep the rows whose `norm` column is True",
     lambda t: t),
    ("the selection is inverted: that is the share of every kernel but the norm's (`~norm`); keep the rows whose "
     "`norm` column is True", lambda t: t[~t["norm"].astype(bool)]),
)

#: How the selected rows' times can be combined: (words, function of the ``us`` column). Only the mean: on the
#: small profile the largest norm row is also the backward alone (5000 µs), so a `.max()` model would name a
#: backward-only share wrongly; a slip is named only where its model is the one number that fits.
_COMBINES = (
    ("averaged (`.mean()`) where their times add up (`.sum()`): the step spends the time of every norm kernel",
     lambda us: us.mean()),
)

#: Factors a unit slip puts on the right share (µs → ms is / 1e3): (factor, words).
_UNITS = ((1e-3, "µs were divided by 1e6, not 1e3, before dividing by the step's ms: the share is 1000× too small"),
          (1e3, "the µs were not converted to ms (/ 1e3) before dividing by the step's ms: the share is 1000× too "
                "large"))


def _composed_slips(t, step_ms):
    """Slips of the selection, the sum and the units, alone and two at a time: (words, the share they give)."""
    of_step = lambda us: us / 1e3 / step_ms  # noqa: E731
    norm = t[t["norm"].astype(bool)]
    slips = [("no row was selected (share 0): the norm's kernels are the rows whose `norm` column is True "
              "(`profile.loc[profile[\"norm\"], \"us\"]`), whatever their names", 0.0)]
    for words, rows in _SELECTIONS:
        slips.append((words, of_step(rows(t)["us"].sum())))
    for words, combine in _COMBINES:
        slips.append((f"the norm's kernels were {words}", of_step(combine(norm["us"]))))
        for selection, rows in _SELECTIONS:
            slips.append((f"{selection}; and the times were {words}", of_step(combine(rows(t)["us"]))))
    for factor, words in _UNITS:
        slips.append((words, factor * of_step(norm["us"].sum())))
        for selection, rows in _SELECTIONS:
            slips.append((f"{selection}; and {words}", factor * of_step(rows(t)["us"].sum())))
    return slips


def _what_is_off(t, step_ms, share):
    """Words for a share no slip explains: the norm time it implies, against what the norm's rows add up to."""
    norm_us = float(t.loc[t["norm"].astype(bool), "us"].sum())
    implied = share * step_ms * 1e3
    ratio = share / (norm_us / 1e3 / step_ms) if norm_us else math.nan
    power = math.log10(abs(ratio)) if ratio and math.isfinite(ratio) and ratio > 0 else math.nan
    if math.isfinite(power) and abs(power - round(power)) < 1e-3 and round(power) != 0:
        return (f"the share is {ratio:.0e} times the right one: a unit slip (us is in µs, step_ms in ms: "
                f"share = Σ us / 1e3 / step_ms)")
    return (f"the share is off: it stands for {implied:,.6g} µs of norm time in the {step_ms:g} ms step, "
            f"where the rows with `norm` True add up to {norm_us:,.6g} µs (their `us` summed, divided by 1e3 "
            "and by step_ms)")


def _bound_slips(share):
    why = "with a share s taking no time the step lasts (1 − s) of what it did, so the speed-up is at most 1 / (1 − s)"
    return [
        (f"1 + share is not Amdahl's bound: {why}", 1 + share),
        (f"1 / share is not Amdahl's bound: {why}", 1 / share),
        (f"share / (1 − share) is the bound minus one: {why}", share / (1 - share)),
        (f"1 − share is the time left, not the speed-up: {why}", 1 - share),
    ]


def _same(a: float, b: float) -> bool:
    return abs(a - b) <= RTOL * abs(b) + 1e-12


def _pair(got):
    if isinstance(got, (tuple, list)) and len(got) == 2 and all(
            isinstance(v, numbers.Real) and not isinstance(v, bool) and math.isfinite(float(v)) for v in got):
        return float(got[0]), float(got[1])
    return None


def _cases(norm_share, step=None, kernels=None, source: str = "the step table") -> list[Case]:
    """The small profile, then each timed row of the step table with its kernels (``row``: what the table says)."""
    cases = [Case(f"the small profile (a {TOY_STEP_MS:.0f} ms step)",
                  {"profile": toy_profile(), "step_ms": TOY_STEP_MS})]
    if step is not None and kernels is not None:
        for row in step[step["check"] == "ok"].itertuples(index=False):
            profile = kernels[(kernels["size"] == row.size) & (kernels["variant"] == row.variant)
                              & (kernels["mode"] == row.mode)].drop(columns=["size", "variant", "mode"])
            cases.append(Case(f"{source}'s row {row.size} {row.variant} {row.mode}",
                              {"profile": profile.reset_index(drop=True), "step_ms": float(row.step_ms), "row": row,
                               "source": source}))
    return cases


def _run(norm_share, case: Case) -> dict:
    got = calling(name_of(norm_share), norm_share, case.inputs["profile"].copy(), case.inputs["step_ms"])
    if "row" not in case.inputs and _pair(got) is None:
        raise Refused(f"{name_of(norm_share)} must return a pair of finite numbers (share, bound); got {got!r}")
    return {"pair": got}


def _oracle(case: Case) -> dict:
    row = case.inputs.get("row")
    if row is None:
        return {"pair": expected(case.inputs["profile"], case.inputs["step_ms"])}
    return {"pair": (row.norm_share, row.amdahl_bound)}


def _verify(run: Run) -> str | None:
    """The slip a wrong pair shows on the small profile, or the row of the table it disagrees with."""
    got, (right_share, right_bound) = run.actual["pair"], run.expected["pair"]
    pair = _pair(got)
    if "row" in run.case.inputs:
        if pair is None or not (_same(pair[0], right_share) and _same(pair[1], right_bound)):
            return f"on {run.case.label}: you give {got!r}, the table says ({right_share:.6g}, {right_bound:.6g})."
        return None
    share, bound = pair
    shown = (f"on {run.case.label} you give ({fmt(share)}, {fmt(bound)}), "
             f"expected ({right_share:.3f}, {right_bound:.3f})")
    if not _same(share, right_share):
        profile = run.case.inputs["profile"]
        slips = _share_slips(profile, TOY_STEP_MS) + _composed_slips(profile, TOY_STEP_MS)
        what = next((w for w, v in slips if _same(share, v)), None)
        return f"{what or _what_is_off(profile, TOY_STEP_MS, share)}: {shown}."
    if not _same(bound, right_bound):
        what = next((w for w, v in _bound_slips(right_share) if _same(bound, v)), None)
        return f"{what}: {shown}." if what else f"the bound is off: {shown}."
    return None


def _success(runs) -> str:
    right_share, right_bound = runs[0].expected["pair"]
    rows = len(runs) - 1
    on_table = f" and on all {rows} timed rows of {runs[-1].case.inputs['source']}" if rows else ""
    return (f"right on the small profile (share {right_share:.3f}, bound {right_bound:.3f}: the norm's forward and "
            f"backward kernels over the whole step){on_table}.")


#: Exercise 13, declared: judged by :func:`rmsnorm_course.checkers.functions.check`; the step table and its
#: kernels travel with the answer (``given``), each timed row one case after the small profile.
SPEC = FunctionSpec(
    exercise=EXERCISE,
    reference=expected,
    cases=_cases,
    run=_run,
    oracle=_oracle,
    symptoms=(),
    success=_success,
    verify=_verify,
)


def check_norm_share(norm_share, step=None, kernels=None, source: str = "the step table") -> Feedback:
    """Check ``norm_share(profile, step_ms) -> (share, bound)``, in a child process with a time limit.

    Args:
        norm_share: the learner's function.
        step, kernels: the step table and its kernels (``load_model_step``, ``load_model_kernels``),
            or None to check the small profile only.
        source: what the feedback calls those tables (the H200 run, or the fixture).

    Returns:
        Feedback: "passed", "not done yet" or "wrong" naming the slip. Never raises, never hangs.

    Source: solutions/13_into_a_model.ipynb.
    """
    return check(SPEC, norm_share, step=step, kernels=kernels, source=source)

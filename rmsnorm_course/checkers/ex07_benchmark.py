"""Checkers of exercise 07: predict, then measure (GPU) or read the committed H200 results (CPU).

1. :func:`check_prediction`: the prediction is stated before any number is
   seen — for the forward alone and for forward + backward, does the Triton
   path take ``"more"`` or ``"less"`` time than the PyTorch reference at
   128 × 257 float32? Any well-formed prediction passes; it is compared with
   the measurement at the end.
2. :func:`check_benchmark_reading`: the learner's ``median_us(samples, path,
   provider)`` and ``percent_change(impl_us, reference_us)``. ``percent_change``
   is checked on the original article's medians (70.71 vs 52.17 µs: +35.54 %;
   251.44 vs 267.34 µs: −5.95 %); ``median_us`` on a small table where the
   median, the mean, the minimum, the first sample and the sum all differ,
   then on the real samples. Recognised: percentage of the kernel's time
   instead of the reference's, a fraction instead of a percent, the sign
   reversed, the ratio instead of the change; the mean, the minimum, the first
   sample or the sum instead of the median; rows of another provider or path mixed in.

Needs pandas (like :mod:`rmsnorm_lab`); imported only when called.

Source: solutions/07_benchmark.ipynb; the article's table ("Il forward e il
percorso di addestramento non raccontano la stessa cosa").
"""

from __future__ import annotations

import numbers

from .diagnose import fmt
from .feedback import Feedback, call_learner, name_of, never_raises, passed, wrong

EXERCISE_PREDICT = "07 · prediction"
EXERCISE_READ = "07 · reading the samples"
PATHS = ("forward", "forward_backward")
#: The original article's medians (RTX 3090, 128 × 257 float32), µs: (kernel, reference).
ARTICLE_MEDIANS = {"forward": (70.71, 52.17), "forward_backward": (251.44, 267.34)}
#: Exact arithmetic: |yours − expected| ≤ 1e-6 + 1e-9 · |expected|.
EXACT = {"atol": 1e-6, "rtol": 1e-9}


def _same(a: float, b: float) -> bool:
    return abs(a - b) <= EXACT["atol"] + EXACT["rtol"] * abs(b)


def _short(arg) -> str:
    return "samples" if hasattr(arg, "columns") else repr(arg)


def _call(exercise, fn, *args):
    """:func:`call_learner` with the call written out (a table of samples shown as `samples`)."""
    example = f"{getattr(fn, '__name__', 'f')}({', '.join(_short(a) for a in args)})"
    return call_learner(exercise, fn, *args, example=example)


@never_raises(EXERCISE_PREDICT)
def check_prediction(my_prediction) -> Feedback:
    """Check that a prediction is stated, well formed, before the measurement.

    Args:
        my_prediction: a function returning ``{"forward": "more" | "less",
            "forward_backward": "more" | "less"}``: the Triton path's time
            compared with the reference's.

    Returns:
        Feedback: "passed" (recorded), "not done yet", or "wrong" (malformed).

    Source: solutions/07_benchmark.ipynb.
    """
    from . import isolate

    return isolate.run_python_check(EXERCISE_PREDICT, judge_prediction, [my_prediction],
                                    f"your {name_of(my_prediction)}")


def judge_prediction(my_prediction) -> Feedback:
    """In the checker's child process: call the learner's prediction and check its form."""
    guess, problem = _call(EXERCISE_PREDICT, my_prediction)
    if problem is not None:
        return problem
    if (
        not isinstance(guess, dict)
        or set(guess) != set(PATHS)
        or not all(v in ("more", "less") for v in guess.values())
    ):
        return wrong(EXERCISE_PREDICT, 'return {"forward": "more" or "less", "forward_backward": "more" or "less"}; '
                     f"got {guess!r}")
    return passed(EXERCISE_PREDICT, f"recorded: the Triton path takes {guess['forward']} time than the reference "
                  f"for the forward alone, and {guess['forward_backward']} for forward + backward. Now measure.")


_PERCENT_SLIPS = [
    ("the difference is divided by the kernel's time, not the reference's", lambda k, r: 100 * (k - r) / k),
    ("that is a fraction, not a percentage", lambda k, r: (k - r) / r),
    ("the sign is reversed (reference − kernel)", lambda k, r: 100 * (r - k) / r),
    ("that is the ratio kernel / reference, not the change", lambda k, r: 100 * k / r),
    ("the sign is lost (an absolute value): a kernel that takes less time gives a negative change",
     lambda k, r: abs(100 * (k - r) / r)),
]

_MEDIAN_SLIPS = [
    ("the mean", lambda s: s.mean()), ("the minimum", lambda s: s.min()),
    ("the first sample", lambda s: s.iloc[0]), ("the sum", lambda s: s.sum()),
]


def _toy_samples():
    import pandas as pd

    rows = [("forward", "article", us) for us in (3.0, 1.0, 2.0, 100.0)]  # median 2.5, mean 26.5
    rows += [("forward", "reference", us) for us in (10.0, 20.0, 30.0)]
    rows += [("forward_backward", "article", us) for us in (7.0, 9.0, 8.0)]
    return pd.DataFrame(rows, columns=["path", "provider", "us_per_call"])


def _check_percent(percent_change) -> Feedback | None:
    given = {}
    for path, (kernel, reference) in ARTICLE_MEDIANS.items():
        got, problem = _call(EXERCISE_READ, percent_change, kernel, reference)
        if problem is not None:
            return problem
        if not isinstance(got, numbers.Real) or isinstance(got, bool):
            return wrong(EXERCISE_READ, f"{name_of(percent_change)} must return a number; got {got!r}")
        given[path] = float(got)
    for path, (kernel, reference) in ARTICLE_MEDIANS.items():
        expected = 100 * (kernel - reference) / reference
        if not _same(given[path], expected):
            # a slip is named only when it explains both of the article's medians (abs() agrees with +35.54 %)
            what = next((w for w, slip in _PERCENT_SLIPS
                         if all(_same(given[p], slip(*ARTICLE_MEDIANS[p])) for p in ARTICLE_MEDIANS)), None)
            shown = (f"for the article's {path} medians, {kernel} µs (kernel) and {reference} µs (reference), "
                     f"you give {fmt(given[path])}, expected {fmt(expected)}")
            fix = "percent = 100 · (kernel − reference) / reference, as in the article."
            return wrong(EXERCISE_READ, f"{what}: {shown}. {fix}" if what else f"{shown}. {fix}")
    return None


def _check_median(median_us, samples) -> Feedback | None:
    toy = _toy_samples()
    group = toy[(toy["path"] == "forward") & (toy["provider"] == "article")]["us_per_call"]
    got, problem = _call(EXERCISE_READ, median_us, toy, "forward", "article")
    if problem is not None:
        return problem
    if not isinstance(got, numbers.Real):
        return wrong(EXERCISE_READ, f"{name_of(median_us)} must return a number; got {got!r}")
    if not _same(float(got), float(group.median())):
        slips = [(w, slip(group)) for w, slip in _MEDIAN_SLIPS]
        slips += [("the median of every provider's samples of that path",
                   toy[toy["path"] == "forward"]["us_per_call"].median()),
                  ("the median of every path's samples of that provider",
                   toy[toy["provider"] == "article"]["us_per_call"].median())]
        what = next((w for w, value in slips if _same(float(got), float(value))), None)
        shown = ("on the samples 3, 1, 2, 100 µs (forward, article; other rows belong to other providers and paths) "
                 f"you give {fmt(float(got))}, expected the median {fmt(float(group.median()))}")
        if what:
            return wrong(EXERCISE_READ, f"{name_of(median_us)} returns {what}: {shown}. Keep the rows of that path "
                         "and provider, then take the median of their us_per_call (one slow sample barely moves it).")
        return wrong(EXERCISE_READ, f"{shown}.")
    for path in PATHS:
        for provider in ("article", "reference"):
            rows = samples[(samples["path"] == path) & (samples["provider"] == provider)]["us_per_call"]
            got, problem = _call(EXERCISE_READ, median_us, samples, path, provider)
            if problem is not None:
                return problem
            if not isinstance(got, numbers.Real):
                return wrong(EXERCISE_READ, f"{name_of(median_us)} must return a number; got {type(got).__name__}")
            if not _same(float(got), float(rows.median())):
                return wrong(EXERCISE_READ, f"on the real samples, {path}/{provider}: you give {fmt(float(got))}, "
                             f"the median of its {len(rows)} samples is {fmt(float(rows.median()))}.")
    return None


@never_raises(EXERCISE_READ)
def check_benchmark_reading(median_us, percent_change, samples, prediction=None, where: str = "") -> Feedback:
    """Check the learner's median and percent functions, then confront the prediction with the samples.

    Args:
        median_us: ``(samples, path, provider) -> float``, µs per call.
        percent_change: ``(impl_us, reference_us) -> float``, in percent.
        samples: long DataFrame with columns path, provider, us_per_call (µs), as
            :func:`rmsnorm_lab.run_protocol` returns or
            ``load_results().samples`` holds.
        prediction: the learner's prediction function (exercise 07.1), or None.
        where: where the samples come from, for the message.

    Returns:
        Feedback: "passed" (with the measured changes and whether the
        prediction held), "not done yet" or "wrong". Never raises, never
        hangs (it runs in a separate process with a time limit).

    Source: solutions/07_benchmark.ipynb.
    """
    from . import isolate

    return isolate.run_python_check(EXERCISE_READ, judge_reading,
                                    [median_us, percent_change, samples, prediction, where], "your functions")


def judge_reading(median_us, percent_change, samples, prediction=None, where: str = "") -> Feedback:
    """In the checker's child process: check the learner's median and percent, then the prediction."""
    original = samples.copy(deep=True)
    problem = _check_percent(percent_change) or _check_median(median_us, samples)
    if problem is not None:
        return problem
    if not samples.equals(original):
        return wrong(EXERCISE_READ, f"{name_of(median_us)} changed the samples table it was given (an `inplace=True`, "
                     "or a column assigned): select rows with boolean masks and leave the table as it is.")
    parts, held = [], []
    guess = prediction() if prediction is not None and judge_prediction(prediction).passed else None
    for path in PATHS:
        kernel, reference = median_us(samples, path, "article"), median_us(samples, path, "reference")
        change = percent_change(kernel, reference)
        parts.append(f"{path.replace('_', ' + ')}: {kernel:.2f} µs vs {reference:.2f} µs ({change:+.1f} %)")
        if guess is not None:
            outcome = "more" if kernel > reference else "less"
            held.append(f"{path.replace('_', ' + ')} {'held' if guess[path] == outcome else 'did not hold'}")
    verdict = f" Your prediction: {', '.join(held)}." if held else ""
    source = f" ({where})" if where else ""
    return passed(EXERCISE_READ, f"medians and percentages are right. article vs reference{source}: "
                  f"{'; '.join(parts)}.{verdict}")

"""The classic slips of exercise 07's reading, each the number it gives on the article's medians or a small table.

:data:`PERCENT_SLIPS` and :func:`percent_verdict` (``percent_change`` on :data:`ARTICLE_MEDIANS`),
:data:`MEDIAN_SLIPS`, :func:`toy_samples` and :func:`toy_median_verdict` (``median_us`` on a small table where
the median, the mean, the minimum, the first sample and the sum all differ) serve
:mod:`rmsnorm_course.checkers.ex07_benchmark`.

Source: solutions/07_benchmark.ipynb; the article's table.
"""

from __future__ import annotations

from .diagnose import fmt

#: The original article's medians (RTX 3090, 128 × 257 float32), µs: (kernel, reference).
ARTICLE_MEDIANS = {"forward": (70.71, 52.17), "forward_backward": (251.44, 267.34)}
#: Exact arithmetic: |yours − expected| ≤ 1e-6 + 1e-9 · |expected|.
EXACT = {"atol": 1e-6, "rtol": 1e-9}


def same(a: float, b: float) -> bool:
    """Equal to :data:`EXACT`."""
    return abs(a - b) <= EXACT["atol"] + EXACT["rtol"] * abs(b)


PERCENT_SLIPS = [
    ("the difference is divided by the kernel's time, not the reference's", lambda k, r: 100 * (k - r) / k),
    ("that is a fraction, not a percentage", lambda k, r: (k - r) / r),
    ("the sign is reversed (reference − kernel)", lambda k, r: 100 * (r - k) / r),
    ("that is the ratio kernel / reference, not the change", lambda k, r: 100 * k / r),
    ("the sign is lost (an absolute value): a kernel that takes less time gives a negative change",
     lambda k, r: abs(100 * (k - r) / r)),
]

MEDIAN_SLIPS = [
    ("the mean", lambda s: s.mean()), ("the minimum", lambda s: s.min()),
    ("the first sample", lambda s: s.iloc[0]), ("the sum", lambda s: s.sum()),
]


def toy_samples():
    """Samples where the median of forward/article (2.5 µs) differs from the mean, minimum, first sample and sum."""
    import pandas as pd

    rows = [("forward", "article", us) for us in (3.0, 1.0, 2.0, 100.0)]  # median 2.5, mean 26.5
    rows += [("forward", "reference", us) for us in (10.0, 20.0, 30.0)]
    rows += [("forward_backward", "article", us) for us in (7.0, 9.0, 8.0)]
    return pd.DataFrame(rows, columns=["path", "provider", "us_per_call"])


def percent_verdict(given: dict, expected: dict) -> str | None:
    """None when the learner's percent changes on :data:`ARTICLE_MEDIANS` are right, else the slip or the numbers."""
    for path, (kernel, reference) in ARTICLE_MEDIANS.items():
        if not same(given[path], expected[path]):
            # a slip is named only when it explains both of the article's medians (abs() agrees with +35.54 %)
            what = next((w for w, slip in PERCENT_SLIPS
                         if all(same(given[p], slip(*ARTICLE_MEDIANS[p])) for p in ARTICLE_MEDIANS)), None)
            shown = (f"for the article's {path} medians, {kernel} µs (kernel) and {reference} µs (reference), "
                     f"you give {fmt(given[path])}, expected {fmt(expected[path])}")
            fix = "percent = 100 · (kernel − reference) / reference, as in the article."
            return f"{what}: {shown}. {fix}" if what else f"{shown}. {fix}"
    return None


def toy_median_verdict(got: float, expected: float, toy, name: str) -> str:
    """What the wrong median of the learner's ``name`` on the small table (:func:`toy_samples`) is."""
    group = toy[(toy["path"] == "forward") & (toy["provider"] == "article")]["us_per_call"]
    slips = [(w, slip(group)) for w, slip in MEDIAN_SLIPS]
    slips += [("the median of every provider's samples of that path", toy[toy["path"] == "forward"]["us_per_call"]
               .median()),
              ("the median of every path's samples of that provider", toy[toy["provider"] == "article"]["us_per_call"]
               .median())]
    what = next((w for w, value in slips if same(got, float(value))), None)
    shown = ("on the samples 3, 1, 2, 100 µs (forward, article; other rows belong to other providers and paths) "
             f"you give {fmt(got)}, expected the median {fmt(expected)}")
    if what:
        return (f"{name} returns {what}: {shown}. Keep the rows of that path and provider, then take the "
                "median of their us_per_call (one slow sample barely moves it).")
    return f"{shown}."

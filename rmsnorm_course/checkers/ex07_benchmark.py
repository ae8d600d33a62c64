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

Each is a :class:`~rmsnorm_course.checkers.spec.FunctionSpec` (:data:`PREDICTION_SPEC`,
:data:`READING_SPEC`), judged by :func:`rmsnorm_course.checkers.functions.check`.
Needs pandas (like :mod:`rmsnorm_lab`); imported only when called.

Source: solutions/07_benchmark.ipynb; the article's table ("Il forward e il
percorso di addestramento non raccontano la stessa cosa").
"""

from __future__ import annotations

import numbers

from .diagnose import Case, Run, fmt
from .ex07_symptoms import ARTICLE_MEDIANS, percent_verdict, same, toy_median_verdict, toy_samples
from .feedback import Feedback, name_of
from .functions import calling, check
from .spec import FunctionSpec, Raised, Refused

EXERCISE_PREDICT = "07 · prediction"
EXERCISE_READ = "07 · reading the samples"
PATHS = ("forward", "forward_backward")


def _number(value, exact_type: bool = False) -> bool:
    return isinstance(value, numbers.Real) and not (exact_type and isinstance(value, bool))


def _calling(fn, *args):
    """:func:`calling` with the call written out for the traceback (a table of samples shown as `samples`)."""
    shown = ", ".join("samples" if hasattr(a, "columns") else repr(a) for a in args)
    return calling(name_of(fn), fn, *args, example=f"{getattr(fn, '__name__', 'f')}({shown})")


# --------------------------------------------------------------------------- 07.1 the prediction


def _predict(my_prediction, case: Case | None = None) -> dict:
    """The learner's prediction, refused unless it is {"forward": "more" | "less", "forward_backward": …}."""
    guess = _calling(my_prediction)
    if (not isinstance(guess, dict) or set(guess) != set(PATHS)
            or not all(v in ("more", "less") for v in guess.values())):
        raise Refused('return {"forward": "more" or "less", "forward_backward": "more" or "less"}; '
                      f"got {guess!r}")
    return {"guess": guess}


def _recorded(runs) -> str:
    guess = runs[0].actual["guess"]
    return (f"recorded: the Triton path takes {guess['forward']} time than the reference for the forward alone, and "
            f"{guess['forward_backward']} for forward + backward. Now measure.")


#: Exercise 07.1, declared: any well-formed prediction passes (it is confronted with the samples in 07.2).
PREDICTION_SPEC = FunctionSpec(
    exercise=EXERCISE_PREDICT,
    reference=None,
    cases=lambda my_prediction: [Case("your prediction", {})],
    run=_predict,
    oracle=lambda case: {},
    symptoms=(),
    success=_recorded,
)


def check_prediction(my_prediction) -> Feedback:
    """Check that a prediction is stated, well formed, before the measurement.

    Args:
        my_prediction: a function returning ``{"forward": "more" | "less",
            "forward_backward": "more" | "less"}``: the Triton path's time
            compared with the reference's.

    Returns:
        Feedback: "passed" (recorded), "not done yet", or "wrong" (malformed). Never raises, never hangs.

    Source: solutions/07_benchmark.ipynb.
    """
    return check(PREDICTION_SPEC, my_prediction)


# --------------------------------------------------------------------------- 07.2 reading the samples


def _reading_cases(answer, samples, prediction=None, where: str = "") -> list[Case]:
    """The article's medians (percent_change), the small table, then each path and provider of the samples."""
    import pandas as pd

    if not isinstance(samples, pd.DataFrame) or not {"path", "provider", "us_per_call"} <= set(samples.columns):
        raise Refused(f"samples must be a table (a DataFrame with the columns path, provider and us_per_call, as "
                      f"run_protocol returns or load_results().samples holds); got {type(samples).__name__}.")
    try:
        guess = _predict(prediction)["guess"] if prediction is not None else None
    except (Refused, Raised):
        guess = None  # a prediction that is not done yet or malformed is not confronted (07.1 says why)
    toy, original = toy_samples(), samples.copy(deep=True)
    real = {"samples": samples, "original": original, "name": name_of(answer[0]), "guess": guess, "where": where}
    return [Case("the article's medians", {"medians": ARTICLE_MEDIANS}),
            Case("the small table", {"samples": toy, "original": toy.copy(), "path": "forward", "provider": "article",
                                     "name": name_of(answer[0])})
            ] + [Case(f"the real samples, {path}/{provider}", {**real, "path": path, "provider": provider})
                 for path in PATHS for provider in ("article", "reference")]


def _rows(table, path: str, provider: str):
    return table[(table["path"] == path) & (table["provider"] == provider)]["us_per_call"]


def _reading_run(answer, case: Case) -> dict:
    median_us, percent_change = answer
    if "medians" in case.inputs:
        given = {}
        for path, (kernel, reference) in ARTICLE_MEDIANS.items():
            got = _calling(percent_change, kernel, reference)
            if not _number(got, exact_type=True):
                raise Refused(f"{name_of(percent_change)} must return a number; got {got!r}")
            given[path] = float(got)
        return given
    inputs = case.inputs
    table = inputs["samples"] if "guess" in inputs else inputs["samples"].copy()  # the real table: changes show
    got = _calling(median_us, table, inputs["path"], inputs["provider"])
    if not _number(got):
        raise Refused(f"{name_of(median_us)} must return a number; got "
                      f"{type(got).__name__ if 'guess' in inputs else repr(got)}")
    return {"median": float(got)}


def _reading_oracle(case: Case) -> dict:
    if "medians" in case.inputs:
        return {path: 100 * (kernel - reference) / reference for path, (kernel, reference) in ARTICLE_MEDIANS.items()}
    return {"median": float(_rows(case.inputs["original"], case.inputs["path"], case.inputs["provider"]).median())}


def _reading_verify(run: Run) -> str | None:
    """The slip a wrong percent or median shows (on the article's medians, the small table), or the real row."""
    if "medians" in run.case.inputs:
        return percent_verdict(run.actual, run.expected)
    got, expected = run.actual["median"], run.expected["median"]
    if same(got, expected):
        return None
    inputs = run.case.inputs
    if "guess" in inputs:
        count = len(_rows(inputs["original"], inputs["path"], inputs["provider"]))
        return f"on {run.case.label}: you give {fmt(got)}, the median of its {count} samples is {fmt(expected)}."
    return toy_median_verdict(got, expected, inputs["original"], inputs["name"])


def _unchanged(runs) -> str | None:
    inputs = runs[-1].case.inputs
    if not inputs["samples"].equals(inputs["original"]):
        return (f"{inputs['name']} changed the samples table it was given (an `inplace=True`, or a column assigned): "
                "select rows with boolean masks and leave the table as it is.")
    return None


def _confronted(runs) -> str:
    """The measured changes, article vs reference, and whether the prediction held."""
    medians = {(r.case.inputs["path"], r.case.inputs["provider"]): r.actual["median"] for r in runs[2:]}
    inputs = runs[-1].case.inputs
    parts, held = [], []
    for path in PATHS:
        kernel, reference = medians[path, "article"], medians[path, "reference"]
        parts.append(f"{path.replace('_', ' + ')}: {kernel:.2f} µs vs {reference:.2f} µs "
                     f"({100 * (kernel - reference) / reference:+.1f} %)")
        if inputs["guess"] is not None:
            outcome = "more" if kernel > reference else "less"
            held.append(f"{path.replace('_', ' + ')} {'held' if inputs['guess'][path] == outcome else 'did not hold'}")
    verdict = f" Your prediction: {', '.join(held)}." if held else ""
    source = f" ({inputs['where']})" if inputs["where"] else ""
    return f"medians and percentages are right. article vs reference{source}: {'; '.join(parts)}.{verdict}"


#: Exercise 07.2, declared: the answer is the pair (median_us, percent_change); the samples, the prediction
#: and where the samples come from travel with it (``given``).
READING_SPEC = FunctionSpec(
    exercise=EXERCISE_READ,
    reference=None,
    cases=_reading_cases,
    run=_reading_run,
    oracle=_reading_oracle,
    symptoms=(),
    success=_confronted,
    verify=_reading_verify,
    first_looks=(_unchanged,),
)


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
    return check(READING_SPEC, (median_us, percent_change), samples=samples, prediction=prediction, where=where)

"""Checker of exercise 01: r and y computed by hand for a row the learner chose.

The learner's function returns ``(x_row, gamma_row, r, y)``: the row, its
weights, and the numbers worked out on paper (3 decimals are enough: the
tolerance is atol = 5e-4, rtol = 1e-3). The checker recomputes them with the
package's reference in float64 (eps = 1e-6).

Mistakes recognised: r given as the RMS instead of its inverse (with y
multiplied or divided by it); the sum of squares instead of their mean; the
square root forgotten; mean(|x|) instead of the root of mean(x²); gamma
forgotten in y; the row's mean subtracted (LayerNorm).

Source: solutions/01_formula.ipynb.
"""

from __future__ import annotations

import numbers

import torch

from rmsnorm.reference import rmsnorm_reference
from .diagnose import Case, Symptom
from .feedback import Feedback, name_of
from .functions import calling, check
from .spec import FunctionSpec, Refused

EXERCISE = "01 · by hand"
EPS = 1e-6
#: "By hand, to 3 decimals": |yours − exact| ≤ 5e-4 + 1e-3 · |exact|.
HAND_TOLERANCE = {"atol": 5e-4, "rtol": 1e-3}


def _outputs(case: Case, r: torch.Tensor, *, gamma=True, divide=False) -> dict[str, torch.Tensor]:
    x, g = case.f64("x"), case.f64("gamma")
    y = (x / r if divide else x * r) * (g if gamma else 1.0)
    return {"r": r.reshape(1), "y": y.reshape(-1)}


def _ms(case: Case) -> torch.Tensor:
    return case.f64("x").square().mean()


SYMPTOMS = [
    Symptom("your r is the RMS sqrt(mean(x²) + eps), not its inverse",
            lambda c: _outputs(c, torch.sqrt(_ms(c) + EPS)), "r = 1 / sqrt(mean(x²) + eps), then y = x · r · gamma."),
    Symptom("your r is the RMS, not its inverse (your y is right: you divided x by the RMS)",
            lambda c: _outputs(c, torch.sqrt(_ms(c) + EPS), divide=True),
            "r is the number that multiplies x: 1 / sqrt(mean(x²) + eps)."),
    Symptom("r uses the sum of the squares, not their mean",
            lambda c: _outputs(c, torch.rsqrt(c.f64("x").square().sum() + EPS)),
            "Divide the sum of squares by N, the row's length."),
    Symptom("the square root is missing: r = 1 / (mean(x²) + eps)",
            lambda c: _outputs(c, 1 / (_ms(c) + EPS)), "r = 1 / sqrt(mean(x²) + eps)."),
    Symptom("r uses the mean of |x|, not the root of the mean of the squares",
            lambda c: _outputs(c, 1 / c.f64("x").abs().mean()), "Square first, then average, then take the root: RMS."),
    Symptom("gamma is missing from y", lambda c: _outputs(c, torch.rsqrt(_ms(c) + EPS), gamma=False),
            "Each column is multiplied by its own gamma: y = x · r · gamma."),
    Symptom("the row's mean is subtracted (that is LayerNorm)",
            lambda c: {"y": rmsnorm_reference(c.f64("x") - c.f64("x").mean(), c.f64("gamma"), EPS).reshape(-1)},
            "RMSNorm does not centre the row: y = x · r · gamma."),
]


def _numbers(value, name: str, length: int | None = None) -> list[float] | str:
    values = value if isinstance(value, (list, tuple)) else [value]
    if not all(isinstance(v, numbers.Real) and not isinstance(v, bool) for v in values):
        return f"{name} must be {'a list of numbers' if length else 'a number'}; got {value!r}"
    if length is not None and len(values) != length:
        return f"{name} must have {length} numbers, one per column of x_row; got {len(values)}"
    return [float(v) for v in values]


def _row_case(my_row) -> list[Case]:
    """The one case: the learner's own row and weights, with the r and y worked out for them by hand."""
    name = name_of(my_row)
    answer = calling(name, my_row)
    if not isinstance(answer, (tuple, list)) or len(answer) != 4:
        raise Refused(f"{name} must return four things, (x_row, gamma_row, r, y); got {answer!r}")
    if not isinstance(answer[0], (list, tuple)):
        raise Refused(f"x_row must be a list of numbers; got {answer[0]!r}")
    x_row = _numbers(answer[0], "x_row", len(answer[0]))
    if isinstance(x_row, str):
        raise Refused(x_row)
    checks = [
        _numbers(answer[1], "gamma_row", len(x_row)),
        _numbers(answer[2], "r"),
        _numbers(answer[3], "y", len(x_row)),
    ]
    problem = next((c for c in checks if isinstance(c, str)), None)
    if problem is None and not 2 <= len(x_row) <= 8:
        problem = f"choose a row of 2 to 8 numbers (one you can do by hand); x_row has {len(x_row)}"
    elif problem is None and not any(x_row):
        problem = "choose a row that is not all zeros: r would be 1000 and y all zeros, too easy"
    elif problem is None and x_row == [3.0, 4.0]:
        problem = "[3, 4] is the lesson's worked example: choose a row of your own"
    elif problem is None and all(g == 1 for g in checks[0]):
        problem = "choose a gamma_row that is not all ones, so that gamma matters"
    if problem is not None:
        raise Refused(problem + ".")
    gamma_row, (r,), y = checks
    numbers64 = {"x": [x_row], "gamma": gamma_row, "r": [r], "y": y}
    return [Case(f"your row x = {x_row} with gamma = {gamma_row}",
                 {k: torch.tensor(v, dtype=torch.float64) for k, v in numbers64.items()}, EPS, HAND_TOLERANCE)]


def _success(runs) -> str:
    run = runs[0]
    r, y = run.actual["r"].item(), run.actual["y"].tolist()
    return f"r = {r} and y = {y} agree with the reference to 3 decimals (r = {run.expected['r'].item():.6f})."


#: Exercise 01, declared: judged by :func:`rmsnorm_course.checkers.functions.check`. Its one case holds the
#: learner's row and weights as inputs, and the r and y the learner worked out for them.
SPEC = FunctionSpec(
    exercise=EXERCISE,
    reference=rmsnorm_reference,
    cases=_row_case,
    run=lambda my_row, case: {"r": case.inputs["r"], "y": case.inputs["y"]},
    oracle=lambda case: _outputs(case, torch.rsqrt(_ms(case) + EPS)),
    symptoms=tuple(SYMPTOMS),
    success=_success,
    example="my_row()",
)


def check_by_hand(my_row) -> Feedback:
    """Check the numbers a learner computed by hand for a row of their choice.

    Args:
        my_row: a function returning ``(x_row, gamma_row, r, y)``: x_row a list
            of 2 to 8 numbers (not all zero, not the article's [3, 4]),
            gamma_row as many weights (not all 1, so that gamma matters), r a
            number, y a list of numbers, all worked out by hand with eps = 1e-6.

    Returns:
        Feedback: "passed", "not done yet" or "wrong". Never raises, never
        hangs (it runs in a separate process with a time limit).

    Source: solutions/01_formula.ipynb.
    """
    return check(SPEC, my_row)

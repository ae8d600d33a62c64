"""Checkers of exercise 08: the N-vs-BLOCK hypothesis, then the fixed dx kernel.

1. The hypothesis, as a function ``predict(N) -> (y_correct, y_buggy)``: the
   output of one coordinate of a row of N ones (gamma = 1, eps = 1e-6) when
   the mean divides by N, and when it divides by BLOCK_SIZE =
   next_power_of_2(N). The checker runs the package's kernel and the buggy one
   from :mod:`rmsnorm_course.teaching.buggy` on rows of 3, 256, 257 and 1000 ones and compares.
   Recognised: the denominator sqrt(mean + eps) given instead of the output;
   the mean itself; the square root forgotten; the ratio upside down
   (BLOCK_SIZE / N); BLOCK_SIZE taken as 2N, or as 512 for every N; the two
   numbers swapped; eps left out or outside the square root (float32's tolerance hides both); integer
   division N // BLOCK_SIZE; any other BLOCK_SIZE, read back from the prediction.
   A :class:`~rmsnorm_course.checkers.spec.FunctionSpec` (:data:`HYPOTHESIS_SPEC`), judged by
   :func:`rmsnorm_course.checkers.functions.check`.
2. The fix: a dx kernel that divides mean(u · x) by N, checked like exercise
   04 (:func:`rmsnorm_course.checkers.check_dx_kernel`).

Source: solutions/08_n_vs_block_exercise.ipynb.
"""

from __future__ import annotations

import math
import numbers
from dataclasses import replace

import torch
import triton

from rmsnorm.article.forward import forward_op
from rmsnorm.device import default_device
from rmsnorm.testing import TOLERANCES
from rmsnorm_course.teaching.buggy import rmsnorm_forward_kernel_block_mean
from .diagnose import Case, close, fmt, fmt_pair
from .ex04_dx import SPEC as SPEC_DX
from .feedback import Feedback, name_of
from .functions import calling, check
from .spec import FunctionSpec, Refused

EXERCISE = "08 · hypothesis"
EXERCISE_FIX = "08 · fixed dx kernel"
#: The fix, declared: exercise 04's spec under 08's name (a dx kernel whose mean(u · x) divides by N).
SPEC_FIX = replace(SPEC_DX, exercise=EXERCISE_FIX)
#: Row lengths of the hypothesis check: BLOCK_SIZE = 4, 256, 512, 1024.
NS = (3, 256, 257, 1000)
EPS = 1e-6


def observed(N: int) -> tuple[float, float]:
    """(correct, buggy) output of a row of N ones, from the package kernel and the ÷BLOCK_SIZE kernel."""
    ones, gamma = torch.ones(1, N, device=default_device()), torch.ones(N, device=default_device())
    right = forward_op(ones, gamma, EPS)[0][0, 0].item()
    buggy = forward_op(ones, gamma, EPS, kernel=rmsnorm_forward_kernel_block_mean)[0][0, 0].item()
    return right, buggy


def _block(N: int) -> int:
    return triton.next_power_of_2(N)


#: Wrong hypotheses about y_buggy, as functions of N: (what it is, the fix).
WRONG_HYPOTHESES = [
    ("the denominator sqrt(N / BLOCK_SIZE + eps), not the output",
     lambda N: math.sqrt(N / _block(N) + EPS),
     "The output is x / denominator: the smaller (wrong) mean shrinks the denominator and amplifies y."),
    ("the mean used, N / BLOCK_SIZE, not the output",
     lambda N: N / _block(N), "The output is 1 / sqrt(mean + eps) for a row of ones."),
    ("BLOCK_SIZE / N: the square root is missing",
     lambda N: _block(N) / N, "y = 1 / sqrt(N / BLOCK_SIZE + eps)."),
    ("the same as y_correct: no bug at all",
     lambda N: 1 / math.sqrt(1 + EPS),
     "The bug shows whenever BLOCK_SIZE > N: the sum is divided by BLOCK_SIZE, so the mean is N / BLOCK_SIZE, not 1."),
    ("computed with BLOCK_SIZE rounded down to a power of two (256 for N = 257)",
     lambda N: 1 / math.sqrt(N / (1 << (N.bit_length() - 1)) + EPS),
     "BLOCK_SIZE = triton.next_power_of_2(N) rounds up: 512 for N = 257, so that the block covers the whole row."),
    ("1/sqrt(BLOCK_SIZE / N + eps): the ratio is upside down",
     lambda N: 1 / math.sqrt(_block(N) / N + EPS),
     "The sum of N ones is N, and the buggy kernel divides it by BLOCK_SIZE: the mean is N / BLOCK_SIZE (at most 1), "
     "not BLOCK_SIZE / N, and y = 1 / sqrt(N / BLOCK_SIZE + eps)."),
    ("computed with BLOCK_SIZE = 2N (the mean is 1/2 for every N)",
     lambda N: 1 / math.sqrt(N / (2 * N) + EPS),
     "BLOCK_SIZE = triton.next_power_of_2(N), the smallest power of two ≥ N, not 2N: 4 for N = 3, 256 for N = 256 "
     "(where the bug hides), 512 for N = 257; then y = 1 / sqrt(N / BLOCK_SIZE + eps)."),
    ("computed with a BLOCK_SIZE strictly greater than N (512 for N = 256, as `triton.next_power_of_2(N + 1)` "
     "gives)",
     lambda N: 1 / math.sqrt(N / _block(N + 1) + EPS),
     "BLOCK_SIZE = triton.next_power_of_2(N), the smallest power of two ≥ N: N itself when N is a power of two, "
     "so at N = 256 the block is exactly the row, the mean is 1 and the bug hides (y_buggy = y_correct)."),
    ("computed with integer division, N // BLOCK_SIZE: 0 whenever N < BLOCK_SIZE, so y = 1/sqrt(0 + eps) = 1000",
     lambda N: 1 / math.sqrt(N // _block(N) + EPS),
     "The mean is N / BLOCK_SIZE, a fraction (3 / 4 = 0.75 for N = 3): divide with `/`, not `//`."),
    ("computed with BLOCK_SIZE = 512 for every N",
     lambda N: 1 / math.sqrt(N / 512 + EPS),
     "BLOCK_SIZE = triton.next_power_of_2(N): 4 for N = 3, 256 for N = 256 (where the bug hides), 1024 for N = 1000."),
]


def _cases(predict) -> list[Case]:
    """One case per row length of :data:`NS`: a row of N ones (gamma = 1, eps = 1e-6)."""
    return [Case(f"a row of {N} ones", {"N": N}) for N in NS]


def _run(predict, case: Case) -> dict:
    """The learner's (y_correct, y_buggy) for the case's N; refused unless it is two real numbers."""
    N = case.inputs["N"]
    guess = calling(name_of(predict), predict, N, example=f"predict({N})")
    if not (isinstance(guess, (tuple, list)) and len(guess) == 2
            and all(isinstance(v, numbers.Real) and not isinstance(v, bool) for v in guess)):
        raise Refused(f"{name_of(predict)}({N}) must return two numbers (y_correct, y_buggy); got {guess!r}")
    return {"guess": tuple(float(v) for v in guess)}


def _guesses(runs) -> torch.Tensor:
    return torch.tensor([r.actual["guess"] for r in runs], dtype=torch.float64)


def _seen(runs) -> torch.Tensor:
    return torch.tensor([r.expected["seen"] for r in runs], dtype=torch.float64)


def _close(runs, column: int | None = None, flip: bool = False) -> bool:
    guess, seen = _guesses(runs), _seen(runs)
    guess = guess.flip(1) if flip else guess
    if column is not None:
        guess, seen = guess[:, column], seen[:, column]
    return close(guess, seen, TOLERANCES[torch.float32])


def _first_off(runs, column: int) -> int:
    """The index of the first N whose ``column`` the learner got wrong."""
    guess, seen = _guesses(runs), _seen(runs)
    return next(i for i in range(len(runs)) if not close(guess[i, column], seen[i, column], TOLERANCES[torch.float32]))


#: How far a float64 prediction may lie from the exact formula: a few float32 roundings (2^-24 ≈ 6e-8 each), for a
#: learner who computes in float32. eps moves each number by about 5e-7 of itself, and so does any slip in where
#: it goes (outside the square root: 1/(sqrt(m) + eps)), so such a slip is refused although float32's tolerance
#: against the kernels lets it pass.
FORMULA_RTOL = 2.5e-7


def _off_the_formula(runs) -> str | None:
    """A prediction the kernels accept but that is not 1/sqrt(mean + eps): eps misplaced, or another formula."""
    if not _close(runs):
        return None
    for column, what in enumerate(("y_correct", "y_buggy")):
        for N, run in zip(NS, runs):
            mine, want = run.actual["guess"][column], _formula(N, EPS)[column]
            if abs(mine - want) <= FORMULA_RTOL * abs(want):
                continue
            mean = 1.0 if column == 0 else N / _block(N)
            if abs(mine - 1 / (math.sqrt(mean) + EPS)) <= FORMULA_RTOL * abs(want):
                how = (f"eps is added outside the square root, 1/(sqrt(mean) + eps) = {1 / (math.sqrt(mean) + EPS):.9f}"
                       ": eps belongs to the mean, inside the root")
            else:
                how = f"it is {abs(mine - want) / want:.1e} of itself off, more than float32's rounding"
            return (f"your {what} for N = {N} is {mine:.9f}, the formula 1/sqrt(mean + eps) with mean = {mean:.6g} "
                    f"and eps = {EPS:g} gives {want:.9f}: {how}. The kernels compute in float32, whose tolerance "
                    "lets the difference pass; the formula does not: y = 1 / (mean + eps) ** 0.5.")
    return None


def _swapped(runs) -> str | None:
    if _close(runs) or not _close(runs, flip=True):
        return None
    return "your two numbers are swapped: return (y_correct, y_buggy)."


def _y_correct_off(runs) -> str | None:
    if _close(runs, column=0):
        return None
    i = _first_off(runs, 0)
    return (f"for N = {NS[i]} you predict y_correct = {fmt(runs[i].actual['guess'][0])}, the kernel gives "
            f"{fmt(runs[i].expected['seen'][0])}: dividing by N, mean(x²) = 1 for any row of ones, so "
            "y = 1/sqrt(1 + eps).")


def _y_buggy_off(runs) -> str | None:
    """The wrong hypothesis the learner's y_buggy matches (:data:`WRONG_HYPOTHESES`), or where it is off."""
    if _close(runs, column=1):
        return None
    guess, i = _guesses(runs)[:, 1], _first_off(runs, 1)
    mine, seen = fmt(runs[i].actual["guess"][1]), fmt(runs[i].expected["seen"][1])
    # Two hypotheses can agree to float32's tolerance (sqrt(N / B + eps) and 1/sqrt(B / N + eps) differ by about
    # eps): the learner's float64 numbers are nearest the one they computed.
    near = []
    for what, model, fix in WRONG_HYPOTHESES:
        want = torch.tensor([model(N) for N in NS], dtype=torch.float64)
        if close(guess, want, TOLERANCES[torch.float32]):
            near.append((float((guess - want).abs().max()), what, fix))
    if near:
        _, what, fix = min(near, key=lambda hypothesis: hypothesis[0])
        return f"your y_buggy is {what}: for N = {NS[i]} you predict {mine}, the buggy kernel gives {seen}. {fix}"
    implied = _implied(NS[i], float(guess[i]))
    return f"for N = {NS[i]} you predict y_buggy = {mine}, the buggy kernel gives {seen}{implied}."


def _implied(N: int, y: float) -> str:
    """What a y_buggy implies, read back through y = 1/sqrt(N / B + eps): the BLOCK_SIZE B (or the mean) it stands for.

    A learner who computes BLOCK_SIZE another way (next_power_of_2(N - 1), N rounded up to a multiple of 64…)
    still uses the formula; solving it for B shows which block width they took, in their own terms.
    """
    block = _block(N)
    if not (math.isfinite(y) and y > 0) or 1 / y**2 - EPS <= 0:
        return f" (BLOCK_SIZE = {block}; y_buggy = 1/sqrt(N / BLOCK_SIZE + eps) is a positive number)"
    mean = 1 / y**2 - EPS
    taken = N / mean
    if abs(taken - round(taken)) <= 1e-3 * taken and round(taken) != block:
        return (f": your number is 1/sqrt(N / B + eps) with B = {round(taken)}, but the kernel's BLOCK_SIZE is "
                f"triton.next_power_of_2({N}) = {block}, the smallest power of two ≥ N (the mean is "
                f"{N} / {block} = {N / block:.4g})")
    return (f": your number stands for a mean of {mean:.4g} (1/y² − eps), where the buggy kernel's is "
            f"N / BLOCK_SIZE = {N} / {block} = {N / block:.4g}")


def _formula(N: int, eps: float) -> tuple[float, float]:
    """(y_correct, y_buggy) of a row of N ones with ``eps``, in float64."""
    return 1 / math.sqrt(1 + eps), 1 / math.sqrt(N / _block(N) + eps)


def _without_eps(runs) -> str | None:
    """A prediction nearer the formula without eps than with it, in either number (float32's tolerance hides eps).

    eps = 1e-6 moves each number by about 5e-7 of itself, 200 times less than float32's declared rtol of 1e-4,
    so the kernels alone accept 1.0 for 0.9999995; the exercise gives eps, and the formula has it.
    """
    if not _close(runs):
        return None
    guesses, seen = [r.actual["guess"] for r in runs], [r.expected["seen"] for r in runs]
    for column, (what, kernel) in enumerate((("y_correct", "the kernel"), ("y_buggy", "the buggy kernel"))):
        if all(abs(g[column] - _formula(N, 0.0)[column]) < abs(g[column] - _formula(N, EPS)[column])
               for N, g in zip(NS, guesses)):
            i = NS.index(257)
            mine, want = fmt_pair(guesses[i][column], _formula(257, EPS)[column])
            return (f"your {what} leaves out eps: for N = 257 you predict {mine}, but "
                    f"1/sqrt(mean + eps) with eps = {EPS:g} is {want} ({kernel} gives "
                    f"{seen[i][column]:.7f}). float32's tolerance lets the difference pass, the formula "
                    "does not: add eps to the mean inside the square root, for both numbers.")
    return None


def _matches_both(runs) -> str:
    g = {r.case.inputs["N"]: r.actual["guess"] for r in runs}
    k = {r.case.inputs["N"]: r.expected["seen"] for r in runs}
    return (f"your hypothesis matches both kernels for N = {', '.join(map(str, NS))}: for 257 "
            f"ones you predict {g[257][0]:.7f} (÷N) and {g[257][1]:.6f} (÷BLOCK_SIZE = 512), the kernels "
            f"give {k[257][0]:.7f} and {k[257][1]:.6f}; at N = 256 both give {k[256][1]:.7f}.")


#: Exercise 08.1, declared: the answer is ``predict(N) -> (y_correct, y_buggy)``; each case a row of N ones,
#: its oracle what the package's kernel and the ÷BLOCK_SIZE kernel give. Every run is taken as it comes
#: (``verify``); the first looks then name what is wrong, in order: eps left out, the numbers swapped,
#: y_correct, y_buggy (a wrong hypothesis of :data:`WRONG_HYPOTHESES`, or the first N where it is off).
HYPOTHESIS_SPEC = FunctionSpec(
    exercise=EXERCISE,
    reference=None,
    cases=_cases,
    run=_run,
    oracle=lambda case: {"seen": observed(case.inputs["N"])},
    symptoms=(),
    success=_matches_both,
    verify=lambda run: None,
    first_looks=(_without_eps, _off_the_formula, _swapped, _y_correct_off, _y_buggy_off),
)


def check_hypothesis(predict) -> Feedback:
    """Compare a learner's prediction for rows of ones with what the two kernels really give.

    Args:
        predict: a function ``N -> (y_correct, y_buggy)`` (two floats).

    Returns:
        Feedback: "passed", "not done yet" or "wrong". Never raises, never
        hangs (it runs in a separate process with a time limit).

    Source: solutions/08_n_vs_block_exercise.ipynb.
    """
    return check(HYPOTHESIS_SPEC, predict)

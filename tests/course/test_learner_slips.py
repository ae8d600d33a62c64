"""The slips a fresh learner met (issue 36), each named by the checker in words about the code at fault.

The wrong variants are in the tables of wrong_variants.py, judged by the parametrised tests of
tests/course/test_checkers.py; here, 08's fixed dx kernel, whose learner writes one line
(`mean_ux = ...`), on the slips of that line, and what the checkers' models of the slips rest on.

Source: solutions/03_forward_kernel.ipynb, solutions/05_gamma_reduction.ipynb,
solutions/08_n_vs_block_exercise.ipynb.
"""

from __future__ import annotations

import math
import sys

import cloudpickle
import pytest
import torch

import wrong_variants as wv
from rmsnorm.article.reduction import BLOCK_M
from rmsnorm.testing import TOLERANCES
from rmsnorm_course import checkers
from rmsnorm_course.checkers.ex05_dgamma import FLOAT16_SLACK, partial_cases
from rmsnorm_course.checkers.ex08_n_vs_block import EPS, NS, _formula, observed
from rmsnorm_course.checkers.guards import GUARD
from rmsnorm_course.checkers.spec import PROBE

cloudpickle.register_pickle_by_value(wv)  # a checker's child gets the answers by value, as a notebook's
cloudpickle.register_pickle_by_value(sys.modules[__name__])


@pytest.mark.parametrize("name", wv.FIX)
def test_each_slip_of_the_fixed_line_is_named_in_08(name):
    kernel, expected = wv.FIX[name]
    feedback = checkers.check_fixed_dx_kernel(kernel)
    assert feedback.exercise.startswith("08") and feedback.status == "wrong", feedback
    assert expected in feedback.message, feedback


def test_the_probe_around_the_tensors_tells_a_row_of_ones_from_the_probe():
    # A row read from outside must not look like the row of 257 ones of exercise 03's first case.
    assert PROBE != 1.0 and not math.isclose(1 / math.sqrt(PROBE**2 + 1e-6), 1 / math.sqrt(1 + 1e-6))


def test_the_first_case_a_row_mask_slip_fails_is_one_every_read_past_lands_in_the_guard():
    # The row-mask models add PROBE for each row read past M: true while those rows lie in the guard.
    first = partial_cases()[0]  # the guard after a tensor: GUARD + rows · row stride elements
    assert first.M < BLOCK_M and (BLOCK_M - first.M) * first.N <= GUARD + first.M * first.N


def test_the_float16_bound_holds_float16_sums_and_refuses_a_dropped_row():
    # _summed_in_16_bits accepts |error| ≤ FLOAT16_SLACK · Σ|partial| per column: a running sum in float16 is
    # inside it on every case; a slip of the sum's shape (the last row dropped) is outside it on the article's.
    for case in partial_cases():
        partial = case.f64("partial")
        in_float16 = partial.half().cumsum(0, dtype=torch.float16)[-1].double()
        assert ((in_float16 - partial.sum(0)).abs() <= FLOAT16_SLACK * partial.abs().sum(0)).all(), case.label
    article = partial_cases()[0].f64("partial")
    assert ((article[:-1].sum(0) - article.sum(0)).abs() > FLOAT16_SLACK * article.abs().sum(0)).all()


def test_float32s_tolerance_alone_would_accept_a_prediction_without_eps():
    # Why the hypothesis checker compares with the formula too: against the kernels, 1.0 passes for 0.9999995,
    # while with and without eps the formula's numbers lie further apart than float32 computes them (6e-8).
    without = torch.tensor([_formula(N, 0.0) for N in NS], dtype=torch.float64)
    seen = torch.tensor([observed(N) for N in NS], dtype=torch.float64)
    torch.testing.assert_close(without, seen, **TOLERANCES[torch.float32])
    assert min(abs(a - b) for N in NS for a, b in zip(_formula(N, 0.0), _formula(N, EPS))) > 4e-7


def _y_buggy_without_eps(N):
    return _formula(N, EPS)[0], _formula(N, 0.0)[1]


def test_eps_left_out_of_y_buggy_alone_is_named_too():
    feedback = checkers.check_hypothesis(_y_buggy_without_eps)
    assert feedback.status == "wrong", feedback
    assert "your y_buggy leaves out eps: for N = 257 you predict 1.411459" in feedback.message, feedback
    assert "(the buggy kernel gives 1.4114" in feedback.message, feedback

"""Exercise 08 · N vs BLOCK: the hypothesis and the fix pass, each wrong hypothesis is named, and the bug itself.

The bug: dividing by BLOCK_SIZE is caught at N = 257, missed at N = 256 (rmsnorm_course.teaching.buggy).
Wrong variants: wrong_variants.HYPOTHESIS, and for the fix wrong_variants.FIX (the slips of its one line) and
wrong_variants.DX (exercise 04's kernels).
Source: solutions/08_n_vs_block_exercise.ipynb.
"""

from __future__ import annotations

import difflib
import inspect

import pytest
import torch

import rmsnorm.article
import rmsnorm_course.teaching.buggy
import wrong_variants as wv
from checker_support import assert_named, assert_passes, assert_three_named, params
from rmsnorm.article import backward_rows, forward_op
from rmsnorm.testing import TOLERANCES, assert_close, make_inputs, oracle
from rmsnorm_course import checkers
from rmsnorm_course.checkers.ex08_n_vs_block import EPS, NS, _formula, observed
from rmsnorm_course.teaching.buggy import PAIRS, rmsnorm_dx_kernel_block_mean, rmsnorm_forward_kernel_block_mean

RIGHT = {
    "hypothesis": lambda: checkers.check_hypothesis(wv._hypothesis("right")),
    "fix": lambda: checkers.check_fixed_dx_kernel(rmsnorm.article.rmsnorm_dx_kernel),
}


@pytest.mark.parametrize("part", RIGHT)
def test_the_solution_passes(part):
    assert_passes(RIGHT[part]())


WRONG = [
    *params(wv.HYPOTHESIS, checkers.check_hypothesis),
    pytest.param(checkers.check_fixed_dx_kernel, *wv.DX["masked load of dy without other"], id="08 fix: no other="),
    *[pytest.param(checkers.check_fixed_dx_kernel, *wv.FIX[name], id=f"08 fix: {name}") for name in wv.FIX],
]


@pytest.mark.parametrize(("check", "variant", "expected"), WRONG)
def test_each_wrong_variant_is_named(check, variant, expected, monkeypatch):
    assert_named(check, variant, expected, monkeypatch)


def test_at_least_three_wrong_variants_are_named():
    assert_three_named(wv.HYPOTHESIS)


def test_float32s_tolerance_alone_would_accept_a_prediction_without_eps():
    # Why the hypothesis checker compares with the formula too: against the kernels, 1.0 passes for 0.9999995,
    # while with and without eps the formula's numbers lie further apart than float32 computes them (6e-8).
    without = torch.tensor([_formula(N, 0.0) for N in NS], dtype=torch.float64)
    seen = torch.tensor([observed(N) for N in NS], dtype=torch.float64)
    torch.testing.assert_close(without, seen, **TOLERANCES[torch.float32])
    assert min(abs(a - b) for N in NS for a, b in zip(_formula(N, 0.0), _formula(N, EPS))) > 4e-7


def test_the_fix_checker_names_the_unfixed_kernel():
    feedback = checkers.check_fixed_dx_kernel(rmsnorm_course.teaching.buggy.rmsnorm_dx_kernel_block_mean)
    assert feedback.exercise.startswith("08") and "divided by BLOCK_SIZE instead of N" in feedback.message


# --------------------------------------------------------------------------- the bug the exercise hunts


@pytest.mark.parametrize("correct_name", PAIRS)
def test_each_buggy_kernel_differs_from_the_real_one_by_one_line(correct_name):
    real = inspect.getsource(getattr(rmsnorm.article, correct_name).fn).splitlines()[2:]  # after decorator and def
    bad = inspect.getsource(PAIRS[correct_name].fn).splitlines()[2:]
    changed = [d for d in difflib.ndiff(real, bad) if d[:1] in "+-"]
    assert len(changed) == 2, changed
    assert "/ N" in changed[0] and "/ BLOCK_SIZE" in changed[1]


def test_row_of_257_ones_shows_the_amplification(device):
    ones = torch.ones(1, 257, device=device)
    y_bad, _ = forward_op(ones, torch.ones(257, device=device), kernel=rmsnorm_forward_kernel_block_mean)
    torch.testing.assert_close(y_bad.cpu(), torch.full((1, 257), 1.411458), atol=1e-6, rtol=0)


def _forward_check(N, kernel, device):
    x, gamma, _ = make_inputs(17, N, device=device, seed=N)
    y, _ = forward_op(x, gamma, kernel=kernel)
    assert_close(y, oracle(x, gamma))


def test_forward_bug_missed_at_256(device):
    _forward_check(256, rmsnorm_forward_kernel_block_mean, device)  # passes: N == BLOCK_SIZE


def test_forward_bug_caught_at_257(device):
    with pytest.raises(AssertionError, match="Tensor-likes are not close"):
        _forward_check(257, rmsnorm_forward_kernel_block_mean, device)


def _dx_check(N, kernel, device):
    x, gamma, dy = make_inputs(17, N, device=device, seed=N)
    _, rstd = forward_op(x, gamma)  # correct forward: only the backward is wrong
    dx, _ = backward_rows(x, gamma, dy, rstd, 1e-6, kernel=kernel)
    assert_close(dx, oracle(x, gamma, dy)[1])


def test_dx_bug_missed_at_256(device):
    _dx_check(256, rmsnorm_dx_kernel_block_mean, device)


def test_dx_bug_caught_at_257(device):
    with pytest.raises(AssertionError, match="Tensor-likes are not close"):
        _dx_check(257, rmsnorm_dx_kernel_block_mean, device)

"""Exercise 05 · dgamma kernel: the solution passes, each wrong kernel is named.

Wrong variants: wrong_variants.DGAMMA (the package kernel with one slip each).
Source: solutions/05_gamma_reduction.ipynb.
"""

from __future__ import annotations

import pytest
import torch

import rmsnorm.article
import wrong_variants as wv
from checker_support import assert_named, assert_passes, assert_three_named, covered_by_isolate_on_a_gpu, params
from rmsnorm.article.reduction import BLOCK_M
from rmsnorm_course import checkers
from rmsnorm_course.checkers.ex05_dgamma import FLOAT16_SLACK, partial_cases
from rmsnorm_course.checkers.guards import GUARD


def test_the_solution_passes():
    assert_passes(checkers.check_dgamma_kernel(rmsnorm.article.rmsnorm_dgamma_kernel))


@covered_by_isolate_on_a_gpu
@pytest.mark.parametrize(("variant", "expected"), params(wv.DGAMMA))
def test_each_wrong_variant_is_named(variant, expected, monkeypatch):
    assert_named(checkers.check_dgamma_kernel, variant, expected, monkeypatch)


def test_at_least_three_wrong_variants_are_named():
    assert_three_named(wv.DGAMMA)


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

"""Exercise 01 · by hand: the solution passes, each wrong row of numbers is named.

Wrong variants: wrong_variants.BY_HAND. Source: solutions/01_formula.ipynb.
"""

from __future__ import annotations

import pytest

import wrong_variants as wv
from checker_support import assert_named, assert_passes, assert_three_named, params
from rmsnorm_course import checkers
from verdict_variants import _solution_row  # the answers the verdict fixture records too


def test_the_solution_passes():
    assert_passes(checkers.check_by_hand(_solution_row))


@pytest.mark.parametrize(("variant", "expected"), params(wv.BY_HAND))
def test_each_wrong_variant_is_named(variant, expected, monkeypatch):
    assert_named(checkers.check_by_hand, variant, expected, monkeypatch)


def test_at_least_three_wrong_variants_are_named():
    assert_three_named(wv.BY_HAND)

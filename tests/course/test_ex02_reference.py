"""Exercise 02 · PyTorch reference: the solution passes, each wrong reference is named.

Wrong variants: wrong_variants.REFERENCE. Source: solutions/02_reference.ipynb.
"""

from __future__ import annotations

import pytest

import rmsnorm
import wrong_variants as wv
from checker_support import assert_named, assert_passes, assert_three_named, params
from rmsnorm_course import checkers


def test_the_solution_passes():
    assert_passes(checkers.check_reference(rmsnorm.rmsnorm_reference))


@pytest.mark.parametrize(("variant", "expected"), params(wv.REFERENCE))
def test_each_wrong_variant_is_named(variant, expected, monkeypatch):
    assert_named(checkers.check_reference, variant, expected, monkeypatch)


def test_at_least_three_wrong_variants_are_named():
    assert_three_named(wv.REFERENCE)

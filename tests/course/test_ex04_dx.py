"""Exercise 04 · dx kernel: the solution passes, each wrong kernel is named.

Wrong variants: wrong_variants.DX (the package kernel with one slip each).
Source: solutions/04_backward_derivation.ipynb.
"""

from __future__ import annotations

import pytest

import rmsnorm.article
import wrong_variants as wv
from checker_support import assert_named, assert_passes, assert_three_named, covered_by_isolate_on_a_gpu, params
from rmsnorm_course import checkers


def test_the_solution_passes():
    assert_passes(checkers.check_dx_kernel(rmsnorm.article.rmsnorm_dx_kernel))


@covered_by_isolate_on_a_gpu
@pytest.mark.parametrize(("variant", "expected"), params(wv.DX))
def test_each_wrong_variant_is_named(variant, expected, monkeypatch):
    assert_named(checkers.check_dx_kernel, variant, expected, monkeypatch)


def test_at_least_three_wrong_variants_are_named():
    assert_three_named(wv.DX)

"""Exercise 06 · autograd.Function: the solution passes, each wrong wiring is named.

Wrong variants: wrong_variants.AUTOGRAD. Source: solutions/06_autograd_and_training.ipynb.
"""

from __future__ import annotations

from pathlib import Path

import pytest

import rmsnorm.article
import wrong_variants as wv
from checker_support import assert_named, assert_passes, assert_three_named, params
from rmsnorm_course import checkers

ROOT = Path(__file__).resolve().parents[2]


def test_the_solution_passes():
    assert_passes(checkers.check_autograd_function(rmsnorm.article.RMSNormFunction))


@pytest.mark.parametrize(("variant", "expected"), params(wv.AUTOGRAD))
def test_each_wrong_variant_is_named(variant, expected, monkeypatch):
    assert_named(checkers.check_autograd_function, variant, expected, monkeypatch)


def test_at_least_three_wrong_variants_are_named():
    assert_three_named(wv.AUTOGRAD)


def test_eps_hard_coded_in_backward_passes():
    # dx depends on eps only through the saved rstd: backward_rows' kernel never reads its eps argument.
    assert_passes(checkers.check_autograd_function(wv.EpsHardCodedInBackward))

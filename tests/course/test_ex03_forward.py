"""Exercise 03 · forward kernel: the solution passes, each wrong kernel is named, numbers show their digits.

Wrong variants: wrong_variants.FORWARD (the package kernel with one slip each).
Source: solutions/03_forward_kernel.ipynb.
"""

from __future__ import annotations

import math
import re

import pytest

import rmsnorm.article
import wrong_variants as wv
from checker_support import assert_named, assert_passes, assert_three_named, covered_by_isolate_on_a_gpu, params
from rmsnorm_course import checkers
from rmsnorm_course.checkers.spec import PROBE


def test_the_solution_passes():
    assert_passes(checkers.check_forward_kernel(rmsnorm.article.rmsnorm_forward_kernel))


@covered_by_isolate_on_a_gpu
@pytest.mark.parametrize(("variant", "expected"), params(wv.FORWARD))
def test_each_wrong_variant_is_named(variant, expected, monkeypatch):
    assert_named(checkers.check_forward_kernel, variant, expected, monkeypatch)


def test_at_least_three_wrong_variants_are_named():
    assert_three_named(wv.FORWARD)


def test_messages_of_distinct_numbers_show_distinct_digits():
    # rstd rounded to float16 differs from the oracle in the 4th significant digit:
    # 3 decimals would print equal numbers.
    feedback = checkers.check_forward_kernel(wv.FORWARD["rstd kept in 16 bits"][0])
    shown = re.search(r"rstd\[\d+\] = ([-\d.e]+), expected ([-\d.e]+)", feedback.message)
    assert shown and shown.group(1) != shown.group(2), feedback


def test_the_probe_around_the_tensors_tells_a_row_of_ones_from_the_probe():
    # A row read from outside (x loaded one row too far) must not look like the first case, a row of 257 ones.
    assert PROBE != 1.0 and not math.isclose(1 / math.sqrt(PROBE**2 + 1e-6), 1 / math.sqrt(1 + 1e-6))

"""Exercise 10 · the one-pass backward: the solution passes, each wrong variant gets its own message.

Wrong variants: wrong_variants_long_row_and_one_pass.ONE_PASS (the checker's reference kernel with
one slip each). A loop that never ends and an access far outside every tensor are stopped as in
exercise 09 (test_ex09_long_row.py). The shared assertions: long_row_support.py.

Source: solutions/10_one_pass_backward.ipynb.
"""

from __future__ import annotations

import pytest

import long_row_support as support
import wrong_variants_long_row_and_one_pass as wv
from checker_support import assert_passes, covered_by_isolate_on_a_gpu, needs_interpreter
from rmsnorm_course import checkers
from rmsnorm_course.checkers.ex10_one_pass import grid_cases, one_pass_backward_kernel
from rmsnorm_course.checkers.ex10_symptoms import ONE_RSTD_SHORT, by_source


def test_one_rstd_short_names_the_line_in_the_kernel_or_both():
    # The mean of u · x and rstd on dx's first term give the same numbers: the kernel's text picks the line.
    message = f"{ONE_RSTD_SHORT.summary}: a case gives dx[0, 0] = 1, expected 2. {ONE_RSTD_SHORT.fix}"
    assert by_source(message, "mean_ux = tl.sum(u * x, axis=0) / N").startswith("the mean is taken of u · x")
    assert by_source(message, "dx = rstd * u - x_hat * mean_ux").startswith("dx's second term misses its rstd")
    assert by_source(message, "neither line") == message  # both named
    assert by_source("another message", "mean_ux = tl.sum(u * x, axis=0) / N") == "another message"


def test_the_solution_passes():
    assert_passes(checkers.check_one_pass_kernel(one_pass_backward_kernel))


@covered_by_isolate_on_a_gpu
@pytest.mark.parametrize("name", wv.ONE_PASS)
def test_each_wrong_variant_is_named(name):
    support.assert_each_wrong_variant_is_named("10", name)


def test_every_variant_has_its_own_expected_words():
    support.assert_the_expected_words_are_distinct("10")


@needs_interpreter
def test_a_loop_that_never_ends_is_stopped_with_the_message_of_every_exercise(monkeypatch):
    support.assert_a_loop_that_never_ends_is_stopped("10", monkeypatch)


@needs_interpreter
@pytest.mark.parametrize("name", support.far_outside("10"))
def test_an_access_far_outside_every_tensor_is_stopped_with_a_message(name):
    support.assert_an_access_far_outside_is_stopped("10", name)


def test_the_grid_cases_expose_the_classic_bugs():
    grids = grid_cases()
    assert any(c.M % c.programs for c in grids) and any(c.programs > c.M for c in grids)
    assert any(c.programs == 1 for c in grids) and any(c.stride > c.N for c in grids)


def test_the_kernel_is_judged_in_the_checkers_separate_process(monkeypatch):
    support.assert_judged_in_the_child("10", monkeypatch)

"""Exercise 09 · the long row: the solution passes, each wrong variant gets its own message.

Wrong variants: wrong_variants_long_row_and_one_pass.LONG_ROW (the checker's reference kernel with
one slip each). A loop that never ends is stopped by the time limit of every exercise, and an access
far outside every tensor by the interpreter's bounds check, which runs on every device (the
interpreter's judge does: test_isolate.py). Each ends with its child process, never with the test
session. The shared assertions: long_row_support.py.

Source: solutions/09_the_long_row.ipynb.
"""

from __future__ import annotations

import pytest
import torch

import long_row_support as support
import wrong_variants_long_row_and_one_pass as wv
from checker_support import assert_passes, covered_by_isolate_on_a_gpu, needs_interpreter
from rmsnorm_course import checkers
from rmsnorm_course.checkers.ex09_long_row import long_row_forward_kernel, loop_cases
from wrong_variants import GPU_REJECTS


def test_the_solution_passes():
    assert_passes(checkers.check_long_row_kernel(long_row_forward_kernel))


@covered_by_isolate_on_a_gpu
@pytest.mark.parametrize("name", wv.LONG_ROW)
def test_each_wrong_variant_is_named(name):
    support.assert_each_wrong_variant_is_named("09", name)


def test_every_variant_has_its_own_expected_words():
    support.assert_the_expected_words_are_distinct("09")


def test_a_block_accumulator_overwritten_by_a_sum_is_refused_as_a_gpu_refuses_it():
    # The interpreter runs `sum_sq = tl.sum(x * x)` over a block accumulator; a GPU's compiler refuses the change
    # of shape: its refusal stays the message, worded (the overwrite, what to write instead).
    kernel, words = wv.BLOCK_OVERWRITTEN
    feedback = checkers.check_long_row_kernel(kernel)
    assert not feedback.passed and GPU_REJECTS in feedback.message and words in feedback.message, feedback


@needs_interpreter
def test_a_loop_that_never_ends_is_stopped_with_the_message_of_every_exercise(monkeypatch):
    support.assert_a_loop_that_never_ends_is_stopped("09", monkeypatch)


@needs_interpreter
@pytest.mark.parametrize("name", support.far_outside("09"))
def test_an_access_far_outside_every_tensor_is_stopped_with_a_message(name):
    support.assert_an_access_far_outside_is_stopped("09", name)


def test_the_cases_need_a_loop_and_expose_the_classic_bugs():
    cases = loop_cases()
    assert all(c.block_size < c.N for c in cases if c.N != 40) and any(c.block_size > c.N for c in cases)
    assert any(c.N % c.block_size == 1 for c in cases)  # a last block of one column (the off-by-one bound)
    assert any(c.N % c.block_size not in (0, 1) for c in cases)  # floor(N / BLOCK_SIZE) loses columns
    assert any(c.row_stride > c.N for c in cases) and any(c.dtype == torch.float16 for c in cases)


def test_the_kernel_is_judged_in_the_checkers_separate_process(monkeypatch):
    support.assert_judged_in_the_child("09", monkeypatch)


def test_a_renamed_pointer_is_accepted_as_in_lessons_03_to_05():
    # The checker launches positionally (BLOCK_SIZE by keyword), so, as in 03-05, only the
    # constexpr's name is fixed; one preflight (checkers.kernels.preflight) serves both days.
    renamed = wv.mutate(
        long_row_forward_kernel, ("    x_ptr,  #", "    x_in,  #"), ("x_row = x_ptr + row", "x_row = x_in + row")
    )
    assert checkers.check_long_row_kernel(renamed).passed


def test_the_exercise_09_cases_are_those_its_notebook_announces():
    # solutions/09: "seven cases ... smaller than N in six of them; in one, a block of 64 is wider than a row of 40"
    cases = loop_cases()
    wider = [(c.block, c.N) for c in cases if c.block >= c.N]
    assert len(cases) == 7 and wider == [(64, 40)]

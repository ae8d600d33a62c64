"""The checkers of exercises 09 and 10 are proven: the solution passes, each wrong variant gets its own message.

Wrong variants: tests/wrong_variants_part2_lessons910.py (the checker's
reference kernel with one slip each). The skeleton gets "not done yet"; a
loop that never ends is stopped by the time limit, and an access far outside
every tensor by the interpreter's bounds check (both CPU only: on a GPU the
first would keep the device busy after the message, the second ends in an
illegal-address error that kills the CUDA context). The generated exercise
notebooks' checkers say "not done yet" (tests/test_checkers.py runs them).

Source: solutions/09_the_long_row.ipynb, solutions/10_one_pass_backward.ipynb.
"""

from __future__ import annotations

import functools
import time

import pytest
import torch
import wrong_variants_part2_lessons910 as wv

from rmsnorm import checkers
from rmsnorm.checkers import Feedback
from rmsnorm.checkers.ex09_long_row import long_row_forward_kernel, loop_cases
from rmsnorm.checkers.ex10_one_pass import grid_cases, one_pass_backward_kernel
from rmsnorm.checkers.guarded import surround, written_outside

cpu_only = pytest.mark.skipif(torch.cuda.is_available(),
                              reason="a kernel that never ends would keep the GPU busy after the checker's message")

RIGHT = {
    "09": lambda: checkers.check_long_row_kernel(long_row_forward_kernel),
    "10": lambda: checkers.check_one_pass_kernel(one_pass_backward_kernel),
}


@pytest.mark.parametrize("exercise", RIGHT)
def test_the_solution_passes(exercise):
    feedback = RIGHT[exercise]()
    assert isinstance(feedback, Feedback) and feedback.passed, feedback


TABLES = {"09": (wv.LONG_ROW, checkers.check_long_row_kernel), "10": (wv.ONE_PASS, checkers.check_one_pass_kernel)}


@functools.lru_cache(maxsize=None)
def feedback_of(exercise: str, name: str) -> Feedback:
    """The checker's feedback on one wrong variant (computed once per test session)."""
    table, check = TABLES[exercise]
    return check(table[name][0])


@pytest.mark.parametrize(("exercise", "name"), [(e, n) for e, (table, _) in TABLES.items() for n in table],
                         ids=lambda v: v)
def test_each_wrong_variant_is_named(exercise, name):
    expected = TABLES[exercise][0][name][1]
    feedback = feedback_of(exercise, name)
    assert not feedback.passed, feedback
    assert feedback.status == ("not done yet" if expected == "not done yet" else "wrong"), feedback
    assert expected in str(feedback), feedback


@pytest.mark.parametrize("exercise", TABLES)
def test_every_variant_has_its_own_message(exercise):
    table = TABLES[exercise][0]
    expected = [message for _, message in table.values()]
    assert len(set(expected)) == len(expected)
    messages = {name: str(feedback_of(exercise, name)) for name in table}
    for name, (_, message) in table.items():  # each expected substring appears in its own variant's feedback only
        assert [other for other, text in messages.items() if message in text] == [name], (name, message)


@cpu_only
@pytest.mark.parametrize(("check", "kernel"), [
    (checkers.check_long_row_kernel, wv.NEVER_ENDS), (checkers.check_one_pass_kernel, wv.ONE_PASS_NEVER_ENDS),
], ids=["09", "10"])
def test_a_loop_that_never_ends_is_stopped_with_a_message(check, kernel):
    start = time.monotonic()
    feedback = check(kernel, time_limit_s=2.0)
    assert time.monotonic() - start < 15, "the time limit did not stop the kernel"
    assert feedback.status == "wrong" and "did not finish within 2 s" in feedback.message, feedback
    assert RIGHT["09"]().passed and RIGHT["10"]().passed  # the interpreter still works afterwards


@cpu_only
@pytest.mark.parametrize("name", wv.FAR_OUTSIDE)
def test_an_access_far_outside_every_tensor_is_stopped_with_a_message(name):
    kernel, expected = wv.FAR_OUTSIDE[name]
    check = checkers.check_long_row_kernel if name.startswith("09") else checkers.check_one_pass_kernel
    feedback = check(kernel)  # without the bounds check, the interpreter would read or write there (a segfault)
    assert feedback.status == "wrong" and expected in feedback.message, feedback
    assert "outside every tensor it was given" in feedback.message and "(at line " in feedback.message, feedback
    assert RIGHT["09"]().passed and RIGHT["10"]().passed  # the interpreter's memory operations are restored


def test_the_cases_need_a_loop_and_expose_the_classic_bugs():
    cases = loop_cases()
    assert all(c.block_size < c.N for c in cases if c.N != 40) and any(c.block_size > c.N for c in cases)
    assert any(c.N % c.block_size == 1 for c in cases)  # a last block of one column (the off-by-one bound)
    assert any(c.N % c.block_size not in (0, 1) for c in cases)  # floor(N / BLOCK_SIZE) loses columns
    assert any(c.row_stride > c.N for c in cases) and any(c.dtype == torch.float16 for c in cases)
    grids = grid_cases()
    assert any(c.M % c.programs for c in grids) and any(c.programs > c.M for c in grids)
    assert any(c.programs == 1 for c in grids) and any(c.row_stride > c.N for c in grids)


def test_guard_finds_writes_outside_and_keeps_nan_around():
    view, buffer = surround(torch.ones(3, 4), capacity=3 * 6, row_stride=6)
    assert view.shape == (3, 4) and view.stride() == (6, 1) and torch.isnan(buffer[4:6]).all()
    assert len(written_outside(view, buffer)) == 0
    buffer[5] = 1.0  # padding of row 0
    buffer[-1] = 1.0  # the guard
    assert written_outside(view, buffer).tolist() == [5, buffer.numel() - 1]


@cpu_only
def test_a_loop_variable_cast_with_to_gets_the_tl_cast_hint():
    # Under the interpreter `for row in range(pid, M, P)` gives a Python int, which has no .to (a learner found it)
    kernel = wv.mutate(one_pass_backward_kernel, ("tl.cast(row, tl.int64) * row_stride + cols", "row.to(tl.int64) * row_stride + cols"))
    feedback = checkers.check_one_pass_kernel(kernel)
    assert feedback.status == "wrong" and "tl.cast(row, tl.int64)" in feedback.message, feedback


@pytest.mark.parametrize("exercise", ["09", "10"])
def test_the_kernel_is_judged_in_the_checkers_separate_process(exercise, monkeypatch):
    from rmsnorm.checkers import isolate

    started = []
    real_start = isolate.start
    monkeypatch.setattr(isolate, "start", lambda *a, **k: started.append(a[0]) or real_start(*a, **k))
    assert RIGHT[exercise]().passed
    assert started and started[0][1] in ("judge_long_row", "judge_one_pass")


def test_a_renamed_pointer_is_accepted_as_in_lessons_03_to_05():
    # The checker launches positionally (BLOCK_SIZE by keyword), so, as in 03-05, only the
    # constexpr's name is fixed; one preflight (checkers.kernels.preflight) serves both days.
    renamed = wv.mutate(long_row_forward_kernel, ("    x_ptr,  #", "    x_in,  #"), ("x_row = x_ptr + row", "x_row = x_in + row"))
    assert checkers.check_long_row_kernel(renamed).passed


def test_the_exercise_09_cases_are_those_its_notebook_announces():
    # solutions/09: "seven cases ... smaller than N in six of them; in one, a block of 64 is wider than a row of 40"
    from rmsnorm.checkers.ex09_long_row import loop_cases

    cases = loop_cases()
    wider = [(c.block, c.N) for c in cases if c.block >= c.N]
    assert len(cases) == 7 and wider == [(64, 40)]

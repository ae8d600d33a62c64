"""The checkers of exercises 09 and 10 are proven: the solution passes, each wrong variant gets its own message.

Wrong variants: tests/course/wrong_variants_long_row_and_one_pass.py (the checker's
reference kernel with one slip each). The skeleton gets "not done yet"; a
loop that never ends is stopped by the time limit of every exercise, and an
access far outside every tensor by the interpreter's bounds check, which runs
on every device (the interpreter's judge does: tests/course/test_checkers.py). Each
ends with its child process, never with the test session. The generated
exercise notebooks' checkers say "not done yet" (tests/course/test_checkers.py runs them).

Source: solutions/09_the_long_row.ipynb, solutions/10_one_pass_backward.ipynb.
"""

from __future__ import annotations

import functools
import time

import pytest
import torch

import wrong_variants_long_row_and_one_pass as wv
from rmsnorm_course import checkers
from rmsnorm_course.checkers import Feedback, isolate
from rmsnorm_course.checkers.ex09_long_row import long_row_forward_kernel, loop_cases
from rmsnorm_course.checkers.ex10_one_pass import grid_cases, one_pass_backward_kernel
from rmsnorm_course.checkers.guards import Buffers

#: Where Triton's interpreter does not run (a GPU machine whose triton and numpy disagree), the GPU judges alone.
INTERPRETER_BROKEN = isolate.interpreter_unavailable()
needs_interpreter = pytest.mark.skipif(
    INTERPRETER_BROKEN is not None,
    reason=f"Triton's interpreter does not run here ({INTERPRETER_BROKEN}): GPU judge alone")

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


@pytest.mark.parametrize(("check", "kernel"), [
    (checkers.check_long_row_kernel, wv.NEVER_ENDS), (checkers.check_one_pass_kernel, wv.ONE_PASS_NEVER_ENDS),
], ids=["09", "10"])
@needs_interpreter
def test_a_loop_that_never_ends_is_stopped_with_the_message_of_every_exercise(check, kernel, monkeypatch):
    monkeypatch.setattr(isolate, "CASE_TIME_LIMIT_S", 2.0)  # the one limit (60 s), shortened for the test
    start = time.monotonic()
    feedback = check(kernel)
    assert time.monotonic() - start < 15, "the time limit did not stop the kernel"
    assert feedback.status == "wrong" and "did not finish in 2 s (during the case " in feedback.message, feedback
    words = isolate.timeout_message(isolate.Outcome("timeout", 2.0, "x"), "your kernel `k`").split("): ", 1)[1]
    assert feedback.message.endswith(words), feedback  # the words of exercises 03-08
    # The interpreter still works afterwards: the right kernels, under the real limit again (under the 2 s one, a
    # loaded 2-core machine once took longer than 2 s on a right kernel's case, and the test failed).
    monkeypatch.undo()
    assert RIGHT["09"]().passed and RIGHT["10"]().passed


@needs_interpreter
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
    buffers = Buffers()
    view = buffers.output("y", (3, 4), torch.float32, "cpu", row_stride=6, room=100)
    buffer = buffers.buffers()["y"]
    assert view.shape == (3, 4) and view.stride() == (6, 1) and buffer.numel() == 1024 + 2 * 6 + 4 + 100
    assert torch.isnan(buffer).all() and buffers.problems() is None and buffers.written_outside("y") == []
    view.fill_(1.0)
    buffer[1024 + 5] = 1.0  # padding of row 0
    buffer[-1] = 1.0  # the guard after it
    assert buffers.written_outside("y") == [5, 16 + 100 - 1]
    assert buffers.problems().startswith("it wrote outside y (between its rows, element offset 5)")


@pytest.mark.parametrize("exercise", ["09", "10"])
def test_the_kernel_is_judged_in_the_checkers_separate_process(exercise, monkeypatch):
    from rmsnorm_course.checkers import isolate, run_loop
    from rmsnorm_course.checkers.spec import ExerciseSpec

    started = []
    real_start = isolate.start
    monkeypatch.setattr(isolate, "start", lambda *a, **k: started.append(a) or real_start(*a, **k))
    assert RIGHT[exercise]().passed
    target, (spec, _) = started[0]  # the harness's one run loop, given the exercise's spec as data
    assert target is run_loop.judge and isinstance(spec, ExerciseSpec) and spec.exercise.startswith(exercise)


def test_a_renamed_pointer_is_accepted_as_in_lessons_03_to_05():
    # The checker launches positionally (BLOCK_SIZE by keyword), so, as in 03-05, only the
    # constexpr's name is fixed; one preflight (checkers.kernels.preflight) serves both days.
    renamed = wv.mutate(
        long_row_forward_kernel, ("    x_ptr,  #", "    x_in,  #"), ("x_row = x_ptr + row", "x_row = x_in + row")
    )
    assert checkers.check_long_row_kernel(renamed).passed


def test_the_exercise_09_cases_are_those_its_notebook_announces():
    # solutions/09: "seven cases ... smaller than N in six of them; in one, a block of 64 is wider than a row of 40"
    from rmsnorm_course.checkers.ex09_long_row import loop_cases

    cases = loop_cases()
    wider = [(c.block, c.N) for c in cases if c.block >= c.N]
    assert len(cases) == 7 and wider == [(64, 40)]

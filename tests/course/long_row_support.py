"""What the tests of exercises 09 and 10 share: each kernel's checker, its wrong kernels, its right kernel.

Both judge the learner's loop with every address checked (the interpreter's bounds check), so
their tests read alike: test_ex09_long_row.py and test_ex10_one_pass.py.

Never import this from the course package or a notebook.
"""

from __future__ import annotations

import time

import wrong_variants_long_row_and_one_pass as wv
from checker_support import assert_verdict, contains, feedback_of
from rmsnorm_course import checkers
from rmsnorm_course.checkers import isolate
from rmsnorm_course.checkers.ex09_long_row import long_row_forward_kernel
from rmsnorm_course.checkers.ex10_one_pass import one_pass_backward_kernel

#: exercise → (checker, wrong variants, solution, a loop that never ends).
EXERCISES = {
    "09": (checkers.check_long_row_kernel, wv.LONG_ROW, long_row_forward_kernel, wv.NEVER_ENDS),
    "10": (checkers.check_one_pass_kernel, wv.ONE_PASS, one_pass_backward_kernel, wv.ONE_PASS_NEVER_ENDS),
}


def both_solutions_pass() -> bool:
    """The interpreter still runs the right kernels of 09 and 10 (after a variant that hung or went far outside)."""
    return all(check(solution).passed for check, _, solution, _ in EXERCISES.values())


def assert_each_wrong_variant_is_named(exercise: str, name: str) -> None:
    """The variant's own words are in its feedback, and no other variant's are: with every variant checked so, each
    expected substring appears in its own variant's feedback only (one variant a test, which xdist spreads)."""
    check, table, _, _ = EXERCISES[exercise]
    feedback = feedback_of(check, table[name][0])
    assert not feedback.passed, feedback
    assert_verdict(feedback, table[name][1])
    others = [other for other, (_, words) in table.items() if other != name and contains(str(feedback), words)]
    assert others == [], (name, others)


def assert_the_expected_words_are_distinct(exercise: str) -> None:
    expected = [message for _, message in EXERCISES[exercise][1].values()]
    assert len(set(expected)) == len(expected)


def assert_a_loop_that_never_ends_is_stopped(exercise: str, monkeypatch) -> None:
    check, _, _, kernel = EXERCISES[exercise]
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
    assert both_solutions_pass()


def assert_an_access_far_outside_is_stopped(exercise: str, name: str) -> None:
    check = EXERCISES[exercise][0]
    kernel, expected = wv.FAR_OUTSIDE[name]
    feedback = check(kernel)  # without the bounds check, the interpreter would read or write there (a segfault)
    assert feedback.status == "wrong" and expected in feedback.message, feedback
    assert "outside every tensor it was given" in feedback.message and "(at line " in feedback.message, feedback
    assert both_solutions_pass()  # the interpreter's memory operations are restored


def assert_judged_in_the_child(exercise: str, monkeypatch) -> None:
    from rmsnorm_course.checkers import run_loop
    from rmsnorm_course.checkers.spec import ExerciseSpec

    check, _, solution, _ = EXERCISES[exercise]
    started = []
    real_start = isolate.start
    monkeypatch.setattr(isolate, "start", lambda *a, **k: started.append(a) or real_start(*a, **k))
    assert check(solution).passed
    target, (spec, _) = started[0]  # the harness's one run loop, given the exercise's spec as data
    assert target is run_loop.judge and isinstance(spec, ExerciseSpec) and spec.exercise.startswith(exercise)


def far_outside(exercise: str) -> list[str]:
    """The names of wrong_variants_long_row_and_one_pass.FAR_OUTSIDE's kernels of one exercise ("09 …")."""
    return [name for name in wv.FAR_OUTSIDE if name.startswith(exercise)]

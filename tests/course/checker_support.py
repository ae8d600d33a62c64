"""What the per-exercise checker tests share: the interpreter probe, the hang limit, the verdict assertions.

Each tests/course/test_exNN_*.py feeds its exercise's checker the solution and the wrong
variants of wrong_variants*.py; these helpers assert the verdicts the same way in every file, and
:func:`two_checker_tests` is the tests 14 and 15 (a forward and a backward checker each) both run.

Never import this from the course package or a notebook.
"""

from __future__ import annotations

import functools
import sys

import cloudpickle
import pytest
import torch

import wrong_variants as wv
from rmsnorm_course.checkers import Feedback, isolate
from verdict_variants import HANG_LIMIT_S

#: None where Triton's interpreter runs (every CPU machine; a GPU machine with the pinned triton and numpy);
#: else why not: the checkers then judge on the GPU alone, and say so (isolate.judges).
INTERPRETER_BROKEN = isolate.interpreter_unavailable()
#: Where the interpreter runs beside a CUDA GPU, tests/course/test_isolate.py's GPU test checks every wrong kernel of
#: exercises 03, 04, 05, 09, 10, 14 and 15 with both judges, for its expected words and for the CPU's own (the
#: verdicts fixture, whose words the CPU tests hold to being each variant's alone): the per-exercise tests of those
#: variants would run each a second time there, at seconds a kernel.
covered_by_isolate_on_a_gpu = pytest.mark.skipif(
    INTERPRETER_BROKEN is None and torch.cuda.is_available(),
    reason="on a GPU machine tests/course/test_isolate.py checks this variant with both judges, words included")
needs_interpreter = pytest.mark.skipif(
    INTERPRETER_BROKEN is not None,
    reason=f"Triton's interpreter does not run here ({INTERPRETER_BROKEN}): GPU judge alone")

# never_ends and Weird reach the checkers' child: by value, as a notebook's code would.
cloudpickle.register_pickle_by_value(sys.modules[__name__])


def params(table: dict, *first) -> list:
    """One ``pytest.param(*first, answer, expected, id=name)`` per row of a wrong-variant table."""
    return [pytest.param(*first, *table[name], id=name) for name in table]


def assert_passes(feedback) -> None:
    assert isinstance(feedback, Feedback) and feedback.passed, feedback


def contains(text: str, expected: str | tuple[str, ...]) -> bool:
    """``expected`` (a substring, or a tuple of substrings: the parts of a message that matter) is all in ``text``."""
    return all(part in text for part in (expected if isinstance(expected, tuple) else (expected,)))


def assert_verdict(feedback: Feedback, expected: str | tuple[str, ...]) -> None:
    """``expected`` is "not done yet" (the status), or a substring (or a tuple of substrings) of a "wrong" verdict."""
    assert feedback.status == ("not done yet" if expected == "not done yet" else "wrong"), feedback
    assert contains(str(feedback), expected), feedback  # str: status and message ("not done yet" is the status)


def assert_named(check, variant, expected: str, monkeypatch) -> None:
    """The checker rejects ``variant`` with ``expected``; a loop that never ends runs under the short limit."""
    # On every device: a load without other= is named by the interpreter's judge, which runs on a GPU machine too.
    if expected == wv.NO_OTHER and INTERPRETER_BROKEN is not None:
        pytest.skip(f"Triton's interpreter does not run here ({INTERPRETER_BROKEN}); a GPU reads 0 there, not NaN")
    if expected == wv.NEVER_ENDS:
        monkeypatch.setattr(isolate, "CASE_TIME_LIMIT_S", HANG_LIMIT_S)
        expected = f"did not finish in {HANG_LIMIT_S:g} s"
    feedback = check(variant)
    assert not feedback.passed, feedback
    assert_verdict(feedback, expected)


def assert_three_named(table: dict) -> None:
    """A checker names at least three distinct slips (a skeleton's "not done yet" does not count)."""
    named = {expected for _, expected in table.values()} - {"not done yet"}
    assert len(named) >= 3, named


def two_checker_tests(exercises: dict, models: dict) -> tuple:
    """The tests an exercise with a forward and a backward checker runs on its wrong variants and symptoms.

    Args:
        exercises: "forward"/"backward" → (checker, its wrong-variant table {name: (kernel, expected words)}).
        models: the same keys → (the symptoms, the cases function, the float64 oracle) of that checker.

    Returns:
        Three test functions, for the test module to bind to their names: each wrong variant is named in its own
        words (and no other variant's), every variant has its own words, every symptom differs from the oracle.
    """

    @covered_by_isolate_on_a_gpu
    @pytest.mark.parametrize(("exercise", "name"), [(e, n) for e, (_, table) in exercises.items() for n in table])
    def test_each_wrong_variant_is_named_in_its_own_words(exercise, name):
        check, table = exercises[exercise]
        feedback = feedback_of(check, table[name][0])
        assert not feedback.passed, feedback
        assert_verdict(feedback, table[name][1])
        others = [other for other, (_, words) in table.items() if other != name and contains(str(feedback), words)]
        assert others == [], (name, others)

    @pytest.mark.parametrize("exercise", exercises)
    def test_every_variant_has_its_own_expected_words(exercise):
        words = [w for _, w in exercises[exercise][1].values()]
        assert len(words) == len(set(words))

    @pytest.mark.parametrize("exercise", models)
    def test_every_symptom_differs_from_the_oracle_on_some_case(exercise):
        symptoms, cases, oracle = models[exercise]
        cases = cases()
        for symptom in symptoms:
            assert any(not torch.allclose(model, oracle(c)[name], equal_nan=False)
                       for c in cases for name, model in symptom.model(c).items()), symptom.summary

    return (test_each_wrong_variant_is_named_in_its_own_words, test_every_variant_has_its_own_expected_words,
            test_every_symptom_differs_from_the_oracle_on_some_case)


@functools.lru_cache(maxsize=None)
def feedback_of(check, answer) -> Feedback:
    """The checker's feedback on one answer, computed once per test session (a kernel's check takes seconds)."""
    return check(answer)


def never_ends(*args, **kwargs):
    """A learner's function that never returns."""
    while True:
        pass


class Weird:
    """A return value that breaks every comparison."""

    def __eq__(self, other):
        raise RuntimeError("no comparisons")

    __hash__ = None

    def __float__(self):
        raise RuntimeError("no float")

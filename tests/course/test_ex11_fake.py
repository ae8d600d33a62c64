"""Exercise 11 · the fake implementation: the solution passes, each wrong variant gets its own message.

Wrong variants: wrong_variants_fake_and_tuning.FAKE. A skeleton gets "not done yet"; the checker
never raises, whatever the learner's code does.

Source: solutions/11_extending_the_contract.ipynb.
"""

from __future__ import annotations

import pytest

import wrong_variants_fake_and_tuning as wv
from checker_support import Weird, assert_passes, assert_verdict, never_ends
from rmsnorm_course import checkers
from rmsnorm_course.checkers import Feedback, isolate


def test_the_solution_passes():
    assert_passes(checkers.check_fake_implementation(wv.fake_forward, wv.fake_backward))


def test_the_package_fakes_pass_too():
    from rmsnorm.autograd import _backward_op, _forward_op

    feedback = checkers.check_fake_implementation(
        lambda x, g, e: _forward_op(x, g, e), lambda x, g, r, dy: _backward_op(x, g, r, dy))
    assert feedback.passed, feedback


@pytest.mark.parametrize("name", wv.FAKE)
def test_each_wrong_variant_is_named(name):
    (fwd, bwd), expected = wv.FAKE[name]
    assert_verdict(checkers.check_fake_implementation(fwd, bwd), expected)


def test_the_messages_are_distinct():
    messages = {name: str(checkers.check_fake_implementation(*pair)) for name, (pair, _) in wv.FAKE.items()}
    wrong = [m for m in messages.values() if "not done yet" not in m]
    assert len(set(wrong)) == len(wrong) >= 4, messages


def test_the_forward_alone():
    assert checkers.check_fake_implementation(wv.fake_forward).passed
    feedback = checkers.check_fake_implementation(wv._fwd_rstd_in_x_dtype)
    assert feedback.status == "wrong" and "rstd is float16" in feedback.message, feedback


@pytest.mark.parametrize("value", [None, Weird(), float("nan"), "a string", (1, 2, 3), object()])
def test_the_checker_never_raises_whatever_is_returned(value):
    results = [
        checkers.check_fake_implementation(lambda x, g, e: value, wv.fake_backward),
        checkers.check_fake_implementation(wv.fake_forward, lambda x, g, r, dy: value),
        checkers.check_fake_implementation(lambda x, g, e: (value, value), wv.fake_backward),
    ]
    assert all(isinstance(f, Feedback) and f.status == "wrong" for f in results), results


def test_code_that_never_returns_is_stopped_with_a_message(monkeypatch):
    monkeypatch.setattr(isolate, "CASE_TIME_LIMIT_S", 4.0)
    feedback = checkers.check_fake_implementation(never_ends)
    assert feedback.status == "wrong" and "did not finish in 4 s" in feedback.message, feedback

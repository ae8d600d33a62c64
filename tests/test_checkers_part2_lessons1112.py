"""The checkers of exercises 11 and 12: the solution passes, each wrong variant gets its own message.

Wrong variants: tests/wrong_variants_part2_lessons1112.py. A skeleton gets
"not done yet"; no checker raises, whatever the learner's code does.

Source: solutions/11_extending_the_contract.ipynb, solutions/12_tuning_and_side_by_side.ipynb.
"""

from __future__ import annotations

import pytest

import wrong_variants_part2_lessons1112 as wv
from rmsnorm import checkers
from rmsnorm.checkers import Feedback


def test_exercise_11_solution_passes():
    feedback = checkers.check_fake_implementation(wv.fake_forward, wv.fake_backward)
    assert isinstance(feedback, Feedback) and feedback.passed, feedback


def test_exercise_11_the_package_fakes_pass_too():
    from rmsnorm.fast.autograd import _backward_op, _forward_op

    feedback = checkers.check_fake_implementation(
        lambda x, g, e: _forward_op(x, g, e), lambda x, g, r, dy: _backward_op(x, g, r, dy))
    assert feedback.passed, feedback


@pytest.mark.parametrize("name", wv.FAKE)
def test_exercise_11_each_wrong_variant_is_named(name):
    (fwd, bwd), expected = wv.FAKE[name]
    feedback = checkers.check_fake_implementation(fwd, bwd)
    assert feedback.status == ("not done yet" if expected == "not done yet" else "wrong"), feedback
    assert expected in str(feedback), feedback


def test_exercise_11_messages_are_distinct():
    messages = {name: str(checkers.check_fake_implementation(*pair)) for name, (pair, _) in wv.FAKE.items()}
    wrong = [m for m in messages.values() if "not done yet" not in m]
    assert len(set(wrong)) == len(wrong) >= 4, messages


def test_exercise_11_forward_alone():
    assert checkers.check_fake_implementation(wv.fake_forward).passed
    feedback = checkers.check_fake_implementation(wv._fwd_rstd_in_x_dtype)
    assert feedback.status == "wrong" and "rstd is float16" in feedback.message, feedback

"""The checkers of exercises 11 and 12: the solution passes, each wrong variant gets its own message.

Wrong variants: tests/course/wrong_variants_fake_and_tuning.py. A skeleton gets
"not done yet"; no checker raises, whatever the learner's code does.

Source: solutions/11_extending_the_contract.ipynb, solutions/12_tuning_and_side_by_side.ipynb.
"""

from __future__ import annotations

import pytest

import wrong_variants_fake_and_tuning as wv
from rmsnorm_course import checkers
from rmsnorm_course.checkers import Feedback


def test_exercise_11_solution_passes():
    feedback = checkers.check_fake_implementation(wv.fake_forward, wv.fake_backward)
    assert isinstance(feedback, Feedback) and feedback.passed, feedback


def test_exercise_11_the_package_fakes_pass_too():
    from rmsnorm.autograd import _backward_op, _forward_op

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


# --------------------------------------------------------------------------- exercise 12


def _fast_csv():
    import json

    import pandas as pd

    from rmsnorm_lab import RESULTS_DIR

    env = json.loads((RESULTS_DIR / "fast_environment.json").read_text())
    return pd.read_csv(RESULTS_DIR / "fast.csv"), env["copy_rate_gbps"], pd.read_csv(RESULTS_DIR / "fast_tuning.csv")


SHAPES = [
    (65536, 256, "float16", "backward"),
    (32768, 4096, "bfloat16", "backward"),
    (4096, 4096, "float32", "forward"),
]


def test_exercise_12_solutions_pass():
    fast, copy, tuning = _fast_csv()
    feedback = checkers.check_copy_fraction(wv._fraction(), fast, copy)
    assert feedback.passed, feedback
    feedback = checkers.check_pick_config(wv._pick(), tuning, SHAPES)
    assert feedback.passed, feedback


@pytest.mark.parametrize("name", wv.COPY_FRACTION)
def test_exercise_12_each_wrong_copy_fraction_is_named(name):
    fn, expected = wv.COPY_FRACTION[name]
    fast, copy, _ = _fast_csv()
    feedback = checkers.check_copy_fraction(fn, fast, copy)
    assert feedback.status == ("not done yet" if expected == "not done yet" else "wrong"), feedback
    assert expected in str(feedback), feedback


@pytest.mark.parametrize("name", wv.PICK_CONFIG)
def test_exercise_12_each_wrong_pick_is_named(name):
    fn, expected = wv.PICK_CONFIG[name]
    _, _, tuning = _fast_csv()
    feedback = checkers.check_pick_config(fn, tuning, SHAPES)
    assert feedback.status == ("not done yet" if expected == "not done yet" else "wrong"), feedback
    assert expected in str(feedback), feedback


def test_exercise_12_messages_are_distinct():
    fast, copy, tuning = _fast_csv()
    for table, check in ((wv.COPY_FRACTION, lambda f: checkers.check_copy_fraction(f, fast, copy)),
                         (wv.PICK_CONFIG, lambda f: checkers.check_pick_config(f, tuning, SHAPES))):
        summaries = {name: check(fn).message.split(":")[0] for name, (fn, expected) in table.items()
                     if expected != "not done yet"}
        distinct = {name: summary for name, summary in summaries.items() if name not in wv.SAME_MESSAGE}
        assert len(set(distinct.values())) == len(distinct) >= 4, summaries
        for name, same_as in wv.SAME_MESSAGE.items():
            assert name not in summaries or summaries[name] == summaries[same_as], summaries


def test_exercise_12_checker_on_a_wrong_row_of_the_csv():
    fast, copy, _ = _fast_csv()
    tampered = fast.copy()
    tampered.loc[3, "copy_fraction"] *= 1.01
    feedback = checkers.check_copy_fraction(wv._fraction(), tampered, copy)
    assert feedback.status == "wrong" and "the file says" in feedback.message, feedback


def test_the_toy_sweep_gives_each_slip_its_own_winner():
    from rmsnorm_course.checkers.ex12_reading import TOY_SHAPE, toy_timings

    toy = toy_timings()
    winners = {name: tuple(wv.PICK_CONFIG[name][0](toy, *TOY_SHAPE).values())
               for name in ("warm samples", "mean", "fastest sample", "slowest", "shape not filtered",
                            "pass not filtered")}
    winners["right"] = tuple(wv._pick()(toy, *TOY_SHAPE).values())
    assert len(set(winners.values())) == len(winners), winners


def test_exercise_12_rows_without_a_time_and_shapes_not_swept_are_skipped():
    fast, copy, tuning = _fast_csv()
    failed = fast.copy()
    failed.loc[0, ["us", "tbps", "copy_fraction"]] = float("nan")  # a provider that failed its oracle check
    failed.loc[0, "check"] = "AssertionError: y"
    assert checkers.check_copy_fraction(wv._fraction(), failed, copy).passed
    feedback = checkers.check_pick_config(wv._pick(), tuning, [(3, 5, "float16", "forward"), *SHAPES])
    assert feedback.passed and "3×5" not in feedback.message, feedback


class _Weird:
    """A return value that breaks every comparison."""

    def __eq__(self, other):
        raise RuntimeError("no comparisons")

    __hash__ = None

    def __float__(self):
        raise RuntimeError("no float")


@pytest.mark.parametrize("value", [None, _Weird(), float("nan"), "a string", (1, 2, 3), object()])
def test_checkers_never_raise_whatever_is_returned(value):
    results = [
        checkers.check_fake_implementation(lambda x, g, e: value, wv.fake_backward),
        checkers.check_fake_implementation(wv.fake_forward, lambda x, g, r, dy: value),
        checkers.check_fake_implementation(lambda x, g, e: (value, value), wv.fake_backward),
        checkers.check_copy_fraction(lambda *args: value),
        checkers.check_pick_config(lambda *args: value),
        checkers.check_pick_config(lambda *args: {"BLOCK_M": value, "BLOCK_N": 1, "num_warps": 1,
                                                  "programs_per_sm": 1, "num_stages": 1}),
    ]
    assert all(isinstance(f, Feedback) and f.status == "wrong" for f in results), results


@pytest.mark.parametrize("exercise", ["11", "12.1", "12.2"])
def test_code_that_never_returns_is_stopped_with_a_message(exercise, monkeypatch):
    from rmsnorm_course.checkers import isolate

    monkeypatch.setattr(isolate, "CASE_TIME_LIMIT_S", 4.0)

    def forever(*args, **kwargs):
        while True:
            pass

    check = {"11": checkers.check_fake_implementation, "12.1": checkers.check_copy_fraction,
             "12.2": checkers.check_pick_config}[exercise]
    feedback = check(forever)
    assert feedback.status == "wrong" and "did not finish in 4 s" in feedback.message, feedback


def test_an_error_inside_pandas_names_the_learners_line_not_pandas():
    def pick(timings, M, N, dtype, pass_):
        return timings["L2"]  # a KeyError raised inside pandas' Cython code

    feedback = checkers.check_pick_config(pick)
    assert feedback.status == "wrong" and "KeyError" in feedback.message, feedback
    assert '`return timings["L2"]' in feedback.message and ".pxi" not in feedback.message, feedback

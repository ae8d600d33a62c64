"""Exercise 12 · reading the tables: the copy fraction and the config pick pass, each wrong variant is named.

Wrong variants: wrong_variants_fake_and_tuning.COPY_FRACTION and PICK_CONFIG, judged on the
committed results (results/h200/fast.csv, fast_tuning.csv). A skeleton gets "not done yet"; the
checkers never raise, whatever the learner's code does.

Source: solutions/12_tuning_and_side_by_side.ipynb.
"""

from __future__ import annotations

import pytest

import wrong_variants_fake_and_tuning as wv
from checker_support import Weird, assert_verdict, never_ends
from rmsnorm_course import checkers
from rmsnorm_course.checkers import Feedback, isolate
from verdict_variants import SHAPES, _fast_csv  # the tables and shapes the verdict fixture records too


def test_the_solutions_pass():
    fast, copy, tuning = _fast_csv()
    feedback = checkers.check_copy_fraction(wv._fraction(), fast, copy)
    assert feedback.passed, feedback
    feedback = checkers.check_pick_config(wv._pick(), tuning, SHAPES)
    assert feedback.passed, feedback


@pytest.mark.parametrize("name", wv.COPY_FRACTION)
def test_each_wrong_copy_fraction_is_named(name):
    fn, expected = wv.COPY_FRACTION[name]
    fast, copy, _ = _fast_csv()
    assert_verdict(checkers.check_copy_fraction(fn, fast, copy), expected)


@pytest.mark.parametrize("name", wv.PICK_CONFIG)
def test_each_wrong_pick_is_named(name):
    fn, expected = wv.PICK_CONFIG[name]
    _, _, tuning = _fast_csv()
    assert_verdict(checkers.check_pick_config(fn, tuning, SHAPES), expected)


def test_the_messages_are_distinct():
    fast, copy, tuning = _fast_csv()
    for table, check in ((wv.COPY_FRACTION, lambda f: checkers.check_copy_fraction(f, fast, copy)),
                         (wv.PICK_CONFIG, lambda f: checkers.check_pick_config(f, tuning, SHAPES))):
        summaries = {name: check(fn).message.split(":")[0] for name, (fn, expected) in table.items()
                     if expected != "not done yet"}
        distinct = {name: summary for name, summary in summaries.items() if name not in wv.SAME_MESSAGE}
        assert len(set(distinct.values())) == len(distinct) >= 4, summaries
        for name, same_as in wv.SAME_MESSAGE.items():
            assert name not in summaries or summaries[name] == summaries[same_as], summaries


def test_the_checker_on_a_wrong_row_of_the_csv():
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


def test_rows_without_a_time_and_shapes_not_swept_are_skipped():
    fast, copy, tuning = _fast_csv()
    failed = fast.copy()
    failed.loc[0, ["us", "tbps", "copy_fraction"]] = float("nan")  # a provider that failed its oracle check
    failed.loc[0, "check"] = "AssertionError: y"
    assert checkers.check_copy_fraction(wv._fraction(), failed, copy).passed
    feedback = checkers.check_pick_config(wv._pick(), tuning, [(3, 5, "float16", "forward"), *SHAPES])
    assert feedback.passed and "3×5" not in feedback.message, feedback


@pytest.mark.parametrize("value", [None, Weird(), float("nan"), "a string", (1, 2, 3), object()])
def test_the_checkers_never_raise_whatever_is_returned(value):
    results = [
        checkers.check_copy_fraction(lambda *args: value),
        checkers.check_pick_config(lambda *args: value),
        checkers.check_pick_config(lambda *args: {"BLOCK_M": value, "BLOCK_N": 1, "num_warps": 1,
                                                  "programs_per_sm": 1, "num_stages": 1}),
    ]
    assert all(isinstance(f, Feedback) and f.status == "wrong" for f in results), results


@pytest.mark.parametrize("check", [checkers.check_copy_fraction, checkers.check_pick_config], ids=["12.1", "12.2"])
def test_code_that_never_returns_is_stopped_with_a_message(check, monkeypatch):
    monkeypatch.setattr(isolate, "CASE_TIME_LIMIT_S", 4.0)
    feedback = check(never_ends)
    assert feedback.status == "wrong" and "did not finish in 4 s" in feedback.message, feedback


def test_an_error_inside_pandas_names_the_learners_line_not_pandas():
    def pick(timings, M, N, dtype, pass_):
        return timings["L2"]  # a KeyError raised inside pandas' Cython code

    feedback = checkers.check_pick_config(pick)
    assert feedback.status == "wrong" and "KeyError" in feedback.message, feedback
    assert '`return timings["L2"]' in feedback.message and ".pxi" not in feedback.message, feedback

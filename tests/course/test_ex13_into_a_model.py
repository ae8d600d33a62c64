"""Exercise 13 · into a model: the solution passes, each wrong variant gets its own message, nothing raises or hangs.

Wrong variants: tests/course/wrong_variants_norm_share.py. The step and kernel tables are the fixture
(tests/data/model_step_fixture/, invented numbers in the benchmark's columns) and, once it is
committed, the H200 run in results/h200/.

Source: solutions/13_into_a_model.ipynb.
"""

from __future__ import annotations

from pathlib import Path

import pytest

import wrong_variants_norm_share as wv
from checker_support import Weird, assert_verdict, never_ends
from rmsnorm_course.checkers.ex13_into_a_model import check_norm_share, toy_profile
from rmsnorm_course.checkers.feedback import Feedback
from rmsnorm_lab import RESULTS_DIR
from rmsnorm_lab.model import STEP_FILE, load_model_kernels, load_model_step

FIXTURE = Path(__file__).resolve().parents[1] / "data" / "model_step_fixture"


def _tables(folder=FIXTURE):
    return load_model_step(folder), load_model_kernels(folder)


def test_the_solution_passes_on_the_small_profile_and_every_row_of_the_fixture():
    step, kernels = _tables()
    feedback = check_norm_share(wv._share(), step, kernels, "the fixture")
    assert feedback.passed and "all 9 timed rows of the fixture" in feedback.message, feedback


@pytest.mark.skipif(not (RESULTS_DIR / STEP_FILE).is_file(), reason="results/h200/model_step.csv not committed yet")
def test_the_solution_passes_on_the_committed_h200_run():
    step, kernels = _tables(RESULTS_DIR)
    assert check_norm_share(wv._share(), step, kernels, "the H200 run").passed


@pytest.mark.parametrize("name", wv.NORM_SHARE)
def test_each_wrong_variant_is_named(name):
    fn, expected = wv.NORM_SHARE[name]
    assert_verdict(check_norm_share(fn, *_tables()), expected)


def test_the_messages_are_distinct():
    step, kernels = _tables()
    summaries = {name: check_norm_share(fn, step, kernels).message.split(":")[0]
                 for name, (fn, expected) in wv.NORM_SHARE.items() if expected != "not done yet"}
    distinct = {name: summary for name, summary in summaries.items() if name not in wv.SAME_MESSAGE}
    assert len(set(distinct.values())) == len(distinct) >= 4, summaries
    for name, same_as in wv.SAME_MESSAGE.items():
        assert summaries[name] == summaries[same_as], summaries


def test_the_small_profile_gives_each_slip_its_own_share():
    shares = {name: fn(toy_profile(), 40.0)[0] for name, (fn, _) in wv.NORM_SHARE.items()
              if name in ("percent", "forward only", "GPU busy time", "host time", "host + GPU time", "warm timings",
                          "per call", "ms and µs")}
    shares["right"] = wv._share()(toy_profile(), 40.0)[0]
    assert shares["right"] == pytest.approx(0.2) and len({round(v, 9) for v in shares.values()}) == len(shares), shares


def test_a_wrong_row_of_the_table_is_named():
    step, kernels = _tables()
    tampered = step.copy()
    tampered.loc[2, "norm_share"] *= 1.01
    feedback = check_norm_share(wv._share(), tampered, kernels, "the fixture")
    assert feedback.status == "wrong" and "on the fixture's row gpu_bound liger eager" in feedback.message, feedback


def test_rows_that_were_not_timed_are_skipped():
    step, kernels = _tables()
    step = step.copy()
    step.loc[0, "check"] = "not run: the time budget would be exceeded (150 s)"
    feedback = check_norm_share(wv._share(), step, kernels, "the fixture")
    assert feedback.passed and "all 8 timed rows" in feedback.message, feedback


WEIRD = [None, (0.2, None), (float("nan"), 1.25), (Weird(), 1.25), "0.2, 1.25", (True, 1.25)]


@pytest.mark.parametrize("value", WEIRD)
def test_the_checker_never_raises_whatever_is_returned(value):
    feedback = check_norm_share(lambda profile, step_ms: value)
    assert isinstance(feedback, Feedback) and feedback.status == "wrong", feedback


def test_code_that_never_returns_is_stopped_with_a_message(monkeypatch):
    from rmsnorm_course.checkers import isolate

    monkeypatch.setattr(isolate, "CASE_TIME_LIMIT_S", 4.0)
    feedback = check_norm_share(never_ends)
    assert feedback.status == "wrong" and "did not finish in 4 s" in feedback.message, feedback

"""Exercise 07 · benchmark: the prediction and the reading pass, each wrong reading is named.

Wrong variants: wrong_variants.BENCHMARK. Source: solutions/07_benchmark.ipynb.
"""

from __future__ import annotations

import sys

import cloudpickle
import pytest

import wrong_variants as wv
from checker_support import assert_passes, assert_three_named
from rmsnorm_course import checkers
from rmsnorm_course.checkers import Feedback
from verdict_variants import _prediction, _samples  # the answers the verdict fixture records too

# _prediction_skeleton reaches the checkers' child: by value, as a notebook's function would.
cloudpickle.register_pickle_by_value(sys.modules[__name__])

RIGHT = {
    "prediction": lambda: checkers.check_prediction(_prediction),
    "reading": lambda: checkers.check_benchmark_reading(wv._median(), wv._percent(), _samples(), _prediction),
}


@pytest.mark.parametrize("part", RIGHT)
def test_the_solution_passes(part):
    assert_passes(RIGHT[part]())


@pytest.mark.parametrize("name", wv.BENCHMARK)
def test_each_wrong_benchmark_reading_is_named(name):
    (median_us, percent_change), expected = wv.BENCHMARK[name]
    feedback = checkers.check_benchmark_reading(median_us, percent_change, _samples(), _prediction)
    assert not feedback.passed and expected in str(feedback), feedback


def test_at_least_three_wrong_variants_are_named():
    assert_three_named(wv.BENCHMARK)


def test_a_checker_never_raises_on_a_wrong_samples_table():
    feedback = checkers.check_benchmark_reading(wv._median(), wv._percent(), "not a table", _prediction)
    assert isinstance(feedback, Feedback) and feedback.status == "wrong", feedback


def _prediction_skeleton():
    raise NotImplementedError()


def test_malformed_predictions_are_refused():
    assert checkers.check_prediction(lambda: {"forward": "faster"}).status == "wrong"
    assert checkers.check_prediction(_prediction_skeleton).status == "not done yet"

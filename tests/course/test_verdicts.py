"""The checkers' verdicts are kept: every answer the checker tests build gets the verdict and words of the fixture.

tests/data/verdicts.csv (written by ``python tools/record_verdicts.py``, on the
CPU) holds, for each answer of :func:`verdict_variants.variants` (the
solutions, every wrong variant of tests/course/wrong_variants*.py, the other answers
tests/course/test_ex*.py and the harness tests build), the verdict (passed / wrong / not done yet) and
the Feedback's message. A checker may change its words only with a line in the
fixture's diff.

What varies from run to run is normalised before the comparison
(:func:`verdict_variants.normalise`): temporary folders become ``<tmp>``, the
counter in a mutated kernel's name (``wrong_rmsnorm_forward_kernel_12``) becomes
``_N``, memory addresses ``0x…``, the distance of an access far outside every
tensor (and the buffer it is nearest to) ``at <distance> from <tensor>'s
buffer``, and newlines a literal ``\\n``. The answers that never end run under
a time limit of :data:`verdict_variants.HANG_LIMIT_S` s.

The fixture is the CPU's (Triton's interpreter); on a GPU machine the verdicts
are the same (tests/course/test_isolate.py, gpu), the words of a few may not be, so
the test runs where the interpreter judges alone.

Source: solutions/*.ipynb.
"""

from __future__ import annotations

import pytest

import verdict_variants
from rmsnorm_course.checkers import isolate

ROWS = verdict_variants.fixture_rows()
VARIANTS = {(exercise, variant): (run, hangs) for exercise, variant, run, hangs in verdict_variants.variants()}

on_the_cpu = pytest.mark.skipif(not isolate.interpreted(), reason="the fixture holds the CPU's (interpreter's) words")


def test_the_fixture_names_every_answer_once():
    assert list(ROWS) == list(VARIANTS)


@on_the_cpu
@pytest.mark.parametrize("key", list(VARIANTS), ids=" · ".join)
def test_each_answer_gets_the_verdict_and_the_words_of_the_fixture(key, monkeypatch):
    run, hangs = VARIANTS[key]
    if hangs:
        monkeypatch.setattr(isolate, "CASE_TIME_LIMIT_S", verdict_variants.HANG_LIMIT_S)
    feedback = run()
    want = ROWS[key]
    assert (feedback.status, verdict_variants.normalise(feedback.message)) == (want["verdict"], want["message"])

"""The shape of an error no symptom names (rmsnorm_course.checkers.shapes), on made-up outputs.

The kernel variants of tests/course/wrong_variants*.py show each pattern through a checker; these
show the patterns no kernel variant there reaches (twice, a permutation) and that nothing is
claimed where no pattern holds on every failing case.
"""

from __future__ import annotations

import torch

from rmsnorm_course.checkers.diagnose import Case, Run, diagnose
from rmsnorm_course.checkers.shapes import describe

TOL = {"atol": 1e-5, "rtol": 1e-4}


def _runs(wrong, shapes=((4, 8), (3, 16), (1, 8))):
    runs = []
    for i, (M, N) in enumerate(shapes):
        g = torch.Generator().manual_seed(i)
        x = torch.randn(M, N, generator=g, dtype=torch.float64)
        case = Case(f"case {i}", {"x": x.float()})
        runs.append(Run(case, {"y": wrong(x)}, {"y": x}))
    return runs


def _describe(wrong, **kwargs):
    return describe(_runs(wrong, **kwargs), "y", lambda run: TOL)


def test_twice_and_sign():
    assert _describe(lambda x: 2 * x).startswith("y is exactly twice the right value everywhere")
    assert _describe(lambda x: -x).startswith("y has the wrong sign")


def test_row_and_column_factors():
    assert _describe(lambda x: x * torch.arange(1, x.shape[0] + 1)[:, None] * 1.5).startswith(
        "each row of y is off by one factor")
    assert _describe(lambda x: x * torch.linspace(0.5, 2, x.shape[1])[None, :]).startswith(
        "each column of y is off by one factor")


def test_rows_and_columns_from():
    def rows_from_two(x):
        y = x.clone()
        y[2:] += 1
        return y

    assert "every row from row 2 on is wrong" in _describe(rows_from_two, shapes=((4, 8), (3, 16)))

    def columns_from_four(x):
        y = x.clone()
        y[:, 4:] += 1
        return y

    assert "the columns from column 4 on are wrong" in _describe(columns_from_four)


def test_permutation():
    assert "the right values, but in the wrong places" in _describe(lambda x: x.flip(-1))


def test_no_pattern_keeps_the_numbers():
    def noise(x):
        return x + 0.01 * torch.sin(7 * x) * torch.arange(x.numel()).reshape(x.shape)

    assert _describe(noise) is None
    feedback = diagnose("t", _runs(noise), (), "fine", parts={})
    assert feedback.message.startswith("case 0 gives y[0, 1]") and "(tolerance: atol" in feedback.message


def test_the_first_mismatch_follows_the_description():
    feedback = diagnose("t", _runs(lambda x: -x), (), "fine", parts={})
    assert feedback.message.startswith("y has the wrong sign")
    assert "For example, case 0 gives y[0, 0] = " in feedback.message
    assert diagnose("t", _runs(lambda x: -x), (), "fine").message.startswith("case 0 gives")  # no parts: as before

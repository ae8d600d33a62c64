"""The shape of an error no symptom names (rmsnorm_course.checkers.shapes), on made-up outputs.

The kernel variants of tests/course/wrong_variants*.py show each pattern through a checker; these
show the patterns no kernel variant there reaches (twice, a permutation, a store into row 0 in a
GPU's order, inf alone on a row of zeros) and that nothing is claimed where no pattern holds on
every failing case.
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


def _stored(rows_of, shapes=((4, 8), (3, 16), (1, 8)), zero_first=False):
    """Runs of made-up kernels: ``rows_of(right y)`` is what the kernel left in y (x's first row zeroed if asked)."""
    runs = []
    for i, (M, N) in enumerate(shapes):
        x = torch.randn(M, N, generator=torch.Generator().manual_seed(i), dtype=torch.float64)
        if zero_first and i == 0:
            x[0] = 0
        runs.append(Run(Case(f"case {i}", {"x": x.float()}), {"y": rows_of(x.float())}, {"y": x}))
    return runs


def _only_row_0(k):
    def left(y):
        out = torch.full_like(y, float("nan"))
        out[0] = y[min(k, y.shape[0] - 1)]
        return out
    return left


def test_a_store_without_the_row_offset_is_named_whatever_row_stored_last():
    # On a GPU the programs store in any order: row 0 may hold any row's values, not the last one's.
    message = diagnose("t", _stored(_only_row_0(1)), (), "fine", parts={}).message
    assert "Only row 0 of y is ever written" in message and "row 0 holds row 1's values, not its own" in message
    assert "The store of y lacks the row offset" in message


def test_a_store_of_wrong_values_into_row_0_is_named_and_says_so():
    def scrambled(y):
        out = torch.full_like(y, float("nan"))
        out[0] = y[0] * 3 + 1
        return out

    message = diagnose("t", _stored(scrambled), (), "fine", parts={}).message
    assert "row 0 holds none of the rows' right values" in message and "lacks the row offset" in message


def test_row_0_right_and_the_others_unwritten_is_not_a_store_into_row_0():
    # Every program on row 0 (`tl.program_id(1)` on a 1-D grid): row 0 right in every case, not every row stored
    # in row 0; rows 0 and 1 right, the rest unwritten, are the last rows left out.
    message = diagnose("t", _stored(_only_row_0(0)), (), "fine", parts={}).message
    assert "it holds row 0's right values: every program handles row 0" in message
    assert "`row = tl.program_id(0)`" in message and "lacks the row offset" not in message

    def first_two(y):
        out = y.clone()
        out[2:] = float("nan")
        return out

    message = diagnose("t", _stored(first_two), (), "fine", parts={}).message
    assert "Only the last rows (rows 2…3) are NaN" in message and "program_id" not in message


def test_inf_exactly_on_the_rows_of_zeros_is_named():
    def inf_on_zeros(y):
        out = y.clone()
        out[(y == 0).all(-1)] = float("inf")
        return out

    message = diagnose("t", _stored(inf_on_zeros, zero_first=True), (), "fine", parts={}).message
    assert message.startswith("case 0: y at rows 0, columns 0…7 is inf.")
    assert "exactly on the rows whose x is all zeros (row 0 of case 0)" in message
    assert "eps is missing where rstd is computed, or rstd is computed instead of loaded" in message
    # NaN on another row than the zeros is not that slip.
    def nan_elsewhere(y):
        out = y.clone()
        out[-1] = float("nan")
        return out

    assert "all zeros" not in diagnose("t", _stored(nan_elsewhere, zero_first=True), (), "fine", parts={}).message

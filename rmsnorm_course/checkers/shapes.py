"""The shape of an error no symptom names: which part of the result is off, and how, over every case.

When a learner's outputs match no symptom, the first mismatching number alone tells them little.
:func:`describe` looks at the whole wrong output on every failing case and names the pattern,
with the part of the code that produces such a pattern
(:func:`~rmsnorm_course.checkers.diagnose.diagnose` puts it before that number):

- every value a power of the right one (squared, inverted: what a store holds);
- every value times one factor (the sign flipped, twice, half, or one factor per case);
- only some rows wrong (row 0 right, the others wrong: the row offset; the rows from k on:
  the loop bounds or the grid);
- each row off by one factor (the row's scale: its rstd);
- each column off by one factor, the same down the column (the weight, gamma);
- only the columns from k on wrong (the column mask, the block loop);
- the right values in the wrong places (an address, swapped strides);

and, over the cases, which ones pass: those whose N is a multiple of BLOCK_SIZE (the
padding lanes), those with at most k rows (per-row addressing), or at most k columns.

A pattern is claimed only when it holds on every failing case, within the tolerance the
checker compares with (``torch.testing.assert_close``); otherwise :func:`describe` gives
None and the message stays the first mismatch. An exercise words the parts of its own code
through :attr:`~rmsnorm_course.checkers.spec.ExerciseSpec.parts`: a key of :data:`PARTS`
(or ``"output.key"`` for one output) mapped to its words.

Source: solutions/03-10 (the parts each exercise's kernel has); diagnose.py.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

import torch

#: The generic words for the part of the code behind each pattern (an exercise's ``parts`` override them).
PARTS = {
    "sign": "a sign: a subtraction written the wrong way round, or a term with the wrong sign",
    "factor": "a constant factor or divisor applied to the whole result (N, M, BLOCK_SIZE, a 2 or a ½)",
    "case_factor": "a factor that depends on the case: a divisor such as N or M, or a sum where a mean belongs "
                   "(or the other way round)",
    "row_offset": "the row offset (`row * row_stride`): which row a program reads or writes",
    "rows_from": "the loop bounds or the grid: which rows get a program, or which rows a loop visits",
    "some_rows": "which row a program reads or writes: the row offsets and the loop over rows",
    "row_scale": "the row's scale (its rstd: the mean of the squares, its divisor N, eps) is wrong, "
                 "the per-element part is right",
    "column_factor": "the per-column factor (the weight, gamma: its load or where it multiplies) is wrong, "
                     "the rest is right",
    "columns_from": "the column mask or the loop over blocks: the columns past that point (the last block)",
    "permuted": "an address: the row or column offsets, or two strides swapped",
    "power": "what is stored: the value itself, not a power of it (a product such as `rstd * rstd`, a `1 / …`, or "
             "sqrt where rsqrt belongs)",
    "padded": "whether the padding lanes (the columns from N up to BLOCK_SIZE) enter a result: the loads' `other=0.0`, "
              "the masks, and a mean that divides by N, not by BLOCK_SIZE",
    "few_rows": "the per-row addressing (`row * row_stride`) or the grid",
    "few_columns": "the column offsets or the loop over the columns' blocks",
    # diagnose's words for the last rows left NaN; one program per row (no loop over rows), as in 03, 04, 08, 09
    "last_rows": "each row has its own program (one program per row, no loop over rows), so check what those "
                 "programs address: the column offsets, the same in every row (`cols = tl.arange(0, BLOCK_SIZE)`, "
                 "the row's place coming from `row * row_stride` alone), and the masks they meet, or a load that "
                 "reads NaN from outside the tensors (check its offsets)",
    # diagnose's words for row 0 alone written, and right: one program per row, on a grid of one axis, `(M,)`
    "row_0_alone": "the grid is `(M,)`, one axis, so `tl.program_id(1)` (the index along a second axis) is 0 in "
                   "every program: take the row from axis 0, `row = tl.program_id(0)`",
    # diagnose's words for a store without the row offset (row 0 alone written, holding another row's values)
    "row_store": "each program stores at its own row's offset (`row * row_stride`, as in the loads), so that every row "
                 "is written once",
    # diagnose's words for inf or NaN exactly on the rows of zeros
    "zero_row": "where the kernel computes rstd, eps goes inside the root, added to the mean "
                "(`tl.rsqrt(tl.sum(x * x, axis=0) / N + eps)`); where it is given rstd (`rstd_ptr`, saved by the "
                "forward with eps in it), load it (`tl.load(rstd_ptr + row)`) instead of computing it again",
    # diagnose's words for the (P, N) partial rows left NaN exactly where a program gets no rows (p ≥ M)
    "idle_programs": "store the partial once, after the loop (`tl.store(partial_ptr + pid * N + cols, acc, "
                     "mask=mask)`): a program without rows then writes its zeros",
    "zero": "the sum it is made of: a loop that runs no step adds nothing, and a factor of 0 leaves nothing",
    "zero_one_row": "the bound of the loop over the rows: it must run to M itself (`range(0, M, …)`); one that stops "
                    "short (`range(0, M - 1, …)`) runs no step when M = 1, so nothing is added, and elsewhere skips "
                    "the last rows",
}

_Runs = Sequence  # of diagnose.Run
#: (pattern, split of the cases) where the split adds nothing to the pattern (rows, or columns, again).
_SAID = {(rows, "few_rows") for rows in ("row_offset", "rows_from", "some_rows", "row_scale")} | {
    ("columns_from", "few_columns")} | {
    ("power", split) for split in ("padded", "few_rows", "few_columns")} | {  # a power passes where the value is 1
    ("zero_one_row", split) for split in ("padded", "few_rows", "few_columns")}  # M = 1 says which cases fail


def words(parts: Mapping[str, str] | None, name: str, key: str) -> str:
    """The words for ``key``: the exercise's for this output, its own for every output, or the generic ones."""
    parts = parts or {}
    return parts.get(f"{name}.{key}") or parts.get(key) or PARTS[key]


def describe(runs: _Runs, name: str, tol: Callable, parts: Mapping[str, str] | None = None) -> str | None:
    """A sentence naming the shape of output ``name``'s error over ``runs``, or None where no pattern holds.

    Args:
        runs: every case's Run (actual and expected outputs).
        name: the output described (the first wrong one).
        tol: run -> the tolerance of ``name`` in that run (as the checker compares).
        parts: the exercise's words (see :data:`PARTS`).
    """
    cases = []  # (run, actual, expected) as (rows, columns) float64 on the CPU, of the failing runs
    passing = []
    orientation = _orientation(runs, name)
    for run in runs:
        actual, expected = run.actual.get(name), run.expected.get(name)
        if not isinstance(actual, torch.Tensor) or expected is None or tuple(actual.shape) != tuple(expected.shape):
            return None
        a = actual.detach().to("cpu", torch.float64)
        e = expected.detach().to("cpu", torch.float64)
        if _close(a, e, tol(run)):
            passing.append(run)
            continue
        if not (torch.isfinite(a).all() and torch.isfinite(e).all()):
            return None
        cases.append((run, _two_d(a, orientation), _two_d(e, orientation)))
    if not cases:
        return None
    element = _element_shape(cases, name, tol, parts)
    among = _case_shape(passing, cases, name, parts)
    if element is not None and among is not None and (element[1], among[1]) in _SAID:
        among = None  # which rows (or columns) are wrong says it already
    return " ".join(s[0] for s in (element, among) if s is not None) or None


def _close(a: torch.Tensor, e: torch.Tensor, tol: dict) -> bool:
    try:
        torch.testing.assert_close(a, e, **tol)
    except AssertionError:
        return False
    return True


def _orientation(runs: _Runs, name: str) -> str:
    """'rows' when a 1-D output holds one value per row (rstd), else 'columns' (dgamma: one per column)."""
    for run in runs:
        t = run.expected.get(name)
        if isinstance(t, torch.Tensor) and t.dim() == 1 and run.case.M != run.case.N:
            return "rows" if t.numel() == run.case.M else "columns"
    return "columns"


def _two_d(t: torch.Tensor, orientation: str) -> torch.Tensor:
    if t.dim() == 2:
        return t
    if t.dim() == 1:
        return t[:, None] if orientation == "rows" else t[None, :]
    return t.reshape(1, -1)


def _wrong(a: torch.Tensor, e: torch.Tensor, tol: dict) -> torch.Tensor:
    return ~torch.isclose(a, e, **tol)


def _ratio(a: torch.Tensor, e: torch.Tensor, dim: int | None) -> torch.Tensor:
    """The least-squares factor f with a ≈ f · e, over everything (dim None) or along ``dim``."""
    if dim is None:
        num, den = (a * e).sum(), (e * e).sum()
    else:
        num, den = (a * e).sum(dim, keepdim=True), (e * e).sum(dim, keepdim=True)
    return torch.where(den > 0, num / torch.where(den > 0, den, 1), torch.ones_like(num))


#: Powers of a positive right value a wrong one may be (rstd stored squared, inverted, its square root).
_POWERS = ((2.0, "the square of"), (-1.0, "the inverse of"), (-2.0, "the inverse square of"),
           (0.5, "the square root of"), (-0.5, "the inverse square root of"))


def _element_shape(cases, name: str, tol: Callable, parts) -> tuple[str, str] | None:
    """How the wrong values relate to the right ones, the same way on every failing case."""
    def holds(model) -> bool:
        return all(_close(a, model(a, e), tol(run)) for run, a, e in cases)

    for k, how in _POWERS:
        if all((e > 0).all() and _close(a, e.pow(k), tol(run)) for run, a, e in cases):
            return f"{name} holds {how} the right value on every failing case: check {words(parts, name, 'power')}.", \
                "power"
    factors = [float(_ratio(a, e, None)) for _, a, e in cases]
    if holds(lambda a, e: _ratio(a, e, None) * e):
        if all(abs(f - factors[0]) <= 1e-3 * abs(factors[0]) for f in factors):
            f = factors[0]
            if abs(f + 1) < 1e-3:
                return (f"{name} has the wrong sign: every value is the right one times −1: "
                        f"check {words(parts, name, 'sign')}."), "sign"
            if abs(f - 2) < 1e-3 or abs(f - 0.5) < 1e-3:
                how = "twice" if f > 1 else "half"
                return (f"{name} is exactly {how} the right value everywhere: "
                        f"check {words(parts, name, 'factor')}."), "factor"
            if abs(f) < 1e-9:
                return _zero(cases, name, parts)
            return (f"{name} is {f:.4g} times the right value everywhere: one factor multiplies the whole result: "
                    f"check {words(parts, name, 'factor')}."), "factor"
        shown = ", ".join(f"{f:.4g}" for f in factors[:4]) + ("…" if len(factors) > 4 else "")
        return (f"{name} is off by one factor per case ({shown}): "
                f"check {words(parts, name, 'case_factor')}."), "case_factor"
    rows = _wrong_rows(cases, tol)
    if rows is not None:
        template, key = rows
        scaled = any(a.shape[1] > 1 for _, a, _ in cases) and holds(lambda a, e: _ratio(a, e, 1) * e)
        extra = ", each off by one factor (the per-element part is right)" if scaled else ""
        return template.format(name=name, part=words(parts, name, key), extra=extra), key
    two_columns = any(a.shape[1] > 1 for _, a, _ in cases)
    if two_columns and holds(lambda a, e: _ratio(a, e, 1) * e):
        return f"each row of {name} is off by one factor: {words(parts, name, 'row_scale')}.", "row_scale"
    two_rows = any(a.shape[0] > 1 for _, a, _ in cases)
    if two_rows and holds(lambda a, e: _ratio(a, e, 0) * e):
        return (f"each column of {name} is off by one factor, the same in every row: "
                f"{words(parts, name, 'column_factor')}."), "column_factor"
    columns = _wrong_columns(cases, tol)
    if columns is not None:
        return columns.format(name=name, part=words(parts, name, "columns_from")), "columns_from"
    if all(_close(a.reshape(-1).sort().values, e.reshape(-1).sort().values, tol(run)) for run, a, e in cases):
        return (f"{name} holds the right values, but in the wrong places (the same numbers, moved): check "
                f"{words(parts, name, 'permuted')}."), "permuted"
    return None


def _zero(cases, name: str, parts) -> tuple[str, str]:
    """Words for an output that is 0 on every failing case: nothing added; the row loop's bound where only M = 1
    fails."""
    if all(run.case.M == 1 for run, _, _ in cases):
        return (f"{name} is 0 on every failing case, and every failing case has one row (M = 1): nothing was "
                f"added for that row: check {words(parts, name, 'zero_one_row')}."), "zero_one_row"
    return f"{name} is 0 on every failing case: nothing was added to it: check {words(parts, name, 'zero')}.", "zero"


def _wrong_rows(cases, tol: Callable) -> tuple[str, str] | None:
    """'row 0 … is right, …' when every failing case has right rows and wrong rows, in one of three layouts."""
    layouts = set()
    firsts = set()
    for run, a, e in cases:
        wrong = _wrong(a, e, tol(run)).any(1)
        if a.shape[0] < 2 or wrong.all() or a.shape[1] < 2:
            return None
        first = int(torch.nonzero(wrong)[0])
        if wrong[first:].all():
            layouts.add("row 0 right" if first == 1 else "from")
            firsts.add(first)
        else:
            layouts.add("some")
    if layouts == {"row 0 right"}:
        return "row 0 of {name} is right and every other row is wrong{extra}: check {part}.", "row_offset"
    if layouts <= {"row 0 right", "from"}:
        where = "row " + " or ".join(map(str, sorted(firsts))) + (" (by case)" if len(firsts) > 1 else "")
        return ("the first rows of {name} are right and every row from " + where + " on is wrong{extra}: check {part}.",
                "rows_from")
    return "some rows of {name} are right and others wrong{extra}: check {part}.", "some_rows"


def _wrong_columns(cases, tol: Callable) -> str | None:
    """'… the columns from k on are wrong' when in every failing case the columns before k are right and (nearly)
    all from k on are wrong."""
    firsts = set()
    for run, a, e in cases:
        wrong = _wrong(a, e, tol(run)).any(0)
        if a.shape[1] < 2 or wrong.all():
            return None
        first = int(torch.nonzero(wrong)[0])
        if first == 0 or wrong[first:].double().mean() < 0.9:  # a float16 value may land right by chance
            return None
        firsts.add(first)
    where = "column " + " or ".join(map(str, sorted(firsts))) + (" (by case)" if len(firsts) > 1 else "")
    return "the first columns of {name} are right and the columns from " + where + " on are wrong: check {part}."


def _case_shape(passing, cases, name: str, parts) -> tuple[str, str] | None:
    """Which cases pass, when exactly one property tells them apart: N fills its blocks, few rows, few columns.

    Each property is claimed when every failing case lacks it and at least one passing case has it
    (so every case that has it passes); where two properties would explain the split, none is named.
    """
    failing = [run for run, _, _ in cases]
    if not passing or all(r.case.row_stride for r in failing):
        return None  # none passes, or only the cases with a row stride fail: the checker's stride message says it
    rows, columns = min(r.case.M for r in failing) - 1, min(r.case.N for r in failing) - 1
    found = {}
    if not any(r.case.N % r.case.block_size == 0 for r in failing) and any(
            r.case.N % r.case.block_size == 0 for r in passing):
        found["padded"] = ("every case whose N fills its blocks exactly (a multiple of BLOCK_SIZE) passes, and "
                           "every failing case ends in a partial block")
    if any(r.case.M <= rows for r in passing):
        found["few_rows"] = f"every case of {'one row' if rows == 1 else f'at most {rows} rows'} passes"
    if any(r.case.N <= columns for r in passing):
        found["few_columns"] = f"every case of at most {columns} columns passes"
    if len(found) != 1:
        return None
    (key, text), = found.items()
    return f"{text[0].upper()}{text[1:]}: check {words(parts, name, key)}.", key

"""Diagnose by symptom: compare a learner's outputs with the right ones and with known wrong variants.

Each exercise declares its cases (a handful of cheap shapes: M = 1, M = 17,
N = 256 = BLOCK_SIZE, N = 257, a float16 case), the correct outputs of each
case (the float64 oracle), and its *symptoms*: the outputs a classic wrong
variant would produce (÷BLOCK_SIZE, no r³ term, a mean instead of a sum…),
computed in float64 with PyTorch. When the learner's outputs match a symptom on
every case, the feedback names that mistake, with the numbers of the case that
shows it best; otherwise it names the first mismatching case, element and values, after words from the
symptom side where they fit: a result stored rounded to 16 bits (:mod:`.precision`), the formula's terms
(an exercise's ``terms``), the shape of the error (:mod:`.shapes`), an error of a 16-bit rounding's size.
A value still NaN (or inf) is told apart by where it lies, over every case: only
row 0 written, holding another row's values (a store without the row offset),
inf or NaN on exactly the rows of zeros (rstd without eps, or computed where it is
given), the last rows or the last columns unwritten (a grid, a bound, a block width).

Every closeness decision goes through ``torch.testing.assert_close`` with the
declared tolerances of :data:`rmsnorm.testing.TOLERANCES` (float64 outputs:
``atol=1e-12, rtol=1e-10``).

Source: solutions/*.ipynb; the tolerance table is the original article's.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import torch
import triton

from rmsnorm.testing import TOLERANCES
from . import precision
from .feedback import Feedback, passed, wrong
from .shapes import describe, words

#: Tolerance of float64 outputs (the reference exercise keeps float64 in float64).
FLOAT64_TOLERANCE = {"atol": 1e-12, "rtol": 1e-10}

Outputs = dict[str, torch.Tensor]


@dataclass(frozen=True)
class Case:
    """One input of an exercise check.

    Attributes:
        label: how the feedback names it, e.g. ``"a row of 257 ones"``.
        inputs: the tensors handed to the learner's code (on the device).
        eps: passed with them.
        tolerance: dict(atol=, rtol=) overriding the dtype table (hand computations).
        row_stride: elements between rows of the 2-D tensors a kernel gets (None: N, contiguous);
            the padding between rows holds NaN, so a row offset computed with N instead shows.
    """

    label: str
    inputs: dict[str, torch.Tensor]
    eps: float = 1e-6
    tolerance: dict[str, float] | None = None
    row_stride: int | None = None

    @property
    def x(self) -> torch.Tensor:
        return self.inputs["x"] if "x" in self.inputs else self.inputs["partial"]

    @property
    def N(self) -> int:
        return self.x.shape[-1]

    @property
    def M(self) -> int:
        return self.x.shape[0]

    @property
    def dtype(self) -> torch.dtype:
        return self.x.dtype

    @property
    def stride(self) -> int:
        """Elements between the rows of the case's 2-D tensors (``row_stride``, or N when they are contiguous)."""
        return self.row_stride or self.N

    @property
    def block_size(self) -> int:
        """BLOCK_SIZE the launchers use for this case: next_power_of_2(N)."""
        return triton.next_power_of_2(self.N)

    def f64(self, name: str) -> torch.Tensor:
        """Input ``name`` in float64 on the CPU (exact for float16/float32 values)."""
        return self.inputs[name].detach().to("cpu", torch.float64)


@dataclass(frozen=True)
class Symptom:
    """A classic wrong variant, recognised by the outputs it produces.

    Attributes:
        summary: what is wrong, in plain words (starts the message).
        model: case → the float64 outputs of the wrong variant; an output it
            leaves out is the correct one, an output mapped to None is not compared.
        fix: what to change (ends the message).
    """

    summary: str
    model: Callable[[Case], Outputs]
    fix: str = ""


@dataclass
class Run:
    """The learner's outputs on one case, with the correct ones."""

    case: Case
    actual: Outputs
    expected: Outputs


def tolerance(t: torch.Tensor, case: Case | None = None) -> dict[str, float]:
    """The declared tolerance for an output tensor (by its dtype, or the case's override)."""
    if case is not None and case.tolerance is not None:
        return case.tolerance
    return TOLERANCES.get(t.dtype, FLOAT64_TOLERANCE)


def close(actual: torch.Tensor, expected: torch.Tensor, tol: dict[str, float], equal_nan: bool = False) -> bool:
    """True when ``torch.testing.assert_close`` accepts ``actual`` (compared in float64 on the CPU)."""
    if not isinstance(actual, torch.Tensor) or tuple(actual.shape) != tuple(expected.shape):
        return False
    try:
        torch.testing.assert_close(
            actual.detach().to("cpu", torch.float64), expected.detach().to("cpu", torch.float64),
            **tol, equal_nan=equal_nan,
        )
    except AssertionError:
        return False
    return True


def fmt(value: float, digits: int = 3) -> str:
    """A number as the feedback prints it: ``digits`` decimals, or scientific notation when tiny or huge."""
    if value != value or value in (float("inf"), float("-inf")):
        return str(value)
    return f"{value:.{digits}f}" if value == 0 or 0.01 <= abs(value) < 10_000 else f"{value:.{digits}e}"


def fmt_pair(a: float, b: float) -> tuple[str, str]:
    """Two numbers printed with as many digits as it takes to see that they differ (3 to 9)."""
    for digits in range(3, 10):
        shown = fmt(a, digits), fmt(b, digits)
        if shown[0] != shown[1] or a == b:
            return shown
    return fmt(a, 9), fmt(b, 9)


def first_difference(a: torch.Tensor, b: torch.Tensor, tol: dict[str, float]) -> tuple[int, ...]:
    """Index of the first element where ``a`` and ``b`` differ beyond ``tol`` (NaN counts as different)."""
    a64, b64 = a.detach().to("cpu", torch.float64), b.detach().to("cpu", torch.float64)
    bad = ~torch.isclose(a64, b64, **tol, equal_nan=False)
    flat = int(torch.nonzero(bad.reshape(-1))[0]) if bad.any() else 0
    return tuple(int(i) for i in torch.unravel_index(torch.tensor(flat), a64.shape)) if a64.dim() else ()


def element(name: str, t: torch.Tensor, index: tuple[int, ...]) -> str:
    """``"y[0, 3] = 1.411"``, or the whole tensor when it has at most 4 elements."""
    t64 = t.detach().to("cpu", torch.float64)
    if t64.numel() == 1:
        return f"{name} = {fmt(t64.item())}"
    if t64.numel() <= 4:
        return f"{name} = [{', '.join(fmt(v) for v in t64.reshape(-1).tolist())}]"
    position = ", ".join(str(i) for i in index)
    return f"{name}[{position}] = {fmt(t64[index].item())}"


def evidence(run: Run, name: str, index: tuple[int, ...]) -> str:
    """'a row of 257 ones gives y[0, 0] = 1.411, expected 1.000' (more digits when 3 would look equal)."""
    actual, expected = run.actual[name], run.expected[name]
    a64, e64 = actual.detach().to("cpu", torch.float64), expected.detach().to("cpu", torch.float64)
    if a64.numel() > 4:
        got, exp = fmt_pair(a64[index].item(), e64[index].item())
        return f"{run.case.label} gives {name}[{', '.join(str(i) for i in index)}] = {got}, expected {exp}"
    tol = _tol(run, name)
    pairs = [fmt_pair(a, e) if not close(torch.tensor(a), torch.tensor(e), tol) else (fmt(a), fmt(e))
             for a, e in zip(a64.reshape(-1).tolist(), e64.reshape(-1).tolist())]
    got = [p[0] for p in pairs]
    exp = [p[1] for p in pairs]
    if a64.numel() == 1:
        return f"{run.case.label} gives {name} = {got[0]}, expected {exp[0]}"
    return f"{run.case.label} gives {name} = [{', '.join(got)}], expected [{', '.join(exp)}]"


def _matches(run: Run, outputs: Outputs) -> bool:
    """Do the learner's outputs look like ``outputs``, once rounded to the learner's dtype as a store would?"""
    def stored(name, model):
        actual = run.actual.get(name)
        return model.to(actual.dtype) if isinstance(actual, torch.Tensor) else model  # e.g. ±inf past 65504 in float16

    return all(
        model is None or close(run.actual.get(name), stored(name, model), _tol(run, name), equal_nan=True)
        for name, model in outputs.items()
    )


def _tol(run: Run, name: str) -> dict[str, float]:
    return (
        tolerance(run.actual[name], run.case) if isinstance(run.actual.get(name), torch.Tensor) else FLOAT64_TOLERANCE
    )


def _case_passes(run: Run) -> bool:
    return all(close(run.actual.get(name), exp, _tol(run, name)) for name, exp in run.expected.items())


def diagnose(exercise: str, runs: Sequence[Run], symptoms: Sequence[Symptom], success: str,
             parts: Mapping[str, str] | None = None,
             terms: Callable[[Sequence[Run], str], str | None] | None = None, looped_row: bool = False) -> Feedback:
    """Passed, a named symptom, or the first mismatch, for the learner's outputs on every case.

    Args:
        exercise: name shown in the feedback.
        runs: one :class:`Run` per case, actual and expected outputs filled in;
            ``expected`` holds float64 tensors, ``actual`` the learner's.
        symptoms: the wrong variants to recognise, most specific first.
        success: the message when every case passes.
        parts: where no symptom matches, describe the shape of the error (:func:`~.shapes.describe`) with these
            words for the parts of the code (None: no description, the first mismatch only).
        terms: (runs, name of the first wrong output) -> words that take that output apart into its formula's
            terms (:mod:`~.dx_terms`), tried before the shape of the error; None: not tried.

    Returns:
        A :class:`Feedback` (never raises for a wrong answer).
    """
    failing = [run for run in runs if not _case_passes(run)]
    if not failing:
        return passed(exercise, success)
    for symptom in symptoms:
        try:
            models = [symptom.model(run.case) for run in runs]
        except RuntimeError:  # a variant that cannot even run on some case (e.g. a shape error)
            continue
        if all(_matches(run, {**run.expected, **model}) for run, model in zip(runs, models)):
            return wrong(exercise, _symptom_message(symptom, runs, models))
    run = failing[0]
    name = next(n for n, exp in run.expected.items() if not close(run.actual.get(n), exp, _tol(run, n)))
    actual = run.actual.get(name)
    if not isinstance(actual, torch.Tensor) or tuple(actual.shape) != tuple(run.expected[name].shape):
        shape = tuple(actual.shape) if isinstance(actual, torch.Tensor) else type(actual).__name__
        return wrong(
            exercise, f"{run.case.label}: {name} has shape {shape}, expected {tuple(run.expected[name].shape)}."
        )
    nan = torch.isnan(actual.detach().cpu()) & ~torch.isnan(run.expected[name])
    if nan.any():
        hint = (_zero_rows(runs, name, parts) or _every_row_in_row_0(runs, run, name, parts)
                or _row_0_alone(runs, name, parts) or _idle_programs(runs, name, parts)
                or _last_rows_unwritten(nan, run, name, parts) or _last_column_unwritten(runs, name)
                or (_loop_stops_early(nan) if looped_row else _narrow_block(runs, name)))
        return wrong(exercise, f"{run.case.label}: {_unwritten(name, nan)} is still NaN: never written, or computed "
                     f"from NaN.{hint}")
    infinite = torch.isinf(actual.detach().cpu()) & torch.isfinite(run.expected[name])
    if infinite.any() and (hint := _zero_rows(runs, name, parts)):
        return wrong(exercise, f"{run.case.label}: {_unwritten(name, infinite)} is inf.{hint}")
    fp32_ok = all(_case_passes(r) for r in runs if r.case.dtype != torch.float16)
    index = first_difference(actual, run.expected[name], _tol(run, name))
    tol = _tol(run, name)
    message = f"{evidence(run, name, index)} (tolerance: atol {tol['atol']:g}, rtol {tol['rtol']:g})."
    if fp32_ok and run.case.dtype == torch.float16:
        message = ("every float32 case passes, but not float16: " + message
                   + " Convert each loaded value to float32 (`.to(tl.float32)`) before you compute with it.")
    else:
        said = _described(runs, name, parts, terms)
        if said is not None:
            message = f"{said} For example, {message}"
    return wrong(exercise, message)


def _described(runs: Sequence[Run], name: str, parts: Mapping[str, str] | None,
               terms: Callable[[Sequence[Run], str], str | None] | None) -> str | None:
    """Words for output ``name``'s error, from the symptom side: a result stored rounded to 16 bits (its values
    on the 16-bit grid), the formula's terms, the shape of the error, then an error of a 16-bit rounding's size
    (asked last: a wrong formula with so small an error has a shape, which names it better)."""
    tol = lambda r: _tol(r, name)  # noqa: E731 - the checker's tolerance of this output, per run
    said = precision.stored_words(runs, name, tol)
    if said is None and terms is not None:
        said = terms(runs, name)
    if said is None and parts is not None:
        said = describe(runs, name, tol, parts)
    return said or precision.sized_words(runs, name, tol)


def _symptom_message(symptom: Symptom, runs: Sequence[Run], models: Sequence[Outputs]) -> str:
    for run, model in zip(runs, models):  # the first case where the mistake shows
        for name, wrong_out in model.items():
            right, tol = run.expected[name], _tol(run, name)
            if wrong_out is not None and not close(wrong_out, right, tol, equal_nan=False):
                shown = evidence(run, name, first_difference(wrong_out, right, tol))
                return f"{symptom.summary}: {shown}. {symptom.fix}".strip()
    return f"{symptom.summary}. {symptom.fix}".strip()


def _written_width(nan: torch.Tensor) -> int | None:
    """k when exactly the columns from k on are unwritten in some row (and the columns before k in none); else None.

    ``nan``: where the output is NaN, (rows, columns), or the columns' flags alone (1-D).
    """
    columns = nan.reshape(-1, nan.shape[-1]).any(0)
    written = torch.nonzero(~columns).reshape(-1)
    width = int(written[-1]) + 1 if written.numel() else 0
    return width if width and not columns[:width].any() and columns[width:].all() else None


def _last_rows_unwritten(nan: torch.Tensor, run: Run, name: str, parts: Mapping[str, str] | None = None) -> str:
    """Where whole rows at the end are NaN and every row before is right: what leaves those rows out, in the
    exercise's words (``parts["last_rows"]``: a row loop's bound where there is one, the column offsets where each
    program has one row).

    (Rows before that are wrong point elsewhere, a row offset that reads past the tensor, say.)
    """
    if nan.dim() != 2 or nan.shape[0] < 2:
        return ""
    whole = nan.all(-1)
    first = int(whole.logical_not().nonzero().max()) + 1 if bool((~whole).any()) else 0
    if first == 0 or first == nan.shape[0] or bool(nan[:first].any()) or not bool(whole[first:].all()):
        return ""
    if not close(run.actual[name][:first], run.expected[name][:first], _tol(run, name)):
        return ""
    last = nan.shape[0] - 1
    rows = f"row {last}" if first == last else f"rows {first}…{last}"
    return (f" Only the last {rows.split(' ', 1)[0]} ({rows}) {'is' if first == last else 'are'} NaN, every column, "
            f"and every row before is right: {words(parts, name, 'last_rows')}.")


def _idle_programs(runs: Sequence[Run], name: str, parts: Mapping[str, str] | None = None) -> str:
    """Where ``name`` has one row per program (a persistent grid's (P, N) partial) and, in every case, the rows NaN
    where a number was expected are exactly those of the programs that get no rows (p ≥ M), in some case at least
    one: those programs never reach a store inside the row loop. (Not the loop's bound: their rows are the
    partial's, not x's.)"""
    shown = None
    for run in runs:
        actual, P = run.actual.get(name), getattr(run.case, "programs", None)
        if P is None or not isinstance(actual, torch.Tensor) or actual.dim() != 2 or actual.shape[0] != P:
            return ""
        nan = (torch.isnan(actual.detach().cpu()) & ~torch.isnan(run.expected[name])).any(-1)
        idle = torch.arange(P) >= run.case.M
        if not torch.equal(nan, idle):
            return ""
        if shown is None and bool(idle.any()):
            shown = run
    if shown is None:
        return ""
    M, P = shown.case.M, shown.case.programs  # the first failing case: an earlier one with idle programs fails too
    return (f" Those are the partial rows of the programs that get no rows (P = {P} programs, M = {M} rows), and in "
            f"every case only those are NaN: a program whose row loop runs no turn never reaches a store inside the "
            f"loop: {words(parts, name, 'idle_programs')}.")


def _per_row(run: Run, name: str) -> tuple[torch.Tensor, torch.Tensor] | None:
    """(actual, expected) of ``name`` as float64 (rows, values of a row) on the CPU, where its first dimension is
    one per row (of x, or of the programs' partial rows); None where it is not (one value per column: dgamma)."""
    actual, expected = run.actual.get(name), run.expected.get(name)
    if (not isinstance(actual, torch.Tensor) or not isinstance(expected, torch.Tensor)
            or tuple(actual.shape) != tuple(expected.shape) or actual.dim() not in (1, 2)):
        return None
    if actual.dim() == 1 and (actual.numel() != run.case.M or run.case.M == run.case.N):
        return None
    a, e = actual.detach().to("cpu", torch.float64), expected.detach().to("cpu", torch.float64)
    return a.reshape(a.shape[0], -1), e.reshape(e.shape[0], -1)


def _zero_rows(runs: Sequence[Run], name: str, parts: Mapping[str, str] | None = None) -> str:
    """Where, in every case, ``name`` is not finite on exactly the rows whose x is all zeros (and some case has such
    a row): rstd = 1/sqrt(mean(x²)) without eps, inf there (0 · inf = NaN), or computed where it is given.

    Only x's zeros tell this apart: a row of zeros has mean(x²) = 0, which the right rstd meets with eps.
    """
    shown = None
    for run in runs:
        x, pair = run.case.inputs.get("x"), _per_row(run, name)
        if not isinstance(x, torch.Tensor) or x.dim() != 2 or pair is None or pair[0].shape[0] != x.shape[0]:
            return ""
        a, e = pair
        bad = (~torch.isfinite(a) & torch.isfinite(e)).any(-1)
        zero = (x.detach().cpu() == 0).all(-1)
        if not torch.equal(bad, zero):
            return ""
        if shown is None and bool(zero.any()):
            shown = run, torch.nonzero(zero).reshape(-1).tolist()
    if shown is None:
        return ""
    run, rows = shown
    which = f"row {rows[0]}" if len(rows) == 1 else f"rows {_spans(rows)}"
    return (f" In every case, {name} is inf or NaN exactly on the rows whose x is all zeros ({which} of "
            f"{run.case.label}), and finite elsewhere: a row of zeros has mean(x²) = 0, and 1/sqrt(0) = inf (then "
            "0 · inf = NaN): eps is missing where rstd is computed, or rstd is computed instead of loaded: "
            f"{words(parts, name, 'zero_row')}.")


def _every_row_in_row_0(runs: Sequence[Run], run: Run, name: str, parts: Mapping[str, str] | None = None) -> str:
    """Where, in every case of two rows or more, row 0 of ``name`` alone is written, and in some case it does not
    hold row 0's values: every program stores into row 0 (the last to store wins), the store lacks the row offset.

    (Row 0 right in every case, the other rows unwritten, is a grid or an address that leaves rows out:
    :func:`_last_rows_unwritten` names it.)
    """
    row_0_wrong = []
    for each in runs:
        pair = _per_row(each, name)
        if pair is None:
            return ""
        a, e = pair
        if a.shape[0] < 2:
            continue
        if not bool(torch.isnan(a[1:]).all()) or bool(torch.isnan(a[0]).any()):
            return ""
        if not close(a[0], e[0], _tol(each, name)):
            row_0_wrong.append(each)
    if not row_0_wrong:
        return ""
    shown = run if any(each is run for each in row_0_wrong) else row_0_wrong[0]  # Runs compare by identity here
    where = "" if shown is run else f" on {shown.case.label}"
    a, e = _per_row(shown, name)
    held = [k for k in range(1, e.shape[0]) if close(a[0], e[k], _tol(shown, name))]
    if held:
        k = held[-1]
        holds = (f"row 0 holds row {k}'s values{' (the last row)' if k == e.shape[0] - 1 else ''}{where}, not its "
                 "own: every program stores into row 0, and the last one to store wins")
    else:
        holds = (f"row 0 holds none of the rows' right values{where}: every program stores into row 0, and what is "
                 "stored is off as well (a load may lack the row offset too)")
    return (f" Only row 0 of {name} is ever written, in every case of more than one row, and {holds}. The store of "
            f"{name} lacks the row offset: {words(parts, name, 'row_store')}.")


def _row_0_alone(runs: Sequence[Run], name: str, parts: Mapping[str, str] | None = None) -> str:
    """Where, in every case of two rows or more (and there is one), row 0 of ``name`` (and of every other output of
    one row per row) is right and every other row is NaN, every column: every program handles row 0 (its row index
    is 0 everywhere, as `tl.program_id(1)` is on a grid of one axis). Column offsets that leave the rows past 0
    outside their mask leave a row's rstd written: not this."""
    seen = False
    for each in runs:
        for output in each.expected:  # every output of one value (or row) per row: 03's rstd too
            pair = _per_row(each, output)
            if pair is None:
                if output == name:
                    return ""
                continue
            a, e = pair
            if a.shape[0] < 2:
                continue
            if not bool(torch.isnan(a[1:]).all()) or not close(a[0], e[0], _tol(each, output)):
                return ""
            seen = True
    if not seen:
        return ""
    return (f" Only row 0 of {name} is ever written, in every case of more than one row, and it holds row 0's right "
            f"values: every program handles row 0, as if its row index were 0: {words(parts, name, 'row_0_alone')}.")


def _nan_columns(runs: Sequence[Run], name: str) -> list[tuple[Run, torch.Tensor]]:
    """(run, the columns of ``name`` that are NaN in some row where a number was expected), for every run."""
    found = []
    for run in runs:
        actual, expected = run.actual.get(name), run.expected.get(name)
        if not isinstance(actual, torch.Tensor) or actual.dim() < 2 or tuple(actual.shape) != tuple(expected.shape):
            return []
        nan = torch.isnan(actual.detach().cpu()) & ~torch.isnan(expected)
        found.append((run, nan.reshape(-1, nan.shape[-1]).any(0)))
    return found


def _last_column_unwritten(runs: Sequence[Run], name: str) -> str:
    """Where, in every case, the one column left as NaN is the row's last (N − 1): a mask or bound one short of N.

    A block that covers a fixed width can leave the same column out where N is one past that width (N = 257
    and a width of 256); only the cases of other widths (N = 33, N = 256) tell the two apart, so every case
    must show it.
    """
    columns = _nan_columns(runs, name)
    if not columns or not all(c[-1] and not c[:-1].any() for _, c in columns):
        return ""
    run = min((r for r, _ in columns), key=lambda r: r.case.N)
    said = (f" In every case the last column of every row is never written (column {run.case.N - 1} of "
            f"{run.case.label}, column N − 1 of each): the mask or the bound stops one short of N. The columns "
            "are 0 … N − 1: mask them with `cols < N` (not `cols < N - 1`).")
    narrow = _narrow_block(runs, name)
    return f"{said} Or, as every case has the same N:{narrow}" if narrow else said


def _loop_stops_early(nan: torch.Tensor) -> str:
    """Where the block is narrower than the row by design (09): the row's tail left unwritten is the loop's end."""
    width = _written_width(nan) if nan.dim() >= 2 else None
    if width is None:
        return ""
    return (f" The columns past {width - 1} are never written: the column loop stops early, before its last block: "
            "loop `range(0, N, BLOCK_SIZE)`, and mask that last block with `start + cols < N`.")


def _narrow_block(runs: Sequence[Run], name: str) -> str:
    """A hint when, in every case wider than some power of two, exactly the columns from it on are unwritten, and
    no narrower case has an unwritten column: a block width written as a number."""
    columns = _nan_columns(runs, name)
    widths = {_written_width(c) for _, c in columns if c.any()}
    if len(widths) != 1 or None in widths:
        return ""
    width = widths.pop()
    if width < 16 or width & (width - 1) or any(c.any() != (run.case.N > width) for run, c in columns):
        return ""
    return (f" Only the first {width} columns were written: the block covers only the first {width} columns. "
            "Use `tl.arange(0, BLOCK_SIZE)`, with BLOCK_SIZE = next_power_of_2(N) from the launcher, "
            "not a fixed width.")


def _unwritten(name: str, nan: torch.Tensor) -> str:
    if nan.dim() < 2:
        return f"{name}[{_spans(torch.nonzero(nan.reshape(-1)).reshape(-1).tolist())}]"
    rows = torch.nonzero(nan.any(-1)).reshape(-1).tolist()
    cols = torch.nonzero(nan.reshape(-1, nan.shape[-1]).any(0)).reshape(-1).tolist()
    return f"{name} at rows {_spans(rows)}, columns {_spans(cols)}"


def _spans(indices: list[int]) -> str:
    """[0, 1, 2, 5] → '0…2, 5'."""
    spans, start = [], None
    for i, value in enumerate(indices):
        if start is None:
            start = value
        if i + 1 == len(indices) or indices[i + 1] != value + 1:
            spans.append(str(start) if start == value else f"{start}…{value}")
            start = None
    return ", ".join(spans)

"""More wrong column sums of exercise 05, modelled in float64: the loop's bounds, the accumulator, the reduction.

:data:`SYMPTOMS` extend :data:`rmsnorm_course.checkers.ex05_dgamma.SYMPTOMS`
(tried after them). :func:`steps` runs the loop over row blocks on the case's
partials, with the learner's bounds, so one model covers every wrong ``range``.

Source: solutions/05_gamma_reduction.ipynb.
"""

from __future__ import annotations

import torch
import triton

from rmsnorm.article.reduction import BLOCK_M, BLOCK_N
from .diagnose import Case, Symptom


def block_m(case: Case) -> int:
    """BLOCK_M the case is launched with (rows per step): the module's, or the case's own."""
    return case.inputs.get("BLOCK_M", BLOCK_M)


def block_n(case: Case) -> int:
    """BLOCK_N the case is launched with (columns per program): the module's, or the case's own."""
    return case.inputs.get("BLOCK_N", BLOCK_N)


def _tiles(case: Case, starts) -> list[torch.Tensor]:
    """The (BLOCK_M, N) tiles a loop over ``starts`` loads: rows start … start + BLOCK_M − 1, rows ≥ M read as 0."""
    partial, rows = case.f64("partial"), block_m(case)
    padded = torch.cat([partial, torch.zeros(rows + max(starts, default=0), case.N, dtype=torch.float64)])
    return [padded[s: s + rows] for s in starts]


def steps(case: Case, starts) -> dict[str, torch.Tensor]:
    """dgamma of a loop whose steps start at ``starts`` (each adds a BLOCK_M-row tile, masked at M).

    The tiles are added in float32, as the kernel's accumulator adds them: a loop that adds a row up to 32 times
    is off the float64 sum by more than float32's tolerance on the columns whose sum is near 0.
    """
    acc = torch.zeros(block_m(case), case.N, dtype=torch.float32)
    for tile in _tiles(case, starts):
        acc += tile.float()
    return {"dgamma": acc.double().sum(0)}


def _max_of_steps(case: Case) -> dict[str, torch.Tensor]:
    """`tl.max(tile, axis=0)` added at every step."""
    return {"dgamma": sum(t.amax(0) for t in _tiles(case, range(0, case.M, block_m(case))))}


def _max_of_acc(case: Case) -> dict[str, torch.Tensor]:
    """A (BLOCK_M, BLOCK_N) accumulator of the tiles, reduced with `tl.max(acc, axis=0)`."""
    return {"dgamma": sum(_tiles(case, range(0, case.M, block_m(case)))).amax(0)}


def _sum_axis_1(case: Case) -> dict[str, torch.Tensor]:
    """`tl.sum(acc, axis=1)` (BLOCK_M = BLOCK_N): column pid · BLOCK_N + i gets lane i's rows over the program's
    columns. With BLOCK_M ≠ BLOCK_N the store's shapes differ: the kernel raises (no model)."""
    rows, width = block_m(case), block_n(case)
    if rows != width:
        raise RuntimeError("tl.sum(acc, axis=1) has BLOCK_M values, the store BLOCK_N lanes")
    acc = sum(_tiles(case, range(0, case.M, rows)))  # (BLOCK_M, N)
    out = torch.empty(case.N, dtype=torch.float64)
    for pid in range(triton.cdiv(case.N, width)):
        cols = slice(pid * width, min(case.N, pid * width + width))
        lanes = acc[:, cols].sum(1)
        out[cols] = lanes[: cols.stop - cols.start]
    return {"dgamma": out}


_LOOP = "`for start in range(0, M, BLOCK_M)`"

def _columns_from(case: Case, step: int) -> dict[str, torch.Tensor]:
    """Program pid sums columns pid · ``step`` … pid · ``step`` + BLOCK_N − 1 (rightly); the others stay NaN."""
    out = torch.full((case.N,), float("nan"), dtype=torch.float64)
    total = case.f64("partial").sum(0)
    for pid in range(triton.cdiv(case.N, block_n(case))):
        cols = slice(min(case.N, pid * step), min(case.N, pid * step + block_n(case)))
        out[cols] = total[cols]
    return {"dgamma": out}


def _rows_from_pid(case: Case) -> dict[str, torch.Tensor]:
    """`range(pid, M, BLOCK_M)`: program pid's columns sum rows pid … M − 1 (its first pid rows skipped)."""
    partial, width = case.f64("partial"), block_n(case)
    out = torch.empty(case.N, dtype=torch.float64)
    for pid in range(triton.cdiv(case.N, width)):
        cols = slice(pid * width, min(case.N, pid * width + width))
        out[cols] = partial[pid:, cols].sum(0)
    return {"dgamma": out}


def _sum_no_axis(case: Case) -> dict[str, torch.Tensor]:
    """`tl.sum(acc)` without an axis: one number per program, the sum of its whole tile, stored in all its columns."""
    partial, width = case.f64("partial"), block_n(case)
    out = torch.empty(case.N, dtype=torch.float64)
    for pid in range(triton.cdiv(case.N, width)):
        cols = slice(pid * width, min(case.N, pid * width + width))
        out[cols] = partial[:, cols].sum()
    return {"dgamma": out}


def _started_at(case: Case, start: float) -> dict[str, torch.Tensor]:
    """The column sums plus ``start`` (an accumulator started at ones adds 1 per row of its tile to each column)."""
    return {"dgamma": case.f64("partial").sum(0) + start}


_ZEROS = "`acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)`"

SYMPTOMS = [
    Symptom("the loop over rows runs to N, the number of columns, not to M (`range(0, N, BLOCK_M)`)",
            lambda c: steps(c, range(0, c.N, block_m(c))),
            f"The loop walks down the rows: {_LOOP}; the columns are the program's own `cols`."),
    Symptom("only the last step's rows are counted: the accumulator is overwritten (`acc = ...`) at every step "
            "instead of added to (`acc += ...`)",
            lambda c: steps(c, [(c.M - 1) // block_m(c) * block_m(c)]),
            "Add each tile to the accumulator: `acc += tl.load(...)` (or `total += tl.sum(tile, axis=0)`)."),
    Symptom("the rows are reduced with `tl.max` where dgamma needs `tl.sum` (each column keeps its largest value)",
            _max_of_steps, "dgamma is a column sum: `tl.sum(tile, axis=0)` (or `tl.sum(acc, axis=0)`)."),
    Symptom("the accumulator is reduced with `tl.max` where dgamma needs `tl.sum` (`tl.max(acc, axis=0)`)",
            _max_of_acc, "dgamma is a column sum: `tl.sum(acc, axis=0)`."),
    Symptom("the tile is summed along `axis=1`, across the columns, where dgamma sums down the rows (`axis=0`)",
            _sum_axis_1, "Sum over the rows, keeping one value per column: `tl.sum(acc, axis=0)`."),
    Symptom("the loop over rows steps by BLOCK_N, the columns' block, not by BLOCK_M (`range(0, M, BLOCK_N)`): "
            "each step adds BLOCK_M rows, so where BLOCK_M ≠ BLOCK_N rows are skipped or added more than once",
            lambda c: steps(c, range(0, c.M, block_n(c))),
            f"Each step adds the BLOCK_M rows of its tile: {_LOOP}."),
    Symptom("the columns start at `pid * BLOCK_M`, the rows' block, not at `pid * BLOCK_N`: where BLOCK_M ≠ BLOCK_N "
            "the programs' columns leave gaps (or overlap) and some columns are never written",
            lambda c: _columns_from(c, block_m(c)),
            "Program pid owns the BLOCK_N columns from pid · BLOCK_N: `cols = pid * BLOCK_N + tl.arange(0, BLOCK_N)`."),
    Symptom("the loop over rows is `range(0, BLOCK_M)`: its steps start at rows 0, 1, 2, … one row apart, so each adds "
            "an overlapping window of BLOCK_M rows (the first rows counted many times) and the rows from "
            "2 · BLOCK_M − 1 on are never reached",
            lambda c: steps(c, range(0, block_m(c))),
            f"Step over the rows one tile at a time: {_LOOP}."),
    Symptom("the loop over rows starts at `pid` (`range(pid, M, BLOCK_M)`), not at row 0: program pid skips rows "
            "0 … pid − 1 of its columns (the first program, pid = 0, is right). pid numbers the program's columns; "
            "every program sums all M rows",
            _rows_from_pid, f"Start every program's loop at row 0: {_LOOP}."),
    Symptom("tl.sum without axis sums the whole tile to one number: every column of a program gets the same value, "
            "the sum of all its rows and columns (`tl.sum(acc)`)", _sum_no_axis,
            "Sum down the rows, one value per column: `tl.sum(acc, axis=0)`."),
    Symptom("the accumulator starts at ones, not zeros: each column's sum has BLOCK_M extra, one per row of the tile",
            lambda c: _started_at(c, float(block_m(c))), f"Start it at zeros: {_ZEROS}."),
    Symptom("the accumulator starts at ones, not zeros: each column's sum has 1 extra",
            lambda c: _started_at(c, 1.0), "Start it at zeros: `total = tl.zeros((BLOCK_N,), dtype=tl.float32)`."),
]

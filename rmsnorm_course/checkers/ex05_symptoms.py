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


def _tiles(case: Case, starts) -> list[torch.Tensor]:
    """The (BLOCK_M, N) tiles a loop over ``starts`` loads: rows start … start + BLOCK_M − 1, rows ≥ M read as 0."""
    partial = case.f64("partial")
    padded = torch.cat([partial, torch.zeros(BLOCK_M + max(starts, default=0), case.N, dtype=torch.float64)])
    return [padded[s: s + BLOCK_M] for s in starts]


def steps(case: Case, starts) -> dict[str, torch.Tensor]:
    """dgamma of a loop whose steps start at ``starts`` (each adds a BLOCK_M-row tile, masked at M).

    The tiles are added in float32, as the kernel's accumulator adds them: a loop that adds a row up to 32 times
    is off the float64 sum by more than float32's tolerance on the columns whose sum is near 0.
    """
    acc = torch.zeros(BLOCK_M, case.N, dtype=torch.float32)
    for tile in _tiles(case, starts):
        acc += tile.float()
    return {"dgamma": acc.double().sum(0)}


def _max_of_steps(case: Case) -> dict[str, torch.Tensor]:
    """`tl.max(tile, axis=0)` added at every step."""
    return {"dgamma": sum(t.amax(0) for t in _tiles(case, range(0, case.M, BLOCK_M)))}


def _max_of_acc(case: Case) -> dict[str, torch.Tensor]:
    """A (BLOCK_M, BLOCK_N) accumulator of the tiles, reduced with `tl.max(acc, axis=0)`."""
    return {"dgamma": sum(_tiles(case, range(0, case.M, BLOCK_M))).amax(0)}


def _sum_axis_1(case: Case) -> dict[str, torch.Tensor]:
    """`tl.sum(acc, axis=1)` (BLOCK_M = BLOCK_N): column pid · BLOCK_N + i gets lane i's rows over the program's
    columns."""
    acc = sum(_tiles(case, range(0, case.M, BLOCK_M)))  # (BLOCK_M, N)
    out = torch.empty(case.N, dtype=torch.float64)
    for pid in range(triton.cdiv(case.N, BLOCK_N)):
        cols = slice(pid * BLOCK_N, min(case.N, pid * BLOCK_N + BLOCK_N))
        lanes = acc[:, cols].sum(1)
        out[cols] = lanes[: cols.stop - cols.start]
    return {"dgamma": out}


_LOOP = "`for start in range(0, M, BLOCK_M)`"

SYMPTOMS = [
    Symptom("the loop over rows runs to N, the number of columns, not to M (`range(0, N, BLOCK_M)`)",
            lambda c: steps(c, range(0, c.N, BLOCK_M)),
            f"The loop walks down the rows: {_LOOP}; the columns are the program's own `cols`."),
    Symptom("only the last step's rows are counted: the accumulator is overwritten (`acc = ...`) at every step "
            "instead of added to (`acc += ...`)",
            lambda c: steps(c, [(c.M - 1) // BLOCK_M * BLOCK_M]),
            "Add each tile to the accumulator: `acc += tl.load(...)` (or `total += tl.sum(tile, axis=0)`)."),
    Symptom("the rows are reduced with `tl.max` where dgamma needs `tl.sum` (each column keeps its largest value)",
            _max_of_steps, "dgamma is a column sum: `tl.sum(tile, axis=0)` (or `tl.sum(acc, axis=0)`)."),
    Symptom("the accumulator is reduced with `tl.max` where dgamma needs `tl.sum` (`tl.max(acc, axis=0)`)",
            _max_of_acc, "dgamma is a column sum: `tl.sum(acc, axis=0)`."),
    Symptom("the tile is summed along `axis=1`, across the columns, where dgamma sums down the rows (`axis=0`)",
            _sum_axis_1, "Sum over the rows, keeping one value per column: `tl.sum(acc, axis=0)`."),
]

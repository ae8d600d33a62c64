"""The wrong loops of exercise 09, modelled in float64: what each classic slip makes of y and rstd.

:data:`SYMPTOMS` (for :func:`rmsnorm_course.checkers.diagnose.diagnose`) and
:func:`sum_in_16_bits` serve :mod:`rmsnorm_course.checkers.ex09_long_row`. Most
models are closed forms; the address and mask slips run the reference loop
itself on the case's memory (:func:`emulate`), NaN around x and gamma as in the
checker's buffers.

Source: solutions/09_the_long_row.ipynb.
"""

from __future__ import annotations

import math

import torch

from .cases import FLOAT16_MAX
from .diagnose import Case, Symptom, close, tolerance
from .formula_slips import gamma_of, y_slips


def _model(case, sum_cols: slice | None = None, y_cols: int | None = None, per_block: bool = False,
           divide_by: float | None = None, power: int = 2, eps_times: float = 1.0) -> dict[str, torch.Tensor]:
    """float64 outputs of a loop that sums x² over ``sum_cols`` and writes y on columns < ``y_cols``.

    ``power=1``: the loop adds x, not x² (a negative sum makes rstd NaN). ``eps_times``: eps counted that many
    times in the mean (eps added to every lane of every block adds padded length / N of it).
    """
    x, gamma = case.f64("x"), case.f64("gamma")
    N, eps = case.N, case.eps * eps_times
    sumsq = x[:, sum_cols or slice(None)].pow(power).sum(-1, keepdim=True)
    rstd = torch.rsqrt(sumsq / (divide_by or N) + eps)
    y = x * rstd * gamma
    if per_block:
        blocks = [slice(s, min(s + case.block, N)) for s in range(0, N, case.block)]
        for b in blocks:
            y[:, b] = x[:, b] * torch.rsqrt(x[:, b].square().sum(-1, keepdim=True) / N + eps) * gamma[b]
        rstd = torch.rsqrt(x[:, blocks[-1]].square().sum(-1, keepdim=True) / N + eps)
    if y_cols is not None:
        y[:, y_cols:] = float("nan")
    return {"y": y, "rstd": rstd.reshape(-1)}


def correct(case: Case) -> dict[str, torch.Tensor]:
    """The float64 oracle: rstd = 1/sqrt(mean(x²) + eps), y = x · rstd · gamma."""
    return _model(case)


def _padded(case: Case) -> int:
    """Lanes of every block of a row: cdiv(N, BLOCK_SIZE) · BLOCK_SIZE."""
    return -(-case.N // case.block) * case.block


def _last_start(case: Case) -> int:
    return (case.N - 1) // case.block * case.block


def _floor_cols(case: Case) -> int:
    return case.N // case.block * case.block


def _off_by_one_cols(case: Case) -> int:
    return min(case.N, math.ceil((case.N - 1) / case.block) * case.block)


def _gamma_row_offset(case: Case) -> dict[str, torch.Tensor]:
    out = _model(case)
    out["y"][1:] = float("nan")  # row r ≥ 1 reads gamma at r · row_stride + c: the NaN past gamma's N elements
    return out


def emulate(case, x1: bool = True, x2: bool = True, gamma_at: bool = True, y_at: bool = True,
            mask: str = "start + cols < N", pass1: str = "range(0, N, BLOCK_SIZE)",
            y_row: bool = True, mask1: str | None = None, x_row: str = "row_stride", gamma_lanes: bool = True,
            lane_total: bool = False) -> dict[str, torch.Tensor]:
    """The reference loop run in float64 on the case's memory (NaN around x and gamma), with one slip or none.

    Args:
        case: a :class:`~rmsnorm_course.checkers.cases.LoopCase` (its ``block`` and ``stride``).
        x1, x2: whether x's load address in pass 1 / pass 2 includes the block's start (`x_row + start + cols`).
        gamma_at, y_at: the same for gamma's load and y's store.
        mask: "start + cols < N", "cols < N" or "start + cols < BLOCK_SIZE".
        pass1: pass 1's loop, "range(0, N, BLOCK_SIZE)" or "range(0, BLOCK_SIZE)" (starts 0, 1, …, BLOCK_SIZE − 1).
        y_row: whether y's store address includes the row's offset (`y_ptr + row * row_stride + …`).
        mask1: pass 1's mask where it differs from ``mask``; also "start + cols < row_stride" or
            "start + cols <= N".
        x_row: what multiplies the row index in x's address, "row_stride" or "BLOCK_SIZE".
        gamma_lanes: False: gamma is one value per block, `tl.load(gamma_ptr + start)`.
        lane_total: pass 1 adds the block's total, `tl.sum(x * x, axis=0)`, to every lane of sum_sq.

    Returns:
        y (never-written elements NaN) and rstd, as the interpreter would leave them (programs and blocks in order).
    """
    M, N, B, S = case.M, case.N, case.block, case.stride
    nan = float("nan")
    x_memory = torch.full((M * max(S, B) + 2 * B,), nan, dtype=torch.float64)
    y_memory = x_memory.clone()
    for r in range(M):
        x_memory[r * S: r * S + N] = case.f64("x")[r]
    gamma_memory = torch.cat([case.f64("gamma"), torch.full((2 * B,), nan, dtype=torch.float64)])
    lanes = torch.arange(B)
    live = {"start + cols < N": lambda start: start + lanes < N, "cols < N": lambda start: lanes < N,
            "start + cols < BLOCK_SIZE": lambda start: start + lanes < B,
            "start + cols < row_stride": lambda start: start + lanes < S,
            "start + cols <= N": lambda start: start + lanes <= N}
    live1, live = live[mask1 or mask], live[mask]
    rstd = torch.empty(M, dtype=torch.float64)
    for r in range(M):
        sum_sq = torch.zeros(B, dtype=torch.float64)
        starts = {"range(0, N, BLOCK_SIZE)": range(0, N, B), "range(0, BLOCK_SIZE)": range(0, B),
                  "range(0, tl.cdiv(N, BLOCK_SIZE))": range(0, -(-N // B))}[pass1]
        X = r * (S if x_row == "row_stride" else B)  # noqa: N806 - x's row start, as the kernel computes it
        for start in starts:  # pass 1
            x = torch.where(live1(start), x_memory[X + start * x1 + lanes], 0.0)
            sum_sq += (x * x).sum() if lane_total else x * x
        rstd[r] = torch.rsqrt(sum_sq.sum() / N + case.eps)
        for start in range(0, N, B):  # pass 2
            on = live(start)
            x = torch.where(on, x_memory[X + start * x2 + lanes], 0.0)
            gamma = torch.where(on, gamma_memory[start * gamma_at + lanes * gamma_lanes], 0.0)
            y_memory[(r * S * y_row + start * y_at + lanes)[on]] = (x * rstd[r] * gamma)[on]
    return {"y": torch.stack([y_memory[r * S: r * S + N] for r in range(M)]), "rstd": rstd}


_SKIP_FIX = ("Loop over every block, the last (partial) one included: `for start in range(0, N, BLOCK_SIZE)`, "
             "and let the mask `start + cols < N` switch off the lanes past the row.")

SYMPTOMS = [
    Symptom(
        "the mean is divided by BLOCK_SIZE instead of N",
        lambda c: _model(c, divide_by=c.block),
        "The loop visits cdiv(N, BLOCK_SIZE) blocks, but the row has N values: divide the sum of squares by N.",
    ),
    Symptom(
        "the mean is divided by the padded length `tl.cdiv(N, BLOCK_SIZE) * BLOCK_SIZE` instead of N",
        lambda c: _model(c, divide_by=_padded(c)),
        "The lanes past the row add zeros, but the row has N values: "
        "`rstd = tl.rsqrt(tl.sum(sum_sq, axis=0) / N + eps)`.",
    ),
    Symptom(
        "pass 1 adds x, not x² (`sum_sq += x`): the sum of a row's values can be negative, and the square root of "
        "a negative mean is NaN",
        lambda c: _model(c, power=1),
        "rstd needs the mean of the squares: `sum_sq += x * x`.",
    ),
    Symptom(
        "eps is added to every lane of every block (`sum_sq += x * x + eps`), so the mean gets eps × "
        "(padded length) / N instead of eps once",
        lambda c: _model(c, eps_times=_padded(c) / c.N),
        "eps belongs to the mean, once per row, after the loop: `sum_sq += x * x` in the loop, then "
        "`rstd = tl.rsqrt(tl.sum(sum_sq, axis=0) / N + eps)`.",
    ),
    Symptom(
        "eps is added to every lane of every block (`sum_sq += x * x + eps`) as well as to the mean",
        lambda c: _model(c, eps_times=1 + _padded(c) / c.N),
        "eps belongs to the mean, once per row, after the loop: `sum_sq += x * x` in the loop, then "
        "`rstd = tl.rsqrt(tl.sum(sum_sq, axis=0) / N + eps)`.",
    ),
    Symptom(
        "the accumulator is reset inside the loop: only the last block's squares are counted",
        lambda c: _model(c, sum_cols=slice(_last_start(c), None)),
        "Create `sum_sq = tl.zeros(...)` once, before the loop; inside, only add to it.",
    ),
    Symptom(
        "the last, partial block is skipped (N // BLOCK_SIZE blocks, rounded down)",
        lambda c: _model(c, sum_cols=slice(0, _floor_cols(c)), y_cols=_floor_cols(c)),
        _SKIP_FIX,
    ),
    Symptom(
        "the last, partial block is skipped in the sum of squares (N // BLOCK_SIZE blocks, rounded down)",
        lambda c: _model(c, sum_cols=slice(0, _floor_cols(c))),
        _SKIP_FIX,
    ),
    Symptom(
        "the loop bound is off by one: `range(0, N - 1, BLOCK_SIZE)` misses the last block when it holds one column",
        lambda c: _model(c, sum_cols=slice(0, _off_by_one_cols(c)), y_cols=_off_by_one_cols(c)),
        "The loop bound is N itself: `range(0, N, BLOCK_SIZE)` (the mask handles the end of the row).",
    ),
    Symptom(
        "gamma is loaded with the row's offset: row 1 onwards reads gamma past its N elements",
        _gamma_row_offset,
        "gamma has one value per column, shared by every row: load it at `gamma_ptr + start + cols`.",
    ),
    Symptom(
        "each block is normalised by its own sum of squares (one pass), and rstd is the last block's",
        lambda c: _model(c, per_block=True),
        "rstd needs the whole row: finish the sum of squares over every block (pass 1), then read the row again "
        "to normalise it (pass 2), and store one rstd per row.",
    ),
    Symptom(
        "every block reads the first block: the load address lacks the block's start (x is loaded at `x_row + cols`)",
        lambda c: emulate(c, x1=False, x2=False),
        "Load each block at `x_row + start + cols`, in both passes: the mask `start + cols < N` says which lanes are "
        "columns, the address says where the block is. (A row of ones cannot show it: every block holds ones.)",
    ),
    Symptom(
        "in pass 1 every block reads the first block: its load of x lacks the block's start, so the sum of squares "
        "adds the first block once per block",
        lambda c: emulate(c, x1=False),
        "Load x at `x_row + start + cols` in pass 1, as in pass 2.",
    ),
    Symptom(
        "in pass 2 every block reads the first block of x: its load address lacks the block's start",
        lambda c: emulate(c, x2=False),
        "Load x at `x_row + start + cols` in pass 2, as in pass 1.",
    ),
    Symptom(
        "every block reads the first block of gamma: its load address lacks the block's start",
        lambda c: emulate(c, gamma_at=False),
        "gamma has one value per column: load it at `gamma_ptr + start + cols`.",
    ),
    Symptom(
        "every block writes into the first block of y: the store address lacks the block's start",
        lambda c: emulate(c, y_at=False),
        "Store at `y_ptr + row * row_stride + start + cols` (the columns past the first block are never written).",
    ),
    Symptom(
        "every row writes into row 0 of y: the store address lacks the row's offset (`y_ptr + start + cols`)",
        lambda c: emulate(c, y_row=False),
        "Store at `y_ptr + row * row_stride + start + cols` (rows 1 onwards are never written).",
    ),
    Symptom(
        "pass 1 loops over `range(0, BLOCK_SIZE)`: starts 0, 1, 2, … one column apart, so the sum of squares adds "
        "overlapping windows, not the row's blocks",
        lambda c: emulate(c, pass1="range(0, BLOCK_SIZE)"),
        "Step over the row block by block: `for start in range(0, N, BLOCK_SIZE)`, in pass 1 as in pass 2.",
    ),
    Symptom(
        "the mask lacks the block's start (`cols < N`): the last block reads past the end of the row",
        lambda c: emulate(c, mask="cols < N"),
        "Lane c of a block is column start + c: mask with `start + cols < N`.",
    ),
    Symptom(
        "the mask compares with BLOCK_SIZE instead of N (`start + cols < BLOCK_SIZE`): only the first block is "
        "read and written",
        lambda c: emulate(c, mask="start + cols < BLOCK_SIZE"),
        "The row has N columns: `mask = start + cols < N`.",
    ),
    Symptom(
        "pass 1's mask compares with row_stride instead of N (`start + cols < row_stride`): where the rows are "
        "further apart than N, the last block adds the elements between this row and the next (NaN in the checker's "
        "buffer) to the sum of squares",
        lambda c: emulate(c, mask1="start + cols < row_stride"),
        "row_stride says where a row starts, N how many columns it has: `mask = start + cols < N`, in both passes.",
    ),
    Symptom(
        "pass 1's mask compares with BLOCK_SIZE where the row has N columns (`start + cols < BLOCK_SIZE`): only the "
        "first block's lanes are on, so the sum of squares adds the first block alone",
        lambda c: emulate(c, mask1="start + cols < BLOCK_SIZE"),
        "The mask says which lanes are columns of the row: `mask = start + cols < N`, in pass 1 as in pass 2.",
    ),
    Symptom(
        "pass 1's mask lets one lane past the row through (`start + cols <= N`): column N, one past the last "
        "(N − 1), enters the sum of squares (the next row's first value, or the NaN past x on the last row)",
        lambda c: emulate(c, mask1="start + cols <= N"),
        "The columns are 0 … N − 1: `mask = start + cols < N` (`<`, not `<=`), in pass 1 as in pass 2.",
    ),
    # The forward's formula slips, shared with 02 and 03 (pass 1 adding x, not x², is named above).
    *y_slips(lambda c, r, gamma=True: {"y": c.f64("x") * r * gamma_of(c, gamma), "rstd": r.reshape(-1)},
             "`rstd = tl.rsqrt(tl.sum(sum_sq, axis=0) / N + eps)` (after pass 1 has added `x * x`)",
             "`tl.store(y_ptr + row * row_stride + start + cols, x * rstd * gamma, mask=mask)` with gamma loaded "
             "at `gamma_ptr + start + cols`", ("sqrt", "gamma", "sum", "square of the mean", "eps multiplied",
                                                          "eps after rsqrt", "gamma in the mean", "x for gamma",
                                                          "rstd not applied", "gamma added", "rows for N")),
]


def sum_in_16_bits(runs) -> str | None:
    """Evidence that only rstd is off, by a float16 rounding (0 past 65504), and beyond tolerance short of 65504;
    else None.

    A float16 accumulator rounds the sum at every block; float16 squares
    added to a float32 accumulator stay within tolerance until a square overflows.
    """
    shown = None
    for run in runs:
        case, got, want = run.case, run.actual["rstd"].double(), run.expected["rstd"]
        x, gamma = case.f64("x"), case.f64("gamma")
        if not close(run.actual["y"], x * got.unsqueeze(-1) * gamma, tolerance(run.actual["y"])):
            return None  # y does not follow the rstd the kernel stored
        overflow = x.square().sum(-1) >= FLOAT16_MAX
        if not torch.all(torch.where(overflow, got == 0, (got - want).abs() <= 2 ** -8 * want)):
            return None
        off = ~overflow & ~torch.isclose(got, want, **tolerance(run.actual["rstd"]))
        if shown is None and off.any():
            row = int(torch.nonzero(off)[0])
            shown = f"{case.label} gives rstd[{row}] = {got[row].item():.6g}, expected {want[row].item():.6g}"
    return shown


#: Which blocks pass 1 may have added, as block indices of a row of ``n`` blocks, with what makes that set and
#: the fix. Tried in this order; a set is named only when it gives the learner's output on every case.
_BLOCK_SETS = (
    ("the last block only", lambda n: [n - 1],
     "the accumulator is overwritten on every turn (`sum_sq = tl.sum(x * x)` or `sum_sq = x * x`), so only the "
     "last block's squares are left: create it once, before the loop, and add to it: `sum_sq += x * x`"),
    ("every block but the first", lambda n: range(1, n),
     "pass 1's loop starts at the second block (`range(BLOCK_SIZE, N, BLOCK_SIZE)`): start it at 0, "
     "`range(0, N, BLOCK_SIZE)`"),
    ("the first block only", lambda n: [0],
     "pass 1's loop adds the first block alone (one step, or a bound of BLOCK_SIZE): loop over every block, "
     "`range(0, N, BLOCK_SIZE)`, and add each block's squares"),
    ("every block but the last", lambda n: range(n - 1),
     "pass 1's loop stops before the last block (a bound short of N): loop to N, `range(0, N, BLOCK_SIZE)`, and "
     "mask the last block with `start + cols < N`"),
    ("every block but the first and the last", lambda n: range(1, n - 1),
     "pass 1's loop starts one block late and stops one block early: loop `range(0, N, BLOCK_SIZE)`"),
    ("every other block (the first, the third, …)", lambda n: range(0, n, 2),
     "pass 1's loop steps over two blocks at a time: step by BLOCK_SIZE, `range(0, N, BLOCK_SIZE)`"),
)


def _block_sums(case: Case) -> torch.Tensor:
    """Each row's sum of squares block by block, (M, blocks), in float64."""
    x = case.f64("x")
    return torch.stack([x[:, s:s + case.block].square().sum(-1) for s in range(0, case.N, case.block)], -1)


def _with_sum(case: Case, sumsq: torch.Tensor) -> dict[str, torch.Tensor]:
    """y and rstd of a pass 1 whose sum of squares is ``sumsq`` (one per row), pass 2 right."""
    rstd = torch.rsqrt(sumsq / case.N + case.eps)
    return {"y": case.f64("x") * rstd[:, None] * case.f64("gamma"), "rstd": rstd}


def blocks_added(runs, name: str) -> str | None:
    """Which blocks pass 1 added to the sum of squares, read from the outputs (the `terms` hook of 09); or None.

    The learner's rstd implies the sum of squares their pass 1 made, S = N · (1/rstd² − eps); each set of
    :data:`_BLOCK_SETS` gives its own S per row. A set is named when its y and rstd are the learner's on every
    case (at the checker's tolerance), and the message shows one row's S beside that set's and the whole row's.
    """
    if name not in ("y", "rstd"):
        return None
    for words, blocks, fix in _BLOCK_SETS:
        def model(case, blocks=blocks):
            sums = _block_sums(case)
            chosen = [b for b in blocks(sums.shape[-1]) if 0 <= b < sums.shape[-1]]
            return _with_sum(case, sums[:, chosen].sum(-1) if chosen else torch.zeros(case.M, dtype=torch.float64))

        fits = True
        for run in runs:
            wanted = model(run.case)
            for output in ("y", "rstd"):
                actual = run.actual.get(output)
                if not (isinstance(actual, torch.Tensor) and close(actual, wanted[output].to(actual.dtype),
                                                                     tolerance(actual, run.case))):
                    fits = False
        if fits:
            return f"pass 1 added the squares of {words} to the row's sum of squares{_shown(runs, model)}: {fix}."
    return None


def _shown(runs, model) -> str:
    """' (… row r: the sum of squares rstd implies, N · (1/rstd² − eps), is S; that set's, s; the whole row's, t)'
    for the first row whose rstd is wrong."""
    for run in runs:
        got, want = run.actual["rstd"].double(), run.expected["rstd"]
        off = ~torch.isclose(got, want, **tolerance(run.actual["rstd"], run.case))
        if not off.any():
            continue
        row, case = int(torch.nonzero(off)[0]), run.case
        implied = case.N * (1 / got[row].item() ** 2 - case.eps)
        chosen = case.N * (1 / model(case)["rstd"][row].item() ** 2 - case.eps)
        whole = float(_block_sums(case)[row].sum())
        return (f" (on {case.label}, row {row}: the sum of squares rstd implies, N · (1/rstd² − eps), is "
                f"{implied:.4g}; those blocks' is {chosen:.4g}, the whole row's {whole:.4g})")
    return ""

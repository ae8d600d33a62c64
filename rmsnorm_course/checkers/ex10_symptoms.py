"""The wrong loops of exercise 10, modelled in float64: what each classic slip makes of dx and the partial.

:data:`SYMPTOMS` (for :func:`rmsnorm_course.checkers.diagnose.diagnose`) serve
:mod:`rmsnorm_course.checkers.ex10_one_pass`. Closed forms for the formula slips; the
slips of the loop (rows, offsets, rstd's address, the accumulator) run the
reference loop itself, program after program (:func:`emulate`).

Source: solutions/10_one_pass_backward.ipynb.
"""

from __future__ import annotations

import re

import torch
import triton

from .diagnose import Symptom
from .ex04_dx import u_without_gamma


def _terms(case):
    x, gamma, dy = case.f64("x"), case.f64("gamma"), case.f64("dy")
    rstd = case.f64("rstd").unsqueeze(-1)
    return x, gamma, dy, rstd, x * rstd


def terms_of(case):
    """x, gamma, dy and rstd (M, 1), float64: the inputs of dx's terms (:mod:`~.dx_terms`)."""
    return _terms(case)[:4]


def by_program(case, added: torch.Tensor) -> torch.Tensor:
    """The (P, N) partial when program p adds ``added``'s rows p, p + P, … (zeros for a program without rows)."""
    P = case.programs
    partial = torch.zeros(P, case.N, dtype=torch.float64)
    for p in range(P):
        partial[p] = added[p::P].sum(0)
    return partial


def _model(case, divide_by=None, dx_rstd=True, term="dy·x̂", step=None, empty_rows=0.0, second_rstd=True):
    """float64 dx and (P, N) partial of a variant; ``term`` is what each row adds to its program's partial.

    ``second_rstd=False``: dx = rstd · u − x̂ · mean(u · x̂) (rstd on the first term only).
    """
    x, gamma, dy, rstd, x_hat = _terms(case)
    u = dy * gamma
    mean_ux = (u * x_hat).sum(-1, keepdim=True) / (divide_by or case.N)
    dx = (u - x_hat * mean_ux) * (rstd if dx_rstd else 1.0)
    if not second_rstd:
        dx = u * rstd - x_hat * mean_ux
    added = {"dy·x̂": dy * x_hat, "dy·x": dy * x, "dy": dy, "u·x̂": u * x_hat}[term]
    P = case.programs
    partial = torch.zeros(P, case.N, dtype=torch.float64)
    for p in range(P):
        rows = list(range(p, case.M, step or P))
        if rows:
            partial[p] = added[rows].sum(0)
        else:
            partial[p] = empty_rows
    return {"dx": dx, "partial": partial}


def emulate(case, offsets_at: str = "row", rstd_at: str = "row", first_row: str = "pid", reset: bool = False,
            store_each: bool = False, past_end: bool = False, chunk: bool = False, partial_row: str = "pid * N"):
    """The reference loop in float64, programs in order, with one slip or none.

    Args:
        case: a :class:`~rmsnorm_course.checkers.cases.GridCase`.
        offsets_at: "row" (`row * row_stride + cols`) or "pid" (`pid * row_stride + cols`) for x, dy and dx.
        rstd_at: "row" (`rstd_ptr + row`) or "pid".
        first_row: "pid" (`range(pid, M, P)`), "0" (`range(0, M, P)`) or "pid * P" (`range(pid * P, M, P)`).
        reset: the accumulator is set to zeros at the top of every turn of the loop.
        store_each: each row's dy · x̂ is stored in the program's partial row, in the loop (a program without
            rows never stores: NaN).
        past_end: the loop runs to M + 1 (`range(pid, M + 1, P)`): the program that visits row M reads the NaN
            around the inputs into its partial (its dx lands past dx).
        chunk: program pid takes P consecutive rows, `range(pid * P, pid * P + P)`; a row past M reads NaN.
        partial_row: where the partial's row starts, "pid * N" or "pid" (`partial_ptr + pid + cols`: the programs'
            stores overlap in the first row, in program order).

    Returns:
        dx (rows never written NaN) and the (P, N) partial.
    """
    x, gamma, dy, rstd, _ = _terms(case)
    M, N, P = case.M, case.N, case.programs
    dx = torch.full((M, N), float("nan"), dtype=torch.float64)
    partial = torch.full((P, N), float("nan") if store_each else 0.0, dtype=torch.float64)
    for p in range(P):
        rows = range(p * P, p * P + P) if chunk else range({"pid": p, "0": 0, "pid * P": p * P}[first_row],
                                                             M + past_end, P)
        for row in rows:
            if row >= M:
                partial[p] = float("nan")
                continue
            at, r = (row if offsets_at == "row" else p), rstd[row if rstd_at == "row" else p]
            x_hat, u = x[at] * r, dy[at] * gamma
            dx[at] = (u - x_hat * (u * x_hat).sum() / N) * r
            partial[p] = (0 if reset or store_each else partial[p]) + dy[at] * x_hat
    if partial_row == "pid":
        flat = torch.full((P * N,), float("nan"), dtype=torch.float64)
        for p in range(P):
            flat[p:p + N] = partial[p]
        partial = flat.reshape(P, N)
    return {"dx": dx, "partial": partial}


def correct(case) -> dict[str, torch.Tensor]:
    """The float64 oracle: dx = rstd · (u − x̂ · mean(u · x̂)); partial[p] = Σ over rows p, p + P, … of dy · x̂."""
    return _model(case)


#: One rstd short on dx's second term: the mean taken of u · x, or rstd on u only (the same numbers).
ONE_RSTD_SHORT = Symptom(
    "dx's second term misses one rstd: either the mean is taken of u · x where u · x̂ belongs "
    "(`mean_ux = tl.sum(u * x, axis=0) / N`), or rstd multiplies u only (`rstd * u - x_hat * mean_ux`)",
    lambda c: _model(c, second_rstd=False),
    "The mean is over u · x̂: `mean_ux = tl.sum(u * x_hat, axis=0) / N`; and rstd multiplies both terms of "
    "dx: `(u - x_hat * mean_ux) * rstd`.")

#: The three lines that give :data:`ONE_RSTD_SHORT`'s numbers, each with its own summary and fix.
_ONE_RSTD_SHORT_LINES = (
    (re.compile(r"tl\.sum\(\s*(?:u\s*\*\s*x|x\s*\*\s*u)\b"),
     "the mean is taken of u · x where u · x̂ belongs (`tl.sum(u * x, axis=0)`), so it lacks one rstd "
     "(x̂ = x · rstd) and dx's second term with it",
     "The mean is over u · x̂: `mean_ux = tl.sum(u * x_hat, axis=0) / N` (your dx line is then right)."),
    (re.compile(r"rstd\s*\*\s*u\s*-"),
     "dx's second term misses its rstd (`rstd * u - x_hat * mean_ux`): rstd multiplies u only",
     "dx = rstd · (u − x̂ · mean(u · x̂)): rstd multiplies both terms, `(u - x_hat * mean_ux) * rstd`."),
    (re.compile(r"u\s*-\s*x\s*\*\s*mean"),
     "dx's second term uses x where x̂ belongs (`(u - x * mean_ux) * rstd`), so it lacks one rstd (x̂ = x · rstd)",
     "dx = rstd · (u − x̂ · mean(u · x̂)): `(u - x_hat * mean_ux) * rstd`."),
)


def by_source(message: str, source: str) -> str:
    """:data:`ONE_RSTD_SHORT`'s message for the one of its two lines found in ``source``; else ``message``."""
    head, tail = f"{ONE_RSTD_SHORT.summary}: ", f". {ONE_RSTD_SHORT.fix}"
    if not (message.startswith(head) and message.endswith(tail)):
        return message
    found = [(summary, fix) for pattern, summary, fix in _ONE_RSTD_SHORT_LINES if pattern.search(source)]
    if len(found) != 1:
        return message
    summary, fix = found[0]
    return f"{summary}: {message[len(head):-len(tail)]}. {fix}"


SYMPTOMS = [
    Symptom("mean(u · x̂) is divided by BLOCK_SIZE instead of N",
            lambda c: _model(c, divide_by=triton.next_power_of_2(c.N)),
            "The masked lanes add zeros, but the row has N values: divide the sum by N."),
    Symptom("dx misses its last factor rstd", lambda c: _model(c, dx_rstd=False),
            "dx = rstd · (u − x̂ · mean(u · x̂)): multiply by rstd once more."),
    ONE_RSTD_SHORT,
    Symptom("the dgamma partial adds dy · x, without rstd", lambda c: _model(c, term="dy·x"),
            "dgamma = Σ dy · x̂ with x̂ = x · rstd: add `dy * x_hat`, not `dy * x`."),
    Symptom("the dgamma partial adds dy alone, without x̂ (that is LayerNorm's dβ, not RMSNorm's dgamma)",
            lambda c: _model(c, term="dy"), "Add `dy * x_hat` to the accumulator."),
    Symptom("the dgamma partial adds u · x̂ = dy · gamma · x̂: gamma is not part of dgamma",
            lambda c: _model(c, term="u·x̂"), "dgamma = Σ dy · x̂: use dy, not u = dy · gamma, in the accumulator."),
    Symptom("rows are stepped by 1 instead of by the grid size P: rows are counted more than once",
            lambda c: _model(c, step=1),
            "Program p must take rows p, p + P, p + 2P, …: `for row in range(pid, M, P)` with "
            "`P = tl.num_programs(0)`; with step 1, row r lands in the partial of every program p ≤ r."),
    Symptom("the partial is stored inside the loop, so a program that gets no rows never stores its row",
            lambda c: _model(c, empty_rows=float("nan")),
            "Store the accumulator once, after the loop: a program without rows then writes its zeros "
            "(the checker launches more programs than rows on purpose)."),
    Symptom("the partial is never stored", lambda c: {"partial": torch.full((c.programs, c.N), float("nan"))},
            "After the loop, store the accumulator in row pid: `tl.store(partial_ptr + pid * N + cols, dgamma_acc, "
            "mask=mask)`."),
    Symptom("each program reads and writes its first row again and again: the offsets use `pid` where they need "
            "the loop's `row`", lambda c: emulate(c, offsets_at="pid"),
            "Inside the loop the row is `row`: `offsets = tl.cast(row, tl.int64) * row_stride + cols` (pid only "
            "picks the first row, and the row of the partial)."),
    Symptom("every row of a program uses the rstd of its first row: rstd is loaded at `rstd_ptr + pid`",
            lambda c: emulate(c, rstd_at="pid"), "Each row has its own rstd: `tl.load(rstd_ptr + row)`."),
    Symptom("every program starts at row 0 (`range(0, M, P)`): the rows of the other programs are never written, "
            "and rows 0, P, 2P, … are added to every partial", lambda c: emulate(c, first_row="0"),
            "Program pid starts at its own row: `for row in range(pid, M, P)`."),
    Symptom("the accumulator is reset or overwritten inside the loop (`dgamma_acc = ...` where "
            "`dgamma_acc += ...` belongs): each program's partial holds its last row only",
            lambda c: emulate(c, reset=True),
            "Create `dgamma_acc = tl.zeros([BLOCK_SIZE], dtype=tl.float32)` once, before the loop; inside, only add "
            "to it."),
    Symptom("each row's dy · x̂ is stored in the partial in place of the program's sum: the store inside the loop "
            "overwrites the partial row by row, so it holds the program's last row, and a program without rows never "
            "stores", lambda c: emulate(c, store_each=True),
            "Add each row to the accumulator, `dgamma_acc += dy * x_hat`, and store `dgamma_acc` once, after the "
            "loop: `tl.store(partial_ptr + pid * N + cols, dgamma_acc, mask=mask)`."),
    Symptom("the loop's `row` is not used: every address uses `pid` (`row = pid`), so each program reads x and dy, "
            "loads rstd and writes dx at row pid again and again, and the other rows are never written",
            lambda c: emulate(c, offsets_at="pid", rstd_at="pid"),
            "Inside the loop the row is the loop's variable: `for row in range(pid, M, P)`, then "
            "`offsets = tl.cast(row, tl.int64) * row_stride + cols` and `tl.load(rstd_ptr + row)`."),
    Symptom("program pid starts at row pid · P (`range(pid * P, M, P)`): the rows between are never visited (their "
            "dx is never written, so it stays NaN), and rows P, 2P, … are added to several programs' partials",
            lambda c: emulate(c, first_row="pid * P"),
            "Program pid starts at its own row and steps by P: `for row in range(pid, M, P)` (rows pid, pid + P, …)."),
    Symptom("the row loop runs one row too far (`range(pid, M + 1, P)`): the program that visits row M reads one row "
            "past x and dy (the NaN around them goes into its partial) and writes its dx past dx's last row",
            lambda c: emulate(c, past_end=True),
            "Rows are numbered 0 … M − 1, and `range` stops before its end: `for row in range(pid, M, P)`."),
    # Issue 36: a chunk of rows per program, the mean over M, the partial's row without × N.
    Symptom("each program takes P consecutive rows, `range(pid * P, pid * P + P)`, where it takes every P-th row "
            "from its own, `range(pid, M, P)`: rows past the last chunk are never written (or rows past M are read)",
            lambda c: emulate(c, chunk=True),
            "The grid strides over the rows: program pid takes rows pid, pid + P, pid + 2P, … up to M, "
            "`for row in range(pid, M, P)`."),
    Symptom("mean(u · x̂) is divided by M, the number of rows, where N, the row's length, belongs (`/ M`)",
            lambda c: _model(c, divide_by=c.M), "The mean is over the row's N columns: "
            "`mean_ux = tl.sum(u * x_hat, axis=0) / N`."),
    Symptom("the partial's row offset lacks × N (`partial_ptr + pid + cols`): the programs' rows overlap in the "
            "first row, one column apart, and rows 1 … P − 1 are never written",
            lambda c: emulate(c, partial_row="pid"),
            "Row pid of the (P, N) partial starts pid · N elements in: `tl.store(partial_ptr + pid * N + cols, "
            "dgamma_acc, mask=mask)`."),
    # 04's dx slips, on 10's loaded rstd (shared: one model, one wording).
    u_without_gamma(lambda c: (*_terms(c)[:4], _terms(c)[2] * _terms(c)[1])),
]

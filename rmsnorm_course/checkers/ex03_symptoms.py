"""More wrong forwards of exercise 03, modelled in float64: slips of the reduction, of eps, of y and of rstd's store.

:data:`SYMPTOMS` extend :data:`rmsnorm_course.checkers.ex03_forward.SYMPTOMS`
(tried after them); :func:`gamma_row_offset` models, on the run with
:data:`~.spec.PROBE` around the tensors, gamma loaded with the row's offset;
:func:`rstd_outside` words rstd stored at the row stride.
Each message names the line at fault and the fix.

Source: solutions/03_forward_kernel.ipynb.
"""

from __future__ import annotations

import torch

from .cases import sum_of_squares
from .diagnose import Case, Symptom
from .formula_slips import gamma_of, y_slips
from .spec import PROBE


def outputs(case: Case, rstd: torch.Tensor, gamma=True) -> dict[str, torch.Tensor]:
    """y = x · rstd · gamma (gamma left out, or another tensor in its place: :func:`gamma_of`) and rstd, in float64,
    from an (M, 1) rstd."""
    y = case.f64("x") * rstd * gamma_of(case, gamma)
    return {"y": y, "rstd": rstd.reshape(-1)}


def _max_square(case: Case) -> torch.Tensor:
    """(M, 1): the largest x² of each row (the masked lanes add a 0 to the block when BLOCK_SIZE > N)."""
    return case.f64("x").square().amax(-1, keepdim=True).clamp(min=0.0)


def gamma_row_offset(case: Case) -> dict[str, torch.Tensor]:
    """y when program `row` loads gamma at `gamma_ptr + row * x_row_stride + cols`: rows ≥ 1 read PROBE."""
    right = outputs(case, torch.rsqrt(sum_of_squares(case) / case.N + case.eps))
    y = right["y"].clone()
    y[1:] = case.f64("x")[1:] * right["rstd"][1:, None] * PROBE
    return {"y": y}


SYMPTOMS = [
    Symptom(
        "the squares are reduced with `tl.max` where the mean of the squares needs `tl.sum` (rstd uses the "
        "row's largest x², not their sum)",
        lambda c: outputs(c, torch.rsqrt(_max_square(c) / c.N + c.eps)),
        "Write `rstd = tl.rsqrt(tl.sum(x * x, axis=0) / N + eps)`: the mean adds every square of the row.",
    ),
    Symptom(
        "eps is added after `tl.rsqrt`, outside the root (rstd = rsqrt(mean(x²)) + eps: a row of zeros gives "
        "rsqrt(0) = inf, and y = 0 · inf = NaN)",
        lambda c: outputs(c, torch.rsqrt(sum_of_squares(c) / c.N) + c.eps),
        "eps belongs inside the root, before `tl.rsqrt`: `rstd = tl.rsqrt(tl.sum(x * x, axis=0) / N + eps)`.",
    ),
    Symptom(
        "the mean is taken of the square of the row's sum, (Σ x)² / N, not of the squares, Σ x² / N",
        lambda c: outputs(c, torch.rsqrt(c.f64("x").sum(-1, keepdim=True).square() / c.N + c.eps)),
        "Square each element first, then sum: `tl.sum(x * x, axis=0) / N`, not `tl.sum(x, axis=0) * tl.sum(x, "
        "axis=0) / N`.",
    ),
    Symptom(
        "eps is divided by N with the sum of squares, (Σ x² + eps) / N, where it is added to the mean",
        lambda c: outputs(c, torch.rsqrt((sum_of_squares(c) + c.eps) / c.N)),
        "Divide the sum alone, then add eps: `tl.sum(x * x, axis=0) / N + eps` (mind the parentheses).",
    ),
    Symptom(
        "eps is there but in the wrong place: it is added to N, the divisor (`/ (N + eps)`), not to the mean, so a "
        "row of zeros still has rsqrt(0) = inf (then 0 · inf = NaN), and on the other rows the mean is "
        "Σ x² / (N + eps), with nothing added to it",
        lambda c: outputs(c, torch.rsqrt(sum_of_squares(c) / (c.N + c.eps))),
        "eps belongs inside the root, added to the mean: `rstd = tl.rsqrt(tl.sum(x * x, axis=0) / N + eps)`.",
    ),
    Symptom(
        "y lacks rstd: `y = x * gamma` scales x by gamma alone (rstd is right, and stored, but never multiplies x)",
        lambda c: {"y": c.f64("x") * c.f64("gamma")},
        "y = x · rstd · gamma: write `y = x * rstd * gamma`.",
    ),
    Symptom(
        "eps is added to every square inside the sum (`tl.sum(x * x + eps, axis=0)`): the block's BLOCK_SIZE lanes, "
        "padding included, each add eps, so the mean gets eps · BLOCK_SIZE / N where it needs eps once",
        lambda c: outputs(c, torch.rsqrt((sum_of_squares(c) + c.block_size * c.eps) / c.N)),
        "Sum the squares alone, divide by N, then add eps once: `rstd = tl.rsqrt(tl.sum(x * x, axis=0) / N + eps)`.",
    ),
    Symptom(
        "y is right but rstd holds mean(x²), the mean of the squares, not rstd = 1/sqrt(mean(x²) + eps)",
        lambda c: {"rstd": (sum_of_squares(c) / c.N).reshape(-1)},
        "Store the same `rstd` that multiplies x: `tl.store(rstd_ptr + row, rstd)`; the backward reuses it.",
    ),
    Symptom(
        "y is right but rstd holds mean(x²) + eps, what goes into the root, not rstd = 1/sqrt(mean(x²) + eps)",
        lambda c: {"rstd": (sum_of_squares(c) / c.N + c.eps).reshape(-1)},
        "Store the same `rstd` that multiplies x: `tl.store(rstd_ptr + row, rstd)`; the backward reuses it.",
    ),
    # The forward's formula slips, shared with 02 and 09 (sqrt for rsqrt and gamma missing are named before).
    *y_slips(outputs, "`rstd = tl.rsqrt(tl.sum(x * x, axis=0) / N + eps)`", "`y = x * rstd * gamma`",
             ("sum", "square of the mean", "eps multiplied", "x not squared", "gamma in the mean", "x for gamma",
              "gamma added", "rows for N")),
]

#: gamma's load with the row's offset, for :attr:`~.spec.ExerciseSpec.outside`.
GAMMA_ROW_OFFSET = Symptom(
    "gamma's load has the row's offset (`gamma_ptr + row * x_row_stride + cols`): row 1 onwards reads past gamma's "
    "N elements",
    gamma_row_offset,
    "gamma has one row, shared by every row of x: load it at `gamma_ptr + cols`.",
)


def rstd_outside(M: int, row_stride: int, stride_name: str = "x_row_stride"):
    """How a write outside rstd is worded (see :meth:`~.guards.Buffers.output`) for a case of M rows ``row_stride``
    apart: rstd stored at `rstd_ptr + row * x_row_stride` (the kernel's ``stride_name``) writes row r at element
    r · row_stride."""

    def explain(offsets: list[int]) -> str:
        shown = ", ".join(map(str, offsets[:3])) + (", …" if len(offsets) > 3 else "")
        if row_stride > 1 and offsets and all(o % row_stride == 0 and 1 <= o // row_stride < M for o in offsets):
            return (f"wrote outside rstd: its store has the row stride (`rstd_ptr + row * {stride_name}`), so row 1 "
                    f"onwards writes past rstd's M = {M} values (element offsets {shown}: row · {row_stride}). rstd "
                    "has one value per row, one after the other: `tl.store(rstd_ptr + row, rstd)`")
        return (f"wrote outside rstd (element offsets {shown}): rstd has one value per row, one after the other: "
                "`tl.store(rstd_ptr + row, rstd)`")

    return explain

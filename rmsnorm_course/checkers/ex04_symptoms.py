"""More wrong dx kernels of exercise 04 (and of 08's fix), modelled in float64: the mean, the terms, the stores.

:func:`more_symptoms` extends :data:`rmsnorm_course.checkers.ex04_dx.SYMPTOMS`
(tried after them), from that module's own model of dx; :data:`OUTSIDE` models
rstd loaded at ``row * row_stride`` and gamma at the row's offsets, on the run with :data:`~.spec.PROBE` around the
tensors; :func:`mask_to_stride` words stores masked with the row stride (`cols < row_stride`). Each message
names the line at fault and the fix.

Source: solutions/04_backward_derivation.ipynb and solutions/08_n_vs_block_exercise.ipynb.
"""

from __future__ import annotations

import torch

from .diagnose import Case, Symptom
from .spec import PROBE

_MEAN = "`mean_ux = tl.sum(u * x, axis=0) / N`"


def more_symptoms(parts, dx) -> list[Symptom]:
    """The symptoms, given ex04's ``parts`` (case → x, gamma, dy, r, u) and ``dx`` (its model of a dx slip)."""

    def max_mean(case: Case) -> torch.Tensor:
        x, _, _, _, u = parts(case)
        top = (u * x).amax(-1, keepdim=True)
        return (top.clamp(min=0.0) if case.block_size > case.N else top) / case.N  # masked lanes hold 0

    def first_rstd(case: Case) -> dict[str, torch.Tensor]:
        x, _, dy, r, u = parts(case)
        r0 = r[:1].expand_as(r)  # every program loads rstd_ptr[0]
        return {"dx": r0 * u - x * r0.pow(3) * (u * x).sum(-1, keepdim=True) / case.N, "partial": dy * x * r0}

    def swapped(case: Case) -> dict[str, torch.Tensor]:
        x, _, dy, r, _ = parts(case)
        return {"dx": dy * x * r, "partial": dx(case)["dx"]}

    return [
        Symptom("mean(u·x) is not divided by N: `mean_ux` is the row's sum", lambda c: dx(c, divide_by=1),
                f"It is a mean over the row's N columns: {_MEAN}."),
        Symptom("dx and partial are swapped: dx holds dy·x·rstd and partial holds dx (each store has the other's "
                "pointer)", swapped,
                "Store dx at `dx_ptr + offsets` and dy · x · rstd at `partial_ptr + offsets`."),
        Symptom("mean(u·x) is taken with `tl.max` where mean(u·x) needs `tl.sum` (the row's largest u·x, not their "
                "sum)", lambda c: dx(c, mean=max_mean(c)), f"Add every u·x of the row: {_MEAN}."),
        Symptom("the r³ term multiplies u where it needs x (`u * rstd * rstd * rstd * mean_ux`)",
                lambda c: dx(c, term_x=False), "dx = r·u − x·r³·mean(u·x): `dx = rstd * u - x * rstd * rstd * rstd * "
                "mean_ux`."),
        Symptom("partial has rstd twice (it holds dy·x·rstd²)",
                lambda c: {"partial": parts(c)[2] * parts(c)[0] * parts(c)[3].square()},
                "∂y/∂gamma = x·r: store partial = `dy * x * rstd`, with one rstd."),
        Symptom("mean(u·x) is multiplied by rstd (`tl.sum(u * x * rstd, axis=0) / N`): the r³ term already holds "
                "every rstd", lambda c: dx(c, mean=(parts(c)[4] * parts(c)[0] * parts(c)[3]).mean(-1, keepdim=True)),
                f"The mean is of u·x alone: {_MEAN}; dx = r·u − x·r³·mean(u·x)."),
        Symptom("mean_ux is mean(x·x), the mean of the squares, where it needs mean(u·x) (u = dy · gamma)",
                lambda c: dx(c, mean=parts(c)[0].square().mean(-1, keepdim=True)),
                f"Multiply u, not x, by x: {_MEAN}."),
        Symptom("mean(u·x) is computed without dy (`tl.sum(gamma * x, axis=0)`): the mean's u lacks dy (u = dy · "
                "gamma)", lambda c: dx(c, mean=(parts(c)[1] * parts(c)[0]).mean(-1, keepdim=True)),
                f"Both terms of dx use u = dy · gamma: {_MEAN}, with u, not gamma."),
        Symptom("partial lacks dy (it holds x·rstd)", lambda c: {"partial": parts(c)[0] * parts(c)[3]},
                "Store partial = `dy * x * rstd`: dgamma = Σ_rows dy · x · r."),
        Symptom("every row uses row 0's rstd: rstd's load has no row offset (`tl.load(rstd_ptr)`)", first_rstd,
                "rstd has one value per row, one after the other: `rstd = tl.load(rstd_ptr + row)`."),
        Symptom("mean(u·x) is divided by N + 1 instead of N", lambda c: dx(c, divide_by=c.N + 1),
                f"It is a mean over the row's N columns, each counted once: {_MEAN}."),
        Symptom("partial is stored at dx's pointer (`tl.store(dx_ptr + offsets, dy * x * rstd, ...)`): dx holds "
                "dy·x·rstd and partial is never written",
                lambda c: {"dx": parts(c)[2] * parts(c)[0] * parts(c)[3], "partial": None},
                "Store dy · x · rstd at partial's pointer: `tl.store(partial_ptr + offsets, dy * x * rstd, "
                "mask=mask)`."),
        # Issue 36: arithmetic slips of u and of the mean, each a model checked against the learner's numbers.
        Symptom("gamma is added to dy where it multiplies it (`u = dy + gamma`)",
                lambda c: dx(c, parts=lambda k: (*parts(k)[:4], parts(k)[2] + parts(k)[1])),
                "u = dy · gamma, in both of dx's terms: `u = dy * gamma`."),
        Symptom("the r³ term is divided by N twice: mean_ux is already a mean (Σ u·x / N), and another `/ N` "
                "divides it again (on dx's line, or a `/ (N * N)` on mean_ux's)", lambda c: dx(c, divide_by=c.N ** 2),
                "Divide the sum by N once, on mean_ux's line, and use mean_ux as it is on dx's: "
                "`dx = rstd * u - x * rstd * rstd * rstd * mean_ux`."),
        Symptom("mean_ux is mean(u) · mean(x), a product of means, where the mean of the product, Σ(u·x) / N, belongs",
                lambda c: dx(c, mean=parts(c)[4].mean(-1, keepdim=True) * parts(c)[0].mean(-1, keepdim=True)),
                "Multiply lane by lane, then sum: `mean_ux = tl.sum(u * x, axis=0) / N`."),
    ]


def _rstd_row_stride(case: Case) -> dict[str, torch.Tensor]:
    """dx and partial when program `row` loads rstd at `rstd_ptr + row * row_stride`: rows ≥ 1 read PROBE."""
    x, gamma, dy = case.f64("x"), case.f64("gamma"), case.f64("dy")
    r = torch.rsqrt(x.square().mean(-1, keepdim=True) + case.eps)
    r[1:] = PROBE
    u = dy * gamma
    return {"dx": r * u - x * r.pow(3) * (u * x).mean(-1, keepdim=True), "partial": dy * x * r}


def _gamma_row_offset(case: Case) -> dict[str, torch.Tensor]:
    """dx when program `row` loads gamma at `gamma_ptr + offsets` (the row's offsets): rows ≥ 1 read PROBE."""
    x, dy = case.f64("x"), case.f64("dy")
    gamma = case.f64("gamma").expand_as(x).clone()
    gamma[1:] = PROBE
    r = torch.rsqrt(x.square().mean(-1, keepdim=True) + case.eps)
    u = dy * gamma
    return {"dx": r * u - x * r.pow(3) * (u * x).mean(-1, keepdim=True)}


#: rstd read at the row stride and gamma at the row's offsets, for :attr:`~.spec.ExerciseSpec.outside`.
OUTSIDE = (
    Symptom("rstd's load has the row stride (`rstd_ptr + row * row_stride`): row 1 onwards reads past rstd's M "
            "values", _rstd_row_stride,
            "rstd has one value per row, one after the other: `rstd = tl.load(rstd_ptr + row)`."),
    Symptom("gamma's load has the row's offset (`gamma_ptr + offsets`, with `offsets = row * row_stride + cols`): "
            "row 1 onwards reads past gamma's N elements", _gamma_row_offset,
            "gamma has one row, shared by every row of x: load it at `gamma_ptr + cols`."),
)


def mask_to_stride(name: str, M: int, N: int, row_stride: int):
    """How a write outside ``name`` is worded (see :meth:`~.guards.Buffers.output`) for a case of M rows of N columns,
    ``row_stride`` apart: exactly the columns N … row_stride − 1 of every row written is a mask against the stride
    (`cols < row_stride`), which lets the lanes between a row's end and the next row's start through."""
    block = 1 << max(N - 1, 0).bit_length()  # next_power_of_2(N), the launcher's BLOCK_SIZE
    between = {r * row_stride + c for r in range(M) for c in range(N, min(row_stride, block))}

    def explain(offsets: list[int]) -> str:
        shown = ", ".join(map(str, offsets[:3])) + (", …" if len(offsets) > 3 else "")
        if between and set(offsets) == between:
            return (f"it wrote outside {name}: columns {N} … {min(row_stride, block) - 1} of every row (element "
                    f"offsets {shown}), between a row's last column (N − 1 = {N - 1}) and the next row's start "
                    f"(row_stride = {row_stride}): the mask lets the lanes from N to row_stride through (as "
                    "`mask = cols < row_stride` does). A row has N columns; the stride only says where the next one "
                    "begins: `mask = cols < N`")
        where = offsets[0] if offsets else 0  # else: the guards' own words (Buffers.problems)
        side = ("before its first element" if where < 0 else "past its last element"
                if where >= (M - 1) * row_stride + N else "between its rows")
        return (f"it wrote outside {name} ({side}, element offset {where}): check the row offset "
                "(`row * row_stride`) and the store's mask")

    return explain


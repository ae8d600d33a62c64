"""Checker of exercise 04 (and of the fix in 08): the learner's dx kernel, launched as ``backward_rows`` launches
its own.

The kernel receives rstd from the package's (correct) forward, so only the
backward is judged. Symptoms recognised, modelled in float64 with
u = dy · gamma: mean(u · x) divided by BLOCK_SIZE, or by N − 1; the
−x · r³ · mean(u · x) term missing; r or r² instead of r³; mean(u) instead of
mean(u · x); gamma missing from u, or from the mean alone (dy · x); the second
term added instead of subtracted; partial without rstd or with gamma; offsets
(or x's load) without the row's offset; and (:mod:`rmsnorm_course.checkers.ex04_symptoms`)
mean(u · x) not divided by N, taken with ``tl.max``, with an extra rstd, or of x · x; u for x in
the r³ term; dx and partial stored in each other's place; partial with rstd twice; mean(gamma · x),
without dy; partial without dy; rstd loaded at ``rstd_ptr`` alone (row 0's for every row) or at
``row * row_stride``; the row index multiplied by a stride in int32 (named once the kernel passes); plus the
pre-launch checks (signature, masks) and unwritten elements. Where no
symptom matches, :mod:`rmsnorm_course.checkers.dx_terms` names which of dx's terms (or partial's factors) is off.

Source: solutions/04_backward_derivation.ipynb and
solutions/08_n_vs_block_exercise.ipynb.
"""

from __future__ import annotations

import torch
import triton

from rmsnorm.article.backward import rmsnorm_dx_kernel
from rmsnorm.article.forward import forward_op, num_warps_for
from .cases import describe, random_case, row_cases
from .diagnose import Case, Symptom
from .dx_terms import explainer
from .ex04_symptoms import OUTSIDE, mask_to_stride, more_symptoms
from .guards import GUARD
from .spec import ExerciseSpec, Launch, given, made, typed

EXERCISE = "04 · dx kernel"


def _parts(case: Case):
    x, gamma, dy = case.f64("x"), case.f64("gamma"), case.f64("dy")
    r = torch.rsqrt(x.square().mean(-1, keepdim=True) + case.eps)  # (M, 1)
    return x, gamma, dy, r, dy * gamma


def _dx(case: Case, *, u_gamma=True, mean_gamma=True, power=3, sign=-1.0, divide_by=None, ux=True, term=True,
        mean=None, term_x=True, parts=None):
    x, gamma, dy, r, u = (parts or _parts)(case)
    u = u if u_gamma else dy
    v = u if mean_gamma else dy  # what the mean's sum multiplies by x
    if mean is None:
        mean = (v * x if ux else v).sum(-1, keepdim=True) / (divide_by or case.N)
    dx = r * u + (sign * (x if term_x else u) * r.pow(power) * mean if term else 0)
    return {"dx": dx}


def correct(case: Case) -> dict[str, torch.Tensor]:
    """The float64 oracle: dx = r·u − x·r³·mean(u·x) and partial = dy·x·r."""
    x, gamma, dy, r, _ = _parts(case)
    return {**_dx(case), "partial": dy * x * r}


def u_without_gamma(parts=None) -> Symptom:
    """u = dy without gamma, on 04's model of dx; ``parts`` (case → x, gamma, dy, rstd (M, 1), u) another
    exercise's inputs (10 loads its rstd), so that every exercise computing dx names this slip in one way."""
    return Symptom(
        "u lacks gamma (u = dy instead of dy·gamma)",
        lambda c: {"dx": _dx(c, u_gamma=False, parts=parts)["dx"]},
        "Load gamma and use u = dy · gamma in both terms.",
    )


MORE_SYMPTOMS = more_symptoms(_parts, _dx)

SYMPTOMS = [
    Symptom(
        "mean(u·x) is divided by BLOCK_SIZE instead of N",
        lambda c: _dx(c, divide_by=c.block_size),
        "The padded lanes add 0 to the sum but are not columns: divide by N, as the forward does. "
        "At N = 256 = BLOCK_SIZE the two agree, which is why a test at 256 alone misses it.",
    ),
    Symptom(
        "dx lacks the r³ term",
        lambda c: _dx(c, term=False),
        "dx = r·u − x·r³·mean(u·x): r depends on the whole row, so every x also moves every output "
        "through r.",
    ),
    Symptom(
        "the second term has r where it needs r³",
        lambda c: _dx(c, power=1),
        "∂r/∂x_i = −x_i·r³/N: the term is x·r³·mean(u·x) (`rstd * rstd * rstd`).",
    ),
    Symptom(
        "the second term has r² where it needs r³",
        lambda c: _dx(c, power=2),
        "∂r/∂x_i = −x_i·r³/N: the term is x·r³·mean(u·x) (`rstd * rstd * rstd`).",
    ),
    Symptom(
        "the second term uses mean(u) instead of mean(u·x)",
        lambda c: _dx(c, ux=False),
        "The r³ term is x·r³·mean(u·x): multiply u by x before summing the row.",
    ),
    u_without_gamma(),
    Symptom(
        "mean(u·x) is divided by N − 1 instead of N",
        lambda c: _dx(c, divide_by=c.N - 1),
        "It is a mean over the row's N columns, each counted once (N − 1 belongs to a sample variance, "
        "not here): `mean_ux = tl.sum(u * x, axis=0) / N`.",
    ),
    Symptom(
        "mean(u·x) is computed from dy·x: gamma is missing from the mean's u (u = dy · gamma)",
        lambda c: _dx(c, mean_gamma=False),
        "Both terms of dx use u = dy · gamma: `mean_ux = tl.sum(u * x, axis=0) / N`, with u, not dy.",
    ),
    Symptom(
        "the r³ term is added instead of subtracted",
        lambda c: _dx(c, sign=1.0),
        "dx = r·u − x·r³·mean(u·x).",
    ),
    Symptom(
        "partial lacks rstd (it holds dy·x)",
        lambda c: {"partial": c.f64("dy") * c.f64("x")},
        "Store partial = dy · x · rstd: dgamma = Σ_rows dy · x · r.",
    ),
    Symptom(
        "partial includes gamma (it holds dy·gamma·x·rstd)",
        lambda c: {"partial": _parts(c)[4] * c.f64("x") * _parts(c)[3]},
        "y = x·r·gamma, so ∂y/∂gamma = x·r: partial = dy · x · rstd, without gamma.",
    ),
    Symptom(
        "every row reads and writes the first row: the offsets lack the row's offset (`row * row_stride`)",
        lambda c: _first_row_only(c),
        "Program `row` owns one row: `offsets = row * row_stride + cols`, for x, dy, dx and partial alike.",
    ),
    Symptom(
        "every row reads the first row of x: its load address lacks the row's offset (`x_ptr + cols`)",
        lambda c: _dx_from_first_x(c),
        "Load x at `x_ptr + offsets`, like dy: `offsets = row * row_stride + cols`.",
    ),
    Symptom(
        "every row reads the first row of dy: its load address lacks the row's offset (`dy_ptr + cols`)",
        lambda c: _dx_from_first_dy(c),
        "Load dy at `dy_ptr + offsets`, like x: `offsets = row * row_stride + cols`.",
    ),
    *MORE_SYMPTOMS,
]


def _dx_from_first_x(case: Case) -> dict[str, torch.Tensor]:
    """dx and partial when every row's program reads x of row 0 (dy, rstd of its own row)."""
    x, gamma, dy, r, u = _parts(case)
    x0 = x[:1].expand_as(x)
    return {"dx": r * u - x0 * r.pow(3) * (u * x0).sum(-1, keepdim=True) / case.N, "partial": dy * x0 * r}


def _dx_from_first_dy(case: Case) -> dict[str, torch.Tensor]:
    """dx and partial when every row's program reads dy of row 0 (x, rstd of its own row)."""
    x, gamma, dy, r, _ = _parts(case)
    dy0 = dy[:1].expand_as(dy)
    u0 = dy0 * gamma
    return {"dx": r * u0 - x * r.pow(3) * (u0 * x).sum(-1, keepdim=True) / case.N, "partial": dy0 * x * r}


def _first_row_only(case: Case) -> dict[str, torch.Tensor]:
    """What M programs reading and writing row 0, in order, leave: the last program's dx and partial in row 0."""
    x, gamma, dy, r, u = _parts(case)
    r_last = r[-1:]
    dx, partial = torch.full_like(x, float("nan")), torch.full_like(x, float("nan"))
    dx[0] = (r_last * u[:1] - x[:1] * r_last.pow(3) * (u[:1] * x[:1]).sum(-1, keepdim=True) / case.N)[0]
    partial[0] = (dy[:1] * x[:1] * r_last)[0]
    return {"dx": dx, "partial": partial}


EXAMPLE = ("x, gamma, dy = torch.randn(3, 257), torch.ones(257), torch.randn(3, 257); rstd = torch.rsqrt("
           "x.square().mean(-1) + 1e-6); dx = torch.empty_like(x); partial = torch.empty_like(x); "
           "my_dx_kernel[(3,)](x, gamma, dy, rstd, dx, partial, 257, 257, BLOCK_SIZE=512)")
MASK_EXAMPLE = ("With N = 257 the lanes 257…511 of the block would read or write past the row "
                "(past the tensor on the last row)")


def launch(case: Case) -> Launch:
    """The launch ``backward_rows`` makes (rstd from the package's forward), on guarded copies."""
    _, rstd = forward_op(case.inputs["x"], case.inputs["gamma"], case.eps)
    M, N, stride = case.M, case.N, case.row_stride
    gamma_room = GUARD + M * case.stride  # gamma read at a row's offsets still lands in its guard
    tensors = (given("x", case.inputs["x"], stride), given("gamma", case.inputs["gamma"], room=gamma_room),
               given("dy", case.inputs["dy"], stride), given("rstd", rstd, room=GUARD + M * case.stride),
               made("dx", (M, N), case.dtype, stride, fix=mask_to_stride("dx", M, N, case.stride)),
               made("partial", (M, N), torch.float32, stride, fix=mask_to_stride("partial", M, N, case.stride)))
    BLOCK_SIZE = triton.next_power_of_2(N)
    return Launch(tensors, (M,), ("x", "gamma", "dy", "rstd", "dx", "partial", case.stride, N),
                  {"BLOCK_SIZE": BLOCK_SIZE, "num_warps": num_warps_for(BLOCK_SIZE)})


def _cases() -> list[Case]:
    # x of scale 3 (rstd ≈ 1/3): a slip that adds or drops a factor rstd changes the result threefold there.
    return [*row_cases(with_dy=True), random_case(Case, "5×257 float32 with values of scale 3 (rstd ≈ 1/3)", 5, 257,
                                                  seed=11, scale=3.0, names=("x", "gamma", "dy"))]


def _success(runs) -> str:
    cases = [r.case for r in runs]
    return (f"dx and partial match the float64 oracle on {len(cases)} cases ({describe(cases)}; rows further apart "
            "than N), N = 256 and N = 257 alike; nothing outside the tensors was read or written; it compiles for a "
            "GPU.")


#: Exercise 04, declared: judged by :func:`rmsnorm_course.checkers.kernels.check`.
SPEC = ExerciseSpec(
    exercise=EXERCISE,
    reference=rmsnorm_dx_kernel,
    int64_row='`row = tl.program_id(0).to(tl.int64)`',
    signatures=typed({"x_ptr": "*{t}", "gamma_ptr": "*{t}", "dy_ptr": "*{t}", "rstd_ptr": "*fp32", "dx_ptr": "*{t}",
                      "partial_ptr": "*fp32", "row_stride": "i32", "N": "i32", "BLOCK_SIZE": "constexpr"},
                     {"BLOCK_SIZE": 512}),
    cases=_cases,
    launch=launch,
    oracle=correct,
    symptoms=tuple(SYMPTOMS),
    parts={"row_scale": "a factor of rstd is wrong: rstd's load (`rstd_ptr + row`) or the powers of rstd in dx's "
                        "terms (`rstd * u`, `x * rstd * rstd * rstd * mean_ux`); the per-element part is right",
           "partial.row_scale": "partial's factor rstd is wrong (partial = dy · x · rstd); dy · x is right",
           "column_factor": "gamma is wrong: its load (`gamma_ptr + cols`) or u = dy · gamma; the rest is right",
           "dx.row_store": "store dx at `dx_ptr + offsets`, with the row's offsets the loads use "
                           "(`offsets = row * row_stride + cols`)",
           "partial.row_store": "store partial at `partial_ptr + offsets`, like dx (`offsets = row * row_stride + "
                                "cols`)",
           "zero_row": "this kernel is given rstd, which the forward computed with eps (the kernel has no eps to "
                       "add): load it, `rstd = tl.load(rstd_ptr + row)`, instead of computing it again"},
    success=_success,
    example=EXAMPLE,
    mask_note=MASK_EXAMPLE,
    outside=OUTSIDE,
    terms=explainer(lambda c: _parts(c)[:4], "x"),
)

"""Checker of exercise 03: the learner's forward kernel, launched as ``forward_op`` launches its own.

Symptoms recognised (each a classic mistake, modelled in float64):
mean divided by BLOCK_SIZE, gamma not applied, eps missing, the eps argument
ignored, eps added after the square root, multiplying by the RMS instead of
its inverse, rstd stored as the RMS, squares computed in float16 (overflow
past 65504), rstd rounded to 16 bits, x loaded or y stored without the row's
offset (every row reads, or writes into, the first row), x loaded from a later row
(``(row + 1) * x_row_stride``: the last program reads past x) or at ``x_ptr + row + cols`` (no stride),
gamma loaded with the row's offset; and (:mod:`rmsnorm_course.checkers.ex03_symptoms`) ``tl.max`` for
``tl.sum``, eps added after ``tl.rsqrt``, divided by N or added to N, the square of the row's sum, y without
rstd, eps added to every square in the sum, rstd stored as mean(x²); plus, before any launch, unmasked
loads/stores and a wrong signature (BLOCK_SIZE without
``: tl.constexpr`` named at its line); and, after, unwritten elements (outputs start as NaN; a block
narrower than the row, and row 0 alone written, as by ``tl.program_id(1)`` on the 1-D grid, are named),
float16-only failures, and what every kernel check finds
(:mod:`rmsnorm_course.checkers.kernels`): reads or writes outside the tensors, a write into an input, a
masked load without ``other=``, a crash, an endless loop, code the GPU compiler rejects.

Source: solutions/03_forward_kernel.ipynb.
"""

from __future__ import annotations

import torch
import triton

from rmsnorm.article.forward import num_warps_for, rmsnorm_forward_kernel
from .cases import FLOAT16_MAX, describe, row_cases, sum_of_squares
from .diagnose import Case, Symptom, close, evidence, first_difference, tolerance
from .ex03_symptoms import GAMMA_ROW_OFFSET, rstd_outside
from .ex03_symptoms import SYMPTOMS as MORE_SYMPTOMS
from .ex03_symptoms import outputs as _outputs
from .guards import GUARD
from .spec import PROBE, ExerciseSpec, Launch, given, made, typed

EXERCISE = "03 · forward kernel"


def correct(case: Case) -> dict[str, torch.Tensor]:
    """The float64 oracle: y and rstd = 1/sqrt(mean(x²) + eps)."""
    return _outputs(case, torch.rsqrt(sum_of_squares(case) / case.N + case.eps))


def _fp16_sum(case: Case) -> dict[str, torch.Tensor | None]:
    sumsq = sum_of_squares(case)
    rstd = torch.rsqrt(sumsq / case.N + case.eps)
    if case.dtype != torch.float16:
        return {}
    # A float16 sum past 65504 rounds to inf, and rsqrt(inf) = 0; elsewhere rstd is only float16-accurate.
    rstd = torch.where(sumsq >= FLOAT16_MAX + 16, torch.zeros_like(rstd), rstd)
    return {"y": _outputs(case, rstd)["y"], "rstd": None}


def _rms(case: Case) -> torch.Tensor:
    return torch.sqrt(sum_of_squares(case) / case.N + case.eps)


SYMPTOMS = [
    Symptom(
        "the mean is divided by BLOCK_SIZE instead of N",
        lambda c: _outputs(c, torch.rsqrt(sum_of_squares(c) / c.block_size + c.eps)),
        "The masked lanes add 0 to the sum, but they are not data: divide by N (they agree only "
        "when N is a power of two, like 256).",
    ),
    Symptom(
        "gamma is not applied",
        lambda c: _outputs(c, torch.rsqrt(sum_of_squares(c) / c.N + c.eps), gamma=False),
        "y = x · rstd · gamma: load gamma (one per column) and multiply.",
    ),
    Symptom(
        "eps is missing",
        lambda c: _outputs(c, torch.rsqrt(sum_of_squares(c) / c.N)),
        "Add eps to mean(x²) before the square root (a row of zeros then gives 0, not NaN).",
    ),
    Symptom(
        "the eps argument is ignored (1e-6 is used whatever eps the launcher passes)",
        lambda c: _outputs(c, torch.rsqrt(sum_of_squares(c) / c.N + 1e-6)),
        "Use the kernel's `eps` parameter: rstd = 1/sqrt(mean(x²) + eps).",
    ),
    Symptom(
        "eps is added after the square root",
        lambda c: _outputs(c, 1 / (torch.sqrt(sum_of_squares(c) / c.N) + c.eps)),
        "rstd = 1/sqrt(mean(x²) + eps): eps goes inside the square root.",
    ),
    Symptom(
        "y is multiplied by the RMS sqrt(mean(x²) + eps) instead of its inverse",
        lambda c: _outputs(c, _rms(c)),
        "rstd = 1/sqrt(mean(x²) + eps), e.g. `tl.rsqrt(...)`; then y = x · rstd · gamma.",
    ),
    Symptom(
        "y is right but rstd holds the RMS, not its inverse",
        lambda c: {"rstd": _rms(c).reshape(-1)},
        "Store the same rstd = 1/sqrt(mean(x²) + eps) that multiplies x: the backward reuses it.",
    ),
    Symptom(
        "the squares are computed in float16, which overflows past 65504",
        _fp16_sum,
        "Convert x (and gamma) to float32 right after loading, `.to(tl.float32)`, before squaring and summing.",
    ),
    Symptom(
        "every row reads the first row: the load address of x lacks the row's offset (`row * x_row_stride`)",
        lambda c: _outputs(_first_row(c), torch.rsqrt(sum_of_squares(_first_row(c)) / c.N + c.eps)),
        "Program `row` owns one row: load x at `x_ptr + row * x_row_stride + cols`.",
    ),
    Symptom(
        "every row writes into the first row of y: the store address lacks the row's offset (`row * y_row_stride`)",
        lambda c: {"y": _last_row_in_first(correct(c)["y"])},
        "Store at `y_ptr + row * y_row_stride + cols` (the other rows of y are never written).",
    ),
    *MORE_SYMPTOMS,
]


def _first_row(case: Case) -> Case:
    """The case with every row of x replaced by its first row (what a load without the row's offset reads)."""
    x = case.inputs["x"]
    return Case(case.label, {**case.inputs, "x": x[:1].expand_as(x)}, case.eps, row_stride=case.row_stride)


def _last_row_in_first(y: torch.Tensor) -> torch.Tensor:
    """What M programs storing their rows at row 0, in order, leave: the last row there, NaN elsewhere."""
    left = torch.full_like(y, float("nan"))
    left[0] = y[-1]
    return left


def _next_row(case: Case) -> dict[str, torch.Tensor]:
    """What program ``row`` gives when it loads row ``row + 1`` of x: the last one reads :data:`~.spec.PROBE`."""
    x = case.inputs["x"]
    shifted = torch.cat([x[1:], torch.full_like(x[:1], PROBE)])
    return correct(Case(case.label, {**case.inputs, "x": shifted}, case.eps, row_stride=case.row_stride))


def _row_without_stride(case: Case) -> dict[str, torch.Tensor]:
    """What program ``row`` gives when it loads x at `x_ptr + row + cols`: the N elements from element ``row``, the
    gaps between rows (and past x) reading :data:`~.spec.PROBE`."""
    x, S, N = case.inputs["x"], case.stride, case.N
    memory = torch.full((case.M * S + N,), PROBE, dtype=x.dtype, device=x.device)
    for r in range(case.M):
        memory[r * S: r * S + N] = x[r]
    shifted = torch.stack([memory[r: r + N] for r in range(case.M)])
    return correct(Case(case.label, {**case.inputs, "x": shifted}, case.eps, row_stride=case.row_stride))


#: Reads outside x, modelled on the run with PROBE around the tensors.
OUTSIDE = (
    Symptom(
        "the row offset of x's load points past the program's own row: program `row` reads a later row of x (as "
        "`(row + 1) * x_row_stride` does), so the last program reads past x's last row",
        _next_row,
        "Rows are numbered from 0 and program `row` owns row `row`: load x at `x_ptr + row * x_row_stride + cols`.",
    ),
    GAMMA_ROW_OFFSET,
    Symptom(
        "x's load adds the row index itself, not the row's offset (`x_ptr + row + cols`): program `row` reads the N "
        "elements from element `row`, which overlap row 0 and, where the rows are further apart than N, the gap "
        "after it",
        _row_without_stride,
        "The row index counts rows, the stride turns it into elements: load x at "
        "`x_ptr + row * x_row_stride + cols`.",
    ),
)


EXAMPLE = ("x = torch.randn(3, 257); y = torch.empty_like(x); rstd = torch.empty(3); "
           "my_forward_kernel[(3,)](x, torch.ones(257), y, rstd, 257, 257, 257, 1e-6, BLOCK_SIZE=512)")
MASK_EXAMPLE = ("With N = 257 the lanes 257…511 of the block would read or write past the row "
                "(past the tensor on the last row)")


def launch(case: Case) -> Launch:
    """The launch ``forward_op`` makes, on guarded copies of the case's tensors (y's rows 16 further apart)."""
    M, N = case.M, case.N
    y_row_stride = case.row_stride + 16 if case.row_stride else None
    fix = "check the store's mask (`cols < N`) and its address, `y_ptr + row * y_row_stride + cols`" + (
        " (y has a row stride of its own: here its rows are 16 elements further apart than x's)"
        if case.row_stride else "")
    BLOCK_SIZE = triton.next_power_of_2(N)
    gamma_room = GUARD + M * case.stride + BLOCK_SIZE  # gamma read at a row's offset still lands in its guard
    tensors = (given("x", case.inputs["x"], case.row_stride), given("gamma", case.inputs["gamma"], room=gamma_room),
               made("y", (M, N), case.dtype, y_row_stride, fix=fix),
               made("rstd", (M,), torch.float32, room=GUARD + M * case.stride, fix=rstd_outside(M, case.stride)))
    return Launch(tensors, (M,), ("x", "gamma", "y", "rstd", case.stride, y_row_stride or N, N,
                                  float(case.eps)), {"BLOCK_SIZE": BLOCK_SIZE, "num_warps": num_warps_for(BLOCK_SIZE)})


def _rstd_in_16_bits(runs) -> str | None:
    """Every float32 case passes; in float16 cases y passes and rstd is off by no more than a float16 rounding."""
    for run in runs:
        got, want = run.actual["rstd"].double(), run.expected["rstd"]
        y_ok = close(run.actual["y"], run.expected["y"], tolerance(run.actual["y"]))
        if run.case.dtype == torch.float16:
            if not y_ok or not torch.all((got - want).abs() <= 2 ** -10 * want.abs()):
                return None
        elif not (y_ok and close(run.actual["rstd"], want, tolerance(run.actual["rstd"]))):
            return None
    off = [r for r in runs if not close(r.actual["rstd"], r.expected["rstd"], tolerance(r.actual["rstd"]))]
    if not off:
        return None
    run = off[0]
    index = first_difference(run.actual["rstd"], run.expected["rstd"], tolerance(run.actual["rstd"]))
    shown = evidence(run, "rstd", index)
    return ("rstd is rounded to 16 bits for float16 inputs (y is fine; your loads are fine): "
            f"{shown}. rstd is float32 whatever x's dtype: compute and store it in float32, without "
            "`.to(x_ptr.dtype.element_ty)` or a float16 intermediate.")


def _success(runs) -> str:
    cases = [r.case for r in runs]
    ones = runs[0].actual["y"][0, 0].item()
    return (f"y and rstd match the float64 oracle on {len(cases)} cases ({describe(cases)}; rows further apart "
            f"than N; eps = 0.5); nothing outside the tensors was read or written; it compiles for a GPU; "
            f"a row of 257 ones gives {ones:.7f}.")


#: Exercise 03, declared: judged by :func:`rmsnorm_course.checkers.kernels.check`.
SPEC = ExerciseSpec(
    exercise=EXERCISE,
    reference=rmsnorm_forward_kernel,
    int64_row='`row = tl.program_id(0).to(tl.int64)`',
    signatures=typed({"x_ptr": "*{t}", "gamma_ptr": "*{t}", "y_ptr": "*{t}", "rstd_ptr": "*fp32",
                      "x_row_stride": "i32", "y_row_stride": "i32", "N": "i32", "eps": "fp32",
                      "BLOCK_SIZE": "constexpr"}, {"BLOCK_SIZE": 512}),
    cases=row_cases,
    launch=launch,
    oracle=correct,
    symptoms=tuple(SYMPTOMS),
    parts={"row_scale": "the row's scale is wrong: rstd = 1/sqrt(mean(x²) + eps) (the sum of the squares, its divisor "
                        "N, eps); x · gamma, the per-element part, is right",
           "column_factor": "gamma is wrong: its load (`gamma_ptr + cols`) or the product `x * rstd * gamma`; "
                            "the rest is right",
           "rstd.row_store": "rstd has one value per row: store it at `tl.store(rstd_ptr + row, rstd)`",
           "y.row_store": "store y at `y_ptr + row * y_row_stride + cols`",
           "zero_row": "rstd = 1/sqrt(mean(x²) + eps): add eps to the mean, inside the root, "
                       "`rstd = tl.rsqrt(tl.sum(x * x, axis=0) / N + eps)`"},
    success=_success,
    example=EXAMPLE,
    mask_note=MASK_EXAMPLE,
    first_looks=(_rstd_in_16_bits,),
    outside=OUTSIDE,
)

"""Checkers of exercise 15: LayerNorm, the forward (one row per program) and the backward (a persistent grid).

The learner's kernels have the signatures of :mod:`rmsnorm_course.teaching.layernorm`::

    forward(x_ptr, weight_ptr, bias_ptr, y_ptr, mean_ptr, rstd_ptr, row_stride, N, eps, BLOCK_SIZE)
    backward(x_ptr, weight_ptr, mean_ptr, rstd_ptr, dy_ptr, dx_ptr, dweight_partial_ptr, dbias_partial_ptr,
             row_stride, M, N, BLOCK_SIZE)

The forward is launched with one program per row; its y, mean and rstd are compared with the float64
oracle, on cases with a constant row (variance 0, eps = 0.5), float16, rows further apart than N, and rows
of mean 1000 and standard deviation 1, where E[x²] − E[x]² cancels in float32. The backward is launched on
P programs (1 to 4, more than the rows included), as exercise 10's; its dx and both (P, N) partials are
compared with the float64 oracle computed from the float32 mean and rstd it is given.

Symptoms recognised (modelled in float64, :mod:`rmsnorm_course.checkers.ex15_symptoms`): the variance divided by
N − 1, the masked lanes' deviations left in it, the mean never subtracted (from the variance, from y or both),
the bias left out or added before the weight, eps misplaced, the sums divided by BLOCK_SIZE, mean and rstd stored
swapped; in the backward, dx without its mean term or its x̂ term or its last rstd, the x̂ term added, u without
the weight, mean(u) over BLOCK_SIZE, mean(u · x) of the raw x, x̂ without the mean, the mean term of dy, mean and
rstd loaded at `pid`, the bias's or the weight's sum over the wrong axis, the two partials swapped, dy · x in
dweight's, dy · rstd in dbias's, the accumulators zeroed in the loop, the partials stored only inside it. First
look, before the symptoms: the naive variance, E[x²] − E[x]², which only float32 rounding makes wrong
(:func:`_naive_variance`). Plus everything the one harness finds (:mod:`rmsnorm_course.checkers.kernels`).

Source: solutions/15_layernorm.ipynb.
"""

from __future__ import annotations

import math

import torch
import triton

from rmsnorm.device import default_device
from rmsnorm.testing import make_inputs
from rmsnorm_course.teaching.layernorm import layernorm_backward_kernel, layernorm_forward_kernel
from .cases import GRIDS_SAID, GridCase, counted, on_grids
from .diagnose import Case, _case_passes, close, evidence, first_difference, fmt, tolerance
from .ex03_symptoms import rstd_outside
from .ex15_symptoms import BACKWARD, FORWARD, correct_backward, correct_forward
from .guards import GUARD
from .spec import ExerciseSpec, Launch, checked_rows, given, made, typed

#: The shift of the cancelling case's rows: mean 1000, standard deviation 1, so E[x²] ≈ 10⁶ + 1.
SHIFT = 1000.0

#: The tolerance of that case, declared with it: its float32 mean is off by up to log2(N) half-ulps of 1000
#: (9 · 3.1e-5 ≈ 2.7e-4 for N = 257), and y = (x − mean) · rstd · weight carries that error times |weight| ≤ 2.5
#: over a standard deviation of 1: up to 7e-4, which no float32 kernel can avoid. The naive variance's rstd is off
#: by about 1e-2 there, ten times more.
SHIFTED_TOLERANCE = {"atol": 1e-3, "rtol": 1e-4}


def forward_cases() -> list[Case]:
    """M = 1, N = 257 and 33, a constant row with eps = 0.5, float16, a row stride, N = 1000, rows of mean 1000."""

    def case(label, M, N, dtype=torch.float32, seed=0, stride=None, eps=1e-6, constant=False, shift=0.0):
        x, weight, _ = make_inputs(M, N, dtype, device=default_device(), seed=seed)
        bias = make_inputs(1, N, dtype, device=default_device(), seed=seed + 100)[0].reshape(N)
        x = x + shift
        if constant:  # row 0 is 2.0 everywhere: its variance is 0, eps alone keeps rstd finite
            x[0] = 2.0
        return Case(label, {"x": x, "weight": weight, "bias": bias}, eps, row_stride=stride,
                    tolerance=SHIFTED_TOLERANCE if shift else None)

    return [
        case("1×256 float32", 1, 256, seed=60),
        case("17×257 float32", 17, 257, seed=61),
        case("5×33 float32, eps = 0.5, row 0 constant (2.0 in every column: variance 0)", 5, 33, seed=62, eps=0.5,
             constant=True),
        case("17×257 float16", 17, 257, torch.float16, seed=63),
        case("6×257 float32 with rows 300 elements apart", 6, 257, seed=64, stride=300),
        case("3×1000 float32 (BLOCK_SIZE = 1024)", 3, 1000, seed=65),
        case(f"4×257 float32 rows of mean {SHIFT:g} and standard deviation 1", 4, 257, seed=66, shift=SHIFT),
    ]


def backward_cases() -> list[GridCase]:
    """Exercise 10's grids, :data:`~.cases.GRIDS`: P = 1, 3 and 4, more programs than rows, a row stride, float16.

    x has mean 1 and scale 3, dy mean 0.5: rstd is about 1/3 and mean(u) is far from 0, so a missing factor of
    rstd and a missing mean term both show in every element. mean and rstd are x's, float32, as the forward saves.
    """

    def case(label, M, N, P, dtype, seed, stride):
        x, weight, dy = make_inputs(M, N, dtype, device=default_device(), seed=seed)
        x, dy = (3 * x + 1).to(dtype), (dy + 0.5).to(dtype)
        x64 = x.double()
        mean = x64.mean(-1)
        rstd = torch.rsqrt((x64 - mean[:, None]).square().mean(-1) + 1e-6)
        inputs = {"x": x, "weight": weight, "mean": mean.float(), "rstd": rstd.float(), "dy": dy}
        return GridCase(label, inputs, row_stride=stride, programs=P)

    return on_grids(case, first_seed=70)


def _forward_launch(case: Case) -> Launch:
    """One program per row, on guarded copies; x and y share the row stride."""
    M, N = case.M, case.N
    room = GUARD + M * case.stride  # a per-row value stored at the row's offset stays in the guard
    tensors = (given("x", case.inputs["x"], case.stride), given("weight", case.inputs["weight"]),
               given("bias", case.inputs["bias"]), made("y", (M, N), case.dtype, case.stride),
               made("mean", (M,), torch.float32, room=room),
               made("rstd", (M,), torch.float32, room=room, fix=rstd_outside(M, case.stride, "row_stride")))
    return Launch(tensors, (M,), ("x", "weight", "bias", "y", "mean", "rstd", case.stride, N, float(case.eps)),
                  {"BLOCK_SIZE": triton.next_power_of_2(N)})


def _backward_launch(case: GridCase) -> Launch:
    """P programs, on guarded copies: exercise 10's launch with mean and a second partial."""
    M, N, P, stride = case.M, case.N, case.programs, case.stride
    room = GUARD + max(M, P) * stride + triton.next_power_of_2(N)  # another row's offset stays in the buffer
    partial = ("each partial has one row per program: store it once, after the loop, at "
               "`dweight_partial_ptr + pid * N + cols` (and the same for dbias_partial_ptr)")
    tensors = (given("x", case.inputs["x"], stride, room), given("weight", case.inputs["weight"], room=room),
               given("mean", case.inputs["mean"], room=room), given("rstd", case.inputs["rstd"], room=room),
               given("dy", case.inputs["dy"], stride, room),
               made("dx", (M, N), case.dtype, stride, room,
                    fix="check the store's mask (`cols < N`) and its address (`row * row_stride + cols`)"),
               made("dweight_partial", (P, N), torch.float32, room=room, fix=partial),
               made("dbias_partial", (P, N), torch.float32, room=room, fix=partial))
    return Launch(tensors, (P,), ("x", "weight", "mean", "rstd", "dy", "dx", "dweight_partial", "dbias_partial",
                                  stride, M, N), {"BLOCK_SIZE": triton.next_power_of_2(N)})


def _shifted(run) -> bool:
    """Is this the case whose rows have mean :data:`SHIFT`, where E[x²] − E[x]² cancels in float32?"""
    return abs(float(run.expected["mean"].abs().min())) > SHIFT / 2


def _naive_variance(runs) -> str | None:
    """Every case passes but the rows of mean 1000, whose mean is right and whose rstd is off by what float32 makes of
    E[x²] − E[x]²: the variance the learner's rstd implies is within a few roundings of E[x²] (2^-24 · E[x²] · log2 N
    each) of the true one, or not a number at all (a variance that came out negative or zero)."""
    shifted = [run for run in runs if _shifted(run)]
    if not shifted or not all(_case_passes(run) for run in runs if not _shifted(run)):
        return None
    for run in shifted:
        mean, rstd = run.actual.get("mean"), run.actual.get("rstd")
        if not (isinstance(mean, torch.Tensor) and isinstance(rstd, torch.Tensor)):
            return None
        if not close(mean, run.expected["mean"], tolerance(mean)) or close(rstd, run.expected["rstd"],
                                                                         tolerance(rstd)):
            return None
        x = run.case.f64("x")
        var = (x - x.mean(-1, keepdim=True)).square().mean(-1)
        implied = rstd.detach().to("cpu", torch.float64).pow(-2) - run.case.eps  # NaN where rstd is NaN
        roundings = 4 * math.log2(run.case.N) * 2.0 ** -24 * x.square().mean(-1)  # a few of E[x²]'s roundings
        plausible = ~torch.isfinite(implied) | ((implied - var).abs() <= roundings)
        if not bool(plausible.all()):
            return None
        index = first_difference(rstd, run.expected["rstd"], tolerance(rstd))
        row = index[0]
        return (f"the variance cancels: it is computed as E[x²] − E[x]², the mean of the squares minus the square of "
                f"the mean. On {run.case.label}, E[x²] is about {fmt(float(x[row].square().mean()), 1)} and the "
                f"variance about {fmt(float(var[row]))}: float32 keeps 24 bits of E[x²], so the difference of two "
                f"numbers near {fmt(float(x[row].square().mean()), 1)} is off by more than the variance itself. "
                f"{evidence(run, 'rstd', index)}. Every other case passes: in float64, and on rows of mean near 0, "
                "the formula is right. Subtract the mean first, then square what is left: "
                "`diff = tl.where(mask, x - mean, 0.0)`, `var = tl.sum(diff * diff, axis=0) / N`.")
    return None


def _forward_said(runs) -> str:
    cases = counted(runs, "a constant row", "rows further apart than N")
    return (f"y, mean and rstd match the float64 oracle on {cases}, rows of mean {SHIFT:g} included, where "
            "E[x²] − E[x]² would cancel; nothing outside the tensors was read or written.")


def _backward_said(runs) -> str:
    return f"dx and every row of both (P, N) partials match the float64 oracle on {counted(runs, GRIDS_SAID)}."


#: The backward's addresses in the loop, where a row after a program's first goes wrong (shapes' rows_from, some_rows).
PID_FOR_ROW = ("or an address inside it that uses `pid` where the loop's `row` belongs (`offsets`, `mean_ptr + row`, "
               "`rstd_ptr + row`)")

MASK_NOTE = "With N = 257 the block has 512 lanes: 255 of them are past the row, which `mask = cols < N` leaves out"

FORWARD_SPEC = ExerciseSpec(
    exercise="15 · LayerNorm forward", reference=layernorm_forward_kernel,
    int64_row="`row = tl.program_id(0).to(tl.int64)`",
    signatures=typed({"x_ptr": "*{t}", "weight_ptr": "*{t}", "bias_ptr": "*{t}", "y_ptr": "*{t}",
                      "mean_ptr": "*fp32", "rstd_ptr": "*fp32", "row_stride": "i32", "N": "i32", "eps": "fp32",
                      "BLOCK_SIZE": "constexpr"}, {"BLOCK_SIZE": 512}),
    cases=forward_cases, launch=_forward_launch, oracle=correct_forward, symptoms=tuple(FORWARD),
    success=_forward_said,
    example=("x = torch.randn(3, 257); y = torch.empty_like(x); mean, rstd = torch.empty(3), torch.empty(3); "
             "my_layernorm_kernel[(3,)](x, torch.ones(257), torch.zeros(257), y, mean, rstd, 257, 257, 1e-6, "
             "BLOCK_SIZE=512)"),
    mask_note=MASK_NOTE,
    parts={"row_scale": "the row's scale is wrong: rstd = 1/sqrt(var + eps), var the mean of (x − mean)² over N "
                        "columns; the per-element part is right",
           "column_factor": "the per-column factor is wrong: the weight's or the bias's load (`weight_ptr + cols`, "
                            "`bias_ptr + cols`), or `diff * rstd * weight + bias`",
           "zero_row": "rstd = 1/sqrt(var + eps): add eps to the variance, inside the root (row 0 of that case is "
                       "constant: its variance is 0)",
           "row_store": "store at the row's offset, `row * row_stride + cols`, as the load does"},
    first_looks=(_naive_variance,),
)

BACKWARD_SPEC = ExerciseSpec(
    exercise="15 · LayerNorm backward", reference=layernorm_backward_kernel,
    int64_row=("`offsets = tl.cast(row, tl.int64) * row_stride + cols` (`row.to(tl.int64)` fails under the "
               "interpreter, where a `range` loop's variable is a Python int)"),
    signatures=typed({"x_ptr": "*{t}", "weight_ptr": "*{t}", "mean_ptr": "*fp32", "rstd_ptr": "*fp32",
                      "dy_ptr": "*{t}", "dx_ptr": "*{t}", "dweight_partial_ptr": "*fp32",
                      "dbias_partial_ptr": "*fp32", "row_stride": "i32", "M": "i32", "N": "i32",
                      "BLOCK_SIZE": "constexpr"}, {"BLOCK_SIZE": 512}),
    cases=backward_cases, launch=_backward_launch, oracle=correct_backward, symptoms=tuple(BACKWARD),
    success=_backward_said,
    example=("x, dy = torch.randn(3, 257), torch.randn(3, 257); mean, rstd = x.mean(-1), "
             "x.var(-1, unbiased=False).add(1e-6).rsqrt(); dx = torch.empty_like(x); "
             "dw, db = torch.empty(2, 257), torch.empty(2, 257); "
             "my_layernorm_backward_kernel[(2,)](x, torch.ones(257), mean, rstd, dy, dx, dw, db, 257, 3, 257, "
             "BLOCK_SIZE=512)"),
    mask_note=MASK_NOTE,
    parts={"row_offset": "the row offset in every load and store (`row * row_stride + cols`, and mean and rstd at "
                         "`mean_ptr + row`, `rstd_ptr + row`): each row the loop visits, not row 0",
           "row_scale": "a factor of rstd is wrong: rstd's load (`rstd_ptr + row`) or the powers of rstd in "
                        "dx = (u - mean_u - x_hat · mean_ux) · rstd; the per-element part is right",
           "column_factor": "the per-column factor is wrong: the weight's load, or u = dy · weight",
           "last_rows": "the row loop stops before the end (check its bound: `range(pid, M, P)` runs to M itself), "
                        "or the last rows read NaN from outside the tensors (check their offsets)",
           "rows_from": "the rows each program visits after its first: the loop (`range(pid, M, P)`), " + PID_FOR_ROW,
           "some_rows": "which row a program reads or writes: the loop over rows (`range(pid, M, P)`), " + PID_FOR_ROW,
           "idle_programs": "store both partials once, after the loop, at `dweight_partial_ptr + pid * N + cols` and "
                            "`dbias_partial_ptr + pid * N + cols`: a program without rows then writes its zeros",
           "row_0_alone": "the grid is `(P,)`, one axis: take the program's index from axis 0, "
                          "`pid = tl.program_id(0)`",
           "dweight_partial.row_store": "dweight_partial has one row per program: store it once, after the loop, at "
                                        "`dweight_partial_ptr + pid * N + cols`",
           "dbias_partial.row_store": "dbias_partial has one row per program: store it once, after the loop, at "
                                      "`dbias_partial_ptr + pid * N + cols`",
           "dx.row_store": "store dx at `dx_ptr + offsets`, with the offsets of the row the loop visits",
           "zero_row": "this kernel is given mean and rstd, which the forward computed: load them, "
                       "`tl.load(mean_ptr + row)`, `tl.load(rstd_ptr + row)`, instead of computing them again"},
    **checked_rows("the inputs", "a row (a mask past N, another row's offset)"),
)

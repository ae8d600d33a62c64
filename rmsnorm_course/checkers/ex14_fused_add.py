"""Checkers of exercise 14: the residual add fused into the norm, forward and backward, one row per program.

The learner's kernels have the signatures of :mod:`rmsnorm_course.teaching.fused_add`::

    forward(x_ptr, residual_ptr, weight_ptr, y_ptr, residual_out_ptr, rstd_ptr, row_stride, N, eps,
            OFFSET, BLOCK_SIZE)
    backward(h_ptr, weight_ptr, rstd_ptr, dy_ptr, dres_ptr, dh_ptr, row_stride, N, OFFSET, BLOCK_SIZE)

each launched with one program per row. The forward's y, residual_out and rstd, and the backward's
dh, are compared with the float64 oracle, on cases with OFFSET = 0.0 and 1.0 (Gemma's 1 + weight), rows
further apart than N, float16, and (forward) a float16 x on a float32 residual stream, where
residual_out is float32.

Symptoms recognised (modelled in float64, :mod:`rmsnorm_course.checkers.ex14_symptoms`): residual_out never
written, holding the residual or x alone, swapped with y; the add after the norm; the norm (rstd, y or
both) read from x instead of h; h rounded to x's dtype on a float32 stream; the weight without its OFFSET;
a mean divided by BLOCK_SIZE; the weight loaded at the row's offset; in the backward, d_residual_out left
out, added twice, inside the bracket that rstd multiplies, or to dy, the norm's term left out, and a
factor rstd missing (the last one, or the second term's: a mean of u · h). Plus everything the one harness finds
(:mod:`rmsnorm_course.checkers.kernels`): a wrong signature, unmasked accesses, a write into an input,
reads and writes outside the tensors, a masked load without ``other=``, code a GPU would not compile,
an int32 row index, a crash, an endless loop.

Source: solutions/14_fusing_the_residual.ipynb.
"""

from __future__ import annotations

import torch
import triton

from rmsnorm.device import default_device
from rmsnorm.testing import make_inputs
from rmsnorm_course.teaching.fused_add import fused_add_backward_kernel, fused_add_forward_kernel
from .cases import AddBackwardCase, AddCase, describe
from .ex03_symptoms import rstd_outside
from .ex14_symptoms import BACKWARD, FORWARD, WEIGHT_ROW_OFFSET, correct_backward, correct_forward, norm_term
from .guards import GUARD
from .spec import ExerciseSpec, Launch, given, made, typed

GEMMA = "OFFSET = 1.0, Gemma's 1 + weight"


def forward_cases() -> list[AddCase]:
    """M = 1, N = 257 and 33, both OFFSETs, a row of h = 0 with eps = 0.5, float16, a float32 stream, a row stride."""

    def case(label, M, N, dtype=torch.float32, seed=0, stride=None, offset=0.0, stream=None, eps=1e-6,
             cancel=False):
        x, weight, residual = make_inputs(M, N, dtype, device=default_device(), seed=seed)
        residual = residual.to(stream or dtype)
        if cancel:  # row 0 of h = x + residual is zeros: eps alone keeps rstd finite
            residual[0] = -x[0].to(residual.dtype)
        return AddCase(label, {"x": x, "residual": residual, "weight": weight}, eps, row_stride=stride,
                       offset=offset)

    return [
        case("1×256 float32", 1, 256, seed=40),
        case("17×257 float32", 17, 257, seed=41),
        case(f"17×257 float32, {GEMMA}", 17, 257, seed=42, offset=1.0),
        case("5×33 float32, eps = 0.5, row 0 of the residual = −x (a row of h = 0)", 5, 33, seed=43, eps=0.5,
             cancel=True),
        case("17×257 float16", 17, 257, torch.float16, seed=44),
        case("9×257 float16 x on a float32 residual stream (residual_out float32)", 9, 257, torch.float16, seed=45,
             stream=torch.float32),
        case(f"6×257 float32 with rows 300 elements apart, {GEMMA}", 6, 257, seed=46, stride=300, offset=1.0),
        case("3×1000 float32 (BLOCK_SIZE = 1024)", 3, 1000, seed=47),
    ]


def backward_cases() -> list[AddBackwardCase]:
    """The forward's shapes: both OFFSETs, float16, a row stride; rstd is h's, float32, as the forward saves it.

    h has values of scale 3 (a residual stream grows from layer to layer), so rstd is about 1/3 and a factor of rstd
    too many or too few shows in every element, where with rstd ≈ 1 it would hide under the tolerance.
    """

    def case(label, M, N, dtype=torch.float32, seed=0, stride=None, offset=0.0):
        h, weight, dy = make_inputs(M, N, dtype, device=default_device(), seed=seed)
        h = h * 3
        dres = make_inputs(M, N, dtype, device=default_device(), seed=seed + 100)[2]
        rstd = torch.rsqrt(h.double().square().mean(-1) + 1e-6).float()
        return AddBackwardCase(label, {"h": h, "weight": weight, "rstd": rstd, "dy": dy, "dres": dres},
                               row_stride=stride, offset=offset)

    return [
        case("1×256 float32", 1, 256, seed=50),
        case("17×257 float32", 17, 257, seed=51),
        case(f"17×257 float32, {GEMMA}", 17, 257, seed=52, offset=1.0),
        case("17×257 float16", 17, 257, torch.float16, seed=53),
        case(f"6×257 float32 with rows 300 elements apart, {GEMMA}", 6, 257, seed=54, stride=300, offset=1.0),
        case("3×1000 float32 (BLOCK_SIZE = 1024)", 3, 1000, seed=55),
    ]


def _forward_launch(case: AddCase) -> Launch:
    """One program per row, on guarded copies; the five (M, N) tensors share the row stride."""
    M, N, stride, r = case.M, case.N, case.row_stride, case.inputs["residual"]
    room = GUARD + M * case.stride + triton.next_power_of_2(N)  # the weight read at a row's offset stays in its guard
    tensors = (given("x", case.inputs["x"], stride), given("residual", r, stride),
               given("weight", case.inputs["weight"], room=room), made("y", (M, N), case.dtype, stride),
               made("residual_out", (M, N), r.dtype, stride),
               made("rstd", (M,), torch.float32, room=GUARD + M * case.stride,
                    fix=rstd_outside(M, case.stride, "row_stride")))
    return Launch(tensors, (M,), ("x", "residual", "weight", "y", "residual_out", "rstd", case.stride, N,
                                  float(case.eps)), {"OFFSET": case.offset, "BLOCK_SIZE": triton.next_power_of_2(N)})


def _backward_launch(case: AddBackwardCase) -> Launch:
    M, N, stride = case.M, case.N, case.row_stride
    room = GUARD + M * case.stride + triton.next_power_of_2(N)
    tensors = (given("h", case.inputs["h"], stride), given("weight", case.inputs["weight"], room=room),
               given("rstd", case.inputs["rstd"]), given("dy", case.inputs["dy"], stride),
               given("dres", case.inputs["dres"], stride), made("dh", (M, N), case.dtype, stride))
    return Launch(tensors, (M,), ("h", "weight", "rstd", "dy", "dres", "dh", case.stride, N),
                  {"OFFSET": case.offset, "BLOCK_SIZE": triton.next_power_of_2(N)})


def _said(runs) -> str:
    cases = [r.case for r in runs]
    return f"{len(cases)} cases ({describe(cases)}; OFFSET = 0.0 and 1.0; rows further apart than N)"


#: The forward's parameters as a GPU compile types them (``{t}``: x's dtype).
FORWARD_TYPES = {"x_ptr": "*{t}", "residual_ptr": "*{t}", "weight_ptr": "*{t}", "y_ptr": "*{t}",
                 "residual_out_ptr": "*{t}", "rstd_ptr": "*fp32", "row_stride": "i32", "N": "i32", "eps": "fp32",
                 "OFFSET": "constexpr", "BLOCK_SIZE": "constexpr"}

FORWARD_SPEC = ExerciseSpec(
    exercise="14 · fused add forward", reference=fused_add_forward_kernel,
    int64_row="`row = tl.program_id(0).to(tl.int64)`",
    signatures=typed(FORWARD_TYPES, {"OFFSET": 1.0, "BLOCK_SIZE": 512})
    + typed({**FORWARD_TYPES, "residual_ptr": "*fp32", "residual_out_ptr": "*fp32"}, {"OFFSET": 1.0, "BLOCK_SIZE": 512},
            dtypes=("fp16",)),  # a float16 x on a float32 stream
    cases=forward_cases, launch=_forward_launch, oracle=correct_forward, symptoms=tuple(FORWARD),
    success=lambda runs: (f"y, residual_out and rstd match the float64 oracle on {_said(runs)}, a float32 residual "
                          "stream under float16 x included; nothing outside the tensors was read or written."),
    example=("x, residual = torch.randn(3, 257), torch.randn(3, 257); y, h = torch.empty_like(x), torch.empty_like(x); "
             "rstd = torch.empty(3); my_fused_add_kernel[(3,)](x, residual, torch.ones(257), y, h, rstd, 257, 257, "
             "1e-6, OFFSET=0.0, BLOCK_SIZE=512)"),
    mask_note="With N = 257 the block has 512 lanes: 255 of them are past the row, which `mask = cols < N` leaves out",
    parts={"row_scale": "the row's scale is wrong: rstd = 1/sqrt(mean(h²) + eps) of h = x + residual (its sum of "
                        "squares, N, eps); the per-element part is right",
           "column_factor": "the per-column factor is wrong: the weight's load (`weight_ptr + cols`), its OFFSET, "
                            "or the product `h * rstd * weight`",
           "zero_row": "rstd = 1/sqrt(mean(h²) + eps): add eps to the mean, inside the root "
                       "(row 0 of that case has h = x + residual = 0)",
           "row_store": "store at the row's offset, `row * row_stride + cols`, as the loads do"},
    outside=WEIGHT_ROW_OFFSET[:1],
)

BACKWARD_SPEC = ExerciseSpec(
    exercise="14 · fused add backward", reference=fused_add_backward_kernel,
    int64_row="`row = tl.program_id(0).to(tl.int64)`",
    signatures=typed({"h_ptr": "*{t}", "weight_ptr": "*{t}", "rstd_ptr": "*fp32", "dy_ptr": "*{t}",
                      "dres_ptr": "*{t}", "dh_ptr": "*{t}", "row_stride": "i32", "N": "i32",
                      "OFFSET": "constexpr", "BLOCK_SIZE": "constexpr"}, {"OFFSET": 1.0, "BLOCK_SIZE": 512}),
    cases=backward_cases, launch=_backward_launch, oracle=correct_backward, symptoms=tuple(BACKWARD),
    success=lambda runs: f"dh matches the float64 oracle on {_said(runs)}; nothing outside the tensors was touched.",
    example=("h, dy, dres = torch.randn(3, 257), torch.randn(3, 257), torch.randn(3, 257); dh = torch.empty_like(h); "
             "rstd = h.square().mean(-1).add(1e-6).rsqrt(); my_fused_add_backward_kernel[(3,)](h, torch.ones(257), "
             "rstd, dy, dres, dh, 257, 257, OFFSET=0.0, BLOCK_SIZE=512)"),
    mask_note="With N = 257 the block has 512 lanes: 255 of them are past the row, which `mask = cols < N` leaves out",
    parts={"row_scale": "a factor of rstd is wrong: its load (`rstd_ptr + row`) or the powers of rstd in "
                        "dh = (u - h_hat · mean_uh) · rstd + dres",
           "column_factor": "the per-column factor is wrong: the weight's load, its OFFSET, or u = dy · weight",
           "row_store": "store dh at the row's offset, `row * row_stride + cols`, as the loads do"},
    outside=WEIGHT_ROW_OFFSET[1:], terms=norm_term,
)

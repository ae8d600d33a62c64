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
both) read from x instead of h; h rounded to x's dtype on a float32 stream; the weight without its OFFSET,
or OFFSET added to the product; a mean divided by BLOCK_SIZE; the weight loaded at the row's offset; in the
backward, d_residual_out left out, added twice, inside the bracket that rstd multiplies, or to dy, or loaded
from dy_ptr, the norm's term left out, and a factor rstd missing (the last one, or the second term's: a mean
of u · h). Where residual_out is 16-bit (first looks, before the symptoms): the norm of the unrounded float32
sum instead of the stored h, the norm computed in float16 from the rounded h, and rstd held to
:data:`RSTD_OF_16_BIT_H`, tighter than float32's rtol 1e-4, which the unrounded sum passes. Plus everything
the one harness finds (:mod:`rmsnorm_course.checkers.kernels`): a wrong signature, unmasked accesses, a write
into an input, reads and writes outside the tensors, a masked load without ``other=``, code a GPU would not
compile, an int32 row index, a crash, an endless loop.

Source: solutions/14_fusing_the_residual.ipynb.
"""

from __future__ import annotations

import torch
import triton

from rmsnorm.device import default_device
from rmsnorm.testing import make_inputs
from rmsnorm_course.teaching.fused_add import fused_add_backward_kernel, fused_add_forward_kernel
from .cases import AddBackwardCase, AddCase, counted
from .diagnose import close, evidence, first_difference, fmt, tolerance
from .ex03_symptoms import rstd_outside
from .ex14_symptoms import (
    BACKWARD,
    FORWARD,
    WEIGHT_ROW_OFFSET,
    correct_backward,
    correct_forward,
    forward,
    norm_term,
    stream,
)
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
    too many or too few shows in every element, where with rstd ≈ 1 it would hide under the tolerance. One case's
    rstd was saved with eps = 0.5, so a kernel that computes rstd again from h, which it is not given eps for,
    does not match it.
    """

    def case(label, M, N, dtype=torch.float32, seed=0, stride=None, offset=0.0, eps=1e-6):
        h, weight, dy = make_inputs(M, N, dtype, device=default_device(), seed=seed)
        h = h * 3
        dres = make_inputs(M, N, dtype, device=default_device(), seed=seed + 100)[2]
        rstd = torch.rsqrt(h.double().square().mean(-1) + eps).float()
        return AddBackwardCase(label, {"h": h, "weight": weight, "rstd": rstd, "dy": dy, "dres": dres}, eps,
                               row_stride=stride, offset=offset)  # eps: the forward's, in rstd (not launched)

    return [
        case("1×256 float32", 1, 256, seed=50),
        case("17×257 float32", 17, 257, seed=51),
        case(f"17×257 float32, {GEMMA}", 17, 257, seed=52, offset=1.0),
        case("17×257 float16", 17, 257, torch.float16, seed=53),
        case(f"6×257 float32 with rows 300 elements apart, {GEMMA}", 6, 257, seed=54, stride=300, offset=1.0),
        case("3×1000 float32 (BLOCK_SIZE = 1024)", 3, 1000, seed=55),
        case("5×257 float32, rstd saved with eps = 0.5 (the kernel loads it: it is not given eps)", 5, 257, seed=56,
             eps=0.5),
    ]


def _forward_launch(case: AddCase) -> Launch:
    """One program per row, on guarded copies; the four (M, N) tensors share the row stride."""
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
    """One program per row, on guarded copies; h, dy, dres and dh share the row stride."""
    M, N, stride = case.M, case.N, case.row_stride
    room = GUARD + M * case.stride + triton.next_power_of_2(N)
    tensors = (given("h", case.inputs["h"], stride), given("weight", case.inputs["weight"], room=room),
               given("rstd", case.inputs["rstd"]), given("dy", case.inputs["dy"], stride),
               given("dres", case.inputs["dres"], stride), made("dh", (M, N), case.dtype, stride))
    return Launch(tensors, (M,), ("h", "weight", "rstd", "dy", "dres", "dh", case.stride, N),
                  {"OFFSET": case.offset, "BLOCK_SIZE": triton.next_power_of_2(N)})


#: rstd's tolerance where residual_out is 16-bit, declared with the check: float32 arithmetic on the stored h (a
#: tree sum of N ≤ 1000 positive squares, ≤ log2(N) roundings of 2^-24 each, then rsqrt) is within 1e-6 on CPU and
#: GPU (1.2e-7 measured on 17×257 float16), while the norm of the unrounded sum is off by 5e-6 to 3e-5 on its rows.
RSTD_OF_16_BIT_H = {"atol": 0.0, "rtol": 5e-6}


def _rounded(run) -> bool:
    """Is residual_out 16-bit in this run, so that the store rounds h?"""
    return run.case.inputs["residual"].dtype in (torch.float16, torch.bfloat16)


def _passes(run) -> bool:
    return all(close(run.actual.get(n), want, tolerance(run.actual[n], run.case)) for n, want in run.expected.items())


def _y_share(run, model) -> tuple[int, int]:
    """(elements of y where the oracle and ``model`` round apart, how many of them hold the model's rounding)."""
    y, dtype = run.actual["y"].to("cpu"), run.actual["y"].dtype
    right, slip = run.expected["y"].to(dtype), model["y"].to(dtype)
    apart = right != slip
    return int(apart.sum()), int((y == slip)[apart].sum())


def _norm_of_unrounded_sum(runs) -> str | None:
    """The norm reads the float32 sum x + residual, not the h stored (rounded) in residual_out: on a 16-bit stream
    rstd is that sum's to float32 precision, off the stored h's by more than :data:`RSTD_OF_16_BIT_H`, and y holds
    that sum's rounding where the two round apart. A float32 stream rounds nothing: the slip shows only here."""
    for run in filter(_rounded, runs):
        if not all(isinstance(run.actual.get(n), torch.Tensor) for n in ("y", "rstd")):
            return None
        model = forward(run.case, h=stream(run.case, torch.float32))
        rstd = run.actual["rstd"]
        off = not close(rstd, run.expected["rstd"], RSTD_OF_16_BIT_H)
        apart, held = _y_share(run, model)
        rstd_slip = off and close(rstd, model["rstd"], RSTD_OF_16_BIT_H)
        y_slip = apart >= 10 and held > 0.75 * apart
        if rstd_slip or y_slip:
            said = []
            if rstd_slip:
                index = first_difference(rstd, run.expected["rstd"], RSTD_OF_16_BIT_H)
                relative = (rstd.double() / run.expected["rstd"] - 1).abs().max().item()
                said.append(f"{evidence(run, 'rstd', index)} (rstd off by up to {fmt(relative, 1)} relative; "
                            f"tolerance where residual_out is 16-bit: rtol {RSTD_OF_16_BIT_H['rtol']:g})")
            if y_slip:
                said.append(f"y holds the unrounded sum's rounding in {held} of the {apart} elements of "
                            f"{run.case.label} where the two round apart")
            return (f"the norm reads the unrounded float32 sum x + residual, not the h stored in residual_out: "
                    f"{', and '.join(said)}. "
                    "y must be the norm of exactly the residual_out the caller gets: round h to residual_out's dtype "
                    "once, `h = (x + residual).to(residual_out_ptr.dtype.element_ty)`, store it, and go on with that "
                    "rounded h, `h = h.to(tl.float32)`.")
    return None


def _norm_in_16_bits(runs) -> str | None:
    """Every case with a float32 residual_out passes, residual_out is right everywhere, and a 16-bit one fails:
    the norm computes with the rounded h, which is 16-bit again whatever the loads were converted to."""
    rounded = [run for run in runs if _rounded(run)]
    if not rounded or not all(_passes(run) for run in runs if not _rounded(run)):
        return None
    failing = [run for run in rounded if not _passes(run)]
    if not failing or not all(close(run.actual.get("residual_out"), run.expected["residual_out"],
                                    tolerance(run.actual["residual_out"])) for run in runs):
        return None
    run = failing[0]
    name = next(n for n in ("rstd", "y") if not close(run.actual[n], run.expected[n], tolerance(run.actual[n])))
    tol = tolerance(run.actual[name])
    shown = evidence(run, name, first_difference(run.actual[name], run.expected[name], tol))
    return (f"every case whose residual_out is float32 passes, and residual_out is right everywhere, but the norm is "
            f"off where h is rounded to 16 bits: {shown} (tolerance: atol {tol['atol']:g}, rtol {tol['rtol']:g}). "
            "Your loads are converted, but `h = (x + residual).to(residual_out_ptr.dtype.element_ty)` is float16 "
            "again, so the sum of squares and y are computed in float16: convert the rounded h back, "
            "`h = h.to(tl.float32)`, after the store and before the norm.")


def _rstd_of_16_bit_h(runs) -> str | None:
    """Every case passes the dtype's tolerance, but rstd of a 16-bit stream is off by more than float32 arithmetic on
    the stored h gives (:data:`RSTD_OF_16_BIT_H`): a part of the norm computed in 16 bits, or from another h."""
    if not all(_passes(run) for run in runs):
        return None
    for run in filter(_rounded, runs):
        rstd = run.actual["rstd"]
        if not close(rstd, run.expected["rstd"], RSTD_OF_16_BIT_H):
            index = first_difference(rstd, run.expected["rstd"], RSTD_OF_16_BIT_H)
            return (f"rstd is off by more than float32 arithmetic on the stored h gives: {evidence(run, 'rstd', index)}"
                    f" (tolerance where residual_out is 16-bit: rtol {RSTD_OF_16_BIT_H['rtol']:g}). Compute the norm "
                    "from exactly the h stored in residual_out, converted to float32 (`h = h.to(tl.float32)`), "
                    "and keep h · h and its sum in float32.")
    return None


def _said(runs) -> str:
    return counted(runs, "OFFSET = 0.0 and 1.0", "rows further apart than N")


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
    outside=WEIGHT_ROW_OFFSET[:1], first_looks=(_norm_of_unrounded_sum, _norm_in_16_bits, _rstd_of_16_bit_h),
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

"""Checker of exercise 09: the looped forward kernel (a row wider than its block).

The learner's kernel has a fixed signature (one program per row)::

    kernel(x_ptr, gamma_ptr, y_ptr, rstd_ptr, row_stride, N, eps, BLOCK_SIZE)

and the checker launches it with a grid of M programs and a BLOCK_SIZE
*smaller* than N (16, 32 or 64), so the kernel must loop over column blocks:
pass 1 sums x², pass 2 reads x again and writes y. Every tensor sits inside a
NaN-filled buffer (:mod:`rmsnorm.checkers.guards`): a read outside the row
gives NaN, a write outside the tensor is found, an access far outside is
refused before it happens (under the interpreter), a loop that never ends is
stopped (:mod:`rmsnorm.checkers.isolate`).

Symptoms recognised (each modelled in float64): mean divided by BLOCK_SIZE;
the accumulator reset inside the loop (only the last block counted); the last,
partial block skipped (``N // BLOCK_SIZE`` blocks); the loop bound off by one
(``range(0, N - 1, BLOCK_SIZE)``); gamma loaded with the row's offset; each
block normalised by its own sum (one pass, rstd stored per block); plus,
before any launch, an unmasked load or store and a wrong signature; a kernel a
GPU would not compile (checked under the interpreter too); and, after,
rows addressed with N instead of row_stride, writes outside y or rstd,
unwritten elements, a time-out, float16-only failures.

Source: solutions/09_the_long_row.ipynb.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import triton
import triton.language as tl

from ..device import default_device
from ..testing import make_inputs
from .cases import describe
from .diagnose import Case, Run, Symptom, diagnose
from .feedback import Feedback, never_raises
from .guards import GUARD, Buffers
from .kernels import check_kernel, refine, run_kernel_cases

EXERCISE = "09 · looped forward kernel"
#: What an unmasked access would do here (ends the preflight's message).
MASK_NOTE = ("The last block of a row of 257 columns with BLOCK_SIZE = 64 holds 1 real column and 63 lanes past the row, "
             "which `mask = start + cols < N` leaves out")


@triton.jit
def long_row_forward_kernel(
    x_ptr,  # (M, N) input, float32 or float16, unit column stride
    gamma_ptr,  # (N,) weight, dtype of x
    y_ptr,  # (M, N) output, dtype of x, same row stride as x
    rstd_ptr,  # (M,) float32 output: 1 / sqrt(mean(x²) + eps) per row
    row_stride,  # elements from one row of x (and of y) to the next
    N,  # real row length: the mean divides by N, never by BLOCK_SIZE
    eps,  # added to mean(x²) before the square root
    BLOCK_SIZE: tl.constexpr,  # columns per block, a power of two; may be smaller than N
):
    """The exercise's reference (its signature is the one the checker launches): one program per row."""
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK_SIZE)
    x_row = x_ptr + row * row_stride
    sum_sq = tl.zeros([BLOCK_SIZE], dtype=tl.float32)
    for start in range(0, N, BLOCK_SIZE):  # pass 1: the whole row's sum of squares
        mask = start + cols < N
        x = tl.load(x_row + start + cols, mask=mask, other=0.0).to(tl.float32)
        sum_sq += x * x
    rstd = tl.rsqrt(tl.sum(sum_sq, axis=0) / N + eps)
    for start in range(0, N, BLOCK_SIZE):  # pass 2: read x again, normalise, write y
        mask = start + cols < N
        x = tl.load(x_row + start + cols, mask=mask, other=0.0).to(tl.float32)
        gamma = tl.load(gamma_ptr + start + cols, mask=mask, other=0.0).to(tl.float32)
        tl.store(y_ptr + row * row_stride + start + cols, x * rstd * gamma, mask=mask)
    tl.store(rstd_ptr + row, rstd)


@dataclass(frozen=True)
class LoopCase(Case):
    """A case with the BLOCK_SIZE the checker forces and the row stride of x and y."""

    block: int = 64
    row_stride: int = 0

    @property
    def block_size(self) -> int:  # the launch's BLOCK_SIZE, not next_power_of_2(N)
        return self.block

    @property
    def stride(self) -> int:
        return self.row_stride or self.N


def loop_cases() -> list[LoopCase]:
    """The cases: N past its block by 1 and by more, N < BLOCK_SIZE, a row stride, float16."""
    device = default_device()

    def case(label, M, N, block, dtype=torch.float32, seed=0, scale=1.0, eps=1e-6, zero_row=False, stride=0):
        x, gamma, _ = make_inputs(M, N, dtype, device=device, seed=seed)
        x = x * scale
        if zero_row:
            x[0] = 0
        return LoopCase(label, {"x": x, "gamma": gamma}, eps, block=block, row_stride=stride)

    ones = torch.ones(1, 257, device=device)
    return [
        LoopCase("a row of 257 ones, BLOCK_SIZE = 64", {"x": ones, "gamma": torch.ones(257, device=device)}, block=64),
        case("17×200 float32 (random), BLOCK_SIZE = 64", 17, 200, 64, seed=1),
        case("5×33 float32 with eps = 0.5 and a first row of zeros, BLOCK_SIZE = 16", 5, 33, 16, seed=2, eps=0.5,
             zero_row=True),
        case("4×40 float32, BLOCK_SIZE = 64 (one block is wider than the row)", 4, 40, 64, seed=3),
        case("17×257 float16 (random), BLOCK_SIZE = 64", 17, 257, 64, torch.float16, seed=4),
        case("3×257 float16 with values near ±200 (x² > 65504), BLOCK_SIZE = 64", 3, 257, 64, torch.float16,
             seed=5, scale=200.0),
        case("3×100 float32 read in place from a (3, 107) buffer: row_stride = 107, BLOCK_SIZE = 32", 3, 100, 32,
             seed=6, stride=107),
    ]


def _model(case: LoopCase, sum_cols: slice | None = None, y_cols: int | None = None, per_block: bool = False,
           divide_by: float | None = None) -> dict[str, torch.Tensor]:
    """float64 outputs of a loop that sums x² over ``sum_cols`` and writes y on columns < ``y_cols``."""
    x, gamma = case.f64("x"), case.f64("gamma")
    N, eps = case.N, case.epsilon
    sumsq = x[:, sum_cols or slice(None)].square().sum(-1, keepdim=True)
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


def correct(case: LoopCase) -> dict[str, torch.Tensor]:
    """The float64 oracle: rstd = 1/sqrt(mean(x²) + eps), y = x · rstd · gamma."""
    return _model(case)


def _last_start(case: LoopCase) -> int:
    return (case.N - 1) // case.block * case.block


def _floor_cols(case: LoopCase) -> int:
    return case.N // case.block * case.block


def _off_by_one_cols(case: LoopCase) -> int:
    return min(case.N, math.ceil((case.N - 1) / case.block) * case.block)


def _gamma_row_offset(case: LoopCase) -> dict[str, torch.Tensor]:
    out = _model(case)
    out["y"][1:] = float("nan")  # row r ≥ 1 reads gamma at r · row_stride + c: the NaN past gamma's N elements
    return out


_SKIP_FIX = ("Loop over every block, the last (partial) one included: `for start in range(0, N, BLOCK_SIZE)`, "
             "and let the mask `start + cols < N` switch off the lanes past the row.")

SYMPTOMS = [
    Symptom(
        "the mean is divided by BLOCK_SIZE instead of N",
        lambda c: _model(c, divide_by=c.block),
        "The loop visits cdiv(N, BLOCK_SIZE) blocks, but the row has N values: divide the sum of squares by N.",
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
]


#: The end of the message for a write outside y.
Y_FIX = "check the store's mask, `start + cols < N`, and its address, `y_ptr + row * row_stride + start + cols`"


def _launch(case: LoopCase, kernel, buffers: Buffers) -> dict[str, torch.Tensor]:
    """Launch ``kernel`` with M programs and the case's BLOCK_SIZE, on guarded copies of the case's tensors."""
    M, N, stride = case.M, case.N, case.stride
    room = GUARD + M * stride + case.block  # a read at another row's offset, or one block past, stays in the buffer
    x = buffers.input("x", case.inputs["x"], stride, room=room)
    gamma = buffers.input("gamma", case.inputs["gamma"], room=room)
    y = buffers.output("y", (M, N), x.dtype, x.device, stride, room=room, fix=Y_FIX)
    rstd = buffers.output("rstd", (M,), torch.float32, x.device, room=room,
                          fix="check the store's address: one rstd per row, `rstd_ptr + row`")
    kernel[(M,)](x, gamma, y, rstd, stride, N, case.epsilon, BLOCK_SIZE=case.block)
    return {"y": y, "rstd": rstd}


def _signatures():
    """The launch's argument types, for the compile check of a CUDA target (float32 and float16 x)."""
    return [({"x_ptr": f"*{t}", "gamma_ptr": f"*{t}", "y_ptr": f"*{t}", "rstd_ptr": "*fp32", "row_stride": "i32",
              "N": "i32", "eps": "fp32", "BLOCK_SIZE": "constexpr"}, {"BLOCK_SIZE": 64}) for t in ("fp32", "fp16")]


@never_raises(EXERCISE)
def check_long_row_kernel(kernel) -> Feedback:
    """Judge a learner's kernel as every kernel exercise is judged (:func:`~rmsnorm.checkers.kernels.check_kernel`).

    Before any launch, :func:`~rmsnorm.checkers.kernels.preflight` (a Triton kernel, not the skeleton, the
    exercise's signature, every access masked); then, at the same time, a compile for a CUDA target (under the
    interpreter) and :func:`judge_long_row` in the checker's separate processes (the interpreter's on every
    machine, and the GPU's on a GPU machine), so a crash, a spoiled GPU context or a kernel that never ends gives
    a message here, never a dead notebook kernel.

    Args:
        kernel: the learner's ``@triton.jit`` kernel, with the signature of :func:`long_row_forward_kernel`.

    Returns:
        Feedback: "passed", "not done yet" (the skeleton) or "wrong" naming the mistake. Never raises.

    Source: solutions/09_the_long_row.ipynb.
    """
    return check_kernel(EXERCISE, kernel, long_row_forward_kernel, (__name__, "judge_long_row"), _signatures(),
                        MASK_NOTE)


def judge_long_row(kernel) -> Feedback:
    """In the checker's child process: launch the looped forward kernel on the checker's cases, say what is wrong.

    Args:
        kernel: a ``@triton.jit`` kernel with the signature of
            :func:`long_row_forward_kernel` (x_ptr, gamma_ptr, y_ptr, rstd_ptr,
            row_stride, N, eps, BLOCK_SIZE), launched with M programs and,
            in all cases but one, BLOCK_SIZE < N.

    Returns:
        Feedback: "passed", "not done yet" (the skeleton) or "wrong" naming the
        mistake. Never raises for a learner's mistake.

    Source: solutions/09_the_long_row.ipynb.
    """
    cases = loop_cases()
    outputs = run_kernel_cases(EXERCISE, kernel, cases, _launch, correct, "", bounds=True, reads_outside=False)
    if isinstance(outputs, Feedback):
        return outputs
    runs = [Run(case, out, correct(case)) for case, out in zip(cases, outputs)]
    feedback = diagnose(
        EXERCISE, runs, SYMPTOMS,
        f"y and rstd match the float64 oracle on {len(cases)} cases ({describe(cases)}; BLOCK_SIZE = 16, 32 and 64, "
        f"so every row takes 1 to 5 blocks); a row of 257 ones gives {outputs[0]['y'][0, 0].item():.7f}.",
    )
    return refine(EXERCISE, feedback, runs, SYMPTOMS,
                  "address the rows with `row * row_stride`, never `row * N` (a slice of a wider buffer has "
                  "row_stride > N).",
                  "Everything around x and gamma is NaN here, so a read outside the row (a mask or bound past N, "
                  "or another row's offset) shows up as NaN.")

"""Checker of exercise 09: the looped forward kernel (a row wider than its block).

The learner's kernel has a fixed signature (one program per row)::

    kernel(x_ptr, gamma_ptr, y_ptr, rstd_ptr, row_stride, N, eps, BLOCK_SIZE)

and the checker launches it with a grid of M programs (rows not cast to int64 named once it passes) and a BLOCK_SIZE
*smaller* than N (16, 32 or 64), so the kernel must loop over column blocks:
pass 1 sums x², pass 2 reads x again and writes y. Every tensor sits inside a
NaN-filled buffer (:mod:`rmsnorm_course.checkers.guards`): a read outside the row
gives NaN, a write outside the tensor is found, an access far outside is
refused before it happens (under the interpreter), every other access outside
the tensors' elements is named even where the numbers come out right (pass 2
masked with ``cols < N``: its case with rows 107 apart puts the last block's
lanes in the padding), a loop that never ends is stopped
(:mod:`rmsnorm_course.checkers.isolate`).

Symptoms recognised (each modelled in float64, :mod:`rmsnorm_course.checkers.ex09_symptoms`):
mean divided by BLOCK_SIZE or by the padded length (``cdiv(N, BLOCK_SIZE) * BLOCK_SIZE``);
pass 1 over ``range(0, BLOCK_SIZE)``; y stored without the row's offset; pass 1 adding x, not x²;
eps added in every lane (``sum_sq += x * x + eps``); the
accumulator reset inside the loop (only the last block counted); the last, partial block skipped (``N // BLOCK_SIZE``
blocks); the loop bound off by one (``range(0, N - 1, BLOCK_SIZE)``); gamma
loaded with the row's offset; each block normalised by its own sum (one pass,
rstd stored per block); an address without the block's start (x in both
passes, in pass 1 or in pass 2, gamma, the store of y: every block reads or
writes the first block); the mask without the block's start (``cols < N``) or
against BLOCK_SIZE (pass 1's alone too), or pass 1's one past N (``<= N``); the sum of squares accumulated in
float16; the block's total added to every lane, pass 1 over block indices, gamma once per block, x's rows
``row * BLOCK_SIZE`` apart (:mod:`~rmsnorm_course.checkers.ex09_loop_symptoms`); and, where none of these fits,
which blocks pass 1 added
(:func:`~rmsnorm_course.checkers.ex09_symptoms.blocks_added`: the last or the first alone, all but the first…, read
from the sum of squares the learner's rstd implies); plus, before
any launch, an unmasked load or store and a wrong signature; a kernel a GPU
would not compile (checked under the interpreter too; an accumulator created inside the
loop is named); and, after, a masked load without ``other=`` whose lanes reach y, rows addressed with N instead of
row_stride, writes outside y or rstd, unwritten elements, a time-out,
float16-only failures.

Source: solutions/09_the_long_row.ipynb.
"""

from __future__ import annotations

import torch

from rmsnorm.device import default_device
from rmsnorm_course.teaching.long_row import long_row_forward_kernel
from .cases import LoopCase, describe, random_case
from .ex09_loop_symptoms import SYMPTOMS as LOOP_SLIPS
from .ex09_symptoms import SYMPTOMS, blocks_added, correct, sum_in_16_bits
from .guards import GUARD
from .spec import ExerciseSpec, Launch, checked_rows, given, made, typed


def loop_cases() -> list[LoopCase]:
    """The cases: N past its block by 1 and by more, N < BLOCK_SIZE, a row stride, float16."""
    device = default_device()

    def case(label, M, N, block, dtype=torch.float32, seed=0, stride=0, **options):
        return random_case(LoopCase, label, M, N, dtype, seed=seed, block=block, row_stride=stride, **options)

    ones = torch.ones(1, 257, device=device)
    return [
        LoopCase("a row of 257 ones, BLOCK_SIZE = 64", {"x": ones, "gamma": torch.ones(257, device=device)}, block=64,
                 row_stride=0),
        case("17×200 float32 (random), BLOCK_SIZE = 64", 17, 200, 64, seed=1),
        case("5×33 float32 with eps = 0.5 and a first row of zeros, BLOCK_SIZE = 16", 5, 33, 16, seed=2, eps=0.5,
             zero_row=True),
        case("4×40 float32, BLOCK_SIZE = 64 (one block is wider than the row)", 4, 40, 64, seed=3),
        case("17×257 float16 (random), BLOCK_SIZE = 64", 17, 257, 64, torch.float16, seed=4),
        case("3×257 float16 with values of scale 200 (x² often past 65504), BLOCK_SIZE = 64", 3, 257, 64, torch.float16,
             seed=5, scale=200.0),
        case("3×100 float32 read in place from a (3, 107) buffer: row_stride = 107, BLOCK_SIZE = 32", 3, 100, 32,
             seed=6, stride=107),
    ]


#: The end of the message for a write outside y.
Y_FIX = "check the store's mask, `start + cols < N`, and its address, `y_ptr + row * row_stride + start + cols`"


def _launch(case: LoopCase) -> Launch:
    """M programs and the case's BLOCK_SIZE, on guarded copies of the case's tensors."""
    M, N, stride = case.M, case.N, case.stride
    room = GUARD + M * stride + case.block  # a read at another row's offset, or one block past, stays in the buffer
    tensors = (given("x", case.inputs["x"], stride, room), given("gamma", case.inputs["gamma"], room=room),
               made("y", (M, N), case.dtype, stride, room, fix=Y_FIX),
               made("rstd", (M,), torch.float32, room=room,
                    fix="check the store's address: one rstd per row, `rstd_ptr + row`"))
    return Launch(tensors, (M,), ("x", "gamma", "y", "rstd", stride, N, case.eps), {"BLOCK_SIZE": case.block})


def _sum_in_16_bits(runs) -> str | None:
    rounded = sum_in_16_bits(runs)
    if rounded is None:
        return None
    return (f"the sum of squares is accumulated in float16: {rounded}, a float16 rounding away, and past 65504 the "
            "sum overflows (rstd = 0). Accumulate in float32 whatever x's dtype: "
            "`sum_sq = tl.zeros([BLOCK_SIZE], dtype=tl.float32)`, adding the squares of float32 values "
            "(`.to(tl.float32)` right after the load).")


def _success(runs) -> str:
    cases = [r.case for r in runs]
    return (f"y and rstd match the float64 oracle on {len(cases)} cases ({describe(cases)}; BLOCK_SIZE = 16, 32 and "
            f"64, so every row takes 1 to 5 blocks); a row of 257 ones gives {runs[0].actual['y'][0, 0].item():.7f}.")


#: Exercise 09, declared: judged by :func:`rmsnorm_course.checkers.kernels.check`, launched with M programs and,
#: in all cases but one, BLOCK_SIZE < N.
SPEC = ExerciseSpec(
    exercise="09 · looped forward kernel", reference=long_row_forward_kernel,
    looped_row=True,
    int64_row='`row = tl.program_id(0).to(tl.int64)`',
    signatures=typed({"x_ptr": "*{t}", "gamma_ptr": "*{t}", "y_ptr": "*{t}", "rstd_ptr": "*fp32", "row_stride": "i32",
                      "N": "i32", "eps": "fp32", "BLOCK_SIZE": "constexpr"}, {"BLOCK_SIZE": 64}),
    cases=loop_cases, launch=_launch, oracle=correct, symptoms=(*SYMPTOMS, *LOOP_SLIPS), success=_success,
    parts={"row_scale": "the row's scale is wrong: rstd from pass 1 (the sum of the squares of every block, the "
                        "last partial one included, divided by N, plus eps); pass 2's x · gamma is right",
           "columns_from": "the loop over the blocks (`range(0, N, BLOCK_SIZE)`) and the block's start in each "
                           "address (`start + cols`)",
           "rstd.row_store": "rstd has one value per row: store it at `tl.store(rstd_ptr + row, rstd)`",
           "y.row_store": "store y at `y_ptr + row * row_stride + start + cols`",
           "zero_row": "rstd = 1/sqrt(mean(x²) + eps): add eps to the mean, inside the root, "
                       "`rstd = tl.rsqrt(tl.sum(sum_sq, axis=0) / N + eps)`"},
    first_looks=(_sum_in_16_bits,),
    terms=blocks_added,
    mask_note=("The last block of a row of 257 columns with BLOCK_SIZE = 64 holds 1 real column and 63 lanes "
               "past the row, which `mask = start + cols < N` leaves out"),
    masks={"columns": "every block's loads and store take the mask of pass 1, with the block's start: "
                      "`mask = start + cols < N`, in pass 2 too (`cols < N` lets every lane of the last block "
                      "through, past the row's last column)"},
    **checked_rows("x and gamma", "the row (a mask or bound past N, or another row's offset)",
                   " (a slice of a wider buffer has row_stride > N)"),
)

"""Checker of exercise 05: the learner's column-sum kernel, launched as ``reduce_gamma_gradient`` launches its own.

The partials are given directly (float32, seeded), so only the reduction is
judged. Cases: the article's two rows of partials [1, 2] and [3, 4] (sum [4, 6],
mean [2, 3]); a 17×5 block of ones; M = 1; M = 17; M = 100 = 3 × 32 + 4 (the loop over
BLOCK_M and its last, partial step); N = 256 and 257 (nine programs of
BLOCK_N = 32 columns, the last one masked); N = 1000; rows 96 elements
apart (the row stride, not N); float16 dgamma; and a 100×70 partial launched with
BLOCK_M = 64 and BLOCK_N = 16 (every other case with BLOCK_M = BLOCK_N = 32, where
one may stand for the other unseen).

Symptoms recognised: a mean over rows instead of a sum; only the first
BLOCK_M rows added (no loop); the last M mod BLOCK_M rows dropped; the first
BLOCK_M rows added at every step (rows without the step's start); every
program summing the first BLOCK_N columns (columns without ``pid * BLOCK_N``); the
sum run in float16 (right to 3 digits only); the rows past M read, with no row mask
or one off by one (``rows <= M``); and
(:mod:`rmsnorm_course.checkers.ex05_symptoms`) a loop to N or over ``range(0, BLOCK_M)``, an
accumulator overwritten at each step, the loop started at ``pid`` (``range(pid, M, BLOCK_M)``),
``tl.max`` for ``tl.sum``, the sum along ``axis=1``
(which raises where BLOCK_M ≠ BLOCK_N: :func:`_blocks_mixed`, which also names a rows block built with
BLOCK_N), the loop stepped by BLOCK_N,
the columns from ``pid * BLOCK_M``, ``tl.sum(acc)`` without an axis, an accumulator started at ones; the
pre-launch checks (signature, masks, in this exercise's words); unwritten
columns; and, as for every kernel (:mod:`rmsnorm_course.checkers.kernels`), reads
and writes outside the tensors (the tile's load without its column mask too, whose sum
the store's mask keeps right), a masked load without ``other=``, an endless
loop, a crash, and code the GPU compiler rejects.

Source: solutions/05_gamma_reduction.ipynb.
"""

from __future__ import annotations

import re
import traceback

import torch
import triton

from rmsnorm.article.reduction import BLOCK_M, BLOCK_N, rmsnorm_dgamma_kernel
from rmsnorm.device import default_device
from .diagnose import Case, Symptom, _case_passes, evidence, first_difference, tolerance
from .ex05_symptoms import SYMPTOMS as MORE_SYMPTOMS
from .ex05_symptoms import block_m, block_n
from .feedback import _chain
from .spec import PROBE, ExerciseSpec, Launch, given, made, typed

EXERCISE = "05 · dgamma reduction"


def partial_cases() -> list[Case]:
    """The cases of the dgamma checker: (partial float32, dtype of dgamma)."""
    device = default_device()
    g = torch.Generator().manual_seed(5)

    def case(label, partial, dtype=torch.float32, row_stride=None, **blocks):
        return Case(label, {"partial": partial.to(device), "dtype": dtype, **blocks}, row_stride=row_stride)

    return [
        case("the article's partials [[1, 2], [3, 4]]", torch.tensor([[1.0, 2.0], [3.0, 4.0]])),
        case("a 17×5 block of ones", torch.ones(17, 5)),
        case("a random 1×257 partial", torch.randn(1, 257, generator=g)),
        case("a random 17×256 partial", torch.randn(17, 256, generator=g)),
        case("a random 17×257 partial", torch.randn(17, 257, generator=g)),
        case("a random 100×33 partial (3 steps of 32 rows, then 4)", torch.randn(100, 33, generator=g)),
        case("a random 100×257 partial, dgamma in float16", torch.randn(100, 257, generator=g), torch.float16),
        case("a random 40×1000 partial", torch.randn(40, 1000, generator=g)),
        case("a random 37×70 partial with rows 96 elements apart (row stride 96, not N)",
             torch.randn(37, 70, generator=g), row_stride=96),
        case("a random 100×70 partial launched with BLOCK_M = 64 rows per step and BLOCK_N = 16 columns per program",
             torch.randn(100, 70, generator=g), BLOCK_M=64, BLOCK_N=16),
    ]


def _sum(case: Case, rows: int | None = None) -> dict[str, torch.Tensor]:
    return {"dgamma": case.f64("partial")[:rows].sum(0)}


#: The words of the loop that adds one tile only (:func:`_start_times_block` names the line when it can).
_FIRST_TILE_ONLY = "only the first BLOCK_M rows are added: the rows past the first tile are never read"

SYMPTOMS = [
    Symptom(
        "dgamma is a mean over rows, not a sum",
        lambda c: {"dgamma": c.f64("partial").mean(0)},
        "Every row used the same gamma, so each row's contribution adds up: no division by M "
        "(M = 1 cannot tell them apart; M = 17 can).",
    ),
    Symptom(
        _FIRST_TILE_ONLY,
        lambda c: _sum(c, block_m(c)),
        "Loop over the rows, `for start in range(0, M, BLOCK_M)`, adding one BLOCK_M × BLOCK_N tile per step.",
    ),
    Symptom(
        "the last M mod BLOCK_M rows are dropped (the last, partial step of fewer than BLOCK_M rows)",
        lambda c: _sum(c, c.M // block_m(c) * block_m(c)),
        "Loop with `range(0, M, BLOCK_M)` and mask the rows of the last step with `rows < M`.",
    ),
    Symptom(
        "every step adds the first BLOCK_M rows again: the row offsets lack the step's start",
        lambda c: {"dgamma": triton.cdiv(c.M, block_m(c)) * c.f64("partial")[:block_m(c)].sum(0)},
        "Step `start` covers rows start … start + BLOCK_M − 1: `rows = start + tl.arange(0, BLOCK_M)`.",
    ),
    Symptom(
        "every program sums the first BLOCK_N columns: the column offsets lack the program's start (`pid * BLOCK_N`)",
        lambda c: {"dgamma": torch.cat([c.f64("partial")[:, :block_n(c)].sum(0),
                                        torch.full((max(0, c.N - block_n(c)),), float("nan"), dtype=torch.float64)])},
        "Program pid owns columns pid · BLOCK_N … pid · BLOCK_N + BLOCK_N − 1: `cols = pid * BLOCK_N + tl.arange(0, "
        "BLOCK_N)` (the columns past the first BLOCK_N are never written).",
    ),
    *MORE_SYMPTOMS,
]


def _rows_past(case: Case, rows: int) -> dict[str, torch.Tensor]:
    """dgamma when the last step also reads ``rows`` rows past the partials, where :data:`~.spec.PROBE` lies."""
    return {"dgamma": _sum(case)["dgamma"] + PROBE * rows}


#: Reads past the partials' last row, modelled on the run with PROBE around the tensors.
OUTSIDE = (
    Symptom(
        "the row mask is off by one: the last step reads row M, one past the partials' last row (M − 1)",
        lambda c: _rows_past(c, 1 if c.M % block_m(c) else 0),
        "Rows are numbered 0 … M − 1: mask them with `rows[:, None] < M`, not `<= M`: "
        "`mask = (rows[:, None] < M) & col_mask[None, :]`.",
    ),
    Symptom(
        "the row mask lets the rows past M through: the last step reads all its BLOCK_M rows, past the partials' "
        "last row (M − 1); the column mask is not the one at fault",
        lambda c: _rows_past(c, triton.cdiv(c.M, block_m(c)) * block_m(c) - c.M),
        "The last step of `range(0, M, BLOCK_M)` covers rows past M: mask the rows as well as the columns, "
        "`mask = (rows[:, None] < M) & col_mask[None, :]`, in the tile's `tl.load` (with `other=0.0`).",
    ),
)


#: How far a float16 sum may be from the float64 one, as a fraction of the column's Σ|partial| (see below).
FLOAT16_SLACK = 2**-8


def _summed_in_16_bits(runs) -> str | None:
    """Every case right to float16's precision, some float32 case not to float32's: the sum ran in float16.

    float16 keeps 11 significant bits: each value rounded, and each addition, is off by at most 2⁻¹¹ of
    what it adds. FLOAT16_SLACK = 2⁻⁸ of the column's Σ|partial| leaves room for the additions of the
    largest case (a float16 running sum stays under a third of it on every case). The article's integer
    partials are exact in float16, so every slip of the sum's shape fails this bound there.
    """
    for run in runs:
        err = (run.actual["dgamma"].double() - run.expected["dgamma"]).abs()
        if not torch.all(err <= FLOAT16_SLACK * run.case.f64("partial").abs().sum(0)):
            return None
    off = [r for r in runs if r.case.inputs["dtype"] == torch.float32 and not _case_passes(r)]
    if not off:
        return None
    run = off[0]
    shown = evidence(run, "dgamma", first_difference(run.actual["dgamma"], run.expected["dgamma"],
                                                     tolerance(run.actual["dgamma"])))
    return ("dgamma is summed in float16: every case is right to float16's 3 digits, not to float32's: "
            f"{shown}. The partials are float32, and so must the sum be: keep the accumulator in float32 "
            "(`tl.zeros(..., dtype=tl.float32)`), add the tiles without `.to(tl.float16)`, and let the store "
            "cast once, at the end, to dgamma's dtype.")


def _shape(value) -> tuple[int, ...] | None:
    """A Triton block's shape as ints, or None for what has none."""
    try:
        return tuple(int(getattr(d, "value", d)) for d in value.shape)
    except (AttributeError, TypeError, ValueError):
        return None


def _clash(error: BaseException) -> tuple[list[tuple[int, ...]], dict[str, tuple[int, ...]]]:
    """The shapes of the two blocks whose broadcast failed (Triton's ``broadcast_impl_value``), and the 1-D blocks
    of the kernel's frame whose name holds "row" (name → shape); each empty where not found."""
    shapes: list[tuple[int, ...]] = []
    row_blocks: dict[str, tuple[int, ...]] = {}
    for frame, _ in traceback.walk_tb(_chain(error)[-1].__traceback__):
        names = frame.f_locals
        if frame.f_code.co_name == "broadcast_impl_value" and "lhs" in names and "rhs" in names:
            shapes = [s for s in (_shape(names["lhs"]), _shape(names["rhs"])) if s is not None]
        for name, value in names.items():
            shape = _shape(value) if "row" in name else None
            if shape is not None and len(shape) == 1:
                row_blocks[name] = shape
    return shapes, row_blocks


def _blocks_mixed(case: Case, error: BaseException) -> str | None:
    """Words for shapes that disagree only where BLOCK_M ≠ BLOCK_N: a BLOCK_M shape where BLOCK_N belongs."""
    rows, width = block_m(case), block_n(case)
    if rows == width or "incompatible dimensions" not in "".join(map(str, _chain(error))):
        return None
    mixed = (f"shapes that agree while BLOCK_M = BLOCK_N = {BLOCK_M} do not here, with BLOCK_M = {rows} and "
             f"BLOCK_N = {width}: a block of BLOCK_M values meets one of BLOCK_N. ")
    tile = ("The tile is (BLOCK_M, BLOCK_N), rows by columns: sum it down its rows, `tl.sum(tile, axis=0)`; the rows "
            "come from `tl.arange(0, BLOCK_M)`, the columns from `tl.arange(0, BLOCK_N)`.")
    shapes, row_blocks = _clash(error)
    made_with_n = next((name for name, shape in row_blocks.items() if shape == (width,)), None)
    if (made_with_n is not None and len(shapes) == 2 and all(len(s) == 2 for s in shapes)
            and {shapes[0][0], shapes[1][0]} == {rows, width}):
        return (mixed + f"Here it is the rows: `{made_with_n}` has BLOCK_N = {width} values where a tile's rows take "
                f"BLOCK_M = {rows}, so the tile it addresses is ({width}, {width}) and meets the (BLOCK_M, BLOCK_N) = "
                f"({rows}, {width}) accumulator: the rows block is built with BLOCK_N "
                f"(`{made_with_n} = start + tl.arange(0, BLOCK_N)`). Build it from BLOCK_M: "
                f"`{made_with_n} = start + tl.arange(0, BLOCK_M)`. " + tile)
    return (mixed + "Most often it is a sum along `axis=1`, which gives BLOCK_M values, one per row, where dgamma's "
            "store takes BLOCK_N, one per column. " + tile)


EXAMPLE = ("partial = torch.randn(100, 257); dgamma = torch.empty(257); "
           "my_dgamma_kernel[(triton.cdiv(257, 32),)](partial, dgamma, 100, 257, 257, BLOCK_M=32, BLOCK_N=32)")
MASK_EXAMPLE = ("With N = 257 columns the last program's lanes 257…287, and with M = 100 rows the rows 100…127 "
                "of the last step, would read or write past the partials (past the tensor)")


def launch(case: Case) -> Launch:
    """The launch ``reduce_gamma_gradient`` makes, on a guarded copy of the partials."""
    M, N = case.inputs["partial"].shape
    tensors = (given("partial", case.inputs["partial"], case.row_stride), made("dgamma", (N,), case.inputs["dtype"]))
    return Launch(tensors, (triton.cdiv(N, block_n(case)),), ("partial", "dgamma", M, N, case.stride),
                  {"BLOCK_M": block_m(case), "BLOCK_N": block_n(case)})


def _success(runs) -> str:
    article = runs[0].actual["dgamma"].tolist()
    return (f"dgamma matches the float64 column sums on {len(runs)} cases (M = 1 … 100, N = 2 … 257, rows further "
            f"apart than N, float32 and float16, BLOCK_M = BLOCK_N = 32 and BLOCK_M = 64, "
            f"BLOCK_N = 16); nothing outside the tensors was read or written; it compiles for a "
            f"GPU; the article's partials [[1, 2], [3, 4]] give {article}.")


def _start_times_block(message: str, source: str) -> str:
    """:data:`_FIRST_TILE_ONLY`'s message, for a kernel whose rows are `start * BLOCK_M + …`: that line is the slip."""
    if not message.startswith(_FIRST_TILE_ONLY) or not re.search(r"start\s*\*\s*BLOCK_M", source):
        return message
    shown = message[len(_FIRST_TILE_ONLY):].split(". Loop over the rows")[0]
    return ("the rows of each step are `start * BLOCK_M + tl.arange(0, BLOCK_M)`, but `start` already steps by "
            "BLOCK_M (`range(0, M, BLOCK_M)`: 0, BLOCK_M, 2·BLOCK_M, …), so the second tile starts at row "
            f"BLOCK_M² (past M, masked) and only the first BLOCK_M rows are added{shown}. The step's rows are "
            "`rows = start + tl.arange(0, BLOCK_M)`.")


#: Exercise 05, declared: judged by :func:`rmsnorm_course.checkers.kernels.check`.
SPEC = ExerciseSpec(
    exercise=EXERCISE,
    reference=rmsnorm_dgamma_kernel,
    accumulator="tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)",
    int64_row='`offsets = rows[:, None].to(tl.int64) * partial_row_stride + cols[None, :]`',
    signatures=typed({"partial_ptr": "*fp32", "dgamma_ptr": "*{t}", "M": "i32", "N": "i32",
                      "partial_row_stride": "i32", "BLOCK_M": "constexpr", "BLOCK_N": "constexpr"},
                     {"BLOCK_M": BLOCK_M, "BLOCK_N": BLOCK_N}),
    cases=partial_cases,
    launch=launch,
    oracle=_sum,
    symptoms=tuple(SYMPTOMS),
    parts={"columns_from": "the column offsets of each program (`pid * BLOCK_N + tl.arange(0, BLOCK_N)`), the same "
                           "in the tile's load and in the store, and the column mask (`cols < N`)",
           "few_columns": "the column offsets of each program (`pid * BLOCK_N + tl.arange(0, BLOCK_N)`) in the "
                          "tile's load and in the store: a program past the first works on other columns"},
    success=_success,
    example=EXAMPLE,
    mask_note=MASK_EXAMPLE,
    first_looks=(_summed_in_16_bits,),
    outside=OUTSIDE,
    explain_error=_blocks_mixed,
    by_source=lambda message, source: _start_times_block(message, source),
    masks={"columns": "the tile's load needs the column mask as well as the row mask, "
                      "`mask = (rows[:, None] < M) & (cols[None, :] < N)` (`col_mask[None, :]`): the store's "
                      "`mask=col_mask` does not keep the load in, and a GPU reads past the row's last column there",
           "rows": "mask the rows of the last step as well as the columns: "
                   "`mask = (rows[:, None] < M) & (cols[None, :] < N)`"},
)

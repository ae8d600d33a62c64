"""Checker of exercise 10: the per-program loop of the one-pass backward (dx and a dgamma partial).

The learner's kernel has a fixed signature (a row fits one block)::

    kernel(x_ptr, gamma_ptr, rstd_ptr, dy_ptr, dx_ptr, partial_ptr, row_stride, M, N, BLOCK_SIZE)

and the checker launches it on a **persistent grid** of P programs (P = 1 to
4, fewer or more than the rows): program p takes rows p, p + P, p + 2P, …,
writes their dx, keeps Σ dy · x̂ over its rows in a float32 accumulator, and
stores it once, in row p of the (P, N) float32 ``partial``. The checker sums
the P rows itself (dgamma) and compares dx and every partial row with the
float64 oracle, computed from the float32 rstd the kernel was given.

Every tensor sits inside a NaN-filled buffer (:mod:`rmsnorm_course.checkers.guards`):
a read outside gives NaN, a write outside is found, an access far outside is
refused before it happens (under the interpreter), a loop that never ends is
stopped (:mod:`rmsnorm_course.checkers.isolate`).

Symptoms recognised (modelled in float64, :mod:`rmsnorm_course.checkers.ex10_symptoms`):
mean(u · x̂) divided by BLOCK_SIZE; dx without its last rstd factor; the
partial without rstd (dy · x), without x̂ (dy alone: that is LayerNorm's dβ),
with gamma (u · x̂); rows stepped by 1 instead of P (rows counted more than
once); every program starting at row 0; offsets from ``pid`` instead of the
loop's ``row``; rstd loaded at ``pid``; the accumulator reset inside the loop;
the partial stored inside the loop (a program without rows never stores it);
the partial never stored; the partial stored at the row's index instead of the
program's, or with its rows BLOCK_SIZE or row_stride apart (writes outside
partial, told apart by where they land); dx's second term without rstd, or the mean
taken of u · x, or x for x̂ on dx's line (the same numbers: the line found in the kernel's text names
one, :func:`~.ex10_symptoms.by_source`, else the first two are named); each row's term stored
in place of the sum; ``row = pid``; the loop started at ``pid * P``, or run to ``M + 1``, or a chunk of P
consecutive rows per program; the mean over M; the partial's row at ``pid`` without × N; an
accumulator in 16 bits; plus a wrong signature,
unmasked accesses, a kernel a GPU would not compile (checked under the
interpreter too), a masked load without ``other=`` whose lanes reach a result,
rows addressed with N instead of row_stride, a time-out. Where no symptom matches,
:mod:`rmsnorm_course.checkers.dx_terms` (shared with 04) names which of dx's terms (or the partial's factors) is off.

Source: solutions/10_one_pass_backward.ipynb.
"""

from __future__ import annotations

import torch
import triton

from rmsnorm_course.teaching.one_pass import one_pass_backward_kernel
from .cases import GRIDS_SAID, GridCase, counted, on_grids, random_case
from .diagnose import _case_passes
from .dx_terms import explainer
from .ex10_symptoms import SYMPTOMS, by_program, by_source, correct, terms_of
from .guards import GUARD
from .spec import ExerciseSpec, Launch, checked_rows, given, made, typed


def grid_cases() -> list[GridCase]:
    """The cases: :data:`~.cases.GRIDS` (rows not a multiple of P, more programs than rows, P = 1, a row stride,
    float16)."""

    def case(label, M, N, P, dtype, seed, stride):
        return random_case(GridCase, label, M, N, dtype, seed=seed, names=("x", "gamma", "dy"), rstd=True,
                           programs=P, row_stride=stride)

    return on_grids(case, first_seed=10)


def _partial_outside(case: GridCase):
    """Words for a write outside the (P, N) partial, from the offsets written: each stride is named only where the
    offsets are exactly those of its store (rows BLOCK_SIZE or row_stride apart, or at the row's index)."""
    M, P, N, block, stride = case.M, case.programs, case.N, triton.next_power_of_2(case.N), case.stride

    def apart(step: int) -> set[int]:
        return {p * step + c for p in range(P) for c in range(N)} - set(range(P * N))

    def explain(offsets: list[int]) -> str:
        shown = set(offsets)
        for step, name, code in ((block, "BLOCK_SIZE", "pid * BLOCK_SIZE + cols"),
                                 (stride, "row_stride", "pid * row_stride + cols")):
            if step > N and shown == apart(step):
                return (f"the partial's rows were stored {name} = {step} elements apart (`{code}`), while partial is "
                        f"a ({P}, N) tensor whose row p starts at element p · N = p · {N}: the last programs wrote "
                        "past its end. Store at `partial_ptr + pid * N + cols`")
        if shown == set(range(P * N, M * N)):  # every row r ≥ P stored at r · N
            return (f"the partial was written outside its {P} rows (at row {offsets[0] // N}): it has one row per "
                    "program, not per data row. Store it once, after the loop, at `partial_ptr + pid * N + cols`")
        return (f"the partial was written outside its {P} rows (element offset {offsets[0]}): partial is a ({P}, N) "
                f"tensor whose row p starts at element p · N = p · {N}. Store it once, after the loop, at "
                "`partial_ptr + pid * N + cols`")
    return explain


def _launch(case: GridCase) -> Launch:
    """P programs, on guarded copies (:mod:`~rmsnorm_course.checkers.guards`)."""
    M, N, P, stride = case.M, case.N, case.programs, case.stride
    room = GUARD + max(M, P) * stride + triton.next_power_of_2(N)  # another row's offset stays in the buffer
    tensors = (given("x", case.inputs["x"], stride, room), given("gamma", case.inputs["gamma"], room=room),
               given("rstd", case.inputs["rstd"], room=room), given("dy", case.inputs["dy"], stride, room),
               made("dx", (M, N), case.dtype, stride, room,
                    fix="check the store's mask (`cols < N`) and its address (`row * row_stride + cols`)"),
               made("partial", (P, N), torch.float32, room=room, fix=_partial_outside(case)))
    return Launch(tensors, (P,), ("x", "gamma", "rstd", "dy", "dx", "partial", stride, M, N),
                  {"BLOCK_SIZE": triton.next_power_of_2(N)})


def _short(t: torch.Tensor, bits: torch.dtype) -> bool:
    """Every value of ``t`` is a ``bits`` (float16/bfloat16) number, and some is not 0."""
    t = t.detach().cpu()
    finite = t[torch.isfinite(t)]
    return finite.numel() > 0 and bool((finite != 0).any()) and bool((finite.to(bits).float() == finite).all())


def _success(runs) -> str:
    return f"dx and every row of the (P, N) partial match the float64 oracle on {counted(runs, GRIDS_SAID)}."


def _short_partial(runs) -> str | None:
    """Words for a partial whose every value is a 16-bit number, in every failing case; None otherwise."""
    failing = [r for r in runs if not _case_passes(r)]
    for bits, name in ((torch.float16, "float16"), (torch.bfloat16, "bfloat16")):
        if failing and all(_short(r.actual["partial"], bits) for r in failing):
            return (f"every value of your partial is a {name} number: the accumulator (or what is added to it) is "
                    "16 bits, and the sum of many rows loses digits. Keep it float32: "
                    "`tl.zeros([BLOCK_SIZE], dtype=tl.float32)`, and add float32 terms.")
    return None


def _constant_step(runs) -> str | None:
    """Words for a kernel right for one number of programs only: every case with P = k passes, every failing case
    has P ≠ k and more rows than programs (a program without rows is another slip), and some of them have rows
    N apart (so the row stride is not what they share); None otherwise."""
    failing = [r for r in runs if not _case_passes(r)]
    if not failing or not any(not r.case.row_stride for r in failing) or any(r.case.M <= r.case.programs
                                                                            for r in failing):
        return None
    for k in sorted({r.case.programs for r in runs}):
        same = [r for r in runs if r.case.programs == k]
        if len(same) >= 2 and all(map(_case_passes, same)) and all(r.case.programs != k for r in failing):
            shown = next(r for r in failing if not r.case.row_stride).case.label
            others = " and ".join(sorted({str(r.case.programs) for r in failing}))
            return (f"every case with P = {k} programs passes, but not {shown}, whose rows are N apart: every "
                    f"failing case has P = {others}, so the kernel counts on {k} programs. The step of the row "
                    "loop must be the number of programs (`P = tl.num_programs(0)`, then "
                    "`for row in range(pid, M, P)`), not a constant.")
    return None


#: Exercise 10, declared: judged by :func:`rmsnorm_course.checkers.kernels.check`, launched with a grid of P programs.
SPEC = ExerciseSpec(
    exercise="10 · one-pass backward loop", reference=one_pass_backward_kernel,
    int64_row=("`offsets = tl.cast(row, tl.int64) * row_stride + cols` (`row.to(tl.int64)` fails under the "
               "interpreter, where a `range` loop's variable is a Python int)"),
    signatures=typed({"x_ptr": "*{t}", "gamma_ptr": "*{t}", "rstd_ptr": "*fp32", "dy_ptr": "*{t}", "dx_ptr": "*{t}",
                      "partial_ptr": "*fp32", "row_stride": "i32", "M": "i32", "N": "i32",
                      "BLOCK_SIZE": "constexpr"}, {"BLOCK_SIZE": 512}),
    cases=grid_cases, launch=_launch, oracle=correct, symptoms=tuple(SYMPTOMS), success=_success,
    parts={"row_offset": "the row offset in every load and store (`row * row_stride + cols`, and rstd at "
                         "`rstd_ptr + row`): each row the loop visits, not row 0, is read and written",
           "row_scale": "a factor of rstd is wrong: rstd's load (`rstd_ptr + row`) or the powers of rstd in "
                        "dx = (u - x_hat · mean_ux) · rstd; the per-element part is right",
           "last_rows": "the row loop stops before the end (check its bound: `range(pid, M, P)` runs to M itself; "
                        "and that the grid's programs cover all M rows), or the last rows read NaN from outside the "
                        "tensors (check their offsets)",
           "row_0_alone": "the grid is `(P,)`, one axis, so `tl.program_id(1)` is 0 in every program, and every "
                          "program visits the rows of program 0: take the program's index from axis 0, "
                          "`pid = tl.program_id(0)`",
           "idle_programs": "store the partial once, after the loop, at `partial_ptr + pid * N + cols` "
                            "(`tl.store(partial_ptr + pid * N + cols, dgamma_acc, mask=mask)`): a program without "
                            "rows then writes its zeros",
           "partial.row_store": "partial has one row per program: store it once, after the loop, at "
                                "`partial_ptr + pid * N + cols` (row `pid`)",
           "dx.row_store": "store dx at `dx_ptr + offsets`, with the offsets of the row the loop visits "
                           "(`offsets = tl.cast(row, tl.int64) * row_stride + cols`)",
           "zero_row": "this kernel is given rstd, which the forward computed with eps: load it, "
                       "`rstd = tl.load(rstd_ptr + row)`, instead of computing it again"},
    first_looks=(_short_partial, _constant_step), by_source=by_source, terms=explainer(terms_of, "x̂", by_program),
    mask_note=("With N = 257 the block has 512 lanes: 255 of them are past the row (past the tensor on the last row), "
               "which `mask = cols < N` leaves out"),
    **checked_rows("the inputs", "a row (a mask past N, another row's offset)"),
)

"""Wrong variants of exercises 09 and 10, for tests/course/test_ex09_long_row.py and test_ex10_one_pass.py only.

Each is the checker's reference kernel with one classic slip, made by
:func:`wrong_variants.mutate` (exact text replacements, each asserted to occur
once), so none can drift from the reference. Each table maps a name to
(kernel, a substring the feedback must contain): every variant has its own
message.

Never import this from the course package or a notebook.
"""

from __future__ import annotations

from rmsnorm_course.checkers.ex09_long_row import long_row_forward_kernel as L
from rmsnorm_course.checkers.ex10_one_pass import one_pass_backward_kernel as B
from rmsnorm_course.checkers.gpu_compile import MADE_IN_LOOP
from wrong_variants import GPU_REJECTS, NO_OTHER, ROW_0, mutate

LOOP_1 = "    for start in range(0, N, BLOCK_SIZE):  # pass 1: the whole row's sum of squares\n"
LOOP_2 = "    for start in range(0, N, BLOCK_SIZE):  # pass 2: read x again, normalise, write y\n"
LOAD_1 = ("        mask = start + cols < N\n"
          "        x = tl.load(x_row + start + cols, mask=mask, other=0.0).to(tl.float32)\n"
          "        sum_sq += x * x\n")
#: The load of x in pass 1 and in pass 2, each with what follows it (so that each occurs once).
X_1 = "        x = tl.load(x_row + start + cols, mask=mask, other=0.0).to(tl.float32)\n        sum_sq"
X_2 = "        x = tl.load(x_row + start + cols, mask=mask, other=0.0).to(tl.float32)\n        gamma"
MASK_1, MASK_2 = "        mask = start + cols < N\n" + X_1, "        mask = start + cols < N\n" + X_2


def _without_start(text: str) -> tuple[str, str]:
    """The replacement that drops the block's start from the address in ``text``."""
    return text, text.replace("x_row + start + cols", "x_row + cols")


def _mask(text: str, mask: str) -> tuple[str, str]:
    """The replacement that writes ``mask`` for ``start + cols < N`` in ``text``."""
    return text, text.replace("start + cols < N", mask, 1)


#: Exercise 09: name → (kernel, substring of the feedback).
LONG_ROW = {
    "skeleton": (mutate(L, ("    row = tl.program_id(0).to(tl.int64)\n",
                            "    raise NotImplementedError()\n    row = tl.program_id(0).to(tl.int64)\n")),
                 "not done yet"),
    "divides by BLOCK_SIZE": (mutate(L, ("/ N + eps", "/ BLOCK_SIZE + eps")), "divided by BLOCK_SIZE instead of N"),
    "no mask on the last block": (
        mutate(L, ("x = tl.load(x_row + start + cols, mask=mask, other=0.0).to(tl.float32)\n        sum_sq",
                   "x = tl.load(x_row + start + cols).to(tl.float32)\n        sum_sq")),
        "has no mask"),
    "accumulator reset inside the loop": (
        mutate(L, (LOOP_1, LOOP_1 + "        sum_sq = tl.zeros([BLOCK_SIZE], dtype=tl.float32)  # reset every block\n")),
        "reset inside the loop"),
    "last block skipped (N // BLOCK_SIZE blocks)": (
        mutate(L, (LOOP_1, LOOP_1.replace("range(0, N,", "range(0, N // BLOCK_SIZE * BLOCK_SIZE,")),
               (LOOP_2, LOOP_2.replace("range(0, N,", "range(0, N // BLOCK_SIZE * BLOCK_SIZE,"))),
        "the last, partial block is skipped (N // BLOCK_SIZE"),
    "last block skipped in pass 1 only": (
        mutate(L, (LOOP_1, LOOP_1.replace("range(0, N,", "range(0, N // BLOCK_SIZE * BLOCK_SIZE,"))),
        "skipped in the sum of squares"),
    "loop bound off by one": (
        mutate(L, (LOOP_1, LOOP_1.replace("range(0, N,", "range(0, N - 1,")),
               (LOOP_2, LOOP_2.replace("range(0, N,", "range(0, N - 1,"))),
        "the loop bound is off by one"),
    "gamma loaded with the row offset": (
        mutate(L, ("tl.load(gamma_ptr + start + cols", "tl.load(gamma_ptr + row * row_stride + start + cols")),
        "gamma is loaded with the row's offset"),
    "one pass: each block normalised by its own sum": (
        mutate(L, (LOOP_1 + LOAD_1, ""), ("    tl.store(rstd_ptr + row, rstd)\n", ""),
               ("    rstd = tl.rsqrt(tl.sum(sum_sq, axis=0) / N + eps)\n", ""),
               ("        gamma = tl.load(", "        rstd = tl.rsqrt(tl.sum(x * x, axis=0) / N + eps)\n"
                                          "        tl.store(rstd_ptr + row, rstd)  # per block\n        gamma = tl.load(")),
        "normalised by its own sum of squares"),
    "rows addressed with N instead of row_stride": (
        mutate(L, ("    x_row = x_ptr + row * row_stride\n", "    x_row = x_ptr + row * N\n"),
               ("tl.store(y_ptr + row * row_stride", "tl.store(y_ptr + row * N")),
        "address the rows with `row * row_stride`"),
    "mask off by one: reads past the row": (
        mutate(L, ("        mask = start + cols < N\n        x = tl.load(x_row + start + cols, mask=mask, other=0.0)"
                   ".to(tl.float32)\n        sum_sq", "        mask = start + cols <= N\n        x = tl.load(x_row + "
                   "start + cols, mask=mask, other=0.0).to(tl.float32)\n        sum_sq")),
        ("pass 1's mask lets one lane past the row through (`start + cols <= N`)", "(`<`, not `<=`)")),
    "rstd stored at the column offset": (
        mutate(L, ("    tl.store(rstd_ptr + row, rstd)\n", "    tl.store(rstd_ptr + row * row_stride, rstd)\n")),
        "outside rstd"),
    "squares in float16": (
        mutate(L, ("        x = tl.load(x_row + start + cols, mask=mask, other=0.0).to(tl.float32)\n        sum_sq += x * x",
                   "        x = tl.load(x_row + start + cols, mask=mask, other=0.0)\n        sum_sq += x * x")),
        "Convert each loaded value to float32"),
    "BLOCK_SIZE spelled differently": (
        mutate(L, ("BLOCK_SIZE: tl.constexpr,", "BLOCK: tl.constexpr,"), ("cols = tl.arange(0, BLOCK_SIZE)", "cols = tl.arange(0, BLOCK)"),
               ("sum_sq = tl.zeros([BLOCK_SIZE]", "sum_sq = tl.zeros([BLOCK]"), ("range(0, N, BLOCK_SIZE):  # pass 1", "range(0, N, BLOCK):  # pass 1"),
               ("range(0, N, BLOCK_SIZE):  # pass 2", "range(0, N, BLOCK):  # pass 2")),
        "keep the signature of `long_row_forward_kernel`"),
    "accumulator changes dtype in the loop (runs in the interpreter, not on a GPU)": (
        mutate(L, ("    sum_sq = tl.zeros([BLOCK_SIZE], dtype=tl.float32)\n", "    sum_sq = 0\n"),
               ("        sum_sq += x * x\n", "        sum_sq += tl.sum(x * x, axis=0)\n"),
               ("tl.rsqrt(tl.sum(sum_sq, axis=0) / N + eps)", "tl.rsqrt(sum_sq / N + eps)")),
        GPU_REJECTS),
    # Issue 18: the address without the block's start (the ones row cannot show it), the store side, the mask.
    "x loaded without the block's start": (
        mutate(L, _without_start(X_1), _without_start(X_2)),
        "every block reads the first block: the load address lacks the block's start"),
    "x loaded without the block's start in pass 1": (
        mutate(L, _without_start(X_1)), "in pass 1 every block reads the first block: its load of x lacks"),
    "x loaded without the block's start in pass 2": (
        mutate(L, _without_start(X_2)), "in pass 2 every block reads the first block of x"),
    "gamma loaded without the block's start": (
        mutate(L, ("tl.load(gamma_ptr + start + cols", "tl.load(gamma_ptr + cols")),
        "every block reads the first block of gamma"),
    "y stored without the block's start": (
        mutate(L, ("tl.store(y_ptr + row * row_stride + start + cols", "tl.store(y_ptr + row * row_stride + cols")),
        "every block writes into the first block of y: the store address lacks the block's start"),
    "mask without the block's start (cols < N)": (
        mutate(L, _mask(MASK_1, "cols < N"), _mask(MASK_2, "cols < N")), "the mask lacks the block's start (`cols < N`)"),
    # Issue 36 (learner findings): pass 2 alone masked with `cols < N`; the numbers are right, the address check sees it.
    "pass 2's mask without the block's start (cols < N)": (
        mutate(L, _mask(MASK_2, "cols < N")),
        ("it made a load at column 257 of row 0 of x, past its N = 257 columns", "x = tl.load(x_row + start + cols",
         "`mask = start + cols < N`, in pass 2 too")),
    "mask against BLOCK_SIZE, not N": (
        mutate(L, _mask(MASK_1, "start + cols < BLOCK_SIZE"), _mask(MASK_2, "start + cols < BLOCK_SIZE")),
        "the mask compares with BLOCK_SIZE instead of N"),
    "sum of squares accumulated in x's dtype": (
        mutate(L, ("sum_sq = tl.zeros([BLOCK_SIZE], dtype=tl.float32)", "sum_sq = tl.zeros([BLOCK_SIZE], dtype=x_ptr.dtype.element_ty)"),
               (X_1, X_1.replace(".to(tl.float32)", ""))),
        "the sum of squares is accumulated in float16: 17×257 float16 (random), BLOCK_SIZE = 64 gives rstd[0]"),
    "x loaded without other= in pass 1": (mutate(L, (X_1, X_1.replace(", other=0.0", ""))), NO_OTHER),
    "tl.sum forgotten (rstd per lane)": (
        mutate(L, ("tl.rsqrt(tl.sum(sum_sq, axis=0) / N + eps)", "tl.rsqrt(sum_sq / N + eps)")),
        "Value argument cannot be block type if pointer argument is not a block"),
    "y rows addressed with N": (
        mutate(L, ("tl.store(y_ptr + row * row_stride", "tl.store(y_ptr + row * N")),
        "it wrote outside y (between its rows, element offset 100): check the store's mask, `start + cols < N`, and "
        "its address, `y_ptr + row * row_stride + start + cols`"),
    # t36: the padded length, a pass 1 of BLOCK_SIZE steps, y without the row's offset.
    "divides by the padded length": (
        mutate(L, ("/ N + eps", "/ (tl.cdiv(N, BLOCK_SIZE) * BLOCK_SIZE) + eps")),
        "the mean is divided by the padded length"),
    "pass 1 over range(0, BLOCK_SIZE)": (
        mutate(L, (LOOP_1, LOOP_1.replace("range(0, N, BLOCK_SIZE)", "range(0, BLOCK_SIZE)"))),
        "pass 1 loops over `range(0, BLOCK_SIZE)`"),
    "y stored without the row's offset": (
        mutate(L, ("tl.store(y_ptr + row * row_stride + start + cols", "tl.store(y_ptr + start + cols")),
        "every row writes into row 0 of y: the store address lacks the row's offset"),
    # Issue 36: a slip no symptom names, described by the shape of its error.
    "pass 1 from the second block": (
        mutate(L, (LOOP_1, LOOP_1.replace("range(0, N,", "range(BLOCK_SIZE, N,"))),
        "pass 1 added the squares of every block but the first to the row's sum of squares"),
}

#: Exercise 09, a loop that never ends (its own test: it runs into the time limit, CPU only).
NEVER_ENDS = mutate(L, (LOOP_1, "    start = 0\n    while start < N:  # forgot `start += BLOCK_SIZE`\n"))

ROW_LOOP = "    for row in range(pid, M, P):  # step P: every row belongs to exactly one program\n"
STORE = "    tl.store(partial_ptr + pid * N + cols, dgamma_acc, mask=mask)  # once, after the loop\n"

#: Exercise 10: name → (kernel, substring of the feedback).
ONE_PASS = {
    "skeleton": (mutate(B, ("    pid = tl.program_id(0)\n", "    raise NotImplementedError()\n    pid = tl.program_id(0)\n")),
                 "not done yet"),
    "partial in 16 bits": (
        mutate(B, ("dgamma_acc = tl.zeros([BLOCK_SIZE], dtype=tl.float32)", "dgamma_acc = tl.zeros([BLOCK_SIZE], dtype=tl.float16)"),
               ("dgamma_acc += dy * x_hat", "dgamma_acc += (dy * x_hat).to(tl.float16)")),
        "is a float16 number"),
    "rstd missing from the partial": (mutate(B, ("dgamma_acc += dy * x_hat", "dgamma_acc += dy * x")), "without rstd"),
    "rows stepped by 1": (mutate(B, (ROW_LOOP, ROW_LOOP.replace("range(pid, M, P)", "range(pid, M)"))),
                          "counted more than once"),
    "a program's partial never stored (store inside the loop)": (
        mutate(B, (STORE, ""), ("        dgamma_acc += dy * x_hat\n",
                                "        dgamma_acc += dy * x_hat\n" + STORE.replace("    ", "        ", 1))),
        "never stores its row"),
    "partial never stored": (mutate(B, (STORE, "")), "the partial is never stored"),
    "partial stored with the row's index": (
        mutate(B, (STORE, ""), ("        dgamma_acc += dy * x_hat\n",
                                "        dgamma_acc += dy * x_hat\n"
                                "        tl.store(partial_ptr + row * N + cols, dgamma_acc, mask=mask)\n")),
        "written outside its"),
    "x_hat missing from the partial (dy alone)": (mutate(B, ("dgamma_acc += dy * x_hat", "dgamma_acc += dy")),
                                                  "without x̂"),
    "gamma in the partial (u * x_hat)": (mutate(B, ("dgamma_acc += dy * x_hat", "dgamma_acc += u * x_hat")),
                                         "gamma is not part of dgamma"),
    "mean divided by BLOCK_SIZE": (mutate(B, ("axis=0) / N", "axis=0) / BLOCK_SIZE")), "divided by BLOCK_SIZE"),
    "dx without its last rstd": (mutate(B, ("(u - x_hat * mean_ux) * rstd", "(u - x_hat * mean_ux)")),
                                 "misses its last factor rstd"),
    "rows addressed with N instead of row_stride": (
        mutate(B, ("tl.cast(row, tl.int64) * row_stride + cols", "tl.cast(row, tl.int64) * N + cols")),
        "address the rows with `row * row_stride`"),
    "no mask on the dx store": (mutate(B, ("(u - x_hat * mean_ux) * rstd, mask=mask)", "(u - x_hat * mean_ux) * rstd)")),
                                "has no mask"),
    "an extra parameter": (mutate(B, ("BLOCK_SIZE: tl.constexpr,", "BLOCK_SIZE: tl.constexpr, EXTRA: tl.constexpr = 1,")),
                           "keep the signature of `one_pass_backward_kernel`"),
    "accumulator changes dtype in the loop (runs in the interpreter, not on a GPU)": (
        mutate(B, ("    dgamma_acc = tl.zeros([BLOCK_SIZE], dtype=tl.float32)\n", "    dgamma_acc = 0.0\n")),
        GPU_REJECTS),
    # Issue 18: the partial's rows BLOCK_SIZE apart (its message described the row-index slip), and the loop's slips.
    "partial rows BLOCK_SIZE apart (pid * BLOCK_SIZE)": (
        mutate(B, ("tl.store(partial_ptr + pid * N + cols", "tl.store(partial_ptr + pid * BLOCK_SIZE + cols")),
        "the partial's rows were stored BLOCK_SIZE = 512 elements apart (`pid * BLOCK_SIZE + cols`), while partial is "
        "a (4, N) tensor whose row p starts at element p · N = p · 257"),
    "offsets from pid, not row": (
        mutate(B, ("offsets = tl.cast(row, tl.int64) * row_stride", "offsets = tl.cast(pid, tl.int64) * row_stride")),
        "each program reads and writes its first row again and again: the offsets use `pid`"),
    "rstd loaded at pid": (mutate(B, ("rstd = tl.load(rstd_ptr + row)", "rstd = tl.load(rstd_ptr + pid)")),
                           "every row of a program uses the rstd of its first row"),
    "every program starts at row 0": (mutate(B, (ROW_LOOP, ROW_LOOP.replace("range(pid, M, P)", "range(0, M, P)"))),
                                      "every program starts at row 0 (`range(0, M, P)`)"),
    "accumulator reset inside the loop": (
        mutate(B, (ROW_LOOP, ROW_LOOP + "        dgamma_acc = tl.zeros([BLOCK_SIZE], dtype=tl.float32)\n")),
        "the accumulator is reset or overwritten inside the loop"),
    "dy loaded without other=": (
        mutate(B, ("dy = tl.load(dy_ptr + offsets, mask=mask, other=0.0)", "dy = tl.load(dy_ptr + offsets, mask=mask)")),
        NO_OTHER),
    "row cast with .to (fails under the interpreter)": (
        mutate(B, ("tl.cast(row, tl.int64) * row_stride + cols", "row.to(tl.int64) * row_stride + cols")),
        "has no `.to`: write `tl.cast(row, tl.int64)`, which works on the GPU too"),
    # t36: rstd on dx's first term only, the partial's rows row_stride apart.
    "dx with rstd on its first term only": (
        mutate(B, ("(u - x_hat * mean_ux) * rstd", "rstd * u - x_hat * mean_ux")),
        "dx's second term misses its rstd (`rstd * u - x_hat * mean_ux`): rstd multiplies u only"),
    "partial rows row_stride apart (pid * row_stride)": (
        mutate(B, ("tl.store(partial_ptr + pid * N + cols", "tl.store(partial_ptr + pid * row_stride + cols")),
        "the partial's rows were stored row_stride = 107 elements apart"),
    # Issue 36: a slip no symptom names, described by the shape of its error.
    "x loaded without the row's offset": (
        mutate(B, ("x = tl.load(x_ptr + offsets,", "x = tl.load(x_ptr + cols,")),
        "row 0 of dx is right and every other row is wrong: check the row offset in every load and store"),
}

#: Exercise 10, a row loop that never ends (its own test: it runs into the time limit, CPU only).
ONE_PASS_NEVER_ENDS = mutate(
    B, (ROW_LOOP, "    row = pid\n    while row < M:  # forgot `row += P`\n"))

#: Accesses far outside every tensor (CPU only: on a GPU they end in an illegal-address error that kills the
#: CUDA context, so the rest of the test session could not run); name → (kernel, substring of the feedback).
FAR_OUTSIDE = {
    "09 rows 10⁸ times too far apart": (
        mutate(L, ("    x_row = x_ptr + row * row_stride\n", "    x_row = x_ptr + row * row_stride * 100000000\n")),
        "made a load at"),
    "10 partial row index 10⁸ times too large": (
        mutate(B, ("tl.store(partial_ptr + pid * N + cols", "tl.store(partial_ptr + pid * N * 100000000 + cols")),
        "made a store at"),
}

# a36: pass 1 adding x (a NaN from a negative mean, not a read outside), eps in every lane, the accumulator
# created inside the loop (the compiler for a GPU does not know it after the loop).
LONG_ROW["pass 1 adds x, not x²"] = (mutate(L, ("sum_sq += x * x", "sum_sq += x")), "pass 1 adds x, not x² (`sum_sq += x`)")
LONG_ROW["eps added in every lane"] = (
    mutate(L, ("sum_sq += x * x", "sum_sq += x * x + eps"), ("/ N + eps)", "/ N)")),
    "eps is added to every lane of every block (`sum_sq += x * x + eps`), so the mean gets eps × (padded length) / N")
LONG_ROW["eps added in every lane and to the mean"] = (
    mutate(L, ("sum_sq += x * x", "sum_sq += x * x + eps")),
    "eps is added to every lane of every block (`sum_sq += x * x + eps`) as well as to the mean")
LONG_ROW["accumulator created inside the loop"] = (
    mutate(L, ("    sum_sq = tl.zeros([BLOCK_SIZE], dtype=tl.float32)\n", ""),
           ("        sum_sq += x * x\n", "        sum_sq = tl.zeros([BLOCK_SIZE], dtype=tl.float32)\n        sum_sq += x * x\n")),
    MADE_IN_LOOP)

# a36: the mean over u · x (dx's line is right), each row's term stored in place of the sum, `row = pid`, the
# loop started at pid * P (a NaN from rows never visited, not a read outside). (The accumulator overwritten,
# `dgamma_acc = dy * x_hat`, gives the numbers of the reset, and its words now say both.)
ONE_PASS["mean of u · x, not u · x̂"] = (
    mutate(B, ("tl.sum(u * x_hat, axis=0) / N", "tl.sum(u * x, axis=0) / N")),
    "the mean is taken of u · x where u · x̂ belongs (`tl.sum(u * x, axis=0)`), so it lacks one rstd")
ONE_PASS["each row's term stored in the partial"] = (
    mutate(B, (STORE, ""), ("        dgamma_acc += dy * x_hat\n",
                            "        tl.store(partial_ptr + pid * N + cols, dy * x_hat, mask=mask)\n")),
    "each row's dy · x̂ is stored in the partial in place of the program's sum")
ONE_PASS["row = pid"] = (
    mutate(B, (ROW_LOOP, ROW_LOOP + "        row = pid\n")),
    "the loop's `row` is not used: every address uses `pid` (`row = pid`)")
ONE_PASS["rows from pid * P"] = (
    mutate(B, (ROW_LOOP, ROW_LOOP.replace("range(pid, M, P)", "range(pid * P, M, P)"))),
    "program pid starts at row pid · P (`range(pid * P, M, P)`): the rows between are never visited")


# q36: the row index multiplied by a stride in int32, where the exercise asks for int64 (the numbers are right).
LONG_ROW["row index not cast to int64"] = (
    mutate(L, ("row = tl.program_id(0).to(tl.int64)", "row = tl.program_id(0)")),
    "multiplies the row index `row` by a stride in int32")
ONE_PASS["row index not cast to int64"] = (
    mutate(B, ("tl.cast(row, tl.int64) * row_stride", "row * row_stride")),
    "multiplies the row index `row` by a stride in int32")
# q36: a row index made inside the loop and used after it: not an accumulator, so no "only add to it".
ONE_PASS["row index made in the loop, used after it"] = (
    mutate(B, ("        offsets = tl.cast(row, tl.int64) * row_stride + cols\n",
               "        r64 = tl.cast(row, tl.int64)\n        offsets = r64 * row_stride + cols\n"),
           ("dgamma_acc, mask=mask)", "dgamma_acc, mask=mask & (r64 < M))")),
    "`r64` is defined only inside the loop and used after it")
LONG_ROW["row pointer made in pass 1, used in pass 2"] = (
    mutate(L, ("    x_row = x_ptr + row * row_stride\n", ""),
           (LOOP_1, LOOP_1 + "        x_row = x_ptr + row * row_stride\n")),
    "`x_row` is made in one loop and read in another, which the compiler does not allow")
# q36: pass 2 stops one column early: the last columns are never written (09's block is narrower than the row).
LONG_ROW["pass 2 loops to N - 1"] = (
    mutate(L, (LOOP_2, LOOP_2.replace("range(0, N, BLOCK_SIZE)", "range(0, N - 1, BLOCK_SIZE)"))),
    "are never written: the column loop stops early")
# q36: the forward's formula slips shared with 02 and 03 (formula_slips.y_slips).
_RSTD_9 = "tl.rsqrt(tl.sum(sum_sq, axis=0) / N + eps)"
LONG_ROW["sqrt for rsqrt"] = (mutate(L, (_RSTD_9, "tl.sqrt(tl.sum(sum_sq, axis=0) / N + eps)")), "rstd is computed with sqrt where rsqrt belongs")
LONG_ROW["gamma not applied"] = (mutate(L, ("x * rstd * gamma", "x * rstd")), "gamma is not applied (y = x · rstd)")
LONG_ROW["sum of squares, not their mean"] = (mutate(L, (_RSTD_9, "tl.rsqrt(tl.sum(sum_sq, axis=0) + eps)")), "rstd uses the sum of the squares where their mean belongs")
LONG_ROW["eps multiplied"] = (mutate(L, (_RSTD_9, "tl.rsqrt(tl.sum(sum_sq, axis=0) / N * eps)")), "eps multiplies the mean of the squares")
# q36: 10's u without gamma, named by 04's model (shared).
ONE_PASS["u = dy, without gamma"] = (mutate(B, ("        u = dy * gamma\n", "        u = dy\n")), "u lacks gamma (u = dy instead of dy·gamma)")
# 09: eps added after the rsqrt (formula_slips.y_slips, shared with 02).
LONG_ROW["eps after rsqrt"] = (mutate(L, (_RSTD_9, "tl.rsqrt(tl.sum(sum_sq, axis=0) / N) + eps")), "eps is added after the rsqrt, outside the root")
# r36: formula slips of 10's dx and partial, taken apart into their terms (dx_terms, shared with 04).
ONE_PASS["mean of dy · x_hat"] = (mutate(B, ("tl.sum(u * x_hat, axis=0)", "tl.sum(dy * x_hat, axis=0)")),
                                  "gamma is missing from the mean's u")
ONE_PASS["gamma folded into x_hat"] = (mutate(B, ("x_hat = x * rstd\n", "x_hat = x * rstd * gamma\n")),
                                       "gamma is folded into x̂). partial is off as well: it holds Σ u · x̂ where "
                                       "Σ dy · x̂ belongs (gamma is in it: u stands where dy belongs, or gamma is "
                                       "folded into x̂)")
ONE_PASS["dx · x_hat accumulated"] = (
    mutate(B, ("tl.store(dx_ptr + offsets, (u - x_hat * mean_ux) * rstd, mask=mask)",
               "dx = (u - x_hat * mean_ux) * rstd\n        tl.store(dx_ptr + offsets, dx, mask=mask)"),
           ("dgamma_acc += dy * x_hat", "dgamma_acc += dx * x_hat")),
    "partial is off: it holds Σ dx · x̂ where Σ dy · x̂ belongs (dx stands where dy belongs)")
# 09: rstd stored as its inverse, y right (shapes: a power of the right value).
LONG_ROW["rstd stored as its inverse"] = (mutate(L, ("    tl.store(rstd_ptr + row, rstd)\n", "    tl.store(rstd_ptr + row, 1 / rstd)\n")), "rstd holds the inverse of the right value")
# s36: pass 1's mask from row_stride (emulated on the case's memory); gamma read from x's row (formula_slips).
LONG_ROW["pass 1 masked with row_stride"] = (mutate(L, _mask(MASK_1, "start + cols < row_stride")),
                                             "pass 1's mask compares with row_stride instead of N")
LONG_ROW["gamma read from x's row"] = (mutate(L, ("tl.load(gamma_ptr + start + cols", "tl.load(x_row + start + cols")),
                                       "y = x · rstd · x: x stands where gamma belongs")
# s36: the row loop stops one row short: the last row alone is NaN, every row before right (diagnose).
ONE_PASS["row loop bound M - 1"] = (mutate(B, ("range(pid, M, P)", "range(pid, M - 1, P)")),
                                    "Only the last row (row 16) is NaN, every column, and every row before is right")
# s36: pass 2 stores x · gamma, rstd never applied (formula_slips).
LONG_ROW["rstd never applied in pass 2"] = (mutate(L, ("x * rstd * gamma", "x * gamma")),
                                            "y lacks rstd: x is scaled by gamma alone (y = x · gamma)")
# s36: pass 2 reads pass 1's x instead of loading its own (gpu_compile: made in one loop, read in another).
LONG_ROW["pass 2 reuses pass 1's x"] = (mutate(L, (X_2, "        gamma")),
                                        "`x` is made in one loop and read in another, which the compiler does not allow")
# walk 5: P written as 4: only P = 3 fails, the unit-stride 10×64 case among them, so not the stride (ex10's look).
ONE_PASS["number of programs written as 4"] = (
    mutate(B, ("P = tl.num_programs(0)", "P = 4")),
    "The step of the row loop must be the number of programs (`P = tl.num_programs(0)`")

# walk 6: a store without the row's offset (row 0 alone written, holding another row's values: diagnose names it
# from the outputs), and rstd that is inf on a row of zeros.
LONG_ROW["rstd stored without the row's offset"] = (
    mutate(L, ("    tl.store(rstd_ptr + row, rstd)\n", "    tl.store(rstd_ptr, rstd)\n")),
    ROW_0.format("rstd", 16, " (the last row)", "rstd") + "rstd has one value per row: store it at "
    "`tl.store(rstd_ptr + row, rstd)`")
LONG_ROW["y and rstd stored without the row's offset"] = (
    mutate(L, ("tl.store(y_ptr + row * row_stride + start + cols", "tl.store(y_ptr + start + cols"),
           ("    tl.store(rstd_ptr + row, rstd)\n", "    tl.store(rstd_ptr, rstd)\n")),
    ROW_0.format("y", 16, " (the last row)", "y") + "store y at `y_ptr + row * row_stride + start + cols`")
LONG_ROW["eps added to N, not to the mean"] = (
    mutate(L, (_RSTD_9, "tl.rsqrt(tl.sum(sum_sq, axis=0) / (N + eps))")),
    "exactly on the rows whose x is all zeros (row 0 of 5×33 float32 with eps = 0.5 and a first row of zeros, "
    "BLOCK_SIZE = 16), and finite elsewhere: a row of zeros has mean(x²) = 0, and 1/sqrt(0) = inf (then 0 · inf = "
    "NaN): eps is missing where rstd is computed, or rstd is computed instead of loaded: rstd = 1/sqrt(mean(x²) + "
    "eps): add eps to the mean, inside the root, `rstd = tl.rsqrt(tl.sum(sum_sq, axis=0) / N + eps)`")
# Program p stores its partial in row 0 (`partial_ptr + cols`); the interpreter runs the programs in order, so
# program 3's is there; dx's rows are stored in row 0 in the loop's order, row 15 (program 3's last) there.
ONE_PASS["partial stored without the program's row"] = (
    mutate(B, ("tl.store(partial_ptr + pid * N + cols", "tl.store(partial_ptr + cols")),
    ROW_0.format("partial", 3, " (the last row)", "partial") + "partial has one row per program: store it once, "
    "after the loop, at `partial_ptr + pid * N + cols` (row `pid`)")
ONE_PASS["dx stored without the row's offset"] = (
    mutate(B, ("tl.store(dx_ptr + offsets", "tl.store(dx_ptr + cols")),
    ROW_0.format("dx", 15, "", "dx") + "store dx at `dx_ptr + offsets`, with the offsets of the row the loop visits")
# walk 6: y or dx cast to float16 before the store, dx's mean summed in float16 (precision); pass 1's blocks,
# read from the sum of squares rstd implies (ex09_symptoms.blocks_added); the overwrite a GPU refuses
# (gpu_compile: a block made a single number in the loop).
LONG_ROW["y cast to float16 before the store"] = (mutate(L, ("x * rstd * gamma, mask=mask)", "(x * rstd * gamma).to(tl.float16), mask=mask)")),
                                                  "on a float32 case, y carries float16 rounding")
LONG_ROW["pass 1 adds the first block only"] = (mutate(L, (LOOP_1, LOOP_1.replace("range(0, N,", "range(0, BLOCK_SIZE,"))),
                                                "pass 1 added the squares of the first block only")
LONG_ROW["pass 1 steps over two blocks"] = (mutate(L, (LOOP_1, LOOP_1.replace("range(0, N, BLOCK_SIZE)", "range(0, N, 2 * BLOCK_SIZE)"))),
                                            "pass 1 added the squares of every other block")
#: Not in LONG_ROW: its message holds GPU_REJECTS, the words of "accumulator changes dtype in the loop" (one test).
BLOCK_OVERWRITTEN = (
    mutate(L, ("        sum_sq += x * x\n", "        sum_sq = tl.sum(x * x)\n"), ("tl.sum(sum_sq, axis=0)", "sum_sq")),
    "`sum_sq` starts as a block before the loop and is given a single number inside it")
ONE_PASS["dx cast to float16 before the store"] = (
    mutate(B, ("(u - x_hat * mean_ux) * rstd, mask=mask)", "((u - x_hat * mean_ux) * rstd).to(tl.float16), mask=mask)")),
    "on a float32 case, dx carries float16 rounding")
ONE_PASS["mean(u·x̂) summed in float16"] = (mutate(B, ("tl.sum(u * x_hat, axis=0) / N", "tl.sum((u * x_hat).to(tl.float16), axis=0) / N")),
                                          "on a float32 case, mean(u · x̂) carries float16 rounding")
# Walk 7: 10's row loop one row too far: it reads row M (NaN around the inputs) and writes its dx past dx.
ONE_PASS["row loop to M + 1"] = (
    mutate(B, (ROW_LOOP, ROW_LOOP.replace("range(pid, M, P)", "range(pid, M + 1, P)"))),
    ("the row loop runs one row too far (`range(pid, M + 1, P)`)", "`for row in range(pid, M, P)`"))
# Walk 7: pass 1's mask against BLOCK_SIZE: the first block alone enters the sum of squares.
LONG_ROW["pass 1 masked with BLOCK_SIZE"] = (
    mutate(L, _mask(MASK_1, "start + cols < BLOCK_SIZE")),
    ("pass 1's mask compares with BLOCK_SIZE where the row has N columns (`start + cols < BLOCK_SIZE`)",
     "`mask = start + cols < N`"))
# Issue 36, walk 8: a fresh learner's slips of 09 and 10, each the solution with one line changed, each named.
LONG_ROW.update({
    "walk 8: block total added to every lane": (mutate(L, ("sum_sq += x * x", "sum_sq += tl.sum(x * x, axis=0)")),
                                               "pass 1 adds each block's total, `tl.sum(x * x, axis=0)`, to every lane"),
    "walk 8: x's row start from BLOCK_SIZE": (mutate(L, ("x_row = x_ptr + row * row_stride", "x_row = x_ptr + row * BLOCK_SIZE")),
                                             "x's row start is `row * BLOCK_SIZE`"),
    "walk 8: pass 1 over block indices": (mutate(L, ("for start in range(0, N, BLOCK_SIZE):  # pass 1", "for start in range(0, tl.cdiv(N, BLOCK_SIZE)):  # pass 1")),
                                         "pass 1 loops over block indices, `range(0, tl.cdiv(N, BLOCK_SIZE))`"),
    "walk 8: y stored into x": (mutate(L, ("tl.store(y_ptr + row * row_stride + start + cols", "tl.store(x_row + start + cols")),
                               "it wrote into x, an input"),
    "walk 8: gamma one value per block": (mutate(L, ("tl.load(gamma_ptr + start + cols, mask=mask, other=0.0)", "tl.load(gamma_ptr + start)")),
                                         "gamma is loaded as one value per block (`tl.load(gamma_ptr + start)`, without `cols`)"),
})
ONE_PASS.update({
    "walk 8: a chunk of P rows per program": (mutate(B, ("for row in range(pid, M, P):", "for row in range(pid * P, pid * P + P):")),
                                             "each program takes P consecutive rows, `range(pid * P, pid * P + P)`"),
    "walk 8: mean over M": (mutate(B, ("mean_ux = tl.sum(u * x_hat, axis=0) / N", "mean_ux = tl.sum(u * x_hat, axis=0) / M")),
                           "mean(u · x̂) is divided by M, the number of rows"),
    "walk 8: x for x̂ in dx": (mutate(B, ("(u - x_hat * mean_ux) * rstd", "(u - x * mean_ux) * rstd")),
                              "dx's second term uses x where x̂ belongs (`(u - x * mean_ux) * rstd`)"),
    "walk 8: partial's row without × N": (mutate(B, ("tl.store(partial_ptr + pid * N + cols", "tl.store(partial_ptr + pid + cols")),
                                         "the partial's row offset lacks × N (`partial_ptr + pid + cols`)"),
    "walk 8: gamma loaded in the loop at the row's offsets": (
        mutate(B, ("    gamma = tl.load(gamma_ptr + cols, mask=mask, other=0.0).to(tl.float32)\n", ""),
               ("        u = dy * gamma", "        gamma = tl.load(gamma_ptr + offsets, mask=mask, other=0.0).to(tl.float32)\n"
                                        "        u = dy * gamma")),
        "gamma holds one value per column (257 of them), the same for every row, but it is read at row"),
})

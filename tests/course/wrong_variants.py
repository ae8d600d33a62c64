"""Wrong variants of exercises 01-08, for tests/course/test_ex*.py only: each checker must reject each one.

Kernels are made by *mutating* the package kernel's source — a few exact
text replacements, each asserted to occur once — and writing the result to a
module in a temporary folder (Triton reads a kernel's source from its file).
So every wrong kernel is the right one with a classic slip, and nothing here
can drift from the package. Python variants (exercises 01, 02, 06, 07, 08)
are written out in full below.

Never import this from the course package or a notebook.
"""

from __future__ import annotations

import importlib.util
import inspect
import itertools
import math
import tempfile
from pathlib import Path

import torch
import triton

import rmsnorm.article
import rmsnorm_course.teaching.buggy
from rmsnorm.article import backward_rows, forward_op, reduce_gamma_gradient

_FOLDER = Path(tempfile.mkdtemp(prefix="rmsnorm_wrong_variants_"))
_COUNTER = itertools.count()


def mutate(kernel, *replacements: tuple[str, str]):
    """A copy of a package kernel with text replacements applied, as a new ``@triton.jit`` kernel.

    Args:
        kernel: a package kernel (``rmsnorm.article.rmsnorm_forward_kernel``…).
        replacements: (old, new) pairs; each ``old`` must occur exactly once.

    Raises:
        AssertionError: an ``old`` text is not found exactly once.
    """
    source = inspect.getsource(kernel.fn)
    for old, new in replacements:
        assert source.count(old) == 1, f"{old!r} occurs {source.count(old)} times in {kernel.fn.__name__}"
        source = source.replace(old, new)
    name = f"wrong_{kernel.fn.__name__}_{next(_COUNTER)}"
    source = source.replace(f"def {kernel.fn.__name__}(", f"def {name}(")
    path = _FOLDER / f"{name}.py"
    path.write_text("import triton\nimport triton.language as tl\n\n\n" + source, encoding="utf-8")
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return getattr(module, name)


F, D, G = rmsnorm.article.rmsnorm_forward_kernel, rmsnorm.article.rmsnorm_dx_kernel, rmsnorm.article.rmsnorm_dgamma_kernel
SKELETON = ("    row = tl.program_id(0)", "    raise NotImplementedError()\n    row = tl.program_id(0)")

def endless(store: str) -> str:
    """A loop that never advances (start * 2 stays 0) and stores on every turn, as a learner's would.

    The store matters: a loop without side effects is removed by the GPU compiler (LLVM may delete
    it), and the kernel then ends and gives the right numbers on a GPU. ``store`` is a
    `tl.store(...)` to one of the kernel's outputs, inside the tensor.
    """
    return f"    start = 0\n    while start < N:\n        {store}\n        start = start * 2\n"


#: Messages of the classes every kernel checker must name (asserted substrings).
CRASHED = "read or wrote outside the tensor"  # a signal on the CPU, an illegal memory access on a GPU
NEVER_ENDS = "did not finish in"
READ_OUTSIDE = "read outside its tensors"
NO_OTHER = "has a mask but no `other=`"
GPU_REJECTS = "Triton's compiler for a GPU rejects it at line"

#: Exercise 03: name → (kernel, substring the feedback must contain).
FORWARD = {
    "skeleton": (mutate(F, SKELETON), "not done yet"),
    "divides by BLOCK_SIZE": (mutate(F, ("/ N + eps", "/ BLOCK_SIZE + eps")), "divided by BLOCK_SIZE instead of N: a row of 257 ones gives y[0, 0] = 1.411, expected 1.000"),
    "no gamma": (mutate(F, ("y = x * rstd * gamma", "y = x * rstd")), "gamma is not applied"),
    "no eps": (mutate(F, ("/ N + eps)", "/ N)")), "eps is missing"),
    "eps after the root": (mutate(F, ("tl.rsqrt(tl.sum(x * x, axis=0) / N + eps)", "1 / (tl.sqrt(tl.sum(x * x, axis=0) / N) + eps)")), "eps is added after the square root"),
    "multiplies by the RMS": (mutate(F, ("tl.rsqrt(", "tl.sqrt(")), "multiplied by the RMS"),
    "stores the RMS as rstd": (mutate(F, ("tl.store(rstd_ptr + row, rstd)", "tl.store(rstd_ptr + row, 1 / rstd)")), "rstd holds the RMS"),
    "sums in float16": (mutate(F, (", other=0).to(tl.float32)\n    gamma", ", other=0)\n    gamma"), ("mask=mask, other=0).to(tl.float32)\n    rstd", "mask=mask, other=0)\n    rstd")), "computed in float16, which overflows past 65504: 3×257 float16 with values of scale 200 (x² often past 65504) gives y[0, 0] = -0.000"),
    "unmasked store": (mutate(F, ("cols, y, mask=mask)", "cols, y)")), "has no mask"),
    "unmasked load": (mutate(F, ("cols, mask=mask, other=0).to(tl.float32)\n    gamma", "cols).to(tl.float32)\n    gamma")), "has no mask"),
    "rstd never written": (mutate(F, ("    tl.store(rstd_ptr + row, rstd)\n", "")), "a row of 257 ones: rstd[0] is still NaN"),
    "wrong signature": (mutate(F, ("BLOCK_SIZE: tl.constexpr", "BLOCK: tl.constexpr"), ("BLOCK_SIZE)", "BLOCK)")), "keep the signature of `rmsnorm_forward_kernel`"),
    "not a kernel": (F.fn, "is not a Triton kernel"),
    # Issue 9: classes the checker did not look at.
    "block width hard-coded to 512": (mutate(F, ("cols = tl.arange(0, BLOCK_SIZE)", "cols = tl.arange(0, 512)")), "the block covers only the first 512 columns"),
    "ignores the eps argument": (mutate(F, ("/ N + eps)", "/ N + 1e-6)")), "the eps argument is ignored"),
    "masked load of x without other": (mutate(F, ("cols, mask=mask, other=0).to(tl.float32)\n    gamma", "cols, mask=mask).to(tl.float32)\n    gamma")), NO_OTHER),
    "rstd kept in 16 bits": (mutate(F, ("tl.store(rstd_ptr + row, rstd)", "tl.store(rstd_ptr + row, rstd.to(x_ptr.dtype.element_ty))")), "rstd is rounded to 16 bits for float16 inputs (y is fine; your loads are fine)"),
    "row offset from N, not the stride": (mutate(F, ("x_ptr + row * x_row_stride + cols", "x_ptr + row * N + cols")), READ_OUTSIDE),
    "row offset from BLOCK_SIZE (reads past the tensor)": (mutate(F, ("x_ptr + row * x_row_stride + cols", "x_ptr + row * BLOCK_SIZE + cols")), READ_OUTSIDE),
    "every lane stored (mask cols < BLOCK_SIZE)": (mutate(F, ("cols, y, mask=mask)", "cols, y, mask=cols < BLOCK_SIZE)")), "it wrote outside y"),
    "writes y into x": (mutate(F, ("tl.store(y_ptr + row * y_row_stride + cols, y, mask=mask)", "tl.store(x_ptr + row * x_row_stride + cols, y, mask=mask)")), "it wrote into x, an input"),
    "reads far outside (the process dies)": (mutate(F, ("x_ptr + row * x_row_stride + cols", "x_ptr + (row + 1) * 1099511627776 + cols")), CRASHED),
    "never ends": (mutate(F, ("    cols = tl.arange(0, BLOCK_SIZE)\n", "    cols = tl.arange(0, BLOCK_SIZE)\n" + endless("tl.store(rstd_ptr + row, start)"))), NEVER_ENDS),
    "accumulator changes dtype in a loop": (mutate(F, ("    rstd = tl.rsqrt(tl.sum(x * x, axis=0) / N + eps)", "    acc = 0\n    for _ in range(0, 1):\n        acc += tl.sum(x * x, axis=0)\n    rstd = tl.rsqrt(acc / N + eps)")), GPU_REJECTS),
    # Issue 18: an address without the row's offset, on the load and on the store; y stored with x's row stride.
    "x loaded without the row's offset": (mutate(F, ("x_ptr + row * x_row_stride + cols", "x_ptr + cols")), "every row reads the first row: the load address of x lacks the row's offset (`row * x_row_stride`)"),
    "y stored without the row's offset": (mutate(F, ("y_ptr + row * y_row_stride + cols", "y_ptr + cols")), "every row writes into the first row of y: the store address lacks the row's offset (`row * y_row_stride`)"),
    "y stored with x's row stride": (mutate(F, ("y_ptr + row * y_row_stride + cols", "y_ptr + row * x_row_stride + cols")), "it wrote outside y (between its rows, element offset 300): check the store's mask (`cols < N`) and its address, `y_ptr + row * y_row_stride + cols` (y has a row stride of its own"),
    # A learner's walk through 03: the reduction, eps and rstd's store, gamma's address.
    "max instead of sum": (mutate(F, ("tl.sum(x * x, axis=0)", "tl.max(x * x, axis=0)")), "`tl.max` where the mean of the squares needs `tl.sum`"),
    "eps added after rsqrt": (mutate(F, ("tl.rsqrt(tl.sum(x * x, axis=0) / N + eps)", "tl.rsqrt(tl.sum(x * x, axis=0) / N) + eps")), "eps is added after `tl.rsqrt`"),
    "square of the sum": (mutate(F, ("tl.sum(x * x, axis=0) / N", "tl.sum(x, axis=0) * tl.sum(x, axis=0) / N")), "the square of the row's sum"),
    "eps divided by N": (mutate(F, ("tl.sum(x * x, axis=0) / N + eps", "(tl.sum(x * x, axis=0) + eps) / N")), "eps is divided by N"),
    "stores the mean square as rstd": (mutate(F, ("tl.store(rstd_ptr + row, rstd)", "tl.store(rstd_ptr + row, tl.sum(x * x, axis=0) / N)")), "rstd holds mean(x²)"),
    "gamma loaded with the row's offset": (mutate(F, ("gamma_ptr + cols", "gamma_ptr + row * x_row_stride + cols")), "gamma's load has the row's offset"),
    # Issue 36: slips no symptom names, described by the shape of their error.
    "mean divided by N + 1": (mutate(F, ("/ N + eps", "/ (N + 1) + eps")), "each row of y is off by one factor: the row's scale is wrong: rstd = 1/sqrt(mean(x²) + eps)"),
    "gamma applied twice": (mutate(F, ("y = x * rstd * gamma", "y = x * rstd * gamma * gamma")), "each column of y is off by one factor, the same in every row: gamma is wrong"),
    "x loaded with other=1": (mutate(F, ("cols, mask=mask, other=0).to(tl.float32)\n    gamma", "cols, mask=mask, other=1).to(tl.float32)\n    gamma")), "Every case whose N fills its blocks exactly (a multiple of BLOCK_SIZE) passes, and every failing case ends in a partial block: check whether the padding lanes"),
}

#: Exercise 04 (and 08's fix): name → (kernel, substring).
DX = {
    "skeleton": (mutate(D, SKELETON), "not done yet"),
    "divides by BLOCK_SIZE": (rmsnorm_course.teaching.buggy.rmsnorm_dx_kernel_block_mean, "divided by BLOCK_SIZE instead of N: a row of 257 ones gives dx[0, 0] = 0.498"),
    "no r³ term": (mutate(D, ("dx = rstd * u - x * rstd * rstd * rstd * mean_ux", "dx = rstd * u")), "dx lacks the r³ term"),
    "r instead of r³": (mutate(D, ("x * rstd * rstd * rstd * mean_ux", "x * rstd * mean_ux")), "has r where it needs r³"),
    "r² instead of r³": (mutate(D, ("x * rstd * rstd * rstd * mean_ux", "x * rstd * rstd * mean_ux")), "has r² where it needs r³"),
    "mean(u) instead of mean(u·x)": (mutate(D, ("tl.sum(u * x, axis=0)", "tl.sum(u, axis=0)")), "mean(u) instead of mean(u·x)"),
    "no gamma in u": (mutate(D, ("u = dy * gamma", "u = dy")), "u lacks gamma"),
    "plus instead of minus": (mutate(D, ("rstd * u - x", "rstd * u + x")), "added instead of subtracted"),
    "partial without rstd": (mutate(D, ("dy * x * rstd, mask", "dy * x, mask")), "partial lacks rstd"),
    "partial with gamma": (mutate(D, ("dy * x * rstd, mask", "u * x * rstd, mask")), "partial includes gamma"),
    "partial never written": (mutate(D, ("    tl.store(partial_ptr + offsets, dy * x * rstd, mask=mask)\n", "")), "a row of 257 ones: partial at rows 0, columns 0…256 is still NaN"),
    "unmasked dx store": (mutate(D, ("offsets, dx, mask=mask)", "offsets, dx)")), "has no mask"),
    # Issue 9: classes the checker did not look at.
    "block width hard-coded to 512": (mutate(D, ("cols = tl.arange(0, BLOCK_SIZE)", "cols = tl.arange(0, 512)")), "the block covers only the first 512 columns"),
    "masked load of dy without other": (mutate(D, ("dy_ptr + offsets, mask=mask, other=0)", "dy_ptr + offsets, mask=mask)")), NO_OTHER),
    "row offset from N, not the stride": (mutate(D, ("offsets = row * row_stride + cols", "offsets = row * N + cols")), "it wrote outside dx"),
    "x read with the row offset of BLOCK_SIZE": (mutate(D, ("x = tl.load(x_ptr + offsets,", "x = tl.load(x_ptr + row * BLOCK_SIZE + cols,")), READ_OUTSIDE),
    "writes dx into dy": (mutate(D, ("tl.store(dx_ptr + offsets", "tl.store(dy_ptr + offsets")), "it wrote into dy, an input"),
    "reads far outside (the process dies)": (mutate(D, ("rstd = tl.load(rstd_ptr + row)", "rstd = tl.load(rstd_ptr + (row + 1) * 1099511627776)")), CRASHED),
    "never ends": (mutate(D, ("    mask = cols < N\n", "    mask = cols < N\n" + endless("tl.store(partial_ptr + row * row_stride, start)"))), NEVER_ENDS),
    "accumulator changes dtype in a loop": (mutate(D, ("    mean_ux = tl.sum(u * x, axis=0) / N", "    acc = 0\n    for _ in range(0, 1):\n        acc += tl.sum(u * x, axis=0)\n    mean_ux = acc / N")), GPU_REJECTS),
    # Issue 18: the row's offset left out of every address, or out of x's load alone.
    "offsets without the row's offset": (mutate(D, ("offsets = row * row_stride + cols", "offsets = cols")), "every row reads and writes the first row: the offsets lack the row's offset"),
    "x loaded without the row's offset": (mutate(D, ("x = tl.load(x_ptr + offsets,", "x = tl.load(x_ptr + cols,")), "every row reads the first row of x: its load address lacks the row's offset (`x_ptr + cols`)"),
    # A learner's walk through 04 and 08: the mean, the terms, the stores, rstd's address.
    "mean(u·x) not divided by N": (mutate(D, ("mean_ux = tl.sum(u * x, axis=0) / N", "mean_ux = tl.sum(u * x, axis=0)")), "mean(u·x) is not divided by N"),
    "dx and partial stores swapped": (mutate(D, ("tl.store(dx_ptr + offsets, dx,", "tl.store(partial_ptr + offsets, dx,"), ("tl.store(partial_ptr + offsets, dy * x * rstd,", "tl.store(dx_ptr + offsets, dy * x * rstd,")), "dx and partial are swapped"),
    "max instead of sum in mean(u·x)": (mutate(D, ("tl.sum(u * x, axis=0)", "tl.max(u * x, axis=0)")), "`tl.max` where mean(u·x) needs `tl.sum`"),
    "u instead of x in the r³ term": (mutate(D, ("x * rstd * rstd * rstd * mean_ux", "u * rstd * rstd * rstd * mean_ux")), "the r³ term multiplies u where it needs x"),
    "partial with rstd squared": (mutate(D, ("dy * x * rstd, mask", "dy * x * rstd * rstd, mask")), "partial has rstd twice"),
    "rstd loaded with the row stride": (mutate(D, ("rstd = tl.load(rstd_ptr + row)", "rstd = tl.load(rstd_ptr + row * row_stride)")), "rstd's load has the row stride"),
    "mean(u·x·rstd)": (mutate(D, ("tl.sum(u * x, axis=0) / N", "tl.sum(u * x * rstd, axis=0) / N")), "mean(u·x) is multiplied by rstd"),
    "mean(x·x) instead of mean(u·x)": (mutate(D, ("tl.sum(u * x, axis=0) / N", "tl.sum(x * x, axis=0) / N")), "mean(x·x)"),
    # Issue 36: slips no symptom names, described by the shape of their error.
    "dx's terms subtracted the wrong way round": (mutate(D, ("dx = rstd * u - x * rstd * rstd * rstd * mean_ux", "dx = x * rstd * rstd * rstd * mean_ux - rstd * u")), "dx has the wrong sign: every value is the right one times −1"),
    "dx without its leading rstd": (mutate(D, ("dx = rstd * u - x * rstd * rstd * rstd * mean_ux", "dx = u - x * rstd * rstd * mean_ux")), "each row of dx is off by one factor: a factor of rstd is wrong"),
}

#: The dgamma kernel with a 2-D accumulator, summed over its rows once after the loop (no Kahan), as learners write it.
ACC2D = (
    "    total = tl.zeros((BLOCK_N,), dtype=tl.float32)\n"
    "    lost = tl.zeros((BLOCK_N,), dtype=tl.float32)  # Kahan: low bits the running total dropped\n",
    "    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)\n",
)
ACC2D_BODY = (
    "        tile = tl.load(partial_ptr + offsets, mask=mask, other=0.0)  # (BLOCK_M, BLOCK_N)\n"
    "        step = tl.sum(tile, axis=0) - lost  # a sum over rows, not a mean\n"
    "        new_total = total + step\n"
    "        lost = (new_total - total) - step  # what rounding removed from step\n"
    "        total = new_total\n",
    "        acc += tl.load(partial_ptr + offsets, mask=mask, other=0.0)\n"
    "    total = tl.sum(acc, axis=0)\n",
)


def _acc2d(*slips: tuple[str, str]):
    """The 2-D accumulator kernel with ``slips`` applied to its text (each occurring once)."""
    body = ACC2D_BODY[1]
    loop = "    for start in range(0, M, BLOCK_M):  # fixed order: deterministic\n"
    for old, new in slips:
        if old in body:
            body = body.replace(old, new)
        else:
            loop = loop.replace(old, new)
    return mutate(G, ACC2D, (ACC2D_BODY[0], body),
                  ("    for start in range(0, M, BLOCK_M):  # fixed order: deterministic\n", loop))


#: Exercise 05: name → (kernel, substring).
DGAMMA = {
    "skeleton": (mutate(G, ("    pid = tl.program_id(0)", "    raise NotImplementedError()\n    pid = tl.program_id(0)")), "not done yet"),
    "mean over rows": (mutate(G, ("cols, total, mask", "cols, total / M, mask")), "dgamma is a mean over rows, not a sum: the article's partials [[1, 2], [3, 4]] gives dgamma = [2.000, 3.000], expected [4.000, 6.000]"),
    "no loop over rows": (mutate(G, ("range(0, M, BLOCK_M)", "range(0, 1)")), "only the first BLOCK_M rows are added: the rows past the first tile are never read"),
    "last partial step dropped": (mutate(G, ("range(0, M, BLOCK_M)", "range(0, M // BLOCK_M * BLOCK_M, BLOCK_M)")), "the last M mod BLOCK_M rows are dropped"),
    "unmasked store": (mutate(G, ("cols, total, mask=col_mask)", "cols, total)")), "has no mask"),
    "unmasked load": (mutate(G, ("offsets, mask=mask, other=0.0)", "offsets)")), "has no mask"),
    "wrong signature": (mutate(G, ("BLOCK_N: tl.constexpr,", "BLOCK_N: tl.constexpr, EXTRA: tl.constexpr = 1,")), "keep the signature"),
    # Issue 9: classes the checker did not look at.
    "unmasked store, in this exercise's words": (mutate(G, ("cols, total, mask=col_mask)", "cols, total)")), "the last program's lanes 257…287"),
    "rows not masked (reads past the tensor)": (mutate(G, ("mask = (rows[:, None] < M) & col_mask[None, :]", "mask = (rows[:, None] < M + BLOCK_M) & col_mask[None, :]")), READ_OUTSIDE),
    "masked load without other": (mutate(G, ("offsets, mask=mask, other=0.0)", "offsets, mask=mask)")), NO_OTHER),
    "row offset from N, not the stride": (mutate(G, ("rows[:, None].to(tl.int64) * partial_row_stride", "rows[:, None].to(tl.int64) * N")), READ_OUTSIDE),
    "writes into the partials": (mutate(G, ("tl.store(dgamma_ptr + cols, total, mask=col_mask)", "tl.store(dgamma_ptr + cols, total, mask=col_mask)\n    tl.store(partial_ptr + cols, total, mask=col_mask)")), "it wrote into partial, an input"),
    "reads far outside (the process dies)": (mutate(G, ("tl.load(partial_ptr + offsets,", "tl.load(partial_ptr + offsets + 1099511627776,")), CRASHED),
    "loop start never advances": (mutate(G, ("    for start in range(0, M, BLOCK_M):  # fixed order: deterministic\n", "    start = 0\n    while start < M:\n")), NEVER_ENDS),
    "float16 running total (changes dtype in the loop)": (mutate(G, ("total = tl.zeros((BLOCK_N,), dtype=tl.float32)", "total = tl.zeros((BLOCK_N,), dtype=tl.float16)")), GPU_REJECTS),
    # Issue 18: the loop's row offsets without the step's start; the columns without the program's start.
    "rows without the step's start": (mutate(G, ("rows = start + tl.arange(0, BLOCK_M)", "rows = tl.arange(0, BLOCK_M)")), "every step adds the first BLOCK_M rows again: the row offsets lack the step's start: a random 100×33 partial"),
    "columns without the program's start": (mutate(G, ("cols = pid * BLOCK_N + tl.arange(0, BLOCK_N)", "cols = tl.arange(0, BLOCK_N)")), "every program sums the first BLOCK_N columns: the column offsets lack the program's start (`pid * BLOCK_N`)"),
    # A learner's walk through 05, on a 2-D accumulator summed once after the loop.
    "2-D accumulator: loop to N": (_acc2d(("range(0, M, BLOCK_M)", "range(0, N, BLOCK_M)")), "the loop over rows runs to N"),
    "2-D accumulator: max over rows": (_acc2d(("tl.sum(acc, axis=0)", "tl.max(acc, axis=0)")), "`tl.max` where dgamma needs `tl.sum`"),
    "2-D accumulator: sum over axis 1": (_acc2d(("tl.sum(acc, axis=0)", "tl.sum(acc, axis=1)")), "Most often it is a sum along `axis=1`, which gives BLOCK_M values, one per row"),
    "2-D accumulator overwritten": (_acc2d(("acc += tl.load", "acc = tl.load")), "only the last step's rows are counted"),
    "max over each step's rows": (mutate(G, ("tl.sum(tile, axis=0)", "tl.max(tile, axis=0)")), "`tl.max` where dgamma needs `tl.sum`"),
    # Issue 36: a slip no symptom names, described by the shape of its error.
    "tile loaded without the program's column start": (mutate(G, ("* partial_row_stride + cols[None, :]", "* partial_row_stride + tl.arange(0, BLOCK_N)[None, :]")), "the first columns of dgamma are right and the columns from column 16 or 32 (by case) on are wrong: check the column offsets of each program"),
}


# --------------------------------------------------------------------------- exercise 01


def _row_skeleton():
    raise NotImplementedError()


def _row_raises():
    total = 0
    return [1.0, 2.0], [1.0, 2.0], 1 / total, [1.0, 2.0]


def _row_never():
    while True:
        pass


def _row(r, y, x=(1.0, 2.0, 2.0, 4.0), gamma=(1.0, 1.0, 0.5, 2.0)):
    return lambda: (list(x), list(gamma), r, list(y))


#: Exercise 01: name → (my_row function, substring).
BY_HAND = {
    "skeleton": (_row_skeleton, "not done yet"),
    "the RMS instead of its inverse": (_row(2.5, [2.5, 5.0, 2.5, 20.0]), "your r is the RMS sqrt(mean(x²) + eps), not its inverse"),
    "r is the RMS but y divides by it": (_row(2.5, [0.4, 0.8, 0.4, 3.2]), "your y is right: you divided x by the RMS"),
    "sum instead of mean": (_row(0.2, [0.2, 0.4, 0.2, 1.6]), "r uses the sum of the squares, not their mean"),
    "no square root": (_row(0.16, [0.16, 0.32, 0.16, 1.28]), "the square root is missing"),
    "mean of |x|": (_row(1 / 2.25, [0.444, 0.889, 0.444, 3.556]), "r uses the mean of |x|"),
    "gamma forgotten": (_row(0.4, [0.4, 0.8, 0.8, 1.6]), "gamma is missing from y"),
    "the article's row": (_row(0.282843, [0.849, 1.131], x=(3.0, 4.0), gamma=(1.0, 2.0)), "lesson's worked example"),
    "gamma all ones": (_row(0.4, [0.4, 0.8, 0.8, 1.6], gamma=(1.0, 1.0, 1.0, 1.0)), "not all ones"),
    "a typo": (_row(0.4, [0.4, 0.8, 0.4, 3.0]), "gives y = [0.400, 0.800, 0.400, 3.000], expected [0.400, 0.800, 0.400, 3.200]"),
    # Issue 9: malformed answers and code that raises or never ends.
    "y one number short": (_row(0.4, [0.4, 0.8, 0.4]), "y must have 4 numbers, one per column of x_row; got 3"),
    "numbers as text": (_row("0.4", [0.4, 0.8, 0.4, 3.2]), "r must be a number; got '0.4'"),
    "raises": (_row_raises, "raised ZeroDivisionError at line"),
    "never returns": (_row_never, "did not finish in"),
    "the RMS of x·gamma": (_row(0.239, [0.239, 0.478, 0.239, 1.912]), "gives r = 0.239, expected 0.400"),
}


# --------------------------------------------------------------------------- exercise 02


def _reference(dtype_policy=True, keepdim=True, dim=-1, gamma=True, eps_mode="inside", centre=False, cast_back=True, f64=True,
               in_place=False, flatten=False):
    def my_reference(x, g, eps=1e-6):
        dtype = torch.float64 if (x.dtype == torch.float64 and f64) else torch.float32
        xf, gf = (x.to(dtype), g.to(dtype)) if dtype_policy else (x, g)
        if flatten:
            xf = xf.reshape(-1, xf.shape[-1])
        if centre:
            xf = xf - xf.mean(-1, keepdim=True)
        ms = xf.square().mean(dim, keepdim=keepdim)
        r = {"inside": torch.rsqrt(ms + eps), "missing": torch.rsqrt(ms), "outside": 1 / (ms.sqrt() + eps),
             "ignored": torch.rsqrt(ms + 1e-6)}[eps_mode]
        if in_place:
            xf *= r
            xf *= gf
            return xf.to(x.dtype)
        y = xf * r * (gf if gamma else 1)
        return y.to(x.dtype) if cast_back else y
    return my_reference


def _reference_skeleton(x, gamma, eps=1e-6):
    raise NotImplementedError()


#: Exercise 02: name → (my_reference, substring).
REFERENCE = {
    "skeleton": (_reference_skeleton, "not done yet"),
    "no keepdim": (_reference(keepdim=False), "keepdim=True"),
    "mean over rows": (_reference(dim=0), "the mean is taken over the rows (dim 0)"),
    "LayerNorm": (_reference(centre=True), "the row's mean is subtracted (that is LayerNorm)"),
    "no gamma": (_reference(gamma=False), "gamma is not applied"),
    "no eps": (_reference(eps_mode="missing"), "eps is missing"),
    "eps outside": (_reference(eps_mode="outside"), "eps is added after the square root"),
    "no up-cast": (_reference(dtype_policy=False), "x² is computed in float16, where it overflows past 65504"),
    "not cast back": (_reference(cast_back=False), "cast back with `.to(x.dtype)`"),
    "float64 in float32": (_reference(f64=False), "float64 x is computed in float32"),
}


def _no_keepdim_silent(x, g, eps=1e-6):
    """keepdim forgotten where no shape error warns (M = N); right elsewhere: only the 4 × 4 case shows it."""
    dtype = torch.float64 if x.dtype == torch.float64 else torch.float32
    xf, gf = x.to(dtype), g.to(dtype)
    r = torch.rsqrt(xf.square().mean(-1) + eps)  # (..., ) instead of (..., 1)
    square = xf.dim() == 2 and xf.shape[0] == xf.shape[1]
    return (xf * (r if square else r.unsqueeze(-1)) * gf).to(x.dtype)


REFERENCE["no keepdim, silent when M = N"] = (_no_keepdim_silent, "without keepdim=True, so r broadcasts along the wrong axis")
# Issue 9: classes the checker did not look at.
REFERENCE["eps ignored"] = (_reference(eps_mode="ignored"), "the eps argument is ignored")
REFERENCE["writes into x"] = (_reference(in_place=True), "changed its input x: an in-place operation")
REFERENCE["3-D flattened to 2-D"] = (_reference(flatten=True), "y has shape (6, 8), x has shape (2, 3, 8)")


def _reference_never(x, gamma, eps=1e-6):
    rows = 0
    while rows < x.shape[0]:
        x.shape[0]
    return x


REFERENCE["never returns"] = (_reference_never, "did not finish in")


# --------------------------------------------------------------------------- exercise 06


def _function(returns="right", contiguous=True, kernels=True, pass_eps=True, dgamma_kernel=True, y_float=False, in_place=False):
    class Wrong(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x, weight, eps):
            if kernels:
                y, rstd = forward_op(x, weight, eps if pass_eps else 1e-6)
                if y_float:
                    y = y.float()
                if in_place:
                    x.mul_(1.5)
            else:
                rstd = torch.rsqrt(x.float().square().mean(-1) + eps)
                y = (x.float() * rstd[:, None] * weight.float()).to(x.dtype)
            ctx.save_for_backward(x, weight, rstd)
            ctx.eps = eps
            return y

        @staticmethod
        def backward(ctx, dy):
            x, weight, rstd = ctx.saved_tensors
            dx, partial = backward_rows(x, weight, dy.contiguous() if contiguous else dy, rstd, ctx.eps)
            dgamma = reduce_gamma_gradient(partial, weight.dtype) if dgamma_kernel else partial.sum(0).to(weight.dtype)
            while returns == "never":
                pass
            return {"right": (dx, dgamma, None), "two": (dx, dgamma), "swapped": (dgamma, dx, None),
                    "no dgamma": (dx, None, None)}[returns]
    return Wrong


class _FunctionSkeleton(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, eps):
        raise NotImplementedError()


#: Exercise 06: name → (Function class, substring).
AUTOGRAD = {
    "skeleton": (_FunctionSkeleton, "not done yet"),
    "two gradients for three inputs": (_function(returns="two"), "backward returned 2 values, but forward takes 3 inputs"),
    "gradients swapped": (_function(returns="swapped"), "the gradients are in the wrong order"),
    "no dgamma": (_function(returns="no dgamma"), "weight got no gradient"),
    "dy not contiguous": (_function(contiguous=False), "Pass `dy.contiguous()`"),
    "no kernels in forward": (_function(kernels=False), "forward never called forward_op"),
    "not a Function": (object, "is not a subclass of torch.autograd.Function"),
    # Issue 9: classes the checker did not look at.
    "eps ignored": (_function(pass_eps=False), "eps = 0.5 is not passed on"),
    "dgamma summed in PyTorch": (_function(dgamma_kernel=False), "backward never called reduce_gamma_gradient"),
    "y returned in float32 for float16 x": (_function(y_float=True), "on 17×256 float16, y is float32"),
    "forward scales x in place": (_function(in_place=True), "x changed: your forward or backward wrote into an input"),
    "backward never ends": (_function(returns="never"), "did not finish in"),
}


# --------------------------------------------------------------------------- exercise 07


def _median(kind="median", path_filter=True, provider_filter=True):
    def median_us(samples, path, provider):
        keep = torch.ones(len(samples), dtype=torch.bool).numpy()
        if path_filter:
            keep &= (samples["path"] == path).to_numpy()
        if provider_filter:
            keep &= (samples["provider"] == provider).to_numpy()
        values = samples[keep]["us_per_call"]
        return float({"median": values.median(), "mean": values.mean(), "min": values.min(),
                      "first": values.iloc[0], "sum": values.sum()}[kind])
    return median_us


def _percent(kind="right"):
    return {
        "right": lambda k, r: 100 * (k - r) / r,
        "of the kernel": lambda k, r: 100 * (k - r) / k,
        "fraction": lambda k, r: (k - r) / r,
        "reversed": lambda k, r: 100 * (r - k) / r,
        "ratio": lambda k, r: 100 * k / r,
        "abs": lambda k, r: abs(100 * (k - r) / r),
        "text": lambda k, r: f"{100 * (k - r) / r:+.1f} %",
    }[kind]


def _median_in_place(samples, path, provider):
    samples.sort_values("us_per_call", inplace=True)
    return float(samples[(samples["path"] == path) & (samples["provider"] == provider)]["us_per_call"].median())


def _median_series(samples, path, provider):
    rows = samples[(samples["path"] == path) & (samples["provider"] == provider)]
    return rows[["us_per_call"]].median()


def _median_skeleton(samples, path, provider):
    raise NotImplementedError()


#: Exercise 07 (reading): name → ((median_us, percent_change), substring).
BENCHMARK = {
    "skeleton": ((_median_skeleton, _percent()), "not done yet"),
    "percent of the kernel": ((_median(), _percent("of the kernel")), "divided by the kernel's time, not the reference's"),
    "fraction": ((_median(), _percent("fraction")), "that is a fraction, not a percentage"),
    "reversed": ((_median(), _percent("reversed")), "the sign is reversed"),
    "ratio": ((_median(), _percent("ratio")), "the ratio kernel / reference"),
    "mean": ((_median("mean"), _percent()), "returns the mean"),
    "min": ((_median("min"), _percent()), "returns the minimum"),
    "first sample": ((_median("first"), _percent()), "returns the first sample"),
    "provider not filtered": ((_median(provider_filter=False), _percent()), "every provider's samples of that path"),
    # Issue 9: classes the checker did not look at.
    "percent as an absolute value": ((_median(), _percent("abs")), "the sign is lost (an absolute value)"),
    "percent as text": ((_median(), _percent("text")), "must return a number; got '+35.5 %'"),
    "median sorts the table in place": ((_median_in_place, _percent()), "changed the samples table it was given"),
    "median returns a Series": ((_median_series, _percent()), "must return a number; got"),
}


# --------------------------------------------------------------------------- exercise 08


def _hypothesis(kind):
    def predict(N):
        block = triton.next_power_of_2(N)
        right = 1 / math.sqrt(1 + 1e-6)
        return {
            "right": (right, 1 / math.sqrt(N / block + 1e-6)),
            "denominator": (right, math.sqrt(N / block + 1e-6)),
            "mean": (right, N / block),
            "no root": (right, block / N),
            "always 512": (right, 1 / math.sqrt(N / 512 + 1e-6)),
            "no bug": (right, right),
            "rounded down": (right, 1 / math.sqrt(N / (1 << (N.bit_length() - 1)) + 1e-6)),
            "three numbers": (right, right, 0.0),
            "swapped": (1 / math.sqrt(N / block + 1e-6), right),
        }[kind]
    return predict


def _hypothesis_raises(N):
    return 1.0, 1 / (triton.next_power_of_2(N) - 4)  # 1 / 0 for N = 3


def _hypothesis_skeleton(N):
    raise NotImplementedError()


#: Exercise 08 (hypothesis): name → (predict, substring).
HYPOTHESIS = {
    "skeleton": (_hypothesis_skeleton, "not done yet"),
    "the denominator": (_hypothesis("denominator"), "the denominator sqrt(N / BLOCK_SIZE + eps), not the output: for N = 3 you predict 0.866"),
    "the mean": (_hypothesis("mean"), "the mean used, N / BLOCK_SIZE"),
    "no square root": (_hypothesis("no root"), "the square root is missing"),
    "BLOCK_SIZE always 512": (_hypothesis("always 512"), "BLOCK_SIZE = 512 for every N"),
    "swapped": (_hypothesis("swapped"), "your two numbers are swapped"),
    # Issue 9: more wrong hypotheses, a malformed answer, code that raises.
    "no bug at all": (_hypothesis("no bug"), "the same as y_correct: no bug at all"),
    "BLOCK_SIZE rounded down": (_hypothesis("rounded down"), "BLOCK_SIZE rounded down to a power of two"),
    "three numbers": (_hypothesis("three numbers"), "must return two numbers (y_correct, y_buggy)"),
    "raises": (_hypothesis_raises, "raised ZeroDivisionError at line"),
}


# --------------------------------------------------------------------------- issue 36: what a fresh learner met
# Appended to the tables above (so the parametrised tests and the verdict fixture pick them up), here at the end
# so that the line numbers the fixture quotes for the variants above stay as they are.

FORWARD["x loaded one row too far"] = (mutate(F, ("x_ptr + row * x_row_stride + cols", "x_ptr + (row + 1) * x_row_stride + cols")), "read outside its tensors: the row offset of x's load points past the program's own row")
# The line of 08's fix (`mean_ux = ...`) written with N - 1, or with dy where u = dy * gamma belongs.
DX["mean(u·x) divided by N - 1"] = (mutate(D, ("tl.sum(u * x, axis=0) / N", "tl.sum(u * x, axis=0) / (N - 1)")), "mean(u·x) is divided by N − 1 instead of N")
DX["mean(dy·x) instead of mean(u·x)"] = (mutate(D, ("tl.sum(u * x, axis=0) / N", "tl.sum(dy * x, axis=0) / N")), "gamma is missing from the mean's u")
DGAMMA["row mask forgotten"] = (mutate(G, ("mask = (rows[:, None] < M) & col_mask[None, :]", "mask = col_mask[None, :]")), "read outside its tensors: the row mask lets the rows past M through")
DGAMMA["row mask off by one"] = (mutate(G, ("rows[:, None] < M", "rows[:, None] <= M")), "read outside its tensors: the row mask is off by one: the last step reads row M")
# The exercise's hinted shape, a (BLOCK_M, BLOCK_N) accumulator, kept in float16.
DGAMMA["summed in float16"] = (mutate(
    G, ("    total = tl.zeros((BLOCK_N,), dtype=tl.float32)\n", "    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float16)\n"),
    ("tile = tl.load(partial_ptr + offsets, mask=mask, other=0.0)", "acc += tl.load(partial_ptr + offsets, mask=mask, other=0.0).to(tl.float16)"),
    ("        step = tl.sum(tile, axis=0) - lost  # a sum over rows, not a mean\n        new_total = total + step\n"
     "        lost = (new_total - total) - step  # what rounding removed from step\n        total = new_total\n", ""),
    ("cols, total, mask", "cols, tl.sum(acc, axis=0), mask")),
    "dgamma is summed in float16: every case is right to float16's 3 digits, not to float32's: a random 1×257 partial gives dgamma[0] = 1.843, expected 1.842. The partials are float32, and so must the sum be: keep the accumulator in float32")


def _predict_without_eps(N):
    """Both numbers without eps: within float32's tolerance of the kernels, yet not the exercise's formula."""
    return 1.0, 1 / math.sqrt(N / triton.next_power_of_2(N))


HYPOTHESIS["eps left out"] = (_predict_without_eps, "your y_correct leaves out eps: for N = 257 you predict 1.0000000, but 1/sqrt(mean + eps) with eps = 1e-06 is 0.9999995")


def _predict_y_buggy_without_eps(N):
    """eps in y_correct, left out of y_buggy alone."""
    return 1 / math.sqrt(1 + 1e-6), 1 / math.sqrt(N / triton.next_power_of_2(N))


HYPOTHESIS["eps left out of y_buggy"] = (_predict_y_buggy_without_eps, "your y_buggy leaves out eps: for N = 257 you predict 1.411459, but 1/sqrt(mean + eps) with eps = 1e-06 is 1.411458 (the buggy kernel gives 1.4114")

#: Exercise 08's fix: the slips of its one line, `mean_ux = ...` (exercise 04's checker names them too).
FIX = {name: DX[name] for name in ("mean(u·x) divided by N - 1", "mean(dy·x) instead of mean(u·x)", "mean(u·x·rstd)",
                                   "mean(x·x) instead of mean(u·x)")}

# --------------------------------------------------------------------------- issue 36: slips named by their code
# Appended here too, so that the line numbers the fixture quotes for the variants above stay as they are.

# 03: y without rstd; eps added to every square inside the sum; BLOCK_SIZE without `: tl.constexpr`.
FORWARD["y without rstd"] = (mutate(F, ("y = x * rstd * gamma", "y = x * gamma")), "y lacks rstd: `y = x * gamma`")
FORWARD["eps added to every square"] = (mutate(F, ("tl.sum(x * x, axis=0) / N + eps", "tl.sum(x * x + eps, axis=0) / N")), "eps is added to every square inside the sum (`tl.sum(x * x + eps, axis=0)`)")
FORWARD["BLOCK_SIZE without tl.constexpr"] = (mutate(F, ("BLOCK_SIZE: tl.constexpr", "BLOCK_SIZE")), "declares `BLOCK_SIZE` without `: tl.constexpr`: write `BLOCK_SIZE: tl.constexpr`")
# 04 (and 08's fix, its `mean_ux` line): the mean or partial without dy; rstd loaded without the row.
DX["mean(gamma·x) without dy"] = (mutate(D, ("tl.sum(u * x, axis=0) / N", "tl.sum(gamma * x, axis=0) / N")), "mean(u·x) is computed without dy (`tl.sum(gamma * x, axis=0)`)")
DX["partial without dy"] = (mutate(D, ("dy * x * rstd, mask", "x * rstd, mask")), "partial lacks dy")
DX["rstd loaded without the row"] = (mutate(D, ("rstd = tl.load(rstd_ptr + row)", "rstd = tl.load(rstd_ptr)")), "every row uses row 0's rstd: rstd's load has no row offset (`tl.load(rstd_ptr)`)")
FIX["mean(gamma·x) without dy"] = DX["mean(gamma·x) without dy"]


# 08: the ratio upside down, 1/sqrt(BLOCK_SIZE / N + eps) (within float32's tolerance of the denominator
# sqrt(N / BLOCK_SIZE + eps), named apart by the learner's own digits); BLOCK_SIZE taken as 2N.
def _predict_ratio_upside_down(N):
    return 1 / math.sqrt(1 + 1e-6), 1 / math.sqrt(triton.next_power_of_2(N) / N + 1e-6)


def _predict_block_twice_n(N):
    return 1 / math.sqrt(1 + 1e-6), 1 / math.sqrt(N / (2 * N) + 1e-6)


HYPOTHESIS["ratio upside down"] = (_predict_ratio_upside_down, "your y_buggy is 1/sqrt(BLOCK_SIZE / N + eps): the ratio is upside down")
HYPOTHESIS["BLOCK_SIZE taken as 2N"] = (_predict_block_twice_n, "your y_buggy is computed with BLOCK_SIZE = 2N")


# 06: the tensors saved in one order and unpacked in another, or passed to backward_rows in another order (it
# refuses weight and rstd).
class _SavedInAnotherOrder(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, eps):
        y, rstd = forward_op(x, weight, eps)
        ctx.save_for_backward(x, rstd, weight)
        ctx.eps = eps
        return y

    @staticmethod
    def backward(ctx, dy):
        x, weight, rstd = ctx.saved_tensors
        dx, partial = backward_rows(x, weight, dy.contiguous(), rstd, ctx.eps)
        return dx, reduce_gamma_gradient(partial, weight.dtype), None


class _CallInAnotherOrder(_SavedInAnotherOrder):
    @staticmethod
    def forward(ctx, x, weight, eps):
        y, rstd = forward_op(x, weight, eps)
        ctx.save_for_backward(x, weight, rstd)
        ctx.eps = eps
        return y

    @staticmethod
    def backward(ctx, dy):
        x, weight, rstd = ctx.saved_tensors
        dx, partial = backward_rows(x, rstd, dy.contiguous(), weight, ctx.eps)
        return dx, reduce_gamma_gradient(partial, weight.dtype), None


AUTOGRAD["saved in one order and unpacked in another"] = (_SavedInAnotherOrder, "your backward unpacks `ctx.saved_tensors` in another order than forward saved them with `ctx.save_for_backward(...)`: `weight` holds rstd and `rstd` holds weight")
AUTOGRAD["backward_rows called with weight and rstd swapped"] = (_CallInAnotherOrder, "your call of backward_rows passes rstd where it takes weight and weight where it takes rstd, and it refuses them")


# 06, passing: backward hands backward_rows a hard-coded eps. Its kernel never reads eps (the saved rstd holds it),
# so nothing can tell, and the exercise no longer asks to keep eps on ctx.
class EpsHardCodedInBackward(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, eps):
        y, rstd = forward_op(x, weight, eps)
        ctx.save_for_backward(x, weight, rstd)
        return y

    @staticmethod
    def backward(ctx, dy):
        x, weight, rstd = ctx.saved_tensors
        dx, partial = backward_rows(x, weight, dy.contiguous(), rstd, 1e-6)
        return dx, reduce_gamma_gradient(partial, weight.dtype), None


# a36: BLOCK_M for BLOCK_N (the loop's step, the columns' start), and a loop over range(0, BLOCK_M), which the
# case launched with BLOCK_M = 64, BLOCK_N = 16 tells apart.
DGAMMA["loop steps by BLOCK_N"] = (
    mutate(G, ("range(0, M, BLOCK_M)", "range(0, M, BLOCK_N)")),
    "the loop over rows steps by BLOCK_N, the columns' block, not by BLOCK_M (`range(0, M, BLOCK_N)`)")
DGAMMA["columns from pid * BLOCK_M"] = (
    mutate(G, ("cols = pid * BLOCK_N + tl.arange(0, BLOCK_N)", "cols = pid * BLOCK_M + tl.arange(0, BLOCK_N)")),
    "the columns start at `pid * BLOCK_M`, the rows' block, not at `pid * BLOCK_N`")
DGAMMA["loop over range(0, BLOCK_M)"] = (
    mutate(G, ("range(0, M, BLOCK_M)", "range(0, BLOCK_M)")), "the loop over rows is `range(0, BLOCK_M)`")
DGAMMA["one row per step over range(0, BLOCK_M)"] = (
    mutate(G, ("range(0, M, BLOCK_M)", "range(0, BLOCK_M)"), ("rows = start + tl.arange(0, BLOCK_M)", "rows = start + tl.arange(0, 1)"),
           ("(BLOCK_M, BLOCK_N)", "(1, BLOCK_N)")),
    "only the first BLOCK_M rows are added: the rows past the first tile are never read")


# q36: 06's backward returning the (M, N) partial as weight's gradient (autograd sums it to (N,): it passed), None
# for x's gradient (the checker crashed), dgamma divided by M.
class _PartialAsDgamma(EpsHardCodedInBackward):
    @staticmethod
    def backward(ctx, dy):
        x, weight, rstd = ctx.saved_tensors
        dx, partial = backward_rows(x, weight, dy.contiguous(), rstd, 1e-6)
        dgamma = reduce_gamma_gradient(partial, weight.dtype)  # noqa: F841 - computed, then not returned
        return dx, partial, None


class _NoneForDx(EpsHardCodedInBackward):
    @staticmethod
    def backward(ctx, dy):
        x, weight, rstd = ctx.saved_tensors
        dx, partial = backward_rows(x, weight, dy.contiguous(), rstd, 1e-6)
        return None, reduce_gamma_gradient(partial, weight.dtype), None


class _DgammaOverM(EpsHardCodedInBackward):
    @staticmethod
    def backward(ctx, dy):
        x, weight, rstd = ctx.saved_tensors
        dx, partial = backward_rows(x, weight, dy.contiguous(), rstd, 1e-6)
        return dx, reduce_gamma_gradient(partial, weight.dtype) / x.shape[0], None


AUTOGRAD["partial returned as dgamma"] = (_PartialAsDgamma, "backward returns the (M, N) partial as the weight's gradient")
AUTOGRAD["None for x's gradient"] = (_NoneForDx, "backward returns None for x's gradient")
AUTOGRAD["dgamma divided by M"] = (_DgammaOverM, "weight.grad is the right gradient divided by M = 17: off by a constant factor")


# q36: the row index multiplied by a stride in int32, where the exercise asks for int64 (the numbers are right).
FORWARD["row index not cast to int64"] = (
    mutate(F, ("row = tl.program_id(0).to(tl.int64)", "row = tl.program_id(0)")),
    "multiplies the row index `row` by a stride in int32")
DGAMMA["row index not cast to int64"] = (
    mutate(G, ("rows[:, None].to(tl.int64) * partial_row_stride", "rows[:, None] * partial_row_stride")),
    "multiplies the row index `rows` by a stride in int32")


# q36: 05's accumulator made 1-D: the GPU compiler refuses it; the advice shows 05's own (BLOCK_M, BLOCK_N) shape.
DGAMMA["2-D accumulator made 1-D"] = (
    mutate(G, (ACC2D[0], ACC2D[1].replace("(BLOCK_M, BLOCK_N)", "(BLOCK_N,)")), ACC2D_BODY),
    "`tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)` for a block")


# q36: `//` on float values (Triton's TypeError "unexpected type fp32"), in 03's mean and 08's fix.
FORWARD["floor division by N"] = (
    mutate(F, ("tl.sum(x * x, axis=0) / N", "tl.sum(x * x, axis=0) // N")),
    "`//` is integer (floor) division, which Triton refuses on float values: use `/`")
FIX["floor division by N"] = (
    mutate(D, ("tl.sum(u * x, axis=0) / N", "tl.sum(u * x, axis=0) // N")),
    "`//` is integer (floor) division, which Triton refuses on float values: use `/`")


# q36: the forward's formula slips shared by 02, 03 and 09 (formula_slips.y_slips).
def _reference_ms(kind):
    def my_reference(x, g, eps=1e-6):
        dtype = torch.float64 if x.dtype == torch.float64 else torch.float32
        xf, gf = x.to(dtype), g.to(dtype)
        ms = {"sum": xf.square().sum(-1, keepdim=True), "square of the mean": xf.mean(-1, keepdim=True).square(),
              "x not squared": xf.mean(-1, keepdim=True)}.get(kind, xf.square().mean(-1, keepdim=True))
        r = {"eps multiplied": lambda: torch.rsqrt(ms * eps),
             "eps after rsqrt": lambda: torch.rsqrt(ms) + eps}.get(kind, lambda: torch.rsqrt(ms + eps))()
        return (xf * r * gf).to(x.dtype)
    return my_reference


REFERENCE["sum of squares, not their mean"] = (_reference_ms("sum"), "r uses the sum of the squares where their mean belongs")
REFERENCE["square of the mean"] = (_reference_ms("square of the mean"), "r uses the square of the mean, mean(x)²")
REFERENCE["eps multiplied"] = (_reference_ms("eps multiplied"), "eps multiplies the mean of the squares")
REFERENCE["x not squared"] = (_reference_ms("x not squared"), "r uses the mean of x, not of x²")
_MEAN_03 = "tl.sum(x * x, axis=0) / N + eps"
FORWARD["sum of squares, not their mean"] = (mutate(F, (_MEAN_03, "tl.sum(x * x, axis=0) + eps")), "rstd uses the sum of the squares where their mean belongs")
FORWARD["square of the mean"] = (mutate(F, (_MEAN_03, "(tl.sum(x, axis=0) / N) * (tl.sum(x, axis=0) / N) + eps")), "rstd uses the square of the mean, mean(x)²")
FORWARD["eps multiplied"] = (mutate(F, (_MEAN_03, "tl.sum(x * x, axis=0) / N * eps")), "eps multiplies the mean of the squares")
FORWARD["x not squared"] = (mutate(F, (_MEAN_03, "tl.sum(x, axis=0) / N + eps")), "rstd uses the mean of x, not of x²")
# q36: 04's partial stored at dx's pointer; 08's fix dividing by N + 1 (04's dx slips, shared).
DX["partial stored at dx's pointer"] = (
    mutate(D, ("tl.store(partial_ptr + offsets, dy * x * rstd, mask=mask)", "tl.store(dx_ptr + offsets, dy * x * rstd, mask=mask)")),
    "partial is stored at dx's pointer")
FIX["mean(u·x) divided by N + 1"] = (
    mutate(D, ("tl.sum(u * x, axis=0) / N", "tl.sum(u * x, axis=0) / (N + 1)")), "mean(u·x) is divided by N + 1 instead of N")
# 02: eps added after the rsqrt (formula_slips.y_slips, shared with 09; 03 names it in its own words).
REFERENCE["eps after rsqrt"] = (_reference_ms("eps after rsqrt"), "eps is added after the rsqrt, outside the root")
# r36: formula slips of dx no symptom names, taken apart into dx's terms (dx_terms, shared by 04, 08's fix and 10).
DX["u = x * gamma"] = (mutate(D, ("u = dy * gamma", "u = x * gamma")), "dx's u is x · gamma where dy · gamma belongs")
DX["first term rstd * dy"] = (mutate(D, ("dx = rstd * u -", "dx = rstd * dy -")),
                              "dx's first term is off: it is rstd · dy where rstd · u belongs (gamma is missing from u)")
DX["mean(u·dy)"] = (mutate(D, ("tl.sum(u * x, axis=0) / N", "tl.sum(u * dy, axis=0) / N")),
                    "dy stands where x belongs in the mean")
DX["x loaded from dy_ptr"] = (mutate(D, ("tl.load(x_ptr + offsets", "tl.load(dy_ptr + offsets")),
                              "x is made from dy: x is loaded from dy_ptr). partial is off as well: it holds "
                              "dy · dy · rstd where dy · x · rstd belongs")
DX["partial = dy * rstd"] = (mutate(D, ("dy * x * rstd, mask", "dy * rstd, mask")),
                             "partial is off: it holds dy · rstd where dy · x · rstd belongs (x is missing)")
FIX["mean(u·x·x)"] = (mutate(D, ("tl.sum(u * x, axis=0) / N", "tl.sum(u * x * x, axis=0) / N")),
                      "the mean's product has an extra factor x")
FIX["mean(u·dy)"] = DX["mean(u·dy)"]
DX["mean(u·x) divided by 2N"] = (mutate(D, ("tl.sum(u * x, axis=0) / N", "tl.sum(u * x, axis=0) / (2 * N)")),
                                 "the sum of mean(u · x) is divided by 2 · N where N belongs")
# r36: 05's 2-D accumulator summed without an axis, or started at ones.
DGAMMA["tl.sum(acc) without axis"] = (_acc2d(("tl.sum(acc, axis=0)", "tl.sum(acc)")),
                                      "tl.sum without axis sums the whole tile to one number")
DGAMMA["accumulator started at ones"] = (
    mutate(G, (ACC2D[0], ACC2D[1].replace("tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)",
                                          "tl.full((BLOCK_M, BLOCK_N), 1.0, dtype=tl.float32)")), ACC2D_BODY),
    "the accumulator starts at ones, not zeros")
DGAMMA["1-D total started at ones"] = (
    mutate(G, ("total = tl.zeros((BLOCK_N,), dtype=tl.float32)", "total = tl.full((BLOCK_N,), 1.0, dtype=tl.float32)")),
    "the accumulator starts at ones, not zeros: each column's sum has 1 extra")
# 03: rstd stored squared, y right (shapes: a power of the right value).
FORWARD["rstd stored squared"] = (mutate(F, ("tl.store(rstd_ptr + row, rstd)", "tl.store(rstd_ptr + row, rstd * rstd)")), "rstd holds the square of the right value")


# s36: 06's backward_rows handed a tensor in another's place: named from what it got and what forward saved.
def _saving(pick):
    """06's Function whose forward saves ``pick(x, weight, y, rstd)``; its backward unpacks (x, weight, rstd)."""
    class Saves(_SavedInAnotherOrder):
        @staticmethod
        def forward(ctx, x, weight, eps):
            y, rstd = forward_op(x, weight, eps)
            ctx.save_for_backward(*pick(x, weight, y, rstd))
            ctx.eps = eps
            return y
    return Saves


_SavesY = _saving(lambda x, weight, y, rstd: (y, weight, rstd))
_SavesYForRstd = _saving(lambda x, weight, y, rstd: (x, weight, y))


class _XAndDySwapped(_CallInAnotherOrder):
    @staticmethod
    def backward(ctx, dy):
        x, weight, rstd = ctx.saved_tensors
        dx, partial = backward_rows(dy.contiguous(), weight, x, rstd, ctx.eps)
        return dx, reduce_gamma_gradient(partial, weight.dtype), None


AUTOGRAD["forward saves y for x"] = (_SavesY, "backward_rows gets y (forward's output) where it takes x: forward saves (y, weight, rstd): x is not among them")
AUTOGRAD["forward saves y for rstd"] = (_SavesYForRstd, "backward_rows gets y (forward's output) where it takes rstd, and refuses it (rstd must have shape (M,) = (1,); got (1, 257)): forward saves (x, weight, y): rstd is not among them")
AUTOGRAD["x and dy swapped in the call"] = (_XAndDySwapped, "backward_rows gets dy where it takes x and x where it takes dy: the call passes them in another order")
# s36: gamma inside the mean of the squares, x in gamma's place (formula_slips, shared by 02, 03 and 09).
def _reference_gamma_in_mean(x, g, eps=1e-6):
    dtype = torch.float64 if x.dtype == torch.float64 else torch.float32
    xf, gf = x.to(dtype), g.to(dtype)
    return (xf * torch.rsqrt((xf * gf).square().mean(-1, keepdim=True) + eps) * gf).to(x.dtype)


REFERENCE["gamma inside the mean"] = (
    _reference_gamma_in_mean,
    "gamma is applied before normalising: r is computed from (x · gamma)²")
FORWARD["gamma inside the mean"] = (mutate(F, ("tl.sum(x * x, axis=0)", "tl.sum((x * gamma) * (x * gamma), axis=0)")),
                                    "gamma is applied before normalising: rstd is computed from (x · gamma)²")
FORWARD["x in gamma's place"] = (mutate(F, ("y = x * rstd * gamma", "y = x * rstd * x")),
                                 "y = x · rstd · x: x stands where gamma belongs")
# s36: the mean's divisor named (dx_terms); y_buggy predicted with a BLOCK_SIZE strictly greater than N.
FIX["mean(u·x) divided by row_stride"] = (
    mutate(D, ("tl.sum(u * x, axis=0) / N", "tl.sum(u * x, axis=0) / row_stride")),
    "the sum of mean(u · x) is divided by row_stride (= 300 on the case whose rows are 300 apart")


def _predict_block_above_n(N):
    return 1 / math.sqrt(1 + 1e-6), 1 / math.sqrt(N / triton.next_power_of_2(N + 1) + 1e-6)


HYPOTHESIS["BLOCK_SIZE strictly greater than N"] = (_predict_block_above_n,
                                                    "your y_buggy is computed with a BLOCK_SIZE strictly greater than N")


def _reference_without_r(x, g, eps=1e-6):
    dtype = torch.float64 if x.dtype == torch.float64 else torch.float32
    return (x.to(dtype) * g.to(dtype)).to(x.dtype)


# s36: y = x · gamma, r never applied (formula_slips, shared by 02 and 09).
REFERENCE["r never applied"] = (_reference_without_r, "y lacks r: x is scaled by gamma alone (y = x · gamma)")
# s36: dy loaded without the row's offset: every row reads row 0's dy (04's symptom, shared by 08's fix).
DX["dy loaded without the row's offset"] = (mutate(D, ("tl.load(dy_ptr + offsets", "tl.load(dy_ptr + cols")),
                                            "every row reads the first row of dy: its load address lacks the row's offset")
# s36: x loaded from y_ptr: every output of every case NaN, as the checker fills them (run_loop).
FORWARD["x loaded from y_ptr"] = (mutate(F, ("tl.load(x_ptr + row", "tl.load(y_ptr + row")),
                                  "Every output of every case is NaN, as the checker fills the outputs before the launch")
# walk 5: the mask one short of N: the last column alone unwritten, told from a fixed width by N = 33 (diagnose).
FORWARD["mask one short of N"] = (mutate(F, ("mask = cols < N", "mask = cols < N - 1")),
                                  "In every case the last column of every row is never written (column 32 of 5×33")
# walk 5: column offsets with the row's start, as in a vector add: rows 1… all masked, no row loop in 03 (shapes).
FORWARD["column offsets start at row * BLOCK_SIZE"] = (
    mutate(F, ("cols = tl.arange(0, BLOCK_SIZE)", "cols = row * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)")),
    "each row has its own program (one program per row, no loop over rows)")
# walk 5: the row loop to M - 1 runs no step for M = 1: dgamma 0 there only, said as nothing added (shapes).
DGAMMA["row loop bound M - 1"] = (mutate(G, ("range(0, M, BLOCK_M)", "range(0, M - 1, BLOCK_M)")),
                                  "every failing case has one row (M = 1): nothing was added for that row")


# w5b: 02's formula slips that got numbers only (walk 5, 02B/C/D/G): named by formula_slips.
def _reference_r(r_of):
    """02's reference with r = ``r_of(xf, eps)`` (float32, float64 kept), the rest of the formula right."""
    def my_reference(x, g, eps=1e-6):
        dtype = torch.float64 if x.dtype == torch.float64 else torch.float32
        xf, gf = x.to(dtype), g.to(dtype)
        return (xf * r_of(xf, eps) * gf).to(x.dtype)
    return my_reference


REFERENCE["eps added twice"] = (_reference_r(lambda xf, eps: torch.rsqrt(xf.square().mean(-1, keepdim=True) + eps + eps)),
                                "eps is added twice: r = 1/sqrt(mean(x²) + 2·eps)")
REFERENCE["divided by the number of rows"] = (
    _reference_r(lambda xf, eps: torch.rsqrt(xf.square().sum(-1, keepdim=True) / xf.shape[0] + eps)),
    "r divides the sum of the squares by the number of rows, x.shape[0], where the row's length N belongs")
REFERENCE["L2 norm for the RMS"] = (_reference_r(lambda xf, eps: 1 / (xf.norm(dim=-1, keepdim=True) + eps)),
                                    "r uses the L2 norm of the row, sqrt(Σ x²), where the RMS belongs")
REFERENCE["variance for the mean square"] = (_reference_r(lambda xf, eps: torch.rsqrt(xf.var(-1, keepdim=True) + eps)),
                                             "r uses the variance of the row (x − mean(x))², summed and divided by N − 1")
REFERENCE["variance over N for the mean square"] = (
    _reference_r(lambda xf, eps: torch.rsqrt(xf.var(-1, keepdim=True, unbiased=False) + eps)),
    "r uses the variance of the row, mean((x − mean(x))²), where the mean of the squares")


# w5b: 06's slips told the wrong cause (walk 5, 06B-F): each is _function's right class with one line changed.
class _RstdYUnpacked(_function()):
    @staticmethod
    def forward(ctx, x, weight, eps):
        rstd, y = forward_op(x, weight, eps)
        ctx.save_for_backward(x, weight, rstd)
        ctx.eps = eps
        return y


class _PartialDxUnpacked(_function()):
    @staticmethod
    def backward(ctx, dy):
        x, weight, rstd = ctx.saved_tensors
        partial, dx = backward_rows(x, weight, dy.contiguous(), rstd, ctx.eps)
        return dx, reduce_gamma_gradient(partial, weight.dtype), None


class _EpsNotOnCtx(_function()):
    @staticmethod
    def forward(ctx, x, weight, eps):
        y, rstd = forward_op(x, weight, eps)
        ctx.save_for_backward(x, weight, rstd)
        return y


class _NoneForDgamma(_function()):
    @staticmethod
    def backward(ctx, dy):
        x, weight, rstd = ctx.saved_tensors
        dx, partial = backward_rows(x, weight, dy.contiguous(), rstd, ctx.eps)
        return dx, None, None


class _XCastBeforeForwardOp(_function()):
    @staticmethod
    def forward(ctx, x, weight, eps):
        y, rstd = forward_op(x.float(), weight.float(), eps)
        ctx.save_for_backward(x, weight, rstd)
        ctx.eps = eps
        return y


AUTOGRAD["forward_op unpacked as rstd, y"] = (_RstdYUnpacked, "forward returns forward_op's rstd, not y: forward_op returns (y, rstd) in that order")
AUTOGRAD["backward_rows unpacked as partial, dx"] = (_PartialDxUnpacked, "x.grad is backward_rows's partial (dy · x · rstd, dgamma's rows), not dx, and weight.grad is the column sum of dx: backward_rows returns (dx, partial) in that order")
AUTOGRAD["eps not kept on ctx"] = (_EpsNotOnCtx, "backward reads `ctx.eps`, but forward never sets it (AttributeError: ctx has no attribute 'eps'): keep it on ctx in forward, `ctx.eps = eps`")
AUTOGRAD["None for dgamma, no dgamma kernel"] = (_NoneForDgamma, "weight got no gradient (None): backward returns None as its second value")
AUTOGRAD["x cast to float32 before forward_op"] = (_XCastBeforeForwardOp, "on 17×256 float16, y is float32 of shape (17, 256); x is float16 of shape (17, 256): y is forward_op's output on x cast to float32: x's dtype changed before forward_op")


class _PartialReturnedForDx(_function()):
    @staticmethod
    def backward(ctx, dy):
        x, weight, rstd = ctx.saved_tensors
        dx, partial = backward_rows(x, weight, dy.contiguous(), rstd, ctx.eps)
        return partial, reduce_gamma_gradient(partial, weight.dtype), None


AUTOGRAD["partial returned in dx's place"] = (_PartialReturnedForDx, "x.grad is backward_rows's partial (dy · x · rstd, dgamma's rows), not dx: backward returns partial where dx belongs")


# walk 6: a store without the row's offset (row 0 alone written, holding another row's values: diagnose names it
# from the outputs, whatever order the programs store in), and rstd that is inf on a row of zeros.
#: A store without its row offset, as diagnose words it: {output}, the row it holds, " (the last row)" or "", {output}.
ROW_0 = ("Only row 0 of {} is ever written, in every case of more than one row, and row 0 holds row {}'s values{}, not "
         "its own: every program stores into row 0, and the last one to store wins. The store of {} lacks the row "
         "offset: ")
_ZERO_ROW = "exactly on the rows whose x is all zeros (row 0 of 5×33 float32 with eps = 0.5 and a first row of zeros), and finite elsewhere: a row of zeros has mean(x²) = 0, and 1/sqrt(0) = inf (then 0 · inf = NaN): eps is missing where rstd is computed, or rstd is computed instead of loaded: "
FORWARD["rstd stored without the row's offset"] = (mutate(F, ("tl.store(rstd_ptr + row, rstd)", "tl.store(rstd_ptr, rstd)")), ROW_0.format("rstd", 16, " (the last row)", "rstd") + "rstd has one value per row: store it at `tl.store(rstd_ptr + row, rstd)`")
FORWARD["y and rstd stored without the row's offset"] = (mutate(F, ("y_ptr + row * y_row_stride + cols", "y_ptr + cols"), ("tl.store(rstd_ptr + row, rstd)", "tl.store(rstd_ptr, rstd)")), ROW_0.format("y", 16, " (the last row)", "y") + "store y at `y_ptr + row * y_row_stride + cols`")
FORWARD["eps added to N, not to the mean"] = (mutate(F, ("/ N + eps)", "/ (N + eps))")), ("eps is there but in the wrong place: it is added to N, the divisor (`/ (N + eps)`), not to the mean", "eps belongs inside the root, added to the mean: `rstd = tl.rsqrt(tl.sum(x * x, axis=0) / N + eps)`"))
DX["dx stored without the row's offset"] = (mutate(D, ("tl.store(dx_ptr + offsets", "tl.store(dx_ptr + cols")), ROW_0.format("dx", 16, " (the last row)", "dx") + "store dx at `dx_ptr + offsets`, with the row's offsets the loads use (`offsets = row * row_stride + cols`)")
DX["partial stored without the row's offset"] = (mutate(D, ("tl.store(partial_ptr + offsets", "tl.store(partial_ptr + cols")), ROW_0.format("partial", 16, " (the last row)", "partial") + "store partial at `partial_ptr + offsets`, like dx")
DX["rstd computed without eps, not loaded"] = (mutate(D, ("rstd = tl.load(rstd_ptr + row)", "rstd = tl.rsqrt(tl.sum(x * x, axis=0) / N)")), _ZERO_ROW + "this kernel is given rstd, which the forward computed with eps (the kernel has no eps to add): load it, `rstd = tl.load(rstd_ptr + row)`, instead of computing it again")
# --------------------------------------------------------------------------- walk 6: 16-bit rounding, shape errors
# 03, 04, 08's fix: something cast to 16 bits on a float32 case (precision: its values on the 16-bit grid, or an
# error of a 16-bit rounding's size in dx's mean); 03, 05: a store's value of another shape than its pointers.
FORWARD["y cast to float16 before the store"] = (mutate(F, ("y = x * rstd * gamma", "y = (x * rstd * gamma).to(tl.float16)")), "on a float32 case, y carries float16 rounding: every value of y is one that float16 holds exactly")
FORWARD["y cast to bfloat16 before the store"] = (mutate(F, ("y = x * rstd * gamma", "y = (x * rstd * gamma).to(tl.bfloat16)")), "on a float32 case, y carries bfloat16 rounding")
FORWARD["rstd stored as a block"] = (mutate(F, ("tl.store(rstd_ptr + row, rstd)", "tl.store(rstd_ptr + row, x * rstd)")), "this `tl.store` gets a block (`x * rstd`) with a single address, `rstd_ptr + row`")
DX["dx cast to float16 before the store"] = (mutate(D, ("tl.store(dx_ptr + offsets, dx,", "tl.store(dx_ptr + offsets, dx.to(tl.float16),")), "on a float32 case, dx carries float16 rounding: every value of dx is one that float16 holds exactly")
DX["mean(u·x) summed in float16"] = (mutate(D, ("tl.sum(u * x, axis=0) / N", "tl.sum((u * x).to(tl.float16), axis=0) / N")), "on a float32 case, mean(u · x) carries float16 rounding: something in mean_ux's line is cast to 16 bits before the sum")
FIX["mean(u·x) summed in float16"] = DX["mean(u·x) summed in float16"]
DGAMMA["2-D accumulator stored without reducing it"] = (
    mutate(G, ACC2D, (ACC2D_BODY[0], ACC2D_BODY[1].replace("    total = tl.sum(acc, axis=0)\n", "")),
           ("cols, total, mask=col_mask)", "cols, acc, mask=col_mask)")),
    "this `tl.store` writes `acc` (or uses a mask) of shape (32, 32) through the pointers `dgamma_ptr + cols`, of shape (32,): a store writes one value per pointer")

# Issue 36 (learner findings): rstd stored with x's row stride, where rstd has one value per row.
FORWARD["rstd stored with the row stride"] = (
    mutate(F, ("tl.store(rstd_ptr + row, rstd)", "tl.store(rstd_ptr + row * x_row_stride, rstd)")),
    ("wrote outside rstd: its store has the row stride (`rstd_ptr + row * x_row_stride`)",
     "row 1 onwards writes past rstd's M = ", "`tl.store(rstd_ptr + row, rstd)`"))
# Issue 36 (learner findings): gamma loaded at the row's offsets, as exercise 03 names it.
DX["gamma loaded at the row's offsets"] = (
    mutate(D, ("gamma = tl.load(gamma_ptr + cols,", "gamma = tl.load(gamma_ptr + offsets,")),
    ("read outside its tensors: gamma's load has the row's offset (`gamma_ptr + offsets`",
     "row 1 onwards reads past gamma's N elements", "load it at `gamma_ptr + cols`"))
# Issue 36 (learner findings): the tile's load without the column mask (the store's mask keeps the sum right, so
# only the address check sees it).
DGAMMA["tile loaded without the column mask"] = (
    mutate(G, ("tl.load(partial_ptr + offsets, mask=mask,", "tl.load(partial_ptr + offsets, mask=rows[:, None] < M,")),
    ("it made a load at column 2 of row 0 of partial, past its N = 2 columns",
     "`tile = tl.load(partial_ptr + offsets, mask=rows[:, None] < M, other=0.0)",
     "the tile's load needs the column mask as well as the row mask, `mask = (rows[:, None] < M) & (cols[None, :] < N)`"))
# Issue 36 (learner findings): the rows block built with BLOCK_N, which meets the (BLOCK_M, BLOCK_N) accumulator.
DGAMMA["2-D accumulator: rows made with BLOCK_N"] = (
    mutate(G, ACC2D, ACC2D_BODY, ("rows = start + tl.arange(0, BLOCK_M)", "rows = start + tl.arange(0, BLOCK_N)")),
    ("the rows block is built with BLOCK_N (`rows = start + tl.arange(0, BLOCK_N)`)",
     "Build it from BLOCK_M: `rows = start + tl.arange(0, BLOCK_M)`"))


# Issue 36 (walk 7): 02's slips told by numbers only or by the wrong cause, each the solution with one line changed.
def _reference_bf16_in_bf16(x, g, eps=1e-6):
    dtype = torch.float32 if x.dtype == torch.float16 else x.dtype  # bfloat16 stays bfloat16: against the policy
    xf, gf = x.to(dtype), g.to(dtype)
    return (xf * torch.rsqrt(xf.square().mean(-1, keepdim=True) + eps) * gf).to(x.dtype)


def _reference_cast_before_gamma(x, g, eps=1e-6):
    dtype = torch.float64 if x.dtype == torch.float64 else torch.float32
    xf, gf = x.to(dtype), g.to(dtype)
    return (xf * torch.rsqrt(xf.square().mean(-1, keepdim=True) + eps)).to(x.dtype) * gf


def _reference_gamma_as_column(x, g, eps=1e-6):
    dtype = torch.float64 if x.dtype == torch.float64 else torch.float32
    xf, gf = x.to(dtype), g.to(dtype)
    return (xf * torch.rsqrt(xf.square().mean(-1, keepdim=True) + eps) * gf.unsqueeze(-1)).to(x.dtype)


REFERENCE["bfloat16 computed in bfloat16"] = (
    _reference_bf16_in_bf16,
    ("on 17×257 bfloat16 (random)", "bfloat16 x is computed in bfloat16",
     "every dtype but float64 in float32, bfloat16 included"))
REFERENCE["mean of |x|"] = (_reference_r(lambda xf, eps: torch.rsqrt(xf.abs().mean(-1, keepdim=True) + eps)),
                            ("r uses the mean of |x| (`x.abs()`), where the mean of the squares, mean(x²), belongs",
                             "Square x, do not take its absolute value"))
REFERENCE["eps as a floor (clamp_min)"] = (
    _reference_r(lambda xf, eps: torch.rsqrt(xf.square().mean(-1, keepdim=True).clamp_min(eps))),
    ("eps is a floor under the mean of the squares (`clamp_min(eps)`", "5×33 float32 with eps = 0.5", "Add eps"))
REFERENCE["no square root"] = (_reference_r(lambda xf, eps: 1 / (xf.square().mean(-1, keepdim=True) + eps)),
                               ("the square root is missing: r = 1/(mean(x²) + eps)", "Take the square root"))
REFERENCE["cast back before the float32 gamma"] = (
    _reference_cast_before_gamma,
    ("y is cast back to x's dtype before the multiplication by gamma", "promotes the product to float32 again",
     "Multiply by gamma first, then cast once, at the end: `(xf * r * gf).to(x.dtype)`"))
REFERENCE["gamma as a column"] = (
    _reference_gamma_as_column,
    ("y has shape (2, 2), x has shape (1, 2): gamma multiplies as a column of shape (N, 1)",
     "gamma has shape (N,), one value per column", "multiplies along the last dimension"))


# Issue 36 (walk 7): 06's autograd errors told raw, each _function's right class with one line changed.
class _GradientForEps(_function()):
    @staticmethod
    def backward(ctx, dy):
        x, weight, rstd = ctx.saved_tensors
        dx, partial = backward_rows(x, weight, dy.contiguous(), rstd, ctx.eps)
        return dx, reduce_gamma_gradient(partial, weight.dtype), ctx.eps


class _EpsUndefinedInBackward(_function()):
    @staticmethod
    def backward(ctx, dy):
        x, weight, rstd = ctx.saved_tensors
        dx, partial = backward_rows(x, weight, dy.contiguous(), rstd, eps)  # noqa: F821 - the slip itself
        return dx, reduce_gamma_gradient(partial, weight.dtype), None


AUTOGRAD["eps returned as its own gradient"] = (
    _GradientForEps, ("backward returns a value other than None in place 3, the gradient of forward's eps",
                      "not differentiable", "Return None in its place: `return dx, dgamma, None`"))
AUTOGRAD["eps used in backward, not ctx.eps"] = (
    _EpsUndefinedInBackward, ("backward uses `eps`, a name of forward's", "backward only sees what forward stored on ctx",
                              "`ctx.eps = eps`", "backward reads `ctx.eps`"))


# Walk 7: 04's (and 08's fix's) row index multiplied by a stride in int32, as 03 names it.
DX["row index not cast to int64"] = (
    mutate(D, ("row = tl.program_id(0).to(tl.int64)", "row = tl.program_id(0)")),
    "multiplies the row index `row` by a stride in int32")
FIX["row index not cast to int64"] = DX["row index not cast to int64"]
# Walk 7: the row taken from axis 1 of the 1-D grid (M,): 0 in every program, so row 0 alone is written, and right.
FORWARD["row from tl.program_id(1)"] = (
    mutate(F, ("row = tl.program_id(0).to(tl.int64)", "row = tl.program_id(1).to(tl.int64)")),
    ("Only row 0 of y is ever written, in every case of more than one row, and it holds row 0's right values: every "
     "program handles row 0", "`tl.program_id(1)` (the index along a second axis) is 0 in every program: take the "
     "row from axis 0, `row = tl.program_id(0)`"))
# Walk 7: 05's row loop started at pid (10's persistent loop): program pid skips the first pid rows of its columns.
DGAMMA["row loop from pid"] = (
    mutate(G, ("for start in range(0, M, BLOCK_M):", "for start in range(pid, M, BLOCK_M):")),
    ("the loop over rows starts at `pid` (`range(pid, M, BLOCK_M)`), not at row 0: program pid skips rows 0 … pid − 1",
     "`for start in range(0, M, BLOCK_M)`"))
# Walk 7: x's row offset without its stride (`x_ptr + row + cols`): named by the read between rows it makes.
FORWARD["x's row offset without the stride"] = (
    mutate(F, ("x_ptr + row * x_row_stride + cols", "x_ptr + row + cols")),
    ("read outside its tensors: x's load adds the row index itself, not the row's offset (`x_ptr + row + cols`)",
     "load x at `x_ptr + row * x_row_stride + cols`"))
# Walk 7: a block as wide as the runtime N (Triton: "arange's arguments must be of type tl.constexpr").
FORWARD["block from tl.arange(0, N)"] = (
    mutate(F, ("cols = tl.arange(0, BLOCK_SIZE)", "cols = tl.arange(0, N)")),
    ("`tl.arange(0, N)` takes its bounds from a runtime value: a block's width must be known when the kernel is "
     "compiled, and be a power of two", "`cols = tl.arange(0, BLOCK_SIZE)`, and switch off the lanes past the row "
     "with the mask `cols < N`"))
# Walk 7: 04's mask against the row stride: the lanes between N and row_stride are stored (between dx's rows).
DX["mask against row_stride"] = (
    mutate(D, ("mask = cols < N", "mask = cols < row_stride")),
    ("it wrote outside dx: columns 257 … 299 of every row", "the mask lets the lanes from N to row_stride through",
     "`mask = cols < N`"))


# Issue 36, walk 8: a fresh learner's slips, each the solution with one line changed, each named.
def _walk8_reference(kind):
    def my_reference(x, gamma, eps=1e-6):
        dtype = torch.float64 if x.dtype == torch.float64 else torch.float32
        xf, gf = x.to(dtype), gamma.to(dtype)
        source = x if kind == "x² in x's dtype" else xf
        squares = source.square()
        ms = {"dim 1": squares.mean(1, keepdim=True), "whole tensor": squares.mean()}.get(
            kind, squares.mean(-1, keepdim=True))
        r = torch.sqrt(ms + eps) if kind == "sqrt" else torch.rsqrt(ms + eps)
        r = r.to(x.dtype) if kind == "r in x's dtype" else r
        return (xf * r * gf).to(x.dtype)
    return my_reference


REFERENCE.update({
    "walk 8: mean over dim 1": (_walk8_reference("dim 1"), "the mean is taken over dim 1, not the last dimension"),
    "walk 8: mean over the whole tensor": (_walk8_reference("whole tensor"), "the mean is taken over the whole tensor, not row by row"),
    "walk 8: sqrt for rsqrt": (_walk8_reference("sqrt"), "y is multiplied by the RMS instead of its inverse"),
    "walk 8: x² in x's dtype": (_walk8_reference("x² in x's dtype"), "x² is computed in float16, where it overflows past 65504"),
    "walk 8: r rounded to x's dtype": (_walk8_reference("r in x's dtype"), "nearly all are those of r rounded to x's dtype before it multiplies"),
})

FORWARD.update({
    "walk 8: mask cols <= N": (mutate(F, ("mask = cols < N", "mask = cols <= N")), "The mask lets exactly one lane past x's last column through (index 257, and none further): `<=` where `<` belongs"),
    "walk 8: x loaded with y's row stride": (mutate(F, ("x_ptr + row * x_row_stride + cols", "x_ptr + row * y_row_stride + cols")), "row 1's block of x starts 316 elements in, 1 × 316: y's row stride, where x's own row stride, 300, belongs: the row's offset is the row times its tensor's row stride"),
    "walk 8: mean over tl.num_programs(0)": (mutate(F, ("/ N + eps", "/ tl.num_programs(0) + eps")), "divides the sum of the squares by the number of rows, x.shape[0], where the row's length N belongs (in a kernel with one program per row, `tl.num_programs(0)` is that number of rows)"),
    "walk 8: x's address transposed": (mutate(F, ("x_ptr + row * x_row_stride + cols", "x_ptr + cols * x_row_stride + row")), "x's address is transposed: neighbouring lanes (neighbouring columns) lie 257 elements apart"),
    "walk 8: gamma added": (mutate(F, ("x * rstd * gamma", "x * rstd + gamma")), "gamma is added where it multiplies: y = x · rstd + gamma"),
})

DX.update({
    "walk 8: mask cols <= N": (mutate(D, ("mask = cols < N", "mask = cols <= N")), "wrote outside dx (past its last element, element offset 257). The mask lets exactly one lane past"),
    "walk 8: rstd loaded at the column offsets": (mutate(D, ("rstd = tl.load(rstd_ptr + row)", "rstd = tl.load(rstd_ptr + cols, mask=mask, other=0)")), "rstd holds one value per row (1 of them), but it is loaded as a block at column offsets (`rstd_ptr + cols`)"),
    "walk 8: r³ term divided by N again": (mutate(D, ("rstd * rstd * rstd * mean_ux", "rstd * rstd * rstd * mean_ux / N")), "the r³ term is divided by N twice"),
    "walk 8: dy loaded from x_ptr": (mutate(D, ("dy = tl.load(dy_ptr + offsets", "dy = tl.load(x_ptr + offsets")), "x stands where dy belongs"),
    "walk 8: u = dy + gamma": (mutate(D, ("u = dy * gamma", "u = dy + gamma")), "gamma is added to dy where it multiplies it (`u = dy + gamma`)"),
})

DGAMMA.update({
    "walk 8: column mask cols <= N": (mutate(G, ("col_mask = cols < N", "col_mask = cols <= N")), "The mask lets exactly one lane past partial's last column through (index 2, and none further)"),
    "walk 8: tile offsets transposed": (mutate(G, ("offsets = rows[:, None].to(tl.int64) * partial_row_stride + cols[None, :]", "offsets = cols[None, :].to(tl.int64) * partial_row_stride + rows[:, None]")), "The tile's offsets into partial are transposed: along the tile's columns (axis 1) the lanes lie 257 elements apart"),
    "walk 8: mask axes swapped": (mutate(G, ("mask = (rows[:, None] < M) & col_mask[None, :]", "mask = (rows[None, :] < M) & col_mask[:, None]")), "The mask's axes are swapped"),
    "walk 8: int32 accumulator": (mutate(G, ("total = tl.zeros((BLOCK_N,), dtype=tl.float32)", "total = tl.zeros((BLOCK_N,), dtype=tl.int32)")), GPU_REJECTS),
    "walk 8: start * BLOCK_M": (mutate(G, ("rows = start + tl.arange(0, BLOCK_M)", "rows = start * BLOCK_M + tl.arange(0, BLOCK_M)")), "but `start` already steps by BLOCK_M"),
})


def _walk8_hypothesis(kind):
    def predict(N):
        block = triton.next_power_of_2(N - 1 if kind == "N - 1" else N)
        mean = N // block if kind == "//" else N / block
        buggy = 1 / (mean ** 0.5 + 1e-6) if kind == "eps outside" else 1 / (mean + 1e-6) ** 0.5
        return 1 / (1 + 1e-6) ** 0.5, buggy
    return predict


HYPOTHESIS.update({
    "walk 8: eps outside the root": (_walk8_hypothesis("eps outside"), "eps is added outside the square root, 1/(sqrt(mean) + eps) = 1.154699205"),
    "walk 8: next_power_of_2(N - 1)": (_walk8_hypothesis("N - 1"), "your number is 1/sqrt(N / B + eps) with B = 2, but the kernel's BLOCK_SIZE is triton.next_power_of_2(3) = 4"),
    "walk 8: integer division": (_walk8_hypothesis("//"), "your y_buggy is computed with integer division, N // BLOCK_SIZE"),
})

FIX.update({
    "walk 8: mean(u)·mean(x)": (mutate(D, ("mean_ux = tl.sum(u * x, axis=0) / N", "mean_ux = tl.sum(u, axis=0) * tl.sum(x, axis=0) / (N * N)")), "mean_ux is mean(u) · mean(x), a product of means"),
    "walk 8: sum along axis 1": (mutate(D, ("mean_ux = tl.sum(u * x, axis=0) / N", "mean_ux = tl.sum(u * x, axis=1) / N")), "axis 1 out of bounds"),
})

"""Wrong variants of exercise 15, for tests/course/test_ex15_layernorm.py and the verdicts fixture only.

Each is the checker's reference kernel (:mod:`rmsnorm_course.teaching.layernorm`) with one classic slip,
made by :func:`wrong_variants.mutate` (exact text replacements, each asserted to occur once), so none can
drift from the reference. Each table maps a name to (kernel, a substring the feedback must contain, or a
tuple of them): every variant has its own message.

Never import this from the course package or a notebook.
"""

from __future__ import annotations

from rmsnorm_course.teaching.layernorm import layernorm_backward_kernel as B
from rmsnorm_course.teaching.layernorm import layernorm_forward_kernel as F
from wrong_variants import NO_OTHER, mutate

FIRST = "row = tl.program_id(0).to(tl.int64)\n"
ROW = (FIRST, "raise NotImplementedError()\n    " + FIRST)
PID = ("pid = tl.program_id(0)\n", "raise NotImplementedError()\n    pid = tl.program_id(0)\n")
DIFF = "    diff = tl.where(mask, x - mean, 0.0)  # a masked lane's 0 - mean is not a deviation of the row\n"
VAR = "var = tl.sum(diff * diff, axis=0) / N"
RSTD = "rstd = tl.rsqrt(var + eps)"
Y = "diff * rstd * weight + bias"
INT32 = "multiplies the row index `row` by a stride in int32"

#: The forward: name → (kernel, substring of the feedback).
FORWARD = {
    "skeleton": (mutate(F, ROW), "not done yet"),
    "naive variance": (mutate(F, (VAR, "var = tl.sum(x * x, axis=0) / N - mean * mean")),
                       ("the variance cancels: it is computed as E[x²] − E[x]²", "Every other case passes")),
    "unbiased variance": (mutate(F, (VAR, "var = tl.sum(diff * diff, axis=0) / (N - 1)")),
                          "the variance is divided by N − 1"),
    "masked lanes in the variance": (mutate(F, (DIFF, "    diff = x - mean\n")),
                                     "the masked lanes add to the variance"),
    "no mean subtracted": (mutate(F, (DIFF, "    diff = x\n")), "the mean is never subtracted"),
    "variance of x, not of the deviations": (mutate(F, (VAR, "var = tl.sum(x * x, axis=0) / N")),
                                             "the variance is mean(x²), RMSNorm's"),
    "y of x, not of the deviations": (mutate(F, (Y, "x * rstd * weight + bias")), "y normalises x, not x − mean"),
    "mean subtracted after scaling": (mutate(F, (Y, "(x * rstd - mean) * weight + bias")),
                                      "the mean is subtracted after scaling"),
    "bias left out": (mutate(F, (Y, "diff * rstd * weight")), "the bias is left out"),
    "bias before the weight": (mutate(F, (Y, "(diff * rstd + bias) * weight")), "the bias is added before the weight"),
    "eps after the square root": (mutate(F, (RSTD, "rstd = 1.0 / (tl.sqrt(var) + eps)")),
                                  "eps is added after the square root"),
    "eps missing": (mutate(F, (RSTD, "rstd = tl.rsqrt(var)")), "eps is missing"),
    "divides by BLOCK_SIZE": (mutate(F, ("mean = tl.sum(x, axis=0) / N", "mean = tl.sum(x, axis=0) / BLOCK_SIZE"),
                                     (VAR, "var = tl.sum(diff * diff, axis=0) / BLOCK_SIZE")),
                              "the mean and the variance are divided by BLOCK_SIZE instead of N"),
    "mean divided by BLOCK_SIZE": (mutate(F, ("mean = tl.sum(x, axis=0) / N", "mean = tl.sum(x, axis=0) / BLOCK_SIZE")),
                                   "the mean is divided by BLOCK_SIZE instead of N (the variance's sum"),
    "mean and rstd stored swapped": (mutate(F, ("tl.store(mean_ptr + row, mean)", "tl.store(mean_ptr + row, rstd)"),
                                            ("tl.store(rstd_ptr + row, rstd)", "tl.store(rstd_ptr + row, mean)")),
                                     "mean and rstd are stored into each other's pointers"),
    "rstd stored at mean_ptr": (mutate(F, ("tl.store(mean_ptr + row, mean)", "tl.store(mean_ptr + row, rstd)")),
                                "mean_ptr is given rstd"),
    "mean stored at rstd_ptr": (mutate(F, ("tl.store(rstd_ptr + row, rstd)", "tl.store(rstd_ptr + row, mean)")),
                                "rstd_ptr is given the mean"),
    "row index not cast to int64": (mutate(F, ("tl.program_id(0).to(tl.int64)", "tl.program_id(0)")), INT32),
    "masked load of x without other": (
        mutate(F, ("x_ptr + row * row_stride + cols, mask=mask, other=0.0)", "x_ptr + row * row_stride + cols, "
                                                                          "mask=mask)")), NO_OTHER),
}

DX = "(u - mean_u - x_hat * mean_ux) * rstd"
LOOP = "        offsets = tl.cast(row, tl.int64) * row_stride + cols\n"
STORES = ("        dbias_acc += dy\n    tl.store(dweight_partial_ptr + pid * N + cols, dweight_acc, mask=mask)  # "
          "once, after the loop\n    tl.store(dbias_partial_ptr + pid * N + cols, dbias_acc, mask=mask)\n")

#: The backward: name → (kernel, substring of the feedback).
BACKWARD = {
    "skeleton": (mutate(B, PID), "not done yet"),
    "dx without the mean term": (mutate(B, (DX, "(u - x_hat * mean_ux) * rstd")), "dx misses the mean term"),
    "dx without the x̂ term": (mutate(B, (DX, "(u - mean_u) * rstd")), "dx misses its x̂ term"),
    "dbias summed over the wrong axis": (mutate(B, ("dbias_acc += dy\n", "dbias_acc += tl.sum(dy, axis=0)\n")),
                                         "dbias is summed over the wrong axis"),
    "dweight summed over the wrong axis": (
        mutate(B, ("dweight_acc += dy * x_hat", "dweight_acc += tl.sum(dy * x_hat, axis=0)")),
        "dweight is summed over the wrong axis"),
    "partials swapped": (mutate(B, ("dweight_acc += dy * x_hat", "dweight_acc += dy"),
                                ("dbias_acc += dy\n", "dbias_acc += dy * x_hat\n")), "the two partials are swapped"),
    "x̂ without the mean": (mutate(B, ("x_hat = (x - mean) * rstd", "x_hat = x * rstd")),
                           "x̂ is x · rstd, RMSNorm's"),
    "mean term of dy": (mutate(B, ("mean_u = tl.sum(u, axis=0) / N", "mean_u = tl.sum(dy, axis=0) / N")),
                        "dx's mean term is the mean of dy"),
    "dx without its last rstd": (mutate(B, (DX, "(u - mean_u - x_hat * mean_ux)")),
                                 "dx misses its last factor rstd"),
    "dweight without rstd": (mutate(B, ("dweight_acc += dy * x_hat", "dweight_acc += dy * (x - mean)")),
                             "dweight's partial adds dy · (x − mean), without rstd"),
    "dweight of dy · x": (mutate(B, ("dweight_acc += dy * x_hat", "dweight_acc += dy * x")),
                          "dweight's partial adds dy · x, not dy · x̂"),
    "x̂ term added": (mutate(B, (DX, "(u - mean_u + x_hat * mean_ux) * rstd")),
                     "dx's x̂ term is added where it is subtracted"),
    "u without the weight": (mutate(B, ("u = dy * weight", "u = dy")), "u lacks the weight: u = dy"),
    "mean(u) divided by BLOCK_SIZE": (mutate(B, ("mean_u = tl.sum(u, axis=0) / N",
                                                 "mean_u = tl.sum(u, axis=0) / BLOCK_SIZE")),
                                      "mean(u) is divided by BLOCK_SIZE instead of N"),
    "mean(u · x) with the raw x": (mutate(B, ("tl.sum(u * x_hat, axis=0)", "tl.sum(u * x, axis=0)")),
                                   "dx's x̂ term takes the mean of u · x, the raw x"),
    "mean and rstd loaded at pid": (mutate(B, ("tl.load(mean_ptr + row)", "tl.load(mean_ptr + pid)"),
                                           ("tl.load(rstd_ptr + row)", "tl.load(rstd_ptr + pid)")),
                                    "they are loaded at `mean_ptr + pid` and `rstd_ptr + pid`"),
    "partials stored inside the loop": (mutate(B, (STORES, STORES.replace("\n    tl.store", "\n        tl.store"))),
                                        "the partials are stored inside the row loop"),
    "accumulators zeroed in the loop": (mutate(B, (LOOP, LOOP + "        dweight_acc = tl.zeros([BLOCK_SIZE], "
                                                   "dtype=tl.float32)\n        dbias_acc = tl.zeros([BLOCK_SIZE], "
                                                   "dtype=tl.float32)\n")),
                                        "the accumulators are zeroed inside the row loop"),
    "dbias scaled by rstd": (mutate(B, ("dbias_acc += dy\n", "dbias_acc += dy * rstd\n")),
                             "dbias's partial adds dy · rstd"),
    "mean alone loaded at pid": (mutate(B, ("tl.load(mean_ptr + row)", "tl.load(mean_ptr + pid)")),
                                 "the mean alone is loaded at `mean_ptr + pid`"),
    "rstd alone loaded at pid": (mutate(B, ("tl.load(rstd_ptr + row)", "tl.load(rstd_ptr + pid)")),
                                 "rstd alone is loaded at `rstd_ptr + pid`"),
    "dweight accumulator overwritten": (mutate(B, ("dweight_acc += dy * x_hat", "dweight_acc = dy * x_hat")),
                                        "dweight's accumulator is overwritten, not added to"),
    "dbias accumulator overwritten": (mutate(B, ("dbias_acc += dy\n", "dbias_acc = dy\n")),
                                      "dbias's accumulator is overwritten, not added to"),
    "dbias of u": (mutate(B, ("dbias_acc += dy\n", "dbias_acc += u\n")), "dbias's partial adds u = dy · weight"),
    "dweight of dy alone": (mutate(B, ("dweight_acc += dy * x_hat", "dweight_acc += dy")),
                            "dweight's partial adds dy alone"),
    "dweight of u · x̂": (mutate(B, ("dweight_acc += dy * x_hat", "dweight_acc += u * x_hat")),
                         "dweight's partial adds u · x̂"),
    # two slips, no symptom: diagnose's words for NaN rows of the programs without rows (cases.GRIDS' 2×33)
    "partials stored inside the loop, P = 4 written as a number": (
        mutate(B, (STORES, STORES.replace("\n    tl.store", "\n        tl.store")),
               ("P = tl.num_programs(0)", "P = 4")),
        ("the partial rows of the programs that get no rows",
         "store both partials once, after the loop")),
    "row index not cast to int64": (mutate(B, ("tl.cast(row, tl.int64) * row_stride", "row * row_stride")), INT32),
}

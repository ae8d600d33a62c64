"""Wrong variants of exercise 14, for tests/course/test_ex14_fused_add.py and the verdicts fixture only.

Each is the checker's reference kernel (:mod:`rmsnorm_course.teaching.fused_add`) with one classic slip,
made by :func:`wrong_variants.mutate` (exact text replacements, each asserted to occur once), so none can
drift from the reference. Each table maps a name to (kernel, a substring the feedback must contain):
every variant has its own message.

Never import this from the course package or a notebook.
"""

from __future__ import annotations

from rmsnorm_course.teaching.fused_add import fused_add_backward_kernel as B
from rmsnorm_course.teaching.fused_add import fused_add_forward_kernel as F
from wrong_variants import NO_OTHER, mutate

FIRST = "row = tl.program_id(0).to(tl.int64)\n"
ROW = (FIRST, "raise NotImplementedError()\n    " + FIRST)
STORE_H = "    tl.store(residual_out_ptr + offsets, h, mask=mask)\n"
RSTD = "rstd = tl.rsqrt(tl.sum(h * h, axis=0) / N + eps)"
NORM_Y = "tl.store(y_ptr + offsets, h * rstd * weight, mask=mask)"
INT32 = "multiplies the row index `row` by a stride in int32"
WEIGHT_OFFSET = "the weight's load has the row's offset"

#: The forward: name → (kernel, substring of the feedback).
FORWARD = {
    "skeleton": (mutate(F, ROW), "not done yet"),
    "residual_out never written": (mutate(F, (STORE_H, "")), "residual_out is never written"),
    "residual added after the norm": (
        mutate(F, ("tl.sum(h * h", "tl.sum(x * x"), ("h * rstd * weight,", "x * rstd * weight + residual,")),
        "the residual is added after normalising"),
    "the norm of x": (mutate(F, ("tl.sum(h * h", "tl.sum(x * x"), ("h * rstd * weight,", "x * rstd * weight,")),
                      "the norm reads x, not h = x + residual"),
    "rstd from x": (mutate(F, ("tl.sum(h * h", "tl.sum(x * x")), "rstd is computed from x, not from h"),
    "x read again for y": (
        mutate(F, (NORM_Y, "x = tl.load(x_ptr + offsets, mask=mask, other=0.0).to(tl.float32)\n    "
                           "tl.store(y_ptr + offsets, x * rstd * weight, mask=mask)")),
        "y multiplies x, not h, by rstd"),
    "weight without OFFSET": (mutate(F, (".to(tl.float32) + OFFSET\n", ".to(tl.float32)\n")),
                              "the weight is used as it is where the case asks for weight + OFFSET"),
    "y and residual_out swapped": (
        mutate(F, (STORE_H, "    tl.store(y_ptr + offsets, h, mask=mask)\n"),
               (NORM_Y, "tl.store(residual_out_ptr + offsets, h * rstd * weight, mask=mask)")),
        "y and residual_out are swapped"),
    "residual_out holds the residual": (
        mutate(F, (STORE_H, "    tl.store(residual_out_ptr + offsets, residual, mask=mask)\n")),
        "residual_out holds the residual as it came in"),
    "residual_out holds x": (
        mutate(F, (STORE_H, "    tl.store(residual_out_ptr + offsets, x, mask=mask)\n")),
        "residual_out holds x, the sublayer's output alone"),
    "h written into the residual (in place)": (
        mutate(F, (STORE_H, "    tl.store(residual_ptr + offsets, h, mask=mask)\n")),
        "it wrote into residual, an input"),
    "h rounded to x's dtype": (mutate(F, ("residual_out_ptr.dtype.element_ty)", "x_ptr.dtype.element_ty)")),
                               "h is rounded to x's dtype (float16) where the residual stream is float32"),
    "divides by BLOCK_SIZE": (mutate(F, ("/ N + eps", "/ BLOCK_SIZE + eps")),
                              "the mean of h² is divided by BLOCK_SIZE instead of N"),
    "masked load of the residual without other": (
        mutate(F, ("residual_ptr + offsets, mask=mask, other=0.0)", "residual_ptr + offsets, mask=mask)")), NO_OTHER),
    "row index not cast to int64": (mutate(F, ("tl.program_id(0).to(tl.int64)", "tl.program_id(0)")), INT32),
    "weight loaded with the row offset": (mutate(F, ("tl.load(weight_ptr + cols", "tl.load(weight_ptr + offsets")),
                                          WEIGHT_OFFSET),
    "eps after the square root": (mutate(F, (RSTD, "rstd = 1.0 / (tl.sqrt(tl.sum(h * h, axis=0) / N) + eps)")),
                                  "eps is added after the square root"),
    "rstd stored at the row's offset": (
        mutate(F, ("tl.store(rstd_ptr + row, rstd)", "tl.store(rstd_ptr + row * row_stride, rstd)")),
        "its store has the row stride (`rstd_ptr + row * row_stride`)"),
    "h rounded to float16 in every case": (
        mutate(F, ("h = (x + residual).to(residual_out_ptr.dtype.element_ty)", "h = (x + residual).to(tl.float16)")),
        "h is rounded to float16 in every case"),
    "the norm of the unrounded sum": (
        mutate(F, ("h = (x + residual).to(residual_out_ptr.dtype.element_ty)", "h = x + residual"),
               ("    h = h.to(tl.float32)  # the norm reads the h the caller gets back\n", "")),
        ("the norm reads the unrounded float32 sum x + residual, not the h stored in residual_out",
         "rstd off by up to", "y holds the unrounded sum's rounding")),
    "y of the unrounded sum": (
        mutate(F, (NORM_Y, "tl.store(y_ptr + offsets, (x + residual) * rstd * weight, mask=mask)")),
        "the norm reads the unrounded float32 sum x + residual, not the h stored in residual_out: y holds"),
    "the squares rounded to float16": (
        mutate(F, ("    h = h.to(tl.float32)  # the norm reads the h the caller gets back\n", ""),
               ("tl.sum(h * h, axis=0)", "tl.sum((h * h).to(tl.float32), axis=0)")),
        "rstd is off by more than float32 arithmetic on the stored h gives"),
    "the rounded h not converted back": (
        mutate(F, ("    h = h.to(tl.float32)  # the norm reads the h the caller gets back\n", "")),
        ("the norm is off where h is rounded to 16 bits", "convert the rounded h back")),
    "OFFSET added to the product": (
        mutate(F, (".to(tl.float32) + OFFSET\n", ".to(tl.float32)\n"),
               ("h * rstd * weight,", "h * rstd * weight + OFFSET,")),
        "OFFSET is added to the product, y = h · rstd · weight + OFFSET"),
    "eps missing": (mutate(F, (RSTD, "rstd = tl.rsqrt(tl.sum(h * h, axis=0) / N)")), "eps is missing"),
    "the RMS for rstd": (mutate(F, (RSTD, "rstd = tl.sqrt(tl.sum(h * h, axis=0) / N + eps)")),
                         "y is multiplied by the RMS"),
}

DH = "    dh = (u - h_hat * mean_uh) * rstd + dres"

#: The backward: name → (kernel, substring of the feedback).
BACKWARD = {
    "skeleton": (mutate(B, ROW), "not done yet"),
    "d_residual_out left out": (mutate(B, (DH, "    dh = (u - h_hat * mean_uh) * rstd")),
                                "dh misses d_residual_out"),
    "d_residual_out added twice": (mutate(B, (DH, DH + " + dres")), "d_residual_out is added twice"),
    "d_residual_out inside the bracket": (mutate(B, (DH, "    dh = (u - h_hat * mean_uh + dres) * rstd")),
                                          "d_residual_out is added inside the bracket"),
    "d_residual_out added to dy": (
        mutate(B, ("    u = dy * weight\n", "    u = (dy + dres) * weight\n"),
               (DH, "    dh = (u - h_hat * mean_uh) * rstd")),
        "d_residual_out is added to dy, before the weight"),
    "d_residual_out alone": (mutate(B, (DH, "    dh = dres")), "dh is d_residual_out alone"),
    "weight without OFFSET": (mutate(B, (".to(tl.float32) + OFFSET\n", ".to(tl.float32)\n")),
                              "the weight is used as it is where the case asks for weight + OFFSET"),
    "divides by BLOCK_SIZE": (mutate(B, ("axis=0) / N", "axis=0) / BLOCK_SIZE")),
                              "mean(u · ĥ) is divided by BLOCK_SIZE instead of N"),
    "row index not cast to int64": (mutate(B, ("tl.program_id(0).to(tl.int64)", "tl.program_id(0)")), INT32),
    "weight loaded with the row offset": (mutate(B, ("tl.load(weight_ptr + cols", "tl.load(weight_ptr + offsets")),
                                          WEIGHT_OFFSET),
    "mean of u · h, not u · h_hat": (mutate(B, ("tl.sum(u * h_hat, axis=0)", "tl.sum(u * h, axis=0)")),
                                     "misses one rstd on its second term"),
    "dh without its last rstd": (mutate(B, (DH, "    dh = (u - h_hat * mean_uh) + dres")),
                                 "dh's first term misses its last factor rstd"),
    "mean of dy · h_hat, without the weight": (mutate(B, ("tl.sum(u * h_hat, axis=0)", "tl.sum(dy * h_hat, axis=0)")),
                                               "the mean is taken of dy · ĥ where u · ĥ belongs"),
    "weight folded into h_hat": (mutate(B, ("    h_hat = h * rstd\n", "    h_hat = h * rstd * weight\n")),
                                 "(weight + OFFSET) is folded into ĥ"),
    "d_residual_out loaded from dy": (mutate(B, ("dres = tl.load(dres_ptr", "dres = tl.load(dy_ptr")),
                                      "d_residual_out is loaded from dy_ptr"),
    "the bracket the wrong way round": (mutate(B, (DH, "    dh = (h_hat * mean_uh - u) * rstd + dres")),
                                        "the norm's backward has the wrong sign"),
    "h_hat without rstd": (mutate(B, ("    h_hat = h * rstd\n", "    h_hat = h\n")), "ĥ is h, without rstd"),
    "rstd recomputed from h without eps": (
        mutate(B, ("rstd = tl.load(rstd_ptr + row)", "rstd = 1.0 / tl.sqrt(tl.sum(h * h, axis=0) / N)")),
        "rstd is computed again from h"),
}

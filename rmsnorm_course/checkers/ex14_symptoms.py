"""The wrong fused adds of exercise 14, modelled in float64: what each classic slip makes of the outputs.

:data:`FORWARD` and :data:`BACKWARD` (for :func:`rmsnorm_course.checkers.diagnose.diagnose`) serve
:mod:`rmsnorm_course.checkers.ex14_fused_add`. Each model is the oracle with one slip: the norm read
from x instead of h, the add after the norm, residual_out never written or holding the wrong tensor,
h rounded to x's dtype on a float32 stream, the weight without its OFFSET or OFFSET added to the product;
in the backward, the gradient of residual_out left out, added twice, inside the bracket or to dy, or
loaded from dy_ptr.

Source: solutions/14_fusing_the_residual.ipynb.
"""

from __future__ import annotations

import re

import torch
import triton

from .diagnose import Run, Symptom
from .dx_terms import explainer
from .formula_slips import RSTD_RULES, eps_slips
from .spec import PROBE


def stream(case, dtype: torch.dtype | None = None) -> torch.Tensor:
    """h = x + residual in float64, as residual_out holds it: the sum rounded once to ``dtype`` (residual's)."""
    x, residual = case.inputs["x"], case.inputs["residual"]
    rounded = (x.float() + residual.float()).to(dtype or residual.dtype)
    return rounded.to("cpu", torch.float64)


def forward(case, *, rstd_of: str = "h", y_of: str = "h", offset: float | None = None, add_after: bool = False,
            h: torch.Tensor | None = None, divide_by: int | None = None, rule: str = "right",
            offset_after: bool = False) -> dict[str, torch.Tensor]:
    """y, residual_out and rstd of a variant: rstd from ``rstd_of`` and y from ``y_of`` ("h" or "x"), the weight
    plus ``offset`` (the case's when None), or ``offset_after`` the product (``h * rstd * weight + OFFSET``), the
    residual added to y after the norm, h given (rounded otherwise), rstd by one of
    :data:`~.formula_slips.RSTD_RULES`."""
    h = stream(case) if h is None else h
    rows = {"h": h, "x": case.f64("x")}
    rstd = RSTD_RULES[rule](rows[rstd_of].square().sum(-1, keepdim=True) / (divide_by or case.N), case.eps)
    offset = case.offset if offset is None else offset
    h_hat = rows[y_of] * rstd
    y = h_hat * case.f64("weight") + offset if offset_after else h_hat * (case.f64("weight") + offset)
    if add_after:
        y = y + case.f64("residual")
    return {"y": y, "residual_out": h, "rstd": rstd.reshape(-1)}


def _weight_at_row_offset(right: torch.Tensor, scaled: torch.Tensor) -> torch.Tensor:
    """``right`` with rows ≥ 1 replaced by ``scaled``'s: what a weight loaded at `weight_ptr + row * row_stride + cols`
    gives when the memory past the weight holds :data:`~.spec.PROBE` (row 0 reads the weight itself)."""
    out = right.clone()
    out[1:] = scaled[1:]
    return out


def _forward_weight_outside(case) -> dict[str, torch.Tensor]:
    right = forward(case)
    h_hat = right["residual_out"] * right["rstd"].unsqueeze(-1)
    return {"y": _weight_at_row_offset(right["y"], h_hat * (PROBE + case.offset))}


def _backward_weight_outside(case) -> dict[str, torch.Tensor]:
    h, dy, d_res, rstd = case.f64("h"), case.f64("dy"), case.f64("dres"), case.f64("rstd").unsqueeze(-1)
    u, h_hat = dy * (PROBE + case.offset), h * rstd
    dh = (u - h_hat * (u * h_hat).mean(-1, keepdim=True)) * rstd + d_res
    return {"dh": _weight_at_row_offset(backward(case)["dh"], dh)}


#: The weight loaded with the row's offset, for :attr:`~.spec.ExerciseSpec.outside` (forward, backward).
WEIGHT_ROW_OFFSET = tuple(Symptom(
    "the weight's load has the row's offset (`weight_ptr + row * row_stride + cols`): row 1 onwards reads past the "
    "weight's N elements", model,
    "The weight has one row, shared by every row: load it at `weight_ptr + cols`, with the column mask alone.")
    for model in (_forward_weight_outside, _backward_weight_outside))


def correct_forward(case) -> dict[str, torch.Tensor]:
    """The float64 oracle: residual_out = x + residual (rounded as torch rounds it), y = norm(residual_out)."""
    return forward(case)


def _swapped(case) -> dict[str, torch.Tensor]:
    right = forward(case)
    return {"y": right["residual_out"], "residual_out": right["y"]}


FORWARD = [
    Symptom("residual_out is never written: it is still the NaN the checker filled it with, and the next layer "
            "adds its sublayer's output to that stream",
            lambda c: {"residual_out": torch.full((c.M, c.N), float("nan"), dtype=torch.float64)},
            "Store h where the caller reads it: `tl.store(residual_out_ptr + offsets, h, mask=mask)`; the norm's "
            "output y is one result, the updated stream h = x + residual the other."),
    Symptom("the residual is added after normalising: y = norm(x) · weight + residual, where the norm must read "
            "h = x + residual (rstd comes out as x's, not h's)",
            lambda c: forward(c, rstd_of="x", y_of="x", add_after=True),
            "Add first, then normalise the sum: `h = x + residual`, rstd from h's sum of squares, "
            "`y = h * rstd * weight`."),
    Symptom("the norm reads x, not h = x + residual: y and rstd are those of x alone (residual_out is right, but "
            "nothing normalises it)", lambda c: forward(c, rstd_of="x", y_of="x"),
            "Normalise the sum you stored: the sum of squares and y both use h, not the x you loaded."),
    Symptom("rstd is computed from x, not from h = x + residual (the sum of squares reads x; y multiplies h by it)",
            lambda c: forward(c, rstd_of="x"),
            "rstd = 1/sqrt(mean(h²) + eps): sum `h * h`, not `x * x`."),
    Symptom("y multiplies x, not h, by rstd (rstd is h's, right): the norm's output lacks the residual",
            lambda c: forward(c, y_of="x"), "y = h · rstd · (weight + OFFSET): multiply h, the sum, not x."),
    Symptom("the weight is used as it is where the case asks for weight + OFFSET (Gemma's 1 + weight): every case "
            "with OFFSET = 0.0 passes, every case with OFFSET = 1.0 does not", lambda c: forward(c, offset=0.0),
            "Add the constexpr to the loaded weight: `weight = tl.load(weight_ptr + cols, mask=mask, "
            "other=0.0).to(tl.float32) + OFFSET`."),
    Symptom("OFFSET is added to the product, y = h · rstd · weight + OFFSET, where it belongs to the weight, "
            "y = h · rstd · (weight + OFFSET): multiplication binds first, so every case with OFFSET = 0.0 passes and "
            "every case with OFFSET = 1.0 does not", lambda c: forward(c, offset_after=True),
            "Bracket the sum, `h * rstd * (weight + OFFSET)`, or add OFFSET where the weight is loaded: "
            "`weight = tl.load(weight_ptr + cols, mask=mask, other=0.0).to(tl.float32) + OFFSET`, then "
            "`h * rstd * weight`."),
    Symptom("y and residual_out are swapped: y holds h = x + residual, residual_out holds the norm's output",
            _swapped, "Store the norm at `y_ptr + offsets` and h at `residual_out_ptr + offsets`."),
    Symptom("residual_out holds the residual as it came in, not x + residual: the stream never gets the sublayer's "
            "output", lambda c: {"residual_out": c.f64("residual")},
            "Store the sum: `tl.store(residual_out_ptr + offsets, h, mask=mask)` with `h = x + residual`."),
    Symptom("residual_out holds x, the sublayer's output alone, not x + residual",
            lambda c: {"residual_out": c.f64("x")},
            "Store the sum: `tl.store(residual_out_ptr + offsets, h, mask=mask)` with `h = x + residual`."),
    Symptom("h is rounded to x's dtype (float16) where the residual stream is float32: residual_out loses the bits "
            "that stream is kept in float32 for",
            lambda c: forward(c, h=stream(c, c.inputs["x"].dtype)),
            "Round h to residual_out's dtype, `h.to(residual_out_ptr.dtype.element_ty)`, not to x's: with a float32 "
            "stream that is float32, and the norm reads that h too."),
    *eps_slips(lambda c, rule: forward(c, rule=rule), "mean(h²)", "the mean", "a row of h = 0",
               "tl.rsqrt(tl.sum(h * h, axis=0) / N + eps)", "the RMS",
               "rstd = 1/sqrt(mean(h²) + eps), `tl.rsqrt(...)`; then y = h · rstd · (weight + OFFSET)."),
    Symptom("h is rounded to float16 in every case (a `.to(tl.float16)` on it): residual_out and y of the float32 "
            "cases carry float16 rounding", lambda c: forward(c, h=stream(c, torch.float16)),
            "Round h to residual_out's dtype, `h.to(residual_out_ptr.dtype.element_ty)` (float32 in the float32 "
            "cases), or keep it float32 and let the store round it."),
    Symptom("the mean of h² is divided by BLOCK_SIZE instead of N",
            lambda c: forward(c, divide_by=triton.next_power_of_2(c.N)),
            "The masked lanes add zeros, but the row has N values: divide the sum by N."),
]


def backward(case, *, dres: float = 1.0, inside: bool = False, into_dy: bool = False, offset: float | None = None,
             divide_by: int | None = None, norm: float = 1.0, rstd_on: str = "both",
             mean_of: str = "u", dres_from: str = "dres", scaled: bool = True,
             recomputed: bool = False) -> dict[str, torch.Tensor]:
    """dh of a variant: ``dres`` times d_residual_out added (0: left out, 2: twice), ``inside`` the bracket that rstd
    multiplies, or ``into_dy`` (added to dy before the weight); the weight plus ``offset``; ``norm`` times the norm's
    term (0: left out, −1: its sign flipped); ``rstd_on``: the last factor rstd on "both" terms of the bracket, on
    "u" alone, or on "none"; ``mean_of``: "u" (mean(u · ĥ)) or "dy" (mean(dy · ĥ), the weight left out);
    ``dres_from``: the input d_residual_out is read from ("dy": loaded from dy_ptr); ``scaled``: ĥ = h · rstd (False:
    ĥ = h, its rstd lost, in the mean and the term); ``recomputed``: rstd from h's own sum of squares without eps,
    1/sqrt(mean(h²)), where the forward's saved rstd belongs."""
    h, dy, d_res = case.f64("h"), case.f64("dy"), case.f64(dres_from)
    rstd = (h.square().mean(-1, keepdim=True).rsqrt() if recomputed else case.f64("rstd").unsqueeze(-1))
    u = (dy + d_res if into_dy else dy) * (case.f64("weight") + (case.offset if offset is None else offset))
    h_hat = h * rstd if scaled else h
    mean = ({"u": u, "dy": dy}[mean_of] * h_hat).sum(-1, keepdim=True) / (divide_by or case.N)
    bracket = u - h_hat * mean
    if inside:
        return {"dh": (bracket + d_res) * rstd}
    term = {"both": bracket * rstd, "u": u * rstd - h_hat * mean, "none": bracket}[rstd_on]
    return {"dh": norm * term + (0.0 if into_dy else dres * d_res)}


def correct_backward(case) -> dict[str, torch.Tensor]:
    """The float64 oracle: dh = rstd · (u − ĥ · mean(u · ĥ)) + d_residual_out, u = dy · (weight + OFFSET)."""
    return backward(case)


BACKWARD = [
    Symptom("dh misses d_residual_out: it is the norm's backward alone, but h also went out as residual_out, and "
            "the loss reached it that way too", lambda c: backward(c, dres=0.0),
            "h has two uses, so its gradient has two terms: add the gradient that goes around the norm, "
            "`dh = (u - h_hat * mean_uh) * rstd + dres`."),
    Symptom("d_residual_out is added twice: h = x + residual hands one and the same dh to x and to residual, it "
            "does not count the gradient once for each", lambda c: backward(c, dres=2.0),
            "Add dres once: `dh = (u - h_hat * mean_uh) * rstd + dres`; dx and d_residual are both that dh."),
    Symptom("d_residual_out is added inside the bracket that rstd multiplies: it is scaled by rstd, but it goes "
            "around the norm", lambda c: backward(c, inside=True),
            "Add it after the norm's backward: `dh = (u - h_hat * mean_uh) * rstd + dres`."),
    Symptom("d_residual_out is added to dy, before the weight: it then goes through the norm's backward, which it "
            "never passed through", lambda c: backward(c, into_dy=True),
            "u = dy · weight stays the norm's; add dres to the result: `dh = (u - h_hat * mean_uh) * rstd + dres`."),
    Symptom("d_residual_out is loaded from dy_ptr (a copy of the line above it): dh adds dy where d_residual_out "
            "belongs, so the gradient that goes around the norm is the norm's own dy",
            lambda c: backward(c, dres_from="dy"),
            "Load d_residual_out from its own pointer: `dres = tl.load(dres_ptr + offsets, mask=mask, "
            "other=0.0).to(tl.float32)`."),
    Symptom("dh is d_residual_out alone: the norm's backward is left out", lambda c: backward(c, norm=0.0),
            "dh = rstd · (u − ĥ · mean(u · ĥ)) + dres, with u = dy · (weight + OFFSET) and ĥ = h · rstd."),
    Symptom("the norm's backward has the wrong sign: its bracket is written ĥ · mean(u · ĥ) − u, where it is "
            "u − ĥ · mean(u · ĥ)", lambda c: backward(c, norm=-1.0),
            "dh = rstd · (u − ĥ · mean(u · ĥ)) + dres: u first, `(u - h_hat * mean_uh) * rstd + dres`."),
    Symptom("the weight is used as it is where the case asks for weight + OFFSET (Gemma's 1 + weight): every case "
            "with OFFSET = 0.0 passes, every case with OFFSET = 1.0 does not", lambda c: backward(c, offset=0.0),
            "The forward scaled by weight + OFFSET, so u = dy · (weight + OFFSET): add OFFSET to the loaded weight."),
    Symptom("dh's first term misses its last factor rstd: the norm's backward is rstd · (u − ĥ · mean(u · ĥ))",
            lambda c: backward(c, rstd_on="none"),
            "Multiply the bracket by rstd once more: `dh = (u - h_hat * mean_uh) * rstd + dres`."),
    Symptom("the norm's backward misses one rstd on its second term: either the mean is taken of u · h where u · ĥ "
            "belongs (`tl.sum(u * h, axis=0)`: ĥ = h · rstd), or rstd multiplies u only (`rstd * u - h_hat * mean_uh`)",
            lambda c: backward(c, rstd_on="u"),
            "The mean is over u · ĥ: `mean_uh = tl.sum(u * h_hat, axis=0) / N`; and rstd multiplies both terms of "
            "the bracket: `(u - h_hat * mean_uh) * rstd`."),
    Symptom("the mean is taken of dy · ĥ where u · ĥ belongs: the weight (+ OFFSET) is left out of the mean, "
            "u = dy · (weight + OFFSET)", lambda c: backward(c, mean_of="dy"),
            "Take the mean of u · ĥ, with the same u as the first term: `mean_uh = tl.sum(u * h_hat, axis=0) / N`."),
    Symptom("ĥ is h, without rstd (`h_hat = h` where `h_hat = h * rstd` belongs): the mean is taken of u · h and "
            "the second term multiplies h, so that term lacks rstd twice", lambda c: backward(c, scaled=False),
            "Normalise h first: `h_hat = h * rstd`, then `mean_uh = tl.sum(u * h_hat, axis=0) / N`."),
    Symptom("rstd is computed again from h, 1/sqrt(mean(h²)), where the forward's saved rstd belongs: the "
            "forward's eps is not in it (the kernel is not given eps), and the case whose rstd was saved with "
            "eps = 0.5 shows it", lambda c: backward(c, recomputed=True),
            "Load the forward's rstd, `rstd = tl.load(rstd_ptr + row)`: it holds eps, and it saves a reduction."),
    Symptom("mean(u · ĥ) is divided by BLOCK_SIZE instead of N",
            lambda c: backward(c, divide_by=triton.next_power_of_2(c.N)),
            "The masked lanes add zeros, but the row has N values: divide the sum by N."),
]


def _norm_parts(case):
    """h, weight + OFFSET, dy and rstd (M, 1), float64: the inputs of the norm's term of dh (:mod:`~.dx_terms`)."""
    return case.f64("h"), case.f64("weight") + case.offset, case.f64("dy"), case.f64("rstd").unsqueeze(-1)


_NORM_TERM = explainer(_norm_parts, "x̂")
#: lesson 04's words for dx's terms, said of dh's norm term in this exercise's names.
_RENAMED = (("dx's", "its"), ("x̂", "ĥ"), ("gamma", "(weight + OFFSET)"), ("mean_ux", "mean_uh"),
            ("x is loaded from dy_ptr", "h is loaded from dy_ptr"), ("x stands where dy belongs", "h stands where dy "
            "belongs"), ("extra factor x", "extra factor h"), ("x · (weight + OFFSET)", "h · (weight + OFFSET)"))


def norm_term(runs, name: str) -> str | None:
    """The spec's ``terms`` hook: dh − dres (the norm's term) taken apart as lesson 04's dx, or None.

    Only where dres is added right (dh − dres is then the norm's backward alone, which dx_terms knows).
    """
    if name != "dh":
        return None
    shifted = []
    for run in runs:
        actual = run.actual.get("dh")
        if not isinstance(actual, torch.Tensor):
            return None
        dres = run.case.f64("dres")
        shifted.append(Run(run.case, {"dx": (actual.detach().to("cpu", torch.float64) - dres).to(actual.dtype)},
                           {"dx": run.expected["dh"] - dres}))
    said = _NORM_TERM(shifted, "dx")
    if said is None:
        return None
    for old, new in _RENAMED:
        said = said.replace(old, new)
    said = re.sub(r"\bdx\b", "the norm's term", said)
    return f"dh − dres, the norm's backward, is off (dres itself is added right): {said}"

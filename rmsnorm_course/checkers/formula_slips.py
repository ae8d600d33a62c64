"""Slips of RMSNorm's formula shared by the exercises that compute the same quantity, modelled in float64.

:func:`y_slips` makes, for one exercise's model of its outputs from rstd, the
Symptoms of the forward's formula (02's reference, 03's kernel, 09's loop):
sqrt for rsqrt, gamma missing, the sum of the squares for their mean, the
square of the mean, eps multiplied, eps added after the rsqrt, x not squared, gamma inside the mean of the
squares, x loaded in gamma's place, rstd never applied to y, eps added twice, the sum of the squares divided by
the number of rows, the L2 norm for the RMS,
gamma added where it multiplies, the variance (unbiased or not) for the mean of the squares, the mean
of |x| for the mean of x², eps as a floor (``clamp_min(eps)``) where it is added, the square root missing. Each
exercise picks those it does not already name and gives its own code for the fix. The dx slips are
shared the same way from 04's model (:func:`rmsnorm_course.checkers.ex04_dx.dx_model`). :func:`eps_slips`
makes the four places eps goes wrong (:data:`RSTD_RULES`) for the kernels that compute rstd of another
quantity, 14's mean(h²) and 15's variance, each in its own words.

Source: solutions/02_reference.ipynb, 03_forward_kernel.ipynb, 09_the_long_row.ipynb,
14_fusing_the_residual.ipynb, 15_layernorm.ipynb.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from .diagnose import Case, Symptom

#: case, rstd of shape (M, 1) in float64, whether gamma is applied → the exercise's float64 outputs.
Outputs = Callable[..., dict[str, torch.Tensor]]

ALL = ("sqrt", "gamma", "sum", "square of the mean", "eps multiplied", "eps after rsqrt", "x not squared",
       "gamma in the mean", "x for gamma", "rstd not applied", "eps twice", "rows for N", "L2 norm", "variance",
       "variance over N", "abs", "eps as a floor", "no root", "gamma added")


#: rstd from the quantity under the root (mean(h²), or LayerNorm's variance) and eps: the right rule, and the classic
#: slips of where eps goes (lesson 03's).
RSTD_RULES = {
    "right": lambda ms, eps: torch.rsqrt(ms + eps),
    "eps after the root": lambda ms, eps: 1 / (ms.sqrt() + eps),
    "no eps": lambda ms, eps: torch.rsqrt(ms),
    "eps after rsqrt": lambda ms, eps: torch.rsqrt(ms) + eps,
    "the RMS": lambda ms, eps: torch.sqrt(ms + eps),
}


def gamma_of(case: Case, gamma) -> torch.Tensor | float:
    """The factor an exercise's model multiplies by: gamma (True), none (False), or the float64 tensor given."""
    if isinstance(gamma, torch.Tensor):
        return gamma
    return case.f64("gamma") if gamma else 1.0


def _ms(case: Case) -> torch.Tensor:
    return case.f64("x").square().mean(-1, keepdim=True)


def _rows(case: Case) -> int:
    """The number of rows as the learner's code reads it, ``x.shape[0]`` (2 for a (2, 3, 8) x)."""
    return case.inputs["x"].shape[0]


def _variance(case: Case, correction: int) -> torch.Tensor:
    return case.f64("x").var(-1, keepdim=True, correction=correction)


def y_slips(outputs: Outputs, rstd_code: str, y_code: str, which: tuple[str, ...] = ALL,
            rstd: str = "rstd") -> list[Symptom]:
    """The forward's formula slips in ``which`` (names of :data:`ALL`), in that order.

    Args:
        outputs: (case, rstd, gamma=True) → the exercise's float64 outputs; ``gamma`` as :func:`gamma_of` reads it.
        rstd_code: the exercise's line for rstd, in backquotes (the fix of the rstd slips).
        y_code: the exercise's line for y, in backquotes (the fix of gamma's slip).
        rstd: the exercise's name for 1/sqrt(mean(x²) + eps) (02 calls it r).
    """
    slips = {
        "sqrt": Symptom(
            f"{rstd} is computed with sqrt where rsqrt belongs: y is multiplied by the RMS, sqrt(mean(x²) + eps), "
            "instead of its inverse",
            lambda c: outputs(c, torch.sqrt(_ms(c) + c.eps)),
            f"{rstd} = 1/sqrt(mean(x²) + eps): {rstd_code}."),
        "gamma": Symptom(
            f"gamma is not applied (y = x · {rstd})",
            lambda c: outputs(c, torch.rsqrt(_ms(c) + c.eps), gamma=False),
            f"y = x · {rstd} · gamma: {y_code}."),
        "sum": Symptom(
            f"{rstd} uses the sum of the squares where their mean belongs (Σ x², not divided by N)",
            lambda c: outputs(c, torch.rsqrt(_ms(c) * c.N + c.eps)),
            f"Divide the sum of the squares by N: {rstd_code}."),
        "square of the mean": Symptom(
            f"{rstd} uses the square of the mean, mean(x)², where the mean of the squares, mean(x²), belongs",
            lambda c: outputs(c, torch.rsqrt(c.f64("x").mean(-1, keepdim=True).square() + c.eps)),
            f"Square each element, then take the mean: {rstd_code}."),
        "eps multiplied": Symptom(
            "eps multiplies the mean of the squares (rsqrt(mean(x²) · eps)) where it is added to it",
            lambda c: outputs(c, torch.rsqrt(_ms(c) * c.eps)),
            f"Add eps: {rstd_code}."),
        "eps after rsqrt": Symptom(
            f"eps is added after the rsqrt, outside the root ({rstd} = rsqrt(mean(x²)) + eps: a row of zeros gives "
            "rsqrt(0) = inf, and y = 0 · inf = NaN)",
            lambda c: outputs(c, torch.rsqrt(_ms(c)) + c.eps),
            f"eps belongs inside the root, added to the mean before the rsqrt: {rstd_code}."),
        "x not squared": Symptom(
            f"{rstd} uses the mean of x, not of x² (x is not squared: a row whose mean is negative gives NaN)",
            lambda c: outputs(c, torch.rsqrt(c.f64("x").mean(-1, keepdim=True) + c.eps)),
            f"Square x before the sum: {rstd_code}."),
        "gamma in the mean": Symptom(
            f"gamma is applied before normalising: {rstd} is computed from (x · gamma)², where it is the mean of x² "
            "alone",
            lambda c: outputs(c, torch.rsqrt((c.f64("x") * c.f64("gamma")).square().mean(-1, keepdim=True) + c.eps)),
            f"Normalise x first, then scale by gamma: {rstd_code}, then {y_code}."),
        "x for gamma": Symptom(
            f"y = x · {rstd} · x: x stands where gamma belongs (gamma read from x's address, or x in gamma's place "
            "in y's line)",
            lambda c: outputs(c, torch.rsqrt(_ms(c) + c.eps), gamma=c.f64("x")),
            f"gamma has one value per column, its own: {y_code}."),
        "rstd not applied": Symptom(
            f"y lacks {rstd}: x is scaled by gamma alone (y = x · gamma), {rstd} never multiplies it",
            lambda c: {"y": outputs(c, torch.ones_like(_ms(c)))["y"]},
            f"y = x · {rstd} · gamma: {y_code}."),
        "eps twice": Symptom(
            f"eps is added twice: {rstd} = 1/sqrt(mean(x²) + 2·eps), where eps counts once",
            lambda c: outputs(c, torch.rsqrt(_ms(c) + 2 * c.eps)),
            f"Add eps once: {rstd_code}."),
        # Only x.shape[0] tells this from the sum ("sum"): with one row the two agree, so it needs a case of M > 1.
        "rows for N": Symptom(
            f"{rstd} divides the sum of the squares by the number of rows, x.shape[0], where the row's length N "
            "belongs (in a kernel with one program per row, `tl.num_programs(0)` is that number of rows)",
            lambda c: outputs(c, torch.rsqrt(_ms(c) * c.N / _rows(c) + c.eps)),
            f"The mean is over the row's N columns (x.shape[-1]): {rstd_code}."),
        # torch.linalg.norm / x.norm(dim=-1): the root of the sum, with eps usually added outside it.
        "L2 norm": Symptom(
            f"{rstd} uses the L2 norm of the row, sqrt(Σ x²), where the RMS belongs, sqrt(mean(x²) + eps): the sum "
            "is not divided by N (and eps is added outside the root)",
            lambda c: outputs(c, 1 / (torch.sqrt(_ms(c) * c.N) + c.eps)),
            f"The RMS divides the sum of the squares by N, and eps goes inside the root: {rstd_code}."),
        # torch.var's default divides by N - 1; var(..., unbiased=False) by N: both are LayerNorm's statistic.
        "variance": Symptom(
            f"{rstd} uses the variance of the row (x − mean(x))², summed and divided by N − 1 (`var`'s default), "
            "where the mean of the squares, mean(x²), belongs: RMSNorm does not subtract the mean",
            lambda c: outputs(c, torch.rsqrt(_variance(c, 1) + c.eps)),
            f"Square x itself, then take the mean over N: {rstd_code}."),
        "variance over N": Symptom(
            f"{rstd} uses the variance of the row, mean((x − mean(x))²), where the mean of the squares, mean(x²), "
            "belongs: RMSNorm does not subtract the mean",
            lambda c: outputs(c, torch.rsqrt(_variance(c, 0) + c.eps)),
            f"Square x itself, then take the mean: {rstd_code}."),
        "abs": Symptom(
            f"{rstd} uses the mean of |x| (`x.abs()`), where the mean of the squares, mean(x²), belongs",
            lambda c: outputs(c, torch.rsqrt(c.f64("x").abs().mean(-1, keepdim=True) + c.eps)),
            f"Square x, do not take its absolute value: {rstd_code}."),
        # clamp_min(eps) / max(mean(x²), eps): right wherever mean(x²) is far above eps; eps = 0.5 shows it.
        "eps as a floor": Symptom(
            f"eps is a floor under the mean of the squares (`clamp_min(eps)`, max(mean(x²), eps)), where it is added "
            f"to it: {rstd} is off on every row whose mean(x²) is near or below eps",
            lambda c: outputs(c, torch.rsqrt(_ms(c).clamp_min(c.eps))),
            f"Add eps, whatever the mean: {rstd_code}."),
        "no root": Symptom(
            f"the square root is missing: {rstd} = 1/(mean(x²) + eps), where 1/sqrt(mean(x²) + eps) belongs",
            lambda c: outputs(c, 1 / (_ms(c) + c.eps)),
            f"Take the square root (or use rsqrt): {rstd_code}."),
        "gamma added": Symptom(
            f"gamma is added where it multiplies: y = x · {rstd} + gamma (a row of ones gives 1 + 1 = 2)",
            lambda c: _plus_gamma(outputs, c),
            f"y = x · {rstd} · gamma: {y_code}."),
    }
    return [slips[name] for name in which]


def _plus_gamma(outputs: Outputs, case: Case) -> dict[str, torch.Tensor]:
    """The exercise's outputs with y = x · rstd + gamma (rstd right)."""
    right = outputs(case, torch.rsqrt(_ms(case) + case.eps), gamma=False)
    return {**right, "y": right["y"] + case.f64("gamma")}


def eps_slips(outputs: Callable[[Case, str], dict[str, torch.Tensor]], ms: str, the_ms: str, zero_row: str,
              rstd_code: str, root: str, root_fix: str) -> list[Symptom]:
    """The slips of :data:`RSTD_RULES` but the right one: eps after the root, missing, after `tl.rsqrt`; the root.

    Args:
        outputs: (case, rule) → the exercise's float64 outputs with rstd by that rule of :data:`RSTD_RULES`.
        ms: the quantity under the root, as a formula ("mean(h²)", "var"); ``the_ms`` as words ("the mean").
        zero_row: the case's row where that quantity is 0 ("a row of h = 0").
        rstd_code: the exercise's expression for rstd, without backquotes.
        root: what sqrt(ms + eps) is called ("the RMS"); ``root_fix`` the fix of that slip.
    """
    return [
        Symptom(f"eps is added after the square root: rstd = 1/(sqrt({ms}) + eps)",
                lambda c: outputs(c, "eps after the root"),
                f"eps goes inside the root, added to {the_ms}: `rstd = {rstd_code}`."),
        Symptom(f"eps is missing: rstd = 1/sqrt({ms}), so {zero_row} gives 1/0 = inf, and y = 0 · inf = NaN",
                lambda c: outputs(c, "no eps"), f"Add eps to {the_ms}, inside the root: `rstd = {rstd_code}`."),
        Symptom(f"eps is added after `tl.rsqrt`, outside the root: {zero_row} gives rsqrt(0) = inf",
                lambda c: outputs(c, "eps after rsqrt"),
                f"eps goes inside the root, before `tl.rsqrt`: `rstd = {rstd_code}`."),
        Symptom(f"y is multiplied by {root}, sqrt({ms} + eps), instead of its inverse",
                lambda c: outputs(c, "the RMS"), root_fix),
    ]

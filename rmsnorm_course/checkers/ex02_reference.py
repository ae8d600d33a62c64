"""Checker of exercise 02: the learner's PyTorch reference ``my_reference(x, gamma, eps=1e-6)``.

Cases (CPU, cheap): the article's row [3, 4]; 17×257; a square 4×4 (where a
missing ``keepdim=True`` broadcasts silently instead of failing); a 3-D input;
eps = 0.5 with a row of zeros; float16, and float16 values of scale 300 (standard deviation)
(x² overflows float16); bfloat16 (computed in float32 too); float64 (must stay float64).

Mistakes recognised: no keepdim (shape error, or wrong numbers when M = N);
the mean over rows, over dim 1 (3-D x) or over the whole tensor; LayerNorm's mean subtraction;
gamma, eps, or the inverse missing; eps after the root; computing in float16
(overflow); bfloat16 computed in bfloat16, or r rounded to it before it multiplies; the output not cast
back to x's dtype, or cast back before the
multiplication by a float32 gamma; gamma broadcast as a column (N, 1); float64 computed in float32; and the
formula slips shared
with 03 and 09 (:mod:`rmsnorm_course.checkers.formula_slips`): the sum of the squares for their mean, the square
of the mean, eps multiplied, eps after the rsqrt, x not squared, eps added twice, the number of rows for N, the
L2 norm for the RMS, the variance for the mean of the squares, the mean of |x|, eps as a floor (``clamp_min``),
the square root missing.

Source: solutions/02_reference.ipynb.
"""

from __future__ import annotations

import torch

from rmsnorm.reference import rmsnorm_reference
from rmsnorm.testing import TOLERANCES, make_inputs
from .diagnose import FLOAT64_TOLERANCE, Case, Symptom, close
from .feedback import Feedback, name_of
from .formula_slips import gamma_of, y_slips
from .functions import calling, check
from .spec import FunctionSpec, Refused

EXERCISE = "02 · PyTorch reference"


def reference_cases() -> list[Case]:
    """The cases of the reference checker, on the CPU."""

    def case(label, M, N, dtype=torch.float32, seed=0, scale=1.0, eps=1e-6, zero_row=False, shape=None):
        x, gamma, _ = make_inputs(M, N, dtype, device="cpu", seed=seed)
        x = x * scale
        if zero_row:
            x[0] = 0
        return Case(label, {"x": x.reshape(shape or (M, N)), "gamma": gamma}, eps)

    return [
        Case("the article's row x = [3, 4], gamma = [1, 1]", {"x": torch.tensor([[3.0, 4.0]]), "gamma": torch.ones(2)}),
        case("17×257 float32 (random)", 17, 257, seed=1),
        case("4×4 float32 (M = N)", 4, 4, seed=2),
        case("2×3×8 float32 (3-D: normalise the last dimension)", 6, 8, seed=3, shape=(2, 3, 8)),
        case("5×33 float32 with eps = 0.5 and a first row of zeros", 5, 33, seed=4, eps=0.5, zero_row=True),
        case("17×257 float16 (random)", 17, 257, torch.float16, seed=5),
        case("3×64 float16 with values of scale 300 (x² often past 65504)", 3, 64, torch.float16, seed=6, scale=300.0),
        case("17×257 bfloat16 (random)", 17, 257, torch.bfloat16, seed=8),
        case("17×257 float64 (random)", 17, 257, torch.float64, seed=7),
    ]


def _y(case: Case, *, rstd=None, gamma=True, centre=False) -> dict[str, torch.Tensor]:
    x = case.f64("x")
    if centre:
        x = x - x.mean(-1, keepdim=True)
    if rstd is None:
        rstd = torch.rsqrt(x.square().mean(-1, keepdim=True) + case.eps)
    return {"y": x * rstd * gamma_of(case, gamma)}


def _in_dtype(case: Case) -> dict[str, torch.Tensor]:
    x, gamma = case.inputs["x"], case.inputs["gamma"]
    return {"y": x * torch.rsqrt(x.square().mean(-1, keepdim=True) + case.eps) * gamma}


def _ms(case: Case, dim=-1) -> torch.Tensor:
    return case.f64("x").square().mean(dim, keepdim=True)


def _no_keepdim(case: Case) -> dict[str, torch.Tensor]:
    x = case.f64("x")
    r = torch.rsqrt(x.square().mean(-1) + case.eps)  # (...,): broadcasts against the columns
    try:
        return {"y": x * r * case.f64("gamma")}
    except RuntimeError:  # shapes that cannot broadcast: that code would have raised, see check_reference
        return {}


SYMPTOMS = [
    Symptom("the mean of squares is taken without keepdim=True, so r broadcasts along the wrong axis",
            _no_keepdim,
            "With M = N no shape error warns you: use `.mean(-1, keepdim=True)`, one r per row as an (M, 1) column."),
    Symptom("the mean is taken over the rows (dim 0), not over the last dimension",
            lambda c: _y(c, rstd=torch.rsqrt(_ms(c, 0) + c.eps)),
            "Each row is normalised on its own: `.mean(-1, keepdim=True)`."),
    Symptom("the mean is taken over dim 1, not the last dimension: for 2-D x the two agree, for the 3-D x they "
            "do not (`.mean(1, …)`)", lambda c: _y(c, rstd=torch.rsqrt(_ms(c, 1) + c.eps)),
            "Each row is the last dimension, whatever x's rank: `.mean(-1, keepdim=True)`."),
    Symptom("the mean is taken over the whole tensor, not row by row",
            lambda c: _y(c, rstd=torch.rsqrt(c.f64("x").square().mean() + c.eps)),
            "Each row has its own r: `.mean(-1, keepdim=True)`."),
    Symptom("the row's mean is subtracted (that is LayerNorm)", lambda c: _y(c, centre=True),
            "RMSNorm does not centre x: r = 1/sqrt(mean(x²) + eps), y = x · r · gamma."),
    Symptom("gamma is not applied", lambda c: _y(c, gamma=False), "y = x · r · gamma."),
    Symptom("eps is missing", lambda c: _y(c, rstd=torch.rsqrt(_ms(c))),
            "Add eps to mean(x²) before the square root (a row of zeros then gives 0, not NaN)."),
    Symptom("the eps argument is ignored (1e-6 is used whatever eps is passed)",
            lambda c: _y(c, rstd=torch.rsqrt(_ms(c) + 1e-6)),
            "Use the `eps` parameter: r = 1/sqrt(mean(x²) + eps)."),
    Symptom("eps is added after the square root", lambda c: _y(c, rstd=1 / (torch.sqrt(_ms(c)) + c.eps)),
            "r = 1/sqrt(mean(x²) + eps): eps goes inside, `torch.rsqrt(... + eps)`."),
    Symptom("y is multiplied by the RMS instead of its inverse", lambda c: _y(c, rstd=torch.sqrt(_ms(c) + c.eps)),
            "r = 1/sqrt(mean(x²) + eps): `torch.rsqrt`."),
    Symptom("x² is computed in float16, where it overflows past 65504", _in_dtype,
            "Dtype policy: compute in float32 (float64 stays float64), `x.to(dtype)`, "
            "then cast y back with `.to(x.dtype)`."),
    # The forward's formula slips, shared with 03 and 09 (sqrt for rsqrt and gamma missing are named above).
    *y_slips(lambda c, r, gamma=True: _y(c, rstd=r, gamma=gamma),
             "`r = torch.rsqrt(x.square().mean(-1, keepdim=True) + eps)`", "`y = x * r * gamma`",
             ("sum", "square of the mean", "eps multiplied", "eps after rsqrt", "x not squared", "gamma in the mean",
              "x for gamma", "rstd not applied", "eps twice", "rows for N", "L2 norm", "variance", "variance over N",
              "abs", "eps as a floor", "no root", "gamma added"),
             rstd="r"),
]


def _run(reference, case: Case) -> dict[str, torch.Tensor]:
    """The learner's y on one case, refused when it is not a tensor of x's shape and dtype or an input changed."""
    name = name_of(reference)
    x, gamma = case.inputs["x"].clone(), case.inputs["gamma"].clone()
    y = calling(name, reference, x, gamma, case.eps)
    if not isinstance(y, torch.Tensor):
        raise Refused(f"{name} returned a {type(y).__name__}, not a tensor.")
    for given, original, what in ((x, case.inputs["x"], "x"), (gamma, case.inputs["gamma"], "gamma")):
        if not torch.equal(given, original):
            raise Refused(f"on {case.label}, {name} changed its input {what}: an in-place operation "
                          "(`*=`, `mul_`, …) on a tensor that is the caller's (`x.to(torch.float32)` returns x "
                          "itself when x is already float32). Use out-of-place operations: `xf = xf * r`.")
    if tuple(y.shape) != tuple(case.inputs["x"].shape):
        if (column := _gamma_as_column(y, case)) is not None:
            raise Refused(column)
        raise Refused(f"on {case.label}, y has shape {tuple(y.shape)}, x has shape "
                      f"{tuple(case.inputs['x'].shape)}: y has x's shape "
                      "(normalise the last dimension, keep the others).")
    if y.dtype != case.dtype:
        if _cast_before_gamma(y, case):
            raise Refused(f"on {case.label}, y is {y.dtype} but x is {case.dtype}: y is cast back to x's dtype "
                          "before the multiplication by gamma, and gamma, in float32, promotes the product to "
                          f"float32 again ({str(case.dtype).removeprefix('torch.')} · float32 gives float32). "
                          "Multiply by gamma first, then cast once, at the end: `(xf * r * gf).to(x.dtype)`.")
        raise Refused(f"on {case.label}, y is {y.dtype} but x is {case.dtype}: compute in float32 "
                      "(float64 stays float64), then cast back with `.to(x.dtype)`.")
    return {"y": y}


def _gamma_as_column(y, case: Case) -> str | None:
    """Words for y of another shape than x's that is x · r times gamma as a column (N, 1), broadcast against the
    rows (`gamma.unsqueeze(-1)`, `gamma[:, None]`); None when y is not that."""
    x = case.f64("x")
    try:
        model = x * torch.rsqrt(_ms(case) + case.eps) * case.f64("gamma").unsqueeze(-1)
    except RuntimeError:  # that code would have raised: not what y shows
        return None
    if not close(y, model, TOLERANCES.get(y.dtype, FLOAT64_TOLERANCE)):
        return None
    return (f"on {case.label}, y has shape {tuple(y.shape)}, x has shape {tuple(x.shape)}: gamma multiplies as a "
            "column of shape (N, 1) (`gamma.unsqueeze(-1)`, `gamma[:, None]` or a reshape), so it broadcasts "
            "against x's rows and makes y N rows tall. gamma has shape (N,), one value per column: as it is, it "
            "multiplies along the last dimension, `(xf * r * gf)` with `gf = gamma.to(dtype)`.")


def _cast_before_gamma(y, case: Case) -> bool:
    """Is float32 y the right x · r rounded to x's dtype, then multiplied by gamma in float32?

    Then y / gamma lies on x's dtype's grid (a product of two 16-bit numbers is exact in float32), which a y
    computed in float32 and never cast does not.
    """
    if y.dtype != torch.float32 or case.dtype not in (torch.float16, torch.bfloat16):
        return False
    gamma = case.f64("gamma")
    normalised = (y.detach().to("cpu", torch.float64) / gamma)[..., gamma != 0]
    on_grid = torch.equal(normalised.to(case.dtype).to(torch.float64), normalised)
    oracle = rmsnorm_reference(case.f64("x"), gamma, case.eps)
    return on_grid and close(y, oracle, TOLERANCES[case.dtype])


def _explain(error: BaseException, case: Case) -> str | None:
    if isinstance(error, RuntimeError) and "must match the size of tensor" in str(error):
        return (f"on {case.label}, broadcasting failed ({str(error).splitlines()[0]}): the mean "
                "of squares lost its last dimension. Use `.mean(-1, keepdim=True)`: one r per row, "
                "shape (M, 1), multiplies all N columns of its row.")
    return None


def _float64_in_float32(runs) -> str | None:
    """The last case is float64: right only if computed in float64."""
    *others, last = runs
    others_pass = all(close(r.actual["y"], r.expected["y"], TOLERANCES.get(r.case.dtype, {})) for r in others)
    if others_pass and not close(last.actual["y"], last.expected["y"], {"atol": 1e-12, "rtol": 1e-10}) \
            and close(last.actual["y"], last.expected["y"], TOLERANCES[torch.float32]):
        return ("every float32 and float16 case passes, but float64 x is computed in float32 "
                "(the result is off by about 1e-7): the policy keeps float64 in float64.")
    return None


#: Share of a bfloat16 y's values that differ from the float64 oracle rounded to bfloat16, past which y was
#: computed in bfloat16: computed in float32 (the policy), none or a few in ten thousand differ (a rounding's
#: tie); computed in bfloat16, a third or more (17×257: 43 %), though every one stays within bfloat16's tolerance.
BFLOAT16_ROUNDED_SHARE = 0.05


def _bfloat16_in_bfloat16(runs) -> str | None:
    """A bfloat16 case within tolerance, but far more of its values off the rounded oracle than float32 leaves."""
    for run in runs:
        if run.case.dtype != torch.bfloat16 or run.actual["y"].dtype != torch.bfloat16:
            continue
        others_pass = all(close(r.actual["y"], r.expected["y"], TOLERANCES.get(r.case.dtype, {}))
                          for r in runs if r is not run)
        share = (run.actual["y"].cpu() != run.expected["y"].to(torch.bfloat16)).double().mean().item()
        if others_pass and share > BFLOAT16_ROUNDED_SHARE and _r_rounded(run) < BFLOAT16_ROUNDED_SHARE:
            return (f"every float32, float16 and float64 case passes, but on {run.case.label}, {share:.0%} of y's "
                    "values differ from the exact result rounded to bfloat16, and nearly all are those of r rounded "
                    "to x's dtype before it multiplies (`r = torch.rsqrt(…).to(x.dtype)`, then x · r · gamma in "
                    "float32): the computation itself is in float32, as the policy asks, but r loses its digits "
                    "first. Keep r in float32 and cast once, at the end: `(xf * r * gf).to(x.dtype)`.")
        if others_pass and share > BFLOAT16_ROUNDED_SHARE:
            return (f"every float32, float16 and float64 case passes, but on {run.case.label}, {share:.0%} of y's "
                    "values differ from the exact result rounded to bfloat16 (computed in float32, fewer than one "
                    "in a thousand do): bfloat16 x is computed in bfloat16. The policy computes every dtype but "
                    "float64 in float32, bfloat16 included: `dtype = torch.float64 if x.dtype == torch.float64 "
                    "else torch.float32`, then cast y back with `.to(x.dtype)`.")
    return None


def _r_rounded(run) -> float:
    """Share of y's values that differ from y computed in float32 with r rounded to x's dtype before it multiplies."""
    x = run.case.inputs["x"].cpu().float()
    r = torch.rsqrt(x.square().mean(-1, keepdim=True) + run.case.eps).to(run.case.dtype).float()
    model = (x * r * run.case.inputs["gamma"].cpu().float()).to(run.case.dtype)
    return (run.actual["y"].cpu() != model).double().mean().item()


def _success(runs) -> str:
    article = runs[0].actual["y"].reshape(-1).tolist()
    return (f"y matches the float64 oracle on {len(runs)} cases (2-D and 3-D; M = N; float16, bfloat16, float32, "
            "float64; "
            f"values of scale 300 in float16); the article's row [3, 4] gives [{article[0]:.6f}, {article[1]:.6f}].")


#: Exercise 02, declared: judged by :func:`rmsnorm_course.checkers.functions.check`.
SPEC = FunctionSpec(
    exercise=EXERCISE,
    reference=rmsnorm_reference,
    cases=lambda reference: reference_cases(),
    run=_run,
    oracle=lambda case: {"y": rmsnorm_reference(case.f64("x"), case.f64("gamma"), case.eps)},
    symptoms=tuple(SYMPTOMS),
    success=_success,
    example="my_reference(torch.randn(2, 8), torch.ones(8), 1e-6)",
    explain=_explain,
    name_the_case=True,
    first_looks=(_float64_in_float32, _bfloat16_in_bfloat16),
)


def check_reference(reference) -> Feedback:
    """Run a learner's PyTorch reference on the checker's cases and say what is wrong, in plain words.

    Args:
        reference: a function ``(x, gamma, eps=1e-6) -> y`` over the last
            dimension of x, with the course's dtype policy (float64 stays
            float64, anything else is computed in float32; y has x's dtype).

    Returns:
        Feedback: "passed", "not done yet" or "wrong". Never raises, never
        hangs (it runs in a separate process with a time limit).

    Source: solutions/02_reference.ipynb.
    """
    return check(SPEC, reference)

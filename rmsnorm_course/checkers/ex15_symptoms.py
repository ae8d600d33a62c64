"""The wrong LayerNorms of exercise 15, modelled in float64: what each classic slip makes of the outputs.

:data:`FORWARD` and :data:`BACKWARD` (for :func:`rmsnorm_course.checkers.diagnose.diagnose`) serve
:mod:`rmsnorm_course.checkers.ex15_layernorm`. Each model is the oracle with one slip: the variance
divided by N − 1 (``torch.var``'s default), the masked lanes' 0 − mean left in the variance, the mean
never subtracted (RMSNorm), the bias left out or added before the weight, eps misplaced, the mean alone divided
by BLOCK_SIZE, mean and rstd stored into each other's pointers; in the backward, dx without its mean term mean(u)
or its x̂ term, or with the x̂ term added, u without the weight, mean(u) over BLOCK_SIZE, mean(u · x) of the raw x,
x̂ without the mean subtracted, mean and rstd loaded at the program's first row, the bias's (or the weight's)
column sum taken over the row's columns instead of over the rows, the two partials swapped, dbias scaled by
rstd, the accumulators zeroed in the loop (or one overwritten, ``=`` for ``+=``), the mean or rstd alone loaded at
the program's first row, dweight's partial of u · x̂ or of dy alone, dbias's of u, the partials stored only inside the
loop; in the forward, one
statistic stored at both pointers. The naive
variance, E[x²] − E[x]², is right in float64 and wrong only in float32's rounding: no float64 model
captures it, :func:`~rmsnorm_course.checkers.ex15_layernorm` looks for it first.

Source: solutions/15_layernorm.ipynb.
"""

from __future__ import annotations

import torch
import triton

from .diagnose import Symptom
from .ex10_symptoms import by_program
from .formula_slips import RSTD_RULES, eps_slips


def forward(case, *, center: bool = True, center_y: bool = True, masked_lanes: bool = False,
            var_divisor: int | None = None, mean_divisor: int | None = None, rule: str = "right",
            bias: str = "after", scaled_first: bool = False, swapped: bool = False,
            stored: str = "own") -> dict[str, torch.Tensor]:
    """y, mean and rstd of a variant, in float64.

    Args:
        center: the variance is of x − mean (False: of x, mean(x²), RMSNorm's).
        center_y: y normalises x − mean (False: x).
        masked_lanes: the BLOCK_SIZE − N masked lanes add (0 − mean)² each to the sum of squares.
        var_divisor, mean_divisor: what the sums are divided by (None: N).
        rule: where eps goes, one of :data:`~.formula_slips.RSTD_RULES`.
        bias: "after" the weight (x̂ · weight + bias), "before" it ((x̂ + bias) · weight) or "none".
        scaled_first: y's x̂ is x · rstd − mean, the mean subtracted after scaling, unscaled.
        swapped: mean is stored at rstd_ptr and rstd at mean_ptr (y is right).
        stored: "own" (each statistic at its pointer), "rstd twice" (mean_ptr given rstd too) or "mean twice"
            (rstd_ptr given the mean too): one store with the other's value.
    """
    x, weight, b = case.f64("x"), case.f64("weight"), case.f64("bias")
    N, block = case.N, triton.next_power_of_2(case.N)
    mean = x.sum(-1, keepdim=True) / (mean_divisor or N)
    diff = x - mean
    squares = (diff if center else x).square().sum(-1, keepdim=True)
    if masked_lanes:
        squares = squares + (block - N) * mean.square()
    rstd = RSTD_RULES[rule](squares / (var_divisor or N), case.eps)
    x_hat = x * rstd - mean if scaled_first else (diff if center_y else x) * rstd
    y = {"after": x_hat * weight + b, "before": (x_hat + b) * weight, "none": x_hat * weight}[bias]
    mean, rstd = (rstd, mean) if swapped else (mean, rstd)
    mean, rstd = {"own": (mean, rstd), "rstd twice": (rstd, rstd), "mean twice": (mean, mean)}[stored]
    return {"y": y, "mean": mean.reshape(-1), "rstd": rstd.reshape(-1)}


def correct_forward(case) -> dict[str, torch.Tensor]:
    """The float64 oracle: mean, var = mean((x − mean)²) (biased), rstd = 1/sqrt(var + eps), y = x̂ · weight + bias."""
    return forward(case)


FORWARD = [
    Symptom("the variance is divided by N − 1 (the unbiased, sample variance, `torch.var`'s default), where "
            "LayerNorm's divides by N (the biased variance of the row's own N values, as `torch.nn.LayerNorm`)",
            lambda c: forward(c, var_divisor=c.N - 1),
            "Divide the sum of squared deviations by N: `var = tl.sum(diff * diff, axis=0) / N`."),
    Symptom("the masked lanes add to the variance: past column N − 1, x is the `other=0.0` of the load, so x − mean "
            "there is −mean, and each of the BLOCK_SIZE − N masked lanes adds mean² to the sum of squares",
            lambda c: forward(c, masked_lanes=True),
            "Zero the deviation outside the row before squaring: `diff = tl.where(mask, x - mean, 0.0)`."),
    Symptom("the mean is never subtracted: rstd is 1/sqrt(mean(x²) + eps) and y = x · rstd · weight + bias, which is "
            "RMSNorm with a bias, not LayerNorm", lambda c: forward(c, center=False, center_y=False),
            "Subtract the row's mean first, `diff = tl.where(mask, x - mean, 0.0)`, and use diff for both the "
            "variance and y."),
    Symptom("the variance is mean(x²), RMSNorm's, not the mean of the squared deviations (y subtracts the mean, "
            "the variance does not)", lambda c: forward(c, center=False),
            "Square the deviations: `var = tl.sum(diff * diff, axis=0) / N` with `diff = tl.where(mask, x - mean, "
            "0.0)`."),
    Symptom("y normalises x, not x − mean (the variance is right): y = x · rstd · weight + bias",
            lambda c: forward(c, center_y=False),
            "y = (x − mean) · rstd · weight + bias: multiply diff, not x."),
    Symptom("the mean is subtracted after scaling: y = (x · rstd − mean) · weight + bias, where the mean is scaled "
            "with x, (x − mean) · rstd (rstd and mean themselves are right)", lambda c: forward(c, scaled_first=True),
            "Subtract the mean first, then scale: `y = diff * rstd * weight + bias` with `diff = tl.where(mask, "
            "x - mean, 0.0)` (or `x * rstd - mean * rstd`)."),
    Symptom("the bias is left out: y = x̂ · weight", lambda c: forward(c, bias="none"),
            "Load the bias and add it after the weight: `y = diff * rstd * weight + bias`."),
    Symptom("the bias is added before the weight: y = (x̂ + bias) · weight, where it is x̂ · weight + bias",
            lambda c: forward(c, bias="before"),
            "Multiply by the weight, then add the bias: `y = diff * rstd * weight + bias`."),
    *eps_slips(lambda c, rule: forward(c, rule=rule), "var", "the variance", "a constant row (variance 0)",
               "tl.rsqrt(var + eps)", "the standard deviation", "rstd = 1/sqrt(var + eps), `tl.rsqrt(var + eps)`."),
    Symptom("the mean and the variance are divided by BLOCK_SIZE instead of N",
            lambda c: forward(c, mean_divisor=triton.next_power_of_2(c.N),
                              var_divisor=triton.next_power_of_2(c.N)),
            "The masked lanes add zeros, but the row has N values: divide both sums by N."),
    Symptom("the mean is divided by BLOCK_SIZE instead of N (the variance's sum is divided by N, but of the "
            "deviations from that wrong mean): mean, y and rstd are all off",
            lambda c: forward(c, mean_divisor=triton.next_power_of_2(c.N)),
            "The masked lanes add zeros, but the row has N values: `mean = tl.sum(x, axis=0) / N`."),
    Symptom("mean and rstd are stored into each other's pointers: mean_ptr holds rstd and rstd_ptr holds the mean "
            "(y, computed before the stores, is right)", lambda c: forward(c, swapped=True),
            "Store each at its own pointer: `tl.store(mean_ptr + row, mean)`, `tl.store(rstd_ptr + row, rstd)`."),
    Symptom("mean_ptr is given rstd: the mean's store writes rstd (`tl.store(mean_ptr + row, rstd)`), so both "
            "pointers hold rstd (y and rstd are right)", lambda c: forward(c, stored="rstd twice"),
            "Store the mean at mean_ptr: `tl.store(mean_ptr + row, mean)`."),
    Symptom("rstd_ptr is given the mean: rstd's store writes the mean (`tl.store(rstd_ptr + row, mean)`), so both "
            "pointers hold the mean (y and the mean are right)", lambda c: forward(c, stored="mean twice"),
            "Store rstd at rstd_ptr: `tl.store(rstd_ptr + row, rstd)`."),
    Symptom("the variance is divided by BLOCK_SIZE instead of N (the mean is right)",
            lambda c: forward(c, var_divisor=triton.next_power_of_2(c.N)),
            "The masked lanes add zeros, but the row has N values: `var = tl.sum(diff * diff, axis=0) / N`."),
]


def backward(case, *, mean_term: float = 1.0, x_hat_term: float = 1.0, centered: bool = True,
             mean_u_of: str = "u", divisor: int | None = None, u_divisor: int | None = None, weighted: bool = True,
             mean_ux_of: str = "x̂", stats_at: str = "row", mean_at: str = "row", rstd_at: str = "row",
             last_rstd: bool = True, dweight: str = "dy·x̂", dbias: str = "dy", kept: str = "sum",
             kept_dweight: str | None = None, kept_dbias: str | None = None,
             idle: float = 0.0) -> dict[str, torch.Tensor]:
    """dx and the two (P, N) partials of a variant, in float64, from the float32 mean and rstd the kernel is given.

    Args:
        mean_term: times mean(u) in dx (0: left out); ``x_hat_term``: times x̂ · mean(u · x̂) (0: left out, −1: added).
        centered: x̂ = (x − mean) · rstd (False: x · rstd, RMSNorm's x̂, everywhere).
        mean_u_of: "u" (mean(u)) or "dy" (mean(dy): the weight left out of the mean term).
        divisor: what both row sums are divided by (None: N); ``u_divisor``: mean(u)'s alone.
        weighted: u = dy · weight (False: u = dy, in every term of dx).
        mean_ux_of: "x̂" (mean(u · x̂)) or "x" (mean(u · x), the raw x).
        stats_at: "row" (mean and rstd of the row) or "pid" (of the program's first row, `mean_ptr + pid`);
            ``mean_at``, ``rstd_at``: the same for one of them alone.
        last_rstd: dx is rstd · (…) (False: the bracket alone).
        dweight, dbias: what each row adds to its program's partial: "dy·x̂", "dy", "dy·x", "dy·(x−mean)", "dy·rstd",
            "u·x̂" (the weight's own gradient scaled by the weight), "u" (dy · weight),
            or the row's sum over its columns, "Σ dy·x̂" or "Σ dy" (a sum over the wrong axis), each broadcast.
        kept: what a program's partial row holds: "sum" of its rows, or its "last" row alone (the accumulators
            zeroed in the loop, or `=` where `+=` belongs); ``kept_dweight``, ``kept_dbias``: one partial's alone.
        idle: the partial row of a program without rows (0: stored after the loop; NaN: never stored).
    """
    x, weight, dy = case.f64("x"), case.f64("weight"), case.f64("dy")
    mean, rstd = case.f64("mean").unsqueeze(-1), case.f64("rstd").unsqueeze(-1)
    first = torch.arange(case.M) % case.programs  # row r belongs to program r % P, whose first row is r % P
    if stats_at == "pid" or mean_at == "pid":
        mean = mean[first]
    if stats_at == "pid" or rstd_at == "pid":
        rstd = rstd[first]
    x_hat = ((x - mean) if centered else x) * rstd
    u = dy * weight if weighted else dy
    n = divisor or case.N
    mean_u = {"u": u, "dy": dy}[mean_u_of].sum(-1, keepdim=True) / (u_divisor or n)
    mean_ux = (u * {"x̂": x_hat, "x": x}[mean_ux_of]).sum(-1, keepdim=True) / n
    dx = (u - mean_term * mean_u - x_hat_term * x_hat * mean_ux) * (rstd if last_rstd else 1.0)
    terms = {"dy·x̂": dy * x_hat, "dy": dy, "dy·x": dy * x, "dy·(x−mean)": dy * (x - mean), "dy·rstd": dy * rstd,
             "u·x̂": u * x_hat, "u": u}
    terms["Σ dy·x̂"] = terms["dy·x̂"].sum(-1, keepdim=True).expand_as(dy)
    terms["Σ dy"] = dy.sum(-1, keepdim=True).expand_as(dy)

    def partial(added, kept):
        kept_rows = by_program(case, added) if kept == "sum" else torch.stack(
            [added[p::case.programs][-1] if p < case.M else torch.zeros(case.N, dtype=torch.float64)
             for p in range(case.programs)])
        kept_rows[case.M:] = idle  # programs p ≥ M get no rows
        return kept_rows

    return {"dx": dx, "dweight_partial": partial(terms[dweight], kept_dweight or kept),
            "dbias_partial": partial(terms[dbias], kept_dbias or kept)}


def correct_backward(case) -> dict[str, torch.Tensor]:
    """The float64 oracle: dx = rstd · (u − mean(u) − x̂ · mean(u · x̂)), u = dy · weight; the partials' row p is
    Σ dy · x̂ and Σ dy over program p's rows p, p + P, …"""
    return backward(case)


BACKWARD = [
    Symptom("dx misses the mean term: it is RMSNorm's rstd · (u − x̂ · mean(u · x̂)), but LayerNorm's x̂ also "
            "depends on x through the mean, which gives dx a third term, − rstd · mean(u)",
            lambda c: backward(c, mean_term=0.0),
            "dx = rstd · (u − mean(u) − x̂ · mean(u · x̂)): `mean_u = tl.sum(u, axis=0) / N`, then "
            "`(u - mean_u - x_hat * mean_ux) * rstd`."),
    Symptom("dx misses its x̂ term, − rstd · x̂ · mean(u · x̂): the gradient through the variance",
            lambda c: backward(c, x_hat_term=0.0),
            "dx = rstd · (u − mean(u) − x̂ · mean(u · x̂)), `mean_ux = tl.sum(u * x_hat, axis=0) / N`."),
    Symptom("dx's x̂ term is added where it is subtracted: dx = rstd · (u − mean(u) + x̂ · mean(u · x̂))",
            lambda c: backward(c, x_hat_term=-1.0),
            "Subtract it, as the mean term: `(u - mean_u - x_hat * mean_ux) * rstd`."),
    Symptom("u lacks the weight: u = dy where u = dy · weight, so every term of dx is dy's, "
            "rstd · (dy − mean(dy) − x̂ · mean(dy · x̂)) (the error is the size of weight − 1: small where the weight "
            "is near 1)", lambda c: backward(c, weighted=False),
            "y multiplies x̂ by the weight, so the gradient reaching x̂ is dy · weight: load the weight once, before "
            "the loop, and use `u = dy * weight` in every term of dx."),
    Symptom("mean(u) is divided by BLOCK_SIZE instead of N (mean(u · x̂) is divided by N)",
            lambda c: backward(c, u_divisor=triton.next_power_of_2(c.N)),
            "The masked lanes add zeros, but the row has N values: `mean_u = tl.sum(u, axis=0) / N`."),
    Symptom("dx's x̂ term takes the mean of u · x, the raw x, where u · x̂ belongs (`tl.sum(u * x, axis=0)`): "
            "x is neither centred nor scaled by rstd there",
            lambda c: backward(c, mean_ux_of="x"),
            "The mean is over u · x̂, the same x̂ the term multiplies: `mean_ux = tl.sum(u * x_hat, axis=0) / N`."),
    Symptom("every row of a program uses the mean and rstd of its first row: they are loaded at `mean_ptr + pid` "
            "and `rstd_ptr + pid`, where the loop's `row` belongs (each program's first row, row pid, is right)",
            lambda c: backward(c, stats_at="pid"),
            "Each row has its own statistics: `tl.load(mean_ptr + row)` and `tl.load(rstd_ptr + row)`, inside the "
            "loop (pid only picks the first row, and the partials' row)."),
    Symptom("the partials are stored inside the row loop: each store holds the sum so far, so the last one is "
            "right, but a program that gets no rows (more programs than rows) never reaches a store, and its "
            "partial rows are never written", lambda c: backward(c, idle=float("nan")),
            "Store both partials once, after the loop: `tl.store(dweight_partial_ptr + pid * N + cols, "
            "dweight_acc, mask=mask)` (and dbias's): a program without rows then writes its zeros."),
    Symptom("the accumulators are zeroed inside the row loop: each program's partial rows hold its last row's "
            "dy · x̂ and dy, not the sum over its rows", lambda c: backward(c, kept="last"),
            "Create `dweight_acc` and `dbias_acc` (`tl.zeros([BLOCK_SIZE], dtype=tl.float32)`) once, before the "
            "loop; inside it, only add to them."),
    *(Symptom(f"{name}'s accumulator is overwritten, not added to: `{name}_acc = …` where `{name}_acc += …` "
              f"belongs, so each program's {name} partial holds its last row's {term} alone ({other}'s is summed)",
              lambda c, name=name: backward(c, **{f"kept_{name}": "last"}),
              f"Add each row to the accumulator: `{name}_acc += {code}`.")
      for name, other, term, code in (("dweight", "dbias", "dy · x̂", "dy * x_hat"), ("dbias", "dweight", "dy", "dy"))),
    *(Symptom(f"{the} alone is loaded at `{stat}_ptr + pid`, where the loop's `row` belongs: every row of a program "
              f"is {done} by its first row's {stat} ({other} is loaded right; each program's first row is right)",
              lambda c, stat=stat: backward(c, **{f"{stat}_at": "pid"}),
              f"Each row has its own {stat}: `tl.load({stat}_ptr + row)`, inside the loop.")
      for stat, the, done, other in (("mean", "the mean", "centred", "rstd"), ("rstd", "rstd", "scaled", "the mean"))),
    Symptom("dweight's partial adds u · x̂ = dy · weight · x̂, where it adds dy · x̂: the weight multiplies x̂ in y, "
            "so its own gradient does not include it", lambda c: backward(c, dweight="u·x̂"),
            "`dweight_acc += dy * x_hat` (u = dy · weight belongs to dx alone)."),
    Symptom("dbias's partial adds u = dy · weight, where it adds dy alone: the bias is added after the weight "
            "(y = x̂ · weight + bias), so the weight does not scale its gradient", lambda c: backward(c, dbias="u"),
            "`dbias_acc += dy` (u = dy · weight belongs to dx alone)."),
    Symptom("dweight's partial adds dy alone, as dbias's does: each of its columns is Σ dy, the bias's gradient, "
            "where the weight's is Σ dy · x̂ (the weight multiplies x̂ in y)",
            lambda c: backward(c, dweight="dy"),
            "`dweight_acc += dy * x_hat`, with `x_hat = (x - mean) * rstd`."),
    Symptom("dbias's partial adds dy · rstd, where it adds dy alone: y = x̂ · weight + bias, the bias is added "
            "after the normalisation, so its gradient is Σ dy, unscaled", lambda c: backward(c, dbias="dy·rstd"),
            "`dbias_acc += dy`."),
    Symptom("dbias is summed over the wrong axis: each row adds its sum over the columns, Σ dy of the row "
            "(`tl.sum(dy, axis=0)`, one number), to every column of the partial, where dbias sums over the rows, "
            "column by column", lambda c: backward(c, dbias="Σ dy"),
            "Add the row itself, one value per column: `dbias_acc += dy`; the sum over the rows is the loop's "
            "(and, across programs, the (P, N) partial's sum over P)."),
    Symptom("dweight is summed over the wrong axis: each row adds its sum over the columns, Σ dy · x̂ of the row "
            "(`tl.sum(dy * x_hat, axis=0)`), to every column of the partial, where dweight sums over the rows",
            lambda c: backward(c, dweight="Σ dy·x̂"),
            "Add the row's products, one per column: `dweight_acc += dy * x_hat`."),
    Symptom("the two partials are swapped: dweight's holds Σ dy and dbias's Σ dy · x̂",
            lambda c: backward(c, dweight="dy", dbias="dy·x̂"),
            "y = x̂ · weight + bias: the weight's gradient is Σ dy · x̂, the bias's Σ dy."),
    Symptom("x̂ is x · rstd, RMSNorm's, without the mean subtracted: dx and dweight's partial both use it",
            lambda c: backward(c, centered=False),
            "Load the saved mean and subtract it: `x_hat = (x - mean) * rstd`, with `mean = tl.load(mean_ptr + "
            "row)`."),
    Symptom("dx's mean term is the mean of dy, where it is the mean of u = dy · weight",
            lambda c: backward(c, mean_u_of="dy"),
            "Take the mean of u, the same u as dx's first term: `mean_u = tl.sum(u, axis=0) / N`."),
    Symptom("dx misses its last factor rstd: dx = rstd · (u − mean(u) − x̂ · mean(u · x̂))",
            lambda c: backward(c, last_rstd=False),
            "Multiply the bracket by rstd: `(u - mean_u - x_hat * mean_ux) * rstd`."),
    Symptom("the row sums of dx's terms are divided by BLOCK_SIZE instead of N",
            lambda c: backward(c, divisor=triton.next_power_of_2(c.N)),
            "The masked lanes add zeros, but the row has N values: divide both sums by N."),
    Symptom("dweight's partial adds dy · (x − mean), without rstd: the weight multiplies x̂ = (x − mean) · rstd, "
            "the centred x scaled", lambda c: backward(c, dweight="dy·(x−mean)"),
            "`dweight_acc += dy * x_hat`, with `x_hat = (x - mean) * rstd`."),
    Symptom("dweight's partial adds dy · x, not dy · x̂: the weight multiplies the normalised x",
            lambda c: backward(c, dweight="dy·x"),
            "`dweight_acc += dy * x_hat`, with `x_hat = (x - mean) * rstd`."),
]

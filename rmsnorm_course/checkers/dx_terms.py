"""dx taken apart into the formula's terms, where no symptom names the slip (04, 08's fix, 10).

dx = rstd · (u − x̂ · mean(u · x̂)), with u = dy · gamma and x̂ = x · rstd: a first term
rstd · u and a second term rstd · x̂ · mean(u · x̂) (04 writes it x · rstd³ · mean(u · x)).
:func:`explainer` builds, for an exercise, the words :func:`~.diagnose.diagnose` puts before
the first mismatch: each term's candidates (gamma missing from u, x where dy belongs, gamma
folded into x̂, dy where x̂ belongs in the mean, an extra factor in the mean…) are combined,
and the learner's dx is compared, on every case, with each combination (float64, at the
checker's tolerance). A combination that fits names which term is right and which is off, and
how. When none fits, a per-row least-squares fit of dx as a · (first term) + c · x̂ tells
whether the first term is right and only the second term's mean is wrong. The partial
(dy · x̂ per row, summed by program in 10) is compared in the same way with candidate products.

Source: solutions/04_backward_derivation.ipynb, 08_n_vs_block_exercise.ipynb, 10_one_pass_backward.ipynb.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence

import torch

from . import precision
from .diagnose import _tol, close


def explainer(parts: Callable, hat: str, accumulate: Callable | None = None) -> Callable:
    """The exercise's ``terms`` hook: (runs, name) -> words for dx's or partial's error, or None.

    Args:
        parts: case -> x, gamma, dy, rstd (M, 1), each float64.
        hat: how the exercise writes the second term: "x" (04: x · rstd³ · mean(u · x)) or
            "x̂" (10: rstd · x̂ · mean(u · x̂)).
        accumulate: (case, per-row terms) -> the partial the kernel stores (10 sums the rows by program;
            None: one partial row per row).
    """

    def explain(runs: Sequence, name: str) -> str | None:
        summed = accumulate or (lambda case, t: t)
        if name == "partial":
            return _partial_words(runs, parts, hat, summed)
        if name != "dx" or (said := _dx_words(runs, parts, hat)) is None:
            return None
        # a slip in x or x̂ (loaded from dy_ptr, gamma folded in) reaches the partial too: say so, not dx alone
        if not _partial_right(runs):
            also = _partial_words(runs, parts, hat, summed, "partial is off as well")
            said += " " + (also or "partial is off as well: check its line, the product dy · x · rstd.")
        return said

    return explain


def _fits(runs, name: str, model: Callable) -> bool:
    """Does ``model(case)`` match the learner's output ``name`` on every case (stored in its dtype)?"""
    for run in runs:
        actual = run.actual.get(name)
        if not isinstance(actual, torch.Tensor):
            return False
        expected = model(run.case)
        if not close(actual, expected.to(actual.dtype), _tol(run, name), equal_nan=True):
            return False
    return True


def _pieces(case, parts, hat: str):
    x, gamma, dy, r = parts(case)
    u = dy * gamma
    h, scale = (x, r.pow(3)) if hat == "x" else (x * r, r)
    dy_h = dy if hat == "x" else dy * r  # what h becomes when x is loaded from dy
    return x, gamma, dy, r, u, h, scale, dy_h


def _dx_words(runs, parts, hat: str) -> str | None:
    h_word = hat
    second_right = "x · rstd³ · mean(u · x)" if hat == "x" else "rstd · x̂ · mean(u · x̂)"

    def second_word(g: str, v: str, w: str) -> str:
        return f"{g} · rstd³ · mean({v} · {w})" if hat == "x" else f"rstd · {g} · mean({v} · {w})"

    # (words, why it is wrong or None, case -> tensor) for each part of dx
    firsts = [("rstd · u", None, lambda p: p[3] * p[4]),
              ("rstd · dy", "gamma is missing from u", lambda p: p[3] * p[2]),
              ("rstd · x · gamma", "u is x · gamma: x stands where dy belongs", lambda p: p[3] * p[0] * p[1]),
              ("u", "rstd is missing", lambda p: p[4])]
    directions = [(h_word, None, lambda p: p[5]),
                  (f"{h_word} · gamma", f"gamma is folded into {h_word}", lambda p: p[5] * p[1]),
                  ("dy" if hat == "x" else "dy · rstd", f"{h_word} is made from dy: x is loaded from dy_ptr",
                   lambda p: p[7])]
    vs = [("u", None, lambda p, f: p[4]),
          ("dy", "gamma is missing from the mean's u", lambda p, f: p[2]),
          ("x · gamma", "the mean's u is x · gamma: x stands where dy belongs", lambda p, f: p[0] * p[1])]
    ws = [("same", None, lambda p, g: g),
          ("dy", f"dy stands where {h_word} belongs in the mean", lambda p, g: p[2]),
          (f"{h_word} · x", "the mean's product has an extra factor x", lambda p, g: g * p[0])]
    for (fw, fwhy, f), (gw, gwhy, g), (vw, vwhy, v), (ww, wwhy, w) in itertools.product(firsts, directions, vs, ws):
        if fwhy is None and gwhy is None and vwhy is None and wwhy is None:
            continue  # the right dx
        if gwhy is not None and vwhy is not None:
            continue  # one slip at a time in the second term's pieces, beyond the direction

        def model(case, f=f, g=g, v=v, w=w):
            p = _pieces(case, parts, hat)
            gt = g(p)
            return f(p) - p[6] * gt * (v(p, None) * w(p, gt)).sum(-1, keepdim=True) / case.N

        if not _fits(runs, "dx", model):
            continue
        w_word = gw if ww == "same" else (ww.replace(h_word, gw, 1) if ww.startswith(h_word) else ww)
        said = []
        if fwhy is not None and fwhy.startswith("u is") and vwhy is not None and vwhy.startswith("the mean's u is"):
            u_word = fw.removeprefix("rstd · ")  # one u, wrong in both terms
            return (f"dx's u is {u_word} where dy · gamma belongs ({fwhy.split(': ', 1)[1]}), in both of dx's terms: "
                    f"its first term is {fw} and its second {second_word(gw, vw, w_word)}: "
                    f"u = dy · gamma, in both terms.")
        if fwhy is None:
            said.append("dx's first term, rstd · u, is right")
        else:
            said.append(f"dx's first term is off: it is {fw} where rstd · u belongs ({fwhy})")
        whys = "; ".join(y for y in (gwhy, vwhy, wwhy) if y)
        if whys:
            said.append(f"its second term is off: it is {second_word(gw, vw, w_word)} where {second_right} "
                        f"belongs ({whys})")
        else:
            said.append(f"its second term, {second_right}, is right")
        return "; ".join(said) + "."
    if _first_term_right(runs, parts, hat):
        mean = "mean(u · x)" if hat == "x" else "mean(u · x̂)"
        if (divisor := _mean_divisor(runs, parts, hat)) is not None:
            return (f"dx's first term, rstd · u, is right; in its second term, {second_right}, the sum of {mean} is "
                    f"divided by {divisor} where N belongs: divide by N, the row's number of columns.")
        worst = precision.rounding_sized(runs, "dx", lambda r: _tol(r, "dx"))
        if worst is not None:  # a mean off by a rounding: a 16-bit cast in its sum (mean_ux's own line)
            return (f"dx's first term, rstd · u, is right; its second term, {second_right}, is off by no more than "
                    f"a 16-bit rounding ({worst:.1e} of the row's largest value at most): on a float32 case, "
                    f"{mean} carries float16 rounding: something in mean_ux's line is cast to 16 bits before the sum "
                    f"(a product `.to(tl.float16)`, a 16-bit accumulator); {precision.FIX}.")
        return (f"dx's first term, rstd · u, is right; the second term, {second_right}, is wrong: "
                "check mean_ux's line.")
    return None


def _row_factors(run, parts, hat: str) -> tuple[torch.Tensor, torch.Tensor]:
    """Per row, the learner's factor c of (dx − rstd · u) = c · x (least squares), and the right one."""
    x, gamma, dy, r = parts(run.case)
    u = dy * gamma
    rest = run.actual["dx"].detach().to("cpu", torch.float64) - r * u
    den = (x * x).sum(-1, keepdim=True).clamp(min=1e-300)
    got = (rest * x).sum(-1, keepdim=True) / den
    h, scale = (x, r.pow(3)) if hat == "x" else (x * r, r * r)  # rstd · x̂ · m = x · rstd² · m
    want = -scale * (u * h).mean(-1, keepdim=True)
    return got.reshape(-1), want.reshape(-1)


def _mean_divisor(runs, parts, hat: str) -> str | None:
    """What the second term's sum is divided by instead of N, when one divisor explains every failing case:
    the row stride, a multiple of N, N plus a constant, or a number; None when no one divisor fits."""
    wrong = []
    for run in runs:
        if close(run.actual["dx"], run.expected["dx"].to(run.actual["dx"].dtype), _tol(run, "dx")):
            continue  # a passing case: its divisor is N, or near enough
        got, want = _row_factors(run, parts, hat)
        big = (want.abs() > 1e-6 * want.abs().max().clamp(min=1e-300)) & torch.isfinite(want) & (got != 0)
        if not bool(big.any()):
            return None
        d = run.case.N * want[big] / got[big]  # sum / d where sum / N belongs
        if not bool(torch.allclose(d, d.median().expand_as(d), rtol=1e-3)):
            return None
        wrong.append((run, float(d.median())))
    if not wrong:
        return None
    if all(run.case.row_stride and abs(d - run.case.row_stride) < 1e-3 * d for run, d in wrong):
        run = wrong[0][0]
        return (f"row_stride (= {run.case.row_stride} on the case whose rows are {run.case.row_stride} apart; every "
                "case whose rows are N apart passes)")
    ratios = {round(d / run.case.N, 3) for run, d in wrong}
    if len(ratios) == 1 and (k := ratios.pop()) == round(k):
        return f"{int(k)} · N"
    offsets = {round(d - run.case.N, 3) for run, d in wrong}
    if len(offsets) == 1 and (k := offsets.pop()) == round(k):
        return f"N {'+' if k > 0 else '−'} {abs(int(k))}"
    return None


def _first_term_right(runs, parts, hat: str) -> bool:
    """dx − rstd · u is, row by row, a multiple of x (least squares, within the checker's tolerance) on every case,
    and dx is not right: only the second term's row factor, mean_ux, is wrong."""
    for run in runs:
        actual = run.actual.get("dx")
        if not isinstance(actual, torch.Tensor) or not torch.isfinite(actual).all():
            return False
        x, gamma, dy, r = parts(run.case)
        first = r * dy * gamma
        rest = actual.detach().to("cpu", torch.float64) - first
        den = (x * x).sum(-1, keepdim=True)
        c = torch.where(den > 0, (rest * x).sum(-1, keepdim=True) / den.clamp(min=1e-300), torch.zeros_like(den))
        if not close(actual, (first + c * x).to(actual.dtype), _tol(run, "dx")):
            return False
    return True


def _partial_right(runs) -> bool:
    """The partial matches on every case where the exercise has one (04, 10; not 08's fix, which has none)."""
    for run in runs:
        want, got = run.expected.get("partial"), run.actual.get("partial")
        if want is not None and not (isinstance(got, torch.Tensor) and close(got, want.to(got.dtype),
                                                                            _tol(run, "partial"))):
            return False
    return True


def _partial_words(runs, parts, hat: str, accumulate, head: str = "partial is off") -> str | None:
    xh = "x · rstd" if hat == "x" else "x̂"
    sigma = "" if hat == "x" else "Σ "

    def dx(p):
        x, gamma, dy, r = p
        u, xhat = dy * gamma, x * r
        return r * (u - xhat * (u * xhat).mean(-1, keepdim=True))

    candidates = [(f"dy · {xh}", None, lambda p: p[2] * p[0] * p[3]),
                  ("dy · rstd", "x is missing", lambda p: p[2] * p[3]),
                  ("dy · x", "rstd is missing", lambda p: p[2] * p[0]),
                  (xh, "dy is missing", lambda p: p[0] * p[3]),
                  (f"dx · {xh}", "dx stands where dy belongs", lambda p: dx(p) * p[0] * p[3]),
                  (f"u · {xh}", f"gamma is in it: u stands where dy belongs, or gamma is folded into {xh}",
                   lambda p: p[2] * p[1] * p[0] * p[3]),
                  (f"dy · {xh.replace('x', 'dy', 1) if hat == 'x' else 'dy · rstd'}",
                   f"{'x' if hat == 'x' else 'x̂'} is made from dy: x is loaded from dy_ptr",
                   lambda p: p[2] * p[2] * p[3])]
    for words, why, term in candidates[1:]:
        if _fits(runs, "partial", lambda case, term=term: accumulate(case, term(parts(case)))):
            return f"{head}: it holds {sigma}{words} where {sigma}dy · {xh} belongs ({why})."
    return None

"""16-bit rounding on a float32 case, recognised by the size and the grid of the error, whatever was cast.

A kernel that casts something to float16 or bfloat16 (`.to(tl.float16)` before the store, a sum of
16-bit products, a 16-bit accumulator) gives, on a float32 case, numbers a rounding away from the right
ones: right to 3 digits (float16) or 2 (bfloat16), wrong at float32's tolerance. No list of casts is
needed to see it; two signs suffice, looked for on every failing case:

- :func:`stored_rounded`: every value of the output is a 16-bit number and lies within one 16-bit step
  (ulp) of the right value: the result itself was rounded before the store;
- :func:`rounding_sized`: the error is no larger than 16-bit rounding leaves (2⁻⁷ of the row's largest
  value): something inside was rounded (a sum, a factor). A wrong formula with so small an error
  (N + 1 for N) has a shape of its own (a factor per row), which :mod:`~.shapes` and :mod:`~.dx_terms`
  name first, so :func:`~.diagnose.diagnose` asks this after them.

Source: the float16 and bfloat16 formats (11 and 8 significant bits); solutions/03-10.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from .shapes import _close  # as the checker compares: torch.testing.assert_close

#: The 16-bit formats, with their significant bits (the ulp of a value in [1, 2) is 2^(1 − bits)).
FORMATS = ((torch.float16, "float16", 11), (torch.bfloat16, "bfloat16", 8))
#: The largest error 16-bit rounding leaves, relative to the row's largest value: a bfloat16 rounding
#: (2⁻⁸) of a few terms, or a float16 sum of a few hundred terms (each addition 2⁻¹¹ of what it adds).
ROUNDING_SIZE = 2.0 ** -7

FIX = ("keep the arithmetic in float32: convert each load with `.to(tl.float32)`, cast nothing to 16 bits "
       "(no `.to(tl.float16)`, no 16-bit accumulator), and let the store cast once, to the output's dtype "
       "(float16 only for float16 inputs)")


def _failing(runs: Sequence, name: str, tol) -> list[tuple[object, torch.Tensor, torch.Tensor]] | None:
    """(run, actual, expected) in float64 of the cases where ``name`` fails, when one is a float32 case and every
    one has finite values; None otherwise (no float32 case fails, a shape or NaN is wrong).

    A float16 case may fail too: a bfloat16 rounding is past float16's tolerance."""
    found = []
    for run in runs:
        actual, expected = run.actual.get(name), run.expected.get(name)
        if not isinstance(actual, torch.Tensor) or expected is None or tuple(actual.shape) != tuple(expected.shape):
            return None
        a, e = actual.detach().to("cpu", torch.float64), expected.detach().to("cpu", torch.float64)
        if _close(a, e, tol(run)):
            continue
        if not (torch.isfinite(a).all() and torch.isfinite(e).all()):
            return None
        found.append((run, a, e))
    return found if any(run.case.dtype == torch.float32 for run, _, _ in found) else None


def _ulp(e: torch.Tensor, bits: int) -> torch.Tensor:
    """One step of a format of ``bits`` significant bits at |e| (at least its smallest step near 0)."""
    _, exponent = torch.frexp(e)
    floor = 2.0 ** -24 if bits == 11 else 2.0 ** -133
    return torch.clamp(torch.ldexp(torch.ones_like(e), exponent - bits), min=floor)


def stored_rounded(runs: Sequence, name: str, tol) -> str | None:
    """'float16' (or 'bfloat16') when, on every failing float32 case, each value of ``name`` is a number of
    that format within one of its steps of the right value; else None."""
    cases = _failing(runs, name, tol)
    if cases is None:
        return None
    for dtype, word, bits in FORMATS:
        if all(torch.equal(a.to(dtype).double(), a) and bool(((a - e).abs() <= _ulp(e, bits)).all())
               for _, a, e in cases):
            return word
    return None


def rounding_sized(runs: Sequence, name: str, tol) -> float | None:
    """The largest error of ``name`` relative to its row's largest right value, when on every failing float32
    case it is no more than 16-bit rounding leaves (:data:`ROUNDING_SIZE`); else None."""
    cases = _failing(runs, name, tol)
    if cases is None:
        return None
    worst = 0.0
    for _, a, e in cases:
        rows_a, rows_e = a.reshape(-1, a.shape[-1]) if a.dim() else a.reshape(1, 1), \
            e.reshape(-1, e.shape[-1]) if e.dim() else e.reshape(1, 1)
        scale = rows_e.abs().amax(-1, keepdim=True)
        if not bool((scale > 0).all()):
            return None
        worst = max(worst, float(((rows_a - rows_e).abs() / scale).max()))
    return worst if worst <= ROUNDING_SIZE else None


def stored_words(runs: Sequence, name: str, tol) -> str | None:
    """The sentence for a float32 case whose output ``name`` was rounded to 16 bits before its store, or None."""
    stored = stored_rounded(runs, name, tol)
    if stored is not None:
        return (f"on a float32 case, {name} carries {stored} rounding: every value of {name} is one that {stored} "
                f"holds exactly, within one {stored} step of the right value, so the result is cast to 16 bits "
                f"before the store (`.to(tl.{stored})` on it); {FIX}.")
    return None


def sized_words(runs: Sequence, name: str, tol) -> str | None:
    """The sentence for a float32 case whose output ``name`` is off by no more than 16-bit rounding, or None."""
    worst = rounding_sized(runs, name, tol)
    if worst is None:
        return None
    return (f"on a float32 case, {name} carries float16 rounding: every value of {name} is right to within "
            f"{worst:.1e} of its row's largest value, the size of a 16-bit rounding, not of a wrong formula, so "
            f"something is cast to 16 bits before the store or before a sum (`.to(tl.float16)`, a sum of 16-bit "
            f"products, a 16-bit accumulator); {FIX}.")

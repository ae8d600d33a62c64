"""Checker of exercise 03: the learner's forward kernel, launched by ``forward_op(..., kernel=...)``.

Symptoms recognised (each a classic mistake, modelled in float64):
mean divided by BLOCK_SIZE, gamma not applied, eps missing, eps added after
the square root, multiplying by the RMS instead of its inverse, rstd stored as
the RMS, squares computed in float16 (overflow past 65504); plus, before any
launch, unmasked loads/stores and a wrong signature; and, after, unwritten
elements (outputs start as NaN) and float16-only failures.

Source: solutions/03_forward_kernel.ipynb.
"""

from __future__ import annotations

import torch

from ..forward import forward_op, rmsnorm_forward_kernel
from .cases import FLOAT16_MAX, describe, row_cases, sum_of_squares
from .diagnose import Case, Run, Symptom, diagnose
from .feedback import Feedback
from .kernels import preflight, run_kernel_cases

EXERCISE = "03 · forward kernel"


def _outputs(case: Case, rstd: torch.Tensor, gamma: bool = True) -> dict[str, torch.Tensor]:
    y = case.f64("x") * rstd * (case.f64("gamma") if gamma else 1.0)
    return {"y": y, "rstd": rstd.reshape(-1)}


def correct(case: Case) -> dict[str, torch.Tensor]:
    """The float64 oracle: y and rstd = 1/sqrt(mean(x²) + eps)."""
    return _outputs(case, torch.rsqrt(sum_of_squares(case) / case.N + case.epsilon))


def _fp16_sum(case: Case) -> dict[str, torch.Tensor | None]:
    sumsq = sum_of_squares(case)
    rstd = torch.rsqrt(sumsq / case.N + case.epsilon)
    if case.dtype != torch.float16:
        return {}
    # A float16 sum past 65504 rounds to inf, and rsqrt(inf) = 0; elsewhere rstd is only float16-accurate.
    rstd = torch.where(sumsq >= FLOAT16_MAX + 16, torch.zeros_like(rstd), rstd)
    return {"y": _outputs(case, rstd)["y"], "rstd": None}


def _rms(case: Case) -> torch.Tensor:
    return torch.sqrt(sum_of_squares(case) / case.N + case.epsilon)


SYMPTOMS = [
    Symptom(
        "the mean is divided by BLOCK_SIZE instead of N",
        lambda c: _outputs(c, torch.rsqrt(sum_of_squares(c) / c.block_size + c.epsilon)),
        "The masked lanes add 0 to the sum, but they are not data: divide by N (they agree only "
        "when N is a power of two, like 256).",
    ),
    Symptom(
        "gamma is not applied",
        lambda c: _outputs(c, torch.rsqrt(sum_of_squares(c) / c.N + c.epsilon), gamma=False),
        "y = x · rstd · gamma: load gamma (one per column) and multiply.",
    ),
    Symptom(
        "eps is missing",
        lambda c: _outputs(c, torch.rsqrt(sum_of_squares(c) / c.N)),
        "Add eps to mean(x²) before the square root (a row of zeros then gives 0, not NaN).",
    ),
    Symptom(
        "eps is added after the square root",
        lambda c: _outputs(c, 1 / (torch.sqrt(sum_of_squares(c) / c.N) + c.epsilon)),
        "rstd = 1/sqrt(mean(x²) + eps): eps goes inside the square root.",
    ),
    Symptom(
        "y is multiplied by the RMS sqrt(mean(x²) + eps) instead of its inverse",
        lambda c: _outputs(c, _rms(c)),
        "rstd = 1/sqrt(mean(x²) + eps), e.g. `tl.rsqrt(...)`; then y = x · rstd · gamma.",
    ),
    Symptom(
        "y is right but rstd holds the RMS, not its inverse",
        lambda c: {"rstd": _rms(c).reshape(-1)},
        "Store the same rstd = 1/sqrt(mean(x²) + eps) that multiplies x: the backward reuses it.",
    ),
    Symptom(
        "the squares are computed in float16, which overflows past 65504",
        _fp16_sum,
        "Convert x (and gamma) to float32 right after loading, `.to(tl.float32)`, before squaring and summing.",
    ),
]


def check_forward_kernel(kernel) -> Feedback:
    """Run a learner's forward kernel on the checker's cases and say what is wrong, in plain words.

    Args:
        kernel: a ``@triton.jit`` kernel with the signature of
            :func:`rmsnorm.rmsnorm_forward_kernel`, launched through
            ``forward_op(x, gamma, eps, kernel=kernel)``.

    Returns:
        Feedback: "passed", "not done yet" (the skeleton) or "wrong" with the
        mistake named or the first mismatch. Never raises for a learner's mistake.

    Source: solutions/03_forward_kernel.ipynb.
    """
    early = preflight(EXERCISE, kernel, rmsnorm_forward_kernel)
    if early is not None:
        return early
    cases = row_cases()

    def launch(case, k):
        y, rstd = forward_op(case.inputs["x"], case.inputs["gamma"], case.epsilon, kernel=k)
        return {"y": y, "rstd": rstd}

    outputs = run_kernel_cases(EXERCISE, kernel, cases, launch)
    if isinstance(outputs, Feedback):
        return outputs
    runs = [Run(case, out, correct(case)) for case, out in zip(cases, outputs)]
    ones = runs[0].actual["y"][0, 0].item()
    return diagnose(
        EXERCISE, runs, SYMPTOMS,
        f"y and rstd match the float64 oracle on {len(cases)} cases ({describe(cases)}); "
        f"a row of 257 ones gives {ones:.7f}.",
    )

"""Testing helpers: the tolerance table, the oracle, input makers and the campaigns.

One tolerance table keyed by dtype, declared before any comparison and never
widened after a failure (the article's values). Every comparison goes through
``torch.testing.assert_close`` with it.

The oracle: the reference formulas (:func:`rmsnorm_reference`,
:func:`manual_backward`) evaluated in float64 on exactly the inputs the
kernel saw (float16 inputs are up-cast, not re-drawn).

Source: notebooks/03_forward_kernel.ipynb (forward check),
notebooks/04_backward_derivation.ipynb (dx), notebooks/05_gamma_reduction.ipynb
(dgamma); the tolerances are the original article's.
"""

from __future__ import annotations

import contextlib
import re
from dataclasses import dataclass
from typing import NamedTuple
from unittest import mock

import torch

from . import device as _device
from .device import default_device
from .reference import manual_backward, rmsnorm_reference

#: Declared tolerances (atol, rtol) per dtype: |actual − oracle| ≤ atol + rtol·|oracle|.
#: float32 and float16 are the article's values. bfloat16 (declared with the fast path,
#: before its first comparison): 8 significant bits, unit roundoff 2⁻⁸ ≈ 3.9e-3, so one
#: rounding of a value near 1 moves it by up to 3.9e-3; 1e-2 allows 2.5 roundings.
TOLERANCES: dict[torch.dtype, dict[str, float]] = {
    torch.float32: {"atol": 1e-5, "rtol": 1e-4},
    torch.float16: {"atol": 3e-3, "rtol": 3e-3},
    torch.bfloat16: {"atol": 1e-2, "rtol": 1e-2},
}


def dgamma_tolerance(M: int, x_dtype: torch.dtype, gamma_dtype: torch.dtype) -> dict[str, float]:
    """Tolerance for dgamma = Σ over M rows of dy · x · rstd.

    dgamma is a sum of M terms, each computed from x's dtype and each carrying
    up to one element's error; rounding errors of independent sign add like a
    random walk, so the absolute part grows as √M: atol = atol(x) · √M. The
    relative part is that of weight's dtype, the dtype dgamma is returned in
    (one final rounding). Declared with the fast path, before its first run.

    Returns:
        ``{"atol": ..., "rtol": ...}`` for :func:`torch.testing.assert_close`.

    Source: notebooks/11_extending_the_contract.ipynb; quack ``tests/test_rmsnorm.py``.
    """
    return {
        "atol": TOLERANCES[x_dtype]["atol"] * max(1.0, float(M)) ** 0.5,
        "rtol": max(TOLERANCES[x_dtype]["rtol"], TOLERANCES[gamma_dtype]["rtol"]),
    }


def assert_close(
    actual: torch.Tensor, expected: torch.Tensor, *, dtype: torch.dtype | None = None, msg: str | None = None,
    tol: dict[str, float] | None = None,
) -> None:
    """Compare with the declared tolerance of ``dtype`` (default: ``actual.dtype``).

    Both tensors are compared in float64 on ``expected``'s device (the
    oracle's: the CPU unless it was computed elsewhere), so that a float16
    result can be compared with a float64 oracle. NaN never passes.

    Args:
        tol: a declared rule other than the dtype's, e.g. :func:`dgamma_tolerance`.

    Raises:
        AssertionError: from torch.testing.assert_close, with its mismatch report.
        KeyError: for a dtype without a declared tolerance.
    """
    tol = tol or TOLERANCES[dtype or actual.dtype]
    torch.testing.assert_close(
        actual.detach().to(expected.device, torch.float64),
        expected.detach().to(expected.device, torch.float64),
        **tol, equal_nan=False, msg=msg,
    )


def assert_sum_close(
    actual: torch.Tensor, terms: tuple[torch.Tensor, ...], *, dtype: torch.dtype, msg: str = "",
) -> None:
    """Compare a sum of separately computed terms with the terms' float64 sum, each term allowed its own error.

    A two-step computation (the norm's dx rounded to ``dtype``, then eager's add of d residual_out, rounded
    again) carries each term's rounding, so its error scales with Σ|term|, not with |Σ term|: where two
    gradients of opposite sign nearly cancel, the relative part of :func:`assert_close`'s rule vanishes while
    the rounding of each term does not. The rule here is ``|actual − Σ terms| ≤ atol + rtol · Σ |term|``
    with ``dtype``'s :data:`TOLERANCES`, elementwise; it equals :func:`assert_close`'s for one term.

    Raises:
        AssertionError: naming the worst element, its value, the expected sum and the bound. NaN never passes.
    """
    tol = TOLERANCES[dtype]
    device = terms[0].device
    terms64 = [t.detach().to(device, torch.float64) for t in terms]
    expected = torch.stack(terms64).sum(0)
    bound = tol["atol"] + tol["rtol"] * torch.stack(terms64).abs().sum(0)
    got = actual.detach().to(device, torch.float64)
    excess = ((got - expected).abs() - bound).nan_to_num(nan=float("inf"))
    worst = int(excess.argmax())
    if float(excess.flatten()[worst]) > 0:
        at = tuple(int(i) for i in torch.unravel_index(torch.tensor(worst), excess.shape))
        raise AssertionError(
            f"{msg}{': ' if msg else ''}{int((excess > 0).sum())} of {excess.numel()} elements outside "
            f"atol + rtol·Σ|term|; worst at {at}: {float(got[at]):.6g}, expected {float(expected[at]):.6g}, "
            f"bound {float(bound[at]):.3g}"
        )


def tolerance_share(actual: torch.Tensor, expected: torch.Tensor, dtype: torch.dtype | None = None) -> float:
    """How much of the declared tolerance the worst element uses: max |actual − expected| / (atol + rtol·|expected|).

    The measure behind :func:`assert_close`: it passes exactly when this is at most 1. Below 1,
    it says how close to the limit a result is (lesson 12 and ``tests/library/test_fast.py`` use it to
    show the margin of the backward's float32 arithmetic).

    Args:
        actual: any floating dtype, any device.
        expected: the oracle (float64 usually), same shape; the comparison runs on its device in float64.
        dtype: whose declared tolerance (:data:`TOLERANCES`; default ``actual.dtype``).

    Returns:
        The worst element's share, a float (NaN anywhere gives NaN).

    Raises:
        KeyError: for a dtype without a declared tolerance.
    """
    tol = TOLERANCES[dtype or actual.dtype]
    a = actual.detach().to(expected.device, torch.float64)
    e = expected.detach().to(expected.device, torch.float64)
    return ((a - e).abs() / (tol["atol"] + tol["rtol"] * e.abs())).max().item()


def ulps(actual: torch.Tensor, expected: torch.Tensor) -> torch.Tensor:
    """|actual − expected| in units in the last place (ulp) of ``expected``'s dtype at |expected|.

    Args:
        actual: any shape and dtype; compared in float64.
        expected: the same shape, in the dtype whose ulp is the unit (float32, float16, bfloat16).

    Returns:
        float64 tensor of ``expected``'s shape on its device: 0 where equal, 1 one rounding step apart.
        Below the smallest normal number the ulp is that of the subnormals.
    """
    info = torch.finfo(expected.dtype)
    e64 = expected.detach().double()
    _, exponent = torch.frexp(e64.abs())  # |e| = m · 2^exponent, m in [0.5, 1)
    ulp = torch.ldexp(torch.full_like(e64, info.eps), exponent - 1).clamp_min(info.tiny * info.eps)
    return (actual.detach().double().to(e64.device) - e64).abs() / ulp


def make_inputs(M: int, N: int, dtype: torch.dtype = torch.float32, device=None, seed: int = 0, *,
                weight_dtype: torch.dtype | None = None, draw_on_device: bool = False):
    """Seeded random inputs (never zeros): x (M, N), weight (N,), dy (M, N).

    Drawn in float32 on the CPU with a seeded generator, then cast and moved,
    so the same seed gives the same values on every device. Benchmarks pass
    ``draw_on_device=True``: the values are then drawn where they are used, with
    a generator of that device (drawing 1 GiB on the CPU and copying it takes
    seconds), and differ from the CPU's.

    Args:
        weight_dtype: weight's dtype (default ``dtype``).

    Returns:
        (x, weight, dy): x and dy in ``dtype``, weight = 1 + 0.5·normal in ``weight_dtype``,
        on ``device`` (default: CUDA if available).
    """
    device = default_device() if device is None else torch.device(device)
    g = torch.Generator(device=device if draw_on_device else "cpu").manual_seed(seed)
    where = device if draw_on_device else "cpu"
    x = torch.randn(M, N, generator=g, device=where)
    weight = 1.0 + 0.5 * torch.randn(N, generator=g, device=where)
    dy = torch.randn(M, N, generator=g, device=where)
    return x.to(device, dtype), weight.to(device, weight_dtype or dtype), dy.to(device, dtype)


def rstd_oracle(x: torch.Tensor, eps: float = 1e-6, *, keepdim: bool = False, on=None) -> torch.Tensor:
    """The rstd every kernel's is compared with: 1 / sqrt(mean(x²) + eps), in float64 (on the CPU by default).

    The one place the course writes this oracle (the reference formula, on
    exactly the values the kernel saw: float16 inputs are up-cast, not re-drawn).

    Args:
        x: (..., N) tensor, any floating dtype, any device.
        eps: added to mean(x²) before the square root.
        keepdim: keep the reduced dimension, (..., 1), to broadcast against x.
        on: the device to compute on (default the CPU); a wide check passes x's own device.

    Returns:
        (...,) float64 on ``on``, or (..., 1) with ``keepdim``.

    Source: notebooks/03_forward_kernel.ipynb §5 (rstd, one per row).
    """
    x64 = x.detach().to(on or "cpu", torch.float64)
    return torch.rsqrt(x64.square().mean(-1, keepdim=keepdim) + eps)


def oracle(x: torch.Tensor, weight: torch.Tensor, dy: torch.Tensor | None = None, eps: float = 1e-6, *, on=None,
           offset: float = 0.0):
    """The stated oracle: the reference formulas in float64 on the same inputs.

    Args:
        on: where to compute it (default the CPU); the benchmark passes x's
            device, so that large shapes are checked without a copy to the host.
        offset: y = x · rstd · (weight + offset) (1.0: Gemma's ``1 + weight``).

    Returns:
        y64 when ``dy`` is None, else (y64, dx64, dgamma64), all float64 on ``on``.
    """
    on = torch.device("cpu") if on is None else torch.device(on)
    x64, g64 = x.detach().to(on, torch.float64), weight.detach().to(on, torch.float64)
    y64 = rmsnorm_reference(x64, g64, eps, offset)
    if dy is None:
        return y64
    dx64, dgamma64 = manual_backward(x64, g64, dy.detach().to(on, torch.float64), eps, offset)
    return y64, dx64, dgamma64


def _forbidden_output(shape, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    raise AssertionError("an output was allocated before the contract was checked")


def poisoned_outputs():
    """Within this block every kernel output starts as NaN (the launchers' allocator, ``device.new_output``, replaced).

    An element a kernel forgets to write then stays NaN, and NaN never passes
    :func:`assert_close`. A context manager (``unittest.mock.patch.object``). The native launch's C
    paths (csrc/fast_path.cpp) see the replacement and fill their own outputs with NaN too.
    """
    return mock.patch.object(_device, "new_output", _device.nan_output)


class RecordedLaunch(NamedTuple):
    """One launch through a :func:`recording` stand-in: ``kernel[grid](*args, **kwargs)``."""

    grid: tuple
    args: tuple
    kwargs: dict


def recording(kernel):
    """A stand-in for ``kernel`` in a launcher's ``kernel=`` seam that records each launch, then makes it.

    Args:
        kernel: a ``@triton.jit`` kernel (launched as ``kernel[grid](...)``).

    Returns:
        (stand_in, launches): pass ``stand_in`` as the launcher's ``kernel=``;
        ``launches`` gets a :class:`RecordedLaunch` per launch.

    Source: notebooks/03_forward_kernel.ipynb §4 (how ``forward_op`` launches the kernel).
    """
    launches: list[RecordedLaunch] = []

    class _Recording:
        def __getitem__(self, grid):
            def launch(*args, **kwargs):
                launches.append(RecordedLaunch(tuple(grid), args, kwargs))
                return kernel[grid](*args, **kwargs)

            return launch

    return _Recording(), launches


def outputs_forbidden():
    """Within this block any launcher's output allocation (``device.new_output``) raises AssertionError.

    A context manager (``unittest.mock.patch.object`` on the allocator).
    """
    return mock.patch.object(_device, "new_output", _forbidden_output)


@contextlib.contextmanager
def refused_before_allocating(match: str | None = None):
    """Assert that the block raises ContractError, before any launcher allocated an output.

    Args:
        match: a regular expression the error's message must contain (``re.search``), or None.

    Raises:
        AssertionError: when the block raised nothing, when an output was
            allocated first, or when the message does not match. Any other
            exception from the block propagates.

    Source: notebooks/03_forward_kernel.ipynb §4 (checks before allocation).
    """
    from .contract import ContractError

    with outputs_forbidden():
        try:
            yield
        except ContractError as error:
            if match is not None and re.search(match, str(error)) is None:
                raise AssertionError(f"the ContractError {str(error)!r} does not match {match!r}") from error
        else:
            raise AssertionError("no ContractError was raised")


def check_canary(device=None) -> None:
    """The known-answer canary: a row of 257 ones must give 0.9999995 everywhere.

    1 / sqrt(257/257 + 1e-6) = 0.9999995; dividing by BLOCK_SIZE = 512 instead
    of N would give 1.411458, and an unwritten output stays NaN (outputs are
    poisoned here).

    Raises:
        AssertionError: when y or rstd is more than 1e-7 away from 0.9999995.

    Source: notebooks/08_n_vs_block_exercise.ipynb (the same row, worked out).
    """
    from .article.forward import forward_op

    device = default_device() if device is None else torch.device(device)
    with poisoned_outputs():
        y, rstd = forward_op(torch.ones(1, 257, device=device), torch.ones(257, device=device))
    msg = "canary: a row of 257 ones must give 0.9999995 everywhere"
    torch.testing.assert_close(y.cpu(), torch.full((1, 257), 0.9999995), atol=1e-7, rtol=0, msg=msg)
    torch.testing.assert_close(rstd.cpu(), torch.tensor([0.9999995]), atol=1e-7, rtol=0, msg=msg)


@dataclass(frozen=True)
class CampaignCase:
    """One campaign case: an (M, N) shape in a dtype."""

    M: int
    N: int
    dtype: torch.dtype

    def __str__(self) -> str:
        return f"{self.M}x{self.N}-{str(self.dtype).removeprefix('torch.')}"


#: 36 shapes: M = 1 and irregular M; N small, not powers of two, 256/257, up to 4096.
CAMPAIGN_SHAPES: tuple[tuple[int, int], ...] = (
    (1, 1), (1, 7), (1, 256), (1, 257), (1, 4096), (2, 3),
    (3, 4096), (4, 31), (5, 4095), (7, 33), (8, 64), (9, 100),
    (16, 255), (17, 256), (17, 257), (17, 1), (19, 1000), (23, 129),
    (31, 511), (32, 512), (33, 513), (37, 2048), (41, 2049), (64, 17),
    (64, 1023), (65, 1025), (100, 768), (127, 96), (128, 257), (129, 3000),
    (200, 50), (255, 130), (256, 256), (300, 81), (333, 2), (413, 781),
)
#: The 72 cases of each campaign (forward y, dx, dgamma): every shape in fp32 and fp16.
CAMPAIGN: tuple[CampaignCase, ...] = tuple(
    CampaignCase(M, N, dtype) for dtype in (torch.float32, torch.float16) for M, N in CAMPAIGN_SHAPES
)


def inductor_unavailable(device) -> str | None:
    """Why ``torch.compile``'s inductor backend cannot run on ``device`` here, or None when it can.

    On the CPU inductor compiles C++ and needs g++ or clang++ (a bare container may have
    neither); on CUDA it generates Triton kernels and needs nothing more.
    """
    import shutil

    if torch.device(device).type == "cpu" and not (shutil.which("g++") or shutil.which("clang++")):
        return ("torch.compile's inductor backend needs a C++ compiler on the CPU (g++ or clang++), "
                "and this machine has none")
    return None


"""The swap's probe: what a norm-like module computes, judged once on rows of different scales.

A module is a **candidate** when it has a ``weight`` and an epsilon (``eps`` as in ``torch.nn.RMSNorm``
and Gemma, ``variance_epsilon`` as in Llama, Qwen2, Qwen3 and Mistral). :func:`_probe` runs a deep
copy of it, its parameters set to random values first (at init Llama's weights are ones and Gemma's
zeros, so an unrandomised probe could not tell ``w`` from ``1 + w``), on six rows of different scales
(one with mean(x²) ≈ eps, so that where eps is added shows), and holds its output to the float64
oracle ``x · rstd · (weight + offset)`` for each offset of :data:`OFFSETS`, within the declared
tolerance of the probe's dtype (:data:`rmsnorm.testing.TOLERANCES`).

Source: notebooks/13_into_a_model.ipynb.
"""

from __future__ import annotations

import copy
import math

import torch

from .reference import rmsnorm_reference
from .testing import TOLERANCES

#: Seed of the probe's random weights and rows (fixed: a verdict does not change between runs).
PROBE_SEED = 1234
#: Scales of the probe's six rows; the first is replaced by sqrt(eps), where eps matters (with eps = 0, where
#: nothing does, by 1e-3: a row of zeros would be NaN in any norm, and a NaN tells no norm from another).
PROBE_SCALES = (0.0, 1.0, 4.0, 0.25, 30.0, 0.01)
ZERO_EPS_SCALE = 1e-3
EPS_NAMES = ("eps", "variance_epsilon")
#: The offsets a probe tries, in order: y = x · rstd · (weight + offset).
OFFSETS = (0.0, 1.0)



def _eps_of(module):
    for name in EPS_NAMES:
        if hasattr(module, name):
            return True, getattr(module, name)
    return False, None


def _candidate(module) -> bool:
    has_eps, _ = _eps_of(module)
    weight = getattr(module, "weight", 0)
    return has_eps and (isinstance(weight, torch.Tensor) or (weight is None and isinstance(module, torch.nn.RMSNorm)))


def _effective_eps(module) -> float:
    eps = _eps_of(module)[1]
    return torch.finfo(torch.float32).eps if eps is None else float(eps)  # as FastRMSNorm and torch.nn.RMSNorm


def probe_input(n: int, dtype: torch.dtype, eps: float, device="cpu") -> torch.Tensor:
    """The probe: (2, 3, n) rows of different scales with a non-zero mean (LayerNorm differs), one at sqrt(eps)
    (at :data:`ZERO_EPS_SCALE` where eps is 0).

    Returns:
        (2, 3, n) tensor of ``dtype`` on ``device``, the same values on every device (drawn on the CPU, seeded).
    """
    g = torch.Generator().manual_seed(PROBE_SEED)
    scales = torch.tensor((math.sqrt(eps) if eps > 0 else ZERO_EPS_SCALE,) + PROBE_SCALES[1:], dtype=torch.float64)
    x = (torch.randn(len(scales), n, generator=g, dtype=torch.float64) + 0.3) * scales[:, None]
    return x.reshape(2, 3, n).to(device=device, dtype=dtype)


def _randomise(module: torch.nn.Module, seed: int) -> None:
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in module.parameters(recurse=False):  # weight (and a bias, if any): 1 + 0.5·N(0, 1)
            p.copy_((1.0 + 0.5 * torch.randn(p.shape, generator=g)).to(p.dtype))


def randomise_norm_weights(model: torch.nn.Module, seed: int = 0) -> int:
    """Set the parameters of every norm candidate (a module with a weight and an eps) to 1 + 0.5·N(0, 1).

    What a test or a benchmark does before comparing norms: with ones (Llama's init) or zeros
    (Gemma's), ``w`` and ``1 + w`` cannot be told apart. Seeded per module, in tree order.

    Returns:
        The number of modules changed (in place, on their device and dtype).
    """
    count = 0
    for module in model.modules():
        if _candidate(module) and module.weight is not None:
            _randomise(module, seed + count)
            count += 1
    return count


def _alternatives(x64, w64, eps):
    """Formulas a norm might compute instead, in float64: (what it does, y)."""
    rows = lambda t: t.reshape(-1, t.shape[-1])  # noqa: E731
    both = x64 * torch.rsqrt(x64.square().mean((-2, -1), keepdim=True) + eps) * w64
    centred = x64 - x64.mean(-1, keepdim=True)
    return [
        ("it ignores its weight", rmsnorm_reference(x64, torch.ones_like(w64), eps)),
        ("it normalises over more than the last dimension", both),
        ("it subtracts the row's mean (that is LayerNorm)",
         rmsnorm_reference(centred, w64, eps) if centred.shape[-1] > 1 else None),
        ("it adds eps outside the square root", x64 / (x64.square().mean(-1, keepdim=True).sqrt() + eps) * w64),
        ("it uses another eps than its attribute says",
         (rows(x64) * torch.rsqrt(rows(x64).square().mean(-1, keepdim=True)) * w64).reshape(x64.shape)),
    ]


def _probe(module: torch.nn.Module, dtype: torch.dtype | None) -> tuple[str | None, float]:
    """Run a randomised copy on the probe.

    Returns:
        (None, offset) when it computes x · rstd · (weight + offset), else (why not, 0.0).
    """
    twin = copy.deepcopy(module)
    if twin.weight is not None and twin.weight.device.type == "meta":
        twin = twin.to_empty(device="cpu")
    _randomise(twin, PROBE_SEED)
    weight = twin.weight
    dtype = dtype or (weight.dtype if weight is not None else torch.float32)
    n = weight.shape[0] if weight is not None else module.normalized_shape[0]
    eps = _effective_eps(module)
    x = probe_input(n, dtype, eps, device=weight.device if weight is not None else "cpu")
    try:
        with torch.no_grad():
            y = twin(x)
    except Exception as error:  # noqa: BLE001  (any failure is a reason to refuse, reported as such)
        return f"it raised {type(error).__name__} on a {tuple(x.shape)} {dtype} probe: {error}", 0.0
    if not isinstance(y, torch.Tensor) or y.shape != x.shape:
        return f"it returns {type(y).__name__} {tuple(getattr(y, 'shape', ()))} for a {tuple(x.shape)} input", 0.0
    if y.dtype != x.dtype:
        return (f"it returns {y.dtype} for {x.dtype} input (its {weight.dtype} weight promotes the product), "
                f"FastRMSNorm returns the input's dtype; to swap it, cast the model to the activations' dtype "
                f"first (e.g. model.to({x.dtype})), so that the weight is {x.dtype} too"), 0.0
    x64 = x.detach().to("cpu", torch.float64)
    w64 = torch.ones(n, dtype=torch.float64) if weight is None else weight.detach().to("cpu", torch.float64)
    y64, tol = y.detach().to("cpu", torch.float64), TOLERANCES[dtype]
    close = lambda a, b: bool(torch.all((a - b).abs() <= tol["atol"] + tol["rtol"] * b.abs()))  # noqa: E731
    offset = next((o for o in OFFSETS if close(y64, rmsnorm_reference(x64, w64, eps, o))), None)
    if offset is not None and (weight is not None or offset == 0.0):
        return None, offset
    what = next((w for w, alt in _alternatives(x64, w64, eps) if alt is not None and close(y64, alt)), None)
    worst = float((y64 - rmsnorm_reference(x64, w64, eps)).abs().max())
    return ((what + ": " if what else "") + f"its output differs from x · rstd · (weight + offset) (eps = {eps:g}, "
            f"offset {' or '.join(map(str, OFFSETS))}) by up to {worst:.3g} on the probe, beyond {dtype}'s declared "
            f"tolerance (atol {tol['atol']:g}, rtol {tol['rtol']:g})"), 0.0

"""The readable PyTorch reference: the oracle every kernel is checked against.

Two functions, written as in the original article, one line per formula:

    r  = 1 / sqrt(mean(x²) + eps)            (code: ``rstd``)
    y  = x · r · (γ + offset)                 (code: ``weight``; offset 1 is Gemma's ``1 + weight``)
    u  = dy · (γ + offset)
    dx = r · u − x · r³ · mean(u · x)         (mean over the N columns of a row)
    dgamma = Σ_rows dy · x · r                 (sum over the M rows; the offset drops out)

Source: notebooks/01_formula.ipynb and notebooks/02_reference.ipynb; the
RMSNorm paper (Zhang & Sennrich, 2019, arXiv:1910.07467).
"""

from __future__ import annotations

import torch


def rmsnorm_reference(x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6, offset: float = 0.0) -> torch.Tensor:
    """RMSNorm over the last dimension, in PyTorch.

    Dtype policy: float64 input is computed in float64; anything else
    (float32, float16, bfloat16) is computed in float32; the output is cast
    back to ``x.dtype``.

    Args:
        x: (..., N) activations, any floating dtype, any layout.
        weight: (N,) γ, one per column.
        eps: added to mean(x²) before the square root (dimensionless).
        offset: y = x · r · (weight + offset), the sum taken in the computation dtype.

    Returns:
        y: same shape and dtype as ``x``.

    Source: notebooks/02_reference.ipynb.
    """
    dtype = torch.float64 if x.dtype == torch.float64 else torch.float32
    xf = x.to(dtype)
    gf = weight.to(dtype) + offset
    r = torch.rsqrt(xf.square().mean(-1, keepdim=True) + eps)  # (..., 1)
    return (xf * r * gf).to(x.dtype)


def manual_backward(
    x: torch.Tensor, weight: torch.Tensor, dy: torch.Tensor, eps: float = 1e-6, offset: float = 0.0
) -> tuple[torch.Tensor, torch.Tensor]:
    """The article's backward formulas, in the dtype of the arguments.

    No up-cast happens here: pass float64 tensors for an oracle.

    Args:
        x: (..., N) activations.
        weight: (N,) γ.
        dy: gradient of the loss with respect to y, same shape as ``x``.
        eps: as in the forward.
        offset: as in the forward (u = dy · (weight + offset)); dgamma does not depend on it.

    Returns:
        (dx, dgamma): dx has the shape of ``x``; dgamma is (N,), the sum over
        every leading (row) index.

    Source: notebooks/04_backward_derivation.ipynb (derivation of the r³ term)
    and notebooks/05_gamma_reduction.ipynb (sum, not mean).
    """
    r = torch.rsqrt(x.square().mean(-1, keepdim=True) + eps)  # (..., 1)
    u = dy * (weight + offset)  # (..., N)
    dx = r * u - x * r.pow(3) * (u * x).mean(-1, keepdim=True)  # (..., N)
    dgamma = (dy * x * r).reshape(-1, x.shape[-1]).sum(0)  # (N,)
    return dx, dgamma


def backward_from_rstd(
    x: torch.Tensor, weight: torch.Tensor, dy: torch.Tensor, rstd: torch.Tensor, offset: float = 0.0
) -> tuple[torch.Tensor, torch.Tensor]:
    """The backward formulas with a given per-row ``rstd``, as a fused backward sees it.

    A backward kernel reads the forward's saved rstd instead of recomputing
    it; with this reference it is checked on its own, on exactly the rstd it
    was given. No up-cast happens here: pass float64 tensors for an oracle.

    Args:
        x: (M, N) activations.
        weight: (N,) γ.
        dy: (M, N) upstream gradient.
        rstd: (M,) per-row 1 / sqrt(mean(x²) + eps), e.g. the forward's output.

    Returns:
        (dx, dgamma): dx (M, N) = rstd · (u − x̂ · mean(u · x̂)) with
        x̂ = x · rstd, u = dy · weight; dgamma (N,) = Σ_rows dy · x̂.

    Source: notebooks/10_one_pass_backward.ipynb; quack ``rmsnorm_bwd_ref``.
    """
    r = rstd.to(x.dtype).unsqueeze(-1)  # (M, 1)
    x_hat = x * r  # (M, N)
    u = dy * (weight + offset)  # (M, N)
    dx = r * (u - x_hat * (u * x_hat).mean(-1, keepdim=True))  # (M, N)
    dgamma = (dy * x_hat).sum(0)  # (N,)
    return dx, dgamma

"""Wrong variants of exercises 11 and 12: each is a plausible slip, named by its checker with its own message.

Exercise 11 (fake implementations): name → ((fake_forward, fake_backward), substring of the message).
Exercise 12 (reading the benchmark): see :data:`COPY_FRACTION` and :data:`PICK_CONFIG`.

Source: solutions/11_extending_the_contract.ipynb, solutions/12_tuning_and_side_by_side.ipynb.
"""

from __future__ import annotations

import torch

import rmsnorm.fast  # noqa: F401  (registers rmsnorm_fast::forward / ::backward)


# --------------------------------------------------------------------------- exercise 11


def fake_forward(x, gamma, eps):
    return x.new_empty(x.shape), x.new_empty(x.shape[:1], dtype=torch.float32)


def fake_backward(x, gamma, rstd, dy):
    return x.new_empty(x.shape), (x.new_empty(0) if gamma is None else gamma.new_empty(gamma.shape))


def _fwd_skeleton(x, gamma, eps):
    raise NotImplementedError()


def _bwd_skeleton(x, gamma, rstd, dy):
    raise NotImplementedError()


def _fwd_rstd_in_x_dtype(x, gamma, eps):
    return x.new_empty(x.shape), x.new_empty(x.shape[:1])


def _fwd_rstd_keepdim(x, gamma, eps):
    return x.new_empty(x.shape), x.new_empty((x.shape[0], 1), dtype=torch.float32)


def _fwd_promoted_y(x, gamma, eps):
    dtype = x.dtype if gamma is None else torch.promote_types(x.dtype, gamma.dtype)
    return x.new_empty(x.shape, dtype=dtype), x.new_empty(x.shape[:1], dtype=torch.float32)


def _fwd_on_cpu(x, gamma, eps):
    return torch.empty(x.shape, dtype=x.dtype), torch.empty(x.shape[:1], dtype=torch.float32)


def _fwd_launches_kernel(x, gamma, eps):
    return rmsnorm.fast.rmsnorm_fast_forward(x, gamma, eps)


def _fwd_reads_values(x, gamma, eps):
    scale = float(x.float().square().mean().item())  # data: a meta tensor has none
    return x.new_empty(x.shape), x.new_empty(x.shape[:1], dtype=torch.float32) * scale


def _fwd_only_y(x, gamma, eps):
    return x.new_empty(x.shape)


def _bwd_dgamma_in_x_dtype(x, gamma, rstd, dy):
    return x.new_empty(x.shape), (x.new_empty(0) if gamma is None else x.new_empty(gamma.shape))


def _bwd_dgamma_none(x, gamma, rstd, dy):
    return x.new_empty(x.shape), (None if gamma is None else gamma.new_empty(gamma.shape))


def _bwd_dx_in_gamma_dtype(x, gamma, rstd, dy):
    dx = x.new_empty(x.shape) if gamma is None else gamma.new_empty(x.shape)
    return dx, (x.new_empty(0) if gamma is None else gamma.new_empty(gamma.shape))


def _bwd_typo(x, gamma, rstd, dy):
    return x.new_empty(x.shape), gama.new_empty(gamma.shape)  # noqa: F821  (the slip: a misspelt name)


#: Exercise 11: name → ((fake_forward, fake_backward), substring of the expected message).
FAKE = {
    "skeleton": ((_fwd_skeleton, _bwd_skeleton), "not done yet"),
    "backward skeleton": ((fake_forward, _bwd_skeleton), "not done yet"),
    "rstd in x's dtype": ((_fwd_rstd_in_x_dtype, fake_backward), "rstd is float16, expected float32 whatever x's dtype"),
    "rstd (M, 1)": ((_fwd_rstd_keepdim, fake_backward), "rstd has shape (17, 1), expected (17,): one value per row"),
    "y promoted to gamma's dtype": ((_fwd_promoted_y, fake_backward), "y is float32, gamma's dtype; expected x's, bfloat16"),
    "allocated on the CPU": ((_fwd_on_cpu, fake_backward), "y is on cpu, x is on meta. Allocate on x's device"),
    "launches the kernel": ((_fwd_launches_kernel, fake_backward), "ran real work on x (17, 257) float16"),
    "reads values": ((_fwd_reads_values, fake_backward), "never launches the kernel or reads values"),
    "only y": ((_fwd_only_y, fake_backward), "must return a pair (y, rstd)"),
    "dgamma in x's dtype": ((fake_forward, _bwd_dgamma_in_x_dtype), "dgamma is bfloat16, x's dtype; expected gamma's, float32"),
    "dgamma None": ((fake_forward, _bwd_dgamma_none), "dgamma is None. An operator must return tensors"),
    "dx in gamma's dtype": ((fake_forward, _bwd_dx_in_gamma_dtype), "dx is float32, gamma's dtype; expected x's, bfloat16"),
    "typo": ((fake_forward, _bwd_typo), "raised NameError: name 'gama' is not defined (at `return x.new_empty(x.shape), gama"),
}

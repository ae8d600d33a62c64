"""Determinism, poisoned outputs, the scratch limit run for real, and random shapes."""

import pytest
import torch
import triton
import triton.language as tl
from hypothesis import given, settings
from hypothesis import strategies as st

import rmsnorm
from rmsnorm import ContractError
from rmsnorm.article import backward_rows, forward_op, reduce_gamma_gradient
from rmsnorm.testing import assert_close, make_inputs, oracle


def test_dgamma_is_bitwise_deterministic(device):
    x, gamma, dy = make_inputs(300, 257, device=device, seed=7)
    _, rstd = forward_op(x, gamma)
    _, partial = backward_rows(x, gamma, dy, rstd, 1e-6)
    first = reduce_gamma_gradient(partial, torch.float32)
    for _ in range(3):
        assert torch.equal(reduce_gamma_gradient(partial, torch.float32), first)


@triton.jit
def _writes_nothing(x_ptr, gamma_ptr, y_ptr, rstd_ptr, x_row_stride, y_row_stride, N, eps, BLOCK_SIZE: tl.constexpr):
    pass


def test_an_unwritten_output_cannot_pass(device):
    x, gamma, _ = make_inputs(3, 5, device=device)
    y, rstd = forward_op(x, gamma, kernel=_writes_nothing)
    assert torch.isnan(y).all() and torch.isnan(rstd).all()
    try:
        assert_close(y, oracle(x, gamma))
    except AssertionError:
        return
    raise AssertionError("a NaN output passed the comparison")


@pytest.mark.skipif(rmsnorm.interpreter_active(),
                    reason="4096 programs of 4096 lanes take over a minute in the CPU interpreter; runs on the GPU")
def test_largest_allowed_input_4096_x_4096(device):
    x, gamma, dy = make_inputs(4096, 4096, device=device, seed=4)
    y, rstd = forward_op(x, gamma)
    dx, partial = backward_rows(x, gamma, dy, rstd, 1e-6)
    dgamma = reduce_gamma_gradient(partial, torch.float32)
    y64, dx64, dgamma64 = oracle(x, gamma, dy)
    assert_close(y, y64)
    assert_close(dx, dx64)
    assert_close(dgamma, dgamma64)


@settings(max_examples=12, deadline=None)
@given(
    M=st.integers(1, 40),
    N=st.integers(1, 4096),
    half=st.booleans(),
    eps=st.sampled_from([1e-6, 1e-5, 1e-3, 0.5]),
    scale=st.sampled_from([1e-3, 1.0, 30.0]),
)
def test_random_shapes_and_scales(M, N, half, eps, scale):
    dtype = torch.float16 if half else torch.float32
    x, gamma, dy = make_inputs(M, N, torch.float32, seed=M * N)
    x, gamma, dy = (x * scale).to(dtype), gamma.to(dtype), dy.to(dtype)
    y, rstd = forward_op(x, gamma, eps)
    dx, partial = backward_rows(x, gamma, dy, rstd, eps)
    dgamma = reduce_gamma_gradient(partial, dtype)
    y64, dx64, dgamma64 = oracle(x, gamma, dy, eps)
    assert_close(y, y64)
    assert_close(dx, dx64)
    assert_close(dgamma, dgamma64)


def test_backward_rows_takes_epsilon_through_rstd_only(device):
    # backward_rows checks eps but the kernel reads it from rstd: another eps, the same rstd, the same bits.
    x, gamma, dy = make_inputs(17, 257, device=device, seed=3)
    _, rstd = forward_op(x, gamma, 1e-6)
    dx_a, partial_a = backward_rows(x, gamma, dy, rstd, 1e-6)
    dx_b, partial_b = backward_rows(x, gamma, dy, rstd, 0.5)
    assert torch.equal(dx_a, dx_b) and torch.equal(partial_a, partial_b)
    _, rstd_big_eps = forward_op(x, gamma, 0.5)  # eps reaches dx through the forward's rstd
    assert not torch.equal(backward_rows(x, gamma, dy, rstd_big_eps, 0.5)[0], dx_a)
    with pytest.raises(ContractError, match="eps must be finite and > 0"):
        backward_rows(x, gamma, dy, rstd, 0.0)

"""The oracle itself: dtype policy, gradcheck in float64, manual backward == autograd."""

import pytest
import torch

from rmsnorm import manual_backward, rmsnorm_reference


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32, torch.float64])
def test_dtype_policy(dtype):
    g = torch.Generator().manual_seed(1)
    x = torch.randn(5, 33, generator=g).to(dtype)
    gamma = torch.randn(33, generator=g).to(dtype)
    y = rmsnorm_reference(x, gamma)
    assert y.dtype == dtype and y.shape == x.shape
    work = torch.float64 if dtype == torch.float64 else torch.float32
    xf, gf = x.to(work), gamma.to(work)
    expected = (xf * torch.rsqrt(xf.square().mean(-1, keepdim=True) + 1e-6) * gf).to(dtype)
    torch.testing.assert_close(y, expected, atol=0, rtol=0)


def test_gradcheck_float64():
    g = torch.Generator().manual_seed(2)
    x = torch.randn(4, 7, generator=g, dtype=torch.float64, requires_grad=True)
    gamma = torch.randn(7, generator=g, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(rmsnorm_reference, (x, gamma), eps=1e-6, atol=1e-7)


@pytest.mark.parametrize("shape", [(1, 1), (1, 257), (17, 256), (3, 5, 129)])
def test_manual_backward_equals_autograd(shape):
    g = torch.Generator().manual_seed(3)
    x = torch.randn(*shape, generator=g, dtype=torch.float64, requires_grad=True)
    gamma = torch.randn(shape[-1], generator=g, dtype=torch.float64, requires_grad=True)
    dy = torch.randn(*shape, generator=g, dtype=torch.float64)
    rmsnorm_reference(x, gamma).backward(dy)
    dx, dgamma = manual_backward(x.detach(), gamma.detach(), dy)
    torch.testing.assert_close(dx, x.grad, atol=1e-12, rtol=1e-10)
    torch.testing.assert_close(dgamma, gamma.grad, atol=1e-12, rtol=1e-10)


def test_zero_row_is_finite_thanks_to_epsilon():
    y = rmsnorm_reference(torch.zeros(1, 8), torch.ones(8))
    assert torch.equal(y, torch.zeros(1, 8))

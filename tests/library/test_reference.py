"""The oracle itself: dtype policy, gradcheck in float64, manual backward == autograd."""

import pytest
import torch

from rmsnorm import manual_backward, rmsnorm_reference
from rmsnorm.testing import rstd_oracle


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_dtype_policy_low_precision_is_computed_in_float32(dtype):
    g = torch.Generator().manual_seed(1)
    x = torch.randn(5, 33, generator=g).to(dtype)
    gamma = torch.randn(33, generator=g).to(dtype)
    y = rmsnorm_reference(x, gamma)
    assert y.dtype == dtype and y.shape == x.shape
    # The policy: the same values, up-cast to float32 first, give bitwise the same result once cast back.
    assert torch.equal(y, rmsnorm_reference(x.float(), gamma.float()).to(dtype))
    assert not torch.equal(y, _naive_in_dtype(x, gamma))  # and not what computing in the low precision itself gives


def _naive_in_dtype(x, gamma):
    return x * torch.rsqrt(x.square().mean(-1, keepdim=True) + 1e-6) * gamma


def test_dtype_policy_float16_row_that_overflows_when_squared():
    x, gamma = torch.tensor([[300.0, 400.0]], dtype=torch.float16), torch.ones(2, dtype=torch.float16)
    assert torch.equal(_naive_in_dtype(x, gamma), torch.zeros(1, 2, dtype=torch.float16))  # 400² = inf in fp16
    torch.testing.assert_close(rmsnorm_reference(x, gamma), torch.tensor([[0.8485, 1.1314]], dtype=torch.float16))


def test_dtype_policy_float64_stays_float64():
    g = torch.Generator().manual_seed(1)
    x = torch.randn(5, 33, generator=g, dtype=torch.float64)
    gamma = torch.randn(33, generator=g, dtype=torch.float64)
    y = rmsnorm_reference(x, gamma)
    assert y.dtype == torch.float64
    torch.testing.assert_close(y, x * rstd_oracle(x, keepdim=True) * gamma, atol=0, rtol=1e-15)
    assert not torch.equal(y, rmsnorm_reference(x.float(), gamma.float()).double())  # not via float32


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


def test_make_inputs_draws_on_the_cpu_unless_asked_and_honours_the_weight_dtype():
    from rmsnorm.testing import make_inputs

    g = torch.Generator().manual_seed(7)
    x, gamma, dy = make_inputs(3, 5, torch.float16, "cpu", 7)
    torch.testing.assert_close(x, torch.randn(3, 5, generator=g).half(), rtol=0, atol=0)  # the seeded CPU draw
    torch.testing.assert_close(gamma, (1.0 + 0.5 * torch.randn(5, generator=g)).half(), rtol=0, atol=0)
    torch.testing.assert_close(dy, torch.randn(3, 5, generator=g).half(), rtol=0, atol=0)
    x2, gamma2, _ = make_inputs(3, 5, torch.float16, "cpu", 7, weight_dtype=torch.float32, draw_on_device=True)
    assert x2.dtype == torch.float16 and gamma2.dtype == torch.float32 and gamma2.shape == (5,)
    torch.testing.assert_close(gamma2.half(), gamma, rtol=0, atol=0)  # on the CPU the device is the CPU


def test_a_two_step_sum_is_judged_by_its_terms_and_a_real_error_still_fails():
    """Eager's unfused backward: the norm's d h rounded to bf16, then d residual_out added and rounded again."""
    from rmsnorm.testing import assert_close, assert_sum_close

    g = torch.Generator().manual_seed(0)
    dh = 3 * torch.randn(4096, generator=g, dtype=torch.float64)
    d_res = -dh + 1e-3 * torch.randn(4096, generator=g, dtype=torch.float64)  # the two nearly cancel
    two_step = dh.bfloat16() + d_res.bfloat16()  # each term rounded, then the sum rounded
    with pytest.raises(AssertionError):  # |Σ term| is tiny, so the rule for one term refuses the roundings
        assert_close(two_step, dh + d_res, dtype=torch.bfloat16)
    assert_sum_close(two_step, (dh, d_res), dtype=torch.bfloat16)
    wrong = two_step.clone()
    wrong[17] += 0.5  # an error no rounding of these terms makes
    with pytest.raises(AssertionError, match=r"1 of 4096 elements .* worst at \(17,\)"):
        assert_sum_close(wrong, (dh, d_res), dtype=torch.bfloat16, msg="dx")
    wrong[17] = float("nan")
    with pytest.raises(AssertionError, match="worst at \\(17,\\)"):
        assert_sum_close(wrong, (dh, d_res), dtype=torch.bfloat16)

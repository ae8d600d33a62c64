"""The original article's worked numbers, to 6 decimals, on the reference and the kernels."""

import pytest
import torch

from rmsnorm import backward_rows, forward_op, manual_backward, reduce_gamma_gradient, rmsnorm_reference

SIX_DECIMALS = {"atol": 5e-7, "rtol": 0}


def test_reference_3_4(device):
    x = torch.tensor([[3.0, 4.0]], device=device)
    r = torch.rsqrt(x.square().mean(-1) + 1e-6)
    torch.testing.assert_close(r.cpu(), torch.tensor([0.282843]), **SIX_DECIMALS)
    y = rmsnorm_reference(x, torch.ones(2, device=device))
    torch.testing.assert_close(y.cpu(), torch.tensor([[0.848528, 1.131371]]), **SIX_DECIMALS)
    y2 = rmsnorm_reference(x, torch.tensor([2.0, 0.5], device=device))
    torch.testing.assert_close(y2.cpu(), torch.tensor([[1.697056, 0.565685]]), **SIX_DECIMALS)


def test_kernels_3_4(device):
    x = torch.tensor([[3.0, 4.0]], device=device)
    ones = torch.ones(2, device=device)
    y, rstd = forward_op(x, ones)
    torch.testing.assert_close(rstd.cpu(), torch.tensor([0.282843]), **SIX_DECIMALS)
    torch.testing.assert_close(y.cpu(), torch.tensor([[0.848528, 1.131371]]), **SIX_DECIMALS)
    y2, _ = forward_op(x, torch.tensor([2.0, 0.5], device=device))
    torch.testing.assert_close(y2.cpu(), torch.tensor([[1.697056, 0.565685]]), **SIX_DECIMALS)
    dx, partial = backward_rows(x, ones, torch.tensor([[1.0, 2.0]], device=device), rstd, 1e-6)
    torch.testing.assert_close(dx.cpu(), torch.tensor([[-0.090510, 0.067882]]), **SIX_DECIMALS)
    torch.testing.assert_close(partial.cpu(), (torch.tensor([[1.0, 2.0]]) * x.cpu() * 0.2828427), **SIX_DECIMALS)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_manual_backward_dx_1_2(dtype):
    x = torch.tensor([[3.0, 4.0]], dtype=dtype)
    dx, dgamma = manual_backward(x, torch.ones(2, dtype=dtype), torch.tensor([[1.0, 2.0]], dtype=dtype))
    torch.testing.assert_close(dx, torch.tensor([[-0.090510, 0.067882]], dtype=dtype), **SIX_DECIMALS)
    torch.testing.assert_close(dgamma, torch.tensor([0.848528, 2.262742], dtype=dtype), **SIX_DECIMALS)


def test_sum_not_mean_table(device):
    partial = torch.tensor([[1.0, 2.0], [3.0, 4.0]], device=device)
    dgamma = reduce_gamma_gradient(partial, torch.float32)
    assert dgamma.cpu().tolist() == [4.0, 6.0]  # the sum; the mean would be [2, 3]


def test_block_padding_example():
    # [1, 1, 1] in a block of 4: the padding adds 0 to the sum; 3/3 = 1, 3/4 = 0.75.
    padded = torch.tensor([1.0, 1.0, 1.0, 0.0])
    assert padded.square().sum().item() == 3.0
    assert padded.square().sum().item() / 3 == 1.0
    assert padded.square().sum().item() / 4 == 0.75

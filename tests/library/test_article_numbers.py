"""The original article's worked numbers, to 6 decimals, on the reference and the kernels."""

import pytest
import torch

from rmsnorm import manual_backward, rmsnorm_reference
from rmsnorm.article import backward_rows, forward_op, reduce_gamma_gradient
from rmsnorm.testing import rstd_oracle
from rmsnorm_course.teaching.buggy import rmsnorm_forward_kernel_block_mean

SIX_DECIMALS = {"atol": 5e-7, "rtol": 0}


def test_reference_3_4(device):
    x = torch.tensor([[3.0, 4.0]], device=device)
    r = rstd_oracle(x)  # the course's one rstd oracle, float64
    assert r.dtype == torch.float64
    torch.testing.assert_close(r, torch.tensor([0.282843], dtype=torch.float64), **SIX_DECIMALS)
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


def test_block_padding_example(device):
    # [1, 1, 1] in a block of 4: the kernel divides by N = 3 (mean 1), the block-mean bug by 4 (mean 0.75).
    x, ones = torch.ones(1, 3, device=device), torch.ones(3, device=device)
    _, rstd = forward_op(x, ones)
    _, rstd_bug = forward_op(x, ones, kernel=rmsnorm_forward_kernel_block_mean)
    torch.testing.assert_close(
        rstd.cpu().double(), torch.tensor([(1 + 1e-6) ** -0.5], dtype=torch.float64), **SIX_DECIMALS
    )
    torch.testing.assert_close(
        rstd_bug.cpu().double(), torch.tensor([(0.75 + 1e-6) ** -0.5], dtype=torch.float64), **SIX_DECIMALS
    )


def test_the_257_ones_table(device):
    # The article's table, from the kernels: 0.9999995 dividing by N, 1.411458 dividing by BLOCK_SIZE = 512.
    x, ones = torch.ones(1, 257, device=device), torch.ones(257, device=device)
    y, _ = forward_op(x, ones)
    y_bug, _ = forward_op(x, ones, kernel=rmsnorm_forward_kernel_block_mean)
    # 0.9999995 as the article prints it (7 decimals); float32 steps by 6e-8 there, and a GPU's
    # approximate rsqrt may land one step away (seen on the H200: 5.96e-8), so the canary's 1e-7
    torch.testing.assert_close(y.cpu(), torch.full((1, 257), 0.9999995), atol=1e-7, rtol=0)
    torch.testing.assert_close(y_bug.cpu(), torch.full((1, 257), 1.411458), atol=5e-7, rtol=0)

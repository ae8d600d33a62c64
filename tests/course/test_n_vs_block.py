"""The N-vs-BLOCK bug: dividing by BLOCK_SIZE is caught at N = 257, missed at N = 256."""

import difflib
import inspect

import pytest
import torch

import rmsnorm.article
from rmsnorm.article import backward_rows, forward_op
from rmsnorm.testing import assert_close, make_inputs, oracle
from rmsnorm_course.teaching.buggy import PAIRS, rmsnorm_dx_kernel_block_mean, rmsnorm_forward_kernel_block_mean


@pytest.mark.parametrize("correct_name", PAIRS)
def test_each_buggy_kernel_differs_from_the_real_one_by_one_line(correct_name):
    real = inspect.getsource(getattr(rmsnorm.article, correct_name).fn).splitlines()[2:]  # after decorator and def
    bad = inspect.getsource(PAIRS[correct_name].fn).splitlines()[2:]
    changed = [d for d in difflib.ndiff(real, bad) if d[:1] in "+-"]
    assert len(changed) == 2, changed
    assert "/ N" in changed[0] and "/ BLOCK_SIZE" in changed[1]


def test_row_of_257_ones_shows_the_amplification(device):
    ones = torch.ones(1, 257, device=device)
    y_bad, _ = forward_op(ones, torch.ones(257, device=device), kernel=rmsnorm_forward_kernel_block_mean)
    torch.testing.assert_close(y_bad.cpu(), torch.full((1, 257), 1.411458), atol=1e-6, rtol=0)


def _forward_check(N, kernel, device):
    x, gamma, _ = make_inputs(17, N, device=device, seed=N)
    y, _ = forward_op(x, gamma, kernel=kernel)
    assert_close(y, oracle(x, gamma))


def test_forward_bug_missed_at_256(device):
    _forward_check(256, rmsnorm_forward_kernel_block_mean, device)  # passes: N == BLOCK_SIZE


def test_forward_bug_caught_at_257(device):
    with pytest.raises(AssertionError, match="Tensor-likes are not close"):
        _forward_check(257, rmsnorm_forward_kernel_block_mean, device)


def _dx_check(N, kernel, device):
    x, gamma, dy = make_inputs(17, N, device=device, seed=N)
    _, rstd = forward_op(x, gamma)  # correct forward: only the backward is wrong
    dx, _ = backward_rows(x, gamma, dy, rstd, 1e-6, kernel=kernel)
    assert_close(dx, oracle(x, gamma, dy)[1])


def test_dx_bug_missed_at_256(device):
    _dx_check(256, rmsnorm_dx_kernel_block_mean, device)


def test_dx_bug_caught_at_257(device):
    with pytest.raises(AssertionError, match="Tensor-likes are not close"):
        _dx_check(257, rmsnorm_dx_kernel_block_mean, device)

"""Known-answer canary, run first: if this fails, nothing else is worth reading."""

import torch

from rmsnorm import forward_op


def test_row_of_257_ones_gives_0_9999995(device):
    x = torch.ones(1, 257, device=device)
    y, rstd = forward_op(x, torch.ones(257, device=device))
    expected = torch.full((1, 257), 0.9999995)
    torch.testing.assert_close(y.cpu(), expected, atol=1e-7, rtol=0)
    torch.testing.assert_close(rstd.cpu(), torch.tensor([0.9999995]), atol=1e-7, rtol=0)

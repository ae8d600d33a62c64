"""Shared fixtures: the known-answer canary first, and NaN-poisoned kernel outputs."""

import pytest
import torch

import rmsnorm  # noqa: F401  (selects GPU or interpreter before anything else)
from rmsnorm import forward_op
from rmsnorm.device import default_device
from rmsnorm.testing import poisoned_outputs


@pytest.fixture(scope="session", autouse=True)
def _canary():
    """Before any test of this folder (on every xdist worker): a row of 257 ones
    must give 0.9999995. If it doesn't, stop: nothing else is worth reading."""
    device = default_device()
    with poisoned_outputs():
        y, _ = forward_op(torch.ones(1, 257, device=device), torch.ones(257, device=device))
    error = (y.cpu().double() - 0.9999995).abs().max().item()
    if not error <= 1e-7:  # NaN fails too
        pytest.exit(f"canary failed: a row of 257 ones gave {y[0, :3].tolist()}, expected 0.9999995", returncode=1)


@pytest.fixture(autouse=True)
def _poison_outputs():
    with poisoned_outputs():
        yield


@pytest.fixture
def device() -> torch.device:
    return default_device()

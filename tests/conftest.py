"""Shared fixtures: every test runs with NaN-poisoned kernel outputs."""

import pytest
import torch

import rmsnorm  # noqa: F401  (selects GPU or interpreter before anything else)
from rmsnorm.device import default_device
from rmsnorm.testing import poisoned_outputs


@pytest.fixture(autouse=True)
def _poison_outputs():
    with poisoned_outputs():
        yield


@pytest.fixture
def device() -> torch.device:
    return default_device()

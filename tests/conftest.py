"""Shared fixtures: the known-answer canary first, and NaN-poisoned kernel outputs."""

import pytest
import torch

import rmsnorm  # noqa: F401  (selects GPU or interpreter before anything else)
from rmsnorm.device import default_device
from rmsnorm.testing import check_canary, outputs_forbidden, poisoned_outputs

# tests/browser drives JupyterLab in a headless Chromium: only `make test-browser` runs it
# (it names the folder, which collect_ignore does not block).
collect_ignore = ["browser"]


@pytest.fixture(scope="session", autouse=True)
def _canary():
    """Before any test of this folder (on every xdist worker): a row of 257 ones
    must give 0.9999995. If it doesn't, stop: nothing else is worth reading."""
    try:
        check_canary()
    except AssertionError as error:
        pytest.exit(f"canary failed, nothing else is worth reading: {error}", returncode=1)


@pytest.fixture(autouse=True)
def _poison_outputs():
    with poisoned_outputs():
        yield


@pytest.fixture
def device() -> torch.device:
    return default_device()


@pytest.fixture
def no_allocation():
    """Fail the test if a launcher (article's or fast) allocates an output before refusing."""
    with outputs_forbidden():
        yield

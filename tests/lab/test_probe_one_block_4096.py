"""scripts/probe_one_block_4096.py on any machine: what it times is checked against float64 first.

On a CPU the kernels run under Triton's interpreter (tests/conftest.py), at a few rows of 4096 columns.
"""

import pytest
import torch

import checkout_scripts


@pytest.fixture(scope="module")
def probe():
    return checkout_scripts.load("scripts/probe_one_block_4096.py")


def test_every_call_it_times_gives_the_oracles_numbers(probe, device):
    calls = probe.calls(3, 4096, torch.float16, device)
    assert list(calls) == ["LayerNorm one block", "LayerNorm table", "RMSNorm one block", "RMSNorm table"]
    y, mean, rstd = calls["LayerNorm one block"]()
    assert y.shape == (3, 4096) and mean.shape == rstd.shape == (3,)


def test_a_wrong_output_stops_it_before_anything_is_timed(probe, device, monkeypatch):
    real = probe.layernorm_fast_forward

    def off_by_one(*args, **kwargs):
        y, mean, rstd = real(*args, **kwargs)
        return y + 1, mean, rstd

    monkeypatch.setattr(probe, "layernorm_fast_forward", off_by_one)
    with pytest.raises(AssertionError, match="LayerNorm one block forward y"):
        probe.calls(3, 4096, torch.float16, device)

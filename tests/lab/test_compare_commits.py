"""scripts/compare_commits.py on any machine: what each norm's child times is checked against float64 first.

On a CPU the kernels run under Triton's interpreter (tests/conftest.py), at a few rows; the timing needs a GPU.
"""

import pytest
import torch

import checkout_scripts


@pytest.fixture(scope="module")
def script():
    return checkout_scripts.load("scripts/compare_commits.py")


@pytest.mark.parametrize("norm", ["rmsnorm", "layernorm", "rmsnorm_add"])
def test_each_norms_calls_pass_their_check_and_give_every_pass(script, norm):
    calls = script._checked_calls(norm, 6, 96, torch.float32, torch.float32)
    assert set(calls) == set(script.PASSES)
    assert all(out is not None for out in (calls["forward"](), calls["backward"]()))


def test_a_wrong_output_stops_the_child_before_anything_is_timed(script, monkeypatch):
    import rmsnorm.forward

    real = rmsnorm.forward.launch_add_forward

    def shifted(*args, **kwargs):
        y, h, rstd = real(*args, **kwargs)
        return y + 1e-2, h, rstd

    monkeypatch.setattr(rmsnorm.forward, "launch_add_forward", shifted)
    with pytest.raises(AssertionError):
        script._checked_calls("rmsnorm_add", 6, 96, torch.float32, torch.float32)


def test_its_written_out_grids_are_the_labs(script):
    from rmsnorm_lab.fused_add_bench import GRID as ADD_GRID
    from rmsnorm_lab.layernorm_bench import GRID as LAYERNORM_GRID
    from rmsnorm_lab.sidebyside import GRID

    def names(*dtypes):
        return tuple(str(d).removeprefix("torch.") for d in dtypes)

    assert script.GRID == tuple((M, N, *names(d)) for M, N, d in GRID)
    assert script.GRIDS["layernorm"] == tuple((M, N, *names(d, w)) for M, N, d, w in LAYERNORM_GRID)
    assert script.GRIDS["rmsnorm_add"] == tuple((M, N, *names(d, d)) for M, N, d in ADD_GRID)
    assert script.GRIDS["rmsnorm"][:len(GRID)] == tuple((M, N, *names(d, d)) for M, N, d in GRID)

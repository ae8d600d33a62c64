"""scripts/probe_inductor_code.py on any machine: its shapes, its refusal of bad ones, its rows, no GPU said.

What it reads on a GPU (Inductor's generated modules and autotuned kernels) is stood in for by a module holding
one fake autotuner, of the class the script recognises.
"""

import types

import pytest
import torch
from torch._inductor.runtime import triton_heuristics

import checkout_scripts


@pytest.fixture(scope="module")
def probe():
    return checkout_scripts.load("scripts/probe_inductor_code.py")


def test_at_names_dtypes_and_shapes(probe):
    assert probe.parse_at("bfloat16:16384x4097,65536x257;float32:7x3") == [
        (torch.bfloat16, 16384, 4097), (torch.bfloat16, 65536, 257), (torch.float32, 7, 3)]


@pytest.mark.parametrize("text, match", [("half:3x4", "not 'dtype:MxN"), ("float16:3x0", "3x0"),
                                         ("float16:3", "'3' is not MxN"), ("", "no shape")])
def test_a_bad_shape_is_refused_by_name_before_anything_runs(probe, text, match, capsys):
    with pytest.raises(ValueError, match=match):
        probe.parse_at(text)
    with pytest.raises(SystemExit) as exit_:
        probe.main(["--out", "/nonexistent/never-made", "--at", text])
    assert exit_.value.code == 2 and "--at" in capsys.readouterr().err


def test_each_kept_launcher_is_one_row(probe, monkeypatch):
    class Autotuner:  # what CachingAutotuner holds after its first run: the kept launchers, the candidates
        def __init__(self, launchers, configs):
            self.launchers, self.configs = launchers, configs

    config = types.SimpleNamespace(kwargs={"XBLOCK": 1, "R0_BLOCK": 2048}, num_warps=16, num_stages=1)
    launcher = types.SimpleNamespace(config=config, n_regs=40, n_spills=0)
    module = types.SimpleNamespace(triton_red_fused_0=Autotuner([launcher], [config] * 5), other=3)
    monkeypatch.setattr(triton_heuristics, "CachingAutotuner", Autotuner)
    assert probe.kernel_rows([module], "bfloat16_4x8") == [dict(
        shape="bfloat16_4x8", kernel="triton_red_fused_0", kwargs={"XBLOCK": 1, "R0_BLOCK": 2048}, num_warps=16,
        num_stages=1, n_regs=40, n_spills=0, candidates=5)]
    # torch 2.11's autotuner drops its candidates once it has benchmarked them: the count is then unknown, not 0
    module.triton_red_fused_0.configs = None
    assert probe.kernel_rows([module], "bfloat16_4x8")[0]["candidates"] is None


@pytest.mark.skipif(torch.cuda.is_available(), reason="on a GPU the script compiles and writes")
def test_without_a_gpu_it_says_so_and_writes_nothing(probe, tmp_path, capsys):
    assert probe.main(["--out", str(tmp_path / "out")]) == 0
    assert "no CUDA GPU" in capsys.readouterr().out and not (tmp_path / "out").exists()


@pytest.mark.parametrize("norm, weight_dtype, names", [
    ("rmsnorm", None, ("x", "weight")), ("rmsnorm", torch.float32, ("x", "weight")),
    ("layernorm", torch.float32, ("x", "weight", "bias")), ("layernorm", None, ("x", "weight", "bias"))])
def test_each_norm_compiles_torchs_own_call_on_leaves_in_the_declared_dtypes(probe, norm, weight_dtype, names):
    import torch.nn.functional as F

    fn, leaves, dy = probe.step_of(norm, 5, 24, torch.float16, weight_dtype, "cpu")
    assert len(leaves) == len(names) and all(t.is_leaf and t.requires_grad for t in leaves)
    assert leaves[0].dtype == dy.dtype == torch.float16 and leaves[0].shape == dy.shape == (5, 24)
    assert all(t.dtype == (weight_dtype or torch.float16) and t.shape == (24,) for t in leaves[1:])
    x, *params = (t.detach().double() for t in leaves)
    want = (F.layer_norm(x, (24,), *params, 1e-5) if norm == "layernorm" else F.rms_norm(x, (24,), *params, 1e-6))
    torch.testing.assert_close(fn(x, *params), want)  # torch's own call, on the leaves it is given


def test_the_norm_and_the_weight_dtype_are_refused_by_name(probe, capsys):
    for bad in (["--norm", "groupnorm"], ["--weight-dtype", "half"]):
        with pytest.raises(SystemExit) as exit_:
            probe.main(["--out", "/nonexistent/never-made", *bad])
        assert exit_.value.code == 2 and bad[0] in capsys.readouterr().err

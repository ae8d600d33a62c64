"""What eager F.rms_norm runs: the provenance dict, its place in every environment file, forcing aten."""

import json
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

import rmsnorm_lab as lab
from rmsnorm_lab import eager
from rmsnorm_lab.providers import pass_calls, prepare, provider

ROOT = Path(__file__).resolve().parents[2]
KEYS = {"torch", "torch_native", "native_registered", "native_active", "cutlass_importable", "tvm_ffi_importable",
        "compute_capability", "verdict"}


@pytest.mark.skipif(torch.cuda.is_available(), reason="the CPU machine's verdict")
def test_without_cuda_eager_is_aten_and_the_native_provider_says_why_not():
    info = eager.eager_provenance()
    assert set(info) == KEYS and info["verdict"] == "aten" and info["compute_capability"] is None
    assert info["torch"] == torch.__version__ and info["torch_native"] == (eager.native_registry() is not None)
    x, gamma = torch.randn(4, 8), torch.rand(8)
    why = provider("eager_native").refuses(x, gamma, 1e-6)
    assert why.endswith("no CUDA GPU") if info["torch_native"] else why.endswith("eager F.rms_norm is aten")
    assert prepare(provider("eager_native"), pass_calls, x, gamma, torch.randn(4, 8)) == (None, f"refused: {why}")


def test_the_environment_record_says_what_eager_runs():
    assert lab.environment_info()["eager_rms_norm"] == eager.eager_provenance()


def _simulate(monkeypatch, nodes, capability, cutlass=True):
    monkeypatch.setattr(eager, "_override_nodes", lambda *args: nodes)
    monkeypatch.setattr(eager, "_found", lambda module: cutlass)
    monkeypatch.setattr(eager, "_capability", lambda: capability)
    return eager.eager_provenance()


def test_torch_native_with_cutlass_on_sm90_is_native_quack(monkeypatch):
    info = _simulate(monkeypatch, [SimpleNamespace(active=True)], (9, 0))
    assert info["verdict"] == "native-quack" and info["compute_capability"] == "9.0"
    assert info["native_registered"] and info["native_active"] and info["cutlass_importable"]
    assert set(info) == KEYS | {"native_when"} and "odd N in 16-bit dtypes" in info["native_when"]
    assert _simulate(monkeypatch, [SimpleNamespace(active=True)], (10, 0))["verdict"] == "native-quack"


@pytest.mark.parametrize("nodes, capability, cutlass, why", [
    (None, (9, 0), True, "no torch._native (torch 2.11)"),
    ([], (9, 0), True, "not registered"),
    ([SimpleNamespace(active=False)], (9, 0), True, "switched off (force_aten)"),
    ([SimpleNamespace(active=True)], (8, 0), True, "A100"),
    ([SimpleNamespace(active=True)], (12, 0), True, "SM120"),
    ([SimpleNamespace(active=True)], None, True, "no CUDA"),
    ([SimpleNamespace(active=True)], (9, 0), False, "no nvidia-cutlass-dsl"),
])
def test_every_missing_condition_leaves_eager_on_aten(monkeypatch, nodes, capability, cutlass, why):
    info = _simulate(monkeypatch, nodes, capability, cutlass)
    assert info["verdict"] == "aten" and "native_when" not in info
    assert info["torch_native"] == (nodes is not None)


def test_the_native_provider_names_what_is_missing(monkeypatch):
    _simulate(monkeypatch, [SimpleNamespace(active=True)], (8, 0))
    reason = eager.native_refuses(torch.zeros(2, 8), torch.ones(8), 1e-6)
    assert reason.endswith("compute capability 8.0 is not 9.x or 10.x")
    monkeypatch.setattr(eager, "native_registry", lambda: None)
    monkeypatch.setattr(eager, "eager_provenance", lambda: {"verdict": "aten", "torch_native": False,
                                                            "torch": "2.11.0+cu130"})
    assert eager.native_refuses(torch.zeros(2, 8), torch.ones(8), 1e-6) == (
        "torch 2.11.0+cu130 has no torch._native: eager F.rms_norm is aten")


def _states():
    return [(key, [n.active for n in nodes]) for key, nodes in getattr(eager.native_registry(), "_graphs", {}).items()]


def test_force_aten_without_an_active_override_changes_nothing():
    before = _states()
    with eager.force_aten():
        x, w = torch.randn(3, 8), torch.rand(8)
        torch.testing.assert_close(torch.nn.functional.rms_norm(x, (8,), w, 1e-6),
                                   x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * w)
    assert _states() == before


#: In a child process (it changes torch's dispatcher): a stand-in override of aten::_fused_rms_norm at
#: the CPU key, registered through torch._native's own registry, answering 7 everywhere.
_FORCE_ATEN = """
import torch, torch.nn.functional as F
from torch._native import registry
from rmsnorm_lab.eager import force_aten, _override_nodes
impl = lambda x, shape, w, eps: (torch.full_like(x, 7.0), torch.ones(*x.shape[:-1], 1))
registry.register_op_override("lab_test", "aten", "_fused_rms_norm", "CPU", cond=lambda *a, **k: True, impl=impl)
registry.reenable_op_overrides(enable_op_symbols="_fused_rms_norm")
x, w = torch.randn(3, 8), torch.rand(8)
want = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * w
states = [bool((F.rms_norm(x, (8,), w, 1e-6) == 7).all())]
with force_aten():
    torch.testing.assert_close(F.rms_norm(x, (8,), w, 1e-6), want)
    states.append(any(n.active for n in _override_nodes("_fused_rms_norm", None)))
states.append(bool((F.rms_norm(x, (8,), w, 1e-6) == 7).all()))
print(states)
"""


@pytest.mark.skipif(eager.native_registry() is None, reason="this torch has no torch._native (2.11 and older)")
def test_force_aten_switches_torch_natives_override_off_and_back_on():
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TORCH_DISABLE_NATIVE_JIT": "0"}
    done = subprocess.run([sys.executable, "-c", _FORCE_ATEN], capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip().splitlines()[-1] == "[True, False, True]"  # override, aten inside, override again


def test_every_script_that_writes_an_environment_file_records_eager():
    writers = [p for p in sorted((ROOT / "scripts").glob("*.py")) if "environment" in p.read_text(encoding="utf-8")
               and (".json" in p.read_text(encoding="utf-8") or "ENVIRONMENT" in p.read_text(encoding="utf-8"))]
    assert len(writers) >= 6
    for script in writers:
        text = script.read_text(encoding="utf-8")
        # a script may hand its environment file to rmsnorm_lab.peer_cli, which starts from environment_info
        assert any(name in text for name in ("environment_info", "eager_provenance", "peer_cli.run")), script.name
    assert "environment_info()" in (ROOT / "rmsnorm_lab" / "peer_cli.py").read_text(encoding="utf-8")


def test_the_committed_runs_used_torch_2_11_whose_eager_is_aten():
    """Every card's committed run (results/h200, results/h100) records what eager was: aten on torch 2.11."""
    files = sorted((ROOT / "results").glob("*/*environment*.json"))
    assert {f.parent.name for f in files} >= {"h200", "h100"}
    for file in files:
        env = json.loads(file.read_text(encoding="utf-8"))
        assert env["torch"].startswith("2.11") and env["eager_rms_norm"]["verdict"] == "aten", file.name

"""scripts/benchmark.py end to end on any machine: the GPU timers replaced by stand-ins.

The script's glue (checks, protocol, sweep, files, environment) is what runs on the H200; here it
runs on the CPU with fixed fake times, so that what it writes can be read back by load_results and
passes the same consistency checks as the committed results. The numbers are fakes, never compared
with anything measured.
"""

import numpy as np
import pandas as pd
import pytest

import checkout_scripts
import rmsnorm_lab as bench
from rmsnorm_lab import runs


def _load_script():
    return checkout_scripts.load("scripts/benchmark.py")


@pytest.fixture
def script(monkeypatch):
    module = _load_script()
    monkeypatch.setattr(bench, "require_cuda", lambda: None)
    monkeypatch.setattr(runs, "require_cuda", lambda: None)
    monkeypatch.setattr(runs, "time_whole_calls", lambda fn, **kw: (fn(), np.linspace(40.0, 60.0, bench.SAMPLES))[1])
    monkeypatch.setattr(runs, "time_graph_replay", lambda fn, **kw: 3.0)
    profile = bench.KernelProfile(
        device_us=2.5, ops_per_call=2.0, by_name={"a": (1.0, 1.0), "b": (1.0, 1.5)}, l2_cold=False
    )
    monkeypatch.setattr(runs, "profile_kernels", lambda fn, **kw: profile)
    monkeypatch.setattr(runs, "kernel_time_us", lambda fn, **kw: 4.0)
    monkeypatch.setattr(bench, "copy_bandwidth_gbps", lambda: 4000.0)
    monkeypatch.setattr(
        module, "check_flush", lambda: {"read_bytes": 1, "warm_us": 1.0, "cold_us": 2.0, "evicts": True}
    )
    return module


@pytest.mark.slow
def test_quick_run_writes_results_that_load_and_add_up(script, tmp_path):
    assert script.main(["--quick", "--no-liger", "--out", str(tmp_path)]) == 0
    results = bench.load_results(tmp_path)
    assert results.l2_cold and set(zip(results.sweep["M"], results.sweep["N"])) == {bench.DEFAULT_SHAPE}
    pd.testing.assert_frame_equal(bench.recompute_rates(results.sweep), results.sweep, check_exact=False, rtol=1e-5)
    np.testing.assert_allclose(results.sweep["gbps_cold"], results.sweep["bytes"] / 4.0e3, rtol=1e-6)
    assert set(results.sweep["provider"]) == {"article", "reference"} and len(results.samples) == 4 * bench.SAMPLES
    pd.testing.assert_frame_equal(bench.summarize(results.samples), results.summary, check_exact=False, rtol=1e-5)
    env = results.environment
    assert env["quick"] is True and env["check_failures"] == [] and env["protocol"]["bytes"] == bench.BYTE_CONVENTION
    assert env["l2_flush_check"]["evicts"] and "kernel_time_us" in env["protocol"]["l2_cold"]
    totals = results.kernels.groupby(["path", "provider"])["us_per_call"].sum()
    np.testing.assert_allclose(totals, 2.5)  # the kernel table adds up to device_us


def test_without_cuda_the_script_says_so_and_exits_2(capsys):
    module = _load_script()
    if bench.timing.torch.cuda.is_available():
        pytest.skip("this machine has CUDA: the refusal is for machines without one")
    assert module.main(["--quick"]) == 2
    assert "needs a CUDA GPU" in capsys.readouterr().out

"""scripts/benchmark_fused_add.py and rmsnorm_lab.fused_add_bench on any machine: the GPU timers replaced by fakes.

What runs on the H200 is the glue: the providers, the oracle check in front of every timing, the declared bytes,
the rows of both CSVs and the environment file. Here it runs on the CPU (Triton's interpreter) at small shapes
with fixed fake times, which are never compared with anything measured.
"""

import importlib.util
import json
import math

import numpy as np
import pandas as pd
import pytest
import torch

import checkout_scripts
from rmsnorm_lab import fused_add_backward_bytes, fused_add_forward_bytes, timing, wholecall
from rmsnorm_lab import fused_add_bench as bench

FAKE = {"us": 4.0, "whole_call_us": 40.0, "host_us": 30.0, "kernel_us": 5.0}
#: Small shapes for the CPU: fp32 (the fast path runs under the interpreter) and bf16 (the interpreter refuses it).
SHAPES = ((3, 257, torch.float32), (2, 64, torch.bfloat16))
CPU_PROVIDERS = ("fast_fused", "fast_unfused", "liger", "quack", "eager")


def _load_script():
    return checkout_scripts.load("scripts/benchmark_fused_add.py")


@pytest.fixture
def fake_timers(monkeypatch):
    monkeypatch.setattr(timing, "require_cuda", lambda: None)
    monkeypatch.setattr(wholecall, "require_cuda", lambda: None)
    monkeypatch.setattr(bench, "kernel_time_us", lambda fn, **kw: (fn(), FAKE["us"])[1])
    monkeypatch.setattr(wholecall, "time_whole_calls", lambda fn, **kw: (fn(), np.full(3, FAKE["whole_call_us"]))[1])
    monkeypatch.setattr(wholecall, "time_host_calls", lambda fn, **kw: (fn(), np.full(3, FAKE["host_us"]))[1])
    monkeypatch.setattr(wholecall, "kernel_time_us", lambda fn, **kw: FAKE["kernel_us"])
    monkeypatch.setattr(bench, "GRID", SHAPES)
    monkeypatch.setattr(bench, "WHOLE_CALL_SHAPES", SHAPES[:1])


def test_without_cuda_the_script_says_so_in_one_line_and_writes_nothing(capsys, tmp_path):
    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA: the refusal is for machines without one")
    assert _load_script().main(["--out", str(tmp_path / "out")]) == 0
    out = capsys.readouterr().out.strip().splitlines()
    assert out == ["benchmark_fused_add: no CUDA GPU here, nothing timed"] and not (tmp_path / "out").exists()


@pytest.mark.parametrize("argv, message", [(["--providers", "fast,eager"], "--providers: fast unknown"),
                                           (["--parts", "model"], "--parts: model unknown"),
                                           (["--calls", "0"], "must be at least 1"),
                                           (["--kernel-share", "1.5"], "--kernel-share must be in (0, 1]")])
def test_a_wrong_option_is_refused_before_anything_runs(argv, message, tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_:
        _load_script().main(["--out", str(tmp_path / "out"), *argv])
    assert exit_.value.code == 2 and message in capsys.readouterr().err and not (tmp_path / "out").exists()


def _peer_status(module: str) -> str:
    return "ok" if torch.cuda.is_available() and importlib.util.find_spec(module) else "refused: "


def test_the_run_writes_checked_rows_with_the_declared_bytes_and_names_the_refused_peers(fake_timers, tmp_path):
    assert _load_script().main(["--out", str(tmp_path), "--providers", ",".join(CPU_PROVIDERS)]) == 0
    kernel = pd.read_csv(tmp_path / "fused_add_kernel.csv")
    assert list(kernel.columns) == list(bench.KERNEL_COLUMNS)
    assert len(kernel) == len(SHAPES) * len(CPU_PROVIDERS) * len(bench.PASSES)
    status = kernel.groupby(["M", "provider"], sort=False)["check"].first()
    assert (status[3][["fast_fused", "fast_unfused", "eager"]] == "ok").all(), status
    bf16 = "ok" if torch.cuda.is_available() else "refused: the fast path's contract"  # the interpreter has no bf16
    assert status[2]["eager"] == "ok" and status[2]["fast_fused"].startswith(bf16), status[2]
    for name, module in (("liger", "liger_kernel"), ("quack", "quack")):  # absent here: refused with the reason
        assert status[3][name].startswith(_peer_status(module)), status[3][name]
    for row in kernel.itertuples():
        count = fused_add_forward_bytes if row.pass_ == "forward" else fused_add_backward_bytes
        dtype = getattr(torch, row.dtype)
        assert row.bytes == count(row.M, row.N, dtype, dtype)  # one convention, for every provider
    ok = kernel[kernel["check"] == "ok"]
    assert (ok["us"] == FAKE["us"]).all() and np.allclose(ok["gbps"], ok["bytes"] / FAKE["us"] / 1e3, rtol=1e-3)
    assert kernel.loc[kernel["check"] != "ok", ["us", "gbps"]].isna().all().all()

    whole = pd.read_csv(tmp_path / "fused_add_whole_call.csv")
    assert list(whole.columns) == list(bench.WHOLE_CALL_COLUMNS)
    assert set(whole["pass_"]) == set(bench.WHOLE_CALL_PASSES) and len(whole) == 2 * len(CPU_PROVIDERS)
    ok = whole[whole["check"] == "ok"]
    assert set(ok["provider"]) >= {"fast_fused", "fast_unfused", "eager"}
    assert (ok[["whole_call_us", "host_us", "kernel_us"]] == [FAKE[c] for c in ("whole_call_us", "host_us",
                                                                                  "kernel_us")]).all().all()
    assert whole.loc[whole["check"] != "ok", ["whole_call_us", "host_us"]].isna().all().all()

    env = json.loads((tmp_path / "fused_add_environment.json").read_text())
    assert env["fused_add"]["complete"] and env["eager_rms_norm"]["verdict"] in ("aten", "native-quack")
    assert set(env["fused_add"]["providers"]) == set(CPU_PROVIDERS)
    assert any(line.startswith("liger: refused") for line in env["fused_add"]["not_timed"]) or torch.cuda.is_available()


def test_a_spent_budget_leaves_the_providers_out_with_the_reason(fake_timers):
    rows = bench.kernel_rows(SHAPES[:1], ("eager",), deadline=0.0, device="cpu", log=lambda line: None)
    assert [r["check"] for r in rows] == [wholecall.OUT_OF_TIME] * 2 and all(math.isnan(r["us"]) for r in rows)


def _wrong(what):
    """add_then_norm with one mistake: y scaled by 1.01, or residual_out cut from its gradient (× 0)."""
    def fn(x, residual, weight, eps=bench.EPS):
        h = x + residual
        y = torch.nn.functional.rms_norm(h, (h.shape[-1],), weight, eps)
        return (y * 1.01, h) if what == "y" else (y, h.detach() + 0.0 * h)
    return fn


@pytest.mark.parametrize("what, verdict", [("y", "wrong: AssertionError: eager forward y"),
                                           ("residual_grad", "wrong: AssertionError: eager backward dx")])
def test_a_wrong_output_or_a_dropped_gradient_is_caught_before_timing(what, verdict, fake_timers, monkeypatch):
    monkeypatch.setattr(bench, "add_then_norm", _wrong(what))
    rows = bench.kernel_rows(SHAPES[:1], ("eager",), device="cpu", log=lambda line: None)
    assert all(r["check"].startswith(verdict) for r in rows), rows[0]["check"]
    assert all(math.isnan(r["us"]) for r in rows)


@pytest.mark.slow
def test_compile_passes_the_oracle_on_the_cpu():
    if bench.refuses("compile", torch.zeros(1, 8), torch.ones(8)):
        pytest.skip("no C++ compiler for inductor here")
    calls, status = bench.prepare("compile", *bench.inputs(3, 257, torch.float32, "cpu"), bench.PASSES)
    assert status == "ok" and set(calls) == set(bench.PASSES)


# The committed run (results/h200), once the H200's files are in.
from rmsnorm_lab import RESULTS_DIR  # noqa: E402

committed = pytest.mark.skipif(not (RESULTS_DIR / "fused_add_kernel.csv").is_file(),
                               reason="results/h200/fused_add_kernel.csv not committed yet")


@committed
def test_every_committed_time_was_checked_first_and_charged_the_declared_bytes():
    kernel = pd.read_csv(RESULTS_DIR / "fused_add_kernel.csv")
    assert list(kernel.columns) == list(bench.KERNEL_COLUMNS) and set(kernel["provider"]) <= set(bench.PROVIDERS)
    grid = {(m, n, str(d).removeprefix("torch.")) for m, n, d in bench.GRID}
    assert set(map(tuple, kernel[["M", "N", "dtype"]].drop_duplicates().to_numpy().tolist())) <= grid
    ok = kernel["check"] == "ok"
    assert (kernel.loc[ok, "us"] > 0).all() and kernel.loc[~ok, "us"].isna().all()
    assert (kernel.loc[kernel["provider"] == "fast_fused", "check"] == "ok").all()  # ours never fails the oracle
    for row in kernel.itertuples():
        count = fused_add_forward_bytes if row.pass_ == "forward" else fused_add_backward_bytes
        assert row.bytes == count(row.M, row.N, getattr(torch, row.dtype), getattr(torch, row.dtype))
    assert np.allclose(kernel.loc[ok, "gbps"], kernel.loc[ok, "bytes"] / kernel.loc[ok, "us"] / 1e3, rtol=1e-3)
    whole = pd.read_csv(RESULTS_DIR / "fused_add_whole_call.csv")
    timed = whole["check"] == "ok"
    assert (whole.loc[timed, ["whole_call_us", "host_us"]] > 0).all().all()
    assert whole.loc[~timed, ["whole_call_us", "host_us"]].isna().all().all()
    env = json.loads((RESULTS_DIR / "fused_add_environment.json").read_text())
    assert env["eager_rms_norm"]["verdict"] and set(env["fused_add"]["providers"]) == set(kernel["provider"])


@committed
def test_the_committed_fused_op_costs_at_most_085_of_the_unfused_form_at_every_shape():
    """Issue 39: one launch each way instead of the add's and the norm's, kernel time forward + backward."""
    from rmsnorm_lab.pages import fused_add_ratios, fused_over_unfused

    ratio = fused_over_unfused(fused_add_ratios(pd.read_csv(RESULTS_DIR / "fused_add_kernel.csv")))["ratio"]
    assert len(ratio) >= len(bench.MAIN_GRID) - 2 and (ratio <= 0.85).all(), ratio.sort_values().tail()

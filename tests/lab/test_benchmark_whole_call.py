"""scripts/benchmark_whole_call.py and rmsnorm_lab.wholecall on any machine: the GPU timers replaced by stand-ins.

What runs on the H200 is the glue: the provider list, the oracle check in front of every
timing, the rows of whole_call.csv, the targets and the tables. Here it runs on the CPU (Triton's
interpreter) with fixed fake times, which are never compared with anything measured.
"""

import importlib.util
import math

import numpy as np
import pandas as pd
import pytest
import torch

import checkout_scripts
from rmsnorm_lab import RESULTS_DIR, load_whole_call, timing, wholecall

FAKE = {"whole_call_us": 40.0, "host_us": 30.0, "kernel_us": 4.0, "graph_us": 5.0}


def _load_script():
    return checkout_scripts.load("scripts/benchmark_whole_call.py")


@pytest.fixture
def fake_timers(monkeypatch):
    monkeypatch.setattr(timing, "require_cuda", lambda: None)
    monkeypatch.setattr(wholecall, "require_cuda", lambda: None)
    monkeypatch.setattr(wholecall, "time_whole_calls", lambda fn, **kw: (fn(), np.full(3, FAKE["whole_call_us"]))[1])
    monkeypatch.setattr(wholecall, "time_host_calls", lambda fn, **kw: (fn(), np.full(3, FAKE["host_us"]))[1])
    monkeypatch.setattr(wholecall, "kernel_time_us", lambda fn, **kw: FAKE["kernel_us"])
    monkeypatch.setattr(wholecall, "time_graph_replay", lambda fn, **kw: FAKE["graph_us"])
    monkeypatch.setattr(wholecall, "SHAPES", ((3, 257, torch.float32),))


def test_help_names_every_option():
    done = _load_script()
    with pytest.raises(SystemExit) as exit_:
        done.main(["--help"])
    assert exit_.value.code == 0


def test_without_cuda_the_script_says_so_in_one_line_and_exits_0(capsys):
    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA: the refusal is for machines without one")
    assert _load_script().main([]) == 0
    out = capsys.readouterr().out.strip().splitlines()
    assert len(out) == 1 and out[0].startswith("benchmark_whole_call: no CUDA GPU here, nothing timed")


@pytest.mark.slow
def test_the_run_writes_checked_rows_and_says_why_a_provider_was_not_timed(fake_timers, tmp_path, capsys):
    providers = "fast,floor,article,eager,liger,quack"
    assert _load_script().main(["--out", str(tmp_path), "--providers", providers]) == 0
    table = load_whole_call(tmp_path)
    assert list(table.columns) == list(wholecall.COLUMNS)
    assert len(table) == 6 * len(wholecall.WHOLE_CALL_PASSES)
    status = table.groupby("provider", sort=False)["check"].first()
    assert (status[["fast", "floor", "article", "eager"]] == "ok").all(), status
    for name, module in (("liger", "liger_kernel"), ("quack", "quack")):
        if torch.cuda.is_available() and importlib.util.find_spec(module) is not None:
            assert status[name] == "ok", status[name]
        else:  # not installed here, or not on a GPU: recorded with the reason, never faked
            assert status[name].startswith("refused: "), status[name]
    ok = table[table["check"] == "ok"]
    assert (ok["whole_call_us"] == FAKE["whole_call_us"]).all() and (ok["host_us"] == FAKE["host_us"]).all()
    assert set(ok.loc[ok["kernel_us"].notna(), "pass_"]) == set(wholecall.KERNEL_PASSES)
    assert set(ok.loc[ok["graph_us"].notna(), "provider"]) == set(wholecall.GRAPH_PROVIDERS)
    assert table.loc[table["check"] != "ok", ["whole_call_us", "host_us"]].isna().all().all()
    assert (tmp_path / "whole_call_environment.json").is_file()
    assert "not timed:" in capsys.readouterr().out.splitlines()[-1]


def test_a_spent_budget_leaves_the_remaining_providers_out_with_the_reason(fake_timers):
    rows = wholecall.measure_shape(3, 257, torch.float32, ("eager",), deadline=0.0, log=lambda line: None)
    assert {r["check"] for r in rows} == {wholecall.OUT_OF_TIME}
    assert all(math.isnan(r["whole_call_us"]) for r in rows)


def _table(times: dict) -> pd.DataFrame:
    """A whole_call table at 64 × 4096 bf16 with the given (provider, pass_) → (whole, host, graph) µs."""
    return pd.DataFrame([dict(M=64, N=4096, dtype="bfloat16", provider=p, pass_=s, whole_call_us=w, host_us=h,
                              graph_us=g, kernel_us=1.0, check="ok") for (p, s), (w, h, g) in times.items()])


def test_targets_compare_the_fast_path_with_its_floor_and_with_eager():
    nan = float("nan")
    table = _table({("fast", "forward"): (20, 14, 3), ("floor", "forward"): (15, 10, nan),
                    ("fast", "forward_grad"): (30, 20, nan), ("floor", "forward_grad"): (20, 12, nan),
                    ("fast", "forward_backward"): (100, 90, 8), ("eager", "forward_backward"): (80, 50, 9),
                    ("compile", "forward_backward"): (120, 100, nan)})
    met = wholecall.targets(table).set_index("target")["met"]
    assert met["host, forward ≤ floor + 5 µs"] is True  # 14 ≤ 10 + 5
    assert met["host, forward_grad ≤ floor + 5 µs"] is False  # 20 > 12 + 5
    assert met["host, forward + backward ≤ 1.5 × eager"] is False  # 90 > 75
    assert met["CUDA graph, forward + backward ≤ 1.0 × eager's graph"] is True
    assert met["whole call, forward + backward ≤ 1.5 × eager"] is True  # 64 × 4096 is host-bound: 100 ≤ 120
    assert met["whole call, forward + backward < compile"] is True
    assert met["whole call, forward + backward < quack"] is None  # not timed: no verdict


def test_summary_pivots_one_pass_by_shape_and_provider_in_the_runs_order():
    table = _table({("fast", "forward_backward"): (100, 90, 8), ("eager", "forward_backward"): (80, 50, 9),
                    ("fast", "forward"): (20, 14, 3)})
    pivot = wholecall.summary(table, "forward_backward", "host_us")
    assert list(pivot.columns) == ["fast", "eager"] and pivot.loc[(64, 4096, "bfloat16"), "eager"] == 50


@pytest.mark.skipif(not (RESULTS_DIR / "whole_call.csv").is_file(),
                    reason="results/h200/whole_call.csv not committed yet")
def test_committed_whole_call_csv_is_complete_and_every_number_was_checked_first():
    table = load_whole_call()
    assert list(table.columns) == list(wholecall.COLUMNS)
    shapes = {(m, n, str(d).removeprefix("torch.")) for m, n, d in wholecall.SHAPES}
    assert set(map(tuple, table[["M", "N", "dtype"]].drop_duplicates().to_numpy().tolist())) == shapes
    assert (table.groupby(["M", "N", "dtype", "provider"]).size() == len(wholecall.WHOLE_CALL_PASSES)).all()
    timed = table["check"].str.startswith("ok")  # "ok", or "ok; graph_us failed: …" when one timer could not run
    assert {"fast", "floor", "eager"} <= set(table.loc[timed, "provider"])
    times = ["whole_call_us", "host_us"]
    assert (table.loc[timed, times] > 0).all().all() and table.loc[~timed, times].isna().all().all()
    article = table[(table["provider"] == "article") & (table["dtype"] == "bfloat16")]
    assert article["check"].str.startswith("refused: the article's contract").all()  # refused, never faked

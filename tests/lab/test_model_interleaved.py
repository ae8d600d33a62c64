"""rmsnorm_lab.model_interleaved and scripts/benchmark_model.py's --interleave, --decode and fused variant, on the CPU.

``--quick`` runs the glue on a tiny Llama in Triton's interpreter (float32; torch.compile with aot_eager): the
variants checked before timing, the rounds, the intervals, the decode rows. The times mean nothing here and
are never compared with anything; the interval's coverage is checked on draws from a known distribution.
"""

from __future__ import annotations

import dataclasses
import json
import os

os.environ["HF_HUB_OFFLINE"] = "1"  # before transformers: nothing is ever downloaded

import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402

import checkout_scripts  # noqa: E402
from rmsnorm_lab import model as bench  # noqa: E402
from rmsnorm_lab import model_interleaved as rounds  # noqa: E402
from rmsnorm_lab.model_families import Absent  # noqa: E402

cpu_only = pytest.mark.skipif(torch.cuda.is_available(), reason="the --quick logic check runs on the CPU")


@pytest.mark.parametrize("n, ranks", [(50, (18, 33)), (20, (6, 15)), (100, (40, 61)), (5, (1, 5))])
def test_the_median_interval_is_the_order_statistics_the_binomial_gives(n, ranks):
    samples = np.random.default_rng(0).permutation(np.arange(1.0, n + 1))  # the k-th smallest is k
    median, lo, hi = rounds.median_interval(samples)
    assert (lo, hi) == ranks and median == (n + 1) / 2


def test_the_median_interval_holds_the_median_at_least_95_percent_of_the_time():
    rng = np.random.default_rng(1)
    draws = rng.lognormal(size=(4000, 50))  # skewed, like step times; its median is 1
    held = [lo <= 1.0 <= hi for _, lo, hi in map(rounds.median_interval, draws)]
    assert np.mean(held) >= 0.95 - 3 * np.sqrt(0.95 * 0.05 / len(held))


def test_every_variant_takes_every_place_in_the_rounds_equally_often():
    orders = list(rounds._rounds(["a", "b", "c", "d"], 8))
    assert all(sorted(o) == ["a", "b", "c", "d"] for o in orders)
    for place in range(4):
        assert sorted(o[place] for o in orders) == ["a", "a", "b", "b", "c", "c", "d", "d"]


def test_the_fused_variant_of_a_model_without_pre_norm_layers_is_absent():
    pytest.importorskip("transformers", reason="transformers (the 'models' extra) is not installed")
    size = dataclasses.replace(bench.QUICK, family="gemma3")
    base = bench.build_base(size, "cpu", torch.float32)
    with pytest.raises(Absent, match="no decoder layer of gemma3 could be fused"):
        bench.make_variant(base, "fused", torch.float32, "gemma3")


def test_a_variant_whose_step_fails_in_the_rounds_is_recorded_and_the_others_are_still_timed(monkeypatch):
    def build(row, size, variant, mode, base, ids, refs, backend):
        done = []

        def step():
            done.append(1)
            if variant == "fast" and len(done) > 3:
                raise RuntimeError("CUDA out of memory")
        return torch.nn.Identity(), step

    monkeypatch.setattr(bench, "build_variant", build)
    monkeypatch.setattr(bench, "profile_step", lambda row, *args: [])
    rows, _ = rounds.run_interleaved(bench.QUICK, ["original", "fast"], "eager", None, torch.zeros(1, 1), {},
                                     steps=5, warmup=1, log=lambda line: None)
    assert [(r["variant"], r["check"], r.get("steps")) for r in rows] == [
        ("original", "ok", 5), ("fast", "failed: RuntimeError: CUDA out of memory", None)]


def _script():
    return checkout_scripts.load("scripts/benchmark_model.py")


@pytest.fixture(scope="module")
def quick(tmp_path_factory):
    pytest.importorskip("transformers", reason="transformers (the 'models' extra) is not installed")
    out = tmp_path_factory.mktemp("interleaved")
    assert _script().main(["--quick", "--interleave", "--decode", "--out", str(out), "--name", "fused"]) == 0
    return (pd.read_csv(out / "fused.csv"), pd.read_csv(out / "fused_decode.csv"),
            json.loads((out / "fused_environment.json").read_text()))


@pytest.mark.slow
@cpu_only
def test_quick_interleaved_steps_check_every_variant_and_put_each_median_inside_its_interval(quick):
    step, _, env = quick
    assert list(step.columns) == list(rounds.STEP_COLUMNS)
    assert [tuple(r) for r in step[["mode", "variant"]].to_numpy()] == [
        (m, v) for m in bench.MODES for v in bench.VARIANTS]
    ok = step[step["check"] == "ok"]
    assert {"original", "fast", "fused"} <= set(ok["variant"]) and (ok["steps"] == 2).all()
    assert set(ok.loc[ok["variant"] == "fused", "norms_swapped"]) == {5}  # and its layers fused (else: absent)
    assert ((ok["step_ms_lo"] <= ok["step_ms"]) & (ok["step_ms"] <= ok["step_ms_hi"])).all()
    assert ok["peak_mem_gib"].isna().all()  # the variants share the device while interleaved
    assert (ok["logits_err_ratio"] <= bench.LOGITS_ERROR_RATIO).all()
    liger = step.loc[step["variant"] == "liger", "check"]
    assert (liger == "ok").all() or liger.str.startswith("absent: liger_kernel is not installed").all(), liger
    assert "rounds" in env["model_step"]["interleave"] and env["model_step"]["complete"]


@pytest.mark.slow
@cpu_only
def test_quick_decode_rows_are_checked_first_and_their_rates_follow_from_the_median_call(quick):
    _, decode, env = quick
    assert list(decode.columns) == list(rounds.DECODE_COLUMNS)
    assert sorted(map(tuple, decode[["variant", "batch"]].to_numpy())) == sorted(
        (v, b) for v in bench.VARIANTS for b in (1, 2))
    ok = decode[decode["check"] == "ok"]
    assert {"original", "fast", "fused"} <= set(ok["variant"])
    rate = ok["batch"] * ok["new_tokens"] / ok["call_ms"] * 1e3
    assert np.allclose(ok["tokens_per_s"], rate, rtol=1e-4)
    assert ((ok["tokens_per_s_lo"] <= ok["tokens_per_s"]) & (ok["tokens_per_s"] <= ok["tokens_per_s_hi"])).all()
    assert (ok["tokens_match"] >= 0.9).all() and (ok["logits_err_ratio"] <= bench.LOGITS_ERROR_RATIO).all()
    assert decode.loc[decode["check"] != "ok", "call_ms"].isna().all()
    assert env["model_step"]["decode"]["batches"] == list(rounds.DECODE_BATCHES)


def test_a_spent_budget_leaves_the_rounds_and_the_decode_out_with_the_reason(tmp_path):
    pytest.importorskip("transformers", reason="transformers (the 'models' extra) is not installed")
    argv = ["--quick", "--interleave", "--decode", "--out", str(tmp_path), "--budget-s", "0"]
    assert _script().main(argv) == 0
    step, decode = pd.read_csv(tmp_path / "model_step.csv"), pd.read_csv(tmp_path / "model_step_decode.csv")
    for table in (step, decode):
        assert table["check"].str.startswith(bench.OUT_OF_TIME).all()
    assert set(decode["variant"]) == set(bench.VARIANTS)


from rmsnorm_lab import RESULTS_DIR  # noqa: E402


@pytest.mark.skipif(not (RESULTS_DIR / "model_fused_decode.csv").is_file(),
                    reason="results/h200/model_fused_decode.csv not committed yet")
def test_the_committed_decode_rates_were_checked_first_and_sit_inside_their_intervals():
    decode = pd.read_csv(RESULTS_DIR / "model_fused_decode.csv")
    ok = decode[decode["check"] == "ok"]
    assert not ok.empty and (ok["logits_err_ratio"] <= bench.LOGITS_ERROR_RATIO).all()
    assert ((ok["tokens_per_s_lo"] <= ok["tokens_per_s"]) & (ok["tokens_per_s"] <= ok["tokens_per_s_hi"])).all()
    assert decode.loc[decode["check"] != "ok", "tokens_per_s"].isna().all()
    step = pd.read_csv(RESULTS_DIR / "model_fused.csv")
    timed = step[step["check"] == "ok"]
    assert ((timed["step_ms_lo"] <= timed["step_ms"]) & (timed["step_ms"] <= timed["step_ms_hi"])).all()

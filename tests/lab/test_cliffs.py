"""The cliff sweep (rmsnorm_lab.cliffs): its declared widths, its verdicts, and its glue on the CPU.

Timing needs a GPU (scripts/benchmark_cliffs.py); here the kernel timer is a stand-in and the real
fast path runs under the interpreter at a tiny size, so that what the sweep checks, keeps and
judges is the code that runs on the H200.
"""

import dataclasses
import math

import pandas as pd
import pytest
import torch

import checkout_scripts
from rmsnorm import FAST_MAX_N
from rmsnorm_lab import cliffs, timing


def test_the_sweep_holds_what_it_declares():
    widths = cliff_widths = cliffs.cliff_widths()
    assert widths == sorted(set(widths)) and widths[0] == 1 and widths[-1] == FAST_MAX_N
    assert set(range(1, 257)) <= set(widths)
    for k in range(8, 19):
        for base in (2**k, 3 * 2 ** (k - 1)):
            assert {n for n in (base - 8, base - 1, base, base + 1, base + 8) if n <= FAST_MAX_N} <= set(widths)
    assert cliff_widths == cliffs.cliff_widths()  # seeded: the same sweep every run
    assert len(widths) - 256 - len({b + d for k in range(8, 19) for b in (2**k, 3 * 2 ** (k - 1))
                                    for d in (-8, -1, 0, 1, 8) if b + d <= FAST_MAX_N}) > 150  # most random N are new
    assert cliffs.cliff_widths(random_widths=0, max_n=300) == list(range(1, 257)) + [
        n for n in (248, 255, 256, 257, 264, 376, 383, 384, 385, 392) if n > 256 and n <= 300]


def test_odd_widths_come_in_the_declared_order():
    odd = cliffs.odd_widths_first([3, 5, 255, 257, 1023, 1025, 1001, 4097, 12289])
    assert odd == [257, 4097, 12289, 3, 5, 255, 1023, 1025, 1001]  # the article's, 2^k ± 1, the rest


def test_a_sweep_cut_short_still_spans_every_width_range():
    widths = cliffs.cliff_widths()
    order = cliffs.coverage_order(widths)
    assert sorted(order) == widths  # each width once
    first = sorted(order[: len(order) // 4])  # a run cut at a quarter
    assert first[0] == widths[0] and first[-1] >= widths[-len(widths) // 16]  # from the narrowest to near the widest
    gaps = [widths.index(b) - widths.index(a) for a, b in zip(first, first[1:])]
    assert max(gaps) <= 4  # no stretch of the sweep left out
    assert cliffs.coverage_order([5, 1, 3]) == [1, 5, 3] and cliffs.coverage_order([]) == []


def test_rows_fill_128_mib_of_x():
    M = cliffs.rows_for(1000, torch.bfloat16)
    assert cliffs.X_BYTES - 1000 * 2 < M * 1000 * 2 <= cliffs.X_BYTES
    assert cliffs.rows_for(FAST_MAX_N, torch.float32) == 128 and cliffs.rows_for(10**9, torch.float32) == 1


def _table(rates: dict, provider="fast", dtype="bfloat16", pass_="backward"):
    return pd.DataFrame([dict(dtype=dtype, N=N, pass_=pass_, provider=provider, us=1.0 / r, tbps=r, check="ok")
                         for N, r in rates.items()])


def test_a_width_below_its_same_class_neighbours_is_a_cliff():
    # 1000 (mod 8 = 0) between 992 and 1008; the odd 1001 is in another class and does not count
    verdict = cliffs.neighbour_verdicts(_table({984: 3.7, 992: 3.7, 1000: 1.8, 1001: 1.0, 1008: 3.7, 1016: 3.7}))
    row = verdict.set_index("N").loc[1000]
    assert (row["below"], row["above"]) == (992, 1008) and row["ratio"] == pytest.approx(1.8 / 3.7)
    assert not row["ok"] and verdict.set_index("N").loc[992, "ok"]
    assert 1001 not in set(verdict["N"])  # no same-class neighbours on both sides
    fp32 = cliffs.neighbour_verdicts(_table({996: 3.0, 1000: 2.0, 1004: 3.0}, dtype="float32"))
    assert fp32["N"].tolist() == [1000] and not fp32["ok"].iloc[0]  # float32: classes of N mod 4


def test_an_odd_width_is_judged_against_its_best_peer_that_passed():
    table = pd.concat([
        _table({257: 1.0, 256: 4.0}), _table({257: 1.2}, provider="compile"),
        _table({257: 2.0}, provider="liger").assign(check="wrong: dx"),  # failed the oracle: no peer
    ])
    verdict = cliffs.peer_verdicts(table)
    assert verdict["N"].tolist() == [257]  # even widths have no peer verdict
    row = verdict.iloc[0]
    assert row["best_peer"] == "compile" and row["ratio"] == pytest.approx(1.0 / 1.2) and not row["ok"]


def test_measure_checks_before_it_times_and_leaves_refusals_out(monkeypatch, device):
    monkeypatch.setattr(cliffs, "X_BYTES", 4 * 64 * 4)  # 4 rows of 64 float32, 3 of 65
    monkeypatch.setattr(timing, "kernel_time_us", lambda fn, **kw: (fn(), 5.0)[1])
    real = cliffs.provider
    refuser = dataclasses.replace(real("eager"), name="refuser", refuses=lambda x, gamma, eps: "not on any device")
    monkeypatch.setattr(cliffs, "provider", lambda name: refuser if name == "refuser" else real(name))
    rows = cliffs.measure([64, 65], torch.float32, ("fast", "refuser"), deadline=math.inf, log=lambda line: None,
                          device=device.type)  # the real fast path: the interpreter on the CPU, the kernels on a GPU
    table = pd.DataFrame(rows)
    assert set(table["provider"]) == {"fast"}  # a refusal leaves no row, not a NaN
    assert table["check"].eq("ok").all() and len(table) == 4 and table["M"].tolist() == [4, 4, 3, 3]
    assert (table["tbps"] == table["bytes"] / 5.0 / 1e6).all()
    assert cliffs.measure([64], torch.float32, deadline=-math.inf, log=lambda line: None, device=device.type) == []


def test_without_cuda_the_script_says_so_and_exits_0(capsys):
    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    assert checkout_scripts.load("scripts/benchmark_cliffs.py").main([]) == 0
    assert "no CUDA GPU here, nothing timed" in capsys.readouterr().out


def test_the_committed_pass_is_the_declared_sweep_cut_by_its_budget():
    # cliffs.csv, as results/h200/README.md describes it: widths of the declared sweep, the count its
    # environment record states, the failures untimed with their reasons.
    import json

    from rmsnorm_lab.results import RESULTS_DIR

    table = pd.read_csv(RESULTS_DIR / "cliffs.csv")
    environment = json.loads((RESULTS_DIR / "cliffs_environment.json").read_text())
    assert set(table["N"]) <= set(cliffs.cliff_widths())  # every width is in the declared sweep
    assert environment["widths_declared"] == len(cliffs.cliff_widths())
    widths = table[table["provider"] == "fast"].groupby("dtype")["N"].nunique()
    assert widths.to_dict() == environment["widths_measured"]
    assert (widths < environment["widths_declared"]).all()  # cut by the budget
    failed = table[(table["check"] != "ok") & (table["provider"] == "fast")]
    assert (failed["dtype"] == "float32").all() and failed["check"].str.contains(" dx ").all()
    assert table.loc[table["check"] != "ok", "us"].isna().all()  # a failure is never timed
    quack = table[(table["provider"] == "quack") & (table["dtype"] == "bfloat16")]
    assert quack["check"].str.startswith("failed: DSLRuntimeError").all()
    verdict = cliffs.neighbour_verdicts(table)
    below = set(verdict.loc[~verdict["ok"], "N"])
    assert {17, 33, 65, 129, 257} <= below and {1032, 2056} <= below  # 2^k + 1 and 2^k + 8
    peers_wrong = table[(table["provider"] != "fast") & table["check"].str.startswith("wrong")]
    assert (peers_wrong["dtype"] == "float32").all() and peers_wrong["check"].str.contains(" dx ").all()

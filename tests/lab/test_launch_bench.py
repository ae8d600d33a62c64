"""rmsnorm_lab.launch_bench and scripts/probe_launch_path.py on any machine: the GPU timers replaced by stand-ins.

On the H200 the glue runs: the providers (the native launch switched off for one and on again after),
the oracle check in front of every timing, the rows, issue 41's targets and the Markdown table. Here
it runs on the CPU (Triton's interpreter) with fixed fake times, never compared with anything measured.
"""

import math

import numpy as np
import pandas as pd
import pytest
import torch

import checkout_scripts
import rmsnorm
from rmsnorm import native_launch
from rmsnorm_lab import launch_bench as lb


def _load_script():
    return checkout_scripts.load("scripts/probe_launch_path.py")


def test_without_cuda_the_script_says_so_in_one_line_and_exits_0(capsys):
    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA: the refusal is for machines without one")
    assert _load_script().main([]) == 0
    out = capsys.readouterr().out.strip().splitlines()
    assert out == ["probe_launch_path: no CUDA GPU here, nothing timed"]


@pytest.mark.parametrize("start", [True, False], ids=["native_launch_on", "native_launch_off"])
def test_every_provider_is_checked_then_timed_and_the_native_launch_is_left_as_it_was(monkeypatch, device, start):
    seen = []
    monkeypatch.setattr(native_launch.state, "enabled", start)  # on: the default; off: RMSNORM_NATIVE_LAUNCH=0

    def fake_host(fn, **kw):  # records whether the native launch was on while each provider was timed
        fn()
        seen.append(native_launch.state.enabled)
        return np.full(3, 30.0)

    monkeypatch.setattr(lb, "require_cuda", lambda: None)
    monkeypatch.setattr(lb, "time_whole_calls", lambda fn, **kw: (fn(), np.full(3, 40.0))[1])
    monkeypatch.setattr(lb, "time_host_calls", fake_host)
    monkeypatch.setattr(lb, "make_inputs", lambda M, N, dtype, seed: _inputs(M, N, device))
    rows = lb.measure_shape(3, 257, torch.float32, log=lambda line: None)
    table = pd.DataFrame(rows, columns=list(lb.COLUMNS))
    status = table.groupby("provider", sort=False)["check"].first()
    assert list(status.index) == list(lb.LAUNCH_PROVIDERS)
    checked = ["fast", "eager_module", "fast_triton_launcher", "floor", "eager"]
    assert (status[checked] == "ok").all(), status
    timed = table[table["provider"].isin(checked)]
    assert (timed["whole_call_us"] == 40.0).all() and (timed["host_us"] == 30.0).all()
    if device.type == "cpu":  # (on a GPU it is timed, unchecked)
        assert status["cpp_floor"] == "refused: needs a CUDA GPU"
        assert table.loc[table["provider"] == "cpp_floor", "host_us"].isna().all()
    # 2 passes each, the native launch off for fast_triton_launcher only (cpp_floor, refused on the CPU, times none)
    timed_names = [name for name in dict.fromkeys(table["provider"])
                   if table.loc[table["provider"] == name, "host_us"].notna().all()]
    assert seen == [name != "fast_triton_launcher" for name in timed_names for _ in range(2)]
    assert native_launch.state.enabled is start


def _inputs(M, N, device):
    g = torch.Generator().manual_seed(0)
    return (torch.randn(M, N, generator=g).to(device), torch.randn(N, generator=g).to(device),
            torch.randn(M, N, generator=g).to(device))


def _table():
    rows = []
    for provider, fwd_host, fb_whole in (("fast", 20.0, 150.0), ("cpp_floor", 8.0, 40.0),
                                         ("eager_module", 15.0, 90.0)):
        rows.append(dict(M=64, N=4096, dtype="bfloat16", provider=provider, pass_="forward", whole_call_us=30.0,
                         host_us=fwd_host, check="ok"))
        rows.append(dict(M=64, N=4096, dtype="bfloat16", provider=provider, pass_="forward_backward",
                         whole_call_us=fb_whole, host_us=60.0, check="ok"))
    return pd.DataFrame(rows, columns=list(lb.COLUMNS))


def test_the_targets_read_the_issues_limits_off_the_table():
    steps = pd.DataFrame([dict(size="host_bound", mode="eager", variant="original", tokens_per_s=100.0),
                          dict(size="host_bound", mode="eager", variant="fast", tokens_per_s=104.0),
                          dict(size="gpu_bound", mode="eager", variant="fast", tokens_per_s=999.0)])
    got = lb.targets(_table(), steps).set_index("target")
    assert got.loc["host, forward ≤ C++ floor + 10 µs", ["value", "limit", "met"]].tolist() == [20.0, 18.0, False]
    stretch, whole = "host, forward ≤ 1.5 × torch.nn.RMSNorm's (stretch)", "whole call, forward + backward ≤ 1.5 × " \
        "torch.nn.RMSNorm's"  # eager through the module (eager_module), so the module layers are charged alike
    assert got.loc[stretch, ["value", "limit", "met"]].tolist() == [20.0, 22.5, True]
    assert got.loc[whole, ["value", "limit", "met"]].tolist() == [150.0, 135.0, False]
    step = got.loc["host-bound Llama step ≥ 1.05 × the original's tokens/s"]
    assert math.isclose(step["value"], 1.04) and step["met"] is not None and not step["met"]
    missing = lb.targets(_table()[lambda t: t["provider"] != "cpp_floor"]).set_index("target")
    assert missing.loc["host, forward ≤ C++ floor + 10 µs", "met"] is None


def test_the_markdown_table_holds_every_measured_number_and_no_other_row():
    second = _table().assign(M=128, N=257, dtype="float32")  # two shapes: their product has four
    table = pd.concat([_table(), second], ignore_index=True)
    text = lb.markdown(table)
    assert "| 64 | 4096 | bfloat16 | fast | 30.0 | 20.0 | 150.0 | 60.0 | ok |" in text
    assert "| 128 | 257 | float32 | fast | 30.0 | 20.0 | 150.0 | 60.0 | ok |" in text
    assert len(lb.summary(table)) == 6 and "| 64 | 257 " not in text  # the measured (shape, provider)s alone
    text = lb.markdown(_table())
    assert "| host, forward ≤ C++ floor + 10 µs | 64 × 4096 bfloat16 | 20.00 | 18.00 | False |" in text
    assert "Llama" not in text  # no step table given, none shown


def test_the_results_page_block_renders_a_committed_run(tmp_path):
    """tools/readme_fast_table.py's launch-path block, from a launch_path.csv as probe_launch_path writes it."""
    _table().to_csv(tmp_path / lb.LAUNCH_FILE, index=False)
    tool = checkout_scripts.load("tools/readme_fast_table.py")
    text = tool._launch_path(tmp_path, lambda name: (tmp_path / name).is_file())
    assert text == lb.markdown(_table())  # no step or decode file: the whole-call table and the targets alone


def test_the_host_pieces_say_what_each_adds_and_the_adds_sum_to_the_whole_call(monkeypatch):
    # On the CPU under the interpreter, with a stand-in host timer that reads each call's cost from a table: the
    # rows come in PIECES' order; each piece's "adds" is its µs less the pieces it contains (launch_forward holds
    # the launch and the allocations, siblings), so they sum to the module's; and every piece really runs (the
    # launch alone replays the forward's recorded launch).
    cost = dict(zip(lb.PIECES, (30.0, 22.0, 9.0, 5.0, 2.0)))
    ran = []

    def host_timer(fn, **kw):
        out = fn()
        ran.append(out)
        return np.full(3, cost[lb.PIECES[len(ran) - 1]])

    monkeypatch.setattr(lb, "time_host_calls", host_timer)
    launcher = rmsnorm.forward._launch
    rows = lb.host_pieces(3, 64, torch.float32, device=rmsnorm.default_device())
    assert rmsnorm.forward._launch is launcher  # the recording wrapper is gone again
    assert [r["piece"] for r in rows] == list(lb.PIECES) and [r["host_us"] for r in rows] == list(cost.values())
    assert [r["adds"] for r in rows] == [8.0, 13.0, 2.0, 5.0, 2.0]
    assert sum(r["adds"] for r in rows) == rows[0]["host_us"]
    assert all(r["launch_path"] == rmsnorm.launch_path() for r in rows)
    assert len(ran) == 5 and ran[0].shape == (3, 64) and ran[-1][0].shape == (3, 64)
    text = lb.render_pieces(pd.DataFrame(rows))
    assert "| 3 × 64 float32 |" in text and "torch.empty of y and rstd" in text
    # a row timed with the native launch on says that launch_forward is the C path's one call (its share may be < 0)
    native = lb.render_pieces(pd.DataFrame(rows).assign(launch_path="native"))
    python = lb.render_pieces(pd.DataFrame(rows).assign(launch_path="triton-launcher"))
    assert native.count("one C call") == 1 and "one C call" not in python
    assert lb.PIECE_ADDS["launch_forward"] in python and lb.PIECE_ADDS["launch_forward"] not in native

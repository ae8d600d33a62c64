"""The config sweep (rmsnorm_lab.tuning.tune) for both norms, with a stand-in timer, and its command line.

On the CPU the kernels run under Triton's interpreter and kernel_time_us is replaced: what is checked is that every
candidate's outputs are compared with the table's own before a time is kept, that a wrong candidate is recorded
with its error and no time, and that the LayerNorm's sweep starts from its own tables
(rmsnorm.config.layernorm_forward_config and layernorm_backward_config). scripts/benchmark_fast.py's ``--tune-at``
and ``--norm`` are parsed before any GPU is asked for.
"""

import math

import pytest
import torch

import checkout_scripts
import rmsnorm
from rmsnorm import FastConfig, backward_config, forward_config
from rmsnorm.config import layernorm_backward_config, layernorm_forward_config
from rmsnorm.testing import assert_close, dgamma_tolerance
from rmsnorm_lab import tuning

DEVICE = rmsnorm.default_device()
N = 40


@pytest.fixture
def few_candidates(monkeypatch):
    """The table's own configuration and one neighbour per pass; a fixed 7 µs for every timed call."""
    calls = []

    def timer(fn, **kw):
        calls.append(fn())
        return 7.0

    monkeypatch.setattr(tuning, "kernel_time_us", timer)
    monkeypatch.setattr(tuning, "forward_candidates",
                        lambda n, d, norm: [forward_config(n, d), FastConfig(4, 64, 4, None, 1, False)])
    monkeypatch.setattr(tuning, "backward_candidates",
                        lambda n, d, table, norm: [table(n, d), FastConfig(2, 64, 4, 2, 1, False)])
    return calls


@pytest.mark.parametrize("norm", ["rmsnorm", "layernorm", "rmsnorm_add"])
def test_every_candidate_is_checked_then_timed_for_each_norm(norm, few_candidates):
    rows = tuning.tune([(6, N, torch.float32)], budget_s=600, norm=norm, device=DEVICE)
    assert {(r["norm"], r["weight_dtype"]) for r in rows} == {(norm, "float32")}
    assert [(r["pass_"], r["BLOCK_M"], r["us"], r["error"], r["table_when_swept"]) for r in rows] == [
        ("forward", forward_config(N, torch.float32).BLOCK_M, 7.0, "", 1), ("forward", 4, 7.0, "", 0),
        ("backward", tuning.NORMS[norm].backward_config(N, torch.float32).BLOCK_M, 7.0, "", 1),
        ("backward", 2, 7.0, "", 0)]
    assert len(few_candidates) == 4
    assert len(few_candidates[-1]) == (3 if norm == "layernorm" else 2)  # dx, dweight and (LayerNorm) dbias


def test_the_fused_adds_sweep_checks_dh_with_d_residual_out_added():
    x, weight, (residual, dres), dy = tuning.inputs("rmsnorm_add", 5, N, torch.float32, None, DEVICE)
    launch = tuning.NORMS["rmsnorm_add"]
    saved = launch.forward(x, weight, (residual, dres))
    torch.testing.assert_close(saved[1], x + residual)  # residual_out
    dh, dweight = launch.backward(x, weight, (residual, dres), saved, dy)
    h = (x + residual).double().requires_grad_()
    w64 = weight.double().requires_grad_()
    y = h * torch.rsqrt(h.square().mean(-1, keepdim=True) + tuning.EPS) * w64
    want_dh, want_dw = torch.autograd.grad((y * dy.double()).sum(), (h, w64))
    assert_close(dh, want_dh + dres.double(), dtype=torch.float32)
    assert_close(dweight.double(), want_dw, tol=dgamma_tolerance(5, torch.float32, torch.float32))


def test_a_candidate_whose_output_is_wrong_gets_its_error_and_no_time(few_candidates, monkeypatch):
    launch = tuning.NORMS["layernorm"]
    wrong_bias = launch._replace(backward=lambda x, w, b, saved, dy, cfg=None: (
        lambda out: (out[0], out[1], out[2] + (0 if cfg is None else 1)))(launch.backward(x, w, b, saved, dy, cfg)))
    monkeypatch.setitem(tuning.NORMS, "layernorm", wrong_bias)
    rows = tuning.tune([(6, N, torch.float32)], budget_s=600, passes=("backward",), norm="layernorm", device=DEVICE)
    assert all(math.isnan(r["us"]) and r["error"].startswith("AssertionError") for r in rows), rows


def test_the_layernorm_sweep_starts_from_its_own_tables():
    assert tuning.NORMS["layernorm"].backward_config is layernorm_backward_config
    assert tuning.NORMS["layernorm"].forward_config is layernorm_forward_config
    for n in (12288, 16384):
        own = set(tuning.backward_candidates(n, torch.bfloat16, layernorm_backward_config))
        assert layernorm_backward_config(n, torch.bfloat16) in own
        assert backward_config(n, torch.bfloat16) in own  # the RMSNorm's one block stays a candidate
    for n in (768, 1280, 8192, 12288, 65536):  # widths where the LayerNorm's forward has a rule of its own
        own = list(tuning.forward_candidates(n, torch.bfloat16, "layernorm"))
        assert layernorm_forward_config(n, torch.bfloat16) != forward_config(n, torch.bfloat16)
        assert tuning.library_choice("forward", n, torch.bfloat16, "layernorm") == layernorm_forward_config(
            n, torch.bfloat16) == own[0]  # what the sweep is read against, and timed first
        assert forward_config(n, torch.bfloat16) in own and len(own) == len(set(own))  # the RMSNorm's too, once


def test_a_sweep_of_the_plain_rmsnorm_is_read_against_its_dense_rows_choice():
    """The sweep's rows are contiguous: the plain RMSNorm launches a flat rule there, the others never do."""
    for pass_ in ("forward", "backward"):
        assert tuning.library_choice(pass_, 17, torch.float16).flat
        assert not any(tuning.library_choice(pass_, 17, torch.float16, norm).flat for norm in ("layernorm",
                                                                                                "rmsnorm_add"))
        assert tuning.library_choice(pass_, 4096, torch.float16) == (forward_config if pass_ == "forward" else
                                                                     backward_config)(4096, torch.float16)
    assert tuning.library_choice("backward", 16384, torch.bfloat16, "layernorm") == layernorm_backward_config(
        16384, torch.bfloat16)


@pytest.mark.parametrize("tune_at, message", [
    ("bfloat16:0", "at least 1"), ("bfloat16:12x", "at least 1"), ("int8:768", "dtype[+weight dtype]"),
    ("bfloat16+float32+float16:768", "dtype[+weight dtype]"), ("bfloat16", "dtype[+weight dtype]"),
])
def test_tune_at_is_refused_with_its_part_named_before_anything_runs(tune_at, message, capsys, tmp_path):
    script = checkout_scripts.load("scripts/benchmark_fast.py")
    with pytest.raises(SystemExit) as stop:
        script.main(["--out", str(tmp_path), "--tune-only", "--tune-at", tune_at])
    assert stop.value.code == 2 and message in capsys.readouterr().err
    assert not any(tmp_path.iterdir())


def test_tune_at_names_the_weight_dtype_after_a_plus():
    script = checkout_scripts.load("scripts/benchmark_fast.py")
    assert script._tune_at(None, "bfloat16+float32:768,12288;float16:257") == [
        (torch.bfloat16, torch.float32, 768), (torch.bfloat16, torch.float32, 12288),
        (torch.float16, torch.float16, 257)]


@pytest.mark.parametrize("extra, message", [((), "--tune-only"), (("--tune-only", "--only", "0"), "--only and --grid"),
                                            (("--tune-only", "--grid", "weak"), "--only and --grid")])
def test_another_norm_tunes_only_and_at_its_own_shapes(extra, message, capsys, tmp_path):
    script = checkout_scripts.load("scripts/benchmark_fast.py")
    with pytest.raises(SystemExit):
        script.main(["--out", str(tmp_path), "--norm", "layernorm", *extra])
    assert message in capsys.readouterr().err


def test_a_layernorm_sweep_is_read_against_its_own_backward_table():
    import pandas as pd

    own, rmsnorms = layernorm_backward_config(16384, torch.bfloat16), backward_config(16384, torch.bfloat16)
    rows = pd.DataFrame([dict(M=8, N=16384, dtype="bfloat16", pass_="backward", **cfg.__dict__, us=us,
                              table_when_swept=when) for cfg, us, when in ((rmsnorms, 9.0, 1), (own, 3.0, 0))])
    got = tuning.table_against_sweep(rows, "layernorm").iloc[0]
    assert (got["then"], got["now"], got["best"]) == (9.0, 3.0, 3.0)  # swept at the RMSNorm's; today: its own
    assert tuning.table_against_sweep(rows).iloc[0]["now"] == 9.0  # read as the RMSNorm's sweep


def test_the_sweep_draws_what_each_norms_side_by_side_draws():
    from rmsnorm_lab import fused_add_bench, layernorm_bench

    for got, want in zip(tuning.inputs("layernorm", 3, N, torch.float32, None, DEVICE),
                         layernorm_bench.inputs(3, N, torch.float32, torch.float32, DEVICE), strict=True):
        assert torch.equal(got, want)  # the LayerNorm's rows off centre, as its benchmark draws them
    x, weight, (residual, dres), dy = tuning.inputs("rmsnorm_add", 3, N, torch.float32, None, DEVICE)
    for got, want in zip((x, residual, weight, dy, dres), fused_add_bench.inputs(3, N, torch.float32, DEVICE)):
        assert torch.equal(got, want)
    with pytest.raises(ValueError, match="weight in x's dtype"):
        tuning.inputs("rmsnorm_add", 3, N, torch.float16, torch.float32, DEVICE)

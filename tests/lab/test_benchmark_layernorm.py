"""scripts/benchmark_layernorm.py and rmsnorm_lab.layernorm_bench on any machine: the GPU timers replaced by fakes.

What runs on the H200 is the glue: the providers, the float64 check in front of every timing, the declared bytes,
the rows of both CSVs, the environment file and the table. Here it runs on the CPU (Triton's interpreter) at small
shapes with fixed fake times, which are never compared with anything measured.
"""

import json

import numpy as np
import pandas as pd
import pytest
import torch

import checkout_scripts
from rmsnorm_lab import layernorm_backward_bytes, layernorm_forward_bytes, timing, wholecall
from rmsnorm_lab import layernorm_bench as bench

FAKE_US = 4.0
#: Small CPU shapes: float16 rows with float32 parameters, and bf16 (which the interpreter refuses).
SHAPES = ((3, 257, torch.float16, torch.float32), (2, 64, torch.bfloat16, torch.bfloat16))
CPU_PROVIDERS = ("fast", "liger", "quack", "eager")


@pytest.fixture
def fake_timers(monkeypatch):
    monkeypatch.setattr(timing, "require_cuda", lambda: None)
    monkeypatch.setattr(wholecall, "require_cuda", lambda: None)
    monkeypatch.setattr(bench, "kernel_time_us", lambda fn, **kw: (fn(), FAKE_US)[1])
    monkeypatch.setattr(wholecall, "time_whole_calls", lambda fn, **kw: (fn(), np.full(3, 40.0))[1])
    monkeypatch.setattr(wholecall, "time_host_calls", lambda fn, **kw: (fn(), np.full(3, 30.0))[1])
    monkeypatch.setattr(wholecall, "kernel_time_us", lambda fn, **kw: 5.0)
    monkeypatch.setattr(bench, "GRID", SHAPES)
    monkeypatch.setattr(bench, "WHOLE_CALL_SHAPES", SHAPES[:1])


def test_the_script_checks_then_times_and_writes_both_csvs_and_the_environment(fake_timers, tmp_path):
    out = tmp_path / "out"
    script = checkout_scripts.load("scripts/benchmark_layernorm.py")
    assert script.main(["--out", str(out), "--providers", ",".join(CPU_PROVIDERS)]) == 0
    kernel = pd.read_csv(out / "layernorm_kernel.csv")
    device = "cuda" if torch.cuda.is_available() else "cpu"  # as the script
    why = {(shape, name): bench.refuses(name, *bench.inputs(*shape, device)[:3])
           for shape in SHAPES for name in CPU_PROVIDERS}  # on a CPU: Liger, QuACK, the interpreter's bf16
    for (shape, name), reason in why.items():
        rows = kernel[(kernel["M"] == shape[0]) & (kernel["dtype"] == str(shape[2]).removeprefix("torch."))
                      & (kernel["provider"] == name)]
        assert len(rows) == 2, (shape, name)  # forward and backward
        if reason:  # refused with the reason, not timed
            assert (rows["check"] == f"refused: {reason}").all() and rows["us"].isna().all(), (shape, name)
        else:
            assert (rows["check"] == "ok").all() and (rows["us"] == FAKE_US).all(), (shape, name)
    assert why[SHAPES[0], "fast"] is None and (device == "cuda" or why[SHAPES[1], "fast"])  # the interpreter: no bf16
    fp16 = kernel[kernel["dtype"] == "float16"].set_index(["provider", "pass_"])
    assert fp16.loc[("fast", "forward"), "bytes"] == layernorm_forward_bytes(3, 257, torch.float16, torch.float32)
    assert fp16.loc[("fast", "backward"), "bytes"] == layernorm_backward_bytes(3, 257, torch.float16, torch.float32)
    whole = pd.read_csv(out / "layernorm_whole_call.csv")
    assert set(whole[whole["check"] == "ok"]["provider"]) == {n for n in CPU_PROVIDERS if not why[SHAPES[0], n]}
    env = json.loads((out / "layernorm_environment.json").read_text())
    assert env["layernorm"]["complete"] and env["eps"] == bench.EPS


def test_a_wrong_answer_is_not_timed(fake_timers, monkeypatch):
    x, weight, bias, dy = bench.inputs(3, 40, torch.float32, torch.float32, "cpu")
    monkeypatch.setattr(bench, "_eager", lambda x, w, b, eps=bench.EPS: torch.nn.functional.layer_norm(
        x, (x.shape[-1],), w, b, eps) * (1 + 1e-3) if x.dtype == torch.float32 else torch.nn.functional.layer_norm(
        x, (x.shape[-1],), w, b, eps))
    calls, status = bench.prepare("eager", x, weight, bias, dy, bench.PASSES)
    assert calls is None and status.startswith("wrong: ") and "eager forward y" in status


def test_the_table_compares_fast_with_the_best_peer_at_each_shape(tmp_path, capsys):
    rows = [dict(M=8, N=768, dtype="float16", weight_dtype="float32", pass_=p, provider=n, us=us, check="ok")
            for p, us_by in (("forward", {"fast": 2.0, "liger": 3.0, "compile": 2.5, "eager": 9.0}),
                             ("backward", {"fast": 4.0, "liger": 3.0, "quack": 6.0}))
            for n, us in us_by.items()]
    from rmsnorm_lab.pages import layernorm_ratios, render_layernorm

    table = layernorm_ratios(pd.DataFrame(rows)).xs((8, 768, "float16", "float32"))
    assert table.loc["forward", "best_peer"] == "compile" and table.loc["forward", "best"] == 1.25
    assert table.loc["backward", "best_peer"] == "liger" and table.loc["backward", "best"] == 0.75
    pd.DataFrame(rows).to_csv(tmp_path / "layernorm_kernel.csv", index=False)
    script = checkout_scripts.load("scripts/benchmark_layernorm.py")
    assert script.main(["--out", str(tmp_path), "--table"]) == 0  # the results page's block, no GPU
    assert capsys.readouterr().out.strip() == render_layernorm(pd.DataFrame(rows))


def test_eager_is_refused_where_f_layer_norm_raises_on_the_parameters_dtype(monkeypatch):
    def as_on_cuda(x, weight, bias, eps=bench.EPS):  # torch's CUDA kernels: parameters in x's dtype only
        if weight.dtype != x.dtype:
            raise RuntimeError("expected scalar type Half but found Float")
        return torch.nn.functional.layer_norm(x, (x.shape[-1],), weight, bias, eps)

    monkeypatch.setattr(bench, "_eager", as_on_cuda)
    mixed = bench.inputs(3, 257, torch.float16, torch.float32, "cpu")[:3]
    assert bench.refuses("eager", *mixed) == ("F.layer_norm raises on torch.float16 rows with torch.float32 weight and "
                                              "bias on cpu: expected scalar type Half but found Float")
    assert bench.refuses("eager", *bench.inputs(3, 257, torch.float16, torch.float16, "cpu")[:3]) is None
    monkeypatch.undo()
    assert bench.refuses("eager", *mixed) is None  # the CPU's F.layer_norm takes them


def _kernel_rows():
    """Two shapes, one with float32 parameters that eager refuses; QuACK refused everywhere."""
    rows = []
    for (M, N, dtype, weight), times in {
        (8, 768, "float16", "float32"): {"forward": {"fast": 2.0, "liger": 3.0, "compile": 1.5},
                                         "backward": {"fast": 4.0, "liger": 8.0, "compile": 5.0}},
        (8, 4096, "bfloat16", "bfloat16"): {"forward": {"fast": 2.0, "liger": 2.5, "compile": 2.2, "eager": 4.0},
                                            "backward": {"fast": 4.0, "liger": 3.0, "compile": 6.0, "eager": 9.0}},
    }.items():
        for pass_, by in times.items():
            rows += [dict(M=M, N=N, dtype=dtype, weight_dtype=weight, provider=p, pass_=pass_, us=us, check="ok")
                     for p, us in by.items()]
            rows.append(dict(M=M, N=N, dtype=dtype, weight_dtype=weight, provider="quack", pass_=pass_,
                             us=float("nan"), check="refused: `from quack import rmsnorm` failed: no quack"))
            if weight != dtype:
                rows.append(dict(M=M, N=N, dtype=dtype, weight_dtype=weight, provider="eager", pass_=pass_,
                                 us=float("nan"), check="refused: F.layer_norm raises on these dtypes"))
    return pd.DataFrame(rows)


def test_the_results_block_reads_each_ratio_and_target_off_the_rows():
    from rmsnorm_lab import pages

    ratios = pages.layernorm_ratios(_kernel_rows())
    assert ratios.loc[(8, 768, "float16", "float32", "forward"), "best"] == 0.75  # compile 1.5 over fast 2.0
    assert ratios.loc[(8, 4096, "bfloat16", "bfloat16", "backward"), "best_peer"] == "liger"
    text = pages.render_layernorm(_kernel_rows())
    assert "| 8 × 768 fp16, fp32 weight | forward | 2.0 | 1.50× | 0.75× | — | 0.75× (compile) |" in text
    assert "under 0.97×: 8 × 768 fp16, fp32 weight." in text and "under 1.00×: 8 × 4096 bf16." in text
    forward = (0.75 * 1.1) ** 0.5
    assert f"geometric mean {forward:.2f}× (target 1.00×: not met)" in text
    assert "QuACK not timed (refused: `from quack import rmsnorm` failed: no quack) at 2 shapes" in text
    assert ("eager not timed (refused: F.layer_norm raises on these dtypes) at 1 shape: 8 × 768 fp16, fp32 weight."
            in text)


def test_eager_is_not_refused_for_running_out_of_memory(monkeypatch):
    def out_of_memory(*args, **kwargs):
        raise torch.cuda.OutOfMemoryError("CUDA out of memory")

    monkeypatch.setattr(bench, "_eager", out_of_memory)
    with pytest.raises(torch.cuda.OutOfMemoryError):
        bench.refuses("eager", *bench.inputs(3, 257, torch.float16, torch.float32, "cpu")[:3])

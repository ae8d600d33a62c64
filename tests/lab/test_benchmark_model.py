"""scripts/benchmark_model.py and rmsnorm_lab.model / step_profile on the CPU, and on a GPU where there is one.

What the H200 runs is the glue: the variants swapped in, the logits check before any timing, the
step regions, the attribution of each kernel to the norm or not, the rows and the table. Here
``--quick`` runs it all on a tiny Llama in Triton's interpreter (float32; torch.compile with the
aot_eager backend), where the times mean nothing and are never compared with anything. The
attribution is also checked on a model of plain torch modules, op by op. The GPU tests run the
real thing at a small size: the fast kernels, Liger's where installed, and Inductor's fusions of
the original norm must be found by their rules.
"""

from __future__ import annotations

import json
import math
import os
from types import SimpleNamespace

os.environ["HF_HUB_OFFLINE"] = "1"  # before transformers: nothing is ever downloaded

import pytest  # noqa: E402
import torch  # noqa: E402

import checkout_scripts  # noqa: E402
from rmsnorm_lab import RESULTS_DIR  # noqa: E402
from rmsnorm_lab import model as bench  # noqa: E402
from rmsnorm_lab.model_families import FAMILIES  # noqa: E402
from rmsnorm_lab.step_profile import (  # noqa: E402
    NAME_RULES,
    UNLINKED,
    attribute_kernels,
    norm_scopes,
    step_region,
)

cuda_only = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


def _script():
    return checkout_scripts.load("scripts/benchmark_model.py")


def test_help_names_every_option():
    with pytest.raises(SystemExit) as exit_:
        _script().main(["--help"])
    assert exit_.value.code == 0


def test_without_cuda_the_script_says_so_in_one_line_and_exits_0(capsys, tmp_path):
    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA: the refusal is for machines without one")
    assert _script().main(["--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out.strip().splitlines()
    assert len(out) == 1 and out[0].startswith("benchmark_model: no CUDA GPU here, nothing timed")


def test_the_plan_runs_the_sizes_each_mode_names_eager_first():
    sizes = [SimpleNamespace(name="gpu_bound"), SimpleNamespace(name="host_bound")]
    plan = _script().run_plan(sizes, ["original", "fast"], {"host_bound"}, {"gpu_bound"})
    assert [(s.name, v, m) for s, v, m in plan] == [
        ("host_bound", "original", "eager"), ("host_bound", "fast", "eager"),
        ("gpu_bound", "original", "compile"), ("gpu_bound", "fast", "compile")]
    assert _script().run_plan(sizes, ["original"], set(), set()) == []


def test_an_unknown_size_is_refused_before_anything_runs(tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_:
        _script().main(["--quick", "--out", str(tmp_path / "out"), "--eager-sizes", "huge"])
    assert exit_.value.code == 2 and "huge unknown" in capsys.readouterr().err and not (tmp_path / "out").exists()


def test_amdahl_bound_is_one_over_what_is_left():
    assert bench.amdahl_bound(0.0) == 1.0 and bench.amdahl_bound(0.2) == pytest.approx(1.25)
    assert bench.amdahl_bound(1.0) == math.inf


@pytest.mark.parametrize("variant, name, is_norm", [
    ("original", "triton_red_fused__to_copy_add_mean_mul_pow_rsqrt_0", True),  # the forward, with the residual add
    ("original", "triton_red_fused__to_copy_mul_pow_sum_4", True),  # the rsqrt's gradient, -0.5·grad·rstd³
    ("original", "triton_poi_fused_mul_silu_3", False),
    ("original", "triton_red_fused__to_copy_mul_sum_5", False),  # a column sum alone: not told by its name
    ("original", "void at::native::vectorized_elementwise_kernel<4, at::native::pow_tensor_scalar>", False),
    ("fast", "rmsnorm_fast_backward_kernel", True), ("fast", "rmsnorm_fast_dgamma_kernel", True),
    ("fast", "triton_poi_fused_add_1", False),
    ("liger", "_rms_norm_forward_kernel", True), ("liger", "_block_rms_norm_backward_kernel", True),
    ("liger", "triton_red_fused__to_copy_add_mean_mul_pow_rsqrt_0", False),
])
def test_compiled_steps_tell_the_norms_kernels_by_name(variant, name, is_norm):
    assert NAME_RULES[variant](name) is is_norm


class _Norm(torch.nn.Module):
    """An RMSNorm in plain ops, as LlamaRMSNorm writes it."""

    def __init__(self, n):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.linspace(0.5, 1.5, n))

    def forward(self, x):
        return self.weight * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6))


def test_eager_attribution_counts_the_norms_ops_and_their_backward_and_nothing_else():
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), _Norm(32), torch.nn.Linear(32, 8))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    x = torch.randn(4, 16)
    with norm_scopes(model, lambda m: isinstance(m, _Norm)), torch.profiler.profile() as prof:
        with step_region("forward"):
            loss = model(x).square().sum()
        with step_region("backward"):
            loss.backward()
        with step_region("optimizer"):
            optimizer.step()
    rows = attribute_kernels(prof.events(), "original", scoped=True)
    norm = {(r["kernel"], r["part"]) for r in rows if r["norm"]}
    other = {(r["kernel"], r["part"]) for r in rows if not r["norm"]}
    assert {("aten::pow", "forward"), ("aten::rsqrt", "forward"), ("aten::mean", "forward")} <= norm
    assert {("PowBackward0", "backward"), ("RsqrtBackward0", "backward"), ("MeanBackward1", "backward")} <= norm
    assert not any("mm" in k or "sgd" in k.lower() for k, _ in norm), norm  # the Linears and SGD are not the norm's
    assert {p for _, p in norm} == {"forward", "backward"} and any(p == "optimizer" for _, p in other)
    assert not model[1]._forward_hooks and not model[1]._forward_pre_hooks  # the scopes are gone after the block


def _event(name, device, us, *, kernels=(), annotation=False, start=0.0):
    span = SimpleNamespace(start=start, end=start + us, elapsed_us=lambda: us)
    return SimpleNamespace(name=name, device_type=device, time_range=span, is_user_annotation=annotation,
                           kernels=[SimpleNamespace(name=k, duration=d) for k, d in kernels], cpu_children=[],
                           self_cpu_time_total=1.0, sequence_nr=-1)


def test_the_gpu_spans_of_profiler_scopes_are_not_counted_as_device_work():
    cpu, cuda = torch.autograd.DeviceType.CPU, torch.autograd.DeviceType.CUDA
    events = [_event("region:forward", cpu, 100.0),
              _event("aten::mul", cpu, 5.0, kernels=[("mul_kernel", 10.0)], start=1),
              _event("mul_kernel", cuda, 10.0, start=2), _event("memset", cuda, 3.0, start=20),  # no host op: unlinked
              _event("region:forward", cuda, 40.0, annotation=True)]  # the scope's span on the GPU timeline
    rows = attribute_kernels(events, "original", scoped=False)
    assert sum(r["us"] for r in rows) == pytest.approx(13.0)  # the kernel and the memset, not the 40 µs span
    assert {r["kernel"]: r["us"] for r in rows} == {"mul_kernel": 10.0, UNLINKED: pytest.approx(3.0)}


#: The --quick run is the CPU's logic check (op names stand in for kernels); on a GPU the gpu tests run the real thing.
cpu_only = pytest.mark.skipif(torch.cuda.is_available(), reason="the CPU logic check; on a GPU, the gpu tests below")


@pytest.fixture(scope="module")
def quick(tmp_path_factory):
    """One --quick run (tiny Llama, interpreter, eager and aot_eager-compiled): its tables and its printed lines."""
    pytest.importorskip("transformers", reason="transformers (the 'models' extra) is not installed")
    import pandas as pd

    out = tmp_path_factory.mktemp("model")
    assert _script().main(["--quick", "--out", str(out)]) == 0
    env = json.loads((out / bench.ENVIRONMENT_FILE).read_text())
    return bench.load_model_step(out), pd.read_csv(out / bench.KERNELS_FILE), env


@pytest.mark.slow
@cpu_only
def test_quick_run_checks_then_times_every_variant_and_says_why_one_did_not_run(quick):
    step, _, env = quick
    assert list(step.columns) == list(bench.COLUMNS)
    plan = [(v, m) for m in bench.MODES for v in bench.VARIANTS]
    assert [tuple(r) for r in step[["variant", "mode"]].to_numpy()] == plan
    ok = step[step["check"] == "ok"]
    assert set(ok["variant"]) >= {"original", "fast"} and len(ok) >= 4
    assert set(ok.loc[ok["variant"] == "fast", "norms_swapped"]) == {5}  # 2 layers × 2 norms + the final one
    assert (ok["logits_err_ratio"] <= bench.LOGITS_ERROR_RATIO).all() and ok["logits_within_tol"].all()
    liger = step[step["variant"] == "liger"]["check"]
    assert (liger == "ok").all() or liger.str.startswith("absent: liger_kernel is not installed").all(), liger
    assert ok["tokens_per_s"].tolist() == pytest.approx((ok["tokens"] / (ok["step_ms"] / 1e3)).tolist(), rel=1e-4)
    assert ok["norm_share"].tolist() == pytest.approx((ok["norm_ms"] / ok["step_ms"]).tolist(), rel=1e-4)
    # bound = 1 / (1 − share), read back as share = 1 − 1/bound: the CSV keeps 6 significant digits, and near a
    # share of 1 (on the CPU op times under the profiler can reach it) 1/(1 − share) magnifies their rounding
    # past any relative tolerance, while 1 − 1/bound stays within it.
    assert (1 - 1 / ok["amdahl_bound"]).tolist() == pytest.approx(ok["norm_share"].clip(upper=1).tolist(), abs=1e-5)
    assert (ok["step_ms_min"] <= ok["step_ms"]).all() and (ok["step_ms"] <= ok["step_ms_max"]).all()
    assert env["transformers"] and env["model_step"]["quick"] and env["model_step"]["steps"] == 2


@pytest.mark.slow
@cpu_only
def test_quick_run_attributes_the_fast_calls_and_the_originals_ops(quick):
    _, kernels, _ = quick
    fast = kernels[(kernels["variant"] == "fast") & (kernels["mode"] == "eager") & kernels["norm"]]
    assert {"_FastRMSNormFunction", "_FastRMSNormFunctionBackward"} <= set(fast["kernel"])
    original = kernels[(kernels["variant"] == "original") & (kernels["mode"] == "eager") & kernels["norm"]]
    assert {"aten::pow", "aten::rsqrt", "PowBackward0", "RsqrtBackward0"} <= set(original["kernel"])
    assert set(kernels.loc[kernels["norm"], "part"]) <= {"forward", "backward"}  # the optimizer is nobody's norm
    compiled = kernels[(kernels["variant"] == "fast") & (kernels["mode"] == "compile") & kernels["norm"]]
    assert set(compiled["kernel"]) == {"rmsnorm_fast::forward", "rmsnorm_fast::backward"}  # the operators, by name


def test_a_spent_budget_leaves_every_variant_out_with_the_reason(tmp_path):
    pytest.importorskip("transformers", reason="transformers (the 'models' extra) is not installed")
    assert _script().main(["--quick", "--out", str(tmp_path), "--budget-s", "0"]) == 0
    step = bench.load_model_step(tmp_path)
    assert step["check"].str.startswith(bench.OUT_OF_TIME).all() and step["step_ms"].isna().all()
    assert json.loads((tmp_path / bench.ENVIRONMENT_FILE).read_text())["model_step"]["complete"] is True


def test_a_run_cut_before_its_end_keeps_its_environment_file(tmp_path, monkeypatch):
    """The caller's time limit can end a run in its first variant: what was asked and where it ran are on disk."""
    pytest.importorskip("transformers", reason="transformers (the 'models' extra) is not installed")

    def cut(*args, **kwargs):
        raise KeyboardInterrupt  # as a `timeout` or a device call's limit would end it

    monkeypatch.setattr(bench, "run_variant", cut)
    with pytest.raises(KeyboardInterrupt):
        _script().main(["--quick", "--out", str(tmp_path)])
    env = json.loads((tmp_path / bench.ENVIRONMENT_FILE).read_text())
    assert env["model_step"]["complete"] is False and env["model_step"]["variants"] == list(bench.VARIANTS)
    assert env["torch"] == torch.__version__ and env["eager"]["verdict"]


@pytest.mark.gpu
@cuda_only
@pytest.mark.parametrize("mode", bench.MODES)
def test_on_cuda_a_small_step_is_checked_and_its_norm_kernels_found(mode):
    pytest.importorskip("transformers", reason="transformers (the 'models' extra) is not installed")
    size = bench.ModelSize("small", layers=2, hidden=256, intermediate=512, heads=4, seq=128, batch=2, vocab=1024)
    base = bench.build_base(size, "cuda", torch.bfloat16)
    ids = torch.randint(0, size.vocab, (size.batch, size.seq), device="cuda")
    refs = {"fp32": bench.reference_logits(base, ids)}
    bench.run_variant(size, "original", "eager", base, ids, refs, steps=1, warmup=1)  # sets the reference error
    for variant in bench.VARIANTS:
        row, kernels = bench.run_variant(size, variant, mode, base, ids, refs, steps=2, warmup=2)
        if variant == "liger" and row["check"].startswith("failed: "):
            continue  # Liger-Kernel not installed here, or not compilable: the benchmark records why; not ours to test
        assert row["check"] == "ok", row
        assert row["logits_err_ratio"] <= bench.LOGITS_ERROR_RATIO and row["step_ms"] > 0 and row["peak_mem_gib"] > 0
        norm = [k for k in kernels if k["norm"]]
        assert {k["part"] for k in norm} == {"forward", "backward"}, (variant, mode, norm)
        assert 0 < row["norm_share"] < 1 and row["amdahl_bound"] > 1
        assert row["gpu_busy_ms"] <= row["step_ms_max"]  # one stream: its kernels fit inside the step
        if variant == "fast":
            assert {k["kernel"] for k in norm} >= {"rmsnorm_fast_forward_kernel", "rmsnorm_fast_backward_kernel"}


FIXTURE = os.path.join(os.path.dirname(os.path.dirname(__file__)), "data", "model_step_fixture")
COMMITTED = pytest.param(str(RESULTS_DIR), id="committed", marks=pytest.mark.skipif(
    not (RESULTS_DIR / bench.STEP_FILE).is_file(), reason="results/h200/model_step.csv not committed yet"))


@pytest.mark.parametrize("folder", [pytest.param(FIXTURE, id="fixture"), COMMITTED])
def test_a_step_table_follows_from_its_kernels_and_every_time_was_checked_first(folder):
    step, kernels = bench.load_model_step(folder), bench.load_model_kernels(folder)
    assert list(step.columns) == list(bench.COLUMNS) and list(kernels.columns) == list(bench.KERNEL_COLUMNS)
    assert set(step["variant"]) <= set(bench.VARIANTS) and set(step["mode"]) <= set(bench.MODES)
    assert not step.duplicated(["model", "size", "variant", "mode"]).any() and set(step["model"]) <= set(FAMILIES)
    ok = step["check"] == "ok"
    assert ok.any() and (step.loc[ok, "logits_err_ratio"] <= bench.LOGITS_ERROR_RATIO).all()
    assert (step.loc[ok, ["step_ms", "tokens_per_s", "gpu_busy_ms"]] > 0).all().all()
    assert step.loc[~ok, ["step_ms", "norm_share"]].isna().all().all()  # no time without a passed check
    norm_ms = kernels[kernels["norm"]].groupby(["size", "variant", "mode"])["us"].sum() / 1e3
    busy_ms = kernels.groupby(["size", "variant", "mode"])["us"].sum() / 1e3
    for r in step[ok].itertuples():
        key = (r.size, r.variant, r.mode)
        assert norm_ms.get(key, 0.0) == pytest.approx(r.norm_ms, rel=1e-4, abs=1e-6), key
        assert busy_ms[key] == pytest.approx(r.gpu_busy_ms, rel=1e-4), key
        assert r.norm_share == pytest.approx(r.norm_ms / r.step_ms, rel=1e-4)
        assert r.amdahl_bound == pytest.approx(bench.amdahl_bound(r.norm_share), rel=1e-4)
        assert r.step_ms_min <= r.step_ms <= r.step_ms_max
        assert r.gpu_busy_ms <= 1.05 * r.step_ms_max, key  # one stream: a step's kernels fit inside it (5 %: profiler)


@pytest.mark.skipif(not (RESULTS_DIR / bench.STEP_FILE).is_file(),
                    reason="results/h200/model_step.csv not committed yet")
def test_the_committed_step_table_shows_what_the_results_page_says():
    """results/h200/README.md, "Training steps": the GPU-bound step is GPU-bound and FastRMSNorm's gain stays under
    the original's Amdahl bound; under torch.compile the original's norm shrinks (Inductor fuses it); at the
    host-bound size the GPU idles and the steps' spread covers the norms' differences. Its table is generated."""
    step = bench.load_model_step(RESULTS_DIR).set_index(["size", "mode", "variant"]).sort_index()

    def speed_up(size, mode, variant):
        return step.loc[(size, mode, "original"), "step_ms"] / step.loc[(size, mode, variant), "step_ms"]

    gpu = step.loc[("gpu_bound", "eager", "original")]
    fast = speed_up("gpu_bound", "eager", "fast")
    spread = (step.loc[("host_bound", "eager")].eval("step_ms_max - step_ms_min")).max()
    assert step.loc[("gpu_bound", "compile", "original"), "norm_share"] < gpu["norm_share"]
    # the claims the words make, not only the digits
    assert gpu["gpu_busy_ms"] >= 0.9 * gpu["step_ms"] and 1 < fast <= gpu["amdahl_bound"]
    host = step.loc[("host_bound", "eager")]
    assert (host["gpu_busy_ms"] < 0.6 * host["step_ms"]).all()  # host-bound: the GPU idles
    assert (host["step_ms"] - host.loc["original", "step_ms"]).abs().max() <= spread  # within the spread


def test_without_cuda_the_gemma_and_qwen_run_says_so_in_one_line_and_writes_nothing(capsys, tmp_path):
    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA: the refusal is for machines without one")
    assert _script().main(["--out", str(tmp_path / "out"), "--models", "gemma3,qwen3_5"]) == 0
    out = capsys.readouterr().out.strip().splitlines()
    assert len(out) == 1 and out[0].startswith("benchmark_model: no CUDA GPU here, nothing timed")
    assert not (tmp_path / "out").exists()


def test_an_unknown_model_family_is_refused_by_the_parser(tmp_path):
    with pytest.raises(SystemExit) as exit_:
        _script().main(["--quick", "--out", str(tmp_path), "--models", "gemma3,mistral"])
    assert exit_.value.code == 2


@pytest.fixture(scope="module")
def quick_gemma_qwen(tmp_path_factory):
    """One --quick run of tiny Gemma 3 and Qwen3.5 (eager only: the logic; compile is the Llama run's)."""
    pytest.importorskip("transformers", reason="transformers (the 'models' extra) is not installed")
    out = tmp_path_factory.mktemp("gemma_qwen")
    assert _script().main(["--quick", "--out", str(out), "--models", "gemma3,qwen3_5", "--name", "gq",
                           "--compile-sizes", ""]) == 0
    return bench.load_model_step(out, stem="gq"), json.loads((out / bench.files("gq")[2]).read_text())


@pytest.mark.slow
@cpu_only
def test_quick_gemma_qwen_run_checks_logits_and_counts_the_norms_swapped_and_left(quick_gemma_qwen):
    step, env = quick_gemma_qwen
    assert list(step.columns) == list(bench.COLUMNS) and env["model_step"]["models"] == ["gemma3", "qwen3_5"]
    eager = step[step["mode"] == "eager"].set_index(["model", "variant"])
    for model, swapped, left in (("gemma3", 13, 0), ("qwen3_5", 7, 1)):  # Qwen3.5: its gated norm stays
        original, fast = eager.loc[(model, "original")], eager.loc[(model, "fast")]
        assert original["check"] == "ok" and fast["check"] == "ok", (model, fast["check"])
        assert (fast["norms_swapped"], fast["norms_left"]) == (swapped, left)
        assert fast["logits_err_ratio"] <= bench.LOGITS_ERROR_RATIO and bool(fast["logits_within_tol"])
        liger = eager.loc[(model, "liger"), "check"]
        assert liger == "ok" or liger.startswith("absent: "), liger  # never faked, never an error
    assert "verdict" in env["eager"] and env["transformers"]


def test_the_liger_patch_of_a_missing_family_is_absent_not_failed(monkeypatch):
    import sys
    import types

    from rmsnorm_lab.model_families import Absent, liger_patch

    monkeypatch.setitem(sys.modules, "liger_kernel", types.ModuleType("liger_kernel"))
    monkeypatch.setitem(sys.modules, "liger_kernel.transformers", types.ModuleType("liger_kernel.transformers"))
    with pytest.raises(Absent, match="has no apply_liger_kernel_to_qwen3_5"):
        liger_patch(torch.nn.Linear(2, 2), "qwen3_5")

"""The benchmarks' one provider list: its names, what each refuses and why, the oracle check, the floor, the loaders.

On the CPU the kernels run in Triton's interpreter; nothing here is timed.
"""

import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import torch
import torch.nn.functional as F

from rmsnorm import device as _device
from rmsnorm import rmsnorm_fast_backward, rmsnorm_fast_forward
from rmsnorm.article import forward_op
from rmsnorm.device import default_device
from rmsnorm.testing import make_inputs
from rmsnorm_lab import providers as P
from rmsnorm_lab import results
from rmsnorm_lab.eager import eager_provenance
from rmsnorm_lab.floor import FloorFunction, floor_plan, floor_rmsnorm

ROOT = Path(__file__).resolve().parents[2]
cuda_only = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
interpreter_only = pytest.mark.skipif(torch.cuda.is_available(), reason="the CPU's interpreter path")
#: Where the package's kernels run here: CUDA on a GPU machine, else the CPU (Triton's interpreter).
DEVICE = default_device()


def _eager(x, w, eps):
    return F.rms_norm(x, (x.shape[-1],), w, eps)


def _variant(name, fn, passes=None):
    return P.Provider(name, "a test's variant", P._functional(fn), P._refuses_nothing, passes)


def test_one_list_with_every_name_once_and_the_article_called_article():
    assert P.PROVIDER_NAMES == ("fast", "floor", "article", "reference", "eager", "eager_native", "compile",
                                "compile_nomix", "liger", "quack")
    assert [P.provider(n).name for n in P.PROVIDER_NAMES] == list(P.PROVIDER_NAMES)
    assert "triton" not in P.PROVIDER_NAMES
    with pytest.raises(KeyError, match="the providers are fast, floor"):
        P.provider("triton")


@pytest.mark.parametrize("name, M, N, dtype, reason", [
    ("article", 4, 4097, torch.float32, "the article's contract: x must have 1 <= N <= 4096"),
    ("article", 4, 256, torch.bfloat16, "the article's contract: x must be float32 or float16"),
    ("article", 16385, 1024, torch.float32, "the article's contract: x of shape (16385, 1024) needs"),
    ("fast", 2, 262145, torch.float32, "the fast path's contract: x must have 1 <= N <= 262144"),
    ("floor", 2, 262145, torch.float32, "the fast kernels' contract"),
])
def test_a_provider_that_cannot_run_a_shape_says_why_in_its_contracts_words(name, M, N, dtype, reason):
    x = torch.zeros(M, N, dtype=dtype, device=DEVICE)
    assert P.provider(name).refuses(x, torch.ones(N, dtype=dtype, device=DEVICE), P.EPS).startswith(reason)


def test_providers_that_need_a_gpu_or_a_package_say_so_on_the_cpu():
    x, gamma = torch.zeros(2, 8), torch.ones(8)
    for name, words in (("liger", "Liger-Kernel runs on a CUDA GPU only"), ("quack", "QuACK runs on a CUDA GPU only")):
        reason = P.provider(name).refuses(x, gamma, P.EPS)
        module = {"liger": "liger_kernel.ops.rms_norm", "quack": "quack"}[name]
        assert reason == words + "; x is on cpu" or reason.startswith(f"`from {module} import"), reason


@interpreter_only
def test_the_fast_path_refuses_bf16_in_the_interpreter():
    x, gamma = torch.zeros(2, 8), torch.ones(8)
    bf16 = P.provider("fast").refuses(x.bfloat16(), gamma.bfloat16(), P.EPS)
    assert "interpreter" in bf16 and "bfloat16" in bf16  # the interpreter's bf16 is wrong: refused, never faked


def test_prepare_says_refused_and_never_builds_a_refused_provider():
    x, gamma, dy = make_inputs(2, 4097, device=DEVICE)
    calls, status = P.prepare(P.provider("article"), P.whole_calls, x, gamma, dy)
    assert calls is None and status.startswith("refused: the article's contract")


@pytest.mark.parametrize("build", [P.pass_calls, P.whole_calls])
def test_the_oracle_check_refuses_a_provider_whose_y_is_one_percent_off(build):
    x, gamma, dy = make_inputs(3, 257, device="cpu", seed=2)
    assert P.prepare(_variant("eager_copy", _eager), build, x, gamma, dy)[1] == "ok"
    calls, status = P.prepare(_variant("off", lambda x, w, eps: _eager(x, w, eps) * 1.01), build, x, gamma, dy)
    assert calls is None and status.startswith("wrong: AssertionError: forward/off y 3x257 float32")
    assert "; Greatest absolute difference: " in status and "; Greatest relative difference: " in status  # how far
    assert "\n" not in status  # one CSV cell


def test_one_line_drops_terminal_colours_and_keeps_the_first_line():
    err = RuntimeError("\x1b[91m\x1b[1merror[INTERNAL]:\x1b[0m could not build IR\nstack line 1\nstack line 2")
    assert P.one_line(err) == "RuntimeError: error[INTERNAL]: could not build IR"
    assert len(P.one_line(ValueError("x" * 1000))) == 400


def test_the_oracle_check_refuses_a_wrong_dgamma_and_an_unwritten_output():
    x, gamma, dy = make_inputs(3, 257, device="cpu", seed=2)

    def unwritten(x, gamma, dy, eps):  # an output allocated like a kernel's and never written: NaN in the check
        return (lambda: _device.new_output(tuple(x.shape), x.dtype, x.device)), (lambda: forward_op(x, gamma, eps))
    status = P.prepare(_variant("nan", _eager, passes=unwritten), P.pass_calls, x, gamma, dy)[1]
    assert status.startswith("wrong: AssertionError: forward/nan y 3x257")

    class HalfGamma(torch.autograd.Function):
        @staticmethod
        def forward(ctx, w):
            return w.clone()

        @staticmethod
        def backward(ctx, g):
            return g / 2

    status = P.prepare(_variant("half", lambda x, w, eps: _eager(x, HalfGamma.apply(w), eps)), P.whole_calls,
                       x, gamma, dy, passes=("forward_backward",))[1]
    assert status.startswith("wrong: AssertionError: forward_backward/half dgamma 3x257")


def test_a_provider_that_raises_is_failed_not_wrong():
    x, gamma, dy = make_inputs(3, 257, device="cpu")

    def broken(x, w, eps):
        raise AssertionError("its own assert")  # e.g. QuACK's dtype asserts
    status = P.prepare(_variant("broken", broken), P.whole_calls, x, gamma, dy)[1]
    assert status.startswith("failed: RuntimeError: forward/broken raised AssertionError: its own assert")


def test_every_provider_runs_or_says_why_on_this_machine():
    x, gamma, dy = make_inputs(3, 257, device=DEVICE, seed=1)
    for p in P.PROVIDERS:
        if p.name.startswith("compile"):
            continue  # torch.compile on the CPU takes a C++ compiler and seconds; its GPU test is below
        status = P.prepare(p, P.whole_calls, x, gamma, dy)[1]
        assert status == "ok" or status.startswith("refused: "), (p.name, status)


def test_whole_calls_do_the_same_work_on_every_call_and_reach_the_public_entry_point():
    x, gamma, dy = make_inputs(3, 257, device=DEVICE, seed=3)
    calls = P.whole_calls(P.provider("fast"), x, gamma, dy)
    assert set(calls) == set(P.WHOLE_CALL_PASSES)
    assert not calls["forward"]().requires_grad and calls["forward_grad"]().requires_grad
    (dx1, dg1), (dx2, dg2) = [tuple(t.clone() for t in calls["forward_backward"]()) for _ in range(2)]
    torch.testing.assert_close(dx1, dx2, rtol=0, atol=0)
    torch.testing.assert_close(dg1, dg2, rtol=0, atol=0)  # .grad reset each call: no accumulation


def test_the_floor_gives_the_fast_paths_numbers_with_one_launch_per_kernel():
    for N in (257, 8193):  # one block, and the looped rows of both kernels
        x, gamma, dy = make_inputs(5, N, device=DEVICE, seed=4)
        xl, gl = x.clone().requires_grad_(), gamma.clone().requires_grad_()
        y = floor_rmsnorm(xl, gl, 1e-6)
        y.backward(dy)
        y_fast, rstd = rmsnorm_fast_forward(x, gamma, 1e-6)
        dx_fast, dg_fast = rmsnorm_fast_backward(x, gamma, rstd, dy)
        for got, want in ((y, y_fast), (xl.grad, dx_fast), (gl.grad, dg_fast)):
            torch.testing.assert_close(got, want, rtol=0, atol=0)
    assert floor_plan(257, torch.float32) is floor_plan(257, torch.float32)  # looked up once per (N, dtype)
    assert issubclass(FloorFunction, torch.autograd.Function)


@pytest.mark.parametrize("N", [257, 8193])
def test_the_floor_takes_no_rows_as_the_fast_path_does(N):
    # The forward kernel does not mask its one row a step (its grid never exceeds its row blocks), so at M = 0 the
    # floor launches no forward at all, where one program would write row 0 of an empty y.
    x, gamma, dy = (t[:0] if t.dim() == 2 else t for t in make_inputs(5, N, device=DEVICE, seed=4))
    xl, gl = x.clone().requires_grad_(), gamma.clone().requires_grad_()
    y = floor_rmsnorm(xl, gl, 1e-6)
    y.backward(dy)
    assert y.shape == (0, N) and xl.grad.shape == (0, N)
    torch.testing.assert_close(gl.grad, torch.zeros_like(gamma), rtol=0, atol=0)


# ----------------------------------------------------------------------------- loaders and the results folder


def test_the_committed_csvs_name_providers_as_the_one_list_does():
    for name in ("samples", "summary", "differences", "sweep", "kernels"):
        committed = pd.read_csv(results.RESULTS_DIR / f"{name}.csv")
        assert "article" in set(committed["provider"]) and set(committed["provider"]) <= set(P.PROVIDER_NAMES)
    fast = results.load_fast_table()
    assert "article" in set(fast["provider"]) and set(fast["provider"]) <= set(P.PROVIDER_NAMES)


def test_one_owner_finds_the_results_folder_and_says_what_to_do_without_it(tmp_path, monkeypatch):
    assert results.results_dir() == results.RESULTS_DIR == ROOT / "results" / "h200"
    assert results.results_dir(tmp_path) == tmp_path
    with pytest.raises(FileNotFoundError, match="no results folder at"):
        results.results_dir(tmp_path / "absent")
    monkeypatch.setattr(results, "RESULTS_DIR", tmp_path / "site-packages" / "results" / "h200")
    with pytest.raises(FileNotFoundError, match="installed without it.*RMSNORM_RESULTS_DIR"):
        results.load_fast_table()
    with pytest.raises(FileNotFoundError, match="whole_call.csv is missing; run scripts/benchmark_whole_call.py"):
        results.load_whole_call(tmp_path)


def test_the_results_folder_can_be_named_by_the_environment(tmp_path):
    code = "from rmsnorm_lab import RESULTS_DIR, results_dir; print(RESULTS_DIR); print(results_dir())"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT,
                          env={**__import__("os").environ, results.RESULTS_DIR_ENV: str(tmp_path)})
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == [str(tmp_path)] * 2


# ----------------------------------------------------------------------------- on a GPU


@pytest.mark.gpu
@cuda_only
@pytest.mark.parametrize("M, N, dtype", [(1, 4096, torch.bfloat16), (128, 257, torch.float32)])
def test_every_provider_is_ok_or_refused_on_cuda(M, N, dtype):
    x, gamma, dy = make_inputs(M, N, dtype, device="cuda", seed=5)
    for p in P.PROVIDERS:
        for build in (P.pass_calls, P.whole_calls):
            status = P.prepare(p, build, x, gamma, dy)[1]
            if p.name == "article" and dtype == torch.bfloat16:  # lessons 03-08 are float32 and float16
                assert status.startswith("refused: the article's contract: x must be float32 or float16"), status
            elif p.name == "eager_native" and eager_provenance()["verdict"] == "aten":  # no native route here
                assert status.startswith("refused: ") and "aten" in status, status
            else:
                assert status == "ok" or status.startswith("refused: `from "), (p.name, build.__name__, status)


@pytest.mark.gpu
@cuda_only
def test_host_time_and_graph_replay_of_a_whole_forward_backward_on_cuda():
    from rmsnorm_lab import time_graph_replay, time_host_calls

    x, gamma, dy = make_inputs(64, 4096, torch.bfloat16, device="cuda", seed=6)
    for name in ("fast", "eager", "floor"):
        step = P.whole_calls(P.provider(name), x, gamma, dy, passes=("forward_backward",))["forward_backward"]
        host = time_host_calls(step, warmup=2, samples=3, calls_per_sample=5)
        assert host.shape == (3,) and (host > 0).all()
        assert time_graph_replay(step, rep_ms=1) > 0  # forward + backward captured whole

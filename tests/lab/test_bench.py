"""The benchmark: committed H200 results are complete and self-consistent; timing needs CUDA.

Nothing here asserts a speed-up: the checks are on shapes, columns, units and
arithmetic that holds on any machine.
"""

import numpy as np
import pandas as pd
import pytest
import torch

import rmsnorm
import rmsnorm_lab as bench
from rmsnorm.article import forward_op, scratch_bytes
from rmsnorm.testing import make_inputs
from rmsnorm_course.teaching.buggy import rmsnorm_forward_kernel_block_mean

RESULTS = bench.load_results()
PROTOCOL_KEYS = ("path", "repeat", "M", "N", "dtype")
SWEEP_KEYS = ("path", "M", "N", "dtype")
EXPECTED_COLUMNS = {
    "samples": ["path", "provider", "repeat", "sample", "M", "N", "dtype", "us_per_call"],
    "summary": ["path", "provider", "repeat", "M", "N", "dtype", *bench.STAT_COLUMNS],
    "differences": [*PROTOCOL_KEYS, "provider", "impl_us", "reference_us", "difference_us", "percent"],
    "sweep": ["path", "provider", "M", "N", "dtype", "bytes", "whole_call_us", "whole_call_mean_us", "graph_us",
              "device_us", "device_ops_per_call", *(["cold_us"] if RESULTS.l2_cold else []),
              "gbps_whole", "gbps_graph", "gbps_device", *(["gbps_cold"] if RESULTS.l2_cold else [])],
    "kernels": ["path", "provider", "M", "N", "name", "launches_per_call", "us_per_call"],
}
#: The CSV files keep 6 decimals (µs to the picosecond): recomputations agree to that.
CSV_ROUNDING = {"rtol": 1e-6, "atol": 2e-6}
no_cuda = pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusal on machines without CUDA")
cuda_only = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


@pytest.mark.parametrize("name", sorted(EXPECTED_COLUMNS))
def test_committed_results_have_the_expected_columns(name):
    frame = getattr(RESULTS, name)
    assert list(frame.columns) == EXPECTED_COLUMNS[name]
    assert len(frame) > 0
    assert not frame.drop(columns=["name"], errors="ignore").isna().any().any(), f"{name} has empty cells"


def test_environment_says_h200_with_versions_date_and_protocol():
    env = RESULTS.environment
    assert "H200" in env["device"]["name"]
    for key in ("torch", "triton", "cuda", "python", "date_utc"):
        assert env[key], key
    pd.Timestamp(env["date_utc"])  # parses as a date
    protocol = env["protocol"]
    assert (protocol["warmup_calls"], protocol["samples"], protocol["calls_per_sample"]) == (20, 50, 20)
    assert (bench.WARMUP_CALLS, bench.SAMPLES, bench.CALLS_PER_SAMPLE) == (20, 50, 20)
    assert tuple(protocol["shape"]) == bench.DEFAULT_SHAPE == (128, 257)
    assert env["check_failures"] == []


def test_protocol_samples_are_50_per_run_at_128x257_fp32():
    samples = RESULTS.samples
    assert set(samples["path"]) == set(bench.PATHS)
    assert {"article", "reference"} <= set(samples["provider"]) <= set(bench.IMPLS)
    assert set(zip(samples["M"], samples["N"], samples["dtype"])) == {(128, 257, "float32")}
    counts = samples.groupby(["path", "provider", "repeat"]).size()
    assert (counts == bench.SAMPLES).all()
    assert samples["repeat"].nunique() == RESULTS.environment["protocol"]["repeats"]
    assert (samples["us_per_call"] > 0).all()


def test_summary_is_the_statistics_of_the_samples():
    recomputed = bench.summarize(RESULTS.samples)
    committed = RESULTS.summary
    pd.testing.assert_frame_equal(
        recomputed[committed.columns[:6]], committed[committed.columns[:6]], check_dtype=False
    )
    for column in bench.STAT_COLUMNS:
        np.testing.assert_allclose(recomputed[column], committed[column], **CSV_ROUNDING, err_msg=column)
    assert (committed["median_us"] > 0).all()
    assert (committed["min_us"] <= committed["median_us"]).all() and (
        committed["median_us"] <= committed["max_us"]
    ).all()


def test_differences_and_percentages_are_recomputed_from_the_medians():
    recomputed = bench.difference_table(RESULTS.summary, keys=PROTOCOL_KEYS)
    committed = RESULTS.differences
    assert len(recomputed) == len(committed)
    for column in ("impl_us", "reference_us", "difference_us", "percent"):
        np.testing.assert_allclose(recomputed[column], committed[column], **CSV_ROUNDING, err_msg=column)
    np.testing.assert_allclose(
        committed["difference_us"], committed["impl_us"] - committed["reference_us"], **CSV_ROUNDING
    )
    np.testing.assert_allclose(
        committed["percent"], 100 * committed["difference_us"] / committed["reference_us"], **CSV_ROUNDING
    )


def test_sweep_covers_the_grid_where_the_scratch_contract_allows():
    allowed, skipped = bench.sweep_shapes()
    assert skipped == [(8192, 4096)]  # 8192 * 4096 * 4 bytes = 128 MiB of partials > 64 MiB
    assert set(zip(RESULTS.sweep["M"], RESULTS.sweep["N"])) == set(allowed)
    assert [(s["M"], s["N"]) for s in RESULTS.environment["sweep"]["skipped"]] == skipped
    assert (RESULTS.sweep.groupby(["M", "N"]).size() == RESULTS.sweep["provider"].nunique() * 2).all()


def test_sweep_bytes_and_rates_follow_from_the_counts():
    sweep = RESULTS.sweep
    expected = [
        bench.bytes_moved(p, m, n, getattr(torch, d))
        for p, m, n, d in zip(sweep["path"], sweep["M"], sweep["N"], sweep["dtype"])
    ]
    assert sweep["bytes"].tolist() == expected  # the current convention, for every impl
    rates = [rate for rate, time in bench.RATE_COLUMNS.items() if time in sweep.columns]
    assert len(rates) == (4 if RESULTS.l2_cold else 3)
    for rate in rates:
        time = bench.RATE_COLUMNS[rate]
        assert (sweep[time] > 0).all(), time
        np.testing.assert_allclose(sweep[rate], sweep["bytes"] / (sweep[time] * 1e3), rtol=1e-5, err_msg=rate)
    pd.testing.assert_frame_equal(bench.recompute_rates(sweep), sweep, check_exact=False, rtol=1e-5)


def test_environment_states_the_byte_convention_and_l2():
    protocol = RESULTS.environment["protocol"]
    assert protocol["bytes"] == bench.BYTE_CONVENTION
    if not RESULTS.l2_cold:  # an older run: its L2-warm times are marked as such
        assert protocol["l2_cold"].startswith("not measured")


def test_recompute_rates_replaces_an_old_byte_count():
    old = RESULTS.sweep.assign(bytes=RESULTS.sweep["bytes"] + 8 * RESULTS.sweep["M"] * RESULTS.sweep["N"])
    old["gbps_graph"] = old["bytes"] / (old["graph_us"] * 1e3)
    fixed = bench.recompute_rates(old)
    np.testing.assert_allclose(fixed["gbps_graph"], RESULTS.sweep["gbps_graph"], rtol=1e-5)
    assert fixed["bytes"].tolist() == RESULTS.sweep["bytes"].tolist()
    assert (old["bytes"] > fixed["bytes"]).all()  # the scratch is charged to no one now


def test_kernel_table_adds_up_to_the_sweep_device_time():
    totals = RESULTS.kernels.groupby(["path", "provider", "M", "N"])[["launches_per_call", "us_per_call"]].sum()
    sweep = RESULTS.sweep.set_index(["path", "provider", "M", "N"]).loc[totals.index]
    np.testing.assert_allclose(totals["us_per_call"], sweep["device_us"], rtol=1e-4)
    np.testing.assert_allclose(totals["launches_per_call"], sweep["device_ops_per_call"], rtol=1e-6)


def test_article_rtx3090_differences_to_two_decimals():
    medians = pd.DataFrame(
        {"path": ["forward", "forward", "forward_backward", "forward_backward"],
         "provider": ["article", "reference", "article", "reference"],
         "median_us": [70.71, 52.17, 251.44, 267.34]}
    )
    table = bench.difference_table(medians).set_index("path")
    assert round(table.loc["forward", "difference_us"], 2) == 18.54
    assert round(table.loc["forward", "percent"], 2) == 35.54
    assert round(table.loc["forward_backward", "difference_us"], 2) == -15.90
    assert round(table.loc["forward_backward", "percent"], 2) == -5.95


def test_bytes_counted_by_hand_for_128x257_fp32():
    # forward: x and y (2 * 128 * 257 * 4) + gamma (257 * 4) + rstd (128 * 4)
    assert bench.forward_bytes(128, 257) == 263_168 + 1_028 + 512 == 264_708
    # backward: x, dy, dx (3 * 131_584) + gamma read and dgamma written (2 * 1_028) + rstd (512); no scratch
    assert bench.backward_bytes(128, 257) == 3 * 131_584 + 2 * 1_028 + 512 == 397_320
    assert bench.forward_backward_bytes(128, 257) == 264_708 + 397_320 == 662_028
    assert bench.bytes_moved("forward_backward", 128, 257) == 662_028
    assert bench.forward_bytes(128, 257, torch.float16) == (2 * 128 * 257 + 257) * 2 + 512
    # s and s_w are separate: fp16 x with an fp32 gamma
    assert bench.forward_bytes(128, 257, torch.float16, torch.float32) == 2 * 128 * 257 * 2 + 257 * 4 + 512
    assert bench.backward_bytes(4, 8, torch.float16, torch.float32) == 3 * 4 * 8 * 2 + 2 * 8 * 4 + 4 * 4


def test_fused_add_bytes_counted_by_hand_for_128x257():
    # forward, fp32: x, residual, y, residual_out (4 * 131_584) + gamma (1_028) + rstd (512)
    assert bench.fused_add_forward_bytes(128, 257) == 4 * 131_584 + 1_028 + 512 == 527_876
    # the plain forward's bytes + the residual read and residual_out written
    assert bench.fused_add_forward_bytes(128, 257) == bench.forward_bytes(128, 257) + 2 * 131_584
    # backward, fp32: residual_out, dy, d_residual_out read and dh written (4 * 131_584) + gamma, dgamma + rstd
    assert bench.fused_add_backward_bytes(128, 257) == 4 * 131_584 + 2 * 1_028 + 512 == 528_904
    # bf16 x with a float32 residual stream: y and dy 2 bytes, residual, residual_out, d_residual_out, dh 4
    M, N = 4, 8
    assert bench.fused_add_forward_bytes(M, N, torch.bfloat16, torch.float32, torch.float32) == (
        2 * M * N * (2 + 4) + N * 4 + 4 * M)
    assert bench.fused_add_backward_bytes(M, N, torch.bfloat16, torch.float32, torch.float32) == (
        M * N * (3 * 4 + 2) + 2 * N * 4 + 4 * M)
    assert bench.gbps(1_000_000, 1.0) == 1000.0  # 10^6 bytes in 1 µs = 1000 GB/s
    with pytest.raises(ValueError, match="path must be"):
        bench.bytes_moved("backward", 1, 1)


def test_bytes_are_the_same_for_every_impl_and_below_the_article_paths_traffic():
    # The article's path also writes and reads M*N*4 bytes of fp32 partials: the declared count leaves them out.
    for M, N in bench.sweep_shapes()[0]:
        article_path = bench.forward_backward_bytes(M, N) + 2 * scratch_bytes(M, N)
        assert bench.forward_backward_bytes(M, N) < article_path


def test_check_calls_passes_the_package_and_catches_a_wrong_kernel(device):
    x, gamma, dy = make_inputs(3, 257, device=device, seed=1)
    calls = bench.make_calls(x, gamma, dy, include_liger=False)
    assert set(calls) == {(p, i) for p in bench.PATHS for i in ("article", "reference")}
    passed = bench.check_calls(calls, x, gamma, dy)
    assert len(passed) == 7  # forward: y, rstd (article), y (reference); forward_backward: dx, dgamma each
    calls[("forward", "article")] = lambda: forward_op(x, gamma, kernel=rmsnorm_forward_kernel_block_mean)
    with pytest.raises(AssertionError, match="forward/article y 3x257"):
        bench.check_calls(calls, x, gamma, dy)


def test_environment_info_names_versions_on_any_machine():
    info = bench.environment_info()
    assert info["torch"] == torch.__version__
    assert info["device"]["name"]
    assert info["launch_path"] == rmsnorm.launch_path()  # the path the fast rows' host time went through
    assert info["native_failure"] == rmsnorm.native_launch.state.failure


@no_cuda
@pytest.mark.parametrize(
    "call",
    [
        lambda: bench.time_whole_calls(lambda: None),
        lambda: bench.time_graph_replay(lambda: None),
        lambda: bench.profile_kernels(lambda: None),
        lambda: bench.kernel_time_us(lambda: None),
        lambda: bench.flush_l2(),
        lambda: bench.copy_bandwidth_gbps(1024),
        lambda: bench.run_protocol(2, 8),
        lambda: bench.measure_shape(2, 8),
        lambda: bench.run_sweep(),
    ],
    ids=["whole_calls", "graph_replay", "profile", "kernel_time", "flush", "copy", "protocol", "measure_shape",
         "sweep"],
)
def test_timing_refuses_to_run_without_cuda(call):
    with pytest.raises(bench.BenchmarkUnavailableError, match="needs a CUDA GPU"):
        call()


@pytest.mark.gpu
@cuda_only
def test_tiny_timing_on_cuda_returns_positive_times(monkeypatch):
    # time the kernel, not NaN fills: the plain allocator in place of the poisoning one
    monkeypatch.setattr("rmsnorm.device.new_output", lambda shape, dtype, device: torch.empty(shape, dtype=dtype,
                                                                                              device=device))
    x, gamma, _ = make_inputs(4, 257, device="cuda")
    call = lambda: forward_op(x, gamma)  # noqa: E731
    samples = bench.time_whole_calls(call, warmup=2, samples=3, calls_per_sample=2)
    assert samples.shape == (3,) and (samples > 0).all()
    assert bench.time_graph_replay(call, rep_ms=1) > 0
    for flush in (False, True):
        profile = bench.profile_kernels(call, flush=flush, calls=2, warmup=1)
        assert profile.device_us > 0 and profile.ops_per_call == 1  # one kernel; the flush is not counted
        assert set(profile.by_name) == {"rmsnorm_forward_kernel"} and profile.l2_cold is flush
    assert bench.kernel_time_us(call, calls=2, warmup=1) > 0
    with pytest.raises(ValueError, match="cannot evict"):
        bench.flush_l2(1024)  # smaller than any L2


@pytest.mark.gpu
@cuda_only
def test_the_flush_evicts_l2():
    # 16 MiB fit in the L2 of an H100/H200 (50-60 MiB): read back to back they come from L2; after a 256 MiB
    # flush they must come from device memory. Not a speed-up claim: a check that the flush does its job.
    data = torch.ones(4 * 2**20, device="cuda")
    warm = bench.kernel_time_us(data.sum, flush=False, calls=20)
    cold = bench.kernel_time_us(data.sum, calls=20)
    assert cold > warm, f"L2-cold {cold:.2f} us is not above L2-warm {warm:.2f} us: the flush did not evict L2"


@pytest.mark.gpu
@cuda_only
def test_measure_shape_has_every_column_on_cuda():
    rows, kernels = bench.measure_shape(8, 257, include_liger=False)
    assert list(rows.columns) == ["path", "provider", "M", "N", "dtype", "bytes", "whole_call_us", "whole_call_mean_us",
                                  "graph_us", "device_us", "device_ops_per_call", "cold_us",
                                  "gbps_whole", "gbps_graph", "gbps_device", "gbps_cold"]
    assert (rows[["whole_call_us", "graph_us", "device_us", "cold_us"]] > 0).all().all()
    pd.testing.assert_frame_equal(bench.recompute_rates(rows), rows, check_exact=False, rtol=1e-9)
    assert list(kernels.columns) == EXPECTED_COLUMNS["kernels"]

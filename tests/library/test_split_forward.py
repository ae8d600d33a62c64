"""The split forward (FastConfig.split > 1): a wide row over several programs that wait for each other.

On the CPU: what it refuses and when (before any output, and under the interpreter, whose programs run one
after another), its grid, the sweep's candidates, and its PTX for sm_90 (128-bit accesses, no spill to speak of).
On a GPU: its outputs against the float64 oracle and the loop forward's, bitwise the same on a second call,
across strided rows, odd widths, no weight, an offset and more rows than the grid holds at once, under a CUDA
graph, and a grid too large to be resident refused by the driver instead of hanging.
"""

from __future__ import annotations

import json

import pytest
import torch

import checkout_scripts
from rmsnorm import ContractError, FastConfig, layernorm_fast_forward, rmsnorm_fast_forward
from rmsnorm.config import forward_config
from rmsnorm.forward import launch_add_forward
from rmsnorm.split_forward import split_grid
from rmsnorm.testing import assert_close, make_inputs, oracle, refused_before_allocating
from rmsnorm_lab.tuning import forward_candidates, split_candidates

GPU = torch.cuda.is_available()
needs_gpu = pytest.mark.skipif(not GPU, reason="the split forward runs on a GPU only (its programs wait on each other)")
EPS = 1e-6


def split(n_split: int, block_n: int, warps: int = 16, pps: int = 1) -> FastConfig:
    return FastConfig(BLOCK_M=1, BLOCK_N=block_n, num_warps=warps, programs_per_sm=pps, num_stages=1, split=n_split)


@pytest.mark.parametrize("config, N, match", [
    (split(3, 8192), 20000, "power of two"),
    (split(2, 8192), 16385, "cover 16384 of the row's 16385"),
])
def test_a_split_that_cannot_run_is_refused_before_any_output(config, N, match, device):
    x = torch.ones((2, N), device=device)
    with refused_before_allocating(match):
        rmsnorm_fast_forward(x, None, EPS, config=config)


def test_the_fused_add_and_the_layernorm_refuse_a_split(device):
    x = torch.ones((2, 20000), device=device)
    with refused_before_allocating("plain RMSNorm's only"):
        launch_add_forward(x, x, None, EPS, split(2, 16384))
    with refused_before_allocating("plain RMSNorm's only"):
        layernorm_fast_forward(x, None, None, 1e-5, config=split(2, 16384))


@pytest.mark.skipif(GPU, reason="the interpreter's refusal; a GPU runs the split forward")
def test_the_interpreter_refuses_it_by_name(device):
    x = torch.ones((2, 20000), device=device)
    with refused_before_allocating("GPU only.*one after another"):
        rmsnorm_fast_forward(x, None, EPS, config=split(2, 16384))


@pytest.mark.parametrize("M, sms, pps, n_split, expected", [
    (1000, 132, 1, 8, 128),  # down to a multiple of SPLIT: 16 groups of 8
    (1000, 132, 2, 16, 256),
    (3, 132, 1, 8, 24),  # no more programs than the rows need
    (1, 132, 4, 32, 32),
])
def test_the_grid_is_whole_groups_of_split_programs(M, sms, pps, n_split, expected):
    P = split_grid(split(n_split, 8192, 8, pps), M, sms)
    assert P == expected and P % n_split == 0


def test_too_few_programs_for_one_row_is_refused():
    with pytest.raises(ContractError, match="needs 32 programs resident"):
        split_grid(split(32, 8192, 8, 1), 10, 16)


@pytest.mark.parametrize("N", [16385, 32768, 40000, 65536, 100001, 131072, 262144])
def test_every_split_candidate_covers_the_row_and_gives_each_program_columns(N):
    candidates = list(split_candidates(N, torch.bfloat16))
    assert candidates and len(set(candidates)) == len(candidates)
    for c in candidates:
        assert c.split * c.BLOCK_N >= N > (c.split - 1) * c.BLOCK_N  # covers the row, and the last part has columns
        per_thread = c.BLOCK_N // (32 * c.num_warps)
        assert per_thread in (16, 32) and c.num_warps * c.programs_per_sm <= 32
        assert c.programs_per_sm == 1 or c.num_warps * c.programs_per_sm * per_thread <= 512


def test_only_the_plain_rmsnorm_sweeps_split_candidates_and_only_past_16384():
    assert not list(split_candidates(16384, torch.bfloat16))
    assert set(split_candidates(65536, torch.bfloat16)) <= set(forward_candidates(65536, torch.bfloat16))
    for norm in ("layernorm", "rmsnorm_add"):
        assert all(c.split == 1 for c in forward_candidates(65536, torch.bfloat16, norm))
    assert all(forward_config(N, d).split == 1 for N in (1, 4096, 65536, 262144)
               for d in (torch.float32, torch.bfloat16))  # no rule takes it yet


def test_its_ptx_for_sm90_moves_16_bytes_at_a_time_without_spilling():
    """ptxas's view of the kernels the sweep would try at 32768 bf16 (compiled for sm_90 on any machine)."""
    kernels = [json.loads(line) for line in checkout_scripts.ptx_tool(32768, "bfloat16", "--split").splitlines()]
    assert {(k["split"], k["BLOCK_N"], k["num_warps"]) for k in kernels} == {
        (c.split, c.BLOCK_N, c.num_warps) for c in split_candidates(32768, torch.bfloat16)}
    for k in kernels:
        per_thread = k["BLOCK_N"] // (32 * k["num_warps"])
        assert k["ld.v4"] == k["st.v4"] == per_thread * 2 // 16, k  # every x load and y store 16 bytes wide
        assert k["spill_bytes"] <= 8, k


# --- on a GPU ---------------------------------------------------------------------------------------------------

GPU_CASES = [  # M, N, dtype, weight dtype (None: no weight), offset, split config
    (7, 65536, torch.bfloat16, torch.bfloat16, 0.0, split(4, 16384, 32)),
    (300, 65536, torch.bfloat16, torch.float32, 0.0, split(8, 8192, 16)),  # more rows than groups, float32 weight
    (5, 131072, torch.float32, torch.float32, 0.0, split(8, 16384, 16)),
    (3, 262144, torch.float16, torch.float16, 1.0, split(16, 16384, 32)),
    (9, 40001, torch.bfloat16, None, 0.0, split(4, 16384, 16)),  # odd: rows at 2-byte offsets, the last part short
]


@needs_gpu
@pytest.mark.parametrize("M, N, dtype, weight_dtype, offset, config", GPU_CASES)
def test_on_a_gpu_it_matches_the_oracle_and_the_loop_and_repeats_bitwise(M, N, dtype, weight_dtype, offset, config):
    x, weight, _ = make_inputs(M, N, dtype, "cuda", seed=N + M, weight_dtype=weight_dtype or dtype)
    weight = None if weight_dtype is None else weight
    y, rstd = rmsnorm_fast_forward(x, weight, EPS, config=config, offset=offset)
    y64 = oracle(x, torch.ones(N, dtype=torch.float64, device="cuda") if weight is None else weight, eps=EPS,
                 offset=offset, on=x.device)
    assert_close(y, y64, dtype=dtype, msg="y")
    loop_y, loop_rstd = rmsnorm_fast_forward(x, weight, EPS, offset=offset)
    torch.testing.assert_close(rstd, loop_rstd, rtol=1e-5, atol=0)  # the same sum, added in another order
    again_y, again_rstd = rmsnorm_fast_forward(x, weight, EPS, config=config, offset=offset)
    assert torch.equal(again_y, y) and torch.equal(again_rstd, rstd)  # a fixed order of the partials


@needs_gpu
def test_on_a_gpu_no_rows_launch_nothing():
    x = torch.empty((0, 65536), dtype=torch.bfloat16, device="cuda")
    y, rstd = rmsnorm_fast_forward(x, None, EPS, config=split(4, 16384, 32))
    assert y.shape == (0, 65536) and rstd.shape == (0,)


@needs_gpu
def test_on_a_gpu_strided_rows_are_read_in_place():
    buf, weight, _ = make_inputs(6, 65536 + 64, torch.bfloat16, "cuda", seed=3)
    x, config = buf[:, 64:], split(4, 16384, 32)
    y, rstd = rmsnorm_fast_forward(x, weight[64:], EPS, config=config)
    y_copy, rstd_copy = rmsnorm_fast_forward(x.contiguous(), weight[64:], EPS, config=config)
    assert torch.equal(y, y_copy) and torch.equal(rstd, rstd_copy)


@needs_gpu
def test_on_a_gpu_it_replays_from_a_cuda_graph():
    x, weight, _ = make_inputs(4, 131072, torch.bfloat16, "cuda", seed=5)
    other = make_inputs(4, 131072, torch.bfloat16, "cuda", seed=6)[0]
    config = split(8, 16384, 32)
    rmsnorm_fast_forward(x, weight, EPS, config=config)  # compiled and cached before the capture
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        captured, captured_rstd = rmsnorm_fast_forward(x, weight, EPS, config=config)
    x.copy_(other)
    graph.replay()
    want, want_rstd = rmsnorm_fast_forward(other, weight, EPS, config=config)
    assert torch.equal(captured, want) and torch.equal(captured_rstd, want_rstd)  # the replay read the new x


@needs_gpu
def test_on_a_gpu_a_grid_that_cannot_be_resident_at_once_is_refused_by_the_driver():
    x, weight, _ = make_inputs(1024, 65536, torch.bfloat16, "cuda", seed=7)
    with pytest.raises(RuntimeError, match="(?i)cooperative|too many blocks|too large"):
        rmsnorm_fast_forward(x, weight, EPS, config=split(2, 32768, 32, 8))  # 8 programs of 1024 threads an SM
        torch.cuda.synchronize()

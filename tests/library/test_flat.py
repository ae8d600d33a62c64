"""The flat kernels (FastConfig.flat): whole contiguous rows read as one dense run, each row's sums from a
segmented scan; the backward's dgamma from per-program column sums and the table's fixed-order reduction.

On the CPU (the interpreter) and on a GPU alike: outputs against the float64 oracle and the table's kernels
(rstd to float32's rounding), every element written (outputs poisoned with NaN), bitwise the same on a second
call, at M = 1, tiles that end mid-run, more tiles than programs, and odd, tiny and non-power-of-two widths, no
weight and an offset; what they refuse, before any output. On the CPU also the sweep's candidates and their PTX
for sm_90 (16 bytes at a time at N = 17, where the table's kernels move one element).
"""

from __future__ import annotations

import json

import pytest
import torch

import checkout_scripts
from rmsnorm import (
    FastConfig,
    layernorm_fast_backward,
    layernorm_fast_forward,
    rmsnorm_fast_backward,
    rmsnorm_fast_forward,
)
from rmsnorm.backward import launch_backward
from rmsnorm.config import backward_config, forward_config, layernorm_backward_config
from rmsnorm.flat import flat_rows
from rmsnorm.forward import launch_add_forward
from rmsnorm.testing import (
    assert_close,
    dgamma_tolerance,
    make_inputs,
    oracle,
    poisoned_outputs,
    refused_before_allocating,
)
from rmsnorm_lab.tuning import FLAT_BACKWARD_REGISTERS, backward_candidates, flat_candidates, forward_candidates

GPU = torch.cuda.is_available()
EPS = 1e-6
DTYPES = (torch.float32, torch.float16,
          pytest.param(torch.bfloat16, marks=pytest.mark.skipif(not GPU, reason="bf16 runs on a GPU only")))


def flat(block_n: int, warps: int = 4, pps: int | None = None, stages: int = 1) -> FastConfig:
    return FastConfig(BLOCK_M=1, BLOCK_N=block_n, num_warps=warps, programs_per_sm=pps, num_stages=stages, flat=True)


SHAPES = [  # M, N, tile (BLOCK_N), weight, offset
    (1, 17, 512, True, 0.0),
    (37, 17, 512, True, 0.0),  # 24 rows a tile: the second tile ends mid-run
    (130, 9, 256, False, 0.0),
    (5, 1, 64, True, 0.0),
    (3, 31, 128, True, 1.0),
    (100, 100, 1024, True, -0.5),
    (9, 255, 1024, True, 0.0),
    (300, 7, 128, True, 0.0),  # 16 rows a tile, 19 tiles: more than the interpreter's 4 programs
]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("M, N, block_n, has_weight, offset", SHAPES)
def test_the_forward_matches_the_oracle_and_the_table_and_repeats_bitwise(M, N, block_n, has_weight, offset, dtype,
                                                                          device):
    x, weight, _ = make_inputs(M, N, dtype, device, seed=M + N)
    weight = (weight.float() - offset).to(dtype) if has_weight else None
    with poisoned_outputs():  # an element the kernel never writes stays NaN and fails every comparison
        y, rstd = rmsnorm_fast_forward(x, weight, EPS, config=flat(block_n), offset=offset)
    ones = torch.ones(N, dtype=torch.float64, device=device)
    assert_close(y, oracle(x, ones if weight is None else weight, eps=EPS, offset=offset, on=device), dtype=dtype)
    table_y, table_rstd = rmsnorm_fast_forward(x, weight, EPS, config=forward_config(N, dtype), offset=offset)
    torch.testing.assert_close(rstd, table_rstd, rtol=2e-6, atol=0)  # the blocked kernel's sum, in another order
    again_y, again_rstd = rmsnorm_fast_forward(x, weight, EPS, config=flat(block_n), offset=offset)
    assert torch.equal(again_y, y) and torch.equal(again_rstd, rstd)


@pytest.mark.parametrize("stages", [1, 3])  # 3: the loop over full tiles pipelined (a GPU compiles it; the
# interpreter runs it as 1)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("M, N, block_n, has_weight, offset", SHAPES)
def test_the_backward_matches_the_oracle_and_the_table_and_repeats_bitwise(M, N, block_n, has_weight, offset,
                                                                           dtype, stages, device):
    x, weight, dy = make_inputs(M, N, dtype, device, seed=M + N)
    weight = (weight.float() - offset).to(dtype) if has_weight else None
    _, rstd = rmsnorm_fast_forward(x, weight, EPS, offset=offset)
    config = flat(block_n, pps=2, stages=stages)
    with poisoned_outputs():
        dx, dgamma = rmsnorm_fast_backward(x, weight, rstd, dy, config=config, offset=offset)
    ones = torch.ones(N, dtype=torch.float64, device=device)
    _, dx64, dgamma64 = oracle(x, ones if weight is None else weight, dy, EPS, offset=offset, on=device)
    assert_close(dx, dx64, dtype=dtype, msg="dx")
    if weight is None:
        assert dgamma is None
    else:
        assert_close(dgamma, dgamma64, tol=dgamma_tolerance(M, dtype, dtype), msg="dgamma")
    table_dx, _ = rmsnorm_fast_backward(x, weight, rstd, dy, config=backward_config(N, dtype), offset=offset)
    assert_close(dx, table_dx.double(), dtype=dtype, msg="dx against the blocked kernel's")
    again_dx, again_dgamma = rmsnorm_fast_backward(x, weight, rstd, dy, config=config, offset=offset)
    assert torch.equal(again_dx, dx) and (weight is None or torch.equal(again_dgamma, dgamma))


@pytest.mark.parametrize("dtype", [torch.float16, pytest.param(torch.bfloat16, marks=pytest.mark.skipif(
    not GPU, reason="bf16 runs on a GPU only"))])
def test_a_float32_weight_beside_16_bit_rows_and_no_rows_at_all(dtype, device):
    x, weight, dy = make_inputs(45, 17, dtype, device, seed=3, weight_dtype=torch.float32)
    y, rstd = rmsnorm_fast_forward(x, weight, EPS, config=flat(512))
    dx, dgamma = rmsnorm_fast_backward(x, weight, rstd, dy, config=flat(512, pps=1))
    y64, dx64, dgamma64 = oracle(x, weight, dy, EPS, on=device)
    assert_close(y, y64, dtype=dtype)
    assert_close(dx, dx64, dtype=dtype)
    assert dgamma.dtype == torch.float32
    assert_close(dgamma, dgamma64, tol=dgamma_tolerance(45, dtype, torch.float32))
    empty = x[:0]
    y0, rstd0 = rmsnorm_fast_forward(empty, weight, EPS, config=flat(512))
    dx0, dgamma0 = rmsnorm_fast_backward(empty, weight, rstd0, empty, config=flat(512, pps=1))
    assert y0.shape == (0, 17) and rstd0.shape == (0,) and dx0.shape == (0, 17)
    assert torch.equal(dgamma0, torch.zeros(17, dtype=torch.float32, device=device))


def test_the_backward_refuses_what_the_forward_refuses(device):
    buf, dy = torch.ones((4, 24), device=device), torch.ones((4, 17), device=device)
    rstd = torch.ones(4, device=device)
    with refused_before_allocating("x's row stride must be N = 17; got 24"):
        rmsnorm_fast_backward(buf[:, :17], None, rstd, dy, config=flat(512))
    with refused_before_allocating("dy's row stride must be N = 17; got 24"):
        rmsnorm_fast_backward(dy, None, rstd, buf[:, :17], config=flat(512))
    with refused_before_allocating("narrower than a row of 17"):
        rmsnorm_fast_backward(dy, None, rstd, dy, config=flat(16))
    with refused_before_allocating("persistent grid: give FastConfig.programs_per_sm"):
        rmsnorm_fast_backward(dy, None, rstd, dy, config=flat(512))
    with refused_before_allocating("plain RMSNorm's only"):
        launch_backward(dy, None, rstd, dy, flat(512), 0.0, dy)
    with refused_before_allocating("plain RMSNorm's only"):
        layernorm_fast_backward(dy, None, None, rstd, rstd, dy, config=flat(512))


def test_strided_rows_are_refused_before_any_output(device):
    buf = torch.ones((4, 24), device=device)
    with refused_before_allocating("row stride must be N = 17; got 24"):
        rmsnorm_fast_forward(buf[:, :17], None, EPS, config=flat(512))
    y, _ = rmsnorm_fast_forward(buf[:1, :17], None, EPS, config=flat(512))  # one row: any stride is one run
    assert torch.allclose(y.float(), torch.ones(1, 17, device=device), atol=1e-3)


def test_a_tile_narrower_than_a_row_and_other_norms_are_refused(device):
    x = torch.ones((4, 300), device=device)
    with refused_before_allocating("narrower than a row of 300"):
        rmsnorm_fast_forward(x, None, EPS, config=flat(256))
    with refused_before_allocating("plain RMSNorm's only"):
        launch_add_forward(x, x, None, EPS, flat(1024))
    with refused_before_allocating("plain RMSNorm's only"):
        layernorm_fast_forward(x, None, None, 1e-5, config=flat(1024))
    both = FastConfig(BLOCK_M=1, BLOCK_N=1024, num_warps=4, programs_per_sm=1, num_stages=1, split=2, flat=True)
    with refused_before_allocating("flat or split, not both"):
        rmsnorm_fast_forward(x, None, EPS, config=both)


def _spy(monkeypatch, module, name):
    """Count the launches of ``module.name`` (a DirectLauncher), still launching."""
    calls = []
    real = getattr(module, name)
    monkeypatch.setattr(module, name, lambda *a, **k: (calls.append(a[0]), real(*a, **k))[1])
    return calls


def test_the_table_takes_them_for_dense_short_odd_rows_only(monkeypatch, device):
    """Without a config, the plain RMSNorm's dense odd rows of 3-33 columns (16-bit) run the flat kernels, forward
    and backward, with the oracle's numbers; the same rows in a strided buffer, the fused add and the LayerNorm
    run the blocked ones; so do N = 1, an even N and a wide odd N."""
    import rmsnorm.flat as flat_module

    forward, backward = _spy(monkeypatch, flat_module, "_launch"), _spy(monkeypatch, flat_module, "_launch_backward")
    x, weight, dy = make_inputs(70, 17, torch.float16, device, seed=5)
    assert forward_config(17, torch.float16, True).flat and not forward_config(17, torch.float16).flat
    y, rstd = rmsnorm_fast_forward(x, weight, EPS)
    dx, dgamma = rmsnorm_fast_backward(x, weight, rstd, dy)
    assert len(forward) == 1 and len(backward) == 1
    y64, dx64, dgamma64 = oracle(x, weight, dy, EPS, on=device)
    assert_close(y, y64, dtype=torch.float16)
    assert_close(dx, dx64, dtype=torch.float16)
    assert_close(dgamma, dgamma64, tol=dgamma_tolerance(70, torch.float16, torch.float16))
    buf = torch.zeros(70, 24, dtype=torch.float16, device=device)
    buf[:, :17] = x
    strided_y, strided_rstd = rmsnorm_fast_forward(buf[:, :17], weight, EPS)
    strided_dx, _ = rmsnorm_fast_backward(buf[:, :17], weight, strided_rstd, dy)
    dy_buf = buf.clone()
    dy_buf[:, :17] = dy
    rmsnorm_fast_backward(x, weight, rstd, dy_buf[:, :17])  # x dense, dy strided: blocked too
    assert len(forward) == 1 and len(backward) == 1
    assert_close(strided_y, y64, dtype=torch.float16)
    assert_close(strided_dx, dx64, dtype=torch.float16)
    # the blocked choice, passed explicitly: the strided call's numbers bit for bit, whatever the layout
    blocked_y, blocked_rstd = rmsnorm_fast_forward(x, weight, EPS, config=forward_config(17, torch.float16))
    blocked_dx, _ = rmsnorm_fast_backward(x, weight, strided_rstd, dy, config=backward_config(17, torch.float16))
    assert torch.equal(blocked_y, strided_y) and torch.equal(blocked_rstd, strided_rstd)
    assert torch.equal(blocked_dx, strided_dx)
    launch_add_forward(x, x, weight, EPS)
    layernorm_fast_forward(x, weight, None, 1e-5)
    for N in (1, 16, 67):
        xn, wn, _ = make_inputs(8, N, torch.float16, device, seed=N)
        rmsnorm_fast_forward(xn, wn, EPS)
    assert len(forward) == 1


@pytest.mark.parametrize("N, size, block_n, rows", [
    (17, 2, 512, 24),  # 30 fit; a multiple of 8 rows makes whole 16-byte vectors of 17-element rows
    (17, 4, 512, 28),  # float32: a multiple of 4
    (100, 2, 1024, 10),  # 100 · 2 bytes is 16-byte aligned every 2 rows
    (255, 2, 1024, 4),  # fewer rows than a vector's 8: as many as fit, the tile then not aligned
    (1, 2, 64, 64),
])
def test_a_tile_takes_whole_rows_aligned_to_16_bytes_where_it_can(N, size, block_n, rows):
    assert flat_rows(flat(block_n), N, size) == rows
    assert rows * N <= block_n


@pytest.mark.parametrize("pass_", ["forward", "backward"])
def test_the_sweep_tries_them_for_the_plain_norm_at_short_rows_only(pass_):
    assert list(flat_candidates(17, torch.bfloat16, pass_)) and list(flat_candidates(1, torch.bfloat16, pass_))
    assert not any(list(flat_candidates(N, torch.bfloat16, pass_)) for N in (32, 64, 256, 257, 4096))
    sweep = forward_candidates if pass_ == "forward" else backward_candidates
    assert set(flat_candidates(17, torch.bfloat16, pass_)) <= set(sweep(17, torch.bfloat16))
    others = (forward_candidates(17, torch.bfloat16, "layernorm") if pass_ == "forward" else
              backward_candidates(17, torch.bfloat16, layernorm_backward_config, "layernorm"))
    assert not any(c.flat for c in others)
    for dtype in (torch.float16, torch.float32):
        for c in flat_candidates(100, dtype, pass_):
            assert c.BLOCK_N >= 100 and c.BLOCK_N // (32 * c.num_warps) <= (16 if pass_ == "forward" else 8)
            if pass_ == "backward":  # every program resident: ptxas's registers at most, times the threads
                per_thread = c.BLOCK_N // (32 * c.num_warps)
                registers = FLAT_BACKWARD_REGISTERS[dtype == torch.float32][per_thread > 4]
                assert c.num_warps * 32 * c.programs_per_sm * registers <= 65536


def test_its_ptx_for_sm90_moves_16_bytes_at_a_time_at_an_odd_width():
    kernels = [json.loads(line) for line in checkout_scripts.ptx_tool(17, "bfloat16", "--flat").splitlines()]
    for which in ("forward", "backward"):  # one kernel per tile shape and depth (the grid aside)
        shapes = {(c.BLOCK_N, c.num_warps, c.num_stages) for c in flat_candidates(17, torch.bfloat16, which)}
        assert {(k["BLOCK_N"], k["num_warps"], k["num_stages"]) for k in kernels if k["pass"] == which} == shapes
    for k in kernels:
        per_thread = k["BLOCK_N"] // (32 * k["num_warps"])
        loads = 1 if k["pass"] == "forward" else 2  # x; x and dy
        if k["num_stages"] == 1:  # full tiles: 16 bytes a load wherever 8 elements fit
            assert k["ld.v4"] == loads * (per_thread * 2 // 16), k
        else:  # pipelined: the full tiles' x and dy copied 16 bytes at a time into shared memory
            assert k["cp.async.16"] >= loads * (per_thread * 2 // 16), k
        assert k["spill_bytes"] == 0, k
        if k["pass"] == "backward":  # ptxas's registers in its 8-a-thread units: each candidate's programs fit
            registers = -(-k["registers"] // 8) * 8
            for c in flat_candidates(17, torch.bfloat16, "backward"):
                if (c.BLOCK_N, c.num_warps, c.num_stages) == (k["BLOCK_N"], k["num_warps"], k["num_stages"]):
                    assert c.num_warps * 32 * c.programs_per_sm * registers <= 65536, (c, k)
            assert k["registers"] <= FLAT_BACKWARD_REGISTERS[False][per_thread > 4], k

"""The fast path side by side: named providers, oracle check first, L2-cold kernel time, one byte count.

Providers, for the forward and the backward of an (M, N) shape:
``fast`` (rmsnorm.fast launchers), ``article`` (the kernels of lessons 03–08,
where their contract allows), ``eager`` (``F.rms_norm`` + autograd),
``compile`` (``torch.compile(F.rms_norm)``, MixOrderReduction on, the default
in torch 2.11), ``compile_nomix`` (the same with
``torch._inductor.config.triton.mix_order_reduction = False``) and ``liger``
(Liger-Kernel's RMSNorm, ``casting_mode="llama"``, not in place).

Method: every provider's y, dx and dgamma are compared with the float64
oracle (computed on the GPU) with the declared tolerances, and a provider that
fails is reported and not timed; then :func:`rmsnorm.bench.kernel_time_us`
(profiler kernel time, L2 flushed before every call); bytes are the minimum
traffic (:func:`rmsnorm.bench.forward_bytes`, :func:`~rmsnorm.bench.backward_bytes`)
for everyone, so rates are lower bounds. :func:`tune` sweeps the fast path's
configurations the same way. Used by scripts/benchmark_fast.py, which wrote
results/h200/fast.csv and fast_tuning.csv.

Source: notebooks/12_tuning_and_side_by_side.ipynb; quack
``benchmarks/benchmark_rmsnorm.py`` (named providers, one byte count).
"""

from __future__ import annotations

import itertools
import time

import pandas as pd
import torch
import torch.nn.functional as F

from ..backward import backward_rows
from ..contract import MAX_N, MAX_SCRATCH_BYTES, scratch_bytes
from ..fast import FastConfig, backward_config, forward_config, rmsnorm_fast_backward, rmsnorm_fast_forward
from ..forward import forward_op
from ..reduction import reduce_gamma_gradient
from ..testing import TOLERANCES, assert_close, dgamma_tolerance, make_inputs, oracle
from .results import backward_bytes, forward_bytes
from .timing import kernel_time_us

EPS = 1e-6
#: The fast path's benchmark grid: (M, N, dtype).
GRID = (
    (65536, 256, torch.float16), (16384, 1024, torch.float16), (8192, 2048, torch.float16),
    (4096, 4096, torch.float16), (32768, 4096, torch.bfloat16), (16384, 8192, torch.bfloat16),
    (1024, 4096, torch.bfloat16), (4096, 16384, torch.bfloat16), (1024, 65536, torch.bfloat16),
    (4096, 4096, torch.float32),
)
PROVIDERS = ("fast", "article", "eager", "compile", "compile_nomix", "liger")


# ----------------------------------------------------------------------------- providers


def _autograd_pair(fn, x, gamma, dy):
    """(forward callable, backward callable) for an autograd implementation ``fn(x, gamma)``."""
    xr = x.detach().requires_grad_()
    gr = gamma.detach().requires_grad_()
    fwd = lambda: fn(x, gamma)  # noqa: E731  (called under no_grad by the caller)
    y = fn(xr, gr)
    bwd = lambda: torch.autograd.grad(y, (xr, gr), dy, retain_graph=True)  # noqa: E731
    return fwd, bwd


def _no_grad(fn):
    def call():
        with torch.no_grad():
            return fn()
    return call


def make_provider(name: str, x, gamma, dy):
    """(forward, backward) zero-argument callables; forward → y (or (y, rstd)), backward → (dx, dgamma)."""
    M, N = x.shape
    if name == "fast":
        y, rstd = rmsnorm_fast_forward(x, gamma, EPS)
        return (lambda: rmsnorm_fast_forward(x, gamma, EPS)), (lambda: rmsnorm_fast_backward(x, gamma, rstd, dy))
    if name == "article":
        if x.dtype not in (torch.float32, torch.float16) or N > MAX_N or scratch_bytes(M, N) > MAX_SCRATCH_BYTES:
            return None
        y, rstd = forward_op(x, gamma, EPS)

        def bwd():
            dx, partial = backward_rows(x, gamma, dy, rstd, EPS)
            return dx, reduce_gamma_gradient(partial, gamma.dtype)
        return (lambda: forward_op(x, gamma, EPS)), bwd
    if name == "eager":
        fwd, bwd = _autograd_pair(lambda a, g: F.rms_norm(a, (N,), g, EPS), x, gamma, dy)
        return _no_grad(fwd), bwd
    if name in ("compile", "compile_nomix"):
        import torch._inductor.config as inductor_config

        torch._dynamo.reset()
        mix = name == "compile"
        with inductor_config.patch({"triton.mix_order_reduction": mix}):
            compiled = torch.compile(lambda a, g: F.rms_norm(a, (N,), g, EPS), dynamic=False)
            fwd, bwd = _autograd_pair(compiled, x, gamma, dy)
            with torch.no_grad():
                compiled(x, gamma)  # compile the inference graph inside the patch too
            bwd()  # and the backward graph, which AOTAutograd compiles at its first call
        return _no_grad(fwd), bwd
    if name == "liger":
        try:
            from liger_kernel.ops.rms_norm import LigerRMSNormFunction
        except Exception as err:  # noqa: BLE001
            print(f"  liger not timed: {type(err).__name__}: {err}")
            return None
        fwd, bwd = _autograd_pair(lambda a, g: LigerRMSNormFunction.apply(a, g, EPS, 0.0, "llama", False), x, gamma, dy)
        return _no_grad(fwd), bwd
    raise ValueError(name)


def check(name, fwd, bwd, x, gamma, dy, ref) -> str | None:
    """None when y, dx and dgamma match the oracle, else the first mismatch in one line."""
    y64, dx64, dg64 = ref
    try:
        out = fwd()
        y = out[0] if isinstance(out, tuple) else out
        assert_close(y, y64, dtype=x.dtype, msg=f"{name} y")
        dx, dgamma = bwd()
        assert_close(dx, dx64, dtype=x.dtype, msg=f"{name} dx")
        assert_close(dgamma, dg64, tol=dgamma_tolerance(x.shape[0], x.dtype, gamma.dtype), msg=f"{name} dgamma")
    except Exception as err:  # noqa: BLE001  a wrong provider is reported, not timed
        return f"{type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}"[:300]
    return None


# ----------------------------------------------------------------------------- tuning


def _around(value: int, lo: int = 1, hi: int = 64):
    return sorted({v for v in (value // 2, value, value * 2, value * 4) if lo <= v <= hi})


def forward_candidates(N: int, dtype: torch.dtype):
    """The table's choice and its neighbours: rows per step, warps, persistence, pipelining."""
    base = forward_config(N, dtype)
    block_ms = _around(base.BLOCK_M) if base.one_block(N) else [1, 2]
    persist = [(None, 1), (4, 1), (4, 3), (8, 1), (8, 3)]
    for block_m, warps, (pps, stages) in itertools.product(block_ms, (4, 8, 16), persist):
        if base.one_block(N) and (warps == 16) != (block_m * base.BLOCK_N >= 16384):
            continue
        yield FastConfig(BLOCK_M=block_m, BLOCK_N=base.BLOCK_N, num_warps=warps, programs_per_sm=pps, num_stages=stages)
    if base.one_block(N) and N >= 4096:  # the loop rung at one-block widths (sweeps 4-6)
        for block_n, warps in itertools.product((2048, 4096), (8, 16)):
            if block_n < N:
                yield FastConfig(BLOCK_M=1, BLOCK_N=block_n, num_warps=warps, programs_per_sm=None, num_stages=1)
    if not base.one_block(N) and N <= 16384:  # the whole row in one block instead of the loop
        for warps in (8, 16, 32):
            yield FastConfig(BLOCK_M=1, BLOCK_N=16384, num_warps=warps, programs_per_sm=None, num_stages=1)


def backward_candidates(N: int, dtype: torch.dtype):
    """The table's choice and its neighbours; for wide rows the loop's block and one block of 16384."""
    base = backward_config(N, dtype)
    if not base.one_block(N) or base.BLOCK_N > 8192:  # the column loop, and one block of 16384
        for block_n, warps, pps in itertools.product((2048, 4096, 8192), (8, 16), (1, 2, 4)):
            if block_n < N:
                yield FastConfig(BLOCK_M=1, BLOCK_N=block_n, num_warps=warps, programs_per_sm=pps, num_stages=1)
        if N <= 16384:
            for warps, stages in itertools.product((16, 32), (1, 2)):
                yield FastConfig(BLOCK_M=1, BLOCK_N=16384, num_warps=warps, programs_per_sm=1, num_stages=stages)
        return
    for block_m, warps, pps, stages in itertools.product(_around(base.BLOCK_M)[:3], (8, 16), (1, 2), (2, 3, 4)):
        yield FastConfig(BLOCK_M=block_m, BLOCK_N=base.BLOCK_N, num_warps=warps, programs_per_sm=pps, num_stages=stages)


def tune(shapes, budget_s: float, passes=("forward", "backward")) -> list[dict]:
    """Time every candidate config of every shape (checked against the table's default output first)."""
    rows = []
    started = time.perf_counter()
    for M, N, dtype in shapes:
        x, gamma, dy = make_inputs(M, N, dtype, device="cuda", seed=1)
        y0, rstd = rmsnorm_fast_forward(x, gamma, EPS)
        dx0, dg0 = rmsnorm_fast_backward(x, gamma, rstd, dy)
        sweeps = {"forward": forward_candidates(N, dtype), "backward": backward_candidates(N, dtype)}
        for pass_, cands in ((p, sweeps[p]) for p in passes):
            for cfg in cands:
                if time.perf_counter() - started > budget_s:
                    print(f"  tuning budget of {budget_s:.0f} s spent; stopping")
                    return rows
                try:
                    if pass_ == "forward":
                        fn = lambda cfg=cfg: rmsnorm_fast_forward(x, gamma, EPS, config=cfg)  # noqa: E731
                        y, _ = fn()
                        torch.testing.assert_close(y, y0, **TOLERANCES[dtype])
                    else:
                        fn = lambda cfg=cfg: rmsnorm_fast_backward(x, gamma, rstd, dy, config=cfg)  # noqa: E731
                        dx, dg = fn()
                        torch.testing.assert_close(dx, dx0, **TOLERANCES[dtype])
                        torch.testing.assert_close(dg.double(), dg0.double(), **dgamma_tolerance(M, dtype, gamma.dtype))
                    us = kernel_time_us(fn, calls=10, warmup=2)
                    error = ""
                except Exception as err:  # noqa: BLE001
                    us, error = float("nan"), f"{type(err).__name__}: {str(err)[:200]}"
                rows.append(dict(M=M, N=N, dtype=str(dtype).removeprefix("torch."), pass_=pass_, **cfg.__dict__,
                                 us=us, error=error))
        key = (M, N, str(dtype).removeprefix("torch."))
        best = {p: min((r for r in rows if (r["M"], r["N"], r["dtype"]) == key and r["pass_"] == p and r["us"] == r["us"]),
                       key=lambda r: r["us"], default=None) for p in ("forward", "backward")}
        for p, r in best.items():
            if r:
                print(f"  tune {M}x{N} {dtype} {p}: best {r['us']:.1f} us with "
                      f"{ {k: r[k] for k in ('BLOCK_M', 'BLOCK_N', 'num_warps', 'programs_per_sm', 'num_stages')} }")
    return rows


def side_by_side(shapes=GRID, providers=PROVIDERS, *, copy_gbps: float | None = None, log=print) -> pd.DataFrame:
    """Check, then time, every provider on every shape: one row per (shape, pass, provider).

    Args:
        shapes: (M, N, dtype) triples.
        providers: names from :data:`PROVIDERS`.
        copy_gbps: the device's copy rate, for the ``copy_fraction`` column.
        log: called with one line per provider and shape.

    Returns:
        DataFrame with M, N, dtype, pass_, provider, us (kernel time, µs,
        L2-cold; NaN when the check failed), bytes, tbps, copy_fraction, check
        ("ok" or the mismatch).

    Raises:
        BenchmarkUnavailableError: no CUDA GPU.

    Source: notebooks/12_tuning_and_side_by_side.ipynb.
    """
    records = []
    for M, N, dtype in shapes:
        x, gamma, dy = make_inputs(M, N, dtype, device="cuda", seed=0)
        ref = oracle(x, gamma, dy, EPS, on="cuda")
        nbytes = {"forward": forward_bytes(M, N, dtype), "backward": backward_bytes(M, N, dtype)}
        for name in providers:
            try:
                calls = make_provider(name, x, gamma, dy)
            except Exception as err:  # noqa: BLE001  a provider that cannot be set up is reported
                log(f"  {name} at {M}x{N}: could not be set up: {type(err).__name__}: {err}")
                calls = None
            if calls is None:
                continue
            fwd, bwd = calls
            problem = check(name, fwd, bwd, x, gamma, dy, ref)
            for pass_, fn in (("forward", fwd), ("backward", bwd)):
                us = float("nan") if problem else kernel_time_us(fn, calls=30, warmup=3)
                tbps = nbytes[pass_] / us / 1e6
                records.append(dict(M=M, N=N, dtype=str(dtype).removeprefix("torch."), pass_=pass_, provider=name,
                                    us=us, bytes=nbytes[pass_], tbps=tbps,
                                    copy_fraction=tbps * 1e3 / copy_gbps if copy_gbps else float("nan"),
                                    check=problem or "ok"))
            log(f"  {M}x{N} {str(dtype)[6:]:8s} {name:14s} " + ("checked, " if not problem else f"WRONG ({problem}) ")
                + " ".join(f"{r['pass_']} {r['us']:.1f} us" for r in records[-2:]))
        del x, gamma, dy, ref
        torch.cuda.empty_cache()
    return pd.DataFrame(records)


def ratio_table(table: pd.DataFrame) -> pd.DataFrame:
    """Kernel time per provider (µs) and ``fast_vs_<provider>`` = provider time / fast time (> 1: fast is faster)."""
    keys = ["M", "N", "dtype", "pass_"]
    pivot = table.pivot_table(index=keys, columns="provider", values="us")
    pivot = pivot.reindex(pd.MultiIndex.from_frame(table[keys].drop_duplicates()))  # the run's order
    for other in [p for p in pivot.columns if p != "fast"]:
        pivot[f"fast_vs_{other}"] = pivot[other] / pivot["fast"]
    return pivot


#: Run-to-run spread of the measured copy rate: the same 1 GiB device-to-device copy timed 4220,
#: 4250, 4261 and 4256 GB/s in four runs on an H200 on 2026-12-01 (about 1 %). A kernel that
#: streams at the copy's rate may read up to that much above one run's copy.
COPY_RATE_SPREAD = 0.01


def check_table(table: pd.DataFrame, copy_rate_gbps: float) -> None:
    """Assert that a side-by-side table (``fast.csv``) is consistent with itself and with the contracts.

    Checks: every timed output matched the float64 oracle first (``check``); ``bytes`` is the one
    convention (:func:`forward_bytes`, :func:`backward_bytes`); ``tbps`` and ``copy_fraction``
    follow from bytes, µs and ``copy_rate_gbps``; no rate is above the copy rate beyond
    :data:`COPY_RATE_SPREAD`; the article's path is timed exactly at the shapes its contract
    allows (float16/float32, N ≤ MAX_N, at most MAX_SCRATCH_BYTES of partials).

    Args:
        table: rows of M, N, dtype (a name), pass_, provider, us, bytes, tbps, copy_fraction, check.
        copy_rate_gbps: the run's measured copy rate (``fast_environment.json``), GB/s.

    Raises:
        AssertionError: naming the first rule a row breaks.

    Source: notebooks/12_tuning_and_side_by_side.ipynb §4.
    """
    failed = table[table["check"] != "ok"]
    assert failed.empty, f"rows timed without passing the oracle:\n{failed}"
    for row in table.itertuples():
        count = forward_bytes if row.pass_ == "forward" else backward_bytes
        expected = count(row.M, row.N, getattr(torch, row.dtype))
        assert row.bytes == expected, (f"{row.provider} {row.M}x{row.N} {row.dtype} {row.pass_}: {row.bytes} bytes, "
                                       f"the convention says {expected}")
    rate = table["bytes"] / table["us"] / 1e6
    pd.testing.assert_series_equal(table["tbps"], rate, check_names=False, obj="tbps = bytes / us / 1e6")
    pd.testing.assert_series_equal(table["copy_fraction"], rate * 1e3 / copy_rate_gbps, check_names=False,
                                   obj="copy_fraction = rate / copy rate")
    assert table["copy_fraction"].max() <= 1.0 + COPY_RATE_SPREAD, "a rate above the measured copy rate"
    shapes = table[["M", "N", "dtype"]].drop_duplicates()
    allowed = {(m, n, d) for m, n, d in shapes.itertuples(index=False)
               if d != "bfloat16" and n <= MAX_N and scratch_bytes(m, n) <= MAX_SCRATCH_BYTES}
    timed = set(map(tuple, table.loc[table["provider"] == "article", ["M", "N", "dtype"]].to_numpy()))
    assert timed == allowed, f"the article's path was timed at {sorted(timed)}, its contract allows {sorted(allowed)}"

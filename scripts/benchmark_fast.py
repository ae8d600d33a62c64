"""The fast path side by side on a GPU: kernel time, L2 cold, every output checked first.

    python3 scripts/benchmark_fast.py --out results/h200            # the side-by-side table
    python3 scripts/benchmark_fast.py --out results/h200 --tune     # and the config sweep first

Providers, for the forward and the backward of each shape of :data:`GRID`:
``fast`` (rmsnorm.fast launchers), ``article`` (the course's lessons 03–08
kernels, where their contract allows), ``eager`` (``F.rms_norm`` + autograd),
``compile`` (``torch.compile(F.rms_norm)``, MixOrderReduction on, the default
in torch 2.11), ``compile_nomix`` (the same with
``torch._inductor.config.triton.mix_order_reduction = False``) and ``liger``
(Liger-Kernel's RMSNorm, ``casting_mode="llama"``, not in place).

Method (one run, every provider interleaved per shape):
1. Correctness: every provider's y, dx and dgamma are compared with the
   float64 oracle (computed on the GPU) with the declared tolerances; a
   provider that fails is reported and not timed.
2. Kernel time: ``torch.profiler`` sums the device time of every kernel,
   memset and copy one call puts on the GPU; before each call a 512 MiB
   buffer is rewritten (``bitwise_not``), which evicts L2 (60 MB on an
   H200); the flush's own kernels are left out. Median of 3 rounds of 10.
3. Bytes: one convention for everyone, the minimum traffic:
   forward 2·M·N·s + N·s_w + 4·M, backward 3·M·N·s + 2·N·s_w + 4·M
   (s, s_w: bytes per element of x and gamma; 4·M: rstd). Nobody is charged
   scratch, so the rates are lower bounds of what each moved.
4. The device's copy rate (1 GiB device-to-device, read + write) as the ceiling.

Writes ``fast.csv`` (one row per shape, pass, provider) and, with --tune,
``fast_tuning.csv``; prints the ratio table. Never asserts a speed-up.

Source: notebooks/12_tuning_and_side_by_side.ipynb; quack
``benchmarks/benchmark_rmsnorm.py`` (named providers, one byte count).
"""

from __future__ import annotations

import argparse
import itertools
import json
import statistics
import sys
import time
import traceback
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the checkout, for `import rmsnorm`

import rmsnorm  # noqa: E402  (before triton: chooses where kernels run)
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from rmsnorm import backward_rows, forward_op, reduce_gamma_gradient  # noqa: E402
from rmsnorm.contract import MAX_N, MAX_SCRATCH_BYTES, scratch_bytes  # noqa: E402
from rmsnorm.fast import (  # noqa: E402
    FastConfig, backward_config, forward_config, rmsnorm_fast_backward, rmsnorm_fast_forward,
)
from rmsnorm.testing import TOLERANCES, assert_close, dgamma_tolerance, make_inputs, oracle  # noqa: E402

EPS = 1e-6
#: The issue's shape grid: (M, N, dtype).
GRID = (
    (65536, 256, torch.float16), (16384, 1024, torch.float16), (8192, 2048, torch.float16),
    (4096, 4096, torch.float16), (32768, 4096, torch.bfloat16), (16384, 8192, torch.bfloat16),
    (1024, 4096, torch.bfloat16), (4096, 16384, torch.bfloat16), (1024, 65536, torch.bfloat16),
    (4096, 4096, torch.float32),
)
PROVIDERS = ("fast", "article", "eager", "compile", "compile_nomix", "liger")
FLUSH_BYTES = 512 << 20


def size_of(dtype: torch.dtype) -> int:
    return torch.empty((), dtype=dtype).element_size()


def forward_bytes(M: int, N: int, s: int, s_w: int) -> int:
    """Minimum forward traffic: read x, write y, read gamma, write rstd."""
    return 2 * M * N * s + N * s_w + 4 * M


def backward_bytes(M: int, N: int, s: int, s_w: int) -> int:
    """Minimum backward traffic: read x and dy, write dx, read gamma, write dgamma, read rstd."""
    return 3 * M * N * s + 2 * N * s_w + 4 * M


_FLUSH: torch.Tensor | None = None


def kernel_us(fn, *, rounds: int = 3, calls: int = 10, warmup: int = 3) -> float:
    """Median over rounds of the device time per call (µs), L2 flushed before every call."""
    global _FLUSH
    from torch.profiler import ProfilerActivity, profile

    if _FLUSH is None:
        _FLUSH = torch.randint(0, 1 << 30, (FLUSH_BYTES // 4,), dtype=torch.int32, device="cuda")
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    per_round = []
    for _ in range(rounds):
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for _ in range(calls):
                torch.bitwise_not(_FLUSH, out=_FLUSH)
                fn()
            torch.cuda.synchronize()
        events = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
        flushes = [e for e in events if "bitwise_not" in e.name]
        if len(flushes) != calls:
            raise RuntimeError(f"expected {calls} flush kernels, saw {len(flushes)}")
        work = [e for e in events if "bitwise_not" not in e.name]
        if not work:
            raise RuntimeError("the profiler recorded no device work for the call")
        per_round.append(sum(e.time_range.elapsed_us() for e in work) / calls)
    return statistics.median(per_round)


def copy_rate_gbps(nbytes: int = 1 << 30) -> float:
    src = torch.randint(0, 255, (nbytes,), dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)
    us = kernel_us(lambda: dst.copy_(src))
    return 2 * nbytes / us / 1e3


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
        if (warps == 16) != (block_m * base.BLOCK_N >= 16384):
            continue
        yield FastConfig(BLOCK_M=block_m, BLOCK_N=base.BLOCK_N, num_warps=warps, programs_per_sm=pps, num_stages=stages)


def backward_candidates(N: int, dtype: torch.dtype):
    """The table's choice and its neighbours; for wide rows the loop's block and one block of 16384."""
    base = backward_config(N, dtype)
    if not base.one_block(N):
        for block_n, warps, pps in itertools.product((2048, 4096, 8192), (8, 16), (1, 2, 4)):
            yield FastConfig(BLOCK_M=1, BLOCK_N=block_n, num_warps=warps, programs_per_sm=pps, num_stages=1)
        if N <= 16384:
            for warps, stages in itertools.product((16, 32), (1, 2)):
                yield FastConfig(BLOCK_M=1, BLOCK_N=16384, num_warps=warps, programs_per_sm=1, num_stages=stages)
        return
    for block_m, warps, pps, stages in itertools.product(_around(base.BLOCK_M)[:3], (8, 16), (1, 2), (2, 3, 4)):
        yield FastConfig(BLOCK_M=block_m, BLOCK_N=base.BLOCK_N, num_warps=warps, programs_per_sm=pps, num_stages=stages)


def tune(shapes, budget_s: float) -> list[dict]:
    """Time every candidate config of every shape (checked against the table's default output first)."""
    rows = []
    started = time.perf_counter()
    for M, N, dtype in shapes:
        x, gamma, dy = make_inputs(M, N, dtype, device="cuda", seed=1)
        y0, rstd = rmsnorm_fast_forward(x, gamma, EPS)
        dx0, dg0 = rmsnorm_fast_backward(x, gamma, rstd, dy)
        for pass_, cands in (("forward", forward_candidates(N, dtype)), ("backward", backward_candidates(N, dtype))):
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
                    us = kernel_us(fn, rounds=1, calls=10, warmup=2)
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


# ----------------------------------------------------------------------------- main


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("results/h200"))
    parser.add_argument("--tune", action="store_true", help="run the config sweep first (fast_tuning.csv)")
    parser.add_argument("--tune-budget", type=float, default=240.0, help="seconds the sweep may take")
    parser.add_argument("--only", default="", help="comma-separated shape indices of GRID to run")
    parser.add_argument("--providers", default=",".join(PROVIDERS))
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        print("benchmark_fast: no CUDA GPU here, nothing timed (the committed results are in results/h200/fast.csv)")
        return 0
    import pandas as pd

    args.out.mkdir(parents=True, exist_ok=True)
    shapes = [GRID[int(i)] for i in args.only.split(",")] if args.only else list(GRID)
    print(f"kernels run on: {rmsnorm.describe_backend()} | torch {torch.__version__}")
    if args.tune:
        rows = tune(shapes, args.tune_budget)
        pd.DataFrame(rows).to_csv(args.out / "fast_tuning.csv", index=False)
    copy = copy_rate_gbps()
    print(f"copy rate (1 GiB device-to-device, read + write): {copy:.0f} GB/s")
    records = []
    for M, N, dtype in shapes:
        x, gamma, dy = make_inputs(M, N, dtype, device="cuda", seed=0)
        ref = oracle(x, gamma, dy, EPS, on="cuda")
        s, s_w = size_of(dtype), size_of(gamma.dtype)
        nbytes = {"forward": forward_bytes(M, N, s, s_w), "backward": backward_bytes(M, N, s, s_w)}
        for name in args.providers.split(","):
            try:
                calls = make_provider(name, x, gamma, dy)
            except Exception as err:  # noqa: BLE001
                calls = None
                print(f"  {name} at {M}x{N}: could not be set up: {type(err).__name__}: {err}")
                traceback.print_exc(limit=2)
            if calls is None:
                continue
            fwd, bwd = calls
            problem = check(name, fwd, bwd, x, gamma, dy, ref)
            for pass_, fn in (("forward", fwd), ("backward", bwd)):
                us = float("nan") if problem else kernel_us(fn)
                records.append(dict(M=M, N=N, dtype=str(dtype).removeprefix("torch."), pass_=pass_, provider=name,
                                    us=us, bytes=nbytes[pass_], tbps=nbytes[pass_] / us / 1e6 if us == us else float("nan"),
                                    copy_fraction=nbytes[pass_] / us / 1e3 / copy if us == us else float("nan"),
                                    check=problem or "ok"))
            print(f"  {M}x{N} {str(dtype)[6:]:8s} {name:14s} " + ("checked, " if not problem else f"WRONG ({problem}) ")
                  + " ".join(f"{r['pass_']} {r['us']:.1f} us" for r in records[-2:]))
        del x, gamma, dy, ref
        torch.cuda.empty_cache()
    table = pd.DataFrame(records)
    table.to_csv(args.out / "fast.csv", index=False)
    env = {"device": torch.cuda.get_device_name(0), "torch": torch.__version__, "copy_rate_gbps": copy,
           "flush_bytes": FLUSH_BYTES, "date": time.strftime("%Y-%m-%d")}
    try:
        import triton
        env["triton"] = triton.__version__
    except ImportError:
        pass
    (args.out / "fast_environment.json").write_text(json.dumps(env, indent=2) + "\n")
    pivot = table.pivot_table(index=["M", "N", "dtype", "pass_"], columns="provider", values="us", sort=False)
    for other in [p for p in pivot.columns if p != "fast"]:
        pivot[f"fast_vs_{other}"] = pivot[other] / pivot["fast"]
    pd.set_option("display.width", 250)
    pd.set_option("display.max_columns", 30)
    print(pivot.round(2).to_string())
    for pass_ in ("forward", "backward"):
        sub = pivot.xs(pass_, level="pass_")
        if "fast_vs_compile" in sub:
            gm = float(sub["fast_vs_compile"].prod() ** (1 / len(sub)))
            print(f"{pass_}: geometric mean of compile/fast over {len(sub)} shapes = {gm:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""offset = 1.0 side by side on a GPU: kernel time, L2 cold, every output checked against float64 first.

    python3 scripts/benchmark_offset.py --out results/h200     # offset.csv, offset_environment.json

Providers at the main grid's shapes (rmsnorm_lab.sidebyside.GRID), forward and backward each alone:
``fast_offset0`` (offset 0.0), ``fast_offset1`` (offset 1.0), ``liger`` (LigerRMSNormFunction, offset 1.0,
casting "gemma"), ``quack`` (quack.rmsnorm with weight_offset=1.0) and ``compile``
(torch.compile of Gemma3RMSNorm.forward). Each is checked against the float64 oracle with offset
(rmsnorm.testing.oracle) before it is timed with rmsnorm_lab.kernel_time_us; a missing peer is recorded
as refused, a wrong one gets NaN and the reason. Every provider is timed once per run (``--repeats`` runs, column
``run``), so offset 1.0's cost over 0.0 is read beside each one's own run-to-run spread. Never asserts a speed-up;
without CUDA it says so.

Source: scripts/benchmark_fast.py; rmsnorm_lab/sidebyside.py.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the checkout, for `import rmsnorm`

import rmsnorm  # noqa: E402

# isort: split
import torch  # noqa: E402


def _providers(x, weight, dy, eps):
    """{name: (forward, backward)} zero-argument calls; a peer that cannot be built raises (recorded as such)."""
    from rmsnorm_lab.providers import imported

    def autograd_calls(fn):
        w = weight.detach().clone().requires_grad_()
        x_leaf = x.detach().clone().requires_grad_()
        y = fn(x_leaf, w)
        return (lambda: fn(x, weight)), (lambda: torch.autograd.grad(y, (x_leaf, w), dy, retain_graph=True))

    def fast(offset):
        _, rstd = rmsnorm.rmsnorm_fast_forward(x, weight, eps, offset=offset)
        return (lambda: rmsnorm.rmsnorm_fast_forward(x, weight, eps, offset=offset),
                lambda: rmsnorm.rmsnorm_fast_backward(x, weight, rstd, dy, offset=offset))

    def liger():
        fn, reason = imported("liger_kernel.ops.rms_norm", "LigerRMSNormFunction")
        if reason:
            raise ImportError(reason)
        return autograd_calls(lambda a, w: fn.apply(a, w, eps, 1.0, "gemma", False))

    def quack():
        fn, reason = imported("quack", "rmsnorm")
        if reason:
            raise ImportError(reason)
        # quack-kernels 0.6.5: rmsnorm(x, weight=None, bias=None, residual=None, out_dtype=None, residual_dtype=None,
        # eps=1e-6, prenorm=False, weight_offset=0.0) -> Tensor; out = x_hat * (weight + weight_offset) in fp32
        return autograd_calls(lambda a, w: fn(a, w, eps=eps, weight_offset=1.0))

    def compiled():
        from transformers.models.gemma3.modeling_gemma3 import Gemma3RMSNorm

        norm = Gemma3RMSNorm(x.shape[1], eps=eps).to(x.device, weight.dtype)
        with torch.no_grad():
            norm.weight.copy_(weight)
        # Every shape compiles Gemma3RMSNorm.forward's one code object again: without a reset, dynamo's
        # recompile limit (8) is reached by the fifth shape and the rest run eagerly, unnoticed.
        torch._dynamo.reset()
        step = torch.compile(norm.forward, dynamic=False)
        x_leaf = x.detach().clone().requires_grad_()
        y = step(x_leaf)
        return ((lambda: torch.no_grad()(step)(x)),
                lambda: torch.autograd.grad(y, (x_leaf, norm.weight), dy, retain_graph=True))

    return {"fast_offset0": lambda: fast(0.0), "fast_offset1": lambda: fast(1.0), "liger": liger, "quack": quack,
            "compile": compiled}


def _version(distribution: str) -> str | None:
    """The installed version of a peer (None when absent), for the environment file."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(distribution)
    except PackageNotFoundError:
        return None


def _check(name, calls, x, weight, dy, eps):
    from rmsnorm.testing import assert_close, dgamma_tolerance, oracle

    offset = 0.0 if name == "fast_offset0" else 1.0
    y64, dx64, dg64 = oracle(x, weight, dy, eps, on=x.device, offset=offset)
    y = calls[0]()
    assert_close(y[0] if isinstance(y, tuple) else y, y64, dtype=x.dtype, msg=f"{name} y")
    dx, dg = calls[1]()
    assert_close(dx, dx64, dtype=x.dtype, msg=f"{name} dx")
    assert_close(dg, dg64, tol=dgamma_tolerance(x.shape[0], x.dtype, weight.dtype), msg=f"{name} dgamma")


def main(argv=None) -> int:
    """Parse arguments, run, write offset.csv and offset_environment.json; return the exit status."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("results/h200"))
    parser.add_argument("--calls", type=int, default=20, help="profiled calls per pass")
    parser.add_argument("--repeats", type=int, default=2, help="runs over every provider, one after the other")
    args = parser.parse_args(argv)
    for option in ("calls", "repeats"):
        if getattr(args, option) < 1:
            parser.error(f"--{option} must be at least 1; got {getattr(args, option)}")
    if not torch.cuda.is_available():
        print("benchmark_offset: no CUDA GPU here, nothing timed")
        return 0
    import pandas as pd

    from rmsnorm.testing import make_inputs
    from rmsnorm_lab import environment_info
    from rmsnorm_lab.providers import EPS, one_line
    from rmsnorm_lab.results import backward_bytes, forward_bytes
    from rmsnorm_lab.sidebyside import GRID
    from rmsnorm_lab.timing import kernel_time_us

    rows = []
    for M, N, dtype in GRID:
        x, weight, dy = make_inputs(M, N, dtype, "cuda", draw_on_device=True)
        base = dict(M=M, N=N, dtype=str(dtype)[6:])
        checked = {}
        for name, build in _providers(x, weight, dy, EPS).items():
            try:
                calls = build()
            except Exception as err:  # noqa: BLE001  a peer that is absent or cannot run is recorded, not fatal
                rows.append(base | dict(provider=name, run=0, pass_="", us=float("nan"), bytes=0,
                                        check=f"refused: {one_line(err)}"))
                continue
            try:
                _check(name, calls, x, weight, dy, EPS)
                checked[name] = calls, "ok"
            except Exception as err:  # noqa: BLE001
                checked[name] = calls, f"wrong: {one_line(err)}"
        # Every provider once per run, the runs one after the other: offset 1.0's cost is read against offset 0.0
        # timed minutes apart at most, and each provider's run-to-run spread says how much of it is noise.
        for run in range(args.repeats):
            for name, (calls, check) in checked.items():
                for pass_, call, nbytes in (("forward", calls[0], forward_bytes(M, N, dtype, dtype)),
                                            ("backward", calls[1], backward_bytes(M, N, dtype, dtype))):
                    us = kernel_time_us(call, calls=args.calls, warmup=3) if check == "ok" else float("nan")
                    rows.append(base | dict(provider=name, run=run, pass_=pass_, us=us, bytes=nbytes, check=check))
                    print(f"{M}x{N} {dtype} {name} run {run} {pass_}: {us:.1f} us ({check[:60]})")
        del x, weight, dy, checked
        torch.cuda.empty_cache()
    args.out.mkdir(parents=True, exist_ok=True)
    pd.DataFrame(rows).to_csv(args.out / "offset.csv", index=False)
    environment = environment_info() | {"eps": EPS, "quack": _version("quack-kernels"), "calls": args.calls,
                                      "repeats": args.repeats}
    (args.out / "offset_environment.json").write_text(json.dumps(environment, indent=1, default=str) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The fast path's kernel time at the side-by-side's shapes, two checkouts side by side in one GPU session.

A change that must not move the kernels (a reorganisation, a rename), or must move only some, is judged here: the
package of an older checkout (``--old``, a folder holding its ``rmsnorm/``) and this checkout's are each imported in
their own child process, in the order new, old, new, old, and every shape's passes are timed L2-cold
(``rmsnorm_lab.timing.kernel_time_us``, loaded from its file so that the old package can be imported beside it).
Every output is checked against float64 first (the RMSNorm's and the fused add's against its own package's oracle,
the LayerNorm's against ``F.layer_norm``). The spread between the two runs of one checkout says how far apart two
timings of the same kernels are; the ratio between checkouts is read against it (``rmsnorm_lab.pages.new_over_old``).

    python scripts/compare_commits.py --old /path/to/old/checkout --out results/h200/kernel_time_before_after.csv
    python scripts/compare_commits.py --old /path/to/old --norms rmsnorm,layernorm,rmsnorm_add --passes forward \
        --out results/h100/forward_layout_ab.csv

``--norms`` picks the grids (:data:`GRIDS`: the RMSNorm's main grid, with ``rmsnorm`` also two bf16 shapes with a
float32 weight; the LayerNorm's side by side; the fused add's), ``--passes`` the passes. Writes one row per
(checkout, run, norm, shape, pass) and prints, per case, new ÷ old (means of the two runs) beside each checkout's
own run-to-run spread.

Source: results/h200/README.md (kernel_time_before_after.csv); results/h100/README.md (forward_layout_ab.csv).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
#: The side-by-side's shapes (rmsnorm_lab.sidebyside.GRID), written out: the old checkout may lack them.
GRID = (
    (65536, 256, "float16"), (16384, 1024, "float16"), (8192, 2048, "float16"), (4096, 4096, "float16"),
    (32768, 4096, "bfloat16"), (16384, 8192, "bfloat16"), (1024, 4096, "bfloat16"), (4096, 16384, "bfloat16"),
    (1024, 65536, "bfloat16"), (4096, 4096, "float32"),
)
#: Per norm, (M, N, x dtype, weight dtype): rmsnorm_lab.layernorm_bench.GRID and rmsnorm_lab.fused_add_bench.GRID
#: written out likewise; the RMSNorm's main grid with the weight in x's dtype, and two bf16 shapes with a float32 one.
GRIDS = {
    "rmsnorm": tuple((M, N, d, d) for M, N, d in GRID) + ((8192, 3072, "bfloat16", "float32"),
                                                          (4096, 12288, "bfloat16", "float32")),
    "layernorm": ((65536, 768, "float16", "float32"), (65536, 768, "bfloat16", "float32"),
                  (16384, 1280, "float16", "float32"), (16384, 1280, "bfloat16", "float32"),
                  (4096, 12288, "bfloat16", "float32")) + tuple((M, N, d, d) for M, N, d in GRID),
    "rmsnorm_add": ((16384, 5120, "bfloat16", "bfloat16"), (32768, 8192, "bfloat16", "bfloat16"))
    + tuple((M, N, d, d) for M, N, d in GRID),
}
PASSES = ("forward", "backward")
EPS = 1e-6
LAYERNORM_EPS = 1e-5


def _timing():
    """rmsnorm_lab/timing.py as a stand-alone module (it imports only numpy, torch and triton)."""
    spec = importlib.util.spec_from_file_location("_lab_timing", ROOT / "rmsnorm_lab" / "timing.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # a dataclass looks its module up there
    spec.loader.exec_module(module)
    return module


def _launchers(rmsnorm):
    """(forward, backward) of the package imported as ``rmsnorm``, whichever layout it has."""
    where = rmsnorm if hasattr(rmsnorm, "rmsnorm_fast_forward") else __import__("rmsnorm.fast").fast
    return where.rmsnorm_fast_forward, where.rmsnorm_fast_backward


def _inputs(M: int, N: int, dtype, weight_dtype, seed: int):
    """x, weight (near 1), a second (M, N) tensor and dy, drawn on the GPU (the CPU without one: the tests) from a
    seed of the shape's own."""
    import torch

    device = "cuda" if torch.cuda.is_available() else "cpu"
    g = torch.Generator(device=device).manual_seed(seed)
    x = torch.randn(M, N, device=device, dtype=dtype, generator=g)
    weight = (1 + 0.1 * torch.randn(N, device=device, generator=g)).to(weight_dtype)
    other = torch.randn(M, N, device=device, dtype=dtype, generator=g)
    dy = torch.randn(M, N, device=device, dtype=dtype, generator=g)
    return x, weight, other, dy


def _checked_calls(norm: str, M: int, N: int, dtype, weight_dtype) -> dict:
    """{pass: zero-argument call} of ``norm`` at one shape, every output checked against float64 first."""
    import torch
    import torch.nn.functional as F

    import rmsnorm
    from rmsnorm import testing

    x, weight, other, dy = _inputs(M, N, dtype, weight_dtype, M * 31 + N)
    dgamma_tol = testing.dgamma_tolerance(M, dtype, weight_dtype)
    if norm == "rmsnorm":
        forward, backward = _launchers(rmsnorm)
        y, rstd = forward(x, weight, EPS)
        dx, dgamma = backward(x, weight, rstd, dy)
        y64, dx64, dg64 = testing.oracle(x, weight, dy)
        testing.assert_close(y, y64.to(dtype))
        testing.assert_close(dx, dx64.to(dtype))
        testing.assert_close(dgamma, dg64, tol=dgamma_tol)
        return {"forward": lambda: forward(x, weight, EPS), "backward": lambda: backward(x, weight, rstd, dy)}
    if norm == "layernorm":  # x off centre, as the LayerNorm's side by side draws it; ``other`` is the bias
        from rmsnorm.layernorm_launchers import layernorm_fast_backward, layernorm_fast_forward

        x, bias = (x * 2 + 0.5).to(dtype), other[0].to(weight_dtype)
        y, mean, rstd = layernorm_fast_forward(x, weight, bias, LAYERNORM_EPS)
        got = layernorm_fast_backward(x, weight, bias, mean, rstd, dy)
        leaves = [t.double().requires_grad_() for t in (x, weight, bias)]
        y64 = F.layer_norm(leaves[0], (N,), leaves[1], leaves[2], LAYERNORM_EPS)
        y64.backward(dy.double())
        testing.assert_close(y, y64.detach().to(dtype))
        testing.assert_close(got[0], leaves[0].grad.to(dtype))
        for grad, leaf in zip(got[1:], leaves[1:]):
            testing.assert_close(grad, leaf.grad, tol=dgamma_tol)
        return {"forward": lambda: layernorm_fast_forward(x, weight, bias, LAYERNORM_EPS),
                "backward": lambda: layernorm_fast_backward(x, weight, bias, mean, rstd, dy)}
    # the fused add: h = x + residual (``other``), y = RMSNorm(h); its backward takes the gradient of h too
    from rmsnorm.backward import launch_backward
    from rmsnorm.forward import launch_add_forward

    y, h, rstd = launch_add_forward(x, other, weight, EPS)
    d_h = torch.randn_like(dy)
    dx, dgamma = launch_backward(h, weight, rstd, dy, None, 0.0, d_h)
    h64 = x.double() + other.double()
    testing.assert_close(h, h64.to(h.dtype))
    y64, dx64, dg64 = testing.oracle(h, weight, dy)
    testing.assert_close(y, y64.to(dtype))
    testing.assert_close(dx, (dx64 + d_h.double()).to(dtype))
    testing.assert_close(dgamma, dg64, tol=dgamma_tol)
    return {"forward": lambda: launch_add_forward(x, other, weight, EPS),
            "backward": lambda: launch_backward(h, weight, rstd, dy, None, 0.0, d_h)}


def child(label: str, run: int, norms, passes) -> list[dict]:
    """Time every shape of ``norms`` with the ``rmsnorm`` on sys.path; return the rows."""
    import torch

    kernel_time_us = _timing().kernel_time_us
    rows = []
    for norm in norms:
        for M, N, name, weight_name in GRIDS[norm]:
            calls = _checked_calls(norm, M, N, getattr(torch, name), getattr(torch, weight_name))
            for pass_ in passes:
                rows.append({"checkout": label, "run": run, "norm": norm, "M": M, "N": N, "dtype": name,
                             "weight_dtype": weight_name, "pass": pass_,
                             "kernel_us": round(kernel_time_us(calls[pass_]), 3)})
    return rows


def _choices(parser, text: str, allowed, what: str) -> list[str]:
    """A comma-separated list of names out of ``allowed``, refused by name otherwise."""
    names = [n.strip() for n in text.split(",") if n.strip()]
    unknown = [n for n in names if n not in allowed]
    if not names or unknown:
        parser.error(f"--{what}: {unknown or text!r} is not a comma-separated list out of {', '.join(allowed)}")
    return names


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--old", type=Path, help="a folder holding the old checkout's rmsnorm/ package")
    parser.add_argument("--out", type=Path, help="the CSV to write")
    parser.add_argument("--norms", default="rmsnorm", help=f"comma-separated, out of {', '.join(GRIDS)}")
    parser.add_argument("--passes", default=",".join(PASSES), help="comma-separated: forward, backward")
    parser.add_argument("--child", nargs=2, metavar=("LABEL", "RUN"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    norms, passes = _choices(parser, args.norms, GRIDS, "norms"), _choices(parser, args.passes, PASSES, "passes")
    if args.child:
        print(json.dumps(child(args.child[0], int(args.child[1]), norms, passes)))
        return 0
    if args.old is None or args.out is None or not (args.old / "rmsnorm" / "__init__.py").is_file():
        parser.error("--old must be a folder holding an rmsnorm/ package, and --out is required")
    import pandas as pd
    import torch

    if not torch.cuda.is_available():
        sys.exit("compare_commits.py times kernels on a CUDA GPU; this machine has none")
    sys.path.insert(0, str(ROOT))  # this process reads the results with the lab; the children time each package
    from rmsnorm_lab.pages import new_over_old

    rows = []
    for run, (label, tree) in enumerate([("new", ROOT), ("old", args.old), ("new", ROOT), ("old", args.old)]):
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tree.resolve()), os.environ.get("PYTHONPATH", "")])}
        done = subprocess.run([sys.executable, __file__, "--child", label, str(run // 2), "--norms", ",".join(norms),
                               "--passes", ",".join(passes)], env=env, cwd=tree, capture_output=True, text=True,
                              timeout=900)
        if done.returncode != 0:
            sys.exit(f"the {label} checkout's run failed:\n{done.stderr[-4000:]}")
        rows += json.loads(done.stdout.strip().splitlines()[-1])
    args.out.parent.mkdir(parents=True, exist_ok=True)
    table = pd.DataFrame(rows)
    table.to_csv(args.out, index=False)
    print(new_over_old(table)[["new_over_old", "new_spread", "old_spread"]].to_string(float_format="{:.3f}".format))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

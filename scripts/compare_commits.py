"""The fast path's kernel time at the side-by-side's shapes, two checkouts side by side in one GPU session.

A change that must not move the kernels (a reorganisation, a rename) is judged here: the package of an
older checkout (``--old``, a folder holding its ``rmsnorm/``) and this checkout's are each imported in
their own child process, in the order new, old, new, old, and every shape's forward and backward is
timed L2-cold (``rmsnorm_lab.timing.kernel_time_us``, loaded from its file so that the old package can
be imported beside it). Every output is checked against the float64 oracle of its own package first.
The spread between the two runs of one checkout says how far apart two timings of the same kernels
are; the ratio between checkouts is read against it.

    python scripts/compare_commits.py --old /path/to/old/checkout --out results/h200/kernel_time_before_after.csv

Writes one row per (checkout, run, shape, pass) and prints, per shape and pass, new ÷ old (medians of
the two runs) beside each checkout's own run-to-run spread.

Source: results/h200/README.md (kernel_time_before_after.csv).
"""

from __future__ import annotations

import argparse
import csv
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
EPS = 1e-6


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


def child(label: str, run: int) -> list[dict]:
    """Time every shape with the ``rmsnorm`` on sys.path; return the rows."""
    import torch

    import rmsnorm
    from rmsnorm import testing

    forward, backward = _launchers(rmsnorm)
    kernel_time_us = _timing().kernel_time_us
    rows = []
    for M, N, name in GRID:
        dtype = getattr(torch, name)
        g = torch.Generator(device="cuda").manual_seed(M * 31 + N)
        x = torch.randn(M, N, device="cuda", dtype=dtype, generator=g)
        weight = (1 + 0.1 * torch.randn(N, device="cuda", generator=g)).to(dtype)
        dy = torch.randn(M, N, device="cuda", dtype=dtype, generator=g)
        y, rstd = forward(x, weight, EPS)
        dx, dgamma = backward(x, weight, rstd, dy)
        y64, dx64, dg64 = testing.oracle(x, weight, dy)
        testing.assert_close(y, y64.to(dtype))
        testing.assert_close(dx, dx64.to(dtype))
        testing.assert_close(dgamma, dg64, tol=testing.dgamma_tolerance(M, dtype, weight.dtype))
        passes = (("forward", lambda: forward(x, weight, EPS)), ("backward", lambda: backward(x, weight, rstd, dy)))
        for pass_, fn in passes:
            rows.append({"checkout": label, "run": run, "M": M, "N": N, "dtype": name, "pass": pass_,
                         "kernel_us": round(kernel_time_us(fn), 3)})
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--old", type=Path, help="a folder holding the old checkout's rmsnorm/ package")
    parser.add_argument("--out", type=Path, help="the CSV to write")
    parser.add_argument("--child", nargs=2, metavar=("LABEL", "RUN"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args.child[0], int(args.child[1]))))
        return 0
    if args.old is None or args.out is None or not (args.old / "rmsnorm" / "__init__.py").is_file():
        parser.error("--old must be a folder holding an rmsnorm/ package, and --out is required")
    import torch

    if not torch.cuda.is_available():
        sys.exit("compare_commits.py times kernels on a CUDA GPU; this machine has none")
    rows = []
    for run, (label, tree) in enumerate([("new", ROOT), ("old", args.old), ("new", ROOT), ("old", args.old)]):
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tree.resolve()), os.environ.get("PYTHONPATH", "")])}
        done = subprocess.run([sys.executable, __file__, "--child", label, str(run // 2)], env=env, cwd=tree,
                              capture_output=True, text=True, timeout=900)
        if done.returncode != 0:
            sys.exit(f"the {label} checkout's run failed:\n{done.stderr[-4000:]}")
        rows += json.loads(done.stdout.strip().splitlines()[-1])
    args.out.parent.mkdir(parents=True, exist_ok=True)
    with args.out.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    times = {(r["checkout"], r["run"], r["M"], r["N"], r["dtype"], r["pass"]): r["kernel_us"] for r in rows}
    print(f"{'shape':>24} {'pass':>9} {'new/old':>8} {'new spread':>11} {'old spread':>11}")
    for M, N, name in GRID:
        for pass_ in ("forward", "backward"):
            new = [times[("new", r, M, N, name, pass_)] for r in (0, 1)]
            old = [times[("old", r, M, N, name, pass_)] for r in (0, 1)]
            print(f"{f'{M}x{N} {name}':>24} {pass_:>9} {sum(new) / sum(old):8.3f} "
                  f"{max(new) / min(new) - 1:10.1%} {max(old) / min(old) - 1:10.1%}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""The command line the peer side-by-sides share: scripts/benchmark_fused_add.py and scripts/benchmark_layernorm.py.

Each script names its bench module (:mod:`rmsnorm_lab.fused_add_bench`, :mod:`rmsnorm_lab.layernorm_bench`) and
what its environment file says of its own method; the rest is here, once: the options and their checks
(:func:`parse_args`), the per-shape loop that rewrites ``<name>_kernel.csv`` and ``<name>_whole_call.csv`` after
every shape, and ``<name>_environment.json`` written first and last (``complete``), so that a run cut short keeps
what it measured (:func:`run`). Without CUDA it says so in one line and writes nothing. Never asserts a speed-up.

Source: scripts/benchmark_fused_add.py, scripts/benchmark_layernorm.py.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Callable

import torch

import rmsnorm
from . import environment_info, timing

PARTS = ("kernel", "whole_call")


def parse_args(description: str, argv, providers, *, budget_s: float, table: bool = False) -> argparse.Namespace:
    """The options of a peer script, checked before anything runs.

    Args:
        description: the script's one-line description. argv: its arguments (None: sys.argv's).
        providers: the bench's providers, in their order. budget_s: the default of ``--budget-s``, seconds.
        table: whether the script offers ``--table`` (print the table from ``--out``'s kernel CSV).

    Raises:
        SystemExit: (status 2, argparse's message) for an unknown part or provider, fewer than one call or
            sample, or a kernel share outside (0, 1].
    """
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--out", type=Path, default=Path("results/h200"), help="folder for the CSVs and the json")
    parser.add_argument("--parts", default=",".join(PARTS), help="comma-separated: kernel, whole_call")
    parser.add_argument("--providers", default=",".join(providers), help="comma-separated, in order")
    parser.add_argument("--calls", type=int, default=20, help="profiled calls per kernel time")
    parser.add_argument("--samples", type=int, default=None, help="whole-call and host samples (default 50 and 20)")
    parser.add_argument("--budget-s", type=float, default=budget_s, help="seconds after which no provider is started")
    parser.add_argument("--kernel-share", type=float, default=0.7, help="share of the budget the kernel part may use")
    if table:
        parser.add_argument("--table", action="store_true", help="print the table from --out's kernel CSV")
    args = parser.parse_args(argv)
    for what, given, known in (("parts", args.parts.split(","), PARTS),
                               ("providers", args.providers.split(","), providers)):
        if set(given) - set(known):
            parser.error(f"--{what}: {', '.join(sorted(set(given) - set(known)))} unknown; known: {', '.join(known)}")
    if args.calls < 1 or (args.samples is not None and args.samples < 1):
        parser.error(f"--calls and --samples must be at least 1; got {args.calls} and {args.samples}")
    if not 0 < args.kernel_share <= 1:
        parser.error(f"--kernel-share must be in (0, 1]; got {args.kernel_share}")
    return args


def version(distribution: str) -> str | None:
    """The installed version of a peer (None when absent), for the environment file."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(distribution)
    except PackageNotFoundError:
        return None


def _shape_names(shapes) -> list[list]:
    """[[M, N, dtype name, …], …]: a grid as the environment file records it."""
    return [[M, N, *(str(d).removeprefix("torch.") for d in dtypes)] for M, N, *dtypes in shapes]


def _write_environment(args, name: str, bench, own: tuple[dict, dict], rows, started, *, complete: bool) -> dict:
    """``<name>_environment.json``: the machine, the peers' versions, what was run and how, what was not timed."""
    top, method = own
    env = environment_info() | top | {"eps": bench.EPS}
    env[name] = {
        "parts": args.parts, "providers": {p: bench.DESCRIPTIONS[p] for p in args.providers.split(",")},
        "kernel_shapes": _shape_names(bench.GRID), "whole_call_shapes": _shape_names(bench.WHOLE_CALL_SHAPES),
        **method,
        "us": f"kernel_time_us: torch.profiler device time per call, L2 flushed before each, {args.calls} calls",
        "whole_call_us": f"time_whole_calls: CUDA events around {timing.CALLS_PER_SAMPLE} back-to-back calls, median "
                         f"of {args.samples or timing.SAMPLES} samples",
        "host_us": f"time_host_calls: CPU wall time of {timing.HOST_CALLS_PER_SAMPLE} calls without synchronising, "
                   f"median of {args.samples or timing.HOST_SAMPLES} samples",
        "budget_s": args.budget_s, "kernel_share": args.kernel_share,
        "not_timed": sorted({f"{r['provider']}: {r['check']}" for r in rows if r["check"] != "ok"}),
        "wall_seconds": round(time.perf_counter() - started, 1), "complete": complete,
    }
    (args.out / f"{name}_environment.json").write_text(json.dumps(env, indent=2, default=str) + "\n",
                                                       encoding="utf-8")
    return env


def _ratios(table, value: str, keys, ours: str, label: str) -> str:
    """One row per shape and pass, µs per provider, and each peer's µs / ours (``<peer>/<label>``; > 1: ours ahead)."""
    ok = table[table["check"] == "ok"]
    if ok.empty:
        return "nothing timed"
    pivot = ok.pivot_table(index=keys, columns="provider", values=value, sort=False)
    for other in [p for p in pivot.columns if p != ours and ours in pivot.columns]:
        pivot[f"{other}/{label}"] = pivot[other] / pivot[ours]
    return pivot.round(2).to_string()


def run(args, name: str, bench, environment: Callable[[argparse.Namespace], tuple[dict, dict]], *,
        ours: str, label: str) -> int:
    """Check and time ``args``'s parts and providers shape by shape, writing as it goes; return the exit status.

    Args:
        args: :func:`parse_args`'s. name: the files' prefix and the environment file's section (``fused_add``).
        bench: the bench module: GRID, WHOLE_CALL_SHAPES, kernel_rows, whole_call_rows, their COLUMNS,
            DESCRIPTIONS, EPS.
        environment: ``args`` → (entries for the file's top level, such as the peers' versions; entries of the
            section that say what the bytes, the backward and the check are).
        ours: the provider the printed ratios divide by; label: its name in the ratio columns.
    """
    import pandas as pd

    try:
        timing.require_cuda()
    except timing.BenchmarkUnavailableError:
        print(f"benchmark_{name}: no CUDA GPU here, nothing timed")
        return 0
    parts, providers = args.parts.split(","), args.providers.split(",")
    started = time.perf_counter()
    args.out.mkdir(parents=True, exist_ok=True)
    device = "cuda" if torch.cuda.is_available() else "cpu"  # cpu: the tests' fake timers
    print(f"kernels run on: {rmsnorm.describe_backend()} | torch {torch.__version__} | budget {args.budget_s:.0f} s")
    kernel, whole = [], []
    own = environment(args)
    _write_environment(args, name, bench, own, [], started, complete=False)
    if "kernel" in parts:
        deadline = started + args.kernel_share * args.budget_s
        for shape in bench.GRID:
            kernel += bench.kernel_rows([shape], providers, calls=args.calls, deadline=deadline, device=device)
            pd.DataFrame(kernel, columns=list(bench.KERNEL_COLUMNS)).to_csv(args.out / f"{name}_kernel.csv",
                                                                            index=False, float_format="%.4g")
            print(f"{shape[0]}x{shape[1]} {str(shape[2])[6:]} done at {time.perf_counter() - started:.0f} s")
    if "whole_call" in parts:
        for shape in bench.WHOLE_CALL_SHAPES:
            whole += bench.whole_call_rows([shape], providers, samples=args.samples,
                                           deadline=started + args.budget_s, device=device)
            pd.DataFrame(whole, columns=list(bench.WHOLE_CALL_COLUMNS)).to_csv(args.out / f"{name}_whole_call.csv",
                                                                               index=False, float_format="%.4g")
            print(f"{shape[0]}x{shape[1]} {str(shape[2])[6:]} whole call done at {time.perf_counter() - started:.0f} s")
    env = _write_environment(args, name, bench, own, kernel + whole, started, complete=True)
    pd.set_option("display.width", 250)
    pd.set_option("display.max_columns", 30)
    keys = [*bench.KERNEL_COLUMNS[:bench.KERNEL_COLUMNS.index("provider")], "pass_"]
    if kernel:
        print("\nkernel time, µs (L2 cold):\n" + _ratios(pd.DataFrame(kernel), "us", keys, ours, label))
    for value in ("whole_call_us", "host_us"):
        if whole:
            print(f"\n{value}, µs per call:\n" + _ratios(pd.DataFrame(whole), value, keys, ours, label))
    print(f"\nwrote {args.out} in {env[name]['wall_seconds']} s; not timed: {env[name]['not_timed'] or 'none'}")
    return 0

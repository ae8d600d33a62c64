"""The cliff sweep on a GPU: every width of the declared sweep, neighbours and best peers, checked first.

    python3 scripts/benchmark_cliffs.py --out results/h200 --budget-s 400

Runs :func:`rmsnorm_lab.cliffs.measure`: the fast path at every width of
:func:`rmsnorm_lab.cliffs.cliff_widths` (bf16 first, then float32; in
:func:`~rmsnorm_lab.cliffs.coverage_order`, so that a sweep the budget cuts short still spans
every width range, and the environment file says how many widths each dtype reached), then the peers
(torch.compile, Liger, QuACK where installed) at the odd widths, the article's first, while
the budget lasts. Writes ``cliffs.csv`` and ``cliffs_environment.json``, prints both verdicts
(neighbours, best peer) and the widths that miss them. Never asserts a speed; without a GPU
it says so and exits 0.

Source: rmsnorm_lab/cliffs.py; notebooks/12_tuning_and_side_by_side.ipynb.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the checkout, for `import rmsnorm`


# isort: split
import torch  # noqa: E402

from rmsnorm_lab.sidebyside import PEERS  # noqa: E402


def main(argv=None) -> int:
    """Parse arguments, run, write the files; return the exit status."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("results/h200"))
    parser.add_argument("--budget-s", type=float, default=400.0, help="seconds the whole sweep may take")
    parser.add_argument("--dtypes", default="bfloat16,float32")
    parser.add_argument("--peers", default=",".join(PEERS), help="providers timed at the odd widths")
    parser.add_argument("--peer-share", type=float, default=0.4, help="share of the budget kept for the peers")
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        print("benchmark_cliffs: no CUDA GPU here, nothing timed (the committed sweep is results/h200/cliffs.csv)")
        return 0
    import pandas as pd
    import triton

    from rmsnorm_lab.cliffs import (
        X_BYTES,
        cliff_widths,
        coverage_order,
        measure,
        neighbour_verdicts,
        odd_widths_first,
        peer_verdicts,
    )
    from rmsnorm_lab.eager import eager_provenance
    from rmsnorm_lab.providers import provider
    from rmsnorm_lab.results import code_provenance

    args.out.mkdir(parents=True, exist_ok=True)
    widths = cliff_widths()
    dtypes = [getattr(torch, d) for d in args.dtypes.split(",")]
    started = time.perf_counter()
    fast_deadline = started + args.budget_s * (1 - args.peer_share)
    rows = []
    for i, dtype in enumerate(dtypes):  # the fast path, every width; each dtype its share of the time
        share = (fast_deadline - time.perf_counter()) / (len(dtypes) - i)
        rows += measure(coverage_order(widths), dtype, ("fast",), deadline=time.perf_counter() + share)
        pd.DataFrame(rows).to_csv(args.out / "cliffs.csv", index=False)  # kept if a later phase is cut short
    peers = [p for p in args.peers.split(",") if p and not provider(p).refuses(
        torch.zeros(1, 8, device="cuda"), torch.ones(8, device="cuda"), 1e-6)]
    print(f"peers at the odd widths: {', '.join(peers) or 'none available'}")
    odd = odd_widths_first(widths)
    for i, dtype in enumerate(dtypes):
        share = (started + args.budget_s - time.perf_counter()) / (len(dtypes) - i)
        rows += measure(odd, dtype, ("fast", *peers), deadline=time.perf_counter() + share)
        pd.DataFrame(rows).to_csv(args.out / "cliffs.csv", index=False)
    table = pd.DataFrame(rows).drop_duplicates(["dtype", "N", "pass_", "provider"], keep="last")
    table.to_csv(args.out / "cliffs.csv", index=False)
    env = {"device": torch.cuda.get_device_name(0), "torch": torch.__version__, "triton": triton.__version__,
           "date": time.strftime("%Y-%m-%d"), "x_bytes": X_BYTES, "widths_declared": len(widths),
           "widths_measured": {str(d)[6:]: len({r["N"] for r in rows if r["provider"] == "fast"
                                                 and r["dtype"] == str(d)[6:]}) for d in dtypes},
           "peers": peers, "budget_s": args.budget_s,
           "timing": "rmsnorm_lab.kernel_time_us(calls=10, warmup=2): profiler kernel time, "
                     "L2 flushed before each call",
           "eager_rms_norm": eager_provenance(), "code": code_provenance()}
    (args.out / "cliffs_environment.json").write_text(json.dumps(env, indent=2) + "\n")
    near, best = neighbour_verdicts(table), peer_verdicts(table)
    pd.set_option("display.width", 200)
    for name, verdict in (("neighbours", near), ("best peer at odd N", best)):
        print(f"{name}: {int(verdict['ok'].sum())} of {len(verdict)} met")
        if (~verdict["ok"]).any():
            print(verdict[~verdict["ok"]].round(3).to_string(index=False))
    return 0


if __name__ == "__main__":
    sys.exit(main())

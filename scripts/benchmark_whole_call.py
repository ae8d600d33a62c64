"""Whole-call time of every provider on a GPU: forward, forward with grad, forward + backward; outputs checked first.

    python3 scripts/benchmark_whole_call.py --out results/h200     # whole_call.csv + whole_call_environment.json
    python3 scripts/benchmark_whole_call.py --out /tmp/wc --quick  # a self-check: two shapes, fewer samples

Runs :func:`rmsnorm_lab.wholecall.measure_shape` over its SHAPES for the providers of
WHOLE_CALL (fast through ``FastRMSNorm``, the floor, the article's ``rmsnorm.article.rmsnorm``,
``F.rms_norm``, ``torch.compile``, Liger, QuACK: the one provider list of
rmsnorm_lab/providers.py). A provider that fails to import, refuses a shape or fails the
oracle check is recorded with its reason and the run goes on; the CSV is rewritten after
every shape, so a run cut short keeps what it measured. Prints the fast path's targets (issue
15) and a short table last. Never asserts a speed-up; without a GPU it says so and exits 0.

Source: notebooks/07_benchmark.ipynb; rmsnorm_lab/wholecall.py.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the checkout, for `import rmsnorm`

import rmsnorm  # noqa: E402  (the checkout's package, found through the path above)

# isort: split
import torch  # noqa: E402


def _shapes(spec: str, shapes):
    """``--shapes``: comma-separated indices into SHAPES (empty: all)."""
    return [shapes[int(i)] for i in spec.split(",")] if spec else list(shapes)


def main(argv=None) -> int:
    """Parse arguments, run, write the files; return the exit status (0 also without a GPU)."""
    from rmsnorm_lab.providers import PROVIDERS
    from rmsnorm_lab.results import WHOLE_CALL_ENVIRONMENT, WHOLE_CALL_FILE
    from rmsnorm_lab.wholecall import GRAPH_PROVIDERS, SHAPES, WHOLE_CALL

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("results/h200"), help="folder for the CSV and its json")
    parser.add_argument("--shapes", default="",
                        help=f"comma-separated indices into {[(m, n, str(d)[6:]) for m, n, d in SHAPES]}")
    parser.add_argument("--providers", default=",".join(WHOLE_CALL), help="provider names, comma-separated, in order")
    parser.add_argument("--graph-providers", default=",".join(GRAPH_PROVIDERS),
                        help="providers also replayed from a CUDA graph")
    parser.add_argument("--budget-s", type=float, default=420.0, help="seconds after which no further provider is run")
    parser.add_argument("--quick", action="store_true", help="a self-check: shapes 0 and 3, 5 samples instead of 50")
    args = parser.parse_args(argv)
    from rmsnorm_lab import environment_info, timing

    try:
        timing.require_cuda()
    except timing.BenchmarkUnavailableError:
        print("benchmark_whole_call: no CUDA GPU here, nothing timed "
              "(the committed results are in results/h200/whole_call.csv)")
        return 0
    import pandas as pd

    from rmsnorm_lab.wholecall import COLUMNS, measure_shape, summary, targets

    started = time.perf_counter()
    shapes = _shapes(args.shapes or ("0,3" if args.quick else ""), SHAPES)
    providers, graph = args.providers.split(","), args.graph_providers.split(",")
    samples = 5 if args.quick else None
    args.out.mkdir(parents=True, exist_ok=True)
    print(f"kernels run on: {rmsnorm.describe_backend()} | torch {torch.__version__}")
    rows: list[dict] = []
    for M, N, dtype in shapes:
        rows += measure_shape(M, N, dtype, providers, graph_providers=graph, deadline=started + args.budget_s,
                              samples=samples)
        pd.DataFrame(rows, columns=list(COLUMNS)).to_csv(args.out / WHOLE_CALL_FILE, index=False, float_format="%.3f")
        print(f"{M}x{N} {str(dtype)[6:]} done at {time.perf_counter() - started:.0f} s")
    table = pd.DataFrame(rows, columns=list(COLUMNS))

    env = environment_info()
    env["whole_call"] = {
        "shapes": [[m, n, str(d).removeprefix("torch.")] for m, n, d in shapes],
        "providers": {p.name: p.description for p in PROVIDERS if p.name in providers},
        "graph_providers": graph, "eps": 1e-6, "quick": args.quick,
        "whole_call_us": f"time_whole_calls: CUDA events around {timing.CALLS_PER_SAMPLE} back-to-back calls, "
                         f"{timing.WARMUP_CALLS} warm-up calls, median of {samples or timing.SAMPLES} samples",
        "host_us": f"time_host_calls: CPU wall time of {timing.HOST_CALLS_PER_SAMPLE} calls without synchronising, "
                   f"median of {samples or timing.HOST_SAMPLES} samples",
        "graph_us": f"time_graph_replay: triton.testing.do_bench_cudagraph(rep={timing.GRAPH_REP_MS} ms), median",
        "kernel_us": "kernel_time_us: torch.profiler device time per call, L2 flushed before each call",
        "check": "every output against the float64 oracle (rmsnorm_lab.providers.check_calls) before any timing",
        "not_timed": sorted({f"{r['provider']}: {r['check']}" for r in rows if r["check"] != "ok"}),
        "wall_seconds": round(time.perf_counter() - started, 1),
    }
    (args.out / WHOLE_CALL_ENVIRONMENT).write_text(json.dumps(env, indent=2) + "\n", encoding="utf-8")

    pd.set_option("display.width", 250)
    pd.set_option("display.max_columns", 30)
    pd.set_option("display.max_colwidth", 60)
    verdicts = targets(table)
    print(verdicts.to_string(index=False, float_format="%.1f"))
    for pass_, value in (("forward", "host_us"), ("forward_backward", "host_us"), ("forward_backward", "whole_call_us"),
                         ("forward_backward", "graph_us")):
        print(f"\n{value} of {pass_} (µs per call):")
        print(summary(table, pass_, value).dropna(axis=1, how="all").round(1).to_string())
    print(f"\nwrote {args.out / WHOLE_CALL_FILE} in {env['whole_call']['wall_seconds']} s; "
          f"not timed: {env['whole_call']['not_timed'] or 'none'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

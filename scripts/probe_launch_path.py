"""Issue 41 on a GPU, in one run: each launch path's whole call and host µs, two floors, eager; Llama steps, decode.

    python3 scripts/probe_launch_path.py --out results/h200               # at most --budget-s (440) s
    python3 scripts/probe_launch_path.py --out /tmp/lp --quick --no-model  # a self-check: two shapes, 5 samples

1. :mod:`rmsnorm_lab.launch_bench` at its SHAPES (1, 64, 4096 × 4096 bf16; 128 × 257 float32), forward
   and forward + backward: ``fast`` (native launch), ``fast_triton_launcher``, ``floor`` (the old floor),
   ``cpp_floor`` (a torch.library C++ op launching an empty kernel, built here first: about a minute),
   ``eager_module`` (torch.nn.RMSNorm), ``eager`` (F.rms_norm) → launch_path.csv, rewritten after every shape;
   then the fast forward's host time taken apart at the first and last shape (:func:`rmsnorm_lab.launch_bench.
   host_pieces`: the module, the function, launch_forward, the launch alone, two allocations) → launch_path_pieces.csv.
2. scripts/benchmark_model.py in this process: the Llama training step at its host- and GPU-bound sizes,
   eager, ``original`` and ``fast`` timed in rounds (--interleave), and greedy decode tokens/s at batches
   1 and 16, with the time left → launch_path_model.csv, …_decode.csv, …_kernels.csv, its json.
3. launch_path_environment.json; the tables and issue 41's targets (reported, never asserted) are printed,
   and written into results/h200/README.md by tools/readme_fast_table.py once the files are committed.

``--budget-s`` bounds the whole run: part 1 stops starting providers at 45 % of it, part 2 gets what is
left less a margin. Without a GPU it says so and exits 0.

Source: issue 41; rmsnorm_lab/launch_bench.py; scripts/benchmark_model.py.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the checkout, for `import rmsnorm`

import rmsnorm  # noqa: E402  (the checkout's package, found through the path above)

# isort: split
import torch  # noqa: E402

#: Seconds kept back from part 2's budget (writing files, the table).
MARGIN_S = 15.0


def _benchmark_model():
    path = Path(__file__).resolve().parent / "benchmark_model.py"
    spec = importlib.util.spec_from_file_location("benchmark_model", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def main(argv=None) -> int:
    """Parse arguments, run, write the files; return the exit status (0 also without a GPU)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("results/h200"), help="folder for the CSVs, table and json")
    parser.add_argument("--budget-s", type=float, default=440.0, help="seconds the whole run may take")
    parser.add_argument("--quick", action="store_true", help="a self-check: shapes 0 and 3, 5 samples")
    parser.add_argument("--no-model", action="store_true", help="leave out part 2 (the Llama step and decode)")
    parser.add_argument("--steps", type=int, default=50,
                        help="timed Llama steps per variant, in rounds (issue 41: at least 50, interleaved)")
    args = parser.parse_args(argv)
    from rmsnorm_lab import environment_info, timing

    try:
        timing.require_cuda()
    except timing.BenchmarkUnavailableError:
        print("probe_launch_path: no CUDA GPU here, nothing timed")
        return 0
    import pandas as pd

    from rmsnorm_lab import launch_bench as lb

    started = time.perf_counter()
    args.out.mkdir(parents=True, exist_ok=True)
    rmsnorm.native_launch.set_native_launch(True)  # what this probe measures, whatever RMSNORM_NATIVE_LAUNCH says
    path = rmsnorm.launch_path()
    print(f"kernels run on: {rmsnorm.describe_backend()} | torch {torch.__version__} | launch path: {path}"
          + (f" ({rmsnorm.native_launch.state.failure})" if path != "native" else ""))
    shapes = [lb.SHAPES[0], lb.SHAPES[3]] if args.quick else list(lb.SHAPES)
    rows: list[dict] = []
    for M, N, dtype in shapes:
        rows += lb.measure_shape(M, N, dtype, deadline=started + 0.45 * args.budget_s,
                                 samples=5 if args.quick else None)
        pd.DataFrame(rows, columns=list(lb.COLUMNS)).to_csv(args.out / lb.LAUNCH_FILE, index=False,
                                                            float_format="%.3f")
        print(f"{M}x{N} done at {time.perf_counter() - started:.0f} s")
    table = pd.DataFrame(rows, columns=list(lb.COLUMNS))
    pieces = pd.DataFrame([row for M, N, dtype in (shapes[0], shapes[-1])
                           for row in lb.host_pieces(M, N, dtype, samples=5 if args.quick else None)])
    pieces.to_csv(args.out / lb.PIECES_FILE, index=False, float_format="%.3f")
    print(lb.render_pieces(pieces))

    steps = None
    if not args.no_model:
        left = started + args.budget_s - MARGIN_S - time.perf_counter()
        _benchmark_model().main(["--out", str(args.out), "--name", lb.STEP_STEM, "--variants", "original,fast",
                                 "--interleave", "--steps", str(args.steps), "--compile-sizes", "", "--decode",
                                 "--budget-s", f"{left:.0f}"])
        for name in (f"{lb.STEP_STEM}.csv", f"{lb.STEP_STEM}_decode.csv"):
            if not (args.out / name).is_file():
                print(f"probe_launch_path: {name} was not written (see benchmark_model's lines above)")
        step_file = args.out / f"{lb.STEP_STEM}.csv"
        steps = pd.read_csv(step_file) if step_file.is_file() else None  # for the step's target (benchmark_model
        # printed the step and decode tables themselves)

    env = environment_info()
    env["launch_path"] = {
        "path": path, "native_failure": rmsnorm.native_launch.state.failure,
        "shapes": [[m, n, str(d).removeprefix("torch.")] for m, n, d in shapes],
        "providers": {name: p.description for name, p in lb.LAUNCH_PROVIDERS.items()},
        "whole_call_us": f"time_whole_calls: CUDA events around {timing.CALLS_PER_SAMPLE} back-to-back calls, median "
                         f"of {5 if args.quick else timing.SAMPLES} samples",
        "host_us": f"time_host_calls: CPU wall time of {timing.HOST_CALLS_PER_SAMPLE} calls without synchronising, "
                   f"median of {5 if args.quick else timing.HOST_SAMPLES} samples",
        "model": None if args.no_model else f"scripts/benchmark_model.py --name {lb.STEP_STEM} --variants "
                                            f"original,fast --interleave --steps {args.steps} --decode",
        "quick": args.quick, "budget_s": args.budget_s, "wall_seconds": round(time.perf_counter() - started, 1),
    }
    (args.out / "launch_path_environment.json").write_text(json.dumps(env, indent=2) + "\n", encoding="utf-8")
    print(lb.markdown(table, steps))
    print(f"wrote {args.out / lb.LAUNCH_FILE} in {env['launch_path']['wall_seconds']} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())

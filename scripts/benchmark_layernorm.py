"""The fast LayerNorm side by side on a GPU: kernel time L2 cold, then the whole call; and the results table.

    python3 scripts/benchmark_layernorm.py --out results/h200 --budget-s 480
        # layernorm_kernel.csv, layernorm_whole_call.csv, layernorm_environment.json
    python3 scripts/benchmark_layernorm.py --out results/h200 --table
        # the results page's table from the CSVs (rmsnorm_lab.pages.render_layernorm; no GPU)

Providers (rmsnorm_lab.layernorm_bench.PROVIDERS): ``fast`` (rmsnorm.layernorm_fast), ``liger``
(LigerLayerNormFunction), ``quack`` (quack.rmsnorm.layernorm_fwd, float32 weight and bias only; its backward through
its own function where it has one), ``compile`` (torch.compile of F.layer_norm) and ``eager`` (F.layer_norm). Every
call's outputs (y; dx, dweight, dbias from a random dy) are checked against F.layer_norm in float64 before it is
timed; a missing peer is recorded as refused with the reason.

1. Kernel time: the forward and the backward each alone, rmsnorm_lab.kernel_time_us (L2 flushed before each
   call), at rmsnorm_lab.layernorm_bench.GRID (the weight dtype declared per shape); GB/s from the declared
   LayerNorm bytes, the same for everyone. Until --kernel-share of --budget-s is spent.
2. Whole call: forward (no grad) and forward + backward through each public call at the host-bound shapes of
   rmsnorm_lab.wholecall. Until --budget-s is spent.

The CSVs are rewritten after every shape, and the environment file is written first and last (``complete``), so
a run cut short keeps what it measured. Never asserts a speed-up; without CUDA it says so in one line.

Source: scripts/benchmark_fused_add.py; rmsnorm_lab/layernorm_bench.py; rmsnorm_lab/peer_cli.py (the options and
the loop, shared with scripts/benchmark_fused_add.py).
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the checkout, for `import rmsnorm_lab`

KERNEL_FILE = "layernorm_kernel.csv"


def _table(out: Path) -> int:
    """Print the results block of layernorm_kernel.csv (and layernorm_whole_call.csv where present), as
    tools/readme_fast_table.py writes it into results/h200/README.md: rmsnorm_lab.pages.render_layernorm."""
    import pandas as pd

    from rmsnorm_lab.pages import render_layernorm

    whole = out / "layernorm_whole_call.csv"
    print(render_layernorm(pd.read_csv(out / KERNEL_FILE), pd.read_csv(whole) if whole.is_file() else None))
    return 0


def _environment(args) -> tuple[dict, dict]:
    """What the environment file says beyond rmsnorm_lab.peer_cli's: the peers' versions; the bytes, backward, check."""
    from rmsnorm_lab import peer_cli

    return {"quack": peer_cli.version("quack-kernels"), "liger": peer_cli.version("liger-kernel")}, {
        "bytes": "rmsnorm_lab.layernorm_forward_bytes (2MNs + 2Ns_w + 8M) / layernorm_backward_bytes "
                 "(3MNs + 3Ns_w + 8M), the same for every provider; gbps = bytes / us / 1e3",
        "backward": "torch.autograd.grad(y, (x, weight, bias), dy), dy random (QuACK: its own backward function); "
                    "forward_backward: the call on leaves, then backward",
        "check": "every output against F.layer_norm in float64 (rmsnorm_lab.layernorm_bench.check)",
    }


def main(argv=None) -> int:
    """Parse arguments, run (or print the table), write the CSVs and the environment file; return the exit status."""
    from rmsnorm_lab import layernorm_bench as bench
    from rmsnorm_lab import peer_cli

    args = peer_cli.parse_args(__doc__.splitlines()[0], argv, bench.PROVIDERS, budget_s=480.0, table=True)
    if args.table:
        return _table(args.out)
    return peer_cli.run(args, "layernorm", bench, _environment, ours="fast", label="fast")


if __name__ == "__main__":
    sys.exit(main())

"""The fused residual add + RMSNorm side by side on a GPU: kernel time L2 cold, then the whole call.

    python3 scripts/benchmark_fused_add.py --out results/h200 --budget-s 500
        # fused_add_kernel.csv, fused_add_whole_call.csv, fused_add_environment.json

Providers (rmsnorm_lab.fused_add_bench.PROVIDERS): ``fast_fused`` (rmsnorm.rmsnorm_add), ``fast_unfused`` (eager
add, then rmsnorm_fast: two launches), ``liger`` (LigerFusedAddRMSNormFunction), ``quack`` (quack.rmsnorm with
residual and prenorm=True), ``compile`` (torch.compile of add-then-F.rms_norm) and ``eager`` (the same,
uncompiled). Every call's outputs (y, residual_out; dx, d residual, dweight from random dy and d residual_out)
are checked against the float64 oracle before it is timed; a missing peer is recorded as refused with the reason.

1. Kernel time: the forward and the backward each alone, rmsnorm_lab.kernel_time_us (L2 flushed before each
   call), at 16384 x 5120 and 32768 x 8192 bf16, then the main grid (rmsnorm_lab.sidebyside.GRID); GB/s from
   the declared fused-add bytes, the same for everyone. Until --kernel-share of --budget-s is spent.
2. Whole call: forward (no grad) and forward + backward through each public call, CUDA events around
   back-to-back calls and host us beside (rmsnorm_lab.wholecall.fill_times), at the host-bound shapes of
   rmsnorm_lab.wholecall. Until --budget-s is spent.

A provider not started for want of time is recorded as such. The CSVs are rewritten after every shape, and the
environment file is written first and last (``complete``), so a run cut short keeps what it measured. Never
asserts a speed-up; without CUDA it says so in one line.

Source: scripts/benchmark_offset.py; rmsnorm_lab/fused_add_bench.py; rmsnorm_lab/peer_cli.py (the options and
the loop, shared with scripts/benchmark_layernorm.py).
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the checkout, for `import rmsnorm_lab`


def _environment(args) -> tuple[dict, dict]:
    """What the environment file says beyond rmsnorm_lab.peer_cli's: QuACK's version; the bytes, backward, check."""
    from rmsnorm_lab import peer_cli

    return {"quack": peer_cli.version("quack-kernels")}, {
        "bytes": "rmsnorm_lab.fused_add_forward_bytes / fused_add_backward_bytes (residual in x's dtype), "
                 "the same for every provider; gbps = bytes / us / 1e3",
        "backward": "torch.autograd.grad((y, residual_out), (x, residual, weight), (dy, d_residual_out)), dy and "
                    "d_residual_out random; forward_backward: the call on leaves, then autograd.backward of both",
        "check": "every output against the float64 oracle at h = x + residual (rmsnorm_lab.fused_add_bench.check)",
    }


def main(argv=None) -> int:
    """Parse arguments, run, write the CSVs and the environment file; return the exit status."""
    from rmsnorm_lab import fused_add_bench as bench
    from rmsnorm_lab import peer_cli

    args = peer_cli.parse_args(__doc__.splitlines()[0], argv, bench.PROVIDERS, budget_s=500.0)
    return peer_cli.run(args, "fused_add", bench, _environment, ours="fast_fused", label="fused")


if __name__ == "__main__":
    sys.exit(main())

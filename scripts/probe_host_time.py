"""Where the fast path's host time goes: forward + backward host µs, with the autograd engine's threads on and off.

    python3 scripts/probe_host_time.py      # on a GPU; the H200's output is results/h200/host_time_probe.txt

Times (CPU wall clock of 1000 back-to-back calls, no synchronisation in between, 64 × 4096
bf16) eager ``F.rms_norm``, the fast path and a bare Python ``torch.autograd.Function`` that
allocates its outputs and launches nothing, each forward + backward, with
``torch.autograd.set_multithreading_enabled`` on (the default: a CUDA node's backward runs on
the engine's device thread, a hand-off from the calling thread) and off; then a cProfile of
the fast path's forward + backward. Never asserts a speed; without a GPU it says so and exits 0.

Source: issue 15 (what the remaining host time is spent on); rmsnorm/autograd.py.
"""

from __future__ import annotations

import cProfile
import pstats
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the checkout, for `import rmsnorm`

import rmsnorm  # noqa: E402,F401  (the checkout's package, found through the path above)

# isort: split
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from rmsnorm import rmsnorm_fast  # noqa: E402


def host_us(fn, n: int = 1000) -> float:
    """µs of host time per call of ``fn`` over ``n`` back-to-back calls, after 50 warm-up calls."""
    for _ in range(50):
        fn()
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(n):
        fn()
    stop = time.perf_counter()
    torch.cuda.synchronize()
    return (stop - start) / n * 1e6


class _Bare(torch.autograd.Function):
    """The least an autograd.Function costs: outputs allocated, nothing launched."""

    @staticmethod
    def forward(ctx, x, w):
        return torch.empty_like(x)

    @staticmethod
    def backward(ctx, dy):
        return torch.empty_like(dy), None


def main() -> int:
    """Print the table and the profile; return the exit status."""
    if not torch.cuda.is_available():
        print("probe_host_time: no CUDA GPU here, nothing timed (the H200's run is results/h200/host_time_probe.txt)")
        return 0
    x = torch.randn(64, 4096, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    w = torch.randn(4096, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    dy = torch.randn(64, 4096, device="cuda", dtype=torch.bfloat16)

    def step(forward):
        def run():
            x.grad = w.grad = None
            forward().backward(dy)
        return run

    from rmsnorm_lab.eager import eager_provenance

    print(f"eager F.rms_norm runs: {eager_provenance()}")
    cases = {"eager F.rms_norm": lambda: F.rms_norm(x, (4096,), w, 1e-6), "fast": lambda: rmsnorm_fast(x, w, 1e-6),
             "trivial Python Function": lambda: _Bare.apply(x, w)}
    for threads in (True, False):
        torch.autograd.set_multithreading_enabled(threads)
        for name, forward in cases.items():
            print(f"multithreading={threads!s:5} {name:26s} fwd+bwd host {host_us(step(forward)):7.1f} us  "
                  f"fwd {host_us(forward):6.1f} us")
    torch.autograd.set_multithreading_enabled(True)
    profile = cProfile.Profile()
    run = step(cases["fast"])
    profile.enable()
    for _ in range(500):
        run()
    profile.disable()
    torch.cuda.synchronize()
    pstats.Stats(profile).sort_stats("tottime").print_stats(12)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The native launch's host cost per call, on any machine: the launch itself stubbed, everything before it real.

    python3 scripts/probe_launch_host.py            # prints µs per call of each piece, median of 7 × 20,000 calls

What a forward costs the host below rmsnorm_fast's checks, in pieces (CPU tensors; no GPU, no interpreter):

- ``forward_key``: the direct launch's cache key of the forward (rmsnorm.forward.forward_key);
- ``pack``: the C++ extension packing the forward's arguments (csrc/triton_launch.cpp, ``pack``: the
  code ``launch`` runs before ``cuLaunchKernelEx``, which is not called);
- ``forward_params``: the forward's own C path (csrc/fast_path.cpp) for a kept plan: its key, the look-up, the
  grid and the packing, all of its call but the two allocations, the stream query and the driver call (on a GPU
  ``launch_forward`` runs it instead of everything in the next line);
- ``launch_forward, launch stubbed``: :func:`rmsnorm.forward.launch_forward` whole (two allocations, the
  config, the cache hit, the stream query; the key replaced by a constant, as every call must hit the one
  stand-in entry: add ``forward_key``'s line for the real key) with the extension's ``launch`` a no-op;
- ``launch_forward, pack as launch``: the same, ``launch`` replaced by ``pack`` (all but the driver call);
- above the launcher, the launch stubbed as in the third line, what a model's call adds: ``rmsnorm_fast`` under
  ``torch.no_grad()`` (decoding), ``rmsnorm_fast`` with x requiring grad (training: its autograd.Function), and
  ``FastRMSNorm``'s call (the module) with x requiring grad. The functional's checks take CPU tensors under
  Triton's interpreter only, so the probe switches the interpreter on and the launcher's own path back on;
- ``C path: …``: the same calls as a GPU with the native launch on makes them, the forward's C path stubbed in
  (``forward_params`` for a kept plan, then outputs made once: all of its call but the two allocations, the
  stream query and the driver call) and the contract's quick check in C (contract.install_quick_check).

On the H200 the driver call itself adds about 2–3 µs (tritonbench #1016: a raw ``cuLaunchKernel`` 3 µs);
scripts/probe_launch_path.py measures the whole call there. Prints only: nothing here is a result to commit.

Source: issue 41.
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the checkout, for `import rmsnorm`

import os  # noqa: E402

os.environ["TRITON_INTERPRET"] = "1"  # before rmsnorm is imported: its checks take CPU tensors then

import torch  # noqa: E402

from rmsnorm import FastRMSNorm, contract, forward, native_launch, rmsnorm_fast  # noqa: E402
from rmsnorm.config import forward_config, num_programs  # noqa: E402
from rmsnorm.launch import CachedKernel  # noqa: E402

#: The forward kernel's argument codes for a plain norm with a weight: 9 run-time arguments, then the rest, which
#: a plain norm's launch passes as constexprs or None (the fused add's and the LayerNorm's pointers).
FORWARD_CODES = b"PiPPiPiif" + b"x" * (len(forward.rmsnorm_fast_forward_kernel.arg_names) - 9)


def per_call_us(fn, calls: int = 20_000, repeats: int = 7) -> float:
    """Median over ``repeats`` of the wall time of ``calls`` calls, in µs per call."""
    for _ in range(1000):
        fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        times.append((time.perf_counter() - start) * 1e6 / calls)
    return statistics.median(times)


def main() -> int:
    module = native_launch.compile_extension()
    x, w = torch.randn(64, 4096, dtype=torch.float16), torch.randn(4096, dtype=torch.float16)
    y, rstd = torch.empty_like(x), torch.empty(64)
    config = forward_config(4096, x.dtype)
    persistent = num_programs(config, x.device, -(-64 // config.BLOCK_M)) < -(-64 // config.BLOCK_M)
    key = forward.forward_key(x, w, y, rstd, config, persistent, True)
    args = (x, 4096, w, y, 4096, rstd, 64, 4096, 1e-6) + (True,) * (len(FORWARD_CODES) - 9)
    plan = (FORWARD_CODES, 0, config.num_warps, 1, 0, False, False)

    launcher = forward._launch
    launcher.usable = True  # CPU tensors: the launcher's own path (not the interpreter's), its stream query stubbed
    torch.cuda.current_device = lambda: None  # a CPU tensor's device index
    torch._C._cuda_getCurrentRawStream = lambda index: 0

    class Compiled:  # a stand-in CompiledKernel: nothing is compiled here
        src = type("Src", (), {"signature": {}})()
        metadata = type("Metadata", (), {"global_scratch_size": 0, "profile_scratch_size": 0})()

    module.remember_forward(x, w, 0.0, y, rstd, plan, config.BLOCK_M, 0, None)
    rows = [("forward_key", per_call_us(lambda: forward.forward_key(x, w, y, rstd, config, persistent, True))),
            ("pack", per_call_us(lambda: module.pack(FORWARD_CODES, args, 0, 0))),
            ("forward_params", per_call_us(lambda: module.forward_params(x, w, 1e-6, 0.0, y, rstd)))]
    module.forget_plans()

    def hit_key(*arguments):
        return key  # every call a hit on the one stand-in entry (the outputs' addresses change between calls)

    forward.forward_key = hit_key
    launcher.cache[key] = CachedKernel(Compiled())
    launcher.cache[key].plan = plan
    native_launch.state.enabled, native_launch.state.tried = True, True
    # the forward's C path never has a plan here (CPU tensors), and the Python path's hand-over of one is stubbed:
    # on a GPU it happens once per kind of launch
    no_forward = staticmethod(lambda *a: None)
    native_launch.remember_forward = lambda *a: False
    native_launch.state.module = type("Stub", (), {"launch": staticmethod(lambda *a: None), "forward": no_forward})()
    rows.append(("launch_forward, launch stubbed", per_call_us(lambda: forward.launch_forward(x, w, 1e-6))))
    native_launch.state.module = type("Pack", (), {"launch": staticmethod(
        lambda plan, grid, stream, args: module.pack(plan[0], args, 0, 0)), "forward": no_forward})()
    rows.append(("launch_forward, pack as launch", per_call_us(lambda: forward.launch_forward(x, w, 1e-6))))
    native_launch.state.module = type("Stub", (), {"launch": staticmethod(lambda *a: None), "forward": no_forward})()
    leaf, norm = x.clone().requires_grad_(), FastRMSNorm(4096, eps=1e-6, dtype=x.dtype)

    def no_grad():
        with torch.no_grad():
            return rmsnorm_fast(x, w, 1e-6)

    rows += [("rmsnorm_fast, no grad", per_call_us(no_grad)),
             ("rmsnorm_fast, x requires grad", per_call_us(lambda: rmsnorm_fast(leaf, w, 1e-6))),
             ("FastRMSNorm, x requires grad", per_call_us(lambda: norm(leaf)))]
    # the C path stubbed in: the forward's C call returns preallocated outputs after forward_params (all of its
    # work but the two allocations, the stream query and the driver call), and the contract's quick check is C's
    native_launch.state.module = type("CPath", (), {"launch": staticmethod(lambda *a: None), "forward": staticmethod(
        lambda *a: (module.forward_params(x, w, 1e-6, 0.0, y, rstd), (y, rstd))[1])})()
    module.remember_forward(x, w, 0.0, y, rstd, plan, config.BLOCK_M, 0, None)
    contract.install_quick_check(module)
    rows += [("C path: launch_forward", per_call_us(lambda: forward.launch_forward(x, w, 1e-6))),
             ("C path: rmsnorm_fast, no grad", per_call_us(no_grad)),
             ("C path: rmsnorm_fast, x requires grad", per_call_us(lambda: rmsnorm_fast(leaf, w, 1e-6))),
             ("C path: FastRMSNorm, x requires grad", per_call_us(lambda: norm(leaf)))]
    print(f"torch {torch.__version__}; 64 x 4096 float16 on the CPU; µs per call (median of 7 x 20,000):")
    for name, us in rows:
        print(f"  {name:38s} {us:6.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

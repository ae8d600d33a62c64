"""Probe: N compiled into the fast kernels (FastConfig.static_n), against the table's run-time N, on a GPU.

    python3 scripts/probe_static_n.py > results/h200/probe_static_n.txt

A row narrower than its power-of-two block is masked; with N a run-time argument every column's mask is
computed and kept in registers across the row loop, and at 16384 × 4097 bf16 the backward holds 255 registers
a thread, so one program of 8 warps fills an SM. With N a constexpr the masks of the columns that are always in
range fold away (the same kernel compiled by ptxas for sm_90: 188 registers at 8 warps, 106 at 16, against
255 and 128 with 112 bytes spilled). Inductor compiles static shapes and leads at such widths.

For each shape and pass: the table's config, then the same with ``static_n=True``, then static_n with twice and
half the warps, one pipelining stage, and (backward) 2 programs per SM. Every launch is checked against the
float64 oracle (rmsnorm.testing) before it is timed with rmsnorm_lab.kernel_time_us (L2-cold). Needs CUDA.
"""

import dataclasses
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the checkout, for `import rmsnorm`

import torch  # noqa: E402

from rmsnorm import backward_config, forward_config, rmsnorm_fast_backward, rmsnorm_fast_forward  # noqa: E402
from rmsnorm.testing import assert_close, dgamma_tolerance, make_inputs, oracle  # noqa: E402
from rmsnorm_lab.timing import kernel_time_us  # noqa: E402

SHAPES = (  # the weak grid's and main grid's misses and neighbours, odd and even
    (16384, 4097, torch.bfloat16), (65536, 257, torch.bfloat16), (65536, 257, torch.float32),
    (8192, 5120, torch.bfloat16), (8192, 7168, torch.bfloat16), (65536, 1000, torch.float16),
    (4096, 4096, torch.bfloat16), (16384, 8192, torch.bfloat16), (32768, 1536, torch.bfloat16),
    (1152000, 384, torch.bfloat16),
)


def variants(config, backward: bool):
    s = dataclasses.replace(config, static_n=True)
    out = [("table", config), ("static", s), ("static warps x2", dataclasses.replace(s, num_warps=s.num_warps * 2))]
    if s.num_warps > 1:
        out.append(("static warps /2", dataclasses.replace(s, num_warps=s.num_warps // 2)))
    if s.num_stages > 1:
        out.append(("static 1 stage", dataclasses.replace(s, num_stages=1)))
    if backward and s.programs_per_sm is not None:
        out.append(("static 2x programs", dataclasses.replace(s, programs_per_sm=2 * s.programs_per_sm)))
    return [(name, c) for name, c in out if c.num_warps <= 32]


def main() -> None:
    for M, N, dtype in SHAPES:
        x, w, dy = make_inputs(M, N, dtype, "cuda", draw_on_device=True)
        y64, dx64, dg64 = oracle(x, w, dy, on="cuda")
        _, rstd = rmsnorm_fast_forward(x, w, 1e-6)
        for pass_, base in (("forward", forward_config(N, dtype)), ("backward", backward_config(N, dtype))):
            times = {}
            for name, config in variants(base, pass_ == "backward"):
                try:
                    if pass_ == "forward":
                        def call(config=config):
                            return rmsnorm_fast_forward(x, w, 1e-6, config=config)
                        assert_close(call()[0], y64, dtype=dtype)
                    else:
                        def call(config=config):
                            return rmsnorm_fast_backward(x, w, rstd, dy, config=config)
                        dx, dg = call()
                        assert_close(dx, dx64, dtype=dtype)
                        assert_close(dg, dg64, tol=dgamma_tolerance(M, dtype, w.dtype))
                    times[name] = kernel_time_us(call)
                except (AssertionError, RuntimeError, ValueError) as err:  # wrong, or does not compile
                    print(f"  {name}: {type(err).__name__}: {str(err)[:120]}")
            table = times.get("table", float("nan"))
            best = min(times, key=times.get) if times else None
            print(f"{M}x{N} {str(dtype)[6:]} {pass_:8s} table {table:8.2f} us {base}", flush=True)
            for name, t in times.items():
                print(f"    {name:20s} {t:8.2f} us  table/this {table / t:.3f}{'  <- best' if name == best else ''}")


if __name__ == "__main__":
    main()

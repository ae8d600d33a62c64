"""The fast forward's kernel time at the LayerNorm, fused-add and main grids, for one checkout: a forward A/B.

Run it from each checkout's root (the ``rmsnorm`` it times is the one in the working directory), alternating, and
append the rows to one file, twice each (the header of ``results/h100/forward_layout_ab.csv`` names the columns):

    git worktree add /tmp/old fc09a7f
    for round in 1 2; do
      (cd /tmp/old && python3 /path/to/checkout/scripts/probe_forward_ab.py old) >> ab.csv
      python3 scripts/probe_forward_ab.py new >> ab.csv
    done

Prints ``tree,norm,M,N,dtype,weight_dtype,us`` rows (no header): ``rmsnorm_lab.timing.kernel_time_us`` (L2 flushed,
20 calls) of the launchers at ``rmsnorm_lab.layernorm_bench.GRID``, ``rmsnorm_lab.fused_add_bench.GRID`` and
``rmsnorm_lab.sidebyside.GRID``, plus 8192 x 3072 and 4096 x 12288 bf16 with a float32 weight. It checks no output:
the side-by-side scripts do, and the test suite of the same checkout; scripts/compare_commits.py is the checked A/B of
the RMSNorm's forward and backward at the main grid.
"""

import os
import sys

sys.path.insert(0, os.getcwd())
import torch  # noqa: E402

from rmsnorm.forward import launch_add_forward, rmsnorm_fast_forward  # noqa: E402
from rmsnorm.layernorm_launchers import layernorm_fast_forward  # noqa: E402
from rmsnorm.testing import make_inputs  # noqa: E402
from rmsnorm_lab.fused_add_bench import GRID as ADD_GRID  # noqa: E402
from rmsnorm_lab.inputs import fused_add_inputs, layernorm_inputs  # noqa: E402
from rmsnorm_lab.layernorm_bench import GRID as LN_GRID  # noqa: E402
from rmsnorm_lab.sidebyside import GRID  # noqa: E402
from rmsnorm_lab.timing import kernel_time_us  # noqa: E402

label = sys.argv[1]
name = lambda d: str(d).removeprefix("torch.")  # noqa: E731
for M, N, dt, wd in LN_GRID:
    x, w, b, _ = layernorm_inputs(M, N, dt, wd, "cuda")
    us = kernel_time_us(lambda: layernorm_fast_forward(x, w, b, 1e-5), calls=20)
    print(f"{label},layernorm,{M},{N},{name(dt)},{name(wd)},{us:.2f}", flush=True)
for M, N, dt in ADD_GRID:
    x, r, w, _, _ = fused_add_inputs(M, N, dt, "cuda")
    us = kernel_time_us(lambda: launch_add_forward(x, r, w, 1e-6), calls=20)
    print(f"{label},rmsnorm_add,{M},{N},{name(dt)},{name(dt)},{us:.2f}", flush=True)
for M, N, dt, wd in tuple((M, N, d, d) for M, N, d in GRID) + ((8192, 3072, torch.bfloat16, torch.float32),
                                                               (4096, 12288, torch.bfloat16, torch.float32)):
    x, w, _ = make_inputs(M, N, dt, "cuda", seed=0, weight_dtype=wd, draw_on_device=True)
    us = kernel_time_us(lambda: rmsnorm_fast_forward(x, w, 1e-6), calls=20)
    print(f"{label},rmsnorm,{M},{N},{name(dt)},{name(wd)},{us:.2f}", flush=True)

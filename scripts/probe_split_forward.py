"""Issue 37 probe: the split forward (rmsnorm_split_forward_kernel), by ticket or program id, polling."""
import torch

import rmsnorm.forward as F
from rmsnorm import FastConfig, rmsnorm_fast_forward
from rmsnorm.testing import make_inputs
from rmsnorm_lab.timing import kernel_time_us

shapes = [(1024, 65536), (512, 131072), (256, 262144), (2048, 32768), (4096, 16384)]
for M, N in shapes:
    x, w, _ = make_inputs(M, N, torch.bfloat16, "cuda", draw_on_device=True)
    ref = rmsnorm_fast_forward(x, w, 1e-6)[0].float()
    out = [f"table {kernel_time_us(lambda: rmsnorm_fast_forward(x, w, 1e-6)):.1f}"]
    for bn, warps in ((4096, 4), (8192, 8), (16384, 16), (32768, 16)):
        if bn >= N:
            continue
        c = FastConfig(BLOCK_M=1, BLOCK_N=bn, num_warps=warps, programs_per_sm=None, split=True)
        for opts in ((True, False), (False, False), (False, True), (True, True)):
            F.SPLIT_OPTS = opts
            F._launch_split_kernel.cache.clear()
            y = rmsnorm_fast_forward(x, w, 1e-6, config=c)[0]
            ok = torch.allclose(y.float(), ref, atol=2e-2, rtol=2e-2)
            us = kernel_time_us(lambda: rmsnorm_fast_forward(x, w, 1e-6, config=c))
            name = f"s{bn}w{warps}{'T' if opts[0] else 'P'}{'L' if opts[1] else 'A'}"
            out.append(f"{name} {us:.1f}{'' if ok else ' BAD'}")
    print(f"{M}x{N}: " + " | ".join(out), flush=True)

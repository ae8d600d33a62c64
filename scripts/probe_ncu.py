"""Probe: one provider's pass at one shape under Nsight Compute, or the providers' kernel times beside the config.

    python3 scripts/probe_ncu.py time 65536x257:bfloat16 16384x4097:bfloat16      # µs per provider and pass
    ncu --profile-from-start off --cache-control all --clock-control none --csv --metrics METRICS \
        python3 scripts/probe_ncu.py ncu fast forward 1024x65536:bfloat16         # one warm call, profiled

``ncu`` mode checks the provider against float64 (rmsnorm_lab.providers.prepare), runs the pass three times,
then once between cudaProfilerStart and cudaProfilerStop, so only that call's kernels are profiled. The
metrics and the table they gave: results/h200/ncu_probe.csv and results/h200/README.md. Needs CUDA.
"""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the checkout, for `import rmsnorm`

import torch  # noqa: E402

from rmsnorm.config import backward_config, forward_config  # noqa: E402
from rmsnorm.testing import make_inputs  # noqa: E402
from rmsnorm_lab.providers import pass_calls, prepare, provider  # noqa: E402
from rmsnorm_lab.timing import kernel_time_us  # noqa: E402


def shape(s):
    mn, dt = s.split(":")
    M, N = map(int, mn.split("x"))
    return M, N, getattr(torch, dt)


if sys.argv[1] == "time":
    provs = ("fast", "compile", "quack", "liger")
    for s in sys.argv[2:]:
        M, N, dtype = shape(s)
        x, w, dy = make_inputs(M, N, dtype, "cuda", draw_on_device=True)
        print(f"== {s} fwd cfg {forward_config(N, dtype)} bwd cfg {backward_config(N, dtype)}", flush=True)
        for name in provs:
            calls, why = prepare(provider(name), pass_calls, x, w, dy)
            if calls is None:
                print(f"  {name}: {why[:120]}")
                continue
            t = {p: kernel_time_us(c) for p, c in calls.items()}
            print(f"  {name:8s} fwd {t['forward']:9.2f} us  bwd {t['backward']:9.2f} us", flush=True)
else:
    _, _, name, pass_, s = sys.argv
    M, N, dtype = shape(s)
    x, w, dy = make_inputs(M, N, dtype, "cuda", draw_on_device=True)
    calls, why = prepare(provider(name), pass_calls, x, w, dy)
    assert calls is not None, why
    for _ in range(3):
        calls[pass_]()
    torch.cuda.synchronize()
    torch.cuda.cudart().cudaProfilerStart()
    calls[pass_]()
    torch.cuda.synchronize()
    torch.cuda.cudart().cudaProfilerStop()

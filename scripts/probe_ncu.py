"""Probe: one provider's pass at one shape under Nsight Compute, or the providers' kernel times beside the config.

    python3 scripts/probe_ncu.py time 65536x257:bfloat16 16384x4097:bfloat16      # µs per provider and pass
    ncu --profile-from-start off --cache-control all --clock-control none --csv --metrics METRICS \
        python3 scripts/probe_ncu.py ncu fast forward 1024x65536:bfloat16         # one warm call, profiled
    ncu ... python3 scripts/probe_ncu.py ncu fast forward 512x131072:bfloat16 split=8,block=16384,warps=32,pps=1
        # the fast forward at a configuration of its own (here the split forward, rmsnorm/split_forward.py)

``ncu`` mode checks the provider against float64 (rmsnorm_lab.providers.prepare), runs the pass three times,
then once between cudaProfilerStart and cudaProfilerStop, so only that call's kernels are profiled. The
metrics and the table they gave: results/h200/ncu_probe.csv and results/h200/README.md. Needs CUDA.
"""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the checkout, for `import rmsnorm`

import torch  # noqa: E402

from rmsnorm import FastConfig, rmsnorm_fast_forward  # noqa: E402
from rmsnorm.config import backward_config, forward_config  # noqa: E402
from rmsnorm.testing import assert_close, make_inputs, oracle  # noqa: E402
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
    _, _, name, pass_, s, *knobs = sys.argv
    M, N, dtype = shape(s)
    x, w, dy = make_inputs(M, N, dtype, "cuda", draw_on_device=True)
    if knobs:  # the fast forward at the configuration given, checked against float64 first
        assert (name, pass_) == ("fast", "forward"), "a configuration of its own is the fast forward's only"
        k = dict(item.split("=") for item in knobs[0].split(","))
        config = FastConfig(BLOCK_M=1, BLOCK_N=int(k["block"]), num_warps=int(k["warps"]),
                            programs_per_sm=int(k["pps"]), num_stages=1, split=int(k.get("split", 1)))
        calls = {"forward": lambda: rmsnorm_fast_forward(x, w, 1e-6, config=config)}
        assert_close(calls["forward"]()[0], oracle(x, w, on=x.device), dtype=dtype, msg=str(config))
    else:
        calls, why = prepare(provider(name), pass_calls, x, w, dy)
        assert calls is not None, why
    for _ in range(3):
        calls[pass_]()
    torch.cuda.synchronize()
    torch.cuda.cudart().cudaProfilerStart()
    calls[pass_]()
    torch.cuda.synchronize()
    torch.cuda.cudart().cudaProfilerStop()

"""Probe: the LayerNorm forward at N = 4096 in one block, against the table's loop, through both launch paths.

    python3 scripts/probe_one_block_4096.py > results/h100/probe_one_block_4096.txt

The LayerNorm's forward sweep timed one block of 4096 columns on 8 warps ahead of the table's loop at its three
shapes of 4096 columns, yet the library's call with that rule ran behind at 1024 rows. This probe times the same
compiled kernel, one process, every way that could differ: the native launch and Triton's launcher
(``rmsnorm.native_launch.set_native_launch``), L2-cold (``kernel_time_us``, the sweep's 10 calls and the side by
side's 30) and L2-warm (``flush=False``), repeated, with the RMSNorm's forward beside it. Every call's y is
checked against float64 first (the LayerNorm's against F.layer_norm, ``rmsnorm_lab.layernorm_bench.check``; the
RMSNorm's against ``rmsnorm.testing.oracle``). Needs CUDA.
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the checkout, for `import rmsnorm`

import torch  # noqa: E402

from rmsnorm import (  # noqa: E402
    FastConfig,
    forward_config,
    layernorm_fast_forward,
    native_launch,
    rmsnorm_fast_forward,
)
from rmsnorm.config import layernorm_forward_config  # noqa: E402
from rmsnorm.testing import assert_close, oracle  # noqa: E402
from rmsnorm_lab.layernorm_bench import EPS, check, inputs  # noqa: E402
from rmsnorm_lab.timing import kernel_time_us  # noqa: E402

ONE_BLOCK = FastConfig(BLOCK_M=1, BLOCK_N=4096, num_warps=8, programs_per_sm=None, num_stages=1)
SHAPES = ((1024, 4096, torch.bfloat16), (4096, 4096, torch.float16), (32768, 4096, torch.bfloat16))
#: (label, kernel_time_us options): the sweep's measure, the side by side's, and L2-warm for comparison.
MEASURES = (("cold, 10 calls", dict(calls=10, warmup=2)), ("cold, 30 calls", dict(calls=30, warmup=3)),
            ("warm, 30 calls", dict(calls=30, warmup=3, flush=False)))
REPEATS = 3


def calls(M: int, N: int, dtype: torch.dtype, device="cuda") -> dict:
    """{label: zero-argument call}, each checked against float64 before it is returned.

    Raises:
        AssertionError: a call's y outside its declared tolerance.
    """
    x, weight, bias, dy = inputs(M, N, dtype, dtype, device)
    rms_eps = 1e-6
    out = {}
    for name, config in (("one block", ONE_BLOCK), ("table", layernorm_forward_config(N, dtype))):
        call = lambda config=config: layernorm_fast_forward(x, weight, bias, EPS, config=config)  # noqa: E731
        check({"forward": lambda call=call: call()[0]}, x, weight, bias, dy, label=f"LayerNorm {name}")
        out[f"LayerNorm {name}"] = call
    for name, config in (("one block", ONE_BLOCK), ("table", forward_config(N, dtype))):
        call = lambda config=config: rmsnorm_fast_forward(x, weight, rms_eps, config=config)  # noqa: E731
        assert_close(call()[0], oracle(x, weight, eps=rms_eps, on=x.device), dtype=dtype)
        out[f"RMSNorm {name}"] = call
    return out


def main() -> int:
    if not torch.cuda.is_available():
        print("probe_one_block_4096: needs a CUDA GPU; none here")
        return 0
    print(f"{torch.cuda.get_device_name(0)} | torch {torch.__version__} | one block: {ONE_BLOCK}")
    print(f"µs per call, {REPEATS} repeats each; every y checked against float64 first")
    for M, N, dtype in SHAPES:
        print(f"\n{M} x {N} {str(dtype).removeprefix('torch.')}")
        for label, call in calls(M, N, dtype).items():
            for path in (True, False):
                native_launch.set_native_launch(path)
                times = {name: [kernel_time_us(call, **options) for _ in range(REPEATS)]
                         for name, options in MEASURES}
                print(f"  {label:19s} {'native' if path else 'triton-launcher':15s}", "  ".join(
                    f"{name}: " + "/".join(f"{us:6.2f}" for us in values) for name, values in times.items()))
        native_launch.set_native_launch(True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

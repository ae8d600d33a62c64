"""Probe: the Triton kernels torch.compile writes for a norm's forward and backward, and the configs it keeps.

    python3 scripts/probe_inductor_code.py --out /tmp/inductor --at 'bfloat16:16384x4097,65536x257'
    python3 scripts/probe_inductor_code.py --out /tmp/inductor --norm layernorm --weight-dtype float32 \
        --at 'bfloat16:4096x12288'

Where compile leads the fast path (results/h200/fast_weak.csv: the backward at 16384 × 4097 bf16, both passes at
65536 × 257), read its kernels: Inductor writes Triton too. For each shape, ``F.rms_norm`` (a weight, eps 1e-6)
is compiled as the side by side compiles it (``rmsnorm_lab.providers``: ``dynamic=False``, the default mode), or
with ``--norm layernorm`` ``F.layer_norm`` (a weight and a bias, eps 1e-5, as ``rmsnorm_lab.layernorm_bench``
compiles it), the parameters in ``--weight-dtype`` (default x's), run forward and backward once, which makes
Inductor's autotuner pick among its reduction configurations; then every module it generated is written out
(``inductor_<norm>_<dtype>_<M>x<N>[_<weight dtype>_weight]_<i>.py``) and, per Triton kernel, the configuration
its autotuner kept with the registers and spills of the compiled kernel (``inductor_kernels.csv``). Never asserts
a speed; without a GPU it says so and exits 0.

Source: ``torch._inductor.utils.run_and_get_code`` (the generated sources); ``torch._inductor.codecache.PyCodeCache``
and ``runtime.triton_heuristics.CachingAutotuner`` (each kernel's launchers, ``config``, ``n_regs``, ``n_spills``).
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the checkout, for `import rmsnorm_lab`

import torch  # noqa: E402

DTYPES = ("float32", "float16", "bfloat16")


def parse_at(text: str) -> list[tuple[torch.dtype, int, int]]:
    """``--at``'s shapes: "bfloat16:16384x4097,65536x257;float32:65536x257" → [(dtype, M, N), ...].

    Raises:
        ValueError: a part that is not ``dtype:MxN,...`` with one of :data:`DTYPES` and whole numbers ≥ 1.
    """
    shapes = []
    for part in filter(None, text.split(";")):
        dtype, _, sizes = part.partition(":")
        if dtype not in DTYPES or not sizes:
            raise ValueError(f"--at: {part!r} is not 'dtype:MxN,...' with dtype one of {', '.join(DTYPES)}")
        for size in sizes.split(","):
            match = re.fullmatch(r"([1-9]\d*)x([1-9]\d*)", size.strip())
            if match is None:
                raise ValueError(f"--at: {size!r} is not MxN with whole numbers of at least 1")
            shapes.append((getattr(torch, dtype), int(match[1]), int(match[2])))
    if not shapes:
        raise ValueError("--at names no shape")
    return shapes


def step_of(norm: str, M: int, N: int, dtype: torch.dtype, weight_dtype: torch.dtype | None, device="cuda"):
    """(fn, leaves, dy): the norm's eager call on ``leaves`` (x and its parameters, requiring grad), as the side by
    side draws them (``rmsnorm.testing.make_inputs`` at seed 1; ``rmsnorm_lab.layernorm_bench.inputs``)."""
    import torch.nn.functional as F

    if norm == "layernorm":
        from rmsnorm_lab.layernorm_bench import EPS, inputs

        x, weight, bias, dy = inputs(M, N, dtype, weight_dtype or dtype, device)
        leaves = (x, weight, bias)
        fn = lambda x, w, b: F.layer_norm(x, (x.shape[-1],), w, b, EPS)  # noqa: E731
    else:
        from rmsnorm.testing import make_inputs

        x, weight, dy = make_inputs(M, N, dtype, device, seed=1, draw_on_device=torch.device(device).type == "cuda")
        leaves = (x, weight.to(weight_dtype or dtype))
        fn = lambda x, w: F.rms_norm(x, (x.shape[-1],), w, 1e-6)  # noqa: E731
    return fn, tuple(t.detach().requires_grad_(True) for t in leaves), dy


def kernel_rows(modules, shape: str) -> list[dict]:
    """One row per Triton kernel of the generated ``modules``: its name, the kept config, registers and spills."""
    from torch._inductor.runtime.triton_heuristics import CachingAutotuner

    rows = []
    for module in modules:
        for name, obj in vars(module).items():
            if isinstance(obj, CachingAutotuner):
                for launcher in obj.launchers:
                    config = launcher.config
                    rows.append(dict(shape=shape, kernel=name, kwargs=dict(config.kwargs), num_warps=config.num_warps,
                                     num_stages=config.num_stages, n_regs=launcher.n_regs,
                                     n_spills=launcher.n_spills,
                                     # Inductor drops its candidate list once it has benchmarked them.
                                     candidates=None if obj.configs is None else len(obj.configs)))
    return rows


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--at", default="bfloat16:16384x4097,65536x257;float32:65536x257",
                        help="shapes: 'dtype:MxN,MxN;dtype:MxN'")
    parser.add_argument("--norm", choices=("rmsnorm", "layernorm"), default="rmsnorm")
    parser.add_argument("--weight-dtype", choices=DTYPES, default=None,
                        help="the parameters' dtype (default: x's at each shape)")
    args = parser.parse_args(argv)
    try:
        shapes = parse_at(args.at)
    except ValueError as error:
        parser.error(str(error))
    if not torch.cuda.is_available():
        print("probe_inductor_code: no CUDA GPU here, nothing compiled (Inductor's Triton kernels need one)")
        return 0
    import pandas as pd
    from torch._inductor.codecache import PyCodeCache
    from torch._inductor.utils import run_and_get_code

    args.out.mkdir(parents=True, exist_ok=True)
    weight_dtype = None if args.weight_dtype is None else getattr(torch, args.weight_dtype)
    rows = []
    for dtype, M, N in shapes:
        fn, leaves, dy = step_of(args.norm, M, N, dtype, weight_dtype)
        compiled = torch.compile(fn, dynamic=False)
        before = len(getattr(PyCodeCache, "modules", ()))

        def step(compiled=compiled, leaves=leaves, dy=dy):
            y = compiled(*leaves)
            y.backward(dy)
            return y

        _, sources = run_and_get_code(step)
        torch.cuda.synchronize()
        label = (f"{args.norm}_{str(dtype).removeprefix('torch.')}_{M}x{N}"
                 + ("" if weight_dtype in (None, dtype) else f"_{args.weight_dtype}_weight"))
        for i, source in enumerate(sources):
            (args.out / f"inductor_{label}_{i}.py").write_text(source)
        rows += kernel_rows(list(getattr(PyCodeCache, "modules", ()))[before:], label)
        print(f"{label}: {len(sources)} modules, kernels " + ", ".join(
            f"{r['kernel']} {r['kwargs']} warps={r['num_warps']} regs={r['n_regs']} spills={r['n_spills']}"
            for r in rows if r["shape"] == label))
    pd.DataFrame(rows).to_csv(args.out / "inductor_kernels.csv", index=False)
    print(f"wrote {args.out}/inductor_kernels.csv and {len(list(args.out.glob('inductor_*.py')))} modules")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Print, as JSON, the 128-bit global accesses in the PTX of the fast kernels at one N, ROW_ALIGN 1 and 8.

Run as a script (tests/library/test_vector_accesses.py and lesson 12 do): it compiles for an sm_90 target with Triton's
own compiler, so it needs no GPU. Triton must be imported in compiled mode, which rmsnorm allows only
where CUDA is seen: the script says it is (it never launches anything). With ``--divisible``, N and the row
strides are marked divisible by 16, as Triton's launch marks them when they are (N = 4096), and the counts
include each kernel's instructions.

    python tools/ptx_vector_accesses.py 1000 float16
    python tools/ptx_vector_accesses.py 4096 bfloat16 --divisible
"""

import json
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the checkout, for `import rmsnorm`

import torch  # noqa: E402

torch.cuda.is_available = lambda: True  # compile only: the kernels are never launched here

import triton  # noqa: E402
from triton.backends.compiler import GPUTarget  # noqa: E402
from triton.compiler import ASTSource  # noqa: E402

from rmsnorm import backward_config, forward_config, rmsnorm_fast_backward_kernel, rmsnorm_fast_forward_kernel  # noqa: E402
from rmsnorm.backward import TRITON_DTYPE  # noqa: E402
from rmsnorm.config import row_arithmetic_dtype  # noqa: E402

PATTERNS = {
    "ld.v4": r"ld\.global(?:\.\w+)*\.v4\.b32",  # 16 bytes into registers
    "cp.async.16": r"cp\.async\.\w+\.shared\.global \[[^\]]+\], \[[^\]]+\], 0x10",  # 16 bytes into shared
    "st.v4": r"st\.global(?:\.\w+)*\.v4\.b32",
}
ALIGNED = [["tt.divisibility", 16]]


def _ptx(kernel, signature: dict, constexprs: dict, pointers, num_warps: int, divisible=()) -> str:
    # every pointer 16-byte aligned, as a fresh allocation is; the ints in ``divisible`` as Triton marks multiples of 16
    attrs = {(i,): ALIGNED for i in (*pointers, *divisible)}
    src = ASTSource(fn=kernel, signature={**signature, **{k: "constexpr" for k in constexprs}},
                    constexprs=constexprs, attrs=attrs)
    return triton.compile(src, target=GPUTarget("cuda", 90, 32), options={"num_warps": num_warps}).asm["ptx"]


def _instructions(ptx: str) -> int:
    """Instructions in the kernel's body (not labels, directives or debug sections)."""
    body = ptx[ptx.index(".entry"):]
    body = body[: body.index("\n}\n")]
    return sum(1 for line in body.splitlines()
               if line.startswith("\t") and line.strip() and not line.strip().startswith(("//", ".", "$", "{", "}")))


def counts(N: int, dtype: torch.dtype, align: int, divisible: bool = False) -> dict:
    t = {torch.float16: "fp16", torch.bfloat16: "bf16", torch.float32: "fp32"}[dtype]
    fwd, bwd = forward_config(N, dtype), backward_config(N, dtype)
    forward = _ptx(
        rmsnorm_fast_forward_kernel,
        {"x_ptr": f"*{t}", "x_row_stride": "i32", "weight_ptr": f"*{t}", "y_ptr": f"*{t}", "y_row_stride": "i32",
         "rstd_ptr": "*fp32", "M": "i32", "N": "i32", "eps": "fp32"},
        {"HAS_WEIGHT": True, "OFFSET": 0.0, "ONE_BLOCK": fwd.one_block(N), "BLOCK_M": fwd.BLOCK_M,
         "BLOCK_N": fwd.BLOCK_N, "PERSISTENT": False, "NUM_STAGES": fwd.num_stages, "ROW_ALIGN": align},
        (0, 2, 3, 5), fwd.num_warps, (1, 4, 7) if divisible else ())
    one_block = bwd.one_block(N)
    backward = _ptx(
        rmsnorm_fast_backward_kernel,
        {"x_ptr": f"*{t}", "x_row_stride": "i32", "weight_ptr": f"*{t}", "rstd_ptr": "*fp32", "dy_ptr": f"*{t}",
         "dy_row_stride": "i32", "dx_ptr": f"*{t}", "dx_row_stride": "i32", "partial_ptr": "*fp32",
         "mean_ux_ptr": "*fp64" if row_arithmetic_dtype(N, dtype) == torch.float64 else "*fp32",
         "M": "i32", "N": "i32"},
        {"HAS_WEIGHT": True, "OFFSET": 0.0, "COMPUTE": TRITON_DTYPE[row_arithmetic_dtype(N, dtype)],
         "ONE_BLOCK": one_block, "BLOCK_M": bwd.BLOCK_M if one_block else 1, "BLOCK_N": bwd.BLOCK_N,
         "NUM_STAGES": bwd.num_stages, "ROW_ALIGN": align},
        (0, 2, 3, 4, 6, 8, 9), bwd.num_warps, (1, 5, 7, 11) if divisible else ())
    found = {f"{name} {which}": len(re.findall(pattern, ptx))
             for which, ptx in (("forward", forward), ("backward", backward)) for name, pattern in PATTERNS.items()}
    if divisible:
        found.update({f"instructions {which}": _instructions(ptx) for which, ptx in (("forward", forward),
                                                                                    ("backward", backward))})
    return found


if __name__ == "__main__":
    N, dtype = int(sys.argv[1]), getattr(torch, sys.argv[2])
    print(json.dumps({align: counts(N, dtype, align, "--divisible" in sys.argv[3:]) for align in (1, 8)}))

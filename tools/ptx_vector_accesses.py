"""Print, as JSON, the 128-bit global accesses in the PTX of the fast kernels at one N, ROW_ALIGN 1 and 8.

Run as a script (tests/library/test_vector_accesses.py and lesson 12 do): it compiles for an sm_90 target with Triton's
own compiler, so it needs no GPU. Triton must be imported in compiled mode, which rmsnorm allows only
where CUDA is seen: the script says it is (it never launches anything). With ``--divisible``, N and the row
strides are marked divisible by 16, as Triton's launch marks them when they are (N = 4096), and the counts
include each kernel's instructions.

    python tools/ptx_vector_accesses.py 1000 float16
    python tools/ptx_vector_accesses.py 4096 bfloat16 --divisible
    python tools/ptx_vector_accesses.py 4096 bfloat16 --plain-digest     # sha256 of the plain kernels' code
    python tools/ptx_vector_accesses.py 4096 bfloat16 --fused float32    # instructions, plain and fused add
    python tools/ptx_vector_accesses.py 4096 bfloat16 --layernorm        # instructions, RMSNorm and LayerNorm
    python tools/ptx_vector_accesses.py 16384 bfloat16 --spills          # registers, spilled bytes (ptxas) and
        # vector stores to shared memory
    python tools/ptx_vector_accesses.py 16384 bfloat16 --spills --layernorm
    python tools/ptx_vector_accesses.py 12288 bfloat16 --spills --layernorm --weight float32  # fp32 weight and bias
    python tools/ptx_vector_accesses.py 16384 bfloat16 --spills --layernorm --rmsnorm-table  # its backward at the
        # RMSNorm's configuration (rmsnorm.backward_config), where the LayerNorm's own loops
    python tools/ptx_vector_accesses.py 262144 bfloat16 --split    # the split forward's candidates: registers,
        # spills and 128-bit accesses of each (rmsnorm.split_forward; rmsnorm_lab.tuning.split_candidates)
    python tools/ptx_vector_accesses.py 17 bfloat16 --flat         # the flat forward's, likewise (flat_candidates)
"""

import hashlib
import json
import re
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the checkout, for `import rmsnorm`

import torch  # noqa: E402

torch.cuda.is_available = lambda: True  # compile only: the kernels are never launched here

import triton  # noqa: E402
from triton.backends.compiler import GPUTarget  # noqa: E402
from triton.compiler import ASTSource  # noqa: E402

from rmsnorm import (  # noqa: E402
    backward_config,
    forward_config,
    rmsnorm_fast_backward_kernel,
    rmsnorm_fast_forward_kernel,
    row_align_hint,
)
from rmsnorm.backward import TRITON_DTYPE  # noqa: E402
from rmsnorm.config import (  # noqa: E402
    layernorm_backward_config,
    layernorm_forward_config,
    row_arithmetic_dtype,
)

PATTERNS = {
    "ld.v4": r"ld\.global(?:\.\w+)*\.v4\.b32",  # 16 bytes into registers
    "cp.async.16": r"cp\.async\.\w+\.shared\.global \[[^\]]+\], \[[^\]]+\], 0x10",  # 16 bytes into shared
    "st.v4": r"st\.global(?:\.\w+)*\.v4\.b32",
}
ALIGNED = [["tt.divisibility", 16]]
#: The LayerNorm's arguments, switched off as the RMSNorm's launchers leave them.
PLAIN_FORWARD = {"mean_ptr": None, "bias_ptr": None, "IS_LAYERNORM": False, "HAS_BIAS": False}
PLAIN_BACKWARD = {"mean_ptr": None, "bias_partial_ptr": None, "mean_u_ptr": None, "IS_LAYERNORM": False,
                  "HAS_BIAS": False}


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


def kernels_ptx(N: int, dtype: torch.dtype, align: int, divisible: bool = False,
                residual_dtype: torch.dtype | None = None, layernorm: bool = False,
                backward_table=None, forward_table=None, weight_dtype: torch.dtype | None = None) -> tuple[str, str]:
    """The PTX of the forward and backward (weight, offset 0) at N, for sm_90: plain, or with ``residual_dtype``
    the fused add's (HAS_RESIDUAL and HAS_DRES on; the backward's x, dx and dres in residual's dtype), or with
    ``layernorm`` the LayerNorm's (IS_LAYERNORM and HAS_BIAS on, a bias in x's dtype). ``backward_table``: the
    backward's configuration function, by default the launchers' (the LayerNorm's own for ``layernorm``);
    ``forward_table`` the forward's, likewise; the forward is persistent where its configuration caps its programs
    (rows enough to fill them). ``weight_dtype``: the weight's (and the LayerNorm's bias's) dtype, default x's."""
    names = {torch.float16: "fp16", torch.bfloat16: "bf16", torch.float32: "fp32"}
    t = names[dtype]
    fused = residual_dtype is not None
    tr = names[residual_dtype] if fused else t  # residual, residual_out, h and its gradient
    tw = names[weight_dtype or dtype]  # the weight and the bias
    table = backward_table or (layernorm_backward_config if layernorm else backward_config)
    forward_table = forward_table or (layernorm_forward_config if layernorm else forward_config)
    fwd, bwd = forward_table(N, dtype), table(N, dtype)
    compute = row_arithmetic_dtype(N, residual_dtype or dtype)
    scratch = "*fp64" if compute == torch.float64 else "*fp32"
    ln_forward, ln_backward = ({"mean_ptr": "*fp32", "bias_ptr": f"*{tw}"}, {"mean_ptr": "*fp32",
                               "bias_partial_ptr": "*fp32", "mean_u_ptr": scratch}) if layernorm else ({}, {})
    switches = {"IS_LAYERNORM": True, "HAS_BIAS": True} if layernorm else {}
    residual = ({"residual_ptr": f"*{tr}", "residual_row_stride": "i32", "residual_out_ptr": f"*{tr}",
                 "residual_out_row_stride": "i32"}, {"HAS_RESIDUAL": True}) if fused else (
        {}, {**dict.fromkeys(("residual_ptr", "residual_row_stride", "residual_out_ptr", "residual_out_row_stride")),
             "HAS_RESIDUAL": False})
    forward = _ptx(
        rmsnorm_fast_forward_kernel,
        {"x_ptr": f"*{t}", "x_row_stride": "i32", "weight_ptr": f"*{tw}", "y_ptr": f"*{t}", "y_row_stride": "i32",
         "rstd_ptr": "*fp32", "M": "i32", "N": "i32", "eps": "fp32", **residual[0], **ln_forward},
        {"HAS_WEIGHT": True, "OFFSET": 0.0, "ONE_BLOCK": fwd.one_block(N), "BLOCK_M": fwd.BLOCK_M,
         "BLOCK_N": fwd.BLOCK_N, "PERSISTENT": fwd.programs_per_sm is not None, "NUM_STAGES": fwd.num_stages,
         "ROW_ALIGN": align,
         **residual[1], "STATIC_N": fwd.static(N), **(_without(PLAIN_FORWARD, ln_forward) | switches)},
        (0, 2, 3, 5) + ((17, 19) if fused else ()) + ((23, 24) if layernorm else ()), fwd.num_warps,
        (1, 4, 7) if divisible else ())
    one_block = bwd.one_block(N)
    dres = ({"dres_ptr": f"*{tr}", "dres_row_stride": "i32"}, {"HAS_DRES": True}) if fused else (
        {}, {"dres_ptr": None, "dres_row_stride": None, "HAS_DRES": False})
    backward = _ptx(
        rmsnorm_fast_backward_kernel,
        {"x_ptr": f"*{tr}", "x_row_stride": "i32", "weight_ptr": f"*{tw}", "rstd_ptr": "*fp32", "dy_ptr": f"*{t}",
         "dy_row_stride": "i32", "dx_ptr": f"*{tr}", "dx_row_stride": "i32", "partial_ptr": "*fp32",
         "mean_ux_ptr": scratch, "M": "i32", "N": "i32", **dres[0], **ln_backward},
        {"HAS_WEIGHT": True, "OFFSET": 0.0, "COMPUTE": TRITON_DTYPE[compute],
         "ONE_BLOCK": one_block, "BLOCK_M": bwd.BLOCK_M if one_block else 1, "BLOCK_N": bwd.BLOCK_N,
         "NUM_STAGES": bwd.num_stages, "ROW_ALIGN": align, **dres[1],
         "STATIC_N": bwd.static(N), **(_without(PLAIN_BACKWARD, ln_backward) | switches)},
        (0, 2, 3, 4, 6, 8, 9) + ((20,) if fused else ()) + ((24, 25, 26) if layernorm else ()), bwd.num_warps,
        (1, 5, 7, 11) if divisible else ())
    return forward, backward


def _without(constexprs: dict, arguments: dict) -> dict:
    """The switched-off arguments, less those given as run-time ``arguments``."""
    return {k: v for k, v in constexprs.items() if k not in arguments}


def code_only(ptx: str) -> str:
    """The PTX without its debug information (``.loc``/``.file`` lines, their labels, ``.debug_*`` sections, comments).

    Those name source lines, which move whenever the file around a kernel changes; what remains is
    the code the GPU runs.
    """
    if "\t.section\t.debug" in ptx:
        ptx = ptx[: ptx.index("\t.section\t.debug")]
    lines = (line.split("//")[0].rstrip() for line in ptx.splitlines())  # comments name source lines too
    return "\n".join(line for line in lines
                     if line.strip() and not line.lstrip().startswith((".loc", ".file", "$L__tmp", "$L__func")))


def plain_digests(N: int, dtype: torch.dtype) -> dict[str, str]:
    """sha256 of :func:`code_only` PTX of the plain forward and backward at N, as the launchers compile them.

    ROW_ALIGN and the divisibility of N and the row strides are those of contiguous rows of N elements
    (:func:`~rmsnorm.row_align_hint`), so these are the kernels a plain call launches.
    """
    align = row_align_hint(torch.empty((), dtype=dtype).element_size(), N, N)
    forward, backward = kernels_ptx(N, dtype, align, divisible=N % 16 == 0)
    return {which: hashlib.sha256(code_only(ptx).encode()).hexdigest()
            for which, ptx in (("forward", forward), ("backward", backward))}


def split_ptx(N: int, dtype: torch.dtype, config) -> str:
    """The PTX of the split forward (weight, offset 0) for contiguous rows of N columns, for sm_90."""
    from rmsnorm.split_forward import MAX_POLLS, holds_weight, rmsnorm_split_forward_kernel

    t = {torch.float16: "fp16", torch.bfloat16: "bf16", torch.float32: "fp32"}[dtype]
    return _ptx(
        rmsnorm_split_forward_kernel,
        {"x_ptr": f"*{t}", "x_row_stride": "i32", "weight_ptr": f"*{t}", "y_ptr": f"*{t}", "y_row_stride": "i32",
         "rstd_ptr": "*fp32", "partial_ptr": "*fp32", "arrived_ptr": "*i32", "M": "i32", "N": "i32", "eps": "fp32"},
        {"HAS_WEIGHT": True, "OFFSET": 0.0, "SPLIT": config.split, "BLOCK_N": config.BLOCK_N,
         "ROW_ALIGN": row_align_hint(torch.empty((), dtype=dtype).element_size(), N, N), "MAX_POLLS": MAX_POLLS,
         "HOLD_WEIGHT": holds_weight(config)},
        (0, 2, 3, 5, 6, 7), config.num_warps, (1, 4, 9) if N % 16 == 0 else ())


def flat_ptx(N: int, dtype: torch.dtype, config, M: int, which: str) -> str:
    """The PTX of the flat forward or backward (``which``; weight, offset 0) for M contiguous rows of N columns,
    for sm_90 (M matters only as Triton specialises it: 1, a multiple of 16, or neither)."""
    from rmsnorm.flat import flat_rows, rmsnorm_flat_backward_kernel, rmsnorm_flat_forward_kernel

    t = {torch.float16: "fp16", torch.bfloat16: "bf16", torch.float32: "fp32"}[dtype]
    rows = flat_rows(config, N, torch.empty((), dtype=dtype).element_size())
    shape = {"N": N, "HAS_WEIGHT": True, "OFFSET": 0.0, "ROWS": rows, "ROWS_P2": triton.next_power_of_2(rows),
             "BLOCK": config.BLOCK_N}
    if which == "forward":
        return _ptx(rmsnorm_flat_forward_kernel, {"x_ptr": f"*{t}", "weight_ptr": f"*{t}", "y_ptr": f"*{t}",
                                                  "rstd_ptr": "*fp32", "M": "i32", "eps": "fp32"},
                    shape, (0, 1, 2, 3), config.num_warps, (4,) if M % 16 == 0 else ())
    return _ptx(
        rmsnorm_flat_backward_kernel,
        {"x_ptr": f"*{t}", "weight_ptr": f"*{t}", "rstd_ptr": "*fp32", "dy_ptr": f"*{t}", "dx_ptr": f"*{t}",
         "scratch_ptr": "*fp32", "partial_ptr": "*fp32", "M": "i32"},
        {**shape, "COMPUTE": TRITON_DTYPE[row_arithmetic_dtype(N, dtype)], "N_P2": triton.next_power_of_2(N),
         "NUM_STAGES": config.num_stages},
        (0, 1, 2, 3, 4, 5, 6), config.num_warps, (7,) if M % 16 == 0 else ())


def registers_and_spills(ptx: str) -> dict:
    """What ptxas (Triton's own, for sm_90a) says the kernel uses a thread: registers and bytes spilled to
    local memory (stores; the loads are as many)."""
    from triton.backends.nvidia.compiler import get_ptxas

    with tempfile.TemporaryDirectory() as folder:
        source = Path(folder) / "kernel.ptx"
        source.write_text(ptx)
        done = subprocess.run([get_ptxas(90).path, "--gpu-name", "sm_90a", "-v", str(source), "-o",
                               str(Path(folder) / "kernel.cubin")], capture_output=True, text=True, check=True)
    registers = re.search(r"Used (\d+) registers", done.stderr)
    spilled = re.search(r"(\d+) bytes spill stores", done.stderr)
    return {"registers": int(registers.group(1)), "spill_bytes": int(spilled.group(1))}


def shared_vector_stores(ptx: str) -> int:
    """Vector stores to shared memory: a tensor passed from one register layout to another (or a staged
    reduction), which the kernel pays in every block where the conversion sits in a loop."""
    return len(re.findall(r"st\.shared(?:\.\w+)*\.v\d", ptx))


def counts(N: int, dtype: torch.dtype, align: int, divisible: bool = False) -> dict:
    forward, backward = kernels_ptx(N, dtype, align, divisible)
    found = {f"{name} {which}": len(re.findall(pattern, ptx))
             for which, ptx in (("forward", forward), ("backward", backward)) for name, pattern in PATTERNS.items()}
    if divisible:
        found.update({f"instructions {which}": _instructions(ptx) for which, ptx in (("forward", forward),
                                                                                    ("backward", backward))})
    return found


if __name__ == "__main__":
    N, dtype = int(sys.argv[1]), getattr(torch, sys.argv[2])
    weight = None  # --weight DTYPE: the weight's and the bias's dtype, for --spills and --layernorm
    if "--weight" in sys.argv[3:]:
        name = (sys.argv[sys.argv.index("--weight") + 1:] or [""])[0]
        if name not in ("float32", "float16", "bfloat16"):
            sys.exit(f"--weight takes float32, float16 or bfloat16; got {name!r}")
        if not {"--spills", "--layernorm"} & set(sys.argv[3:]) or "--fused" in sys.argv[3:]:
            sys.exit("--weight goes with --spills or --layernorm")
        weight = getattr(torch, name)
    if "--fused" in sys.argv[3:]:  # the fused add's kernels, residual in the dtype given after --fused
        residual_dtype = getattr(torch, sys.argv[sys.argv.index("--fused") + 1])
        fused = kernels_ptx(N, dtype, 1, N % 16 == 0, residual_dtype)
        plain = kernels_ptx(N, dtype, 1, N % 16 == 0)
        print(json.dumps({f"instructions {which}": [_instructions(ptx) for ptx in pair]
                          for which, pair in zip(("forward", "backward"), zip(plain, fused))}))
        sys.exit()
    if "--spills" in sys.argv[3:]:  # the launchers' configurations at N: RMSNorm's, or with --layernorm LayerNorm's
        pair = kernels_ptx(N, dtype, 1, N % 16 == 0, layernorm="--layernorm" in sys.argv[3:],
                           backward_table=backward_config if "--rmsnorm-table" in sys.argv[3:] else None,
                           weight_dtype=weight)
        print(json.dumps({which: {**registers_and_spills(ptx), "shared_vector_stores": shared_vector_stores(ptx)}
                          for which, ptx in zip(("forward", "backward"), pair)}))
        sys.exit()
    if "--split" in sys.argv[3:]:  # the split forward at each of the sweep's split candidates
        from rmsnorm_lab.tuning import split_candidates

        kernels = {(c.split, c.BLOCK_N, c.num_warps): c for c in split_candidates(N, dtype)}  # programs_per_sm
        for config in kernels.values():  # changes the grid, not the kernel
            ptx = split_ptx(N, dtype, config)
            print(json.dumps({"split": config.split, "BLOCK_N": config.BLOCK_N, "num_warps": config.num_warps,
                              **registers_and_spills(ptx),
                              **{name: len(re.findall(pattern, ptx)) for name, pattern in PATTERNS.items()}}))
        sys.exit()
    if "--flat" in sys.argv[3:]:  # the flat forward at each of the sweep's flat candidates
        from rmsnorm_lab.cliffs import rows_for
        from rmsnorm_lab.tuning import flat_candidates

        M = rows_for(N, dtype)  # the sweep's rows: at N = 17 bf16, 3947580, not a multiple of 16
        for which in ("forward", "backward"):
            kernels = {(c.BLOCK_N, c.num_warps, c.num_stages): c for c in flat_candidates(N, dtype, which)}
            for config in kernels.values():  # the grid aside
                ptx = flat_ptx(N, dtype, config, M, which)
                print(json.dumps({"pass": which, "BLOCK_N": config.BLOCK_N, "num_warps": config.num_warps,
                                  "num_stages": config.num_stages,
                                  **registers_and_spills(ptx),
                                  **{name: len(re.findall(pattern, ptx)) for name, pattern in PATTERNS.items()}}))
        sys.exit()
    if "--layernorm" in sys.argv[3:]:  # the LayerNorm's kernels (weight and bias in x's dtype, or --weight's), the
        # forward at the RMSNorm's configuration: what the switches add
        layernorm = kernels_ptx(N, dtype, 1, N % 16 == 0, layernorm=True, forward_table=forward_config,
                                weight_dtype=weight)
        plain = kernels_ptx(N, dtype, 1, N % 16 == 0)
        print(json.dumps({f"instructions {which}": [_instructions(ptx) for ptx in pair]
                          for which, pair in zip(("forward", "backward"), zip(plain, layernorm))}))
        sys.exit()
    if "--plain-digest" in sys.argv[3:]:
        print(json.dumps(plain_digests(N, dtype)))
        sys.exit()
    print(json.dumps({align: counts(N, dtype, align, "--divisible" in sys.argv[3:]) for align in (1, 8)}))

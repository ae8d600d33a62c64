"""Launch configurations of the fast kernels: tile shape, warps, programs, pipelining.

Memory-bound kernels are decided by how much data each program has in flight
and how many programs share the chip, not by arithmetic. The knobs:

- ``BLOCK_N``: columns a program loads at once (``next_power_of_2(N)`` while
  the row fits one block; beyond :data:`ONE_BLOCK_MAX_N` a loop over blocks).
- ``BLOCK_M``: rows a program handles per step (several when N is small, so
  each step still moves a few KiB).
- ``num_warps``: warps per program.
- ``programs_per_sm``: a persistent grid of P = SMs × this programs (capped
  by the number of row blocks); for the backward P is also the height of
  the (P, N) float32 dgamma partials. None: one program per row block.
- ``num_stages``: software pipelining of the backward's row loop
  (``tl.range(..., num_stages=...)``): loads of the next step are issued
  before this step's arithmetic.
- ``reverse_second_pass``: the looped kernels' second read of the row starts at the
  row's last block instead of its first. At N = 262144 a row of bf16 is
  512 KiB and 132 rows in flight are more than the H200's 60 MiB L2, so in
  order the second pass asks first for the blocks evicted first.

:func:`forward_config` and :func:`backward_config` return the table's choice
for (N, dtype), cached per key; every launcher also takes an explicit
:class:`FastConfig`, so lesson 12 and ``scripts/benchmark_fast.py --tune`` can
sweep them. The table was chosen on an H200 from L2-cold sweeps, kept in
``results/h200/fast_tuning.csv``; ``results/h200/README.md`` says what each
sweep tried and why the table stayed. Beside each threshold below, the
measurement it rests on.

Source: notebooks/12_tuning_and_side_by_side.ipynb.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import torch
import triton
import triton.language as tl

#: float32 rows of at most this many columns run the backward's row arithmetic in float64; wider
#: rows, and 16-bit rows, in float32. Lesson 12 §4 (sweep 8) computes the backward's formula both
#: ways against the float64 oracle: float64 makes a clear difference at N = 1 only, and the two are
#: within a tenth of the tolerance of each other from N = 2 on. 64 is conservative: it also keeps
#: the short rows' sweep-7 configurations, timed in float64 arithmetic.
FLOAT64_MAX_N = 64


def row_arithmetic_dtype(N: int, dtype: torch.dtype) -> torch.dtype:
    """The dtype the fused backward computes a row in: float64 for float32 rows of ≤ FLOAT64_MAX_N columns.

    Args:
        N: columns of the row.
        dtype: dtype of x (float32, float16 or bfloat16).

    Returns:
        ``torch.float64`` or ``torch.float32``; also the dtype of the (M,) mean(u · x̂) scratch of
        looped rows.
    """
    return torch.float64 if dtype == torch.float32 and N <= FLOAT64_MAX_N else torch.float32


#: Widest row the forward holds in one block (in registers); wider rows loop over blocks.
#: Sweep 6 (M = 16384 bf16): one block of 8192 is the fastest of six configs at N = 4608, 5120 and
#: 7168; a loop is 2 % faster at 6144 and 8192, and not the same loop at both.
ONE_BLOCK_MAX_N = 8192
#: Widest row the backward holds in one block. Sweeps 1–2 (4096 × 16384 bf16): one block of 16384
#: with 16 warps, 153 µs; the next best, 32 warps, 162 µs. Float32 rows were held to 8192 while
#: their row arithmetic ran in float64 (twice the registers); sweep 8 (float32 arithmetic past
#: N = 64, x of 128 MiB): one block of 16384 with 32 warps against the loop, 177.5 → 134.8 µs at
#: N = 16384 and 218.0 → 201.3 at 12289.
BACKWARD_ONE_BLOCK_MAX_N = {torch.float32: 16384, torch.float16: 16384, torch.bfloat16: 16384}
#: Block width of the forward's column loop for rows wider than ONE_BLOCK_MAX_N.
#: Sweeps 1–3 and 5 (4096 × 16384 and 1024 × 65536 bf16): 4096-wide blocks with 16 warps are the best
#: three samples at both, 67.5 and 98.8 µs.
LOOP_BLOCK_N = 4096
#: Block width of the backward's column loop. Sweep 2 (1024 × 65536 bf16): 8192-wide blocks,
#: 8 warps, one program per SM, 209 µs; 4096-wide with 16 warps and 2 per SM, 219 µs.
BACKWARD_LOOP_BLOCK_N = 8192
#: Programs of the persistent backward grid under the CPU interpreter (one after another there).
INTERPRETER_PROGRAMS = 4


@dataclass(frozen=True)
class FastConfig:
    """One launch configuration (see the module docstring for each knob)."""

    BLOCK_M: int
    BLOCK_N: int
    num_warps: int
    programs_per_sm: int | None = 1
    num_stages: int = 1
    #: Looped rows (forward and backward): pass 2 walks the column blocks from the last one, which
    #: pass 1 read most recently and which are likeliest still in L2. False everywhere in the table:
    #: not yet measured.
    reverse_second_pass: bool = False

    def one_block(self, N: int) -> bool:
        """True when a row of N columns fits one block (no column loop)."""
        return N <= self.BLOCK_N


@functools.lru_cache(maxsize=None)
def sm_count(device_index: int) -> int:
    """Streaming multiprocessors of CUDA device ``device_index`` (132 on an H200)."""
    return torch.cuda.get_device_properties(device_index).multi_processor_count


def num_programs(config: FastConfig, device: torch.device, row_blocks: int) -> int:
    """P, the grid: SMs × programs_per_sm (None: ``row_blocks``), at most ``row_blocks``.

    Every program gets at least one row block, so every row of the (P, N)
    partials is written. Under the interpreter, where programs run one after
    another, P = INTERPRETER_PROGRAMS (capped): the same kernels, fewer steps.
    """
    if device.type != "cuda":
        return max(1, min(INTERPRETER_PROGRAMS, row_blocks))
    return grid_size(
        config, row_blocks, sm_count(device.index if device.index is not None else torch.cuda.current_device())
    )


def grid_size(config: FastConfig, row_blocks: int, sms: int) -> int:
    """P on a GPU with ``sms`` SMs: ``sms × programs_per_sm`` (None: ``row_blocks``), between 1 and ``row_blocks``.

    The arithmetic of :func:`num_programs` without a device, for any card
    (lesson 12 tabulates it for the H200's 132 SMs on a machine without one).
    """
    p = row_blocks if config.programs_per_sm is None else sms * config.programs_per_sm
    return max(1, min(p, row_blocks))


def row_alignment(element_size: int, N: int, *row_strides: int) -> int:
    """The largest power of two, at most 16 bytes of elements, that divides N and every row stride.

    Triton specialises an integer argument only on divisibility by 16, so at N = 1000 it cannot
    prove that a masked 16-bit row is 16-byte aligned in groups of 8 and falls back to one element
    per load and store. The launchers pass this value as the ``ROW_ALIGN`` constexpr (through
    :func:`row_align_hint`, which leaves it to Triton where Triton knows) and the kernels
    restate N and the strides through :func:`aligned`. 1 for an odd N or an odd stride (a view
    such as ``buf[:, 1:N + 1]``), where the rows start at 2-byte offsets and nothing wider is
    possible. Both values are in the launch keys (N and strides by value).

    Args:
        element_size: bytes per element (2 or 4).
        N: columns.
        row_strides: elements from one row to the next, of every (M, N) tensor of the launch.
    """
    g = math.gcd(N, *row_strides)
    align = max(1, 16 // element_size)
    while g % align:
        align //= 2
    return align


def row_align_hint(element_size: int, N: int, *row_strides: int) -> int:
    """The ``ROW_ALIGN`` constexpr a launcher passes: :func:`row_alignment`, or 1 where Triton proves more itself.

    When N and every row stride are multiples of 16 elements, Triton's own specialisation marks
    them divisible by 16, which is all the vector accesses need; restating them through
    :func:`aligned` would then only cost integer instructions. Measured: at 1024 × 4096 bf16 the
    restatement added 14 instructions to the forward's PTX and 17 to the backward's, and both
    kernels ran 6 % slower on the H200 than before ``ROW_ALIGN`` (same call, one after the
    other); with 1 there the PTX is instruction for instruction the old one. Widths such as
    N = 1000, which only the hint makes 16-byte aligned, keep it.

    Args:
        element_size: bytes per element (2 or 4).
        N: columns.
        row_strides: elements from one row to the next, of every (M, N) tensor of the launch.

    Returns:
        1, 2, 4 or 8 (a power of two dividing N and every stride, 16 bytes of elements at most).
    """
    if N % 16 == 0 and all(s % 16 == 0 for s in row_strides):
        return 1
    return row_alignment(element_size, N, *row_strides)


@triton.jit
def aligned(v, ALIGN: tl.constexpr):
    """``v`` itself, written as a multiple of ALIGN so that the compiler knows it (the launcher checked it)."""
    return v // ALIGN * ALIGN


def _tile_rows(block_n: int, tile: int) -> int:
    """Rows per step so that a step holds ``tile`` elements (at least one row; no cap on short rows)."""
    return max(1, tile // block_n)


@functools.lru_cache(maxsize=None)
def forward_config(N: int, dtype: torch.dtype) -> FastConfig:
    """The table's forward configuration for rows of N columns in ``dtype``.

    One program per row block (persistence did not pay in the sweep): a tile
    of 2048 elements with 4 warps up to blocks of 1024 (8 rows of 256, 2048
    rows of 1); 2 rows of 2048, or one row up to 8192, with 8 warps; wider
    rows loop over 4096-wide blocks with 16 warps. Chosen on an H200 from the
    L2-cold sweeps in results/h200/fast_tuning.csv. Sweep 7 (x of 128 MiB):
    rows per step had stopped at 64, so a step of rows of 1 moved 128 bytes
    (bf16: 633 µs, the 2048-row tile 133 µs; N = 3: 214 → 155 µs).
    """
    if N > ONE_BLOCK_MAX_N:
        return FastConfig(BLOCK_M=1, BLOCK_N=LOOP_BLOCK_N, num_warps=16, programs_per_sm=None, num_stages=1)
    block_n = triton.next_power_of_2(N)
    block_m = _tile_rows(block_n, 2048) if block_n <= 1024 else (2 if block_n == 2048 else 1)
    return FastConfig(BLOCK_M=block_m, BLOCK_N=block_n, num_warps=4 if block_n <= 1024 else 8,
                      programs_per_sm=None, num_stages=1)


#: Elements per step of the backward at odd N (rows at 2- or 4-byte offsets: scalar loads). Sweep 7
#: (x of 128 MiB, bf16): half the even widths' tile, two programs per SM and no pipelining below
#: blocks of 2048: N = 3, 1515 → 225 µs; 15, 583 → 216; 257, 458 → 257; with 3 stages at 2047, 192 → 140.
ODD_BACKWARD_TILE = 4096
#: Odd float32 rows of 65-511 columns (float32 arithmetic, blocks of 128-512): elements per step,
#: by block, on 4 warps with four programs per SM. Sweep 8 (x of 128 MiB) at N = 257 (block 512),
#: against the odd rule above: 170.2 → 131.6 µs with 2048, the best of 108 configurations; sweep 9 at
#: 511, 2048 within 3 % of the best. Sweep 9 at N = 65 (block 128): 1024 elements, 251.1 → 196.1 µs,
#: the best of 108. Blocks of 256 (129-255) were not timed and keep 512's step.
ODD_FLOAT32_SHORT_TILE = {128: 1024, 256: 2048, 512: 2048}


@functools.lru_cache(maxsize=None)
def backward_config(N: int, dtype: torch.dtype) -> FastConfig:
    """The table's backward configuration for rows of N columns in ``dtype``.

    One program per SM. Rows up to 8192: a tile of 8192 elements per step
    (4096 for float32; rows of one column take 8192 rows a step), 8 warps,
    three pipelining stages (16 warps for 8192-wide float32 rows). Rows of up
    to 16384: one row per step, 16 warps (float32: 32 warps, sweep 8). Wider
    rows loop over 8192-wide blocks with 8 warps.

    Odd N (sweep 7), where no access is wider than one element: a tile of
    :data:`ODD_BACKWARD_TILE` elements with 8 warps and two programs per SM,
    pipelined only at blocks of 2048 and 4096; float32 rows of 4097-8191 one
    per step with 8 warps, unpipelined (333 → 236 µs at 4097); 16-bit rows of
    8193-16383 with 32 warps and 2 stages (573 → 253 µs at 12289).

    Float32 rows past N = 64 (sweep 8, after their row arithmetic moved from
    float64 to float32): one block up to 16384, with 32 warps and no
    pipelining past 8192; odd rows of 65-511 in steps of
    :data:`ODD_FLOAT32_SHORT_TILE` elements on 4 warps, four programs per SM.

    Sweep 9 (odd widths no sweep had timed, x of 128 MiB): odd float32 rows of
    1025-4095 unpipelined, with 4 warps at blocks of 4096 (1025: 153.1 →
    131.6 µs; 4095: 139.8 → 115.5); odd 16-bit rows of 4097-8191 one per step
    with 8 warps and 2 stages (bf16 4097: 275.3 → 259.1; 6143: 210.9 → 202.3;
    fp16 not timed); steps of 1024 elements at odd float32 65-127 (65: 251.1 →
    196.1).
    Chosen on an H200 from the L2-cold sweeps in results/h200/fast_tuning.csv.
    """
    if N > BACKWARD_ONE_BLOCK_MAX_N[dtype]:
        return FastConfig(BLOCK_M=1, BLOCK_N=BACKWARD_LOOP_BLOCK_N, num_warps=8, programs_per_sm=1, num_stages=1)
    block_n = triton.next_power_of_2(N)
    odd = N % 2 == 1
    if block_n > 8192 and dtype == torch.float32:
        return FastConfig(BLOCK_M=1, BLOCK_N=block_n, num_warps=32, programs_per_sm=1, num_stages=1)
    if block_n > 8192:
        return FastConfig(BLOCK_M=1, BLOCK_N=block_n, num_warps=32 if odd else 16, programs_per_sm=1,
                          num_stages=2 if odd else 1)
    if odd and dtype == torch.float32 and FLOAT64_MAX_N < N < 512:
        return FastConfig(BLOCK_M=_tile_rows(block_n, ODD_FLOAT32_SHORT_TILE[block_n]), BLOCK_N=block_n,
                          num_warps=4, programs_per_sm=4, num_stages=1)
    if odd and dtype == torch.float32 and 2048 <= block_n <= 4096:  # 1025-4095: sweep 9, unpipelined
        return FastConfig(BLOCK_M=_tile_rows(block_n, ODD_BACKWARD_TILE), BLOCK_N=block_n,
                          num_warps=4 if block_n == 4096 else 8, programs_per_sm=2, num_stages=1)
    if odd and block_n <= 4096:
        return FastConfig(BLOCK_M=_tile_rows(block_n, ODD_BACKWARD_TILE), BLOCK_N=block_n, num_warps=8,
                          programs_per_sm=2, num_stages=3 if block_n >= 2048 else 1)
    if odd:  # 4097-8191: one row per step, 8 warps; float32 unpipelined (sweep 7), 16-bit 2 stages (sweep 9)
        return FastConfig(BLOCK_M=1, BLOCK_N=block_n, num_warps=8, programs_per_sm=1,
                          num_stages=1 if dtype == torch.float32 else 2)
    block_m = _tile_rows(block_n, 4096 if dtype == torch.float32 else 8192)
    warps = 16 if dtype == torch.float32 and block_n >= 8192 else 8
    return FastConfig(BLOCK_M=block_m, BLOCK_N=block_n, num_warps=warps, programs_per_sm=1, num_stages=3)

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

:func:`forward_config` and :func:`backward_config` return the table's choice
for (N, dtype); every launcher also takes an explicit :class:`FastConfig`, so
lesson 12 and ``scripts/tune_fast.py`` can sweep them. The table was chosen
on an H200 from an L2-cold sweep (``results/h200/fast_tuning.csv``).

Source: notebooks/12_tuning_and_side_by_side.ipynb.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import torch
import triton

#: Widest row a single block holds (in registers) on the GPU; wider rows loop over blocks.
ONE_BLOCK_MAX_N = 8192
#: Block width of the column loop for rows wider than ONE_BLOCK_MAX_N.
LOOP_BLOCK_N = 4096
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
    if device.type == "cuda" and config.programs_per_sm is None:
        p = row_blocks
    elif device.type == "cuda":
        p = sm_count(device.index if device.index is not None else torch.cuda.current_device())
        p *= config.programs_per_sm
    else:
        p = INTERPRETER_PROGRAMS
    return max(1, min(p, row_blocks))


def _tile_rows(block_n: int, tile: int) -> int:
    return max(1, min(64, tile // block_n))


def forward_config(N: int, dtype: torch.dtype) -> FastConfig:
    """The table's forward configuration for rows of N columns in ``dtype``.

    A tile of about 2048 elements per step, 4 warps (8 from 4096 columns);
    one program per row block. From the H200 sweep (results/h200/fast_tuning.csv).
    """
    block_n = triton.next_power_of_2(N) if N <= ONE_BLOCK_MAX_N else LOOP_BLOCK_N
    block_m = _tile_rows(block_n, 2048)
    return FastConfig(BLOCK_M=block_m, BLOCK_N=block_n, num_warps=8 if block_n >= 4096 else 4,
                      programs_per_sm=None, num_stages=1)


def backward_config(N: int, dtype: torch.dtype) -> FastConfig:
    """The table's backward configuration for rows of N columns in ``dtype``.

    One program per SM, three pipelining stages, a tile of 8192 elements per
    step (4096 for float32), 8 warps (16 for 8192-wide rows). From the H200
    sweep (results/h200/fast_tuning.csv).
    """
    if N > ONE_BLOCK_MAX_N:
        return FastConfig(BLOCK_M=1, BLOCK_N=LOOP_BLOCK_N, num_warps=16, programs_per_sm=1, num_stages=1)
    block_n = triton.next_power_of_2(N)
    block_m = _tile_rows(block_n, 4096 if dtype == torch.float32 else 8192)
    return FastConfig(BLOCK_M=block_m, BLOCK_N=block_n, num_warps=16 if block_n >= 8192 else 8,
                      programs_per_sm=1, num_stages=3)

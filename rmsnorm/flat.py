"""Forward and backward for short contiguous rows: a tile of whole rows read as one dense run of elements.

A row of N columns fills a block of next_power_of_2(N) lanes, so at N = 17 the block masks 15 lanes of every
32, and at an odd N the rows start at 2-byte offsets, so no load or store is wider than one element
(results/h200/cliffs.csv: the forward at 0.48-0.73× the best peer at N = 1-31). Rows of a contiguous x (row
stride N) are one run of M·N elements, so a program here takes ROWS whole rows as the first ROWS·N of BLOCK
consecutive elements: few masked lanes, and 16 bytes at a time wherever ROWS·N elements are a multiple of 16
bytes (:func:`flat_rows` rounds ROWS for it) and the tile is full, whose mask, ROWS·N, is then a constant (the
last tile, cut short, has its own branch). Each row's sum of squares comes from a segmented scan, a running sum
that restarts at each row's first element, read at the row's last; rstd reaches the row's elements through
``tl.gather``, the weight through its column, i mod N (a few hundred bytes, in L1). N is compiled in (``N`` a
constexpr), so the row and column of an element are a multiply and a shift, not a division.

The backward reads x and dy the same way and finds each row's mean(u · x̂) with the same scan. A program takes
tiles t, t + P, … (a persistent grid) and accumulates dy · x̂ element by element; since every tile starts at a
row, element i is always column i mod N, and at the end the program sums its accumulator's ROWS rows per
column (stored, then read back as a (ROWS, N) tile) into its row of the (P, N) float32 partials, which the
table's fixed-order sum (:func:`rmsnorm.backward._sum_partials`) turns into dgamma.

It is a configuration (``FastConfig.flat``) that the rule tables choose for short odd rows whose tensors are one
dense run (:func:`rmsnorm.config.dense_rows`; the rules and their evidence in :mod:`rmsnorm.config`); rows with
another stride keep the blocked kernels. ``scripts/benchmark_fast.py --tune-only --tune-at 'bfloat16:17'`` times
it beside the blocked candidates with every output checked.

Numbers: deterministic from run to run (dgamma's sum in a fixed order, as the blocked kernels'), and within the
declared tolerance of the blocked kernels, but not bit for bit with them: the scan adds a row's squares in an order
that depends on where the row starts in the tile's lanes, where the blocked kernels add every row in one order.
So a row's rstd may differ in its last bit between a contiguous x and a strided view of it, between the plain norm
and :func:`rmsnorm.rmsnorm_add` (whose kernels are the blocked ones), and on a GPU with the row's place in the
batch. A caller that needs bits independent of layout and batch passes the blocked choice,
``config=forward_config(N, x.dtype)`` (and ``backward_config(N, x.dtype)``).

Source: Triton's ``tl.associative_scan`` and ``tl.gather``; segmented scans (Blelloch, "Prefix sums and their
applications", 1990).
"""

from __future__ import annotations

import math

import torch
import triton
import triton.language as tl

from . import device
from .config import FastConfig, num_programs, shifted_weight
from .contract import ContractError
from .launch import DirectLauncher


@triton.jit
def _segmented_add(a, a_starts, b, b_starts):
    """The combine of a running sum that restarts where a segment starts (b_starts != 0)."""
    return tl.where(b_starts != 0, b, a + b), a_starts | b_starts


@triton.jit
def _forward_tile(x_ptr, weight_ptr, y_ptr, rstd_ptr, row0, rows_here, end, eps, N: tl.constexpr,
                  HAS_WEIGHT: tl.constexpr, OFFSET: tl.constexpr, ROWS_P2: tl.constexpr, BLOCK: tl.constexpr):
    """One tile of ``rows_here`` rows from row0, its ``end`` elements: ROWS · N (a constexpr) for every tile but
    the last, so that the masks of the full tiles are constant over whole 16-byte vectors and load that wide."""
    start = row0 * N  # the tile's first element
    i = tl.arange(0, BLOCK)
    mask = i < end
    x = tl.load(x_ptr + start + i, mask=mask, other=0.0).to(tl.float32)
    row = i // N  # row within the tile (N a constexpr: a multiply and a shift)
    col = i - row * N
    if HAS_WEIGHT:  # issued before the scan, whose barriers would otherwise wait on it
        weight = tl.load(weight_ptr + col, mask=mask, other=0.0)
    sums, _ = tl.associative_scan((x * x, (col == 0).to(tl.int32)), 0, _segmented_add)
    rows = tl.arange(0, ROWS_P2)
    total = tl.gather(sums, tl.minimum(rows * N + (N - 1), BLOCK - 1), 0)  # each row's sum, at its last element
    rstd = tl.rsqrt(total / N + eps)
    tl.store(rstd_ptr + row0 + rows, rstd, mask=rows < rows_here)
    y = x * tl.gather(rstd, tl.minimum(row, ROWS_P2 - 1), 0)
    if HAS_WEIGHT:
        y = y * shifted_weight(weight, OFFSET, tl.float32)
    tl.store(y_ptr + start + i, y, mask=mask)


@triton.jit
def rmsnorm_flat_forward_kernel(
    x_ptr,  # (M, N) input, contiguous rows (row stride N)
    weight_ptr,  # (N,) weight; unused when HAS_WEIGHT is False
    y_ptr,  # (M, N) output, contiguous, dtype of x
    rstd_ptr,  # (M,) float32 output
    M,  # rows
    eps,  # added to mean(x²) before the square root
    N: tl.constexpr,  # columns, compiled in
    HAS_WEIGHT: tl.constexpr,  # False: y = x · rstd
    OFFSET: tl.constexpr,  # y = x · rstd · (weight + OFFSET)
    ROWS: tl.constexpr,  # whole rows a program takes: ROWS · N ≤ BLOCK
    ROWS_P2: tl.constexpr,  # next_power_of_2(ROWS), the length of the per-row vectors
    BLOCK: tl.constexpr,  # elements a program loads (a power of two)
):
    row0 = tl.cast(tl.program_id(0), tl.int64) * ROWS
    if row0 + ROWS <= M:  # a full tile: its end a constexpr
        _forward_tile(x_ptr, weight_ptr, y_ptr, rstd_ptr, row0, ROWS, ROWS * N, eps, N, HAS_WEIGHT, OFFSET, ROWS_P2,
                      BLOCK)
    else:  # the last tile, cut short
        _forward_tile(x_ptr, weight_ptr, y_ptr, rstd_ptr, row0, M - row0, (M - row0) * N, eps, N, HAS_WEIGHT,
                      OFFSET, ROWS_P2, BLOCK)


@triton.jit
def _backward_tile(x_ptr, weight, rstd_ptr, dy_ptr, dx_ptr, row0, rows_here, end, N: tl.constexpr,
                   HAS_WEIGHT: tl.constexpr, COMPUTE: tl.constexpr, ROWS_P2: tl.constexpr, BLOCK: tl.constexpr):
    """dx of one tile (as :func:`_forward_tile` takes it); returns dy · x̂ per element, float32, for dgamma."""
    start = row0 * N
    i = tl.arange(0, BLOCK)
    mask = i < end
    row = i // N
    col = i - row * N
    rows = tl.arange(0, ROWS_P2)
    row_of = tl.minimum(row, ROWS_P2 - 1)
    x = tl.load(x_ptr + start + i, mask=mask, other=0.0).to(COMPUTE)
    dy = tl.load(dy_ptr + start + i, mask=mask, other=0.0).to(COMPUTE)
    rstd = tl.gather(tl.load(rstd_ptr + row0 + rows, mask=rows < rows_here, other=0.0).to(COMPUTE), row_of, 0)
    x_hat = x * rstd
    u = dy
    if HAS_WEIGHT:
        u = dy * weight
    sums, _ = tl.associative_scan((u * x_hat, (col == 0).to(tl.int32)), 0, _segmented_add)
    mean_ux = tl.gather(tl.gather(sums, tl.minimum(rows * N + (N - 1), BLOCK - 1), 0) / N, row_of, 0)
    tl.store(dx_ptr + start + i, rstd * (u - x_hat * mean_ux), mask=mask)
    return (dy * x_hat).to(tl.float32)


@triton.jit
def rmsnorm_flat_backward_kernel(
    x_ptr,  # (M, N) forward input, contiguous rows
    weight_ptr,  # (N,) weight; unused when HAS_WEIGHT is False
    rstd_ptr,  # (M,) float32 from the forward
    dy_ptr,  # (M, N) upstream gradient, contiguous rows, dtype of x
    dx_ptr,  # (M, N) output, contiguous, dtype of x
    scratch_ptr,  # (P, ROWS · N) float32: each program's dgamma accumulator, read back by columns
    partial_ptr,  # (P, N) float32 output: program p's share of dgamma in row p
    M,  # rows
    N: tl.constexpr,  # columns, compiled in
    HAS_WEIGHT: tl.constexpr,  # False: u = dy and no dgamma
    OFFSET: tl.constexpr,  # u = dy · (weight + OFFSET)
    COMPUTE: tl.constexpr,  # dtype of the row arithmetic (config.row_arithmetic_dtype)
    ROWS: tl.constexpr,  # whole rows a tile takes
    ROWS_P2: tl.constexpr,  # next_power_of_2(ROWS)
    N_P2: tl.constexpr,  # next_power_of_2(N)
    BLOCK: tl.constexpr,  # elements a tile loads (a power of two)
    NUM_STAGES: tl.constexpr,  # software pipelining of the loop over full tiles
):
    i = tl.arange(0, BLOCK)
    col = i - i // N * N
    weight = i  # unused without a weight
    if HAS_WEIGHT:  # every tile starts at a row: element i is column i mod N in all of them
        weight = shifted_weight(tl.load(weight_ptr + col, mask=i < ROWS * N, other=0.0), OFFSET, COMPUTE)
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    full = M // ROWS  # full tiles: a loop with nothing but them, which NUM_STAGES can pipeline
    for tile in tl.range(tl.program_id(0), full, tl.num_programs(0), num_stages=NUM_STAGES):
        acc += _backward_tile(x_ptr, weight, rstd_ptr, dy_ptr, dx_ptr, tl.cast(tile, tl.int64) * ROWS, ROWS,
                              ROWS * N, N, HAS_WEIGHT, COMPUTE, ROWS_P2, BLOCK)
    if (full * ROWS < M) & (tl.program_id(0) == full % tl.num_programs(0)):  # the last tile, cut short
        row0 = tl.cast(full, tl.int64) * ROWS
        acc += _backward_tile(x_ptr, weight, rstd_ptr, dy_ptr, dx_ptr, row0, M - row0, (M - row0) * N, N,
                              HAS_WEIGHT, COMPUTE, ROWS_P2, BLOCK)
    if HAS_WEIGHT:  # the accumulator's ROWS rows summed per column: stored, then read back as (ROWS, N)
        program = tl.program_id(0).to(tl.int64)
        scratch = scratch_ptr + program * (ROWS * N)
        tl.store(scratch + i, acc, mask=i < ROWS * N)
        tl.debug_barrier()  # the whole accumulator stored before any thread reads it back
        rows = tl.arange(0, ROWS_P2)
        cols = tl.arange(0, N_P2)
        tile = tl.load(scratch + rows[:, None] * N + cols[None, :], mask=(rows < ROWS)[:, None] & (cols < N)[None, :],
                       other=0.0)
        tl.store(partial_ptr + program * N + cols, tl.sum(tile, axis=0), mask=cols < N)


_launch = DirectLauncher(rmsnorm_flat_forward_kernel)
_launch_backward = DirectLauncher(rmsnorm_flat_backward_kernel)


def flat_rows(config: FastConfig, N: int, element_size: int) -> int:
    """ROWS, the whole rows a flat tile of ``config.BLOCK_N`` elements takes: as many as fit, rounded down to a
    multiple of the rows that make 16 bytes' worth of elements a multiple of N (so that every tile starts 16-byte
    aligned), at least 1."""
    per_vector = 16 // element_size
    step = per_vector // math.gcd(per_vector, N)  # rows whose elements fill whole 16-byte vectors
    rows = config.BLOCK_N // N
    return max(1, rows - rows % step if rows >= step else rows)


def check_flat_config(config: FastConfig, *tensors: tuple[str, torch.Tensor], backward: bool = False) -> None:
    """Refuse a flat configuration that cannot run on the (name, (M, N) tensor) pairs, before anything is allocated.

    Raises:
        ContractError: rows that are not contiguous (row stride ≠ N: the tile would not be one run), a tile
            narrower than one row (BLOCK_N < N), or for the ``backward`` a grid that is not persistent
            (``programs_per_sm`` None: a program and a scratch row per tile).
    """
    for name, t in tensors:
        M, N = t.shape
        if M > 1 and t.stride(0) != N:
            raise ContractError(f"the flat kernels (FastConfig.flat) read whole rows as one run: {name}'s row stride "
                                f"must be N = {N}; got {t.stride(0)}")
        if config.BLOCK_N < N:
            raise ContractError(f"the flat kernels' tile of {config.BLOCK_N} elements is narrower than a row of {N}")
    if backward and config.programs_per_sm is None:
        raise ContractError("the flat backward runs a persistent grid: give FastConfig.programs_per_sm (one "
                            "program per tile would take a scratch row and a partial row per tile)")


def launch_flat_forward(x: torch.Tensor, weight: torch.Tensor | None, eps: float, config: FastConfig,
                        offset: float, y: torch.Tensor, rstd: torch.Tensor, key: tuple) -> None:
    """One flat launch into ``y`` and ``rstd`` (M ≥ 1; the caller checked the inputs and ``config``).

    ``key`` is the forward's direct-launch key (:func:`rmsnorm.forward.forward_key`): ROWS and the rest follow
    from its config, N and dtype.
    """
    M, N = x.shape
    rows = flat_rows(config, N, x.element_size())
    _launch(
        key, (triton.cdiv(M, rows),),
        x, x if weight is None else weight, y, rstd, M, eps, N, weight is not None, offset, rows,
        triton.next_power_of_2(rows), config.BLOCK_N, num_warps=config.num_warps,
    )


def launch_flat_backward(x: torch.Tensor, weight: torch.Tensor | None, rstd: torch.Tensor, dy: torch.Tensor,
                         config: FastConfig, offset: float, dx: torch.Tensor, compute, key: tuple):
    """One flat backward launch into ``dx`` (M ≥ 1; the caller checked the inputs and ``config``); ``compute``
    is the row arithmetic's Triton dtype (COMPUTE).

    Returns:
        The (P, N) float32 partials of dgamma (their fixed-order sum is dgamma), or None without a weight.
    """
    M, N = x.shape
    rows = flat_rows(config, N, x.element_size())
    P = num_programs(config, x.device, triton.cdiv(M, rows))
    has_weight = weight is not None
    scratch = device.new_output((P, rows * N) if has_weight else (1,), torch.float32, x.device)  # stored, then read
    partial = device.new_output((P, N), torch.float32, x.device) if has_weight else scratch
    _launch_backward(
        key + (scratch.data_ptr() & 15, partial.data_ptr() & 15), (P,),
        x, x if weight is None else weight, rstd, dy, dx, scratch, partial, M, N, has_weight, offset, compute, rows,
        triton.next_power_of_2(rows), triton.next_power_of_2(N), config.BLOCK_N, config.num_stages,
        num_warps=config.num_warps,
    )
    return partial if has_weight else None

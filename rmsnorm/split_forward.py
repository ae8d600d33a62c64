"""The forward for rows too wide for one program: each row split across SPLIT programs that wait for each other.

The loop forward (:mod:`rmsnorm.forward`) reads a wide row twice, once for the sum of squares and once to
write y, and the second read comes from DRAM once the rows in flight outgrow the L2: 256 programs of 512
KiB rows (262144 bf16 columns) hold 128 MiB, the H200's L2 50 MB. QuACK reads such a row once, split over a
cluster of CTAs that add their partial sums through distributed shared memory; Triton 3.6 has neither
clusters nor distributed shared memory, so here the programs of one row meet in global memory:

1. program (row, part) loads its BLOCK_N columns of the row and keeps them in registers;
2. it stores its sum of squares in ``partials[row, part]`` and adds 1 to ``arrived[row]`` (release);
3. it polls ``arrived[row]`` (acquire) until all SPLIT parts have stored theirs;
4. it adds the SPLIT partials (one fixed reduction tree, the same in every program and every run, so rstd and
   y are bitwise reproducible) and writes its columns of y from the registers: x is read from DRAM once.

A program that waits for another must never hold the SM that other one needs, so the grid is persistent
(``programs_per_sm`` × SMs, a multiple of SPLIT, row r taken by the SPLIT programs of group r mod
groups) and launched cooperatively: the driver refuses a grid whose programs cannot all be resident at
once (CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE) instead of letting it hang. The wait also gives up after
:data:`MAX_POLLS` polls and makes that row's rstd NaN (and the program's later rows, without waiting), so a
fault in the ordering shows as a wrong output, which every caller that checks (the sweep, the tests)
reports, rather than as a hung process.

Triton's CPU interpreter runs programs one after another, so the first program would wait for the second
for ever: the split forward runs on a GPU only, and refuses the interpreter by name.

It is a configuration (``FastConfig.split`` > 1), not yet any rule's choice: ``scripts/benchmark_fast.py
--tune-only --tune-at 'bfloat16:131072'`` times it beside the loop with every output checked.

Source: QuACK ``rmsnorm.py`` (cluster_n, a row over several CTAs); CUB's single-pass scan (programs that
publish a partial with release and read their neighbours' with acquire); the PTX memory model
(``red.release.gpu``, ``ld.acquire.gpu``).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from . import device
from .config import FastConfig, aligned, row_align_hint, shifted_weight, sm_count
from .contract import ContractError
from .launch import DirectLauncher

#: Polls of ``arrived`` before a program gives up on its row (rstd NaN). A row's programs are resident together
#: (the cooperative launch) and run the same code, so they arrive within a row's time, microseconds; 2**18 polls
#: of the L2 are a few hundred milliseconds of the program's own running time (a context switch stops the polls
#: too). The bound exists for the sweep: a rule that chose this kernel would wait without one, or trap.
MAX_POLLS = 1 << 18


@triton.jit
def rmsnorm_split_forward_kernel(
    x_ptr,  # (M, N) input, unit column stride
    x_row_stride,  # elements from one row of x to the next
    weight_ptr,  # (N,) weight; unused when HAS_WEIGHT is False
    y_ptr,  # (M, N) output, dtype of x
    y_row_stride,  # elements from one row of y to the next
    rstd_ptr,  # (M,) float32 output
    partial_ptr,  # (M, SPLIT) float32 scratch: each part's sum of squares
    arrived_ptr,  # (M,) int32, zero at launch: parts of the row that have stored their partial
    M,  # rows
    N,  # columns
    eps,  # added to mean(x²) before the square root
    HAS_WEIGHT: tl.constexpr,  # False: y = x · rstd
    OFFSET: tl.constexpr,  # y = x · rstd · (weight + OFFSET)
    SPLIT: tl.constexpr,  # programs per row (a power of two)
    BLOCK_N: tl.constexpr,  # columns per program: SPLIT · BLOCK_N ≥ N
    ROW_ALIGN: tl.constexpr,  # a power of two dividing N and the row strides (config.row_alignment)
    MAX_POLLS: tl.constexpr,  # polls of arrived before giving up on the row
    HOLD_WEIGHT: tl.constexpr,  # True: the weight's columns held in registers across rows (holds_weight)
):
    N = aligned(N, ROW_ALIGN)
    x_row_stride = aligned(x_row_stride, ROW_ALIGN)
    y_row_stride = aligned(y_row_stride, ROW_ALIGN)
    part = tl.program_id(0) % SPLIT
    groups = tl.num_programs(0) // SPLIT
    cols = part * BLOCK_N + tl.arange(0, BLOCK_N)
    col_mask = cols < N
    parts = tl.arange(0, SPLIT)
    if HAS_WEIGHT and HOLD_WEIGHT:  # the program's columns of the weight, the same for every row: loaded once
        scale = shifted_weight(tl.load(weight_ptr + cols, mask=col_mask, other=0.0), OFFSET, tl.float32)
    limit = MAX_POLLS  # 0 once a row has timed out: the rows after it give up at once, not one by one
    for r in range(tl.program_id(0) // SPLIT, M, groups):
        row = tl.cast(r, tl.int64)  # M·N may pass 2³¹
        x = tl.load(x_ptr + row * x_row_stride + cols, mask=col_mask, other=0.0, eviction_policy="evict_first")
        xf = x.to(tl.float32)
        tl.store(partial_ptr + row * SPLIT + part, tl.sum(xf * xf, axis=0))
        tl.debug_barrier()  # the partial is stored before the arrival that announces it
        # acq_rel, not release: the last program to arrive skips the poll, and reads the others' partials on the
        # strength of this atomic alone
        arrived = tl.atomic_add(arrived_ptr + row, 1, sem="acq_rel", scope="gpu") + 1
        polls = 0
        while (arrived < SPLIT) & (polls < limit):
            arrived = tl.atomic_add(arrived_ptr + row, 0, sem="acquire", scope="gpu")
            polls += 1
        limit = tl.where(arrived < SPLIT, 0, limit)
        sums = tl.load(partial_ptr + row * SPLIT + parts, volatile=True)  # past L1: other SMs wrote them
        rstd = tl.rsqrt(tl.sum(sums, axis=0) / N + eps)
        rstd = tl.where(arrived < SPLIT, float("nan"), rstd)  # gave up waiting: a visibly wrong row, not a hang
        y = xf * rstd
        if HAS_WEIGHT and HOLD_WEIGHT:
            y = y * scale
        elif HAS_WEIGHT:  # from L2, after the wait
            y = y * shifted_weight(tl.load(weight_ptr + cols, mask=col_mask, other=0.0), OFFSET, tl.float32)
        tl.store(y_ptr + row * y_row_stride + cols, y, mask=col_mask)
        if part == 0:
            tl.store(rstd_ptr + row, rstd)


_launch = DirectLauncher(rmsnorm_split_forward_kernel)


def holds_weight(config: FastConfig) -> bool:
    """Whether a program keeps its columns of the weight in registers across its rows (HOLD_WEIGHT).

    At 16 columns a thread ptxas for sm_90 holds them in 60 registers without a spill; at 32 a thread, holding
    them too costs 64 registers and 52 bytes spilled at 32 warps, or 100 registers at 16 warps (two programs
    no longer fit an SM), so those read the weight from L2 for each row instead.
    """
    return config.BLOCK_N // (32 * config.num_warps) <= 16


def split_grid(config: FastConfig, M: int, sms: int) -> int:
    """P, the split forward's grid: SMs × programs_per_sm, down to a multiple of SPLIT, at most M × SPLIT.

    Raises:
        ContractError: fewer programs than one row needs (SMs × programs_per_sm < SPLIT).
    """
    programs = sms * (config.programs_per_sm or 1)
    if programs < config.split:
        raise ContractError(f"the split forward needs {config.split} programs resident at once for one row; "
                            f"{sms} SMs × {config.programs_per_sm or 1} programs each give {programs}")
    return min(programs - programs % config.split, M * config.split)


def check_split_config(config: FastConfig, x: torch.Tensor) -> None:
    """Refuse a split configuration that cannot run on x's rows, before anything is allocated.

    Raises:
        ContractError: SPLIT not a power of two from 2, BLOCK_N · SPLIT < N, Triton's interpreter (its programs
            run one after another, so a row's first program would wait for ever for the next), or fewer programs
            resident on x's GPU than one row needs (:func:`split_grid`).
    """
    split, N = config.split, x.shape[1]
    if split < 2 or split & (split - 1):
        raise ContractError(f"FastConfig.split must be a power of two from 2 for the split forward; got {split}")
    if config.BLOCK_N * split < N:
        raise ContractError(f"the split forward's {split} programs of {config.BLOCK_N} columns cover "
                            f"{config.BLOCK_N * split} of the row's {N}")
    if device.interpreter_active():
        raise ContractError("the split forward runs on a GPU only: a row's programs wait for each other, and "
                            "Triton's interpreter runs programs one after another (use a configuration with "
                            "split = 1 there, as every rule does)")
    split_grid(config, max(x.shape[0], 1), _sms(x))


def _sms(x: torch.Tensor) -> int:
    return sm_count(x.device.index if x.device.index is not None else torch.cuda.current_device())


def launch_split_forward(x: torch.Tensor, weight: torch.Tensor | None, eps: float, config: FastConfig,
                         offset: float, y: torch.Tensor, rstd: torch.Tensor, key: tuple) -> None:
    """One split launch into ``y`` and ``rstd`` (M ≥ 1; the caller checked the inputs and ``config``).

    ``key`` is the forward's direct-launch key (:func:`rmsnorm.forward.forward_key`), whose config holds SPLIT.
    """
    M, N = x.shape
    P = split_grid(config, M, _sms(x))
    partials = device.new_output((M, config.split), torch.float32, x.device)  # each part stores its own first
    arrived = torch.zeros((M,), dtype=torch.int32, device=x.device)
    w = x if weight is None else weight
    _launch(
        key + (MAX_POLLS,), (P,),
        x, x.stride(0), w, y, y.stride(0), rstd, partials, arrived, M, N, eps,
        weight is not None, offset, config.split, config.BLOCK_N,
        row_align_hint(x.element_size(), N, x.stride(0), y.stride(0)), MAX_POLLS, holds_weight(config),
        num_warps=config.num_warps, launch_cooperative_grid=True,
    )

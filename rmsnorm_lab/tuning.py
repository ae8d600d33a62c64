"""Tuning the fast path: the candidate configurations around the table's choice, and the sweep that times them.

:func:`forward_candidates` and :func:`backward_candidates` list the table's configuration
(:func:`rmsnorm.forward_config`, :func:`~rmsnorm.backward_config`) and its
neighbours: rows per step, warps, persistence, pipelining, and the loop rung. :func:`tune`
checks every candidate's output against the table's own, then times it L2-cold
(:func:`rmsnorm_lab.kernel_time_us`). ``scripts/benchmark_fast.py --tune`` writes the rows
to results/h200/fast_tuning.csv; the sweep history lives with the results.

Source: notebooks/12_tuning_and_side_by_side.ipynb; quack ``rmsnorm_config.py``.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import itertools
import multiprocessing
import time
from collections.abc import Callable
from typing import NamedTuple

import pandas as pd
import torch
import triton

from rmsnorm import (
    FastConfig,
    backward_config,
    forward_config,
    layernorm_fast_backward,
    layernorm_fast_forward,
    rmsnorm_fast_backward,
    rmsnorm_fast_forward,
)
from rmsnorm.backward import launch_backward
from rmsnorm.config import layernorm_backward_config, layernorm_forward_config
from rmsnorm.forward import launch_add_forward
from rmsnorm.layernorm_launchers import LAYERNORM_EPS
from rmsnorm.testing import TOLERANCES, dgamma_tolerance, make_inputs
from .inputs import fused_add_inputs, layernorm_inputs
from .providers import EPS
from .timing import kernel_time_us

#: Elements per step of the short-row candidates: a step of short rows holds a whole tile, not a fixed
#: number of rows (64 rows of one bf16 column would be 128 bytes a step).
SHORT_ROW_TILES = (2048, 4096, 8192, 16384)
#: The widest block (columns) the short-row candidates are tried at, per pass.
SHORT_ROW_MAX_BLOCK_N = {"forward": 32, "backward": 64}


class Norm(NamedTuple):
    """What the sweep needs of a norm: its launchers, as ``forward(x, weight, extra, config)`` → (y, *saved) and
    ``backward(x, weight, extra, saved, dy, config)`` → (dx, *parameter gradients), and its tables, as
    ``backward_config(N, dtype)`` and ``forward_config(N, dtype)`` (rows in any layout). ``extra`` is what
    :func:`inputs` draws beside x: the LayerNorm's bias, the fused add's (residual, d residual_out), else None."""

    forward: Callable
    backward: Callable
    backward_config: Callable
    forward_config: Callable = forward_config
    #: its launches may take a flat rule where the rows are dense, as the sweep's inputs are (the plain RMSNorm)
    flat_rules: bool = False


#: The norms the sweep tunes: the RMSNorm, the LayerNorm through the same kernels (its own tables,
#: :func:`rmsnorm.config.layernorm_forward_config` and :func:`~rmsnorm.config.layernorm_backward_config`; eps as
#: torch.nn.LayerNorm's), and the fused residual add
#: (rmsnorm.rmsnorm_add's launchers: the forward writes residual_out, the backward adds d residual_out).
NORMS = {
    "rmsnorm": Norm(lambda x, w, b, cfg=None: rmsnorm_fast_forward(x, w, EPS, config=cfg),
                    lambda x, w, b, saved, dy, cfg=None: rmsnorm_fast_backward(x, w, saved[-1], dy, config=cfg),
                    backward_config, flat_rules=True),
    "layernorm": Norm(lambda x, w, b, cfg=None: layernorm_fast_forward(x, w, b, LAYERNORM_EPS, config=cfg),
                      lambda x, w, b, saved, dy, cfg=None: layernorm_fast_backward(x, w, b, *saved[1:], dy,
                                                                                   config=cfg),
                      layernorm_backward_config, layernorm_forward_config),
    "rmsnorm_add": Norm(lambda x, w, e, cfg=None: launch_add_forward(x, e[0], w, EPS, cfg),
                        lambda x, w, e, saved, dy, cfg=None: launch_backward(saved[1], w, saved[2], dy, cfg, 0.0,
                                                                             e[1]),
                        backward_config),
}


def inputs(norm: str, M: int, N: int, dtype: torch.dtype, weight_dtype, device="cuda") -> tuple:
    """(x, weight, extra, dy) for ``norm`` (extra as :class:`Norm` says): what its side by side draws
    (:mod:`rmsnorm_lab.inputs`; the RMSNorm's,
    ``make_inputs`` at seed 1), on the device where it is CUDA.

    Raises:
        ValueError: a weight dtype other than x's for the fused add, whose side by side declares none.
    """
    if norm == "layernorm":
        return layernorm_inputs(M, N, dtype, weight_dtype or dtype, device)
    if norm == "rmsnorm_add":
        if weight_dtype not in (None, dtype):
            raise ValueError(f"the fused add's sweep takes the weight in x's dtype ({dtype}); got {weight_dtype}")
        x, residual, weight, dy, d_residual_out = fused_add_inputs(M, N, dtype, device)
        return x, weight, (residual, d_residual_out), dy
    on_device = torch.device(device).type == "cuda"
    x, weight, dy = make_inputs(M, N, dtype, device, 1, weight_dtype=weight_dtype, draw_on_device=on_device)
    return x, weight, None, dy


def _around(value: int, lo: int = 1, hi: int = 64):
    return sorted({v for v in (value // 2, value, value * 2, value * 4) if lo <= v <= hi})


def forward_candidates(N: int, dtype: torch.dtype, norm: str = "rmsnorm"):
    """The forward's candidates for rows of N columns in ``dtype``: the table's choice and its neighbours.

    Rows of at most 32 columns: tiles of 2048-16384 elements, 4, 8 or 16 warps, one program per row block or
    4-8 per SM. Wider rows: rows per step around the table's BLOCK_M (1, 2 or 4 where the row loops, the rows
    of a step sharing each block's weight and bias loads), 4, 8 or 16 warps, one program per row
    block or 4-8 per SM with 1 or 3 stages, and where the block is at most 512 columns also 1 or 2 warps of up
    to 64 elements a thread (sweep 13's best and Inductor's kernel at 65536 × 257 bf16). From N = 4096, where
    the table holds one block or loops over blocks narrower than 4096, also the loop rung (blocks of 2048 and
    4096 at 8 or 16 warps); for looped rows up to N = 32768 also the whole row in one block (8, 16 or 32 warps),
    and up to 65536 at 32 warps (a bf16 row of 128 KiB held in one program's registers, read once: ptxas spills
    about 100 bytes a thread there, 16 warps half as many again); for every looped row loop blocks of 8192 and
    16384 columns at 16 or 32 warps, and from 65536 columns those loops also with one or two programs per SM,
    whose rows in flight may fit the L2 for the second read. For the plain RMSNorm (``norm``), rows wider than
    16384 columns also split over several programs (:func:`split_candidates`), and short rows also as one dense
    run (:func:`flat_candidates`); for a norm with a forward table of its own (the LayerNorm's), that table's choice
    too. Each configuration once, so that a sweep times none twice.

    Where N is not a power of two (a masked row), each configuration also with N compiled in
    (``static_n``).

    Yields:
        :class:`rmsnorm.FastConfig`, the table's own among them.
    """
    own = [] if NORMS[norm].flat_rules else [library_choice("forward", N, dtype, norm)]  # a norm's own table's
    yield from _once_and_static(itertools.chain(own, _forward_candidates(N, dtype)), N)
    if norm == "rmsnorm":
        yield from split_candidates(N, dtype)
        yield from flat_candidates(N, dtype)


#: The flat backward's registers a thread (ptxas for sm_90, ``tools/ptx_vector_accesses.py N dtype --flat`` at
#: N = 9, 17 and 31, 1-3 stages), the most at up to 4 and at 8 elements a thread: [16-bit rows, float32 rows]. The
#: most of Triton 3.6's ptxas and 3.7's: they differ (at 1024 elements on 8 warps, 3 stages, 16-bit: 108 and 91).
FLAT_BACKWARD_REGISTERS = {False: (108, 136), True: (128, 219)}


def flat_candidates(N: int, dtype: torch.dtype, pass_: str = "forward"):
    """The flat kernels' candidates (:mod:`rmsnorm.flat`) for contiguous rows of N columns.

    Where N ≤ 256 is not a power of two (whose own block would hold masked lanes), and below 32 columns (rows
    shorter than one warp's lanes). Forward: tiles of 1024, 2048 or 4096 elements on 2, 4 or 8 warps, one program
    a tile, at most 16 elements a thread. Backward: tiles of 512, 1024 or 2048 elements on 4 or 8 warps, at most 8
    elements a thread, the loop over full tiles unpipelined or 3 stages deep (at 2, Triton 3.7's cp.async copies
    for the next tile are issued at the end of the body and waited for at the top: no overlap), and 1, 2 or 4
    programs per SM where all of them fit its 65536 registers: ptxas for sm_90 gives the backward at most 108
    registers a thread at 4 elements in 16-bit and 128 in float32 (float64 arithmetic), at 8 elements 136 and
    219 (:data:`FLAT_BACKWARD_REGISTERS`).

    Yields:
        :class:`rmsnorm.FastConfig` with ``flat`` set; none for other N.
    """
    if N > 256 or (N & (N - 1) == 0 and N >= 32):
        return
    if pass_ == "backward":
        registers = FLAT_BACKWARD_REGISTERS[dtype == torch.float32]
        for block_n, warps, pps, stages in itertools.product((512, 1024, 2048), (4, 8), (1, 2, 4), (1, 3)):
            per_thread = block_n // (32 * warps)
            if block_n >= N and per_thread <= 8 and warps * 32 * pps * registers[per_thread > 4] <= 65536:
                yield FastConfig(BLOCK_M=1, BLOCK_N=block_n, num_warps=warps, programs_per_sm=pps,
                                 num_stages=stages, flat=True)
        return
    for block_n, warps in itertools.product((1024, 2048, 4096), (2, 4, 8)):
        if block_n // (32 * warps) <= 16:
            yield FastConfig(BLOCK_M=1, BLOCK_N=block_n, num_warps=warps, programs_per_sm=None, num_stages=1,
                             flat=True)


def split_candidates(N: int, dtype: torch.dtype):
    """The split forward's candidates (:mod:`rmsnorm.split_forward`) for rows of N columns, N > 16384.

    Rows over 2 to 32 programs of 8192, 16384 or 32768 columns each, at 16 or 32 elements a thread (8, 16 or
    32 warps), and every program with columns of the row to hold. One program per SM, or two where both fit
    (all must be resident at once, as the cooperative launch requires): warps × programs at most 32, and
    warps × programs × elements a thread at most 512. ptxas for sm_90 gives a program 60-63 registers a thread
    at 8192 columns on 8 or 16 warps, but 82 at 16 warps of 32 columns a thread, two of which exceed an SM's
    65536 registers. ``dtype`` is not consulted: a program holds its columns as float32 whatever the row's
    dtype.

    Yields:
        :class:`rmsnorm.FastConfig` with ``split`` > 1; none for N ≤ 16384.
    """
    if N <= 16384:
        return
    for split, per_thread, pps in itertools.product((2, 4, 8, 16, 32), (16, 32), (1, 2)):
        block_n = triton.next_power_of_2(-(-N // split))
        warps = block_n // (32 * per_thread)
        resident = pps == 1 or warps * pps * per_thread <= 512  # the registers of pps programs fit an SM
        if 8192 <= block_n <= 32768 and warps in (8, 16, 32) and warps * pps <= 32 and resident and (
                split - 1) * block_n < N:
            yield FastConfig(BLOCK_M=1, BLOCK_N=block_n, num_warps=warps, programs_per_sm=pps, num_stages=1,
                             split=split)


def _once_and_static(configs, N: int):
    """Each configuration once, and where N is not a power of two also with ``static_n`` flipped."""
    seen = set()
    for config in configs:
        variants = (config, dataclasses.replace(config, static_n=not config.static_n)) if N & (N - 1) else (config,)
        for variant in variants:
            if variant not in seen:
                seen.add(variant)
                yield variant


def _forward_candidates(N: int, dtype: torch.dtype):
    """:func:`forward_candidates`, a configuration possibly more than once."""
    base = forward_config(N, dtype)
    if base.BLOCK_N <= SHORT_ROW_MAX_BLOCK_N["forward"]:  # tiles of 2048 to 16384 elements
        yield base
        for tile, warps, (pps, stages) in itertools.product(SHORT_ROW_TILES, (4, 8), [(None, 1), (4, 1), (8, 1)]):
            yield FastConfig(BLOCK_M=max(1, tile // base.BLOCK_N), BLOCK_N=base.BLOCK_N,
                             num_warps=16 if tile == 16384 else warps, programs_per_sm=pps, num_stages=stages)
        return
    block_ms = _around(base.BLOCK_M) if base.one_block(N) else [1, 2, 4]  # looped: rows share the weight's loads
    persist = [(None, 1), (4, 1), (4, 3), (8, 1), (8, 3)]
    for block_m, warps, (pps, stages) in itertools.product(block_ms, (4, 8, 16), persist):
        if base.one_block(N) and (warps == 16) != (block_m * base.BLOCK_N >= 16384):
            continue
        yield FastConfig(BLOCK_M=block_m, BLOCK_N=base.BLOCK_N, num_warps=warps, programs_per_sm=pps, num_stages=stages)
    if base.one_block(N) and base.BLOCK_N <= 512:  # 2 warps: sweep 13's best at 65536 x 257 bf16 (N compiled in);
        # 1 warp of 2 rows: Inductor's forward there (results/h200/ncu_probe.csv), 0.80x of its time
        for warps, block_m in itertools.product((1, 2), sorted({1, 2, 4, *block_ms})):
            if block_m * base.BLOCK_N > 64 * 32 * warps:  # more than 64 elements a thread: spilled
                continue
            yield FastConfig(BLOCK_M=block_m, BLOCK_N=base.BLOCK_N, num_warps=warps, programs_per_sm=None, num_stages=1)
    if N >= 4096 and (base.one_block(N) or base.BLOCK_N < 4096):  # the loop rung, whichever of the two the table takes
        for block_n, warps in itertools.product((2048, 4096), (8, 16)):
            if block_n < N:
                yield FastConfig(BLOCK_M=1, BLOCK_N=block_n, num_warps=warps, programs_per_sm=None, num_stages=1)
    if not base.one_block(N) and N <= 65536:  # the whole row in one block instead of the loop, read once
        for warps in (8, 16, 32) if N <= 32768 else (32,):  # past 32768, 32 warps or ptxas spills the row
            yield FastConfig(BLOCK_M=1, BLOCK_N=triton.next_power_of_2(N), num_warps=warps, programs_per_sm=None,
                             num_stages=1)
    if not base.one_block(N):  # wider loop blocks with a warp per 256-512 elements (wide rows, one row a program)
        for block_n, warps in itertools.product((8192, 16384), (16, 32)):
            if block_n < N:
                yield FastConfig(BLOCK_M=1, BLOCK_N=block_n, num_warps=warps, programs_per_sm=None, num_stages=1)
                for pps in (1, 2) if N >= 65536 else ():  # fewer rows in flight: the second read from the L2
                    yield FastConfig(BLOCK_M=1, BLOCK_N=block_n, num_warps=warps, programs_per_sm=pps, num_stages=1)


def backward_candidates(N: int, dtype: torch.dtype, table: Callable = backward_config, norm: str = "rmsnorm"):
    """The backward's candidates for rows of N columns in ``dtype``: the table's choice and its neighbours.

    Rows of at most 64 columns: tiles of 4096-16384 elements, 4 or 8 warps, 1-4 programs per SM,
    1 or 3 stages. Other one-block rows: rows per step, 8 or 16 warps, 1-2 programs per SM, 2-4
    stages; where N is odd (rows at 2- or 4-byte offsets, no 16-byte access, no cp.async of 16
    bytes) also 4 warps (and 2 for blocks of at most 512 columns), 4 programs per SM and 1 stage, and from
    N = 2049, where the row's block is half masked at worst, loops of 1024 or 2048 columns (4 or 8 warps, 1-4
    programs per SM). Looped rows (and blocks wider than 8192): the loop's block of 2048-8192 with 1-4
    programs per SM, and one block of 16384.

    Where N is not a power of two, each configuration also with N compiled in (``static_n``). ``table`` is the
    norm's backward table (:attr:`Norm.backward_config`). For the plain RMSNorm (``norm``) also the flat
    backward at short rows (:func:`flat_candidates`).

    Yields:
        :class:`rmsnorm.FastConfig`, the table's own among them.
    """
    yield from _once_and_static(_backward_candidates(N, dtype, table), N)
    if norm == "rmsnorm":
        yield from flat_candidates(N, dtype, "backward")


def _backward_candidates(N: int, dtype: torch.dtype, table: Callable = backward_config):
    """:func:`backward_candidates`, a configuration possibly more than once."""
    base = table(N, dtype)
    if not base.one_block(N) or base.BLOCK_N > 8192:  # the column loop, and one block of 16384
        for block_n, warps, pps in itertools.product((2048, 4096, 8192), (8, 16), (1, 2, 4)):
            if block_n < N:
                yield FastConfig(BLOCK_M=1, BLOCK_N=block_n, num_warps=warps, programs_per_sm=pps, num_stages=1)
        if N <= 16384:
            for warps, stages in itertools.product((16, 32), (1, 2)):
                yield FastConfig(BLOCK_M=1, BLOCK_N=16384, num_warps=warps, programs_per_sm=1, num_stages=stages)
        return
    if base.BLOCK_N <= SHORT_ROW_MAX_BLOCK_N["backward"]:  # tiles of 4096 to 16384 elements
        yield base
        for tile, warps, pps, stages in itertools.product(SHORT_ROW_TILES[1:], (4, 8), (1, 2, 4), (1, 3)):
            yield FastConfig(BLOCK_M=max(1, tile // base.BLOCK_N), BLOCK_N=base.BLOCK_N, num_warps=warps,
                             programs_per_sm=pps, num_stages=stages)
        return
    odd = N % 2 == 1
    if odd and base.BLOCK_N >= 4096:  # half the block masked: a loop of narrower blocks wastes fewer lanes
        for block_n, warps, pps in itertools.product((1024, 2048), (4, 8), (1, 2, 4)):
            yield FastConfig(BLOCK_M=1, BLOCK_N=block_n, num_warps=warps, programs_per_sm=pps, num_stages=1)
    for block_m, warps, pps, stages in itertools.product(
        _around(base.BLOCK_M)[:3], ((2, 4, 8, 16) if base.BLOCK_N <= 512 else (4, 8, 16)) if odd else (8, 16),
        (1, 2, 4) if odd else (1, 2),
        (1, 2, 3, 4) if odd else (2, 3, 4),
    ):
        yield FastConfig(BLOCK_M=block_m, BLOCK_N=base.BLOCK_N, num_warps=warps, programs_per_sm=pps, num_stages=stages)


def library_choice(pass_: str, N: int, dtype: torch.dtype, norm: str = "rmsnorm") -> FastConfig:
    """The configuration the library launches ``norm``'s ``pass_`` with on the sweep's inputs (contiguous rows).

    The norm's blocked tables (:attr:`Norm.forward_config`, :attr:`Norm.backward_config`) choose it; on dense rows
    the plain RMSNorm may take a flat rule instead (``dense_rows``), and that is the choice a sweep is read
    against.
    """
    dense = NORMS[norm].flat_rules
    if pass_ == "forward":
        return forward_config(N, dtype, dense) if dense else NORMS[norm].forward_config(N, dtype)
    return backward_config(N, dtype, True) if dense else NORMS[norm].backward_config(N, dtype)


def config_of(row) -> FastConfig:
    """The configuration one sweep row describes (a row of ``fast_tuning.csv`` or of :func:`tune`'s result).

    The inverse of the config columns :func:`tune` writes: ``programs_per_sm`` is empty (NaN) where
    the grid has one program per row block (None). Other columns are ignored, among them
    ``reverse_second_pass``: history, a knob the kernels no longer have (the second pass of a looped
    row from its last block; results/h200/README.md says which rows have it).

    Args:
        row: a mapping (a pandas row, a dict) with BLOCK_M, BLOCK_N, num_warps, programs_per_sm, num_stages,
            and ``static_n`` where the sweep had the knob (True, or the text "True" as a CSV cell reads).

    Returns:
        :class:`rmsnorm.FastConfig`, comparable with the table's choice
        (``config_of(row) == backward_config(N, dtype)``).
    """
    pps = row["programs_per_sm"]
    static_n = row.get("static_n", False)  # empty (NaN) in the sweeps before the knob: N at run time
    split = row.get("split", 1)  # empty (NaN) in the sweeps before the knob: a row is one program's
    flat = row.get("flat", False)  # empty (NaN) in the sweeps before the knob
    return FastConfig(BLOCK_M=int(row["BLOCK_M"]), BLOCK_N=int(row["BLOCK_N"]), num_warps=int(row["num_warps"]),
                      programs_per_sm=None if pps is None or pps != pps else int(pps),
                      num_stages=int(row["num_stages"]), static_n=static_n is True or static_n in ("True", 1.0),
                      split=1 if split is None or split != split else int(split),
                      flat=flat is True or flat in ("True", 1.0))


def table_against_sweep(sweep: pd.DataFrame, norm: str = "rmsnorm") -> pd.DataFrame:
    """One committed sweep, per (dtype, N, M, pass_): the table when swept, the table today, the sweep's best (µs).

    Args:
        sweep: rows of ``fast_tuning.csv`` (or ``<norm>_tuning.csv``) from one sweep that has the
            ``table_when_swept`` column (the runs that recorded it); failed rows (``us`` NaN) are left out.
        norm: the key of :data:`NORMS` whose tables "today" means.

    Returns:
        DataFrame indexed by (dtype, N, M, pass_) (a sweep may time one width at several M) with
        columns ``then`` (the fastest row of the table's
        configuration at the time of the sweep), ``now`` (the fastest row of the configuration the norm's
        tables choose today) and
        ``best``; NaN where today's configuration was not a candidate of that sweep. Today's configuration is
        :func:`library_choice`'s: on the sweep's contiguous rows, a flat rule's where one applies.
    """
    timed = sweep[sweep["us"].notna()]
    today = timed.apply(lambda r: config_of(r) == library_choice(r["pass_"], int(r["N"]), getattr(torch, r["dtype"]),
                                                                 norm), axis=1)
    keys = ["dtype", "N", "M", "pass_"]
    return pd.DataFrame({"then": timed[timed["table_when_swept"] == 1].groupby(keys)["us"].min(),
                         "now": timed[today].groupby(keys)["us"].min(),
                         "best": timed.groupby(keys)["us"].min()})


def _compile_one(M: int, N: int, dtype: torch.dtype, weight_dtype, pass_: str, configs, norm: str = "rmsnorm") -> int:
    """Compile ``configs`` for one shape and pass in this process (Triton's disk cache keeps them); how many failed.

    Runs each on a few rows whose count Triton specialises like M's (divisible by 16 or not), so
    that the kernels it compiles are the ones M rows will look up.
    """
    rows = 1024 + M % 16 if M > 1024 else M
    launch = NORMS[norm]
    x, weight, extra, dy = inputs(norm, rows, N, dtype, weight_dtype)
    saved = launch.forward(x, weight, extra)
    failed = 0
    for cfg in configs:
        try:
            if pass_ == "forward":
                launch.forward(x, weight, extra, cfg)
            else:
                launch.backward(x, weight, extra, saved, dy, cfg)
        except Exception:  # noqa: BLE001  (the timed run records the error)
            failed += 1
    torch.cuda.synchronize()
    return failed


def precompile(shapes, passes, workers: int, norm: str = "rmsnorm") -> None:
    """Compile every candidate of ``shapes`` in ``workers`` processes first, so that :func:`tune` times, not compiles.

    Triton compiles one configuration in about a second on one CPU core; a sweep of hundreds
    spends most of its budget there unless the compiles run side by side. Each worker fills
    Triton's on-disk cache; the timing process then loads the kernels from it.
    """
    table = NORMS[norm].backward_config
    jobs = [(M, N, dtype, weight[0] if weight else None, pass_,
             list(forward_candidates(N, dtype, norm) if pass_ == "forward"
                  else backward_candidates(N, dtype, table, norm)))
            for M, N, dtype, *weight in shapes for pass_ in passes]
    chunks = [(*job[:5], job[5][i::4], norm) for job in jobs for i in range(4)]  # 4 pieces a job: even loads
    with concurrent.futures.ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn")) as pool:
        failed = sum(pool.map(_compile_one, *zip(*chunks)))
    print(f"  precompiled {sum(len(c[5]) for c in chunks)} configurations in {workers} processes ({failed} failed)")


def tune(shapes, budget_s: float, passes=("forward", "backward"), compile_workers: int = 0, norm: str = "rmsnorm",
         device="cuda") -> list[dict]:
    """Time every candidate config of every shape, each checked against the table's own output first.

    Args:
        shapes: (M, N, dtype) or (M, N, dtype, weight dtype), on CUDA.
        budget_s: seconds the whole sweep may take; it stops (and says so) when spent.
        passes: ``"forward"`` and/or ``"backward"``.
        compile_workers: when above 0, :func:`precompile` every candidate in this many processes first.
        norm: a key of :data:`NORMS`: ``"rmsnorm"`` or ``"layernorm"``.
        device: where the inputs are drawn (the CPU only under the interpreter, with a stand-in timer).

    Returns:
        One dict per candidate: M, N, dtype (a name), pass_, norm, weight_dtype, the config's fields, us
        (L2-cold kernel time, µs; NaN when it failed), error ("" or the failure in one line) and
        table_when_swept (1 for the table's own configuration, else 0: what the sweep is read against).

    Raises:
        BenchmarkUnavailableError: no CUDA GPU.
    """
    rows = []
    started = time.perf_counter()
    launch = NORMS[norm]
    if compile_workers > 0:
        precompile(shapes, passes, compile_workers, norm)
    for M, N, dtype, *weight_dtypes in shapes:
        weight_dtype = weight_dtypes[0] if weight_dtypes else None
        x, weight, extra, dy = inputs(norm, M, N, dtype, weight_dtype, device)
        saved = launch.forward(x, weight, extra)
        dx0, *grads0 = launch.backward(x, weight, extra, saved, dy)
        sweeps = {"forward": forward_candidates(N, dtype, norm),
                  "backward": backward_candidates(N, dtype, launch.backward_config, norm)}
        table = {p: library_choice(p, N, dtype, norm) for p in ("forward", "backward")}
        for pass_, cands in ((p, sweeps[p]) for p in passes):
            for cfg in cands:
                if time.perf_counter() - started > budget_s:
                    print(f"  tuning budget of {budget_s:.0f} s spent; stopping")
                    return rows
                try:
                    if pass_ == "forward":  # y in x's dtype; what the backward reads (rstd, mean) in theirs
                        fn = lambda cfg=cfg: launch.forward(x, weight, extra, cfg)  # noqa: E731
                        for got, want in zip(fn(), saved, strict=True):
                            torch.testing.assert_close(got, want, **TOLERANCES[want.dtype])
                    else:
                        fn = lambda cfg=cfg: launch.backward(x, weight, extra, saved, dy, cfg)  # noqa: E731
                        dx, *grads = fn()
                        torch.testing.assert_close(dx, dx0, **TOLERANCES[dtype])
                        for got, want in zip(grads, grads0, strict=True):
                            torch.testing.assert_close(got.double(), want.double(),
                                                       **dgamma_tolerance(M, dtype, weight.dtype))
                    us = kernel_time_us(fn, calls=10, warmup=2)
                    error = ""
                except Exception as err:  # noqa: BLE001
                    us, error = float("nan"), f"{type(err).__name__}: {str(err)[:200]}"
                rows.append(dict(M=M, N=N, dtype=str(dtype).removeprefix("torch."), pass_=pass_, norm=norm,
                                 weight_dtype=str(weight.dtype).removeprefix("torch."), **cfg.__dict__,
                                 us=us, error=error, table_when_swept=int(cfg == table[pass_])))
        key = (M, N, str(dtype).removeprefix("torch."))
        timed = [r for r in rows if (r["M"], r["N"], r["dtype"]) == key and r["us"] == r["us"]]  # NaN: failed
        best = {p: min((r for r in timed if r["pass_"] == p), key=lambda r: r["us"], default=None)
                for p in ("forward", "backward")}
        for p, r in best.items():
            if r:
                print(f"  tune {M}x{N} {dtype} {p}: best {r['us']:.1f} us with "
                      f"{ {k: r[k] for k in ('BLOCK_M', 'BLOCK_N', 'num_warps', 'programs_per_sm', 'num_stages')} }")
    return rows

"""The fused one-pass backward: dx and the dgamma partials in one read of x and dy.

With x̂ = x · rstd (rstd saved by the forward) and u = dy · (weight + offset), for a row:

    dx = rstd · (u − x̂ · mean(u · x̂))           (the article's formula, rearranged)
    dgamma = Σ_rows dy · x̂                     (d(weight + offset)/dweight = 1: the offset drops out)

The article's backward wrote every row's dy · x̂ to an (M, N) float32 buffer
and read it back in a second kernel. Here a **persistent grid** of P programs
(a few per SM) walks the rows: program p takes row blocks p, p + P, p + 2P, …,
writes their dx, and keeps its share of dgamma in a float32 accumulator in
registers. At the end each program writes one row of a (P, N) float32 buffer;
:func:`rmsnorm_fast_dgamma_kernel` sums its P rows in a fixed order and casts
to weight's dtype. No atomics: dgamma is bitwise identical from run to run.
Inductor calls the same fusion MixOrderReduction; Liger and quack do it too.

Precision: the row arithmetic runs in float32, except for float32 rows of
at most ``config.FLOAT64_MAX_N`` columns, where it runs in float64
(:func:`~rmsnorm.config.row_arithmetic_dtype`). When N is small, u − x̂ · mean(u · x̂)
cancels (at N = 1 it is u · (1 − x̂²)), and float32 rounding of x̂ and of the
mean then costs a large share of the article's float32 tolerance; in float64
only the saved float32 rstd limits it. Past a few columns the cancellation
fades, and float64 arithmetic on wide rows costs twice the registers and a
conversion per element each way for nothing. The partials stay float32.

Rows wider than one block (N > BLOCK_N): mean(u · x̂) needs the whole row
before any dx, and a program cannot hold a row of 262144 in registers. Pass 1
walks the program's rows and stores each row's mean(u · x̂) in an (M,)
scratch (in the row arithmetic's dtype); pass 2 walks the column blocks and, inside, the program's
rows, so that one block's share of dgamma stays in registers and is stored
once. x and dy are read twice (5·M·N·s bytes instead of 3·M·N·s), which
costs less than read-modify-writing a float32 partial row per data row.

The fused residual add runs this kernel on h = residual_out with ``HAS_DRES`` on: dx becomes the
gradient of h, the norm's dx + d_residual_out (which the forward's add passes on to both x and
residual). Off (the default), none of it is compiled (tests/library/test_plain_ptx.py).

Source: notebooks/10_one_pass_backward.ipynb; Liger-Kernel
``ops/rms_norm.py`` (``rms_norm_backward``); quack ``rmsnorm.py``.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from . import device, native_launch
from .config import (
    FastConfig,
    aligned,
    backward_config,
    dense_rows,
    layernorm_backward_config,
    num_programs,
    row_align_hint,
    row_arithmetic_dtype,
    shifted_weight,
)
from .contract import ContractError, check_fast_backward_inputs, check_offset
from .launch import DirectLauncher

#: Column block and row block of the dgamma reduction kernel.
REDUCE_BLOCK_N = 128
REDUCE_BLOCK_P = 32
#: The Triton dtype of each row arithmetic (the kernel's COMPUTE constexpr).
TRITON_DTYPE = {torch.float64: tl.float64, torch.float32: tl.float32}


@triton.jit
def _backward_one_block(
    x_ptr, x_row_stride, weight_ptr, rstd_ptr, dy_ptr, dy_row_stride, dx_ptr, dx_row_stride, partial_row, M, N,
    dres_ptr, dres_row_stride, mean_ptr, bias_partial_row, HAS_WEIGHT: tl.constexpr, OFFSET: tl.constexpr,
    COMPUTE: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, NUM_STAGES: tl.constexpr,
    HAS_DRES: tl.constexpr, IS_LAYERNORM: tl.constexpr, HAS_BIAS: tl.constexpr,
):
    """Rows that fit one block: BLOCK_M rows per step, dgamma summed in registers (arguments as in the kernel)."""
    pid = tl.program_id(0)
    cols = tl.arange(0, BLOCK_N)
    col_mask = cols < N
    if HAS_WEIGHT:
        weight = shifted_weight(tl.load(weight_ptr + cols, mask=col_mask, other=0.0), OFFSET, COMPUTE)
    dgamma_acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
    if HAS_BIAS:
        dbias_acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
    for block in tl.range(pid, tl.cdiv(M, BLOCK_M), tl.num_programs(0), num_stages=NUM_STAGES):  # no row twice
        rows = tl.cast(block, tl.int64) * BLOCK_M + tl.arange(0, BLOCK_M)
        row_mask = rows < M
        mask = row_mask[:, None] & col_mask[None, :]
        x = tl.load(x_ptr + rows[:, None] * x_row_stride + cols[None, :], mask=mask, other=0.0).to(COMPUTE)
        dy = tl.load(dy_ptr + rows[:, None] * dy_row_stride + cols[None, :], mask=mask, other=0.0).to(COMPUTE)
        rstd = tl.load(rstd_ptr + rows, mask=row_mask, other=0.0).to(COMPUTE)
        if IS_LAYERNORM:  # masked columns: x̂ is −mean · rstd there, but u and dy are 0
            x_hat = (x - tl.load(mean_ptr + rows, mask=row_mask, other=0.0).to(COMPUTE)[:, None]) * rstd[:, None]
        else:
            x_hat = x * rstd[:, None]
        u = dy
        if HAS_WEIGHT:
            u = dy * weight[None, :]
        mean_ux = tl.sum(u * x_hat, axis=1) / N  # (BLOCK_M,)
        if IS_LAYERNORM:
            dx = (u - x_hat * mean_ux[:, None] - (tl.sum(u, axis=1) / N)[:, None]) * rstd[:, None]
        else:
            dx = (u - x_hat * mean_ux[:, None]) * rstd[:, None]
        if HAS_DRES:
            dx += tl.load(dres_ptr + rows[:, None] * dres_row_stride + cols[None, :], mask=mask, other=0.0).to(COMPUTE)
        tl.store(dx_ptr + rows[:, None] * dx_row_stride + cols[None, :], dx, mask=mask)
        if HAS_WEIGHT:
            dgamma_acc += (dy * x_hat).to(tl.float32)  # float32, in registers
        if HAS_BIAS:
            dbias_acc += dy.to(tl.float32)
    if HAS_WEIGHT:
        tl.store(partial_row + cols, tl.sum(dgamma_acc, axis=0), mask=col_mask)
    if HAS_BIAS:
        tl.store(bias_partial_row + cols, tl.sum(dbias_acc, axis=0), mask=col_mask)


@triton.jit
def _backward_looped(
    x_ptr, x_row_stride, weight_ptr, rstd_ptr, dy_ptr, dy_row_stride, dx_ptr, dx_row_stride, partial_row,
    mean_ux_ptr, M, N, dres_ptr, dres_row_stride, mean_ptr, bias_partial_row, mean_u_ptr, HAS_WEIGHT: tl.constexpr,
    OFFSET: tl.constexpr, COMPUTE: tl.constexpr, BLOCK_N: tl.constexpr, HAS_DRES: tl.constexpr,
    IS_LAYERNORM: tl.constexpr, HAS_BIAS: tl.constexpr,
):
    """Rows wider than one block: two passes over the program's rows (arguments as in the kernel)."""
    pid = tl.program_id(0)
    P = tl.num_programs(0)
    cols = tl.arange(0, BLOCK_N)
    # pass 1, row by row: mean(u · x̂) over the whole row, kept in the (M,) scratch
    for row in tl.range(pid, M, P):
        row64 = tl.cast(row, tl.int64)
        rstd = tl.load(rstd_ptr + row64).to(COMPUTE)
        ux = tl.zeros([BLOCK_N], dtype=COMPUTE)
        if IS_LAYERNORM:  # and mean(u) in the (M,) scratch mean_u; x − mean, not x: no cancellation
            mean = tl.load(mean_ptr + row64).to(COMPUTE)
            u_sum = tl.zeros([BLOCK_N], dtype=COMPUTE)
        for start in range(0, N, BLOCK_N):
            c = start + cols
            mask = c < N
            x = tl.load(x_ptr + row64 * x_row_stride + c, mask=mask, other=0.0).to(COMPUTE)
            u = tl.load(dy_ptr + row64 * dy_row_stride + c, mask=mask, other=0.0).to(COMPUTE)
            if HAS_WEIGHT:
                u = u * shifted_weight(tl.load(weight_ptr + c, mask=mask, other=0.0), OFFSET, COMPUTE)
            if IS_LAYERNORM:
                ux += u * (x - mean)
                u_sum += u
            else:
                ux += u * x
        tl.store(mean_ux_ptr + row64, tl.sum(ux, axis=0) * rstd / N)
        if IS_LAYERNORM:
            tl.store(mean_u_ptr + row64, tl.sum(u_sum, axis=0) / N)
    # pass 2, column block by column block, this program's rows inside: dx, and the block's
    # share of dgamma summed in registers, stored once per block (no read-modify-write)
    for start in range(0, N, BLOCK_N):
        c = start + cols
        mask = c < N
        if HAS_WEIGHT:
            weight = shifted_weight(tl.load(weight_ptr + c, mask=mask, other=0.0), OFFSET, COMPUTE)
        dgamma_acc = tl.zeros([BLOCK_N], dtype=tl.float32)
        if HAS_BIAS:
            dbias_acc = tl.zeros([BLOCK_N], dtype=tl.float32)
        for row in tl.range(pid, M, P):
            row64 = tl.cast(row, tl.int64)
            rstd = tl.load(rstd_ptr + row64).to(COMPUTE)
            mean_ux = tl.load(mean_ux_ptr + row64).to(COMPUTE)
            if IS_LAYERNORM:
                x = tl.load(x_ptr + row64 * x_row_stride + c, mask=mask, other=0.0).to(COMPUTE)
                x_hat = (x - tl.load(mean_ptr + row64).to(COMPUTE)) * rstd
            else:
                x_hat = tl.load(x_ptr + row64 * x_row_stride + c, mask=mask, other=0.0).to(COMPUTE) * rstd
            dy = tl.load(dy_ptr + row64 * dy_row_stride + c, mask=mask, other=0.0).to(COMPUTE)
            u = dy
            if HAS_WEIGHT:
                u = dy * weight
            if IS_LAYERNORM:
                dx = (u - x_hat * mean_ux - tl.load(mean_u_ptr + row64).to(COMPUTE)) * rstd
            else:
                dx = (u - x_hat * mean_ux) * rstd
            if HAS_DRES:
                dx += tl.load(dres_ptr + row64 * dres_row_stride + c, mask=mask, other=0.0).to(COMPUTE)
            tl.store(dx_ptr + row64 * dx_row_stride + c, dx, mask=mask)
            if HAS_WEIGHT:
                dgamma_acc += (dy * x_hat).to(tl.float32)
            if HAS_BIAS:
                dbias_acc += dy.to(tl.float32)
        if HAS_WEIGHT:
            tl.store(partial_row + c, dgamma_acc, mask=mask)
        if HAS_BIAS:
            tl.store(bias_partial_row + c, dbias_acc, mask=mask)


@triton.jit
def rmsnorm_fast_backward_kernel(
    x_ptr,  # (M, N) forward input, unit column stride
    x_row_stride,  # elements between rows of x
    weight_ptr,  # (N,) weight; unused when HAS_WEIGHT is False
    rstd_ptr,  # (M,) float32 from the forward
    dy_ptr,  # (M, N) upstream gradient, dtype of x (16-bit with a float32 x: the fused add), unit column stride
    dy_row_stride,  # elements between rows of dy
    dx_ptr,  # (M, N) output, dtype of x
    dx_row_stride,  # elements between rows of dx
    partial_ptr,  # (P, N) float32 output: program p's share of dgamma in row p
    mean_ux_ptr,  # (M,) scratch (dtype COMPUTE) for mean(u · x̂) when ONE_BLOCK is False, else unused
    M,  # rows
    N,  # real row length: means divide by N, never by BLOCK_N
    HAS_WEIGHT: tl.constexpr,  # False: u = dy and no dgamma
    OFFSET: tl.constexpr,  # u = dy · (weight + OFFSET), as in the forward; dgamma does not depend on it
    COMPUTE: tl.constexpr,  # dtype of the row arithmetic (row_arithmetic_dtype: float64 for short float32 rows)
    ONE_BLOCK: tl.constexpr,  # True when N <= BLOCK_N
    BLOCK_M: tl.constexpr,  # rows per step (1 when ONE_BLOCK is False)
    BLOCK_N: tl.constexpr,  # columns per block (a power of two)
    NUM_STAGES: tl.constexpr,  # software pipelining depth of the row loop
    ROW_ALIGN: tl.constexpr,  # a power of two dividing N and every row stride (see config.row_alignment)
    # the fused add (rmsnorm_add); the plain norm leaves these at None/False, which compiles none of it
    dres_ptr=None,  # (M, N) gradient of residual_out, dtype of dx, unit column stride
    dres_row_stride=None,  # elements between rows of dres
    HAS_DRES: tl.constexpr = False,  # True: dx = the norm's dx + dres (the gradient of h = x + residual)
    STATIC_N: tl.constexpr = 0,  # > 0: N itself, compiled in (FastConfig.static_n); 0: N is the run-time argument
    # LayerNorm (rmsnorm.layernorm); the RMSNorm leaves these at None/False, which compiles none of it
    mean_ptr=None,  # (M,) float32 from the forward
    bias_partial_ptr=None,  # (P, N) float32 output: program p's share of dbias in row p
    mean_u_ptr=None,  # (M,) scratch (dtype COMPUTE) for mean(u) when ONE_BLOCK is False, else unused
    IS_LAYERNORM: tl.constexpr = False,  # True: x̂ = (x − mean) · rstd, dx = rstd · (u − x̂ · mean(u · x̂) − mean(u))
    HAS_BIAS: tl.constexpr = False,  # True: dbias = Σ_rows dy, summed as dgamma is
):
    tl.static_assert(not (IS_LAYERNORM and HAS_DRES), "the fused add is RMSNorm's only")
    if STATIC_N > 0:  # the masks of the columns always in range fold away, and the registers they took
        N = STATIC_N
    else:  # Triton knows an integer argument's divisibility only by 16: say what the launcher checked
        N = aligned(N, ROW_ALIGN)
    x_row_stride = aligned(x_row_stride, ROW_ALIGN)
    dy_row_stride = aligned(dy_row_stride, ROW_ALIGN)
    dx_row_stride = aligned(dx_row_stride, ROW_ALIGN)
    if HAS_DRES:
        dres_row_stride = aligned(dres_row_stride, ROW_ALIGN)
    partial_row = partial_ptr + tl.program_id(0).to(tl.int64) * N
    bias_partial_row = bias_partial_ptr
    if HAS_BIAS:
        bias_partial_row = bias_partial_ptr + tl.program_id(0).to(tl.int64) * N
    if ONE_BLOCK:
        _backward_one_block(x_ptr, x_row_stride, weight_ptr, rstd_ptr, dy_ptr, dy_row_stride, dx_ptr, dx_row_stride,
                            partial_row, M, N, dres_ptr, dres_row_stride, mean_ptr, bias_partial_row, HAS_WEIGHT,
                            OFFSET, COMPUTE, BLOCK_M, BLOCK_N, NUM_STAGES, HAS_DRES, IS_LAYERNORM, HAS_BIAS)
    else:
        _backward_looped(x_ptr, x_row_stride, weight_ptr, rstd_ptr, dy_ptr, dy_row_stride, dx_ptr, dx_row_stride,
                         partial_row, mean_ux_ptr, M, N, dres_ptr, dres_row_stride, mean_ptr, bias_partial_row,
                         mean_u_ptr, HAS_WEIGHT, OFFSET, COMPUTE, BLOCK_N, HAS_DRES, IS_LAYERNORM, HAS_BIAS)


@triton.jit
def rmsnorm_fast_dgamma_kernel(
    partial_ptr,  # (P, N) float32, contiguous: one row per backward program
    dgamma_ptr,  # (N,) output, dtype of weight
    P,  # rows of partial
    N,  # columns
    BLOCK_P: tl.constexpr,  # partial rows per step
    BLOCK_N: tl.constexpr,  # columns per program
    ROW_ALIGN: tl.constexpr,  # a power of two dividing N (see config.row_alignment)
):
    N = aligned(N, ROW_ALIGN)
    cols = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    col_mask = cols < N
    acc = tl.zeros([BLOCK_P, BLOCK_N], dtype=tl.float32)
    for start in range(0, P, BLOCK_P):  # a fixed order: the same sum on every run
        p = start + tl.arange(0, BLOCK_P)
        mask = (p < P)[:, None] & col_mask[None, :]
        acc += tl.load(partial_ptr + p[:, None].to(tl.int64) * N + cols[None, :], mask=mask, other=0.0)
    tl.store(dgamma_ptr + cols, tl.sum(acc, axis=0), mask=col_mask)  # cast to weight's dtype


def rmsnorm_fast_backward(
    x: torch.Tensor, weight: torch.Tensor | None, rstd: torch.Tensor, dy: torch.Tensor,
    *, config: FastConfig | None = None, offset: float = 0.0,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Launch the fused backward and the fixed-order dgamma sum.

    Args:
        x: (M, N) forward input (fast contract: float32/float16/bfloat16,
            unit column stride, any row stride, 1 ≤ N ≤ 262144).
        weight: (N,) γ, or None (then dgamma is None).
        rstd: (M,) float32, unit stride, from :func:`rmsnorm_fast_forward`.
        dy: (M, N) upstream gradient, dtype of ``x``, unit column stride, any
            row stride.
        config: launch configuration; default :func:`backward_config` (N, x.dtype, dense_rows), dense_rows
            ``x.is_contiguous() and dy.is_contiguous()``: on contiguous rows a flat rule where one applies (odd
            16-bit N of 3-65, odd float32 N of 3-15), so the default may differ from an explicit
            ``config=backward_config(N, x.dtype)`` (the blocked choice), within the declared tolerance.
        offset: the forward's offset (u = dy · (weight + offset)); 0.0 without a weight.

    Returns:
        (dx, dgamma): dx is (M, N) contiguous in the dtype of ``x``; dgamma is
        (N,) in the dtype of ``weight`` (zeros when M = 0), or None. Scratch:
        (P, N) float32, P = SMs × programs_per_sm (at most the row blocks),
        plus (M,) in :func:`row_arithmetic_dtype` when the row is wider than one block.

    Raises:
        ContractError: (a ValueError) for anything outside the contract,
            before anything is allocated.

    Source: notebooks/10_one_pass_backward.ipynb.
    """
    check_fast_backward_inputs(x, weight, rstd, dy)
    check_offset(offset, weight)
    return launch_backward(x, weight, rstd, dy, config, float(offset))


_launch = DirectLauncher(rmsnorm_fast_backward_kernel)
_launch_dgamma = DirectLauncher(rmsnorm_fast_dgamma_kernel)


def launch_backward(
    x: torch.Tensor, weight: torch.Tensor | None, rstd: torch.Tensor, dy: torch.Tensor,
    config: FastConfig | None = None, offset: float = 0.0, dres: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """:func:`rmsnorm_fast_backward` without its checks: for callers that have checked the inputs already.

    The fused add (:func:`rmsnorm.rmsnorm_add`) passes its residual_out as ``x`` (the norm's input h) and
    the gradient of residual_out as ``dres`` (x's dtype and shape, unit column stride): dx is then the
    gradient of h, the norm's dx + dres (HAS_DRES), in x's dtype; ``dy`` may then be 16-bit with a float32
    ``x`` (the float32 residual stream). Launches through :class:`~rmsnorm.launch.DirectLauncher`; with the native
    launch on and the default configuration, from one C call once a plan is kept (:mod:`rmsnorm.native_launch`,
    csrc/fast_path.cpp: the fused add's launches, with ``dres``, are their own kind there).
    """
    out = native_launch.launch_from_c("backward", config, x, weight, rstd, dy, offset, dres)  # plans run_backward kept
    if out is not None:
        return out
    return run_backward(x, weight, rstd, dy, config, offset, dres)[:2]


def run_backward(
    x: torch.Tensor, weight: torch.Tensor | None, rstd: torch.Tensor, dy: torch.Tensor,
    config: FastConfig | None = None, offset: float = 0.0, dres: torch.Tensor | None = None,
    mean: torch.Tensor | None = None, bias: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None]:
    """(dx, dgamma, dbias): :func:`launch_backward`, and the LayerNorm's when ``mean`` ((M,) float32) is given.

    The LayerNorm's backward (IS_LAYERNORM) reads the forward's mean beside rstd; with ``bias`` (whose dtype
    dbias takes) it also sums dbias = Σ_rows dy from its own (P, N) float32 partials, in the fixed order
    dgamma's are summed. dbias is None without a bias. ``config`` defaults to :func:`backward_config` (N, x's
    dtype, dense_rows): dense_rows for the plain RMSNorm (no ``dres``) whose x and dy are contiguous, where a flat
    rule may apply; for the LayerNorm to :func:`~rmsnorm.config.layernorm_backward_config`.
    """
    M, N = x.shape
    default = config is None
    if config is None:  # a flat rule may apply only to the plain RMSNorm's dense rows (dx is allocated contiguous)
        config = (backward_config(N, x.dtype, dres is None and dense_rows(x, dy)) if mean is None
                  else layernorm_backward_config(N, x.dtype))
    if config.flat:  # whole rows as one run of elements (rmsnorm.flat), refused before anything is allocated
        from .flat import check_flat_config

        if dres is not None or mean is not None:
            raise ContractError("the flat kernels (FastConfig.flat) are the plain RMSNorm's only, not the fused "
                                "add's or the LayerNorm's")
        check_flat_config(config, ("x", x), ("dy", dy), backward=True)
    dx = device.new_output((M, N), x.dtype, x.device)
    if M == 0:
        return dx, *(None if t is None else torch.zeros(N, dtype=t.dtype, device=x.device) for t in (weight, bias))
    if config.flat:
        from .flat import launch_flat_backward

        w = x if weight is None else weight
        partial = launch_flat_backward(x, weight, rstd, dy, config, offset, dx,
                                       TRITON_DTYPE[row_arithmetic_dtype(N, x.dtype)],
                                       backward_key(x, w, rstd, dy, dx, dx, rstd, config, True, 1, weight is not None)
                                       + (offset,))
        return dx, (None if weight is None else _sum_partials(partial, weight.dtype)), None
    one_block = config.one_block(N)
    block_m = config.BLOCK_M if one_block else 1
    P = num_programs(config, x.device, -(-M // block_m))
    partial = device.new_output((P, N), torch.float32, x.device) if weight is not None else dx
    compute = row_arithmetic_dtype(N, x.dtype)
    mean_ux = rstd if one_block else device.new_output((M,), compute, x.device)
    w = x if weight is None else weight
    strides = (x.stride(0), dy.stride(0), dx.stride(0)) + (() if dres is None else (dres.stride(0),))
    key = backward_key(x, w, rstd, dy, dx, partial, mean_ux, config, one_block, block_m, weight is not None, dres)
    bias_partial = mean_u = None
    if mean is not None:  # the LayerNorm's launches: their own entries (IS_LAYERNORM), and the bias's
        bias_partial = device.new_output((P, N), torch.float32, x.device) if bias is not None else None
        mean_u = rstd if one_block else device.new_output((M,), compute, x.device)
        key += (mean.data_ptr() & 15, mean_u.data_ptr() & 15) + (
            (None,) if bias is None else (bias.dtype, bias_partial.data_ptr() & 15))
    _launch(
        key + (offset,),
        (P,), x, x.stride(0), w, rstd, dy, dy.stride(0), dx, dx.stride(0), partial, mean_ux,
        M, N, weight is not None, offset, TRITON_DTYPE[compute],
        one_block, block_m, config.BLOCK_N, config.num_stages,
        row_align_hint(x.element_size(), N, *strides),
        dres, None if dres is None else dres.stride(0), dres is not None, config.static(N),
        mean, bias_partial, mean_u, mean is not None, bias is not None, num_warps=config.num_warps,
    )
    dgamma = None if weight is None else _sum_partials(partial, weight.dtype)
    dbias = None if bias is None else _sum_partials(bias_partial, bias.dtype)
    if default and native_launch.state.enabled:  # later calls of this kind launch from C (launch_backward, and
        # the LayerNorm's launch_layernorm_backward)
        layernorm = None if mean is None else (
            mean, bias, bias_partial, mean_u, dbias,
            (_launch_dgamma, None if dbias is None else _dgamma_key(bias_partial, dbias)))
        native_launch.remember_backward(
            (_launch, key + (offset,)), (_launch_dgamma, None if dgamma is None else _dgamma_key(partial, dgamma)),
            x, weight, rstd, dy, offset, (dx, partial, mean_ux, dgamma),
            (block_m, one_block, compute is torch.float64, REDUCE_BLOCK_N), config, dres, layernorm)
    return dx, dgamma, dbias


def _sum_partials(partial: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """(P, N) float32 partials → (N,) in ``dtype``: their sum over P in a fixed order, the same on every run."""
    P, N = partial.shape
    total = device.new_output((N,), dtype, partial.device)
    _launch_dgamma(
        _dgamma_key(partial, total), (-(-N // REDUCE_BLOCK_N),), partial, total, P, N, REDUCE_BLOCK_P,
        REDUCE_BLOCK_N, row_align_hint(total.element_size(), N), num_warps=4,
    )
    return total


def _dgamma_key(partial: torch.Tensor, total: torch.Tensor) -> tuple:
    """The dgamma kernel's direct-launch cache key: both tensors' dtypes and addresses mod 16, P's classes, N."""
    P, N = partial.shape
    return (partial.device.index, partial.dtype, total.dtype, partial.data_ptr() & 15, total.data_ptr() & 15,
            (P == 1, not P & 15, P >> 31), N)


def backward_key(x, w, rstd, dy, dx, partial, mean_ux, config: FastConfig, one_block: bool, block_m: int,
                 has_weight: bool, dres=None) -> tuple:
    """The fused backward's direct-launch cache key: all that Triton specialises the kernel on (see launch.py).

    The row strides and N by value, M by (== 1, mod 16, past 2³¹), each tensor's dtype (dy's too: the fused
    add's may differ from x's) and address mod 16, the config (its constexprs and ``num_warps``); for the
    fused add (HAS_DRES), dres's dtype, address mod 16 and row stride. The launcher adds the offset.
    """
    M, N = x.shape
    return (x.device.index, x.dtype, w.dtype, dy.dtype, partial.dtype, mean_ux.dtype,
            x.data_ptr() & 15, w.data_ptr() & 15, rstd.data_ptr() & 15, dy.data_ptr() & 15, dx.data_ptr() & 15,
            partial.data_ptr() & 15, mean_ux.data_ptr() & 15, x.stride(0), dy.stride(0), dx.stride(0),
            (M == 1, not M & 15, M >> 31), N, config, one_block, block_m, has_weight) + (
        () if dres is None else (dres.dtype, dres.data_ptr() & 15, dres.stride(0)))

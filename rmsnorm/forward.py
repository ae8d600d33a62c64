"""The fast forward: several rows per program when N is small, a column loop when N is large.

For each row: rstd = 1 / sqrt(mean(x²) + eps), y = x · rstd · (weight + offset),
computed in float32 and rounded once into y's dtype (the dtype of x). ``offset`` is 0 for
Llama's convention and 1 for the zero-centred one (Gemma, Qwen3.5: ``1 + weight``); it is
a constexpr, so offset = 0 compiles to the kernel without it.

Program p takes row blocks p, p + P, p + 2P, … (with P = the number of row
blocks, one block each; a configuration may make the grid persistent, a few
programs per SM). Two shapes of the same kernel, chosen at compile time by
``ONE_BLOCK``:

- the row fits one block (N ≤ BLOCK_N): a (BLOCK_M, BLOCK_N) tile of rows is
  loaded once, reduced along the row and written back;
- the row is wider (N > BLOCK_N): a first loop over column blocks sums x²,
  a second loop reads x again (mostly from L2: the first pass asked the cache
  to keep it) and writes y. This is the loop rung of the N-vs-BLOCK ladder.

The fused residual add (:func:`rmsnorm.rmsnorm_add`) is this kernel with ``HAS_RESIDUAL`` on: it
first forms h = x + residual, rounded to residual_out's dtype as torch rounds the sum, stores it in
residual_out and normalises h; the loop's pass 1 reads x and residual once and pass 2 reads h back
from residual_out. Off (the default), none of it is compiled: the plain kernel's PTX is unchanged
(tests/library/test_plain_ptx.py).

Source: notebooks/09_the_long_row.ipynb; Triton's tutorial 05-layer-norm
(``_layer_norm_fwd_fused``); Liger-Kernel and quack ``rmsnorm.py``.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from . import device, native_launch
from .config import (
    FastConfig,
    aligned,
    forward_config,
    layernorm_forward_config,
    num_programs,
    row_align_hint,
    shifted_weight,
)
from .contract import ContractError, check_fast_inputs, check_offset
from .launch import DirectLauncher


@triton.jit
def _add_residual(x_ptrs, residual_ptrs, residual_out_ptrs, mask, LOAD_EVICT: tl.constexpr,
                  STORE_EVICT: tl.constexpr):
    """h = x + residual, rounded to residual_out's dtype as torch rounds the sum; stored, returned in float32.

    torch adds 16-bit tensors in float32 and rounds the sum once to their dtype: so does this, and the
    norm reads that rounded h, so y is the norm of exactly the residual_out a caller gets.
    """
    x = tl.load(x_ptrs, mask=mask, other=0.0, eviction_policy=LOAD_EVICT).to(tl.float32)
    residual = tl.load(residual_ptrs, mask=mask, other=0.0, eviction_policy=LOAD_EVICT).to(tl.float32)
    h = (x + residual).to(residual_out_ptrs.dtype.element_ty)
    tl.store(residual_out_ptrs, h, mask=mask, eviction_policy=STORE_EVICT)
    return h.to(tl.float32)


@triton.jit
def _columns(ptr, cols, N, BLOCK_M: tl.constexpr):
    """A per-column parameter (weight or bias) at ``cols``, as a (1, BLOCK_N) row in its own dtype.

    For one row a step, loaded in two dimensions, in the layout of the row it scales: loaded as a vector and
    broadcast, a float32 parameter beside a 16-bit row takes a layout of its own (16 bytes a thread) and goes through
    shared memory to meet the row's, in every block. For several rows a step the vector is the better start: the
    (1, BLOCK_N) load would be laid out across the warps that share the rows. ``tools/ptx_vector_accesses.py N dtype
    --spills [--layernorm] --weight float32`` counts each kernel's vector stores to shared memory.
    """
    if BLOCK_M == 1:
        return tl.load(ptr + cols[None, :], mask=(cols < N)[None, :], other=0.0)
    return tl.load(ptr + cols, mask=cols < N, other=0.0)[None, :]


@triton.jit
def _shifted_moments(x_rows, row_mask, N, eps, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    """(mean, rstd) of rows too wide for one block, from sums of d = x − x[0] (the row's first element).

    E[x²] − E[x]² in float32 loses every digit of the variance when the mean is large against the
    spread (mean 1e4, std 1: E[x²] ≈ 1e8, whose ulp is 8); shifted by an element of the row, the two
    sums are of the spread's size and the difference keeps its digits (tests/library/test_layernorm.py).
    """
    cols = tl.arange(0, BLOCK_N)
    shift = tl.load(x_rows, mask=row_mask[:, None], other=0.0).to(tl.float32)  # (BLOCK_M, 1): x[row, 0]
    sum_d = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
    sum_dd = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
    for start in range(0, N, BLOCK_N):  # pass 1: both sums, block by block
        c = start + cols
        mask = row_mask[:, None] & (c < N)[None, :]
        x = tl.load(x_rows + c[None, :], mask=mask, other=0.0, eviction_policy="evict_last").to(tl.float32)
        d = tl.where(mask, x - shift, 0.0)
        sum_d += d
        sum_dd += d * d
    mean_d = tl.sum(sum_d, axis=1) / N
    variance = tl.maximum(tl.sum(sum_dd, axis=1) / N - mean_d * mean_d, 0.0)
    return tl.sum(shift, axis=1) + mean_d, tl.rsqrt(variance + eps)


@triton.jit
def _normalise_row_block(
    block, x_ptr, x_row_stride, weight_ptr, y_ptr, y_row_stride, rstd_ptr, M, N, eps,
    residual_ptr, residual_row_stride, residual_out_ptr, residual_out_row_stride, mean_ptr, bias_ptr,
    weight_held, bias_held,
    HAS_WEIGHT: tl.constexpr, OFFSET: tl.constexpr, ONE_BLOCK: tl.constexpr, BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr, HAS_RESIDUAL: tl.constexpr, IS_LAYERNORM: tl.constexpr, HAS_BIAS: tl.constexpr,
    HELD: tl.constexpr,
):
    """Rows block·BLOCK_M … block·BLOCK_M + BLOCK_M − 1: rstd and y (arguments as in the kernel).

    With HELD, a one-block row's scale (weight + OFFSET, float32) and bias are ``weight_held`` and ``bias_held``,
    loaded once by a persistent program for all its row blocks; without, each row block loads them.
    """
    cols = tl.arange(0, BLOCK_N)
    rows = tl.cast(block, tl.int64) * BLOCK_M + tl.arange(0, BLOCK_M)  # int64: M·N may pass 2³¹
    if BLOCK_M == 1:  # block < cdiv(M, 1) = M (the launchers' grids: config.grid_size, fast_path.cpp's programs):
        # the row is always there, and the column masks fold away where N is compiled in
        row_mask = tl.full([BLOCK_M], 1, tl.int1)
    else:
        row_mask = rows < M
    x_rows = x_ptr + rows[:, None] * x_row_stride
    y_rows = y_ptr + rows[:, None] * y_row_stride
    if HAS_RESIDUAL:  # h = x + residual is what the norm reads: from residual_out once it is written
        residual_rows = residual_ptr + rows[:, None] * residual_row_stride
        h_rows = residual_out_ptr + rows[:, None] * residual_out_row_stride
    else:
        h_rows = x_rows
    if ONE_BLOCK:
        mask = row_mask[:, None] & (cols < N)[None, :]
        if HAS_RESIDUAL:
            x = _add_residual(x_rows + cols[None, :], residual_rows + cols[None, :], h_rows + cols[None, :], mask,
                              "", "")
        else:
            x = tl.load(x_rows + cols[None, :], mask=mask, other=0.0).to(tl.float32)
        if IS_LAYERNORM:  # two passes over the row held on chip: the mean, then the spread around it
            mean = tl.sum(x, axis=1) / N  # (BLOCK_M,)
            centred = tl.where(mask, x - mean[:, None], 0.0)
            rstd = tl.rsqrt(tl.sum(centred * centred, axis=1) / N + eps)
            y = centred * rstd[:, None]
        else:
            rstd = tl.rsqrt(tl.sum(x * x, axis=1) / N + eps)  # (BLOCK_M,)
            y = x * rstd[:, None]
        if HAS_WEIGHT and HELD:
            y = y * weight_held
        elif HAS_WEIGHT:
            y = y * shifted_weight(_columns(weight_ptr, cols, N, BLOCK_M), OFFSET, tl.float32)
        if HAS_BIAS and HELD:
            y = y + bias_held
        elif HAS_BIAS:
            y = y + _columns(bias_ptr, cols, N, BLOCK_M).to(tl.float32)
        tl.store(y_rows + cols[None, :], y, mask=mask)  # cast to y's dtype
    elif IS_LAYERNORM:
        mean, rstd = _shifted_moments(x_rows, row_mask, N, eps, BLOCK_M, BLOCK_N)
        for start in range(0, N, BLOCK_N):  # pass 2: read x again (from L2, mostly), write y
            c = start + cols
            mask = row_mask[:, None] & (c < N)[None, :]
            x = tl.load(x_rows + c[None, :], mask=mask, other=0.0, eviction_policy="evict_first").to(tl.float32)
            y = (x - mean[:, None]) * rstd[:, None]
            if HAS_WEIGHT:
                y = y * shifted_weight(_columns(weight_ptr, c, N, BLOCK_M), OFFSET, tl.float32)
            if HAS_BIAS:
                y = y + _columns(bias_ptr, c, N, BLOCK_M).to(tl.float32)
            tl.store(y_rows + c[None, :], y, mask=mask)
    else:
        sum_sq = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
        for start in range(0, N, BLOCK_N):  # pass 1: sum of squares, block by block (and h, stored)
            c = start + cols
            mask = row_mask[:, None] & (c < N)[None, :]
            if HAS_RESIDUAL:  # x and residual are read once; h is kept in L2 for pass 2
                x = _add_residual(x_rows + c[None, :], residual_rows + c[None, :], h_rows + c[None, :], mask,
                                  "evict_first", "evict_last")
            else:
                x = tl.load(x_rows + c[None, :], mask=mask, other=0.0, eviction_policy="evict_last").to(tl.float32)
            sum_sq += x * x
        rstd = tl.rsqrt(tl.sum(sum_sq, axis=1) / N + eps)
        for start in range(0, N, BLOCK_N):  # pass 2: read x (or h) again (from L2, mostly), write y
            c = start + cols
            mask = row_mask[:, None] & (c < N)[None, :]
            x = tl.load(h_rows + c[None, :], mask=mask, other=0.0, eviction_policy="evict_first").to(tl.float32)
            y = x * rstd[:, None]
            if HAS_WEIGHT:
                y = y * shifted_weight(_columns(weight_ptr, c, N, BLOCK_M), OFFSET, tl.float32)
            tl.store(y_rows + c[None, :], y, mask=mask)
    tl.store(rstd_ptr + rows, rstd, mask=row_mask)
    if IS_LAYERNORM:
        tl.store(mean_ptr + rows, mean, mask=row_mask)


@triton.jit
def rmsnorm_fast_forward_kernel(
    x_ptr,  # (M, N) input, float32/float16/bfloat16, unit column stride
    x_row_stride,  # elements from one row of x to the next (any value)
    weight_ptr,  # (N,) weight (any of the three dtypes); unused when HAS_WEIGHT is False
    y_ptr,  # (M, N) output, dtype of x
    y_row_stride,  # elements from one row of y to the next
    rstd_ptr,  # (M,) float32 output, kept for the backward
    M,  # rows
    N,  # real row length: the mean divides by N, never by BLOCK_SIZE
    eps,  # added to mean(x²) before the square root
    HAS_WEIGHT: tl.constexpr,  # False: y = x · rstd (no affine weight)
    OFFSET: tl.constexpr,  # y = x · rstd · (weight + OFFSET): 0.0 (Llama) or 1.0 (Gemma's 1 + weight), any float
    ONE_BLOCK: tl.constexpr,  # True when N <= BLOCK_N: no column loop
    BLOCK_M: tl.constexpr,  # rows per step
    BLOCK_N: tl.constexpr,  # columns per block (a power of two)
    PERSISTENT: tl.constexpr,  # True: fewer programs than row blocks, each loops; False: one program per row block
    # (the grid is never larger than the row blocks, and not launched at M = 0: one row a step is not masked)
    NUM_STAGES: tl.constexpr,  # software pipelining of that loop
    ROW_ALIGN: tl.constexpr,  # a power of two dividing N and every row stride (see config.row_alignment)
    # the fused add (rmsnorm_add); the plain norm leaves these at None/False, which compiles none of it
    residual_ptr=None,  # (M, N) residual, unit column stride
    residual_row_stride=None,  # elements from one row of residual to the next
    residual_out_ptr=None,  # (M, N) output h = x + residual, in the dtype torch's sum has
    residual_out_row_stride=None,  # elements from one row of residual_out to the next
    HAS_RESIDUAL: tl.constexpr = False,  # True: h = x + residual, stored in residual_out, and y = norm(h)
    STATIC_N: tl.constexpr = 0,  # > 0: N itself, compiled in (FastConfig.static_n); 0: N is the run-time argument
    # LayerNorm (rmsnorm.layernorm); the RMSNorm leaves these at None/False, which compiles none of it
    mean_ptr=None,  # (M,) float32 output, kept for the backward
    bias_ptr=None,  # (N,) bias (any of the three dtypes); unused when HAS_BIAS is False
    IS_LAYERNORM: tl.constexpr = False,  # True: y = (x − mean) · rstd · weight + bias, rstd of the variance
    HAS_BIAS: tl.constexpr = False,  # True: y += bias
):
    tl.static_assert(not (IS_LAYERNORM and HAS_RESIDUAL), "the fused add is RMSNorm's only")
    if STATIC_N > 0:  # the masks of the columns always in range fold away
        N = STATIC_N
    else:  # Triton knows an integer argument's divisibility only by 16: tell it what the launcher checked, so
        # that rows of 1000 or 3000 16-bit elements still load and store 16 bytes at a time.
        N = aligned(N, ROW_ALIGN)
    x_row_stride = aligned(x_row_stride, ROW_ALIGN)
    y_row_stride = aligned(y_row_stride, ROW_ALIGN)
    if HAS_RESIDUAL:
        residual_row_stride = aligned(residual_row_stride, ROW_ALIGN)
        residual_out_row_stride = aligned(residual_out_row_stride, ROW_ALIGN)
    if PERSISTENT:  # program p takes row blocks p, p + P, p + 2P, ...
        weight_held = 0.0
        bias_held = 0.0
        if ONE_BLOCK:  # the same columns in every row block: the scale and the bias loaded once, not per block
            cols = tl.arange(0, BLOCK_N)
            if HAS_WEIGHT:
                weight_held = shifted_weight(_columns(weight_ptr, cols, N, BLOCK_M), OFFSET, tl.float32)
            if HAS_BIAS:
                bias_held = _columns(bias_ptr, cols, N, BLOCK_M).to(tl.float32)
        for block in tl.range(tl.program_id(0), tl.cdiv(M, BLOCK_M), tl.num_programs(0), num_stages=NUM_STAGES):
            _normalise_row_block(block, x_ptr, x_row_stride, weight_ptr, y_ptr, y_row_stride, rstd_ptr, M, N, eps,
                                 residual_ptr, residual_row_stride, residual_out_ptr, residual_out_row_stride,
                                 mean_ptr, bias_ptr, weight_held, bias_held, HAS_WEIGHT, OFFSET, ONE_BLOCK, BLOCK_M,
                                 BLOCK_N, HAS_RESIDUAL, IS_LAYERNORM, HAS_BIAS, ONE_BLOCK)
    else:  # one program per row block
        _normalise_row_block(tl.program_id(0), x_ptr, x_row_stride, weight_ptr, y_ptr, y_row_stride, rstd_ptr,
                             M, N, eps, residual_ptr, residual_row_stride, residual_out_ptr, residual_out_row_stride,
                             mean_ptr, bias_ptr, 0.0, 0.0, HAS_WEIGHT, OFFSET, ONE_BLOCK, BLOCK_M, BLOCK_N,
                             HAS_RESIDUAL, IS_LAYERNORM, HAS_BIAS, False)


def rmsnorm_fast_forward(
    x: torch.Tensor, weight: torch.Tensor | None, eps: float = 1e-6, *, config: FastConfig | None = None,
    offset: float = 0.0,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Launch the fast forward on a 2-D input; not differentiable (see :func:`rmsnorm_fast`).

    Args:
        x: (M, N) float32/float16/bfloat16 on CUDA (or the CPU under the
            interpreter, bf16 excepted), 1 ≤ N ≤ 262144, unit stride in the last
            dimension; the row stride may be anything (read in place).
        weight: (N,) γ, float32/float16/bfloat16, or None for no weight.
        eps: finite real number >= 0.
        config: launch configuration; default :func:`forward_config` (N, x.dtype, dense_rows), dense_rows
            ``x.is_contiguous()``: on contiguous rows a flat rule where one applies (odd 16-bit N of 3-33), so
            the default may differ from an explicit ``config=forward_config(N, x.dtype)`` (the blocked choice),
            within the declared tolerance, not bit for bit.
        offset: y = x · rstd · (weight + offset), a finite float (1.0: Gemma's ``1 + weight``);
            must be 0.0 without a weight. Each value compiles its own kernel (a constexpr).

    Returns:
        (y, rstd): y is (M, N) contiguous in the dtype of ``x``; rstd is (M,)
        float32. M = 0 returns empty tensors without a launch.

    Raises:
        ContractError: (a ValueError) for anything outside the fast contract,
            before anything is allocated.

    Source: notebooks/09_the_long_row.ipynb.
    """
    check_fast_inputs(x, weight, eps)
    check_offset(offset, weight)
    return launch_forward(x, weight, float(eps), config, float(offset))


_launch = DirectLauncher(rmsnorm_fast_forward_kernel)


def launch_forward(
    x: torch.Tensor, weight: torch.Tensor | None, eps: float, config: FastConfig | None = None,
    offset: float = 0.0,
) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`rmsnorm_fast_forward` without its checks: for callers that have checked the inputs already.

    ``eps`` and ``offset`` must be Python floats. Launches through :class:`~rmsnorm.launch.DirectLauncher`,
    keyed by :func:`forward_key`.
    """
    out = native_launch.launch_from_c("forward", config, x, weight, eps, offset)  # from a plan the path below kept
    if out is not None:
        return out
    M, N = x.shape
    check_config(config, x)
    y = device.new_output((M, N), x.dtype, x.device)
    rstd = device.new_output((M,), torch.float32, x.device)
    _run(x, weight, eps, config, offset, y, rstd, None, None)
    return y, rstd


def launch_add_forward(
    x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor | None, eps: float,
    config: FastConfig | None = None, offset: float = 0.0,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The fused add's forward, unchecked (:func:`rmsnorm.rmsnorm_add` checks): the same kernel, HAS_RESIDUAL on.

    Args:
        x, residual: (M, N), unit column stride, any row strides; residual in x's dtype, or float32
            with a 16-bit x (contract.check_add_inputs).
        weight, eps, config, offset: as in :func:`launch_forward`.

    Returns:
        (y, residual_out, rstd): y (M, N) contiguous in x's dtype; residual_out = x + residual (M, N)
        contiguous in residual's dtype (:func:`~rmsnorm.contract.residual_out_dtype`), rounded as torch rounds
        the sum;
        rstd (M,) float32, of residual_out's rows.
    """
    out = native_launch.launch_from_c("forward_add", config, x, residual, weight, eps, offset)  # a plan _run kept
    if out is not None:
        return out
    M, N = x.shape
    check_config(config, x, plain=False)
    y = device.new_output((M, N), x.dtype, x.device)
    residual_out = device.new_output((M, N), residual.dtype, x.device)  # the stream keeps its dtype (contract)
    rstd = device.new_output((M,), torch.float32, x.device)
    _run(x, weight, eps, config, offset, y, rstd, residual, residual_out)
    return y, residual_out, rstd


def _run(x, weight, eps: float, config: FastConfig | None, offset: float, y, rstd, residual, residual_out,
         mean=None, bias=None) -> None:
    """One forward launch; a ``mean`` ((M,) float32) makes it the LayerNorm's (IS_LAYERNORM), with ``bias``."""
    M, N = x.shape
    default = config is None
    plain_default = default and residual is None and mean is None
    # a flat rule may apply only to the plain RMSNorm's dense rows (y and rstd are allocated contiguous):
    # config.dense_rows(x), inlined on the eager call's path
    if config is None:
        config = (forward_config(N, x.dtype, plain_default and x.is_contiguous()) if mean is None
                  else layernorm_forward_config(N, x.dtype))
    if config.flat:  # whole rows as one run of elements (checked by check_config before the outputs)
        if M:
            from .flat import launch_flat_forward

            launch_flat_forward(x, weight, eps, config, offset, y, rstd,
                                forward_key(x, x if weight is None else weight, y, rstd, config, False,
                                            weight is not None, offset))
        return
    if config.split > 1:  # a row over several programs (checked by check_config before the outputs)
        if M:
            from .split_forward import launch_split_forward

            launch_split_forward(x, weight, eps, config, offset, y, rstd,
                                 forward_key(x, x if weight is None else weight, y, rstd, config, True,
                                             weight is not None, offset))
        return
    if M == 0:
        return
    row_blocks = -(-M // config.BLOCK_M)
    P = num_programs(config, x.device, row_blocks)
    w = x if weight is None else weight
    has_residual = residual is not None
    strides = (x.stride(0), y.stride(0)) + ((residual.stride(0), residual_out.stride(0)) if has_residual else ())
    key = forward_key(x, w, y, rstd, config, P < row_blocks, weight is not None, offset, residual, residual_out)
    if mean is not None:  # the LayerNorm's launches: their own entries (IS_LAYERNORM), and the bias's class
        key += (mean.data_ptr() & 15,) + ((None,) if bias is None else (bias.dtype, bias.data_ptr() & 15))
    _launch(
        key, (P,),
        x, x.stride(0), w, y, y.stride(0), rstd, M, N, eps,
        weight is not None, offset, config.one_block(N), config.BLOCK_M, config.BLOCK_N, P < row_blocks,
        config.num_stages, row_align_hint(x.element_size(), N, *strides),
        residual, residual.stride(0) if has_residual else None,
        residual_out, residual_out.stride(0) if has_residual else None, has_residual, config.static(N),
        mean, bias, mean is not None, bias is not None, num_warps=config.num_warps,
    )
    if default and native_launch.state.enabled:  # later calls of this kind launch from C (launch_forward and the
        # fused add's and LayerNorm's launchers)
        native_launch.remember_forward(_launch, key, x, weight, offset, y, rstd, config, residual, residual_out,
                                       mean, bias)


def check_config(config: FastConfig | None, x: torch.Tensor, plain: bool = True) -> None:
    """Refuse, before any output is allocated, an explicit configuration the forward cannot run on x.

    Only a split (``split`` > 1) or flat configuration can be refused: each is the plain RMSNorm's (``plain``)
    only; the split one runs on a GPU only and must cover the row (:func:`rmsnorm.split_forward.check_split_config`),
    the flat one needs contiguous rows (:func:`rmsnorm.flat.check_flat_config`). The rule tables choose a
    flat configuration only where it can run, and no split one.

    Raises:
        ContractError: as above.
    """
    if config is None or (config.split == 1 and not config.flat):
        return
    name = "flat forward (FastConfig.flat)" if config.flat else "split forward (FastConfig.split > 1)"
    if not plain:
        raise ContractError(f"the {name} is the plain RMSNorm's only, not the fused add's or the LayerNorm's")
    if config.flat and config.split > 1:
        raise ContractError("a configuration is flat or split, not both")
    if config.flat:
        from .flat import check_flat_config

        check_flat_config(config, ("x", x))
    else:
        from .split_forward import check_split_config

        check_split_config(config, x)


def forward_key(x, w, y, rstd, config: FastConfig, persistent: bool, has_weight: bool, offset: float = 0.0,
                residual=None, residual_out=None) -> tuple:
    """The forward's direct-launch cache key: all that Triton specialises the kernel on (see launch.py).

    The row strides and N by value (so :func:`row_alignment` too), M by (== 1, mod 16, past 2³¹),
    each tensor's dtype and address mod 16, the config (its constexprs and ``num_warps``), the offset;
    for the fused add (HAS_RESIDUAL), residual's and residual_out's too.
    """
    M, N = x.shape
    key = (x.device.index, x.dtype, w.dtype, x.data_ptr() & 15, w.data_ptr() & 15, y.data_ptr() & 15,
           rstd.data_ptr() & 15, x.stride(0), y.stride(0), (M == 1, not M & 15, M >> 31), N, config, persistent,
           has_weight, offset)
    if residual is None:
        return key
    return key + (residual.dtype, residual_out.dtype, residual.data_ptr() & 15, residual_out.data_ptr() & 15,
                  residual.stride(0), residual_out.stride(0))

"""The fused residual add + RMSNorm of a pre-norm decoder layer: ``h = h + sublayer_out; x = norm(h)`` in one call.

:func:`rmsnorm_add` (x, residual, weight) returns (y, residual_out) with residual_out = x + residual and
y = rmsnorm(residual_out) · (weight + offset). It runs the fast norm's own kernels with their constexpr
switches on (``HAS_RESIDUAL`` in :func:`~rmsnorm.forward.rmsnorm_fast_forward_kernel`, ``HAS_DRES`` in
:func:`~rmsnorm.backward.rmsnorm_fast_backward_kernel`); switched off, those kernels compile to the plain
norm's code, instruction for instruction (tests/library/test_plain_ptx.py).

The add is eager's: h = x + residual is rounded to residual_out's dtype exactly as torch rounds the sum
(16-bit tensors are added in float32 and rounded once), and the norm reads that rounded h, as Liger's
``fused_add_rms_norm`` and vLLM do, so that a model calling it gives the unpatched model's numbers.

Dtypes (contract.residual_out_dtype; any other pair is refused):

- residual in x's dtype: residual_out in that dtype, y in x's dtype;
- residual float32 with a float16/bfloat16 x (a float32 residual stream): the add in float32,
  residual_out float32, y in x's dtype;
- rstd (M,) float32; gradients: dx in x's dtype, d_residual in residual's dtype (both the value of
  d h = d_residual_out + the norm's backward run on h = residual_out), dweight in weight's dtype.

Bytes, declared as the plain norm's are (rmsnorm_lab.fused_add_forward_bytes and
fused_add_backward_bytes; s = x's element size, s_r = residual's, s_w = weight's, all lower bounds):

- forward: read x, residual, weight; write y, residual_out, rstd: ``2·M·N·(s + s_r) + N·s_w + 4·M``;
- backward: read residual_out, dy, d_residual_out, weight, rstd; write d h, dweight:
  ``M·N·(3·s_r + s) + 2·N·s_w + 4·M``. With a float32 residual, dx is d h cast to x's dtype, one
  more pass autograd makes (not charged).

The op never writes its inputs: y and residual_out are new tensors, so neither can alias x or
residual. There is no in-place variant (vLLM's ``fused_add_rms_norm`` writes h into residual and y into
x; autograd cannot save a tensor that is overwritten that way).

How PyTorch calls it, as :mod:`rmsnorm.autograd` explains for the plain norm: eager calls go
through :class:`_FusedAddRMSNormFunction`, which calls the launchers directly; ``torch.compile``,
dispatch modes and meta tensors see two operators of the ``rmsnorm_fast`` library:

- ``rmsnorm_fast::add_forward(Tensor x, Tensor residual, Tensor? weight, float eps, float offset=0.0)
  -> (Tensor, Tensor, Tensor)`` → (y, residual_out, rstd)
- ``rmsnorm_fast::add_backward(Tensor residual_out, Tensor? weight, Tensor rstd, Tensor dy,
  Tensor d_residual_out, float offset=0.0) -> (Tensor, Tensor)`` → (d h, dweight; empty without a weight)

A double backward raises RuntimeError on both paths. ``torch.func`` transforms (vmap, grad, vjp, jacrev)
go through the eager Function's rules, as the plain norm's do.

Source: Liger-Kernel ``ops/fused_add_rms_norm.py``; vLLM ``fused_add_rms_norm``; quack ``rmsnorm.py``
(``residual``/``residual_out``); PyTorch "Python Custom Operators".
"""

from __future__ import annotations

import functools

import torch

from .autograd import (
    _LIB,
    _BackwardUnderTransforms,
    _no_double_backward,
    _RefuseDoubleBackward,
    _savable,
    _setup_nothing,
    _unit_column_stride,
    as_rows,
    check_functional_inputs,
    check_scalars_for_the_op,
    refuse_dtensor_at_the_ops,
    run_eagerly,
    traced_rows,
    traced_vector,
    unit_stride_vector,
    with_ctx_forward,
)
from .backward import launch_backward
from .contract import ContractError, _functorch_wrapped, check_add_backward_inputs, check_add_inputs, check_offset
from .forward import launch_add_forward

_LIB.define("add_forward(Tensor x, Tensor residual, Tensor? weight, float eps, float offset=0.0) "
            "-> (Tensor, Tensor, Tensor)")
_LIB.define("add_backward(Tensor residual_out, Tensor? weight, Tensor rstd, Tensor dy, Tensor d_residual_out, "
            "float offset=0.0) -> (Tensor, Tensor)")


def _add_forward_impl(x, residual, weight, eps, offset=0.0):
    check_add_inputs(x, residual, weight, eps)
    check_offset(offset, weight)
    return launch_add_forward(x, residual, weight, eps, None, offset)


def _add_backward_impl(residual_out, weight, rstd, dy, d_residual_out, offset=0.0):
    check_add_backward_inputs(residual_out, weight, rstd, dy, d_residual_out)
    check_offset(offset, weight)
    dh, dweight = launch_backward(residual_out, weight, rstd, dy, None, offset, d_residual_out)
    return dh, (residual_out.new_empty(0) if dweight is None else dweight)  # an op returns tensors: empty = no weight


for _device in ("CPU", "CUDA"):
    _LIB.impl("add_forward", _add_forward_impl, _device)
    _LIB.impl("add_backward", _add_backward_impl, _device)


@torch.library.register_fake("rmsnorm_fast::add_forward", lib=_LIB)
def _(x, residual, weight, eps, offset=0.0):
    return (x.new_empty(x.shape), x.new_empty(x.shape, dtype=residual.dtype),
            x.new_empty(x.shape[:1], dtype=torch.float32))


@torch.library.register_fake("rmsnorm_fast::add_backward", lib=_LIB)
def _(residual_out, weight, rstd, dy, d_residual_out, offset=0.0):
    return residual_out.new_empty(residual_out.shape), (residual_out.new_empty(0) if weight is None
                                                        else weight.new_empty(weight.shape))


#: The two operators (``torch.ops.rmsnorm_fast.add_forward`` / ``.add_backward``).
_add_forward_op = torch.ops.rmsnorm_fast.add_forward.default
_add_backward_op = torch.ops.rmsnorm_fast.add_backward.default
refuse_dtensor_at_the_ops("rmsnorm_fast::add_forward", "rmsnorm_fast::add_backward")


def _or_zeros(grad, like: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """An output's gradient, or zeros where autograd passes None (an output the loss does not use)."""
    return like.new_zeros(like.shape, dtype=dtype) if grad is None else _unit_column_stride(grad)


def _setup_context(ctx, inputs, output):
    x, _residual, weight, _eps, *offset = inputs  # offset: absent when the caller left the schema's default
    _y, residual_out, rstd = output
    ctx.save_for_backward(residual_out, _savable(weight), rstd)
    ctx.mark_non_differentiable(rstd)
    ctx.set_materialize_grads(False)  # see _FusedAddRMSNormFunctionForTransforms.setup_context
    ctx.offset = offset[0] if offset else 0.0
    ctx.x_dtype = x.dtype


def _backward(ctx, dy, d_residual_out, _drstd):
    if dy is None and d_residual_out is None:
        return None, None, None, None, None
    residual_out, weight, rstd = ctx.saved_tensors
    dh, dweight = _add_backward_op(residual_out, weight, rstd, _or_zeros(dy, residual_out, ctx.x_dtype),
                                   _or_zeros(d_residual_out, residual_out, residual_out.dtype), ctx.offset)
    return dh.to(ctx.x_dtype), dh, (None if weight is None else dweight), None, None


torch.library.register_autograd("rmsnorm_fast::add_forward", _backward, setup_context=_setup_context, lib=_LIB)
torch.library.register_autograd("rmsnorm_fast::add_backward",
                                functools.partial(_no_double_backward, norm="rmsnorm_add"),
                                setup_context=_setup_nothing, lib=_LIB)


class _FusedAddRMSNormFunctionForTransforms(torch.autograd.Function):
    """The eager path under ``torch.func``: (x, residual (M, N) checked, weight or None, eps, offset) → (y,
    residual_out, rstd).

    Written for ``torch.func`` as the plain norm's Function is: ``vmap`` folds the batch into rows,
    ``grad``/``vjp``/``jacrev`` run the backward through :class:`~rmsnorm.autograd._BackwardUnderTransforms`.
    Outside a transform the call goes through :data:`_FusedAddRMSNormFunction`, the same code with
    ``forward(ctx, …)`` (:func:`~rmsnorm.autograd.with_ctx_forward`).
    """

    @staticmethod
    def forward(x, residual, weight, eps, offset):
        return launch_add_forward(x, residual, weight, eps, None, offset)

    @staticmethod
    def setup_context(ctx, inputs, output):
        x, _residual, weight, _eps, ctx.offset = inputs
        ctx.x_dtype = x.dtype
        ctx.save_for_backward(output[1], _savable(weight), output[2])
        ctx.mark_non_differentiable(output[2])
        # no zeros filled for rstd's gradient on every backward (one launch fewer); y's or residual_out's
        # gradient, where the loss does not use that output, is zeros made here (_or_zeros)
        ctx.set_materialize_grads(False)

    @staticmethod
    def backward(ctx, dy, d_residual_out, _drstd):
        if dy is None and d_residual_out is None:
            return None, None, None, None, None
        residual_out, weight, rstd = ctx.saved_tensors
        dy, d_residual_out = (_or_zeros(dy, residual_out, ctx.x_dtype),
                              _or_zeros(d_residual_out, residual_out, residual_out.dtype))
        if _functorch_wrapped(residual_out, weight, rstd, dy, d_residual_out):
            dh, dweight = _BackwardUnderTransforms.apply(residual_out, weight, rstd, dy, ctx.offset, d_residual_out)
            return dh.to(ctx.x_dtype), dh, (None if weight is None else dweight), None, None
        dh, dweight = launch_backward(residual_out, weight, rstd, dy, None, ctx.offset, d_residual_out)
        if torch.is_grad_enabled():  # create_graph=True: the next backward through these must refuse
            dh, dweight = _RefuseDoubleBackward.apply(residual_out, weight, dh, dweight, "rmsnorm_add")
        return dh.to(ctx.x_dtype), dh, dweight, None, None

    @staticmethod
    def vmap(info, in_dims, x, residual, weight, eps, offset):
        x_dim, residual_dim, weight_dim, *_ = in_dims
        if weight_dim is not None:
            raise ContractError(
                "rmsnorm_add under torch.func.vmap: the weight is batched (in_dims gives it a batch dimension); "
                "the kernels take one (N,) weight. Map over x and residual only, or loop over the weights"
            )
        x, residual = (t.unsqueeze(0).expand(info.batch_size, *t.shape) if d is None else t.movedim(d, 0)
                       for t, d in ((x, x_dim), (residual, residual_dim)))  # (B, M, N): every element's rows
        y, residual_out, rstd = _FusedAddRMSNormFunctionForTransforms.apply(as_rows(x), as_rows(residual), weight,
                                                                             eps, offset)
        return (y.view(x.shape), residual_out.view(x.shape), rstd.view(x.shape[:-1])), (0, 0, 0)


_FusedAddRMSNormFunction = with_ctx_forward(_FusedAddRMSNormFunctionForTransforms, "_FusedAddRMSNormFunction")


def rmsnorm_add(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor | None, eps: float | None = 1e-6,
                *, offset: float = 0.0) -> tuple[torch.Tensor, torch.Tensor]:
    """residual_out = x + residual and y = RMSNorm(residual_out) · (weight + offset), fused; differentiable, compilable.

    Args:
        x: (..., N) float32/float16/bfloat16, 1 ≤ N ≤ 262144, as :func:`rmsnorm.rmsnorm_fast` takes it
            (leading dimensions flattened into M rows; rows read in place when they can be).
        residual: x's shape (no broadcasting), device and dtype, or float32 with a 16-bit x; any layout
            (copied once when its rows cannot be read in place).
        weight: (N,) float32/float16/bfloat16, or None.
        eps: finite real number >= 0, or None (``torch.finfo(torch.float32).eps``, as rmsnorm_fast).
        offset: y = ĥ · (weight + offset) (1.0: Gemma's ``1 + weight``); 0.0 without a weight.

    Returns:
        (y, residual_out), both of x's shape and contiguous: y in x's dtype, under CUDA autocast too (torch has
        no fused op to follow; its add then ``F.rms_norm`` gives a float32 y there, Hugging Face's layers x's
        dtype); residual_out in residual's dtype (x's, or float32), equal bitwise to ``x + residual``.
        Gradients: dx in x's dtype, d_residual in residual's, both d_residual_out + the norm's dx at h;
        dweight in weight's dtype.
        Neither output aliases an input, and no input is written (there is no in-place variant).

    Raises:
        ContractError: (a ValueError) naming the tensor, the rule and the value, before anything is
            allocated: shapes, devices or dtypes that differ, a DTensor, anything outside the fast
            contract; a batched weight under ``torch.func.vmap``.
        RuntimeError: on a double backward.

    Source: the module docstring; Liger-Kernel ``ops/fused_add_rms_norm.py``.
    """
    eps = check_functional_inputs(x, weight, eps, ("residual", residual))
    weight = unit_stride_vector(weight)
    if residual.shape != x.shape:  # before rows are formed: (2, 3, N) and (6, N) have the same rows
        raise ContractError(f"residual must have the shape of x {tuple(x.shape)} (no broadcasting); "
                            f"got {tuple(residual.shape)}")
    compiling = torch.compiler.is_compiling()  # asked here, not in a helper (see rmsnorm_fast)
    # torch.jit.trace (never asked under Dynamo, which cannot trace the question): the operator, on rows
    # formed by ops the trace records
    tracing = not compiling and torch._C._is_tracing()
    if tracing:
        rows, residual_rows, weight = traced_rows(x), traced_rows(residual), traced_vector(weight)
    else:
        rows, residual_rows = as_rows(x), as_rows(residual)
    if compiling or tracing or torch._C._len_torch_dispatch_stack() or x.is_meta:
        check_scalars_for_the_op(eps, offset, weight, compiling)
        y, residual_out, _rstd = _add_forward_op(rows, residual_rows, weight, float(eps), float(offset))
    else:
        check_add_inputs(rows, residual_rows, weight, eps)
        if type(offset) is not float or offset != 0.0:
            check_offset(offset, weight)
        y, residual_out, _rstd = run_eagerly(_FusedAddRMSNormFunction, _FusedAddRMSNormFunctionForTransforms, rows,
                                             residual_rows, weight, float(eps), float(offset))
    if rows is x:
        return y, residual_out
    return y.view_as(x), residual_out.view_as(x)  # view_as: a trace replays it at any rank

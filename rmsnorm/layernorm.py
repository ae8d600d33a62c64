"""LayerNorm on the fast path, what a model calls: :func:`layernorm_fast`, its operators and its autograd.

The launchers, the maths and the contract are in :mod:`rmsnorm.layernorm_launchers` (the module docstring
there says how the variance is computed and why); this module puts them behind the RMSNorm's plumbing
(:mod:`rmsnorm.autograd`): two registered operators that ``torch.compile`` traces, an eager Function that
launches directly, and ``torch.func`` rules.

Operators (``rmsnorm_fast`` library, as the RMSNorm's):

- ``rmsnorm_fast::layernorm_forward(Tensor x, Tensor? weight, Tensor? bias, float eps) -> (y, mean, rstd)``
- ``rmsnorm_fast::layernorm_backward(Tensor x, Tensor? weight, Tensor? bias, Tensor mean, Tensor rstd,
  Tensor dy) -> (dx, dweight, dbias)`` (dweight, dbias empty where there is no weight, no bias)

Source: rmsnorm/autograd.py and rmsnorm/fused_add.py (the same plumbing for the RMSNorm and the fused add);
PyTorch "Python Custom Operators" (torch.library.define, impl, register_fake, register_autograd).
"""

from __future__ import annotations

import functools

import torch

from .autograd import (
    _LIB,
    _batch_slice,
    _no_double_backward,
    _RefuseDoubleBackward,
    _savable,
    _setup_nothing,
    _unit_column_stride,
    as_rows,
    check_functional_inputs,
    check_scalars_for_the_op,
    float32_under_autocast,
    refuse_dtensor_at_the_ops,
    run_eagerly,
    traced_rows,
    traced_vector,
    unit_stride_vector,
    with_ctx_forward,
)
from .contract import ContractError, _functorch_wrapped, check_eps
from .layernorm_launchers import (
    LAYERNORM_EPS,
    check_layernorm_inputs,
    launch_layernorm_backward,
    launch_layernorm_forward,
    layernorm_fast_backward,
    layernorm_fast_forward,
)

# ----------------------------------------------------------------------------- operators

_LIB.define("layernorm_forward(Tensor x, Tensor? weight, Tensor? bias, float eps) -> (Tensor, Tensor, Tensor)")
_LIB.define("layernorm_backward(Tensor x, Tensor? weight, Tensor? bias, Tensor mean, Tensor rstd, Tensor dy) "
            "-> (Tensor, Tensor, Tensor)")


def _empty_if_none(t, like):
    return like.new_empty(0) if t is None else t  # an op returns tensors: empty = no weight, no bias


def _forward_impl(x, weight, bias, eps):
    return layernorm_fast_forward(x, weight, bias, eps)


def _backward_impl(x, weight, bias, mean, rstd, dy):
    dx, dweight, dbias = layernorm_fast_backward(x, weight, bias, mean, rstd, dy)
    return dx, _empty_if_none(dweight, x), _empty_if_none(dbias, x)


for _device in ("CPU", "CUDA"):
    _LIB.impl("layernorm_forward", _forward_impl, _device)
    _LIB.impl("layernorm_backward", _backward_impl, _device)


@torch.library.register_fake("rmsnorm_fast::layernorm_forward", lib=_LIB)
def _(x, weight, bias, eps):
    return x.new_empty(x.shape), *(x.new_empty(x.shape[:1], dtype=torch.float32) for _ in range(2))


@torch.library.register_fake("rmsnorm_fast::layernorm_backward", lib=_LIB)
def _(x, weight, bias, mean, rstd, dy):
    return x.new_empty(x.shape), *(x.new_empty(0) if t is None else t.new_empty(t.shape) for t in (weight, bias))


_forward_op = torch.ops.rmsnorm_fast.layernorm_forward.default
_backward_op = torch.ops.rmsnorm_fast.layernorm_backward.default
refuse_dtensor_at_the_ops("rmsnorm_fast::layernorm_forward", "rmsnorm_fast::layernorm_backward")


def _setup_context(ctx, inputs, output):
    x, weight, bias, _eps = inputs
    _y, mean, rstd = output
    ctx.save_for_backward(_savable(x), _savable(weight), _savable(bias), mean, rstd)
    ctx.mark_non_differentiable(mean, rstd)
    ctx.set_materialize_grads(False)  # see _FastLayerNormFunctionForTransforms.setup_context


def _backward(ctx, dy, _dmean, _drstd):
    if dy is None:
        return None, None, None, None
    x, weight, bias, mean, rstd = ctx.saved_tensors
    dx, dweight, dbias = _backward_op(x, weight, bias, mean, rstd, _unit_column_stride(dy))
    return dx, (None if weight is None else dweight), (None if bias is None else dbias), None


torch.library.register_autograd("rmsnorm_fast::layernorm_forward", _backward, setup_context=_setup_context, lib=_LIB)
torch.library.register_autograd("rmsnorm_fast::layernorm_backward",
                                functools.partial(_no_double_backward, norm="layernorm_fast"),
                                setup_context=_setup_nothing, lib=_LIB)


# ----------------------------------------------------------------------------- the eager path, torch.func


class _LayerNormBackwardUnderTransforms(torch.autograd.Function):
    """(x, weight, bias, mean, rstd, dy) → (dx, dweight or empty, dbias or empty), for ``torch.func``.

    As :class:`rmsnorm.autograd._BackwardUnderTransforms` for the RMSNorm: unwraps a transform's tensors
    before the kernels launch; its vmap rule launches once per batch element. Not itself differentiable.
    """

    @staticmethod
    def forward(x, weight, bias, mean, rstd, dy):
        dx, dweight, dbias = launch_layernorm_backward(x, weight, bias, mean, rstd, _unit_column_stride(dy))
        return dx, _empty_if_none(dweight, x), _empty_if_none(dbias, x)

    @staticmethod
    def setup_context(ctx, inputs, output):
        pass

    @staticmethod
    def backward(ctx, *grads):
        _no_double_backward(ctx, norm="layernorm_fast")

    @staticmethod
    def vmap(info, in_dims, *tensors):
        outputs = [_LayerNormBackwardUnderTransforms.apply(*(_batch_slice(t, d, b) for t, d in zip(tensors, in_dims)))
                   for b in range(info.batch_size)]
        return tuple(torch.stack(column) for column in zip(*outputs)), (0, 0, 0)


class _FastLayerNormFunctionForTransforms(torch.autograd.Function):
    """The eager path: (x (M, N) checked, weight, bias, eps) → (y, mean, rstd); ``vmap`` folds the batch into rows."""

    @staticmethod
    def forward(x, weight, bias, eps):
        return launch_layernorm_forward(x, weight, bias, eps)

    @staticmethod
    def setup_context(ctx, inputs, output):
        x, weight, bias, _eps = inputs
        ctx.save_for_backward(_savable(x), _savable(weight), _savable(bias), output[1], output[2])
        ctx.mark_non_differentiable(output[1], output[2])
        ctx.set_materialize_grads(False)  # no zeros filled for mean's and rstd's gradients: two launches fewer

    @staticmethod
    def backward(ctx, dy, _dmean, _drstd):
        if dy is None:
            return None, None, None, None
        x, weight, bias, mean, rstd = ctx.saved_tensors
        if _functorch_wrapped(x, weight, bias, mean, rstd, dy):
            dx, dweight, dbias = _LayerNormBackwardUnderTransforms.apply(x, weight, bias, mean, rstd, dy)
            return dx, (None if weight is None else dweight), (None if bias is None else dbias), None
        dx, dweight, dbias = launch_layernorm_backward(x, weight, bias, mean, rstd, _unit_column_stride(dy))
        if torch.is_grad_enabled():  # create_graph=True: the next backward through these must refuse
            dx, dweight = _RefuseDoubleBackward.apply(x, weight, dx, dweight, "layernorm_fast")
            if dbias is not None:
                dx, dbias = _RefuseDoubleBackward.apply(x, bias, dx, dbias, "layernorm_fast")
        return dx, dweight, dbias, None

    @staticmethod
    def vmap(info, in_dims, x, weight, bias, eps):
        x_dim, weight_dim, bias_dim, _ = in_dims
        if weight_dim is not None or bias_dim is not None:
            raise ContractError(
                "layernorm_fast under torch.func.vmap: the weight or the bias is batched (in_dims gives it a batch "
                "dimension); the kernels take one (N,) each. Map over x only, or loop over the parameters"
            )
        batch = x.movedim(x_dim, 0)  # (B, M, N): every element's rows, one after another
        y, mean, rstd = _FastLayerNormFunctionForTransforms.apply(as_rows(batch), weight, bias, eps)
        return (y.view(batch.shape), mean.view(batch.shape[:-1]), rstd.view(batch.shape[:-1])), (0, 0, 0)


_FastLayerNormFunction = with_ctx_forward(_FastLayerNormFunctionForTransforms, "_FastLayerNormFunction")


def layernorm_fast(x: torch.Tensor, weight: torch.Tensor | None, bias: torch.Tensor | None = None,
                   eps: float = LAYERNORM_EPS) -> torch.Tensor:
    """LayerNorm over the last dimension with the fast kernels; differentiable, compilable.

    ``F.layer_norm(x, (N,), weight, bias, eps)``, with the RMSNorm's contract: one rounding to x's dtype,
    float32 statistics (:mod:`rmsnorm.layernorm_launchers` says how the variance is computed and why).

    Args:
        x: (..., N) float32/float16/bfloat16, 1 ≤ N ≤ 262144, on CUDA (or the CPU under the interpreter,
            bf16 excepted); leading dimensions flattened into M rows, read in place when they can be.
        weight: (N,) float32/float16/bfloat16 (may differ from x's dtype), or None.
        bias: (N,) the same dtypes, or None (also without a weight, as ``F.layer_norm`` allows).
        eps: finite real number >= 0 (default 1e-5, torch's).

    Returns:
        y: x's shape and dtype, contiguous; under CUDA's ``torch.autocast``, float32, as
        ``torch.nn.LayerNorm`` returns there (CPU autocast leaves layer_norm in x's dtype, and so does this).
        Gradients: dx in x's dtype, dweight and dbias in theirs.

    Raises:
        ContractError: (a ValueError) for anything outside the contract, before anything is written; a
            DTensor x, weight or bias.
        RuntimeError: on a double backward.

    Source: the docstring of :mod:`rmsnorm.layernorm_launchers`; Triton's tutorial 05-layer-norm.
    """
    if eps is None:  # F.layer_norm takes a float; None means nothing here (rmsnorm_fast's None is F.rms_norm's)
        check_eps(eps)
    check_functional_inputs(x, weight, eps, *(() if bias is None else (("bias", bias),)))
    weight, bias = unit_stride_vector(weight), unit_stride_vector(bias)
    if torch._C._is_any_autocast_enabled():  # the cheap question inline: asked every call
        x, weight, bias = float32_under_autocast(x, weight, bias, norm="layer_norm")
    compiling = torch.compiler.is_compiling()  # asked here, not in a helper (see rmsnorm_fast)
    # torch.jit.trace (never asked under Dynamo, which cannot trace the question): the operator, on rows
    # formed by ops the trace records
    tracing = not compiling and torch._C._is_tracing()
    if tracing:
        rows, weight, bias = traced_rows(x), traced_vector(weight), traced_vector(bias)
    else:
        rows = as_rows(x)
    if compiling or tracing or torch._C._len_torch_dispatch_stack() or x.is_meta:
        check_scalars_for_the_op(eps, 0.0, weight, compiling)
        y, _mean, _rstd = _forward_op(rows, weight, bias, float(eps))
    else:
        check_layernorm_inputs(rows, weight, bias, eps)
        y, _mean, _rstd = run_eagerly(_FastLayerNormFunction, _FastLayerNormFunctionForTransforms, rows, weight, bias,
                                      float(eps))
    return y if rows is x else y.view_as(x)  # view_as: a trace replays it at any rank

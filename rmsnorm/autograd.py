"""The fast path as PyTorch calls it: a lean eager path, two registered operators, the functional.

A model calls the norm as a Python function, and at the sizes real batches
have the host's time per call is what the model feels. So the eager path
is kept as short as it can be:

- eager calls (no ``torch.compile`` tracing, no ``TorchDispatchMode`` active,
  no meta tensor) go through :class:`_FastRMSNormFunction`, a
  ``torch.autograd.Function`` whose forward and backward call the launchers
  directly (:func:`~rmsnorm.forward.launch_forward`,
  :func:`~rmsnorm.backward.launch_backward`), with no dispatcher in
  between, and x checked once per call; where there is no gradient to
  record (no grad, inference mode, no input requiring grad) the call goes
  straight to the launcher, with no Function (:func:`run_eagerly`; an eager call made inside a
  torch.compile region, in a frame Dynamo has given up on, goes through
  the class :func:`outside_dynamo` builds, which runs the same code with
  Dynamo switched off);
- ``torch.func`` transforms go through the same Function, which has a separate
  ``setup_context`` and a ``vmap`` rule (the batch folded into rows); ``grad``,
  ``vjp`` and ``jacrev`` run its backward through :class:`_BackwardUnderTransforms`,
  which unwraps their tensors before the kernels launch;
- ``torch.compile``, dispatch modes and meta tensors see two operators, defined with
  ``torch.library.define``/``impl`` and given fake implementations with
  ``torch.library.register_fake``:

  - ``rmsnorm_fast::forward(x, weight, eps, offset=0.0) -> (y, rstd)``
  - ``rmsnorm_fast::backward(x, weight, rstd, dy, offset=0.0) -> (dx, dgamma)`` (dgamma empty when weight is None)

  so ``torch.compile(model, fullgraph=True)`` traces them as opaque nodes (no
  graph break, the same kernels as in eager mode), and
  ``torch.library.opcheck`` passes. The forward operator's autograd formula
  (``torch.library.register_autograd``) calls the backward operator; the
  backward is not differentiable, and a double backward raises a clear
  RuntimeError on both paths.

Why not ``torch.library.custom_op``: measured on the H200's host (torch 2.11),
its eager dispatch cost about 100 µs of a 120 µs forward, against about 10 µs
for an operator defined with ``torch.library.define``/``impl`` and none at all
for a direct call from an ``autograd.Function`` (pytorch/pytorch #176592 and
#177109; attention-gym PR #302 found the same). ``triton_op`` + ``wrap_triton``
would let Inductor see inside the kernels, but its eager call goes through
the same ``custom_op`` machinery.

The fused residual add (:mod:`rmsnorm.fused_add`) defines two more operators in the same library and
calls this module's helpers (the functional's checks, rows, the Dynamo-off class, the double-backward
refusal, the DTensor rule at the operators).

File order as in Liger and quack: kernels and launchers (forward.py,
backward.py) → operators and autograd → functional (here) → module (module.py).

Source: notebooks/11_extending_the_contract.ipynb; PyTorch "Python Custom
Operators" (torch.library.define, impl, register_fake, register_autograd).
"""

from __future__ import annotations

import functools
import math

import torch
from torch._C._dynamo.eval_frame import get_eval_frame_callback as _dynamo_callback
from torch.autograd import forward_ad as _forward_ad

from .backward import launch_backward, rmsnorm_fast_backward
from .contract import (
    _PLAIN,
    ContractError,
    DTensor,
    _functorch_wrapped,
    _require_tensor,
    check_eps,
    check_fast_inputs,
    check_offset,
    refuse_dtensor,
)
from .forward import launch_forward

_LIB = torch.library.Library("rmsnorm_fast", "DEF")  # kept alive: the operators live as long as it does
_LIB.define("forward(Tensor x, Tensor? weight, float eps, float offset=0.0) -> (Tensor, Tensor)")
_LIB.define("backward(Tensor x, Tensor? weight, Tensor rstd, Tensor dy, float offset=0.0) -> (Tensor, Tensor)")


def _forward_impl(x: torch.Tensor, weight: torch.Tensor | None, eps: float,
                  offset: float = 0.0) -> tuple[torch.Tensor, torch.Tensor]:
    check_fast_inputs(x, weight, eps)
    check_offset(offset, weight)
    return launch_forward(x, weight, eps, None, offset)


def _backward_impl(x, weight, rstd, dy, offset=0.0):
    dx, dgamma = rmsnorm_fast_backward(x, weight, rstd, dy, offset=offset)
    return dx, (x.new_empty(0) if dgamma is None else dgamma)  # an op returns tensors: empty = no weight


for _device in ("CPU", "CUDA"):
    _LIB.impl("forward", _forward_impl, _device)
    _LIB.impl("backward", _backward_impl, _device)


@torch.library.register_fake("rmsnorm_fast::forward", lib=_LIB)
def _(x, weight, eps, offset=0.0):
    return x.new_empty(x.shape), x.new_empty(x.shape[:1], dtype=torch.float32)


@torch.library.register_fake("rmsnorm_fast::backward", lib=_LIB)
def _(x, weight, rstd, dy, offset=0.0):
    return x.new_empty(x.shape), (x.new_empty(0) if weight is None else weight.new_empty(weight.shape))


#: The two operators (``torch.ops.rmsnorm_fast.forward`` / ``.backward``), as torch.compile and opcheck see them.
_forward_op = torch.ops.rmsnorm_fast.forward.default
_backward_op = torch.ops.rmsnorm_fast.backward.default


def _refuse_dtensor_at_the_op(cls, func, types, args, kwargs=None):
    """What DTensor's dispatch runs for the library's operators: the eager entry's ContractError.

    Without it a DTensor reaching ``torch.ops.rmsnorm_fast.*`` directly fails with DTensor's own
    NotImplementedError ("does not have a sharding strategy registered"); rmsnorm_fast and rmsnorm_add
    refuse before the operator, eager and traced, so only a direct call gets here. Nothing is allocated.
    """
    names = [argument.name for argument in func._schema.arguments]
    for name, arg in zip(names, args):
        refuse_dtensor(name, arg)
    raise ContractError(f"{func}: DTensor arguments are refused (see rmsnorm.contract.refuse_dtensor)")


def refuse_dtensor_at_the_ops(*ops: str) -> None:
    """Register :func:`_refuse_dtensor_at_the_op` as DTensor's rule for each of ``ops`` (``"rmsnorm_fast::…"``)."""
    if DTensor is not None:
        for op in ops:
            torch.library.register_torch_dispatch(op, DTensor, _refuse_dtensor_at_the_op, lib=_LIB)


refuse_dtensor_at_the_ops("rmsnorm_fast::forward", "rmsnorm_fast::backward")


def _unit_column_stride(dy: torch.Tensor) -> torch.Tensor:
    return dy if dy.stride(-1) == 1 or dy.shape[-1] == 1 else dy.contiguous()


#: Devices whose autocast may list the norms among its float32 ops (ATen's autocast_mode.h, AT_FORALL_FP32): there
#: such a norm casts x, weight and bias to float32 and returns float32. The CPU's list names neither norm.
AUTOCAST_FLOAT32 = ("cuda",)
#: Whether this torch's CUDA autocast casts each norm to float32: read from its dispatcher (an AutocastCUDA
#: kernel registered for the op), as it differs between versions: layer_norm always; rms_norm in torch 2.13,
#: not in torch 2.11 (whose ``torch.nn.RMSNorm`` returns x's dtype under autocast).
TORCH_AUTOCASTS = {norm: torch._C._dispatch_has_kernel_for_dispatch_key(f"aten::{norm}", "AutocastCUDA")
                   for norm in ("rms_norm", "layer_norm")}
#: The dtypes autocast's float32 cast changes (float32 is kept; float64 and integers are not cast).
_HALF_DTYPES = (torch.float16, torch.bfloat16)


def autocast_casts_norms(x, norm: str = "rms_norm") -> bool:
    """Whether autocast is on where this torch casts ``norm`` ("rms_norm", "layer_norm") to float32 for x's
    device (:data:`AUTOCAST_FLOAT32`, :data:`TORCH_AUTOCASTS`)."""
    return TORCH_AUTOCASTS[norm] and x.device.type in AUTOCAST_FLOAT32 and torch.is_autocast_enabled(x.device.type)


def float32_under_autocast(x, *others, norm: str = "rms_norm"):
    """(x, *others) in float32 where autocast casts torch's ``norm`` so (:func:`autocast_casts_norms`), else as they
    are.

    ``others`` are the weight and the bias, None allowed. As autocast's cast, only 16-bit floats are cast: a float64
    or integer tensor goes on as it is, to the contract's refusal. Callers ask the cheap question first, inline
    (``torch._C._is_any_autocast_enabled()``: any autocast on at all), since every call asks it.
    """
    if not autocast_casts_norms(x, norm):
        return (x, *others)
    return tuple(t.float() if isinstance(t, torch.Tensor) and t.dtype in _HALF_DTYPES else t for t in (x, *others))



def unit_stride_vector(t):
    """A 1-D weight or bias with unit stride: itself, else one copy (``w[::2]``, ``w.expand(N)``), which torch's
    norms take as they are and the kernels cannot; anything else as it is, for the contract to judge."""
    return t if t is None or t.dim() != 1 or t.stride(0) == 1 or t.shape[0] <= 1 else t.contiguous()


def _setup_context(ctx, inputs, output):
    x, weight, _eps, *offset = inputs  # offset: absent when the caller left the schema's default
    _y, rstd = output
    ctx.save_for_backward(_savable(x), _savable(weight), rstd)  # an inference tensor is copied, as eager copies it
    ctx.mark_non_differentiable(rstd)
    ctx.set_materialize_grads(False)  # see _FastRMSNormFunctionForTransforms.setup_context
    ctx.offset = offset[0] if offset else 0.0


def _backward(ctx, dy, _drstd):
    if dy is None:
        return None, None, None, None
    x, weight, rstd = ctx.saved_tensors
    dx, dgamma = _backward_op(x, weight, rstd, _unit_column_stride(dy), ctx.offset)
    return dx, (None if weight is None else dgamma), None, None


torch.library.register_autograd("rmsnorm_fast::forward", _backward, setup_context=_setup_context, lib=_LIB)

#: What each norm's caller runs instead for higher-order gradients.
_TORCH_EQUIVALENT = {"rmsnorm_fast": "torch.nn.functional.rms_norm",
                     "rmsnorm_add": "torch's add and torch.nn.functional.rms_norm",
                     "layernorm_fast": "torch.nn.functional.layer_norm"}


def _double_backward_error(norm: str) -> RuntimeError:
    return RuntimeError(f"{norm}: double backward (a gradient of the gradient) is not supported; the fused "
                        f"backward kernel is not itself differentiable. Use {_TORCH_EQUIVALENT[norm]} for "
                        "higher-order gradients")


def _no_double_backward(ctx, *grads, norm: str = "rmsnorm_fast"):
    raise _double_backward_error(norm)


def _setup_nothing(ctx, inputs, output):
    pass


torch.library.register_autograd("rmsnorm_fast::backward", _no_double_backward, setup_context=_setup_nothing, lib=_LIB)


class _RefuseDoubleBackward(torch.autograd.Function):
    """(x, weight, dx, dgamma) → (dx, dgamma), attached to x and weight's graph; its backward raises.

    Used when a backward builds a graph (create_graph=True), so that a gradient of these gradients
    fails with a clear message rather than "does not require grad".
    """

    @staticmethod
    def forward(ctx, x, weight, dx, dgamma, norm="rmsnorm_fast"):
        ctx.norm = norm  # the function the caller called, named in the error
        return dx.view_as(dx), (None if dgamma is None else dgamma.view_as(dgamma))

    @staticmethod
    def backward(ctx, *grads):
        raise _double_backward_error(ctx.norm)


def _savable(t: torch.Tensor | None) -> torch.Tensor | None:
    """``t``, or a normal copy of it when it was made under ``torch.inference_mode()``.

    Autograd cannot save an inference tensor (the RL pattern: roll out under inference mode, then
    train on the rollouts). ``torch.nn.RMSNorm`` never saves x itself; the fused backward needs it,
    so such an x costs one copy, made where the forward is tracked (outside inference mode).
    """
    return t.clone() if t is not None and t.is_inference() else t


def _batch_slice(t, dim, b):
    return t if dim is None or t is None else t.select(dim, b)


class _BackwardUnderTransforms(torch.autograd.Function):
    """(x, weight, rstd, dy, offset[, dres]) → (dx, dgamma or empty): the backward kernels, for ``torch.func``.

    ``dres`` is the fused add's gradient of residual_out (then x is residual_out and dx the gradient of h).

    A transform calls the forward Function's backward with its own wrapped tensors (``grad``), or
    batched ones (``jacrev`` runs the backward under ``vmap``, one cotangent per output element). Going
    through this Function unwraps them before the kernels launch; its :meth:`vmap` rule launches the
    backward once per batch element, so each dgamma is its own element's sum. Not itself differentiable.
    """

    @staticmethod
    def forward(x, weight, rstd, dy, offset, dres=None):
        dx, dgamma = launch_backward(x, weight, rstd, _unit_column_stride(dy), None, offset,
                                     None if dres is None else _unit_column_stride(dres))
        return dx, (x.new_empty(0) if dgamma is None else dgamma)

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.norm = "rmsnorm_fast" if len(inputs) < 6 or inputs[5] is None else "rmsnorm_add"  # dres: the fused add's

    @staticmethod
    def backward(ctx, *grads):
        raise _double_backward_error(ctx.norm)

    @staticmethod
    def vmap(info, in_dims, x, weight, rstd, dy, offset, dres=None):
        tensors, dims = (x, weight, rstd, dy, dres), in_dims[:4] + in_dims[5:6]
        outputs = [_BackwardUnderTransforms.apply(*(_batch_slice(t, d, b) for t, d in zip(tensors[:4], dims)),
                                                  offset, _batch_slice(dres, dims[4] if dres is not None else None, b))
                   for b in range(info.batch_size)]
        return (torch.stack([dx for dx, _ in outputs]), torch.stack([dg for _, dg in outputs])), (0, 0)


class _FastRMSNormFunctionForTransforms(torch.autograd.Function):
    """The eager path under ``torch.func``: (x (M, N) checked, weight or None, eps, offset) → (y, rstd).

    Written with a separate ``setup_context`` and a :meth:`vmap` rule, as ``torch.func`` requires
    (PyTorch, "Extending torch.func with autograd.Function"): ``vmap`` folds the batch into rows,
    ``grad``/``vjp``/``jacrev`` run the backward through :class:`_BackwardUnderTransforms`. Outside a
    transform the call goes through :data:`_FastRMSNormFunction` (:func:`with_ctx_forward`), the same code.
    """

    @staticmethod
    def forward(x, weight, eps, offset):
        return launch_forward(x, weight, eps, None, offset)

    @staticmethod
    def setup_context(ctx, inputs, output):
        x, weight, _eps, ctx.offset = inputs
        ctx.save_for_backward(_savable(x), _savable(weight), output[1])
        ctx.mark_non_differentiable(output[1])
        # rstd has no gradient: autograd would otherwise fill zeros for it on every backward (one more kernel
        # launch), and y's gradient is None only where no gradient reaches the norm at all
        ctx.set_materialize_grads(False)

    @staticmethod
    def backward(ctx, dy, _drstd):
        if dy is None:
            return None, None, None, None
        x, weight, rstd = ctx.saved_tensors
        if _functorch_wrapped(x, weight, rstd, dy):
            dx, dgamma = _BackwardUnderTransforms.apply(x, weight, rstd, dy, ctx.offset)
            return dx, (None if weight is None else dgamma), None, None
        dx, dgamma = launch_backward(x, weight, rstd, _unit_column_stride(dy), None, ctx.offset)
        if torch.is_grad_enabled():  # create_graph=True: the next backward through these must refuse
            dx, dgamma = _RefuseDoubleBackward.apply(x, weight, dx, dgamma)
        return dx, dgamma, None, None

    @staticmethod
    def vmap(info, in_dims, x, weight, eps, offset):
        x_dim, weight_dim, *_ = in_dims
        if weight_dim is not None:
            raise ContractError(
                "rmsnorm_fast under torch.func.vmap: the weight is batched (in_dims gives it a batch dimension); "
                "the kernels take one (N,) weight. Map over x only (in_dims=(0, None)), or loop over the weights"
            )
        batch = x.movedim(x_dim, 0)  # (B, M, N): every element's rows, one after another
        y, rstd = _FastRMSNormFunctionForTransforms.apply(_as_rows(batch), weight, eps, offset)
        return (y.view(batch.shape), rstd.view(batch.shape[:-1])), (0, 0)


def with_ctx_forward(function: type[torch.autograd.Function], name: str) -> type[torch.autograd.Function]:
    """``function`` (a Function with ``setup_context``) as a Function whose ``forward(ctx, …)`` does both.

    ``Function.apply`` binds the arguments of a Function that has a separate ``setup_context`` through
    ``inspect.signature`` on every call (torch's ``autograd/function.py``, ``bind_default_args``): about
    20 µs of host time a call, measured with the launches stubbed out, twice the rest of the call. A
    forward that takes ``ctx`` skips it. torch.func transforms need ``setup_context``: :func:`run_eagerly`
    takes ``function`` (the Function given here) while one is active.

    Args:
        name: the class's name (its ``grad_fn`` is ``<name>Backward``).
    """

    def forward(ctx, *args):
        output = function.forward(*args)
        function.setup_context(ctx, args, output)
        return output

    return type(name, (torch.autograd.Function,), {"forward": staticmethod(forward),
                                                   "backward": staticmethod(function.backward),
                                                   "__doc__": f"{function.__name__}, with forward(ctx, …)."})


#: Autograd's own ``apply`` (``torch._C._FunctionBase.apply``), called as ``_autograd_apply(cls, *args)``: the C
#: below ``Function.apply``'s Python layer, which binds the arguments of a Function with a ``setup_context``, hands
#: a transform's call to ``custom_function_call`` and unwraps functorch wrappers whose transform has finished. Where
#: none of that applies (:func:`run_eagerly`) the layer does nothing and costs about 3 µs of host time a call on a
#: CPU of the course's machines (scripts/probe_launch_host.py).
_autograd_apply = torch._C._FunctionBase.__dict__["apply"]


_FastRMSNormFunction = with_ctx_forward(_FastRMSNormFunctionForTransforms, "_FastRMSNormFunction")


def run_eagerly(function: type[torch.autograd.Function], for_transforms: type[torch.autograd.Function],
                *args) -> tuple:
    """An eager call's outputs, ``for_transforms.forward(*args)``, with autograd recording them where it must.

    Args:
        function: the Function with ``forward(ctx, …)`` (:func:`with_ctx_forward` of ``for_transforms``).
        for_transforms: the Function with ``setup_context`` and a ``vmap`` rule; its ``forward`` is the launch.
        args: the Function's arguments, tensors and Python scalars.

    The call takes, by what is active:

    - a torch.func transform: ``for_transforms.apply`` (``setup_context`` and the ``vmap`` rule);
    - neither a transform nor a gradient to record (no grad mode or inference mode, or no tensor argument
      that requires grad) nor a forward-mode AD level: the launch itself, with no Function: an
      ``autograd.Function`` costs the host about as much as the launch even when it records nothing, and
      decoding (``generate`` runs under no grad) calls the norm twice a layer for every token
      (scripts/probe_launch_host.py, the launch stubbed: 59 → 38 µs a call on a CPU of the course's machines);
    - otherwise autograd's own apply of ``function`` (:data:`_autograd_apply`), or ``function.apply`` when a
      tensor argument is a functorch wrapper kept from a finished transform.

    Inside a torch.compile region (an eager call in a frame Dynamo has given up on) the chosen Function goes
    through :func:`outside_dynamo`, launch or not, so that Dynamo never traces a launch.
    """
    transforms = torch._C._are_functorch_transforms_active()
    if _dynamo_callback():
        return outside_dynamo(for_transforms if transforms else function).apply(*args)
    if transforms:
        return for_transforms.apply(*args)
    if _forward_ad._current_level < 0 and not (
            torch.is_grad_enabled() and any(isinstance(a, torch.Tensor) and a.requires_grad for a in args)):
        return for_transforms.forward(*args)
    if _functorch_wrapped(*args):  # a tensor kept from a finished transform: Function.apply unwraps it
        return function.apply(*args)
    return _autograd_apply(function, *args)


@functools.cache
def outside_dynamo(function: type[torch.autograd.Function]) -> type[torch.autograd.Function]:
    """An eager path's Function (``function``), for an eager call made while a torch.compile region is running.

    Dynamo runs a frame eagerly when it has given up on it (a frame that raised
    while being traced, a recompile limit hit), but it still tries to compile
    every frame that frame calls: here ``forward``, ``backward`` and the
    launchers, whose launch keys read ``data_ptr()`` and cannot be traced
    (with ``fullgraph=True`` an ``Unsupported`` error). This subclass's forward and
    backward run with Dynamo switched off (``torch.compiler.disable``), as
    the compiled graph runs the operators. The plain class is kept for calls
    outside torch.compile: the switch costs about 1 µs of host time per call.
    Built at the first such call, because ``torch.compiler.disable`` imports
    ``torch._dynamo``, which ``import rmsnorm`` must not (it is already imported
    whenever a compiled region runs).
    """

    class OutsideDynamo(function):
        forward = staticmethod(torch.compiler.disable(function.forward))
        backward = staticmethod(torch.compiler.disable(function.backward))
        if "setup_context" in vars(function):  # its own, not a with_ctx_forward class's inherited default
            setup_context = staticmethod(torch.compiler.disable(function.setup_context))

    OutsideDynamo.__name__ = OutsideDynamo.__qualname__ = f"{function.__name__}OutsideDynamo"
    return OutsideDynamo


def traced_rows(t: torch.Tensor) -> torch.Tensor:
    """(…, N) → (M, N) as torch.jit.trace records it: the trace replays the ops it saw with the sizes it read, so
    ``contiguous`` (a no-op where the example was, a copy where a later input is not), -1 and ``size(-1)`` (not the
    example's M and rank) let the traced function take inputs of any rank and layout."""
    return t.contiguous().reshape(-1, t.size(-1))


def traced_vector(t):
    """A weight or bias as torch.jit.trace records it: ``contiguous`` always, so that a strided one at replay is
    copied as eager copies it (:func:`unit_stride_vector`)."""
    return None if t is None else t.contiguous()


def _as_rows(t: torch.Tensor) -> torch.Tensor:
    """(…, N) → (M, N) with unit column stride: a view when possible, else one copy.

    ``reshape`` is a view when the leading dimensions collapse to one row
    stride (``buf[:, :N]``, ``buf[..., :N]``) and one contiguous copy when
    they do not (a head view ``qkv[:, :H * D].view(T, H, D)``, transposed
    leading dimensions). It decides from sizes and strides, so torch.compile
    traces it; a ``view`` tried inside ``try``/``except`` cannot be traced.
    """
    if t.shape[-1] > 1 and t.stride(-1) != 1:
        t = t.contiguous()
    # M spelt out, not -1: under vmap over an empty batch a row of (N,) has 0 elements, and -1 cannot be inferred
    return t.reshape(math.prod(t.shape[:-1]), t.shape[-1])


def rmsnorm_fast(x: torch.Tensor, weight: torch.Tensor | None, eps: float | None = 1e-6,
                 offset: float = 0.0) -> torch.Tensor:
    """RMSNorm over the last dimension with the fast kernels; differentiable, compilable.

    Args:
        x: (..., N) float32/float16/bfloat16, 1 ≤ N ≤ 262144, on CUDA (or the
            CPU under the interpreter, bf16 excepted). Leading dimensions are
            flattened into M rows. Layout: when the last dimension has unit
            stride and the leading ones collapse to one row stride (e.g.
            ``buf[:, :N]``, a slice of a fused QKV buffer), rows are read in
            place; any other layout is copied once with ``.contiguous()``.
        weight: (N,) γ, float32/float16/bfloat16 (may differ from x's
            dtype), or None for no weight; one without unit stride is copied once.
        eps: finite real number >= 0, or None: as ``F.rms_norm(eps=None)``, the
            epsilon of the computation dtype, ``torch.finfo(torch.float32).eps``
            (≈ 1.19e-7) for every x dtype (see :class:`FastRMSNorm`). The default is 1e-6, Llama's and the
            article's, where ``F.rms_norm``'s is None: pass ``eps=None`` for torch's.
        offset: y = x · rstd · (weight + offset), computed in float32 with one rounding to x's dtype:
            0.0 (default, Llama), 1.0 for the zero-centred weight of Gemma and Qwen3.5 (``1 + weight``),
            any finite float; dx uses weight + offset, dgamma does not depend on it. Without a weight
            it must be 0.0. Each value compiles its own kernels (a constexpr: 0.0 costs nothing).

    Returns:
        y: shape of ``x``, dtype of ``x`` (also with a weight of another
        dtype: activations stay in their dtype, as in Liger and quack),
        contiguous; under CUDA's ``torch.autocast``, float32, as ``F.rms_norm`` returns there (autocast
        casts its inputs to float32; CPU autocast leaves rms_norm in x's dtype, and so does this). Gradients: dx
        in x's dtype, dgamma in weight's dtype (the upstream dy may have any
        layout).

    Across devices and ranks: each call runs on the device of its tensors (also
    when another CUDA device is current); under DDP and FSDP2 each rank calls it
    with plain tensors (FSDP2's ``fully_shard`` unshards the weight before the
    forward), and that is supported. A DTensor x or weight is refused, as quack
    refuses it, rather than all-gathered, as Liger does: see
    :func:`~rmsnorm.contract.refuse_dtensor`.

    Raises:
        ContractError: (a ValueError) for anything outside the fast contract,
            before anything is written; a DTensor x or weight (tensor or sequence
            parallelism, a weight still sharded), eager or under torch.compile,
            with its placements and what to do instead (``x.full_tensor()``, or
            ``torch.nn.RMSNorm``, which DTensor shards).
        RuntimeError: on a double backward.

    Source: notebooks/09_the_long_row.ipynb … 12_tuning_and_side_by_side.ipynb.
    """
    return _rmsnorm(x, weight, eps, offset, True)


def _rmsnorm(x, weight, eps, offset, cast_under_autocast: bool) -> torch.Tensor:
    """:func:`rmsnorm_fast`; ``cast_under_autocast`` False keeps x's dtype under CUDA autocast (Hugging Face's norms,
    :class:`~rmsnorm.FastRMSNorm` with ``autocast_to_float32=False``)."""
    eps = check_functional_inputs(x, weight, eps)
    if cast_under_autocast and torch._C._is_any_autocast_enabled():  # the cheap question inline: asked every call
        x, weight = float32_under_autocast(x, weight)
    weight = unit_stride_vector(weight)
    compiling = torch.compiler.is_compiling()  # asked here: in a helper's frame, which Dynamo compiles on its own
    # when it has given up on this one, it is always True
    # torch.jit.trace (never asked under Dynamo, which cannot trace the question): the operator, on rows
    # formed by ops the trace records
    tracing = not compiling and torch._C._is_tracing()
    if tracing:
        rows, weight = traced_rows(x), traced_vector(weight)
    else:
        rows = as_rows(x)
    if compiling or tracing or torch._C._len_torch_dispatch_stack() or x.is_meta:
        # the operator: what torch.compile traces, and what a TorchDispatchMode (FakeTensorMode, a
        # FlopCounterMode, an op log) or a meta tensor must see
        check_scalars_for_the_op(eps, offset, weight, compiling)
        y, _rstd = _forward_op(rows, weight, float(eps), float(offset))
    else:
        check_fast_inputs(rows, weight, eps)  # x checked once, here
        if type(offset) is not float or offset != 0.0:
            check_offset(offset, weight)
        y, _rstd = run_eagerly(_FastRMSNormFunction, _FastRMSNormFunctionForTransforms, rows, weight, float(eps),
                               float(offset))
    return y if rows is x else y.view_as(x)  # view_as: a trace replays it at any rank


def check_functional_inputs(x, weight, eps, *others: tuple[str, object]) -> float:
    """The functionals' checks before rows are formed: tensors, no DTensor, at least one column; eps resolved.

    Args:
        x, weight, eps: as :func:`rmsnorm_fast` takes them.
        others: (name, tensor) pairs of further (..., N) inputs (the fused add's residual), held to the
            same DTensor rule.

    Returns:
        eps, with None replaced as ``F.rms_norm(eps=None)`` replaces it.

    Raises:
        ContractError: before either path: the operator would see a DTensor too (and torch.compile traces
            these checks, so a compiled call refuses the same way).
    """
    _require_tensor("x", x)
    if type(x) is not torch.Tensor or (weight is not None and type(weight) not in _PLAIN):
        refuse_dtensor("x", x)
        refuse_dtensor("weight", weight)
    for name, t in others:
        _require_tensor(name, t)
        if type(t) is not torch.Tensor:
            refuse_dtensor(name, t)
    if x.dim() == 0:
        raise ContractError("x must have at least 1 dimension (..., N); got a 0-D tensor")
    if x.shape[-1] == 0:
        raise ContractError(f"x must have 1 <= N columns; got shape {tuple(x.shape)}")
    if eps is None:  # torch takes the epsilon of its computation dtype (torch._decomp's _fused_rms_norm):
        eps = torch.finfo(torch.float32).eps  # float32 for every dtype here, and the kernels compute in float32
    return eps


def as_rows(t: torch.Tensor) -> torch.Tensor:
    """``t`` as (M, N) rows with unit column stride: itself when it is already, else :func:`_as_rows`."""
    return t if t.dim() == 2 and (t.stride(1) == 1 or t.shape[1] == 1) else _as_rows(t)


def check_scalars_for_the_op(eps, offset, weight, compiling: bool) -> None:
    """eps and offset checked before the operator, whose schema would refuse a non-float less clearly.

    Args:
        compiling: ``torch.compiler.is_compiling()``, asked by the caller in its own frame.

    Under torch.compile a float's value is checked when the traced op runs (in its implementation):
    a ContractError raised while Dynamo traces makes it skip the calling function and
    FastRMSNorm.forward for every caller until torch._dynamo.reset() (notebooks/TROUBLESHOOTING.md).
    """
    if not compiling or not isinstance(eps, (float, torch.SymFloat)):
        check_eps(eps)
    if not compiling or not isinstance(offset, (float, torch.SymFloat)):
        check_offset(offset, weight)


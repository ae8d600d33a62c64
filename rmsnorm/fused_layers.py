"""The fused residual add + RMSNorm inside a model's pre-norm decoder layers: ``swap_rmsnorm(..., fuse_residual=True)``.

A pre-norm decoder layer (in transformers 5.17: Llama, Qwen2, Qwen3, Qwen3-MoE, Mistral, Gemma) runs::

    residual = h;  x = input_layernorm(h);  x = self_attn(x, ...);  h = residual + x
    residual = h;  x = post_attention_layernorm(h);  x = mlp(x);  return residual + x

:func:`fuse_decoder_layers` makes the add that ends the first line and the norm that follows it one
call, ``x, h = rmsnorm_add(x, residual, weight, eps, offset=...)``, with the post-attention norm's own
weight Parameter, eps and offset: the forward reads h once fewer (the kernel normalises the h it has
just made), and the backward adds h's two gradients (the residual's and the norm's) in the norm's
kernel instead of in a separate add. Everything else is the layer's own: the attention, the MLP and
the input norm are called as modules, with every argument the forward takes (``attention_mask``,
``position_ids``, ``past_key_values``, ``use_cache``, ``position_embeddings``, and ``**kwargs`` passed
on to the attention), and the forward returns the one tensor transformers' returns.

**What is not fused.** The last add of layer i with layer i + 1's ``input_layernorm`` (and the last
layer's with the model's final ``norm``) would need layer i to hand on (x, residual) instead of h.
transformers' model forward (``LlamaModel.forward``) owns that loop: it passes one tensor from layer
to layer, records it for ``output_hidden_states``, and feeds the last one to ``self.norm``. Fusing
across layers means replacing that forward by a copy of it, which drifts from the next transformers
release; this module patches the layers only, so one add + norm per layer is fused, the other stays.

**Which layers.** The instance passed in is patched, never the class: its ``forward`` becomes
``functools.partial(_fused_forward, layer)`` in the instance's ``__dict__``. (Liger-Kernel's
``_bind_method_to_module`` stores a bound method there; a partial also survives pickling, which
reloads a bound method by its name, and ``copy.deepcopy`` binds it to the copy.) Other models in the
process, and the checkpoint (state_dict), are untouched; ``del layer.forward`` undoes the patch. A
layer is recognised by structure, not by class name: it has ``input_layernorm``, ``self_attn``,
``post_attention_layernorm`` and ``mlp``; its post-attention norm is a :class:`~rmsnorm.FastRMSNorm` without hooks
(one that follows torch.nn.RMSNorm under CUDA autocast, ``autocast_to_float32=True``, is called unfused on a 16-bit
stream while that autocast casts rms_norm to float32, as torch 2.13's does and 2.11's does not: the fused call
returns the stream's dtype, torch's norm then float32); and its class's ``forward`` is, statement for statement
(its syntax tree, annotations and docstring aside), :func:`_eager_forward`, the pre-norm forward the patch
reproduces. Any other module holding ``self_attn`` and ``mlp`` is left, named with the reason: Gemma 2/3's
sandwich norms, OLMo 2's post-norm, a forward with a scaled residual (Granite) or another shape (Mixtral).

**What the patched layer skips.** The fused call reads the post-attention norm's weight and does not
call the module, so a hook registered on that norm after the patch does not run (where the layer calls it
unfused, under autocast above, it does), and ``fully_shard``
applied to that norm on its own (rather than to the layer, which unshards the layer's parameters
before its forward) leaves a DTensor shard as its weight, which rmsnorm_add refuses with a
ContractError.

**Dtypes.** In a bf16 (or fp16) model the residual stream is bf16: x and residual are bf16, h is
rounded to bf16 as eager's add rounds it, and y is bf16. In a float32 model all are float32. Where the
attention's output and the residual differ (``torch.autocast``: a float32 stream, bf16 projections),
both go to the dtype eager's add gives (``torch.promote_types``: float32), so that y is float32 as the
swapped norm returns it; rmsnorm_add's own mixed mode (y in x's dtype) would round y to bf16 there.
Numbers: h is eager's, bit for bit; y is the swapped norm's within float32 roundings, and so the
original norm's as :func:`rmsnorm.swap_rmsnorm` explains.

Source: notebooks/13_into_a_model.ipynb; tests/library/test_fused_layers.py; Liger-Kernel
``apply_liger_kernel_to_llama`` and ``LigerFusedAddRMSNorm``; transformers 5.17 ``LlamaDecoderLayer.forward``.
"""

from __future__ import annotations

import ast
import functools
import inspect
import textwrap

import torch

from .autograd import _HALF_DTYPES, autocast_casts_norms
from .fused_add import rmsnorm_add
from .module import FastRMSNorm

__all__ = ["fuse_decoder_layers"]

PARTS = ("input_layernorm", "self_attn", "post_attention_layernorm", "mlp")


def _eager_forward(self, hidden_states, attention_mask=None, position_ids=None, past_key_values=None,
                   use_cache=False, position_embeddings=None, **kwargs):
    """The pre-norm forward the patch reproduces (transformers 5.17's LlamaDecoderLayer / Qwen3DecoderLayer)."""
    residual = hidden_states
    hidden_states = self.input_layernorm(hidden_states)
    # Self Attention
    hidden_states, _ = self.self_attn(
        hidden_states=hidden_states,
        attention_mask=attention_mask,
        position_ids=position_ids,
        past_key_values=past_key_values,
        use_cache=use_cache,
        position_embeddings=position_embeddings,
        **kwargs,
    )
    hidden_states = residual + hidden_states

    # Fully Connected
    residual = hidden_states
    hidden_states = self.post_attention_layernorm(hidden_states)
    hidden_states = self.mlp(hidden_states)
    hidden_states = residual + hidden_states
    return hidden_states


def _fused_forward(self, hidden_states, attention_mask=None, position_ids=None, past_key_values=None,
                   use_cache=False, position_embeddings=None, **kwargs):
    """:func:`_eager_forward` with ``h = residual + x; x = post_attention_layernorm(h)`` as one rmsnorm_add."""
    residual = hidden_states
    hidden_states = self.input_layernorm(hidden_states)
    hidden_states, _ = self.self_attn(
        hidden_states=hidden_states,
        attention_mask=attention_mask,
        position_ids=position_ids,
        past_key_values=past_key_values,
        use_cache=use_cache,
        position_embeddings=position_embeddings,
        **kwargs,
    )
    hidden_states, residual = _add_and_norm(self.post_attention_layernorm, hidden_states, residual)
    hidden_states = self.mlp(hidden_states)
    return residual + hidden_states


def _add_and_norm(norm: FastRMSNorm, x: torch.Tensor, residual: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(norm(residual + x), residual + x), both in the dtype eager's ``residual + x`` has (module docstring).

    A norm that follows torch.nn.RMSNorm under CUDA autocast returns float32 there where the installed torch's
    autocast casts rms_norm (:data:`~rmsnorm.autograd.TORCH_AUTOCASTS`), which the fused call (y in the stream's
    dtype) does not on a 16-bit stream: there, while that autocast is on, the add and the norm run as eager runs
    them. A float32 stream (a float32 model under autocast) is fused: its y is float32 either way.
    """
    dtype = torch.promote_types(x.dtype, residual.dtype)
    if (norm.autocast_to_float32 and dtype in _HALF_DTYPES and torch._C._is_any_autocast_enabled()
            and autocast_casts_norms(x)):
        h = residual + x
        return norm(h), h
    return rmsnorm_add(x.to(dtype), residual.to(dtype), norm.weight, norm.eps, offset=norm.offset)


def _syntax(function) -> str | None:
    """The function's syntax tree without its name, annotations, decorators and docstring; None without source."""
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(function)))
    except (OSError, TypeError, SyntaxError):
        return None
    node = tree.body[0]
    if not isinstance(node, ast.FunctionDef):
        return None
    node.name, node.returns, node.decorator_list = "forward", None, []
    for arg in (*node.args.posonlyargs, *node.args.args, *node.args.kwonlyargs, node.args.vararg, node.args.kwarg):
        if arg is not None:
            arg.annotation = None
    body = node.body
    if body and isinstance(body[0], ast.Expr) and isinstance(getattr(body[0], "value", None), ast.Constant):
        node.body = body[1:]
    return ast.dump(node, include_attributes=False)


_EAGER = _syntax(_eager_forward)


def _is_fused(layer) -> bool:
    forward = layer.__dict__.get("forward")
    return isinstance(forward, functools.partial) and forward.func is _fused_forward and forward.args == (layer,)


def _why_not(layer) -> str | None:
    """Why ``layer`` (a module with ``self_attn`` and ``mlp``) cannot be patched, or None."""
    kind = type(layer).__name__
    missing = [part for part in PARTS if not isinstance(getattr(layer, part, None), torch.nn.Module)]
    if missing:
        return (f"{kind}: it has no {', '.join(missing)} (a post-norm layer, as OLMo 2, has no input norm); "
                "the patch fuses a pre-norm layer's post-attention add + norm")
    sandwich = [n for n in ("pre_feedforward_layernorm", "post_feedforward_layernorm") if hasattr(layer, n)]
    if sandwich:
        return (f"{kind}: it has sandwich norms ({', '.join(sandwich)}, as Gemma 2 and 3): the residual add follows "
                "a norm of the sublayer's output, so there is no add + norm of the pre-norm shape to fuse")
    norm = layer.post_attention_layernorm
    if not isinstance(norm, FastRMSNorm):
        return (f"{kind}: its post_attention_layernorm is a {type(norm).__name__}, not a FastRMSNorm "
                "(swap_rmsnorm did not replace it; its `left` says why)")
    if norm._forward_hooks or norm._forward_pre_hooks or norm._backward_hooks:
        return (f"{kind}: its post_attention_layernorm has hooks, which the fused call would skip (it reads the "
                "norm's weight and does not call the module)")
    if "forward" in layer.__dict__:
        return f"{kind}: its forward is already replaced on the instance ({layer.__dict__['forward']!r})"
    forward = type(layer).forward
    syntax = _syntax(forward)
    where = f"{forward.__module__}.{forward.__qualname__}"
    if syntax is None:
        return f"{kind}: the source of {where} cannot be read, so it cannot be checked against the pre-norm forward"
    if syntax != _EAGER:
        return (f"{kind}: {where} is not the pre-norm forward the patch reproduces (rmsnorm.fused_layers."
                "_eager_forward): a post-norm layer (OLMo 2), dropout, a scaled residual or other arguments")
    return None


def fuse_decoder_layers(model: torch.nn.Module) -> tuple[tuple[str, ...], tuple[str, ...], dict[str, str]]:
    """Patch each pre-norm decoder layer below ``model`` (itself included) to fuse its post-attention add + norm.

    Run after the norms are swapped (:func:`rmsnorm.swap_rmsnorm` with ``fuse_residual=True`` does
    both); what is fused, what is not and the dtype rules are in the module docstring. A layer
    already patched is not patched again.

    Args:
        model: any module tree. Each module with ``self_attn`` and ``mlp`` children is a decoder layer.

    Returns:
        (fused, already, left): the dotted names of the layers patched by this call, of those that
        were patched before it, and {name: why} for each decoder layer left as it is. The root's
        name is "".
    """
    fused, already, left = [], [], {}
    for name, module in model.named_modules():
        if not (isinstance(getattr(module, "self_attn", None), torch.nn.Module)
                and isinstance(getattr(module, "mlp", None), torch.nn.Module)):
            continue
        if _is_fused(module):
            already.append(name)
            continue
        reason = _why_not(module)
        if reason is not None:
            left[name] = reason
            continue
        module.__dict__["forward"] = functools.partial(_fused_forward, module)
        fused.append(name)
    return tuple(fused), tuple(already), left

"""The model families of the step benchmark: how each is built from a size, and how Liger patches its norms.

:mod:`rmsnorm_lab.model` times one training step of a Hugging Face causal LM; which one is a
:class:`Family`: Llama (``LlamaRMSNorm``, weight), Gemma 3 (``Gemma3RMSNorm``, 1 + weight, q/k norms)
and Qwen3.5 (``Qwen3_5RMSNorm``, 1 + weight, q/k norms on its full-attention layers, and the gated
``Qwen3_5RMSNormGated`` on its linear-attention layers, which the swap leaves in place). Each is built
from :class:`rmsnorm_lab.model.ModelSize`'s numbers, head_dim = hidden / heads.

Liger, for Llama, is ``LigerRMSNorm`` swapped in by :func:`rmsnorm.swap_rmsnorm` (as the committed
model_step.csv was measured); for Gemma 3 and Qwen3.5 it is Liger's own patch,
``apply_liger_kernel_to_gemma3_text`` / ``apply_liger_kernel_to_qwen3_5`` (Liger-Kernel 0.8.5) on the
model instance, with ``rms_norm=True`` and every other switch off, so that only the norms differ.
The patch also rebinds the class in transformers' modeling module; that name is put back after it,
so a model built later is the original again. Liger missing, or a patch function missing, is
:class:`Absent`: the benchmark records the variant as absent, not failed.

Source: rmsnorm_lab/model.py; Liger-Kernel ``src/liger_kernel/transformers/monkey_patch.py`` (0.8.5).
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass

import torch

__all__ = ["FAMILIES", "Absent", "Family", "build_model", "liger_patch"]


class Absent(Exception):
    """A provider that is not there (Liger not installed, or no patch for the family): recorded, not failed."""


@dataclass(frozen=True)
class Family:
    """A transformers causal LM: its classes' names, its own config keywords, Liger's patch (None: swap)."""

    name: str
    module: str  # transformers.models.<module>.modeling_<module>
    config: str
    causal_lm: str
    liger_patch: str | None = None
    liger_off: tuple[str, ...] = ()  # the patch's switches other than rms_norm, all passed False


FAMILIES = {
    "llama": Family("llama", "llama", "LlamaConfig", "LlamaForCausalLM"),
    "gemma3": Family("gemma3", "gemma3", "Gemma3TextConfig", "Gemma3ForCausalLM", "apply_liger_kernel_to_gemma3_text",
                     ("rope", "cross_entropy", "fused_linear_cross_entropy", "geglu")),
    "qwen3_5": Family("qwen3_5", "qwen3_5", "Qwen3_5TextConfig", "Qwen3_5ForCausalLM", "apply_liger_kernel_to_qwen3_5",
                      ("rope", "cross_entropy", "fused_linear_cross_entropy", "swiglu")),
}


def _config_keywords(family: str, size) -> dict:
    """The config's sizes; Gemma 3 a 512-token sliding window, Qwen3.5 three linear-attention layers to one full."""
    keywords = dict(hidden_size=size.hidden, intermediate_size=size.intermediate, num_hidden_layers=size.layers,
                    num_attention_heads=size.heads, num_key_value_heads=size.heads, vocab_size=size.vocab,
                    max_position_embeddings=size.seq, head_dim=size.hidden // size.heads)
    if family == "gemma3":
        keywords.update(sliding_window=min(512, size.seq))
    if family == "qwen3_5":
        heads = size.heads  # linear attention: 128-wide heads at hidden 2048, as Qwen3.5's own
        keywords.update(layer_types=["full_attention" if (i + 1) % 4 == 0 or i == size.layers - 1 else
                                     "linear_attention" for i in range(size.layers)],
                        linear_num_key_heads=heads, linear_num_value_heads=heads,
                        linear_key_head_dim=size.hidden // heads, linear_value_head_dim=size.hidden // heads)
    return keywords


def build_model(family: str, size, device) -> torch.nn.Module:
    """``family``'s causal LM built from a config on ``device`` (float32, random init; the caller seeds and casts)."""
    import transformers

    spec = FAMILIES[family]
    config = getattr(transformers, spec.config)(**_config_keywords(family, size))
    with torch.device(device):
        return getattr(transformers, spec.causal_lm)(config)


def liger_patch(model: torch.nn.Module, family: str) -> tuple[int, int]:
    """Liger's patch of ``family`` applied to ``model``'s norms alone; (norms patched, RMSNorm-like modules left).

    Raises:
        Absent: liger_kernel is not installed, or has no patch for ``family``.
    """
    spec = FAMILIES[family]
    try:
        liger = importlib.import_module("liger_kernel.transformers")
    except ImportError as error:
        raise Absent(f"liger_kernel is not installed ({error})") from None
    patch = getattr(liger, spec.liger_patch, None)
    if patch is None:
        raise Absent(f"liger_kernel.transformers has no {spec.liger_patch}")
    modeling = importlib.import_module(f"transformers.models.{spec.module}.modeling_{spec.module}")
    before = dict(vars(modeling))
    try:
        patch(model=model, rms_norm=True, **dict.fromkeys(spec.liger_off, False))
    finally:
        for name, value in before.items():  # the patch rebinds the norm class module-wide: put it back
            if vars(modeling).get(name) is not value:
                setattr(modeling, name, value)
    norms = [m for m in model.modules() if "RMSNorm" in type(m).__name__]
    patched = sum(m._get_name() == "LigerRMSNorm" for m in norms)
    return patched, len(norms) - patched

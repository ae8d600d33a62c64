"""swap_rmsnorm into Gemma 3 and Qwen3.5: ``1 + weight`` as FastRMSNorm(offset=1.0), the gated norm left.

Each Hugging Face norm alone is held to the fast module to the ulp of its output dtype, and the share
of bitwise-equal elements is recorded (``record_property``: in pytest's JUnit XML) with a lower
bound asserted; then tiny Gemma3ForCausalLM and Qwen3_5ForCausalLM (hidden 64, 2 layers, vocabulary
128, random init, norm weights randomised, nothing downloaded) are swapped and their logits, loss and
gradients (input embeddings and every parameter) compared with the unswapped model's in float32.
"""

from __future__ import annotations

import copy
import os

os.environ["HF_HUB_OFFLINE"] = "1"  # before transformers: a hub call fails at once instead of downloading

import pytest  # noqa: E402
import torch  # noqa: E402

from rmsnorm import ContractError, FastRMSNorm, default_device, randomise_norm_weights, swap_rmsnorm  # noqa: E402
from rmsnorm.testing import assert_close, dgamma_tolerance, oracle, ulps  # noqa: E402

transformers = pytest.importorskip("transformers", reason="transformers (the 'models' extra) is not installed")
from transformers.models.gemma3.modeling_gemma3 import Gemma3RMSNorm  # noqa: E402
from transformers.models.llama.modeling_llama import LlamaRMSNorm  # noqa: E402
from transformers.models.olmo2.modeling_olmo2 import Olmo2RMSNorm  # noqa: E402
from transformers.models.qwen3_5.modeling_qwen3_5 import Qwen3_5RMSNorm, Qwen3_5RMSNormGated  # noqa: E402

DEVICE = default_device()
GPU = DEVICE.type == "cuda"
DTYPES = [torch.float32, torch.float16] + ([torch.bfloat16] if GPU else [])
#: The most ulps of the output dtype the fast module may be from each class's own output: one in
#: 16-bit (each rounds the float32 result once; the float32 sums of x² differ in order); in float32
#: the output dtype is the arithmetic's, and each of the two is a few float32 roundings from exact.
MAX_ULPS = {torch.float32: 4, torch.float16: 1, torch.bfloat16: 1}
#: Lower bounds of the share of bitwise-equal outputs in 16-bit (measured: 0.9998 or more for the
#: single-rounding classes, about 0.74 for Llama's two roundings in float16).
EQUAL_SHARE = {"single": 0.99, "llama": 0.5}
OFFSET = {Gemma3RMSNorm: 1.0, Qwen3_5RMSNorm: 1.0, Olmo2RMSNorm: 0.0, LlamaRMSNorm: 0.0}
N = 256


def _norm(cls, dtype, weight_dtype=None):
    model = torch.nn.ModuleDict({"norm": cls(N, eps=1e-6)}).to(DEVICE, weight_dtype or dtype)
    randomise_norm_weights(model)
    x = (3 * torch.randn(64, N, generator=torch.Generator().manual_seed(0))).to(DEVICE, dtype)
    return model, x


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("cls", list(OFFSET), ids=lambda c: c.__name__)
def test_each_norm_alone_is_reproduced_to_the_ulp_forward_and_backward(cls, dtype, record_property):
    model, x = _norm(cls, dtype)
    original = copy.deepcopy(model)
    swapped = swap_rmsnorm(model, dtype=dtype)
    assert swapped == 1 and model["norm"].offset == OFFSET[cls] and model["norm"].weight.dtype == dtype
    x_hf, x_fast, dy = x.clone().requires_grad_(), x.clone().requires_grad_(), torch.randn_like(x)
    expected, y = original["norm"](x_hf), model["norm"](x_fast)
    share = float((y == expected).double().mean())
    record_property("bitwise_equal_share", share)
    assert float(ulps(y, expected).max()) <= MAX_ULPS[dtype], share
    if dtype != torch.float32:
        assert share >= EQUAL_SHARE["llama" if cls is LlamaRMSNorm else "single"], share
    exact = oracle(x, model["norm"].weight, eps=1e-6, offset=OFFSET[cls]).to(DEVICE)
    # one rounding (ours) is never farther from the exact value than the class's own output
    assert float(ulps(y, exact.to(dtype)).max()) <= max(1.0, float(ulps(expected, exact.to(dtype)).max()))
    expected.backward(dy)
    y.backward(dy)
    assert_close(x_fast.grad, x_hf.grad.double(), dtype=dtype, msg="dx")
    assert_close(model["norm"].weight.grad, original["norm"].weight.grad.double(),
                 tol=dgamma_tolerance(64, dtype, dtype), msg="dweight")


def test_llamas_two_roundings_differ_from_the_swaps_one_by_at_most_an_ulp_of_float16():
    """The swap keeps the fast path's single rounding (x̂ · weight in float32, rounded once); Llama rounds x̂ first."""
    model, x = _norm(LlamaRMSNorm, torch.float16)
    expected = model["norm"](x)
    swap_rmsnorm(model)
    y = model["norm"](x)
    assert float(ulps(y, expected).max()) == 1.0  # different, by one rounding step at most
    assert 0.5 < float((y == expected).double().mean()) < 1.0


@pytest.mark.parametrize("cls", [Gemma3RMSNorm, Qwen3_5RMSNorm], ids=lambda c: c.__name__)
def test_float32_weights_on_16_bit_activations_as_under_autocast_are_swapped_as_the_class_computes(cls):
    """Gemma 3 and Qwen3.5 return x's dtype computed in float32: the fast path does too, the weight stays float32."""
    low = torch.bfloat16 if GPU else torch.float16  # the interpreter refuses bf16
    model, x = _norm(cls, low, weight_dtype=torch.float32)
    expected = model["norm"](x)
    assert swap_rmsnorm(model, dtype=low) == 1 and model["norm"].weight.dtype == torch.float32
    y = model["norm"](x)
    assert y.dtype == low and float(ulps(y, expected).max()) <= 1.0
    llama = torch.nn.ModuleDict({"norm": LlamaRMSNorm(N)})  # returns float32 here: refused, as before
    with pytest.raises(ContractError, match="it returns torch.float32 for"):
        swap_rmsnorm(llama, dtype=low)


def test_the_gated_norm_is_left_by_name_and_the_others_swapped():
    model = torch.nn.ModuleDict({"gated": Qwen3_5RMSNormGated(64), "plain": Qwen3_5RMSNorm(64)})
    swapped = swap_rmsnorm(model)
    assert swapped == 1 and type(model["plain"]) is FastRMSNorm and type(model["gated"]) is Qwen3_5RMSNormGated
    assert list(swapped.left) == ["gated"] and "takes gate besides x" in swapped.left["gated"]
    assert repr(swapped).startswith("Swapped(1, left={'gated': ")


def test_a_build_for_offset_one_must_take_offset():
    model = torch.nn.ModuleDict({"norm": Gemma3RMSNorm(64)})
    with pytest.raises(ContractError, match="does not take offset=, which the norms .*: norm"):
        swap_rmsnorm(model, build=lambda n, eps, weight: FastRMSNorm(n, eps=eps))
    assert type(model["norm"]) is Gemma3RMSNorm
    swap_rmsnorm(model, build=lambda n, eps, weight, offset=0.0: _keep(FastRMSNorm(n, eps=eps, offset=offset), weight))
    assert model["norm"].offset == 1.0


def _keep(module, weight):
    module.weight = weight
    return module


# --------------------------------------------------------------------------- models

TINY = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, vocab_size=128, max_position_embeddings=64,
            num_attention_heads=2, num_key_value_heads=1, head_dim=32)
#: Gemma 3: 4 norms a layer, q_norm and k_norm, the final norm; Qwen3.5: a linear-attention layer
#: (2 norms and the gated one, left) and a full-attention layer (2 norms, q_norm, k_norm), the final norm.
MODELS = {
    "gemma3": (lambda: transformers.Gemma3ForCausalLM(transformers.Gemma3TextConfig(**TINY, sliding_window=8)), 13, []),
    "qwen3_5": (lambda: transformers.Qwen3_5ForCausalLM(transformers.Qwen3_5TextConfig(
        **TINY, layer_types=["linear_attention", "full_attention"], linear_key_head_dim=16, linear_value_head_dim=16,
        linear_num_key_heads=2, linear_num_value_heads=4)), 7, ["model.layers.0.linear_attn.norm"]),
}


def _step(model, ids):
    embeds = model.get_input_embeddings()(ids).detach().requires_grad_()
    out = model(inputs_embeds=embeds, labels=ids)
    out.loss.backward()
    return out, embeds.grad


@pytest.fixture(scope="module", params=list(MODELS))
def pair(request):
    make, count, left = MODELS[request.param]
    torch.manual_seed(0)
    original = make()
    randomise_norm_weights(original)
    original = original.to(DEVICE)
    swapped_model = copy.deepcopy(original)
    swapped = swap_rmsnorm(swapped_model)
    ids = torch.randint(0, TINY["vocab_size"], (2, 16), generator=torch.Generator().manual_seed(1)).to(DEVICE)
    return request.param, count, left, swapped, original, swapped_model, _step(original, ids), _step(swapped_model, ids)


def test_every_plain_norm_is_swapped_and_the_gated_one_named(pair):
    name, count, left, swapped, original, model, *_ = pair
    assert swapped == count and sorted(swapped.left) == left
    fast = [m for m in model.modules() if isinstance(m, FastRMSNorm)]
    assert len(fast) == count and all(m.offset == 1.0 for m in fast)
    assert model.model.layers[-1].self_attn.q_norm.normalized_shape == (32,)  # per head, N = head_dim
    assert list(model.state_dict()) == list(original.state_dict())


def test_logits_loss_and_gradients_equal_the_originals_within_float32s_tolerance(pair):
    *_, original, model, (out, dx), (out_fast, dx_fast) = pair
    assert_close(out_fast.logits, out.logits.double(), dtype=torch.float32, msg="logits")
    assert_close(out_fast.loss, out.loss.double(), dtype=torch.float32, msg="loss")
    assert_close(dx_fast, dx.double(), dtype=torch.float32, msg="input gradient")
    for (n, p), q in zip(original.named_parameters(), model.parameters()):
        assert (p.grad is None) == (q.grad is None), n  # Qwen3.5's tied or unused parameters: None in both
        if p.grad is not None:
            assert_close(q.grad, p.grad.double(), dtype=torch.float32, msg=n)


@pytest.mark.gpu
@pytest.mark.skipif(not GPU, reason="needs a CUDA GPU (the interpreter refuses bf16)")
@pytest.mark.parametrize("name", list(MODELS))
def test_on_cuda_under_autocast_with_float32_weights_the_swap_matches_the_original(name):
    make, count, _ = MODELS[name]
    torch.manual_seed(0)
    original = make().cuda()
    randomise_norm_weights(original)
    model = copy.deepcopy(original)
    assert swap_rmsnorm(model, dtype=torch.bfloat16) == count
    ids = torch.randint(0, TINY["vocab_size"], (2, 16), device="cuda")
    with torch.autocast("cuda", dtype=torch.bfloat16):
        outs = [_step(m, ids) for m in (original, model)]
    assert_close(outs[1][0].logits, outs[0][0].logits.double(), dtype=torch.bfloat16)
    assert_close(outs[1][1], outs[0][1].double(), dtype=torch.bfloat16)

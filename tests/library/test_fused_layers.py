"""swap_rmsnorm(model, fuse_residual=True): the fused residual add + RMSNorm inside Llama's, Qwen3's and Gemma's layers.

On the CPU the kernels run in Triton's interpreter (float32), so the models are tiny, as in
tests/library/test_swap.py (hidden 64, 2 layers, vocabulary 128, random init, every norm weight
randomised, nothing downloaded). The rule is the issue's: the patched model's logits, loss and
every parameter's gradient equal the original (unswapped) model's within float32's row of
rmsnorm.testing.TOLERANCES, declared before any run. That the patch does run is counted, not
assumed: a TorchDispatchMode counts the registered operators each forward and backward reaches
(under a dispatch mode the library calls its operators, not the eager Function), one
``rmsnorm_fast::add_forward`` per layer and no plain norm for the post-attention norms.

DDP and FSDP2 of a patched model on two gloo ranks are in tests/library/test_distributed.py, with
the rest of its two-rank machinery.
"""

from __future__ import annotations

import collections
import copy
import inspect
import os

os.environ["HF_HUB_OFFLINE"] = "1"  # before transformers: a hub call fails at once instead of downloading

import pytest  # noqa: E402
import torch  # noqa: E402
from torch.utils._python_dispatch import TorchDispatchMode  # noqa: E402

from rmsnorm import FastRMSNorm, default_device, randomise_norm_weights, swap_rmsnorm  # noqa: E402
from rmsnorm.fused_layers import _fused_forward  # noqa: E402
from rmsnorm.testing import assert_close, inductor_unavailable  # noqa: E402

transformers = pytest.importorskip("transformers", reason="transformers (the 'models' extra) is not installed")

TINY = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, vocab_size=128, max_position_embeddings=64)
CONFIGS = {
    "llama": (transformers.LlamaConfig, transformers.LlamaForCausalLM, dict(num_attention_heads=4,
                                                                           num_key_value_heads=2)),
    "qwen3": (transformers.Qwen3Config, transformers.Qwen3ForCausalLM, dict(num_attention_heads=2,
                                                                           num_key_value_heads=1, head_dim=32)),
    # Gemma's norms scale by (1 + weight): the fused call carries the norm's offset 1.0
    "gemma": (transformers.GemmaConfig, transformers.GemmaForCausalLM, dict(num_attention_heads=4,
                                                                           num_key_value_heads=2, head_dim=16)),
}
LAYERS = ("model.layers.0", "model.layers.1")
# the plain norms a forward calls: input norms and the final norm (+ Qwen3's q_norm, k_norm per layer)
PLAIN_NORMS = {"llama": 3, "qwen3": 3 + 4, "gemma": 3}
DEVICE = default_device()
GPU = torch.cuda.is_available()
ops = torch.ops.rmsnorm_fast


def _model(name: str, seed: int = 0):
    config_cls, model_cls, extra = CONFIGS[name]
    torch.manual_seed(seed)
    model = model_cls(config_cls(**TINY, **extra))
    randomise_norm_weights(model, seed)
    return model.to(DEVICE)


def _tokens(seed=1, length=24):
    return torch.randint(0, TINY["vocab_size"], (2, length), generator=torch.Generator().manual_seed(seed)).to(DEVICE)


class _Counting(TorchDispatchMode):
    """Counts each rmsnorm_fast operator reached, and the rows (M, N) and dtypes (x, residual) add_forward is given."""

    def __init__(self):
        super().__init__()
        self.counts, self.add_rows, self.add_dtypes = collections.Counter(), [], []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func.namespace == "rmsnorm_fast":
            self.counts[func.__name__.split(".")[0]] += 1
            if func is ops.add_forward.default:
                self.add_rows.append(tuple(args[0].shape))
                self.add_dtypes.append((args[0].dtype, args[1].dtype))
        return func(*args, **(kwargs or {}))


def _loss(model, ids):
    out = model(input_ids=ids, labels=ids)
    out.loss.backward()
    return out


def _grads(model) -> dict[str, torch.Tensor]:
    """Each parameter's gradient, copied (later tests run the same model again, and gradients accumulate)."""
    return {name: p.grad.detach().clone() for name, p in model.named_parameters() if p.grad is not None}


@pytest.fixture(scope="module", params=sorted(CONFIGS))
def pair(request):
    """(name, original, fused, the Swapped result, [(output, gradients)] of one forward + backward of each,
    on the same tokens)."""
    original = _model(request.param)
    fused = copy.deepcopy(original)
    swapped = swap_rmsnorm(fused, fuse_residual=True)
    ids = _tokens()
    return request.param, original, fused, swapped, [(_loss(m, ids), _grads(m)) for m in (original, fused)]


def test_every_decoder_layer_is_patched_and_named(pair):
    name, original, fused, swapped, _ = pair
    assert swapped.fused == LAYERS and swapped.already_fused == () and swapped.left == {}
    assert int(swapped) == {"llama": 5, "qwen3": 9, "gemma": 5}[name]  # the norms are swapped as without the flag
    assert fused.model.layers[0].post_attention_layernorm.offset == (1.0 if name == "gemma" else 0.0)
    for layer_name in LAYERS:
        layer = fused.get_submodule(layer_name)
        assert layer.forward.func is _fused_forward and layer.forward.args == (layer,)
        assert "forward" not in original.get_submodule(layer_name).__dict__  # the instance, not the class


def test_the_forward_keeps_every_argument_of_the_layers_own(pair):
    _, original, fused, *_ = pair
    own = inspect.signature(original.model.layers[0].forward).parameters
    patched = inspect.signature(fused.model.layers[0].forward).parameters
    assert [(p.name, p.kind, p.default) for p in patched.values()] == [(p.name, p.kind, p.default)
                                                                      for p in own.values()]


def test_logits_loss_and_every_gradient_equal_the_originals_within_float32s_tolerance(pair):
    _, original, _, _, ((out, grads), (out_fused, grads_fused)) = pair
    assert_close(out_fused.logits, out.logits, dtype=torch.float32)
    assert_close(out_fused.loss, out.loss, dtype=torch.float32)
    assert list(grads_fused) == [name for name, _ in original.named_parameters()]  # every parameter has one
    for name, grad in grads_fused.items():
        assert_close(grad, grads[name], dtype=torch.float32, msg=f"gradient of {name}")


def test_each_layer_makes_one_fused_call_and_no_plain_post_attention_norm(pair):
    name, _, fused, *_ = pair
    with _Counting() as counting:
        _loss(fused, _tokens(seed=5))
    assert counting.counts["add_forward"] == counting.counts["add_backward"] == len(LAYERS)
    assert counting.counts["forward"] == counting.counts["backward"] == PLAIN_NORMS[name]
    unfused = _model(name)
    swap_rmsnorm(unfused)
    with _Counting() as counting:
        _loss(unfused, _tokens(seed=5))
    assert counting.counts["add_forward"] == 0 and counting.counts["forward"] == PLAIN_NORMS[name] + len(LAYERS)


def test_greedy_generate_with_the_kv_cache_gives_the_originals_tokens(pair):
    _, original, fused, *_ = pair
    prompt = _tokens(seed=3, length=5)
    settings = dict(attention_mask=torch.ones_like(prompt), max_new_tokens=4, do_sample=False, use_cache=True,
                    pad_token_id=0)
    expected = original.generate(prompt, **settings)
    with _Counting() as counting:
        tokens = fused.generate(prompt, **settings)
    assert torch.equal(tokens, expected)
    assert tokens.shape == (2, 5 + 4)
    # the prompt's 2 × 5 rows once, then 2 rows a step: the cache holds the rest
    assert counting.add_rows == [(10, 64)] * len(LAYERS) + [(2, 64)] * len(LAYERS) * 3


def test_under_gradient_checkpointing_the_gradients_are_the_same(pair):
    _, _, fused, _, (_, (out_fused, grads_fused)) = pair
    checkpointed = copy.deepcopy(fused)  # the copy's forwards are bound to the copy's layers
    assert all(checkpointed.get_submodule(n).forward.args == (checkpointed.get_submodule(n),) for n in LAYERS)
    checkpointed.gradient_checkpointing_enable()
    checkpointed.train()
    checkpointed.zero_grad(set_to_none=True)
    with _Counting() as counting:
        out = _loss(checkpointed, _tokens())
    assert counting.counts["add_forward"] == 2 * len(LAYERS)  # each layer's forward runs again in the backward
    assert_close(out.logits, out_fused.logits, dtype=torch.float32)
    for n, grad in _grads(checkpointed).items():
        assert_close(grad, grads_fused[n], dtype=torch.float32, msg=f"gradient of {n}")


def test_under_autocast_the_add_and_the_norm_run_in_the_float32_of_the_residual_stream():
    # float16: the interpreter refuses bf16. The stream (embeddings, residual adds) stays float32 while
    # the projections return float16, so eager's add gives float32 and so must the fused call's y
    original = _model("llama")
    fused = copy.deepcopy(original)
    swap_rmsnorm(fused, fuse_residual=True)
    with torch.no_grad(), torch.autocast(DEVICE.type, dtype=torch.float16):
        expected = original(input_ids=_tokens()).logits
        with _Counting() as counting:
            logits = fused(input_ids=_tokens()).logits
    assert counting.add_dtypes == [(torch.float32, torch.float32)] * len(LAYERS)
    assert logits.dtype == expected.dtype == torch.float16
    assert_close(logits, expected, dtype=torch.float16)


def test_a_second_call_patches_nothing_and_says_so(pair):
    name, _, fused, first, (_, (out_fused, _)) = pair
    again = swap_rmsnorm(fused, fuse_residual=True)
    assert (int(again), again.fused, again.already_fused, again.left) == (0, (), LAYERS, {})
    assert again.already == int(first)
    assert "already_fused=('model.layers.0', 'model.layers.1')" in repr(again)
    assert all(fused.get_submodule(n).forward.func is _fused_forward for n in LAYERS)
    with torch.no_grad():
        assert torch.equal(fused(input_ids=_tokens()).logits, out_fused.logits)


def test_other_models_and_the_class_are_untouched_and_del_forward_undoes_it():
    cls = transformers.models.llama.modeling_llama.LlamaDecoderLayer
    before = cls.forward
    fused, other = _model("llama"), _model("llama")
    swap_rmsnorm(fused, fuse_residual=True)
    assert cls.forward is before and not any("forward" in m.__dict__ for m in other.modules())
    del fused.model.layers[0].forward
    assert fused.model.layers[0].forward.__func__ is before
    with _Counting() as counting, torch.no_grad():
        fused(input_ids=_tokens())
    assert counting.counts["add_forward"] == len(LAYERS) - 1


def test_a_pickled_model_loads_with_its_layers_still_fused(pair, tmp_path):
    _, _, fused, _, (_, (out_fused, _)) = pair
    torch.save(fused, tmp_path / "model.pt")  # the whole object, not a state_dict
    loaded = torch.load(tmp_path / "model.pt", weights_only=False)
    assert all(loaded.get_submodule(n).forward.args == (loaded.get_submodule(n),) for n in LAYERS)
    with _Counting() as counting, torch.no_grad():
        logits = loaded(input_ids=_tokens()).logits
    assert counting.counts["add_forward"] == len(LAYERS)
    assert torch.equal(logits, out_fused.logits)


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_one_patched_layer_compiles_to_one_graph_holding_the_fused_operator(backend):
    from torch._dynamo.testing import CompileCounterWithBackend

    if backend == "inductor" and inductor_unavailable(DEVICE):
        pytest.skip(inductor_unavailable(DEVICE))
    model = _model("llama")
    swap_rmsnorm(model, fuse_residual=True)
    layer = model.model.layers[0]
    h = torch.randn(2, 7, 64, generator=torch.Generator().manual_seed(6)).to(DEVICE)
    position_embeddings = model.model.rotary_emb(h, torch.arange(7, device=DEVICE)[None])
    counter = CompileCounterWithBackend(backend)
    compiled = torch.compile(layer, backend=counter, fullgraph=True)
    inputs = [h.clone().requires_grad_() for _ in range(2)]
    eager = layer(inputs[0], position_embeddings=position_embeddings)
    got = compiled(inputs[1], position_embeddings=position_embeddings)
    assert counter.frame_count == 1
    targets = [str(node.target) for graph in counter.graphs for node in graph.graph.nodes]
    assert "rmsnorm_fast.add_forward.default" in targets
    got.sum().backward()
    eager.sum().backward()
    assert_close(got, eager, dtype=torch.float32)  # the same kernels; inductor's own for the rest of the layer
    assert_close(inputs[1].grad, inputs[0].grad, dtype=torch.float32)


# --------------------------------------------------------------------------- what is left, and why


class _PostNormLayer(torch.nn.Module):
    """The four parts of a pre-norm layer, but a post-norm forward: the patch must not claim it."""

    def __init__(self):
        super().__init__()
        self.input_layernorm, self.post_attention_layernorm = torch.nn.RMSNorm(8), torch.nn.RMSNorm(8)
        self.self_attn, self.mlp = torch.nn.Linear(8, 8), torch.nn.Linear(8, 8)

    def forward(self, hidden_states):
        hidden_states = self.input_layernorm(hidden_states + self.self_attn(hidden_states))
        return self.post_attention_layernorm(hidden_states + self.mlp(hidden_states))


def test_a_layer_of_another_shape_is_left_and_named_with_its_reason():
    model = torch.nn.ModuleDict({"block": _PostNormLayer()}).to(DEVICE)
    swapped = swap_rmsnorm(model, fuse_residual=True)
    assert int(swapped) == 2 and swapped.fused == ()
    assert "_PostNormLayer.forward is not the pre-norm forward the patch reproduces" in swapped.left["block"]
    assert "forward" not in model["block"].__dict__


def test_gemma3s_sandwich_norms_and_olmo2s_post_norm_are_left_with_their_reasons():
    gemma = transformers.Gemma3ForCausalLM(transformers.Gemma3TextConfig(**TINY, num_attention_heads=4,
                                                                         num_key_value_heads=2, head_dim=16))
    swapped = swap_rmsnorm(gemma, fuse_residual=True)
    assert int(swapped) > 0 and swapped.fused == ()
    for name in LAYERS:
        assert "sandwich norms (pre_feedforward_layernorm, post_feedforward_layernorm" in swapped.left[name]
    olmo = transformers.Olmo2ForCausalLM(transformers.Olmo2Config(**TINY, num_attention_heads=4))
    swapped = swap_rmsnorm(olmo, fuse_residual=True)
    assert swapped.fused == () and all("no input_layernorm (a post-norm layer" in swapped.left[n] for n in LAYERS)


def test_a_norm_that_is_not_a_fast_rmsnorm_or_has_hooks_leaves_its_layer():
    model = _model("llama")
    swap_rmsnorm(model)
    handle = model.model.layers[0].post_attention_layernorm.register_forward_hook(lambda *args: None)
    model.model.layers[1].post_attention_layernorm = torch.nn.LayerNorm(64)
    swapped = swap_rmsnorm(model, fuse_residual=True)
    assert swapped.fused == ()
    assert "post_attention_layernorm has hooks, which the fused call would skip" in swapped.left[LAYERS[0]]
    assert "post_attention_layernorm is a LayerNorm, not a FastRMSNorm" in swapped.left[LAYERS[1]]
    handle.remove()
    assert swap_rmsnorm(model, fuse_residual=True).fused == LAYERS[:1]



def test_a_norm_that_follows_torchs_autocast_rule_runs_unfused_on_a_16_bit_stream_under_autocast(monkeypatch):
    """A FastRMSNorm cast to float32 under CUDA autocast (torch.nn.RMSNorm's rule) returns float32 there, which the
    fused call does not on a 16-bit stream (y in the stream's dtype): its layer is patched, and on a float16 stream
    under that autocast calls the add and the norm as eager does, so that the MLP gets float32 as eager's; a float32
    stream stays fused. CPU autocast stands in for CUDA's here (AUTOCAST_FLOAT32)."""
    import rmsnorm.autograd

    monkeypatch.setattr(rmsnorm.autograd, "AUTOCAST_FLOAT32", (DEVICE.type,))
    monkeypatch.setattr(rmsnorm.autograd, "TORCH_AUTOCASTS", {"rms_norm": True, "layer_norm": True})  # torch 2.13's
    for dtype, fused_layers in ((torch.float32, len(LAYERS)), (torch.float16, len(LAYERS) - 1)):
        unfused = _model("llama").to(dtype)
        swap_rmsnorm(unfused)
        unfused.model.layers[0].post_attention_layernorm.autocast_to_float32 = True
        fused = copy.deepcopy(unfused)
        assert swap_rmsnorm(fused, fuse_residual=True).fused == LAYERS
        seen = []
        for model in (unfused, fused):
            model.model.layers[0].mlp.register_forward_pre_hook(lambda module, args: seen.append(args[0].dtype))
        with torch.no_grad():
            with _Counting() as counting:
                plain = fused(input_ids=_tokens()).logits
            assert counting.counts["add_forward"] == len(LAYERS), dtype  # no autocast: every layer fused
            assert_close(plain, unfused(input_ids=_tokens()).logits, dtype=dtype)
            seen.clear()
            with torch.autocast(DEVICE.type, dtype=torch.float16):
                expected = unfused(input_ids=_tokens()).logits
                with _Counting() as counting:
                    logits = fused(input_ids=_tokens()).logits
        assert counting.counts["add_forward"] == fused_layers, dtype  # layer 0 on float16: the module, as eager
        assert seen == [torch.float32, torch.float32], dtype  # the MLP's input: torch's norm's float32 in both
        assert_close(logits, expected, dtype=expected.dtype)


def test_a_build_other_than_fast_rmsnorm_leaves_every_layer():
    model = _model("llama")

    def build(n, eps, weight):
        norm = torch.nn.RMSNorm(n, eps=eps, device="meta")
        norm.weight = weight
        return norm

    swapped = swap_rmsnorm(model, build=build, fuse_residual=True)
    assert int(swapped) == 5 and swapped.fused == ()
    assert all("post_attention_layernorm is a RMSNorm, not a FastRMSNorm" in swapped.left[n] for n in LAYERS)


def test_fuse_residual_must_be_a_bool():
    from rmsnorm import ContractError

    model = _model("llama")
    with pytest.raises(ContractError, match="fuse_residual must be True or False; got 'yes'"):
        swap_rmsnorm(model, fuse_residual="yes")
    assert not any(isinstance(m, FastRMSNorm) for m in model.modules())


# --------------------------------------------------------------------------- bf16, on a GPU


@pytest.mark.gpu
@pytest.mark.skipif(not GPU, reason="needs a CUDA GPU (the interpreter refuses bf16)")
@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_on_cuda_in_bf16_the_fused_model_is_no_worse_than_the_original_against_float32(name):
    original = _model(name).to("cuda", torch.bfloat16)
    fused, ref = copy.deepcopy(original), copy.deepcopy(original).float()
    assert swap_rmsnorm(fused, dtype=torch.bfloat16, fuse_residual=True).fused == LAYERS
    ids = _tokens().cuda()
    with _Counting() as counting:
        outs = [_loss(m, ids) for m in (original, fused, ref)]
    assert counting.counts["add_forward"] == len(LAYERS)
    logits32 = outs[2].logits.detach().double()
    error = [float((o.logits.detach().double() - logits32).norm() / logits32.norm()) for o in outs[:2]]
    assert error[1] <= 1.5 * error[0], error  # test_swap.py's rule for the bf16 swap, here for each gradient too
    grads32 = [p.grad.double() for p in ref.parameters()]
    for params in (original.parameters(), fused.parameters()):
        assert all(p.grad.dtype == torch.bfloat16 for p in params)
    errors = [[float((p.grad.double() - g).norm() / g.norm()) for p, g in zip(m.parameters(), grads32)]
              for m in (original, fused)]
    worse = {n: (f, o) for (n, _), o, f in zip(original.named_parameters(), *errors) if f > 1.5 * o}
    assert not worse, worse

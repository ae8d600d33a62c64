"""rmsnorm.swap_rmsnorm: FastRMSNorm into torch and Hugging Face models, changing nothing but speed.

On the CPU the fast kernels run in Triton's interpreter (float32; the interpreter refuses bf16),
so the models are tiny: LlamaConfig and Qwen3Config with hidden 64, 2 layers, vocabulary 128,
random init, every norm weight randomised first, nothing downloaded (HF_HUB_OFFLINE=1 is set
before transformers is imported, so that an accidental hub call fails at once). Comparisons use
the declared table (rmsnorm.testing.TOLERANCES); the model-level rules are the issue's: logits
and loss within float32's tolerance, each gradient's error against a float64 run at most 1.5×
the original's, each parameter after 3 optimizer steps within 2× the original's distance from
the float64 run. The steps are SGD at lr 0.1: the loss moves (4.9 → 4.3) and the runs stay
close to linear; at lr 0.5 the tiny model amplifies float32 noise, and the original's own
distance varies by 2× from one parameter to the next.

transformers is the optional extra ``models`` (in ``dev``, so ``make setup`` installs it); the
model tests skip, with the reason, where it is missing.
"""

from __future__ import annotations

import copy
import os
import time

os.environ["HF_HUB_OFFLINE"] = "1"  # before transformers: a hub call fails at once instead of downloading

import pytest  # noqa: E402
import torch  # noqa: E402

import rmsnorm  # noqa: E402
from rmsnorm import ContractError, FastRMSNorm, default_device, randomise_norm_weights, swap_rmsnorm  # noqa: E402  # noqa: E402
from rmsnorm.testing import assert_close  # noqa: E402

transformers = pytest.importorskip("transformers", reason="transformers (the 'models' extra) is not installed")
from transformers.models.llama.modeling_llama import LlamaRMSNorm  # noqa: E402
from transformers.models.mistral.modeling_mistral import MistralRMSNorm  # noqa: E402
from transformers.models.olmo2.modeling_olmo2 import Olmo2RMSNorm  # noqa: E402
from transformers.models.qwen2.modeling_qwen2 import Qwen2RMSNorm  # noqa: E402
from transformers.models.qwen3.modeling_qwen3 import Qwen3RMSNorm  # noqa: E402

TINY = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, vocab_size=128, max_position_embeddings=64)
LLAMA = dict(TINY, num_attention_heads=4, num_key_value_heads=2)
QWEN3 = dict(TINY, num_attention_heads=2, num_key_value_heads=1, head_dim=128)  # q_norm/k_norm at Qwen3's N = 128
DEVICE = default_device()  # the interpreter's CPU here, the GPU where there is one (float32 runs on both)


def _x(*shape, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed)).to(DEVICE)


def _tokens(seed=1):
    return torch.randint(0, TINY["vocab_size"], (2, 24), generator=torch.Generator().manual_seed(seed)).to(DEVICE)


# --------------------------------------------------------------------------- modules


@pytest.mark.parametrize("eps", [1e-5, None])
def test_torch_rmsnorm_is_swapped_keeping_eps_and_the_weight_parameter(eps):
    model = torch.nn.Sequential(torch.nn.Linear(8, 33), torch.nn.RMSNorm(33, eps=eps)).to(DEVICE)
    randomise_norm_weights(model)
    weight, x = model[1].weight, _x(5, 8)
    expected = model(x)
    assert swap_rmsnorm(model) == 1
    assert type(model[1]) is FastRMSNorm and model[1].weight is weight and model[1].eps == eps
    assert_close(model(x), expected, dtype=torch.float32)


def test_a_norm_without_weight_stays_without_weight():
    model = torch.nn.Sequential(torch.nn.RMSNorm(33, elementwise_affine=False)).to(DEVICE)
    x = _x(4, 33)
    expected = model(x)
    assert swap_rmsnorm(model) == 1 and model[0].weight is None and not model[0].elementwise_affine
    assert_close(model(x), expected, dtype=torch.float32)


@pytest.mark.parametrize("cls", [LlamaRMSNorm, Qwen2RMSNorm, Qwen3RMSNorm, MistralRMSNorm, Olmo2RMSNorm],
                         ids=lambda c: c.__name__)
def test_hugging_face_norms_are_swapped_and_compute_the_same(cls):
    model = torch.nn.ModuleDict({"norm": cls(128, eps=1e-5)}).to(DEVICE)
    randomise_norm_weights(model)
    weight, x = model["norm"].weight, _x(3, 7, 128)
    expected = model["norm"](x)
    assert swap_rmsnorm(model) == 1
    norm = model["norm"]
    assert type(norm) is FastRMSNorm and norm.weight is weight and norm.eps == 1e-5 and norm.normalized_shape == (128,)
    assert norm.offset == 0.0
    assert_close(norm(x), expected, dtype=torch.float32)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_16_bit_norms_are_recognised_in_their_dtype(dtype):
    """The probe runs the original (PyTorch) only, so bf16 is judged on the CPU too."""
    model = torch.nn.Sequential(LlamaRMSNorm(64).to(dtype), torch.nn.RMSNorm(64, dtype=dtype))
    assert swap_rmsnorm(model, dtype=dtype) == 2 and model[0].weight.dtype == dtype


def test_a_norm_is_recognised_by_behaviour_not_by_its_name():
    class T5LayerNorm(torch.nn.Module):  # T5's norm is an RMSNorm under another name
        def __init__(self, n):
            super().__init__()
            self.weight, self.variance_epsilon = torch.nn.Parameter(torch.ones(n)), 1e-6

        def forward(self, x):
            return self.weight * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.variance_epsilon))

    others = [torch.nn.LayerNorm(64), torch.nn.LayerNorm(64, bias=False), torch.nn.BatchNorm1d(64),
              torch.nn.GroupNorm(4, 64)]
    model = torch.nn.Sequential(T5LayerNorm(64), *others)
    assert swap_rmsnorm(model) == 1  # the LayerNorms, BatchNorm and GroupNorm compute something else: left alone
    assert type(model[0]) is FastRMSNorm and [type(m) for m in model[1:]] == [type(m) for m in others]


def test_a_shared_norm_becomes_one_module_and_a_second_swap_changes_nothing():
    norm = LlamaRMSNorm(64)
    model = torch.nn.ModuleDict({"a": torch.nn.Sequential(norm), "b": torch.nn.Sequential(norm)})
    first = swap_rmsnorm(model)
    assert first == 1 and model["a"][0] is model["b"][0] and model["a"][0].weight is norm.weight
    assert first.names == ("a.0", "b.0") and first.already == 0  # one module, under both of its names
    second = swap_rmsnorm(model)
    assert second == 0 and second.names == () and second.already == 1 and "already=1" in repr(second)



@pytest.mark.parametrize("swap, norm", [(swap_rmsnorm, lambda: LlamaRMSNorm(64)),
                                        (swap_rmsnorm, lambda: torch.nn.RMSNorm(64)),
                                        (rmsnorm.swap_layernorm, lambda: torch.nn.LayerNorm(64))])
def test_a_norm_in_two_slots_of_one_parent_is_swapped_in_both(swap, norm):
    """``Sequential(norm, norm)`` and ``self.a = self.b = norm``: named_children() gives such a child once; each
    slot is replaced, by the one new module."""
    shared = norm()
    sequential = torch.nn.Sequential(shared, shared)
    holder = torch.nn.Module()
    holder.a = holder.b = shared
    for model, slots in ((sequential, ("0", "1")), (holder, ("a", "b"))):
        swapped = swap(model)
        assert swapped == 1 and swapped.names == slots and swapped.left == {}
        first, second = (getattr(model, name) for name in slots)
        assert first is second and type(first) is not type(shared) and first.weight is shared.weight



def test_torchs_norm_becomes_one_cast_by_autocast_and_hugging_faces_one_that_is_not():
    """Under CUDA autocast torch.nn.RMSNorm returns float32 and LlamaRMSNorm x's dtype: each replacement keeps its
    original's rule (autocast_to_float32), and a subclass with its own forward is not torch's."""
    class OwnForward(torch.nn.RMSNorm):
        def forward(self, x):
            return super().forward(x)

    model = torch.nn.ModuleDict({"torch": torch.nn.RMSNorm(64), "llama": LlamaRMSNorm(64), "own": OwnForward(64)})
    assert swap_rmsnorm(model) == 3
    assert {name: norm.autocast_to_float32 for name, norm in model.items()} == {
        "torch": True, "llama": False, "own": False}


class _CentredRMSNorm(torch.nn.Module):
    def __init__(self, n):
        super().__init__()
        self.weight, self.eps = torch.nn.Parameter(torch.ones(n)), 1e-6

    def forward(self, x):
        x = x - x.mean(-1, keepdim=True)
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


class _EpsOutsideRMSNorm(_CentredRMSNorm):
    def forward(self, x):
        return x / (x.pow(2).mean(-1, keepdim=True).sqrt() + self.eps) * self.weight


class _TwiceRMSNorm(_CentredRMSNorm):
    def forward(self, x):  # neither offset 0 nor 1: 2 · weight
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * 2 * self.weight


class _BiasRMSNorm(_CentredRMSNorm):
    def __init__(self, n):
        super().__init__(n)
        self.bias = torch.nn.Parameter(torch.zeros(n))


def _hooked():
    norm = LlamaRMSNorm(64)
    norm.register_forward_hook(lambda module, args, out: out)
    return norm


REFUSED = {
    "twice the weight": (lambda: _TwiceRMSNorm(64), None, "_TwiceRMSNorm): its output differs from x · rstd · (weight"),
    "a bias": (lambda: _BiasRMSNorm(64), None, "state other than its weight (bias)"),
    "two dimensions": (lambda: torch.nn.RMSNorm((4, 64)), None, "normalises over more than the last dimension"),
    "fp32 weight, bf16 activations": (lambda: LlamaRMSNorm(64), torch.bfloat16,
                                      "it returns torch.float32 for torch.bfloat16 input (its torch.float32 weight"),
    "N too large": (lambda: LlamaRMSNorm(262145), None, "its weight has 262145 elements"),
    "float64 weight": (lambda: LlamaRMSNorm(64).double(), None, "its weight is torch.float64"),
    "centred": (lambda: _CentredRMSNorm(64), None, "it subtracts the row's mean (that is LayerNorm)"),
    "eps outside the root": (lambda: _EpsOutsideRMSNorm(64), None, "it adds eps outside the square root"),
    "hooks": (_hooked, None, "it has hooks registered, which the new module would not have: remove them"),
}


@pytest.mark.parametrize("case", REFUSED)
def test_a_norm_it_cannot_reproduce_is_refused_before_anything_is_replaced(case):
    make, dtype, words = REFUSED[case]
    keep = LlamaRMSNorm(64).to(dtype or torch.float32)  # one it can swap, beside the one it cannot
    model = torch.nn.ModuleDict({"fine": torch.nn.Sequential(keep), "odd": torch.nn.Sequential(make())})
    with pytest.raises(ContractError, match="swap_rmsnorm replaced nothing: 'odd.0' ") as error:
        swap_rmsnorm(model, dtype=dtype)
    assert words in str(error.value), str(error.value)
    assert model["fine"][0] is keep  # nothing replaced, not even the norm it could have swapped


def test_norms_refused_for_one_reason_are_named_together_with_the_reason_once_and_what_to_do():
    model = torch.nn.Sequential(*[LlamaRMSNorm(64) for _ in range(5)])  # float32 weights, bf16 activations
    with pytest.raises(ContractError) as error:
        swap_rmsnorm(model, dtype=torch.bfloat16)
    message = str(error.value)
    assert message.count("weight promotes the product") == 1, message
    assert ", ".join(f"'{i}' (LlamaRMSNorm)" for i in range(5)) + ": " in message
    assert "cast the model to the activations' dtype first (e.g. model.to(torch.bfloat16))" in message
    assert swap_rmsnorm(model.to(torch.bfloat16), dtype=torch.bfloat16) == 5  # what the message says to do


def test_the_model_itself_a_bad_dtype_and_a_build_that_drops_the_weight_are_refused():
    with pytest.raises(ContractError, match="the model itself"):
        swap_rmsnorm(LlamaRMSNorm(64))
    with pytest.raises(ContractError, match="dtype must be float32, float16 or bfloat16"):
        swap_rmsnorm(torch.nn.Sequential(LlamaRMSNorm(64)), dtype=torch.float64)
    model = torch.nn.Sequential(LlamaRMSNorm(64))
    with pytest.raises(ContractError, match="build must keep the weight Parameter"):
        swap_rmsnorm(model, build=lambda n, eps, weight: FastRMSNorm(n, eps=eps))
    assert type(model[0]) is LlamaRMSNorm


# --------------------------------------------------------------------------- models


def _model(name: str, seed: int = 0):
    torch.manual_seed(seed)
    if name == "llama":
        model = transformers.LlamaForCausalLM(transformers.LlamaConfig(**LLAMA))
    else:
        model = transformers.Qwen3ForCausalLM(transformers.Qwen3Config(**QWEN3))
    assert randomise_norm_weights(model, seed) == {"llama": 5, "qwen3": 9}[name]
    return model.to(DEVICE)


def _loss(model, ids):
    out = model(input_ids=ids, labels=ids)
    out.loss.backward()
    return out


def _relative_error(params, params64):
    return [float((p.double() - p64.double()).norm() / p64.double().norm()) for p, p64 in zip(params, params64)]


def _gradient_errors_no_worse(original, swapped, ref, factor=1.5):
    """Assert each swapped gradient's relative error against ``ref``'s is ≤ factor × the original's; those errors."""
    grads = [p.grad for p in ref.parameters()]
    errors = _relative_error([p.grad for p in original.parameters()], grads)
    errors_fast = _relative_error([p.grad for p in swapped.parameters()], grads)
    names = [n for n, _ in original.named_parameters()]
    worse = {n: (f, o) for n, f, o in zip(names, errors_fast, errors) if f > factor * o}
    assert not worse, worse
    return errors


@pytest.fixture(scope="module", params=["llama", "qwen3"])
def trio(request):
    """(name, original, swapped, float64 original, their outputs after one forward + backward on the same tokens)."""
    original = _model(request.param)
    swapped = copy.deepcopy(original)
    count = swap_rmsnorm(swapped)
    ref = copy.deepcopy(original).double()
    ids = _tokens()
    return request.param, count, original, swapped, ref, [_loss(m, ids) for m in (original, swapped, ref)]


def test_every_norm_of_llama_and_qwen3_is_swapped_with_its_own_weight(trio):
    name, count, original, swapped, _, _ = trio
    norms = {n: m for n, m in original.named_modules() if type(m).__name__.endswith("RMSNorm")}
    assert count == len(norms) == {"llama": 5, "qwen3": 9}[name]
    fast = dict(swapped.named_modules())
    for n, norm in norms.items():
        assert type(fast[n]) is FastRMSNorm and fast[n].eps == norm.variance_epsilon
    if name == "qwen3":
        assert fast["model.layers.0.self_attn.q_norm"].normalized_shape == (128,)  # per head, N = head_dim


def test_logits_and_loss_are_unchanged_within_float32s_tolerance(trio):
    *_, (out, out_fast, _) = trio
    assert_close(out_fast.logits, out.logits, dtype=torch.float32)
    assert_close(out_fast.loss, out.loss, dtype=torch.float32)


def test_each_gradients_error_against_float64_is_at_most_1_5_times_the_originals(trio):
    _, _, original, swapped, ref, _ = trio
    errors = _gradient_errors_no_worse(original, swapped, ref)
    assert max(errors) < 1e-4  # the original itself is float32-accurate: the rule compares like with like


def test_state_dict_keys_and_values_are_unchanged(trio):
    _, _, original, swapped, _, _ = trio
    before, after = original.state_dict(), swapped.state_dict()
    assert list(before) == list(after)
    assert all(torch.equal(before[k], after[k]) for k in before)


def test_three_sgd_steps_stay_within_twice_the_originals_distance_from_float64():
    original = _model("llama", seed=2)
    swapped, ref = copy.deepcopy(original), copy.deepcopy(original).double()
    optimizers = [torch.optim.SGD(m.parameters(), lr=0.1) for m in (original, swapped, ref)]  # built before the swap
    weight = swapped.model.norm.weight
    assert swap_rmsnorm(swapped) == 5 and swapped.model.norm.weight is weight
    ids, losses = _tokens(seed=2), []
    for _ in range(3):
        for model, optimizer in zip((original, swapped, ref), optimizers):
            optimizer.zero_grad(set_to_none=True)
            losses.append(float(_loss(model, ids).loss.detach()))
            optimizer.step()
    assert losses[-2] < losses[1] - 0.1  # the swapped model trains: its loss fell over the steps
    params64 = [p.detach() for p in ref.parameters()]
    distance = [float((p.detach().double() - q).norm()) for p, q in zip(original.parameters(), params64)]
    distance_fast = [float((p.detach().double() - q).norm()) for p, q in zip(swapped.parameters(), params64)]
    names = [n for n, _ in original.named_parameters()]
    farther = {n: (f, o) for n, f, o in zip(names, distance_fast, distance) if f > 2 * o}
    assert not farther, farther
    moved = float((weight.detach() - _model("llama", seed=2).model.norm.weight.detach()).abs().max())
    assert moved > 1e-3  # the optimizer built before the swap did train the (same) weight Parameter


def test_save_pretrained_and_from_pretrained_round_trip(trio, tmp_path):
    name, _, _, swapped, _, (_, out_fast, _) = trio
    swapped.save_pretrained(tmp_path)
    cls = type(swapped)
    reloaded = cls.from_pretrained(tmp_path).to(DEVICE)
    assert list(reloaded.state_dict()) == list(swapped.state_dict())
    assert all(torch.equal(reloaded.state_dict()[k], v) for k, v in swapped.state_dict().items())
    assert not any(isinstance(m, FastRMSNorm) for m in reloaded.modules())  # the checkpoint is the model's own
    assert swap_rmsnorm(reloaded) == {"llama": 5, "qwen3": 9}[name]
    with torch.no_grad():
        logits = reloaded(input_ids=_tokens()).logits
    assert_close(logits, out_fast.logits, dtype=torch.float32)


def test_a_gemma_model_is_swapped_with_offset_one():
    config = transformers.GemmaConfig(**TINY, num_attention_heads=4, num_key_value_heads=2, head_dim=16)
    model = transformers.GemmaForCausalLM(config).to(DEVICE)
    randomise_norm_weights(model)
    ids = _tokens()
    with torch.no_grad():
        expected = model(input_ids=ids).logits
    swapped = swap_rmsnorm(model)
    assert swapped == 5 and swapped.left == {}
    assert all(m.offset == 1.0 for m in model.modules() if isinstance(m, FastRMSNorm))
    with torch.no_grad():
        assert_close(model(input_ids=ids).logits, expected, dtype=torch.float32)


def test_an_accidental_hub_call_fails_at_once():
    started = time.perf_counter()
    with pytest.raises(OSError):
        transformers.AutoConfig.from_pretrained("meta-llama/Llama-2-7b-hf")
    assert time.perf_counter() - started < 10  # offline: no attempt at a download


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (the interpreter refuses bf16)")
@pytest.mark.parametrize("name", ["llama", "qwen3"])
def test_on_cuda_in_bf16_logits_and_gradients_are_no_worse_than_the_originals_against_float32(name):
    original = _model(name).to("cuda", torch.bfloat16)
    swapped, ref = copy.deepcopy(original), copy.deepcopy(original).float()
    assert swap_rmsnorm(swapped, dtype=torch.bfloat16) == {"llama": 5, "qwen3": 9}[name]
    ids = _tokens().cuda()
    outs = [_loss(m, ids) for m in (original, swapped, ref)]
    logits32 = outs[2].logits.detach().double()
    error = [float((o.logits.detach().double() - logits32).norm() / logits32.norm()) for o in outs[:2]]
    assert error[1] <= 1.5 * error[0], error
    assert_close(outs[1].logits, outs[0].logits, dtype=torch.bfloat16)  # the target: the bf16 tolerance
    _gradient_errors_no_worse(original, swapped, ref)

"""rmsnorm.swap_layernorm: FastLayerNorm into Hugging Face GPT-2 and ViT, changing nothing but speed; its refusals.

The models are tiny, built from configs (hidden 32, 2 layers, no dropout, random init, nothing downloaded:
HF_HUB_OFFLINE=1 before transformers is imported), every LayerNorm's weight and bias randomised first. The rules are
tests/library/test_swap.py's: logits and loss within float32's declared tolerance (rmsnorm.testing.TOLERANCES),
each gradient's error against a float64 run of the original at most 1.5× the original's own, state_dict unchanged.
"""

from __future__ import annotations

import copy
import os

os.environ["HF_HUB_OFFLINE"] = "1"  # before transformers: a hub call fails at once instead of downloading

import pytest  # noqa: E402
import torch  # noqa: E402

from rmsnorm import ContractError, FastLayerNorm, default_device, swap_layernorm  # noqa: E402
from rmsnorm.testing import assert_close  # noqa: E402

transformers = pytest.importorskip("transformers", reason="transformers (the 'models' extra) is not installed")

DEVICE = default_device()
LAYERNORMS = {"gpt2": 5, "vit": 5}  # 2 layers × 2 norms + the final one


def _model(name: str, seed: int = 0):
    torch.manual_seed(seed)
    if name == "gpt2":
        model = transformers.GPT2LMHeadModel(transformers.GPT2Config(n_embd=32, n_layer=2, n_head=2, vocab_size=96,
                                                                     n_positions=32, resid_pdrop=0.0,
                                                                     embd_pdrop=0.0, attn_pdrop=0.0))
    else:
        model = transformers.ViTForImageClassification(transformers.ViTConfig(
            image_size=16, patch_size=4, num_channels=3, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
            intermediate_size=64, num_labels=5, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0))
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():  # at init a LayerNorm is ones and zeros: a swap that mixed weight and bias would pass
        for m in model.modules():
            if isinstance(m, torch.nn.LayerNorm):
                m.weight.copy_(1 + 0.3 * torch.randn(m.weight.shape, generator=g))
                m.bias.copy_(0.3 * torch.randn(m.bias.shape, generator=g))
    return model.to(DEVICE)


def _loss(name, model):
    g = torch.Generator().manual_seed(1)
    if name == "gpt2":
        ids = torch.randint(0, 96, (2, 12), generator=g).to(DEVICE)
        out = model(input_ids=ids, labels=ids)
    else:
        pixels = torch.randn(2, 3, 16, 16, generator=g).to(DEVICE, next(model.parameters()).dtype)
        out = model(pixel_values=pixels, labels=torch.tensor([1, 3], device=DEVICE))
    out.loss.backward()
    return out


def _relative_errors(params, params64):
    return [float((p.double() - p64.double()).norm() / p64.double().norm()) for p, p64 in zip(params, params64)]


@pytest.fixture(scope="module", params=["gpt2", "vit"])
def trio(request):
    """(name, count, original, swapped, float64 original, their outputs after one forward + backward)."""
    name = request.param
    original = _model(name)
    swapped = copy.deepcopy(original)
    count = swap_layernorm(swapped)
    ref = copy.deepcopy(original).double()
    return name, count, original, swapped, ref, [_loss(name, m) for m in (original, swapped, ref)]


def test_every_layernorm_is_swapped_with_its_own_parameters(trio):
    name, count, original, swapped, _, _ = trio
    norms = {n: m for n, m in original.named_modules() if isinstance(m, torch.nn.LayerNorm)}
    assert count == len(norms) == LAYERNORMS[name] and sorted(count.names) == sorted(norms)
    fast = dict(swapped.named_modules())
    for n, norm in norms.items():
        assert type(fast[n]) is FastLayerNorm and fast[n].eps == norm.eps
        assert torch.equal(fast[n].weight, norm.weight) and torch.equal(fast[n].bias, norm.bias)


def test_logits_and_loss_are_unchanged_within_float32s_tolerance(trio):
    *_, (out, out_fast, _) = trio
    assert_close(out_fast.logits, out.logits, dtype=torch.float32)
    assert_close(out_fast.loss, out.loss, dtype=torch.float32)


def test_each_gradients_error_against_float64_is_at_most_1_5_times_the_originals(trio):
    _, _, original, swapped, ref, _ = trio
    grads64 = [p.grad for p in ref.parameters()]
    largest = max(float(g.norm()) for g in grads64)
    # ViT's key bias has a gradient of zero by symmetry (softmax ignores a shift of every score), so float64 gives
    # it ~1e-19 and any float32 run's relative error is rounding noise over nothing: those are judged by size alone.
    by_symmetry = [float(g.norm()) <= 1e-12 * largest for g in grads64]
    errors = _relative_errors([p.grad for p in original.parameters()], grads64)
    errors_fast = _relative_errors([p.grad for p in swapped.parameters()], grads64)
    names = [n for n, _ in original.named_parameters()]
    # Below a few float32 roundings (relative), which of two runs rounds less is chance: it moved with the CPU (its
    # vector width changes the original's float32 sums), so there the error is judged by size, not by the ratio.
    noise_floor = 8 * torch.finfo(torch.float32).eps
    worse = {n: (f, o) for n, f, o, zero in zip(names, errors_fast, errors, by_symmetry)
             if not zero and f > max(1.5 * o, noise_floor)}
    assert not worse, worse
    assert max(f for f, zero in zip(errors_fast, by_symmetry) if not zero) < 1e-4  # float32-accurate
    noise = {n: float(p.grad.norm()) for n, p, zero in zip(names, swapped.parameters(), by_symmetry) if zero}
    assert all(size <= 1e-6 * largest for size in noise.values()), (noise, largest)  # zero, to float32's rounding


def test_state_dict_is_unchanged_and_a_second_swap_replaces_nothing(trio):
    _, _, original, swapped, _, _ = trio
    before, after = original.state_dict(), swapped.state_dict()
    assert list(before) == list(after) and all(torch.equal(before[k], after[k]) for k in before)
    again = swap_layernorm(swapped)
    assert again == 0 and again.already == LAYERNORMS[trio[0]]


def test_the_parameters_are_the_same_objects_and_a_2d_shape_and_no_affine_are_swapped():
    model = torch.nn.Sequential(torch.nn.LayerNorm(8), torch.nn.LayerNorm((2, 4), elementwise_affine=False),
                                torch.nn.LayerNorm((2, 4), bias=False)).to(DEVICE)
    weight, bias = model[0].weight, model[0].bias
    x = torch.randn(3, 2, 4, device=DEVICE)
    want = model[2](model[1](model[0](x.reshape(3, 8)).reshape(3, 2, 4)))
    assert swap_layernorm(model) == 3
    assert model[0].weight is weight and model[0].bias is bias and model[1].weight is None and model[2].bias is None
    assert all(type(m) is FastLayerNorm for m in model)
    got = model[2](model[1](model[0](x.reshape(3, 8)).reshape(3, 2, 4)))
    assert_close(got, want.double(), dtype=torch.float32)


class _BiasOnlyLayerNorm(torch.nn.Module):
    def __init__(self, n):
        super().__init__()
        self.normalized_shape, self.eps, self.weight = (n,), 1e-5, None
        self.bias = torch.nn.Parameter(torch.zeros(n))

    def forward(self, x):
        return torch.nn.functional.layer_norm(x, self.normalized_shape, None, self.bias, self.eps)


class _ScaledLayerNorm(torch.nn.LayerNorm):
    def forward(self, x):  # (1 + weight), as some checkpoints store it: not F.layer_norm of its own weight
        return torch.nn.functional.layer_norm(x, self.normalized_shape, 1 + self.weight, self.bias, self.eps)


class _AffineOffLayerNorm(torch.nn.LayerNorm):
    def __init__(self, n):
        super().__init__(n)
        self.elementwise_affine = False  # a flag some code reads, while forward still applies weight and bias


@pytest.mark.parametrize("norm, reason", [
    (_BiasOnlyLayerNorm(8), "a bias without a weight"),
    (_ScaledLayerNorm(8), r"computes something other than F.layer_norm"),
    (_AffineOffLayerNorm(8), "elementwise_affine is False, yet it holds a weight or a bias"),
    (torch.nn.LayerNorm(8, dtype=torch.float64), "float64"),
], ids=["bias-only", "another-formula", "affine-off-with-weight", "float64"])
def test_what_it_cannot_reproduce_is_refused_by_name_before_anything_is_replaced(norm, reason):
    model = torch.nn.Sequential(torch.nn.LayerNorm(8), torch.nn.Sequential(norm))
    first = model[0]
    with pytest.raises(ContractError, match=rf"swap_layernorm replaced nothing: '1\.0' \({type(norm).__name__}\): "
                                            rf".*{reason}"):
        swap_layernorm(model)
    assert model[0] is first  # nothing replaced
    with pytest.raises(ContractError, match=r"the model itself \(LayerNorm\) is a LayerNorm"):
        swap_layernorm(torch.nn.LayerNorm(8))

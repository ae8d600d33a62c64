"""The small training run: seeded disjoint splits, identical starts, a loss that falls, CALLS."""

import pytest
import torch

from rmsnorm.article import CALLS, RMSNorm
from rmsnorm.testing import TOLERANCES, assert_close
from rmsnorm_course.training import (
    PATHS,
    ReferenceRMSNorm,
    Split,
    Splits,
    evaluate_mse,
    make_model,
    make_splits,
    train,
)

SMALL = {"n_train": 64, "n_val": 16, "n_test": 24, "features": 5}


def _rows(t: torch.Tensor) -> set[tuple[float, ...]]:
    return {tuple(row) for row in t.cpu().tolist()}


def test_splits_shapes_dtypes_and_device(device):
    splits = make_splits(seed=0, **SMALL, outputs=2, device=device)
    assert isinstance(splits, Splits) and all(isinstance(s, Split) for s in splits)
    for split, n in zip(splits, (64, 16, 24)):
        x, target = split
        assert x.shape == (n, 5) and target.shape == (n, 2)
        assert x.dtype == target.dtype == torch.float32
        assert x.device.type == target.device.type == device.type


def test_splits_are_deterministic_per_seed():
    a, b, c = (make_splits(seed=s, **SMALL, device="cpu") for s in (7, 7, 8))
    for sa, sb, sc in zip(a, b, c):
        assert torch.equal(sa.x, sb.x) and torch.equal(sa.target, sb.target)
        assert not torch.equal(sa.x, sc.x)


def test_splits_are_disjoint():
    train_split, val, test = make_splits(seed=0, **SMALL, device="cpu")
    rows = [_rows(s.x) for s in (train_split, val, test)]
    assert [len(r) for r in rows] == [64, 16, 24]  # no duplicate inside a split either
    assert not rows[0] & rows[1] and not rows[0] & rows[2] and not rows[1] & rows[2]


def test_splits_follow_the_documented_teacher():
    """Re-draw the documented process by hand: W1, W2, x, then the noise."""
    splits = make_splits(
        seed=3, n_train=10, n_val=3, n_test=4, features=6, teacher_hidden=5, noise_std=0.25, device="cpu"
    )
    g = torch.Generator().manual_seed(3)
    w1 = torch.randn(6, 5, generator=g) / 6**0.5
    w2 = torch.randn(5, 1, generator=g) / 5**0.5
    x = torch.randn(17, 6, generator=g)
    target = torch.tanh(x @ w1) @ w2 + 0.25 * torch.randn(17, 1, generator=g)
    torch.testing.assert_close(torch.cat([s.x for s in splits]), x, atol=0, rtol=0)
    torch.testing.assert_close(torch.cat([s.target for s in splits]), target, atol=0, rtol=0)


def test_noise_free_targets_are_the_teacher():
    splits = make_splits(seed=1, **SMALL, noise_std=0.0, device="cpu")
    again = make_splits(seed=1, **SMALL, noise_std=0.5, device="cpu")
    assert torch.equal(splits.test.x, again.test.x)  # noise is drawn after x
    residual = again.train.target - splits.train.target
    assert 0.3 < residual.std().item() < 0.7  # 64 draws of N(0, 0.5²)


@pytest.mark.parametrize("kwargs", [{"n_val": 0}, {"features": 0}, {"noise_std": -0.1}])
def test_splits_refuse_bad_arguments(kwargs):
    with pytest.raises(ValueError):
        make_splits(**{**SMALL, **kwargs})


def test_both_paths_start_identical(device):
    models = {p: make_model(p, features=5, hidden=24, seed=11, device=device) for p in PATHS}
    assert isinstance(models["reference"][1], ReferenceRMSNorm)
    assert isinstance(models["kernel"][1], RMSNorm)
    ref_sd, ker_sd = (models[p].state_dict() for p in PATHS)
    assert list(ref_sd) == list(ker_sd) == ["0.weight", "0.bias", "1.weight", "3.weight", "3.bias"]
    assert all(torch.equal(ref_sd[k], ker_sd[k]) for k in ref_sd)
    assert not torch.equal(
        make_model("reference", features=5, hidden=24, seed=12)[0].weight.cpu(), ref_sd["0.weight"].cpu()
    )
    x = make_splits(seed=0, **SMALL, device=device).train.x[:9]
    assert_close(models["kernel"](x), models["reference"](x))


def test_make_model_leaves_the_global_rng_alone():
    torch.manual_seed(123)
    expected = torch.rand(3)
    torch.manual_seed(123)
    make_model("reference", seed=0, device="cpu")
    assert torch.equal(torch.rand(3), expected)


def test_make_model_refuses_an_unknown_path():
    with pytest.raises(ValueError, match="path"):
        make_model("triton")


def test_short_run_decreases_the_loss_on_both_paths_and_they_agree(device):
    splits = make_splits(seed=0, **SMALL, device=device)
    history = {}
    for path in PATHS:
        model = make_model(path, features=5, hidden=16, seed=0, device=device)
        CALLS.reset()
        history[path] = train(model, splits, steps=12, batch_size=4, lr=3e-2, seed=0)
        expected_calls = 12 if path == "kernel" else 0
        assert CALLS == {"forward": expected_calls, "backward": expected_calls}
        mse = evaluate_mse(model, splits.test)
        assert CALLS["forward"] == expected_calls + (path == "kernel")  # one more forward, no backward
        history[path + "_test"] = mse
    ref, ker = history["reference"], history["kernel"]
    assert len(ref) == len(ker) == 12 and all(isinstance(v, float) for v in ref)
    assert sum(ref[-4:]) / 4 < sum(ref[:4]) / 4
    torch.testing.assert_close(torch.tensor(ker), torch.tensor(ref), **TOLERANCES[torch.float32])  # step by step
    assert history["kernel_test"] == pytest.approx(history["reference_test"], rel=1e-3)


def test_train_is_reproducible_and_uses_the_given_optimizer():
    splits = make_splits(seed=0, **SMALL, device="cpu")
    runs = []
    for _ in range(2):
        model = make_model("reference", features=5, hidden=16, seed=0, device="cpu")
        opt = torch.optim.Adam(model.parameters(), lr=1e-2)
        runs.append(train(model, splits, steps=20, batch_size=32, seed=5, optimizer=opt))  # crosses an epoch
        assert opt.state_dict()["state"][0]["step"].item() == 20
    assert runs[0] == runs[1]


def test_train_updates_the_progress_bar_once_per_step():
    class Bar:
        n = 0

        def update(self, k):
            self.n += k

    bar = Bar()
    model = make_model("reference", features=5, hidden=8, device="cpu")
    train(model, make_splits(**SMALL, device="cpu"), steps=7, batch_size=8, progress=bar)
    assert bar.n == 7


@pytest.mark.parametrize("kwargs", [{"steps": -1}, {"batch_size": 0}, {"batch_size": 65}])
def test_train_refuses_bad_arguments(kwargs):
    model = make_model("reference", features=5, hidden=8, device="cpu")
    with pytest.raises(ValueError):
        train(model, make_splits(**SMALL, device="cpu"), **kwargs)

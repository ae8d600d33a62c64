"""The small training run: seeded synthetic data and Linear → RMSNorm → SiLU → Linear.

Everything the article's integration check needs, and nothing more:

- :func:`make_splits` draws train/validation/test splits from a fixed random
  teacher (no download, no external data set);
- :func:`make_model` builds the network on either path, ``"reference"``
  (:class:`ReferenceRMSNorm`, the PyTorch oracle) or ``"kernel"`` (the
  package's :class:`~rmsnorm.article.RMSNorm`, the Triton kernels), from identical
  initialisation: the same seed gives the same ``state_dict`` on both paths;
- :func:`train` runs Adam on mini-batches and returns the loss history;
- :func:`evaluate_mse` gives the mean squared error on a split.

Source: notebooks/06_autograd_and_training.ipynb (the splits, training, reload, CALLS).
"""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch import nn
from torch.nn import functional as F

from rmsnorm.article.contract import check_eps
from rmsnorm.article.module import RMSNorm
from rmsnorm.device import default_device
from rmsnorm.reference import rmsnorm_reference

#: The two paths of the comparison.
PATHS = ("reference", "kernel")


class Split(NamedTuple):
    """One split of the data set: unpacks as ``x, target = split``.

    Attributes:
        x: (n, features) float32 inputs.
        target: (n, outputs) float32 targets.
    """

    x: torch.Tensor
    target: torch.Tensor


class Splits(NamedTuple):
    """The three disjoint splits: ``train``, ``validation``, ``test``."""

    train: Split
    validation: Split
    test: Split


def make_splits(
    seed: int = 0,
    n_train: int = 1024,
    n_val: int = 128,
    n_test: int = 256,
    features: int = 8,
    *,
    outputs: int = 1,
    teacher_hidden: int = 16,
    noise_std: float = 0.1,
    device=None,
) -> Splits:
    """Seeded synthetic regression data from a fixed random teacher.

    Generating process, all from one ``torch.Generator`` seeded with ``seed``,
    on the CPU (so the values are the same on every device), in this order:

    1. the teacher: ``W1`` (features, teacher_hidden) and ``W2``
       (teacher_hidden, outputs), standard normal scaled by 1/sqrt(fan-in);
    2. ``x`` (n_train + n_val + n_test, features), standard normal;
    3. ``target = tanh(x @ W1) @ W2 + noise_std · ε``, ε standard normal.

    The rows are then cut in order into train, validation and test, so no
    example belongs to two splits. The noise sets a floor on the test MSE of
    about ``noise_std²`` (0.01 by default).

    Args:
        seed: seeds the generator; the same seed gives bitwise-equal splits.
        n_train, n_val, n_test: examples per split (each ≥ 1).
        features: columns of ``x``.
        outputs: columns of ``target``.
        teacher_hidden: width of the teacher's hidden layer.
        noise_std: standard deviation of the additive Gaussian noise (≥ 0).
        device: where the tensors go (default: CUDA if available, else CPU).

    Returns:
        Splits(train, validation, test), each a Split(x, target) of float32
        tensors: x (n, features), target (n, outputs).

    Raises:
        ValueError: for a split size < 1, a width < 1 or a negative noise_std.

    Source: notebooks/06_autograd_and_training.ipynb §6.
    """
    sizes = (n_train, n_val, n_test)
    if min(sizes) < 1 or min(features, outputs, teacher_hidden) < 1:
        raise ValueError(f"split sizes and widths must be >= 1; got sizes {sizes}, "
                         f"features={features}, outputs={outputs}, teacher_hidden={teacher_hidden}")
    if noise_std < 0:
        raise ValueError(f"noise_std must be >= 0; got {noise_std}")
    g = torch.Generator().manual_seed(seed)
    w1 = torch.randn(features, teacher_hidden, generator=g) / features**0.5
    w2 = torch.randn(teacher_hidden, outputs, generator=g) / teacher_hidden**0.5
    x = torch.randn(sum(sizes), features, generator=g)
    target = torch.tanh(x @ w1) @ w2 + noise_std * torch.randn(sum(sizes), outputs, generator=g)
    device = default_device() if device is None else torch.device(device)
    parts = zip(x.split(sizes), target.split(sizes))
    return Splits(*(Split(xs.to(device), ts.to(device)) for xs, ts in parts))


class ReferenceRMSNorm(nn.Module):
    """RMSNorm computed by :func:`rmsnorm_reference`: the oracle path of the network.

    Same parameter name (``weight``) and initialisation (ones) as
    :class:`rmsnorm.article.RMSNorm`, so the two state_dicts are interchangeable.

    Args:
        normalized_shape: N, the last dimension.
        eps: finite real number > 0.

    Source: notebooks/06_autograd_and_training.ipynb.
    """

    def __init__(self, normalized_shape: int, eps: float = 1e-6, device=None, dtype=None) -> None:
        super().__init__()
        check_eps(eps)
        self.normalized_shape = (int(normalized_shape),)
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(self.normalized_shape, device=device, dtype=dtype))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """y = rmsnorm_reference(x, weight, eps), differentiated by autograd."""
        return rmsnorm_reference(x, self.weight, self.eps)

    def extra_repr(self) -> str:
        return f"{self.normalized_shape}, eps={self.eps}"


def make_model(
    path: str,
    *,
    features: int = 8,
    hidden: int = 32,
    outputs: int = 1,
    seed: int = 0,
    eps: float = 1e-6,
    device=None,
) -> nn.Sequential:
    """Linear → RMSNorm → SiLU → Linear, on the reference or the kernel path.

    The Linear layers are initialised on the CPU under ``torch.manual_seed(seed)``
    inside :func:`torch.random.fork_rng` (the caller's random state is left
    untouched), then moved to ``device``; the norm's weight starts at ones.
    Hence the same seed gives bitwise-equal state_dicts on both paths, on any
    device. Parameters are float32.

    Args:
        path: ``"reference"`` (:class:`ReferenceRMSNorm`) or ``"kernel"``
            (:class:`rmsnorm.article.RMSNorm`, the Triton kernels).
        features: inputs per example.
        hidden: N, the width RMSNorm normalises (1 ≤ N ≤ 4096 on the kernel path).
        outputs: outputs per example.
        seed: seed of the initialisation.
        eps: epsilon of the norm.
        device: where the model goes (default: CUDA if available, else CPU).

    Returns:
        nn.Sequential with state_dict keys ``0.weight, 0.bias, 1.weight,
        3.weight, 3.bias``, the same on both paths.

    Raises:
        ValueError: for an unknown ``path``.
        ContractError: (a ValueError) for a hidden width or eps the kernel refuses.

    Source: notebooks/06_autograd_and_training.ipynb.
    """
    if path not in PATHS:
        raise ValueError(f"path must be one of {PATHS}; got {path!r}")
    norm_cls = ReferenceRMSNorm if path == "reference" else RMSNorm
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = nn.Sequential(
            nn.Linear(features, hidden),  # (B, features) → (B, hidden)
            norm_cls(hidden, eps=eps),  # rows of N = hidden columns
            nn.SiLU(),
            nn.Linear(hidden, outputs),  # (B, hidden) → (B, outputs)
        )
    return model.to(default_device() if device is None else torch.device(device))


def train(
    model: nn.Module,
    splits: Splits,
    steps: int = 100,
    batch_size: int = 32,
    lr: float = 1e-2,
    seed: int = 0,
    *,
    optimizer: torch.optim.Optimizer | None = None,
    progress=None,
) -> list[float]:
    """Train with Adam on mini-batches of the train split; return the loss per step.

    Batches are drawn without replacement from a seeded permutation of the
    train split (a new permutation each epoch), so two models trained with the
    same seed see the same examples in the same order. The loss is
    ``F.mse_loss`` (a mean over the batch: dy already carries the 1/batch
    weight, which is why dgamma is a sum over rows, not a mean). Each step
    runs exactly one forward and one backward of the model.

    Args:
        model: e.g. from :func:`make_model`; put in train mode.
        splits: from :func:`make_splits`; only ``splits.train`` is used.
        steps: optimiser steps (≥ 0).
        batch_size: examples per step, 1 ≤ batch_size ≤ len(train).
        lr: Adam's learning rate (ignored when ``optimizer`` is given).
        seed: seeds the batch order.
        optimizer: an optimizer over ``model``'s parameters; default a new
            ``torch.optim.Adam(model.parameters(), lr=lr)``. Pass your own to
            inspect its state afterwards.
        progress: optional progress bar (e.g. ``tqdm.auto.tqdm(total=steps)``);
            ``progress.update(1)`` is called after every step.

    Returns:
        The training loss of each step, before its update: ``steps`` Python floats.

    Raises:
        ValueError: for steps < 0 or a batch size outside 1..len(train).

    Source: notebooks/06_autograd_and_training.ipynb.
    """
    x, target = splits.train
    n = x.shape[0]
    if steps < 0 or not 1 <= batch_size <= n:
        raise ValueError(f"need steps >= 0 and 1 <= batch_size <= {n}; got steps={steps}, batch_size={batch_size}")
    if optimizer is None:
        optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    g = torch.Generator().manual_seed(seed)
    order, cursor = torch.randperm(n, generator=g), 0
    model.train()
    losses = []
    for _ in range(steps):
        if cursor + batch_size > n:
            order, cursor = torch.randperm(n, generator=g), 0
        idx = order[cursor : cursor + batch_size].to(x.device)
        cursor += batch_size
        loss = F.mse_loss(model(x[idx]), target[idx])
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
        if progress is not None:
            progress.update(1)
    return losses


@torch.no_grad()
def evaluate_mse(model: nn.Module, split: Split) -> float:
    """Mean squared error of ``model`` on one split, without gradients.

    One forward over the whole split (on the kernel path this is one pass
    through the autograd wrapper: ``CALLS["forward"]`` grows by 1).

    Args:
        model: maps (n, features) to (n, outputs).
        split: a Split(x, target).

    Returns:
        mean((model(x) − target)²) as a Python float (squared target units).

    Source: notebooks/06_autograd_and_training.ipynb.
    """
    model.eval()
    x, target = split
    return F.mse_loss(model(x), target).item()

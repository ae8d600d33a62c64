"""A norm between two Linears, run eager and under ``torch.compile(fullgraph=True)``: outputs and gradients compared.

tests/library/test_fast.py and tests/library/test_offset.py both hold FastRMSNorm to the same promise:
Dynamo traces a model around it in one graph, and the compiled model gives eager's output and
parameter gradients (bit for bit under aot_eager, within a tolerance under Inductor).
"""

import torch

from rmsnorm import FastRMSNorm


def norm_between_linears(device, offset: float = 0.0) -> torch.nn.Sequential:
    """Linear(32, 48) → FastRMSNorm(48, eps=1e-6, offset) → Linear(48, 4) on ``device``, seeded."""
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(32, 48), FastRMSNorm(48, eps=1e-6, offset=offset),
                               torch.nn.Linear(48, 4)).to(device)


def assert_compiled_matches_eager(model: torch.nn.Module, x: torch.Tensor, backend: str, tol: dict) -> None:
    """One graph, no break; then out and every parameter's grad of sum(out²), compiled vs eager, within ``tol``.

    Args:
        model: its parameters' grads are overwritten. x: its input. backend: torch.compile's backend.
        tol: ``rtol`` and ``atol`` for torch.testing.assert_close.
    """
    explained = torch._dynamo.explain(model)(x)
    assert explained.graph_break_count == 0 and explained.graph_count == 1
    out_eager = model(x)
    out_eager.square().sum().backward()
    grads_eager = [p.grad.clone() for p in model.parameters()]
    torch._dynamo.reset()
    model.zero_grad()
    out = torch.compile(model, fullgraph=True, backend=backend)(x)
    out.square().sum().backward()
    torch.testing.assert_close(out, out_eager, **tol)
    for p, g in zip(model.parameters(), grads_eager):
        torch.testing.assert_close(p.grad, g, **tol)


def assert_compiled_call_matches_eager(layer, inputs, backend: str, device) -> None:
    """``layer(*inputs)`` (a scalar loss) and the inputs' grads, ``torch.compile(fullgraph=True)`` against eager.

    tests/library/test_rmsnorm_add.py and tests/library/test_layernorm.py hold their functionals to it: under
    aot_eager the same kernels run, bit for bit; under Inductor its own elementwise kernels around them, within
    float32's tolerance. Skips Inductor where it cannot compile (rmsnorm.testing.inductor_unavailable).

    Args:
        layer: a function of the inputs returning a scalar tensor. inputs: float32 tensors, each copied twice
            into leaves. backend: torch.compile's backend. device: where the inputs are.
    """
    import pytest

    from rmsnorm.testing import TOLERANCES, inductor_unavailable

    if backend == "inductor" and inductor_unavailable(device):
        pytest.skip(inductor_unavailable(device))
    args = [t.detach().clone().requires_grad_() for t in inputs]
    compiled_args = [t.detach().clone().requires_grad_() for t in inputs]
    eager = layer(*args)
    eager.backward()
    compiled = torch.compile(layer, backend=backend, fullgraph=True)(*compiled_args)
    compiled.backward()
    tol = {"rtol": 0, "atol": 0} if backend == "aot_eager" else TOLERANCES[torch.float32]
    torch.testing.assert_close(compiled, eager, **tol)
    for got, want in zip(compiled_args, args):
        torch.testing.assert_close(got.grad, want.grad, **tol)

"""The autograd wrapper and the module: gradients, shapes, CALLS, M = 0, state_dict, torch.compile."""


import pytest
import torch

from rmsnorm.article import CALLS, RMSNorm, rmsnorm
from rmsnorm.testing import assert_close, inductor_unavailable, make_inputs, oracle


@pytest.mark.parametrize("shape", [(1, 257), (17, 256), (2, 3, 129), (31,)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_rmsnorm_matches_oracle_any_leading_shape(shape, dtype, device):
    *lead, N = shape
    M = 1
    for d in lead:
        M *= d
    x2, gamma, dy2 = make_inputs(M, N, dtype, device, seed=5)
    x = x2.view(shape).requires_grad_()
    gamma.requires_grad_()
    y = rmsnorm(x, gamma)
    assert y.shape == x.shape and y.dtype == dtype
    y.backward(dy2.view(shape))
    y64, dx64, dgamma64 = oracle(x2, gamma, dy2)
    assert_close(y.view(M, N), y64)
    assert_close(x.grad.view(M, N), dx64)
    assert_close(gamma.grad, dgamma64)


def test_calls_counts_forward_and_backward_exactly(device):
    x, gamma, _ = make_inputs(3, 5, device=device)
    gamma.requires_grad_()
    CALLS.reset()
    assert CALLS == {"forward": 0, "backward": 0}
    for _ in range(3):
        rmsnorm(x, gamma).sum().backward()  # dy is an expanded (non-contiguous) tensor
    with torch.no_grad():
        rmsnorm(x, gamma)
    assert CALLS == {"forward": 4, "backward": 3}
    CALLS.reset()
    assert CALLS == {"forward": 0, "backward": 0}


def test_non_contiguous_dy_is_made_contiguous_by_the_wrapper(device):
    x, gamma, _ = make_inputs(4, 6, device=device)
    x.requires_grad_()
    y = rmsnorm(x, gamma)
    dy_t = torch.randn(6, 4, device=device).t()  # (4, 6), transposed view
    y.backward(dy_t)
    assert_close(x.grad, oracle(x, gamma, dy_t.contiguous())[1])


def test_empty_batch_gives_empty_outputs_and_zero_dgamma(device):
    x = torch.empty(0, 8, device=device, requires_grad=True)
    gamma = torch.ones(8, device=device, requires_grad=True)
    y = rmsnorm(x, gamma)
    assert y.shape == (0, 8)
    y.sum().backward()
    assert x.grad.shape == (0, 8)
    assert torch.equal(gamma.grad.cpu(), torch.zeros(8))


def test_double_backward_is_refused(device):
    x, gamma, _ = make_inputs(2, 4, torch.float32, device)
    x.requires_grad_()
    (gx,) = torch.autograd.grad(rmsnorm(x, gamma).pow(2).sum(), x, create_graph=True)
    with pytest.raises(RuntimeError, match="not differentiable twice|once_differentiable|double backward"):
        gx.sum().backward()


def test_module_state_dict_round_trips_with_torch_nn_rmsnorm(device):
    ours = RMSNorm(33).to(device)
    with torch.no_grad():
        ours.weight.copy_(torch.linspace(0.5, 1.5, 33))
    theirs = torch.nn.RMSNorm(33, eps=1e-6).to(device)
    theirs.load_state_dict(ours.state_dict())
    x, _, _ = make_inputs(7, 33, device=device)
    assert_close(ours(x), theirs(x))
    back = RMSNorm(33).to(device)
    back.load_state_dict(theirs.state_dict())
    assert torch.equal(back.weight, ours.weight)
    assert list(ours.state_dict()) == ["weight"]


def test_reset_parameters_sets_weight_back_to_ones(device):
    norm = RMSNorm(33, dtype=torch.float16).to(device)
    with torch.no_grad():
        norm.weight.mul_(3.0)
    norm.reset_parameters()
    assert torch.equal(norm.weight, torch.ones(33, dtype=torch.float16, device=device))
    assert norm.weight.dtype == torch.float16 and isinstance(norm.weight, torch.nn.Parameter)


def _tiny_model(device):
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(8, 33), RMSNorm(33), torch.nn.SiLU(), torch.nn.Linear(33, 2)).to(device)


@pytest.mark.filterwarnings("ignore:`torch.jit.script_method` is deprecated:DeprecationWarning")  # torch's own import
@pytest.mark.filterwarnings("error:Dynamo does not know how to trace")  # the checks trace; the launches break the
# graph by design (rmsnorm/article/forward.py: torch.compiler.disable)
@pytest.mark.parametrize("backend", ["eager", "inductor"])
def test_torch_compile_gives_eager_numbers(backend, device):
    if backend == "inductor" and inductor_unavailable(device):
        pytest.skip(inductor_unavailable(device))
    model, x = _tiny_model(device), torch.randn(5, 8, device=device)
    y_eager = model(x)
    y_eager.square().sum().backward()
    grads_eager = [p.grad.clone() for p in model.parameters()]
    model.zero_grad(set_to_none=True)
    CALLS.reset()
    y_compiled = torch.compile(model, backend=backend)(x)
    y_compiled.square().sum().backward()
    assert CALLS == {"forward": 1, "backward": 1}  # our Function ran, once each way
    if backend == "eager":  # the same operations in the same order: the same bits
        assert torch.equal(y_compiled, y_eager)
        assert all(torch.equal(p.grad, g) for p, g in zip(model.parameters(), grads_eager))
    else:  # inductor fuses the Linear/SiLU around the norm: fp32 rounding, within the declared tolerance
        assert_close(y_compiled, y_eager)
        for p, g in zip(model.parameters(), grads_eager):
            assert_close(p.grad, g)

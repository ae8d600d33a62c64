"""The norm as models call it beyond plain autograd: inputs made under inference mode, and torch.func.

Each result is compared with ``torch.nn.RMSNorm`` / ``F.rms_norm`` under the same transform, computed
in float64 (the oracle), with the declared tolerance of the tensor's dtype.
"""

import contextlib
import re

import pytest
import torch
import torch.nn.functional as F
from torch.func import grad, jacrev, vjp, vmap

import rmsnorm
import rmsnorm.article
from rmsnorm.testing import assert_close, dgamma_tolerance

EPS = 1e-6


def _dtypes(device):
    return [torch.float32, torch.float16] + ([torch.bfloat16] if device.type == "cuda" else [])


def _pair(N, dtype, device, fast=True):
    """A module of ours and torch.nn.RMSNorm in float64 with the same random weight."""
    ours = (rmsnorm.RMSNorm if fast else rmsnorm.article.RMSNorm)(N, eps=EPS, device=device, dtype=dtype)
    oracle = torch.nn.RMSNorm(N, eps=EPS, device=device, dtype=torch.float64)
    with torch.no_grad():
        ours.weight.copy_(1 + 0.1 * torch.randn(N, generator=torch.Generator().manual_seed(N)))
        oracle.weight.copy_(ours.weight)
    return ours, oracle


@pytest.mark.parametrize("path", ["fast", "article"])
@pytest.mark.parametrize("call", ["module", "functional"])
def test_inputs_made_under_inference_mode_train_like_torch_rmsnorm(device, path, call):
    dtypes = _dtypes(device) if path == "fast" else [torch.float32, torch.float16]
    for dtype in dtypes:
        ours, oracle = _pair(48, dtype, device, fast=path == "fast")
        with torch.inference_mode():
            x = torch.randn(4, 7, 48, device=device).to(dtype)  # the rollout, as in unsloth#2434
        norm = ours if call == "module" else (
            lambda t: (rmsnorm.rmsnorm if path == "fast" else rmsnorm.article.rmsnorm)(t, ours.weight, EPS))
        y = norm(x)
        y.float().square().sum().backward()
        x64 = x.clone().double()
        y64 = oracle(x64)
        y64.square().sum().backward()
        assert_close(y, y64)
        assert_close(ours.weight.grad, oracle.weight.grad, tol=dgamma_tolerance(28, dtype, dtype))



@pytest.mark.parametrize("route", ["compiled", "dispatch mode"])
@pytest.mark.parametrize("norm", ["rmsnorm", "rmsnorm_add", "layernorm"])
def test_inference_mode_inputs_train_through_the_operator_too(device, route, norm):
    """The registered operator (what torch.compile traces and a TorchDispatchMode sees) saves an inference
    tensor's copy as the eager Function does: x and the weight made under inference mode train alike on both."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class Passthrough(TorchDispatchMode):  # FlopCounterMode's situation: a mode on the stack sends calls to the op
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            return func(*args, **(kwargs or {}))

    calls = {"rmsnorm": lambda x, w: rmsnorm.rmsnorm_fast(x, w, EPS),
             "rmsnorm_add": lambda x, w: torch.cat(rmsnorm.rmsnorm_add(x, 0.5 * x, w, EPS)),
             "layernorm": lambda x, w: rmsnorm.layernorm_fast(x, w, 0.25 * w, EPS)}
    with torch.inference_mode():
        x, w = torch.randn(6, 40, device=device), 1 + 0.1 * torch.randn(40, device=device)
    grads = []
    for how in ("eager", route):
        weight = torch.nn.Parameter(w.clone())  # a Parameter made outside inference mode, as a model's
        call = calls[norm]
        if how == "compiled":
            torch._dynamo.reset()
            call = torch.compile(call, backend="eager", fullgraph=True)
        if how == "dispatch mode":
            with Passthrough():
                y = call(x, weight)
        else:
            y = call(x, weight)
        y.square().sum().backward()
        grads.append(weight.grad)
    assert_close(grads[1], grads[0].double(), tol=dgamma_tolerance(6, torch.float32, torch.float32))



@pytest.mark.parametrize("route", ["eager", "operator"])
def test_a_double_backward_names_the_norm_called_and_torchs_own(device, route):
    """Eager (the Functions) and the registered operators (under a TorchDispatchMode) refuse a gradient of the
    gradient naming the function the caller called and the torch function to use instead."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class Passthrough(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            return func(*args, **(kwargs or {}))

    calls = {"rmsnorm_fast": ("torch.nn.functional.rms_norm", lambda x, w: rmsnorm.rmsnorm_fast(x, w, EPS)),
             "rmsnorm_add": ("torch's add and torch.nn.functional.rms_norm",
                             lambda x, w: torch.cat(rmsnorm.rmsnorm_add(x, 0.5 * x, w, EPS))),
             "layernorm_fast": ("torch.nn.functional.layer_norm",
                                lambda x, w: rmsnorm.layernorm_fast(x, w, 0.25 * w, EPS))}
    for name, (theirs, call) in calls.items():
        x = torch.randn(4, 8, device=device, requires_grad=True)
        w = torch.randn(8, device=device, requires_grad=True)
        with Passthrough() if route == "operator" else contextlib.nullcontext():
            dx, dw = torch.autograd.grad(call(x, w).square().sum(), (x, w), create_graph=True)
            for grad in (dx, dw):
                with pytest.raises(RuntimeError, match=f"^{name}: double backward .* Use {re.escape(theirs)} for"):
                    grad.sum().backward(retain_graph=True)



@pytest.mark.parametrize("layout", ["every other element", "expanded"])
def test_a_weight_without_unit_stride_is_copied_once_as_torch_takes_it(device, layout):
    """``w[::2]`` or ``w.expand(N)``: torch's norms take them; the functionals copy such a weight (and bias) once,
    with the numbers of a contiguous one and the gradient reaching the tensor passed in."""
    calls = {"rmsnorm_fast": lambda x, w: rmsnorm.rmsnorm_fast(x, w, EPS),
             "rmsnorm_add": lambda x, w: torch.cat(rmsnorm.rmsnorm_add(x, 0.5 * x, w, EPS)),
             "layernorm_fast": lambda x, w: rmsnorm.layernorm_fast(x, w, 0.25 * w, EPS)}
    x = torch.randn(6, 24, device=device)
    for name, call in calls.items():
        base = torch.randn(48 if layout == "every other element" else 1, device=device, requires_grad=True)
        weight = base[::2] if layout == "every other element" else base.expand(24)
        assert weight.stride() != (1,)
        y = call(x, weight)
        plain = weight.detach().contiguous().requires_grad_()
        expected = call(x, plain)
        assert torch.equal(y, expected), name
        y.square().sum().backward()
        expected.square().sum().backward()
        got = base.grad[::2] if layout == "every other element" else base.grad
        torch.testing.assert_close(got, plain.grad if layout == "every other element" else plain.grad.sum()[None],
                                   msg=name)



@pytest.mark.filterwarnings("ignore::torch.jit.TracerWarning")
def test_torch_jit_trace_records_the_operator_and_replays_at_any_rank(device):
    """torch.jit.trace records the registered operator (the launches it cannot see), with rows formed by sizes it
    replays: traced on (4, 16), each module and the fused add give torch's numbers on (7, 3, 16), with gradients."""
    torch.manual_seed(3)
    rms, ln = rmsnorm.FastRMSNorm(16, eps=EPS).to(device), rmsnorm.FastLayerNorm(16, eps=EPS).to(device)
    with torch.no_grad():
        rms.weight.normal_()
        ln.weight.normal_()
    w = rms.weight.detach()
    example, x = torch.randn(4, 16, device=device), torch.randn(7, 3, 16, device=device)
    traced = {"rms": torch.jit.trace(rms, (example,)), "ln": torch.jit.trace(ln, (example,)),
              "add": torch.jit.trace(lambda a, r: rmsnorm.rmsnorm_add(a, r, w, EPS), (example, example))}
    assert "rmsnorm_fast::forward" in str(traced["rms"].graph)
    x64 = x.double()
    assert_close(traced["rms"](x), F.rms_norm(x64, (16,), rms.weight.double(), EPS))
    assert_close(traced["ln"](x), F.layer_norm(x64, (16,), ln.weight.double(), ln.bias.double(), EPS))
    y, h = traced["add"](x, 0.5 * x)
    assert torch.equal(h, x + 0.5 * x)
    assert_close(y, F.rms_norm(1.5 * x64, (16,), w.double(), EPS))
    leaf = x.clone().requires_grad_()
    traced["rms"](leaf).square().sum().backward()
    x64.requires_grad_()
    F.rms_norm(x64, (16,), rms.weight.detach().double(), EPS).square().sum().backward()
    assert_close(leaf.grad, x64.grad)



@pytest.mark.filterwarnings("ignore::torch.jit.TracerWarning")
def test_a_trace_replays_other_ranks_layouts_and_strided_weights_as_eager_takes_them(device):
    """A module over (4, 8) traced on (2, 4, 8) runs on (3, 5, 4, 8); a function traced on a transposed x or a
    contiguous weight takes, at replay, a contiguous x and a strided weight (copied, as eager copies them)."""
    torch.manual_seed(6)
    for module, theirs in ((rmsnorm.FastRMSNorm((4, 8), eps=EPS), torch.nn.RMSNorm((4, 8), eps=EPS)),
                           (rmsnorm.FastLayerNorm((4, 8), eps=EPS), torch.nn.LayerNorm((4, 8), eps=EPS))):
        module, theirs = module.to(device), theirs.to(device).double()
        traced = torch.jit.trace(module, (torch.randn(2, 4, 8, device=device),))
        x = torch.randn(3, 5, 4, 8, device=device)
        assert_close(traced(x), theirs(x.double()))
    base = torch.randn(16, device=device)
    traced = torch.jit.trace(lambda x, w: rmsnorm.rmsnorm_fast(x, w, EPS),
                             (torch.randn(8, 6, device=device).t(), base[:8]))
    x = torch.randn(5, 8, device=device)
    assert_close(traced(x, base[::2]), F.rms_norm(x.double(), (8,), base[::2].double(), EPS))


@pytest.mark.parametrize("in_dim", [0, 1])
def test_vmap_folds_the_batch_into_rows(device, in_dim):
    for dtype in _dtypes(device):
        ours, oracle = _pair(32, dtype, device)
        x = torch.randn(3, 5, 32, device=device).to(dtype)
        assert_close(vmap(ours, in_dims=in_dim)(x), vmap(oracle, in_dims=in_dim)(x.double()))
        functional = vmap(lambda t: rmsnorm.rmsnorm(t, ours.weight, EPS), in_dims=in_dim)(x)
        assert functional.shape == (x.shape[in_dim],) + tuple(s for i, s in enumerate(x.shape) if i != in_dim)
        assert_close(functional, vmap(oracle, in_dims=in_dim)(x.double()))



@pytest.mark.parametrize("shape", [(0, 8), (0, 3, 8), (2, 0, 8)], ids=str)
def test_vmap_over_an_empty_batch_gives_torchs_empty_result(device, shape):
    """A (N,) sample under vmap over a batch of 0: its rows cannot be formed with reshape(-1, N) (0 elements,
    -1 undetermined); torch returns an empty result of the batch's shape, and so do the three functionals."""
    w = torch.randn(8, device=device)
    x = torch.randn(*shape, device=device)
    theirs = vmap(lambda a: F.rms_norm(a, (8,), w, EPS))(x)
    for call in (lambda a: rmsnorm.rmsnorm_fast(a, w, EPS), lambda a: rmsnorm.layernorm_fast(a, w, w, EPS),
                 lambda a: rmsnorm.rmsnorm_add(a, a, w, EPS)[1]):
        got = vmap(call)(x)
        assert got.shape == theirs.shape == x.shape and got.dtype == x.dtype


def test_grad_and_jacrev_with_respect_to_x_and_the_weight(device):
    g = torch.Generator().manual_seed(0)
    # A fixed cotangent, not d(y²)/dy: 2y would carry y's own rounding (bf16: 2^-9 of |y|) into dy, an
    # error of the test's loss that the float64 side never sees.
    c = torch.randn(5, 32, generator=g).to(device)
    for dtype in _dtypes(device):
        x = torch.randn(5, 32, generator=g).to(device, dtype)
        w = (1 + 0.1 * torch.randn(32, generator=g)).to(device, dtype)
        ours = lambda t, v: rmsnorm.rmsnorm(t, v, EPS)  # noqa: E731
        ref = lambda t, v: F.rms_norm(t, (32,), v, EPS)  # noqa: E731
        x64, w64 = x.double(), w.double()
        for argnums in (0, 1):
            got = grad(lambda t, v: (ours(t, v).float() * c).sum(), argnums=argnums)(x, w)
            want = grad(lambda t, v: (ref(t, v) * c.double()).sum(), argnums=argnums)(x64, w64)
            assert_close(got, want, tol=dgamma_tolerance(5, dtype, dtype) if argnums else None)
            got = jacrev(ours, argnums=argnums)(x, w)
            want = jacrev(ref, argnums=argnums)(x64, w64)
            assert got.shape == want.shape == (5, 32) + ((5, 32) if argnums == 0 else (32,))
            assert_close(got, want)


def _norms_and_oracles(N):
    """(name, ours, oracle): the three functionals as (x, w) → one tensor, each beside torch's own formula."""
    yield "rmsnorm", lambda t, v: rmsnorm.rmsnorm(t, v, EPS), lambda t, v: F.rms_norm(t, (N,), v, EPS)
    yield ("rmsnorm_add", lambda t, v: torch.cat(rmsnorm.rmsnorm_add(t, 0.5 * t, v, EPS)),
           lambda t, v: torch.cat((F.rms_norm(1.5 * t, (N,), v, EPS), 1.5 * t)))
    yield ("layernorm_fast", lambda t, v: rmsnorm.layernorm_fast(t, v, 0.25 * v, EPS),
           lambda t, v: F.layer_norm(t, (N,), v, 0.25 * v, EPS))


def test_vjp_gives_torch_s_gradients_when_its_function_is_called_later(device):
    """torch.func.vjp returns vjp_fn, which a caller may run after the transform has returned: the backward
    then sees the forward's saved tensors outside any active transform, and must give the oracle's gradients."""
    g = torch.Generator().manual_seed(3)
    x, w, c = torch.randn(5, 32, generator=g), 1 + 0.1 * torch.randn(32, generator=g), torch.randn(10, 32, generator=g)
    x, w, c = x.to(device), w.to(device), c.to(device)
    for name, ours, oracle in _norms_and_oracles(32):
        y, vjp_fn = vjp(ours, x, w)
        y64, vjp64 = vjp(oracle, x.double(), w.double())
        cot = c[: y.shape[0]]
        assert not torch._C._are_functorch_transforms_active()
        dx, dw = vjp_fn(cot)
        dx64, dw64 = vjp64(cot.double())
        assert_close(y, y64, msg=name)
        assert_close(dx, dx64, msg=name)
        assert_close(dw, dw64, tol=dgamma_tolerance(10, torch.float32, torch.float32), msg=name)


def test_vmap_of_grad_gives_each_element_its_own_gradient(device):
    x = torch.randn(3, 4, 16, device=device)
    w = 1 + 0.1 * torch.randn(16, device=device)
    got = vmap(grad(lambda t, v: rmsnorm.rmsnorm(t, v, EPS).square().sum(), argnums=1), in_dims=(0, None))(x, w)
    want = vmap(grad(lambda t, v: F.rms_norm(t, (16,), v, EPS).square().sum(), argnums=1), in_dims=(0, None))(
        x.double(), w.double())
    assert got.shape == (3, 16)
    assert_close(got, want, tol=dgamma_tolerance(4, torch.float32, torch.float32))


def test_a_batched_weight_is_refused_naming_torch_func(device):
    x, w = torch.randn(3, 5, 8, device=device), torch.randn(3, 8, device=device)
    with pytest.raises(rmsnorm.ContractError, match=r"torch\.func\.vmap.*weight is batched.*in_dims=\(0, None\)"):
        vmap(lambda t, v: rmsnorm.rmsnorm(t, v, EPS))(x, w)


@pytest.mark.parametrize("transform", ["vmap", "grad"])
def test_the_article_path_refuses_torch_func_with_the_way_out(device, transform, no_allocation):
    w = torch.ones(8, device=device)
    f = (vmap(lambda t: rmsnorm.article.rmsnorm(t, w, EPS)) if transform == "vmap"
         else grad(lambda t: rmsnorm.article.rmsnorm(t, w, EPS).sum()))
    with pytest.raises(rmsnorm.ContractError, match=r"torch\.func transform.*Use the fast path, rmsnorm\.rmsnorm"):
        f(torch.randn(3, 2, 8, device=device) if transform == "vmap" else torch.randn(2, 8, device=device))


def test_plain_calls_still_refuse_a_double_backward(device):
    x = torch.randn(4, 8, device=device, requires_grad=True)
    (dx,) = torch.autograd.grad(rmsnorm.rmsnorm(x, None, EPS).square().sum(), x, create_graph=True)
    with pytest.raises(RuntimeError, match="double backward"):
        dx.sum().backward()

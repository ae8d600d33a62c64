"""offset: y = x · rstd · (weight + offset), Gemma's and Qwen3.5's ``1 + weight`` at offset 1.0.

Every kernel path the configuration tables can pick runs here: rows in one block (N = 33, whose
backward computes in float64; 257; 1000) and the long row (N = 16500: the forward's column loop
starts past 8192, the backward's past 16384), M = 1 and 7, each against the float64 oracle with
the declared tolerance of its dtype, at offsets 0.0, 1.0 and −0.5 (any float). bf16 runs on the
GPU only (the interpreter computes it wrongly, rmsnorm.INTERPRETER_BF16_REASON).
"""

from __future__ import annotations

import pytest
import torch
from torch.func import grad, vmap

from compiled_model import assert_compiled_matches_eager, norm_between_linears
from rmsnorm import (
    ContractError,
    FastRMSNorm,
    manual_backward,
    rmsnorm_fast,
    rmsnorm_fast_backward,
    rmsnorm_fast_forward,
    rmsnorm_reference,
)
from rmsnorm.autograd import _backward_op, _forward_op
from rmsnorm.forward import forward_key
from rmsnorm.testing import assert_close, dgamma_tolerance, make_inputs, oracle, refused_before_allocating

GPU = torch.cuda.is_available()
OFFSETS = (0.0, 1.0, -0.5)
SHAPES = ((1, 33), (7, 257), (7, 1000), (1, 16500))
DTYPES = (
    torch.float32,
    torch.float16,
    pytest.param(torch.bfloat16, marks=pytest.mark.skipif(not GPU, reason="bf16 runs on a GPU only")),
)
EPS = 1e-6


def _inputs(M, N, dtype, device, offset):
    """make_inputs, the weight moved so that weight + offset is about 1 ± 0.5, as a model's scale is."""
    x, weight, dy = make_inputs(M, N, dtype, device=device, seed=M * 7 + N)
    return x, (weight.float() - offset).to(dtype), dy


@pytest.mark.parametrize("offset", OFFSETS)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("M, N", SHAPES)
def test_launchers_against_the_float64_oracle(M, N, dtype, offset, device):
    x, weight, dy = _inputs(M, N, dtype, device, offset)
    y, rstd = rmsnorm_fast_forward(x, weight, EPS, offset=offset)
    dx, dgamma = rmsnorm_fast_backward(x, weight, rstd, dy, offset=offset)
    y64, dx64, dgamma64 = oracle(x, weight, dy, EPS, offset=offset)
    assert_close(y, y64, dtype=dtype, msg="y")
    assert_close(dx, dx64, dtype=dtype, msg="dx")
    assert_close(dgamma, dgamma64, tol=dgamma_tolerance(M, dtype, dtype), msg="dgamma")


@pytest.mark.parametrize("offset", OFFSETS)
@pytest.mark.parametrize("M, N", [(1, 33), (7, 1000)])
def test_functional_and_module_through_autograd(M, N, offset, device):
    x, weight, dy = _inputs(M, N, torch.float32, device, offset)
    module = FastRMSNorm(N, eps=EPS, offset=offset, device=device)
    with torch.no_grad():
        module.weight.copy_(weight)
    y64, dx64, dgamma64 = oracle(x, weight, dy, EPS, offset=offset)
    functional_weight = weight.clone().requires_grad_()
    calls = ((lambda t: rmsnorm_fast(t, functional_weight, EPS, offset), functional_weight),
             (module, module.weight))
    for norm, w in calls:
        x_ = x.clone().requires_grad_()
        y = norm(x_)
        y.backward(dy)
        assert_close(y, y64, dtype=torch.float32, msg="y")
        assert_close(x_.grad, dx64, dtype=torch.float32, msg="dx")
        assert_close(w.grad, dgamma64, tol=dgamma_tolerance(M, torch.float32, torch.float32), msg="dgamma")


def test_offset_zero_is_todays_kernel_and_offset_one_is_the_kernel_on_weight_plus_one(device):
    x, weight, _ = make_inputs(7, 257, torch.float32, device=device, seed=3)
    assert torch.equal(rmsnorm_fast(x, weight, EPS, 0.0), rmsnorm_fast(x, weight, EPS))
    assert torch.equal(rmsnorm_fast(x, weight, EPS, -0.0), rmsnorm_fast(x, weight, EPS))
    # in float32, weight + 1 rounds the same in the kernel as outside it: the same y, bit for bit
    assert torch.equal(rmsnorm_fast(x, weight, EPS, 1.0), rmsnorm_fast(x, weight + 1.0, EPS))


def test_the_reference_offsets_y_and_dx_not_dgamma():
    x, weight, dy = (t.double() for t in make_inputs(5, 19, torch.float32, device="cpu", seed=4))
    assert torch.equal(rmsnorm_reference(x, weight, EPS, 1.0), rmsnorm_reference(x, weight + 1.0, EPS))
    dx, dgamma = manual_backward(x, weight, dy, EPS, offset=-0.5)
    dx_shifted, dgamma_plain = manual_backward(x, weight - 0.5, dy, EPS)
    assert torch.equal(dx, dx_shifted) and torch.equal(dgamma, dgamma_plain)
    x_ = x.clone().requires_grad_()
    w_ = weight.clone().requires_grad_()
    rmsnorm_reference(x_, w_, EPS, -0.5).backward(dy)
    torch.testing.assert_close(x_.grad, dx, rtol=1e-12, atol=1e-12)  # autograd agrees with the formulas
    torch.testing.assert_close(w_.grad, dgamma, rtol=1e-12, atol=1e-12)


def test_the_module_keeps_offset_out_of_its_state_and_starts_at_scale_one():
    norm = FastRMSNorm(8, eps=1e-6, offset=1.0)
    assert norm.offset == 1.0 and list(norm.state_dict()) == ["weight"]
    assert torch.equal(norm.weight.detach(), torch.zeros(8))  # 1 − offset: Gemma's zeros
    assert repr(norm) == "FastRMSNorm((8,), eps=1e-06, elementwise_affine=True, offset=1.0)"
    assert repr(FastRMSNorm(8, eps=1e-6)) == repr(torch.nn.RMSNorm(8, eps=1e-6)).replace("RMSNorm", "FastRMSNorm")
    assert torch.equal(FastRMSNorm(4, offset=-0.5).weight.detach(), torch.full((4,), 1.5))


BAD_OFFSETS = {
    "nan": (float("nan"), "offset must be a finite real number"),
    "inf": (float("inf"), "offset must be a finite real number"),
    "bool": (True, "offset must be a finite real number; got bool"),
    "string": ("1", "offset must be a finite real number; got str"),
    "tensor": (torch.tensor(1.0), "offset must be a finite real number; got Tensor"),
}


@pytest.mark.parametrize("case", BAD_OFFSETS)
def test_a_bad_offset_is_refused_before_anything_is_allocated(case, device, no_allocation):
    offset, words = BAD_OFFSETS[case]
    x, weight, dy = make_inputs(3, 16, torch.float32, device=device)
    rstd = torch.ones(3, device=device)
    for call in (lambda: rmsnorm_fast(x, weight, EPS, offset), lambda: rmsnorm_fast_forward(x, weight, offset=offset),
                 lambda: rmsnorm_fast_backward(x, weight, rstd, dy, offset=offset),
                 lambda: FastRMSNorm(16, offset=offset)):
        with refused_before_allocating(words):
            call()


def test_an_offset_without_a_weight_is_refused_as_quack_and_transformer_engine_tie_it_to_the_weight(device):
    x, _, dy = make_inputs(3, 16, torch.float32, device=device)
    words = "offset is 1.0 but there is no weight"
    for call in (lambda: rmsnorm_fast(x, None, EPS, 1.0), lambda: rmsnorm_fast_forward(x, None, offset=1.0),
                 lambda: FastRMSNorm(16, elementwise_affine=False, offset=1.0),
                 lambda: _forward_op(x, None, EPS, 1.0)):
        with pytest.raises(ContractError, match=words):
            call()
    assert_close(rmsnorm_fast(x, None, EPS, 0.0), oracle(x, torch.ones(16), eps=EPS), dtype=torch.float32)


def test_the_direct_launch_key_tells_offsets_apart(device):
    x, weight, _ = make_inputs(2, 8, torch.float32, device=device)
    y, rstd = rmsnorm_fast_forward(x, weight)
    keys = {forward_key(x, weight, y, rstd, None, False, True, offset) for offset in OFFSETS}
    assert len(keys) == 3


def test_opcheck_passes_with_an_offset(device):
    x, weight, dy = make_inputs(6, 40, torch.float32, device=device, seed=17)
    y, rstd = rmsnorm_fast_forward(x, weight, offset=1.0)
    torch.library.opcheck(_forward_op, (x.requires_grad_(), weight.requires_grad_(), 1e-6, 1.0))
    torch.library.opcheck(_backward_op, (x.detach(), weight.detach(), rstd, dy, 1.0))
    dx, dgamma = _backward_op(x.detach(), weight.detach(), rstd, dy, 1.0)
    dx64, dgamma64 = oracle(x, weight, dy, 1e-6, offset=1.0)[1:]
    assert_close(dx, dx64, dtype=torch.float32)
    assert_close(dgamma, dgamma64, tol=dgamma_tolerance(6, torch.float32, torch.float32))


def test_torch_compile_fullgraph_carries_the_offset(device):
    model = norm_between_linears(device, offset=1.0)
    with torch.no_grad():
        model[1].weight.normal_(0.0, 0.3)  # zero-centred: weight + 1 about 1
    x = torch.randn(20, 32, device=device)
    assert_compiled_matches_eager(model, x, "aot_eager", {"rtol": 0, "atol": 0})  # the same kernels, the same offset
    h64 = model[0](x).detach().double()
    assert_close(model[1](model[0](x)), rmsnorm_reference(h64, model[1].weight.detach().double(), 1e-6, 1.0))


def test_vmap_and_grad_carry_the_offset(device):
    x, weight, _ = make_inputs(3 * 5, 32, torch.float32, device=device, seed=9)
    x = x.view(3, 5, 32)
    y = vmap(lambda t: rmsnorm_fast(t, weight, EPS, 1.0))(x)
    assert_close(y, rmsnorm_reference(x.double(), weight.double(), EPS, 1.0), dtype=torch.float32)
    dweight, dx = grad(lambda w, t: rmsnorm_fast(t, w, EPS, -0.5).square().sum(), argnums=(0, 1))(weight, x)
    w64, x64 = weight.double().requires_grad_(), x.double().requires_grad_()
    rmsnorm_reference(x64, w64, EPS, -0.5).square().sum().backward()
    assert_close(dx, x64.grad, dtype=torch.float32)
    assert_close(dweight, w64.grad, tol=dgamma_tolerance(15, torch.float32, torch.float32))

"""The fast LayerNorm (rmsnorm.layernorm_fast, FastLayerNorm): the float64 oracle's numbers, its contract, its ops.

The oracle is torch's own ``F.layer_norm`` and its autograd in float64 on exactly the inputs the kernels saw.
Tolerances: rmsnorm.testing.TOLERANCES by dtype, and dgamma_tolerance for dweight and dbias (sums over M rows),
declared before these tests. Outputs are NaN-poisoned (conftest). bf16 runs on a GPU only.
"""

import math

import pytest
import torch
import torch.nn.functional as F

from compiled_model import assert_compiled_call_matches_eager
from rmsnorm import ContractError, FastLayerNorm, layernorm_fast, layernorm_fast_backward, layernorm_fast_forward
from rmsnorm.config import ONE_BLOCK_MAX_N, backward_config, forward_config, layernorm_forward_config, num_programs
from rmsnorm.layernorm import _backward_op, _forward_op
from rmsnorm.testing import TOLERANCES, assert_close, dgamma_tolerance, make_inputs, refused_before_allocating

GPU = torch.cuda.is_available()
gpu_only = pytest.mark.skipif(not GPU, reason="needs a CUDA GPU")
F32, F16, BF16 = torch.float32, torch.float16, torch.bfloat16
#: Backward widths past one block (backward_config(N).one_block(N) is False there, for every dtype).
BACKWARD_LOOPED_N = 16385


def _inputs(M, N, dtype, device, seed=0, weight_dtype=None, mean=0.5, scale=2.0):
    """x (mean and spread not those of a norm's output), weight, bias, dy: seeded, drawn on the CPU, cast."""
    x, weight, dy = make_inputs(M, N, F32, device="cpu", seed=seed)
    bias = torch.randn(N, generator=torch.Generator().manual_seed(seed + 1))
    x = x * scale + mean
    return (x.to(device, dtype), weight.to(device, weight_dtype or dtype), bias.to(device, weight_dtype or dtype),
            dy.to(device, dtype))


def _oracle(x, weight, bias, dy, eps=1e-5):
    """(y, dx, dweight, dbias) in float64 from torch's F.layer_norm and its autograd, on the CPU."""
    leaves = [None if t is None else t.detach().cpu().double().requires_grad_() for t in (x, weight, bias)]
    y = F.layer_norm(leaves[0], (x.shape[-1],), leaves[1], leaves[2], eps)
    y.backward(dy.detach().cpu().double())
    return (y.detach(), *(None if t is None else t.grad for t in leaves))


def _check(x, weight, bias, dy, eps=1e-5):
    """layernorm_fast's forward and backward against :func:`_oracle`, dtypes included."""
    leaves = [None if t is None else t.detach().clone().requires_grad_() for t in (x, weight, bias)]
    y = layernorm_fast(*leaves, eps)
    assert y.dtype == x.dtype and y.shape == x.shape
    y.backward(dy)
    y64, dx64, dweight64, dbias64 = _oracle(x, weight, bias, dy, eps)
    M = x.numel() // x.shape[-1]
    assert_close(y, y64, dtype=x.dtype)
    assert_close(leaves[0].grad, dx64, dtype=x.dtype)
    for leaf, want in ((leaves[1], dweight64), (leaves[2], dbias64)):
        if leaf is not None:
            assert leaf.grad.dtype == leaf.dtype
            assert_close(leaf.grad, want, tol=dgamma_tolerance(M, x.dtype, leaf.dtype))


AFFINE = {"weight+bias": (True, True), "weight": (True, False), "bias": (False, True), "none": (False, False)}
#: One block (N = 1, odd, 257, 1000), the forward's first looped width, odd past it, and the backward's loop.
SHAPES = [(1, 1), (3, 7), (17, 257), (5, 1000), (2, ONE_BLOCK_MAX_N + 1), (3, 4097), (2, BACKWARD_LOOPED_N)]
DTYPES = [pytest.param(F32, id="fp32"), pytest.param(F16, id="fp16"), pytest.param(BF16, id="bf16", marks=gpu_only)]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_forward_and_backward_match_the_float64_oracle(shape, dtype, device):
    assert not forward_config(ONE_BLOCK_MAX_N + 1, dtype).one_block(ONE_BLOCK_MAX_N + 1)
    assert not backward_config(BACKWARD_LOOPED_N, dtype).one_block(BACKWARD_LOOPED_N)
    x, weight, bias, dy = _inputs(*shape, dtype, device, seed=shape[1])
    _check(x, weight, bias, dy)


#: Widths where the LayerNorm's forward takes a rule of its own (rmsnorm.config.LAYERNORM_FORWARD_RULES), 16-bit:
#: four rows a step, persistent with the weight and bias held, one block of 8192, the loop with N compiled in, the
#: loop over 16384-column blocks on a capped grid.
OWN_RULE_SHAPES = [(9, 600), (9, 1280), (2, 8192), (2, 12289), (2, 40001)]


@pytest.mark.parametrize("shape", OWN_RULE_SHAPES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_the_forwards_own_rules_match_the_float64_oracle_and_are_what_the_default_launches(shape, device,
                                                                                            monkeypatch):
    import rmsnorm.forward

    M, N = shape
    assert layernorm_forward_config(N, F16) != forward_config(N, F16)  # a rule of its own applies
    launched = []
    real = rmsnorm.forward._launch

    def recording(key, grid, *args, **kwargs):
        # BLOCK_M, BLOCK_N, PERSISTENT, NUM_STAGES, STATIC_N
        launched.append((args[12], args[13], args[14], args[15], args[22], kwargs["num_warps"], grid))
        return real(key, grid, *args, **kwargs)

    monkeypatch.setattr(rmsnorm.forward, "_launch", recording)
    monkeypatch.setattr(rmsnorm.native_launch.state, "enabled", False)  # every launch through _run, none from C
    x, weight, bias, dy = _inputs(M, N, F16, device, seed=N, weight_dtype=F32)
    _check(x, weight, bias, dy)
    want = layernorm_forward_config(N, F16)
    blocks = -(-M // want.BLOCK_M)
    programs = num_programs(want, x.device, blocks)
    assert launched == [(want.BLOCK_M, want.BLOCK_N, programs < blocks, want.num_stages, want.static(N),
                         want.num_warps, (programs,))]
    launched.clear()
    rmsnorm.rmsnorm_fast(x, weight)  # the RMSNorm at the same width keeps its own table
    rms = forward_config(N, F16)
    assert [c[:2] + c[3:6] for c in launched] == [(rms.BLOCK_M, rms.BLOCK_N, rms.num_stages, rms.static(N),
                                                    rms.num_warps)]


@pytest.mark.parametrize("affine", AFFINE)
@pytest.mark.parametrize("N", [33, BACKWARD_LOOPED_N])
def test_every_affine_combination_and_mixed_parameter_dtypes(affine, N, device):
    has_weight, has_bias = AFFINE[affine]
    x, weight, bias, dy = _inputs(3, N, F16, device, seed=N, weight_dtype=F32)
    _check(x.view(3, 1, N), weight if has_weight else None, bias if has_bias else None, dy.view(3, 1, N), eps=1e-3)


@pytest.mark.parametrize("N", [1000, 2 * ONE_BLOCK_MAX_N])
def test_a_row_with_a_large_mean_keeps_its_variance(N, device):
    # Rows of mean 1e4 and std 1: E[x²] ≈ 1e8, whose float32 ulp is 8, so the naive E[x²] − E[x]² keeps no
    # digit of the variance (it comes out as ±8, ±16, 0…); the two-pass variance (one block) and the shifted
    # sum (the loop) give rstd to float32's tolerance. y then carries the one error no float32 computation
    # avoids: a float32 sum of N terms in a tree is off by up to ⌈log₂ N⌉ roundings of u · Σ|x| (u = 2⁻²⁴), the
    # division one more, so the mean is known to (⌈log₂ N⌉ + 1) · u · mean|x| (a few ulps of 1e4, which is 2⁻¹⁰),
    # and that moves y and dx by up to the mean's error · rstd · |weight|.
    assert forward_config(N, F32).one_block(N) == (N == 1000)
    x, weight, bias, dy = _inputs(4, N, F32, device, seed=3, mean=1e4, scale=1.0)
    _y, mean, rstd = layernorm_fast_forward(x, weight, bias)
    x64 = x.cpu().double()
    rstd64 = torch.rsqrt(x64.var(-1, unbiased=False) + 1e-5)
    assert_close(rstd, rstd64, dtype=F32)
    x32 = x.cpu()
    naive_rstd = torch.rsqrt((x32.square().mean(-1) - x32.mean(-1).square()).clamp_min(0) + 1e-5)
    with pytest.raises(AssertionError):
        assert_close(naive_rstd, rstd64, dtype=F32)
    mean_error = (math.ceil(math.log2(N)) + 1) * 2.0 ** -24 * x64.abs().mean(-1).max().item()
    assert_close(mean, x64.mean(-1), tol={"atol": mean_error, "rtol": 0.0})
    leaves = [t.detach().clone().requires_grad_() for t in (x, weight, bias)]
    y = layernorm_fast(*leaves)
    y.backward(dy)
    y64, dx64, dweight64, dbias64 = _oracle(x, weight, bias, dy)
    carried = mean_error * (rstd64.max() * weight.abs().max().cpu()).item()  # x̂ carries it into dx too
    tol = {"atol": TOLERANCES[F32]["atol"] + carried, "rtol": TOLERANCES[F32]["rtol"]}
    assert_close(y, y64, tol=tol)
    assert_close(leaves[0].grad, dx64, tol=tol)
    assert_close(leaves[2].grad, dbias64, tol=dgamma_tolerance(4, F32, F32))


def test_rows_with_strides_are_read_in_place_and_other_layouts_copied(device):
    x, weight, bias, dy = _inputs(6, 40, F32, device, seed=2)
    buf = torch.full((6, 56), float("nan"), device=device)
    buf[:, :40] = x
    want = layernorm_fast(x, weight, bias)
    assert torch.equal(layernorm_fast(buf[:, :40], weight, bias), want)  # rows of stride 56, read in place
    assert torch.equal(layernorm_fast(x.t().contiguous().t(), weight, bias), want)  # column-major: one copy
    _check(buf[:, :40], weight, bias, dy)


def test_no_rows(device):
    x = torch.empty(0, 8, device=device, requires_grad=True)
    weight, bias = (torch.ones(8, device=device, requires_grad=True) for _ in range(2))
    y = layernorm_fast(x, weight, bias)
    assert y.shape == (0, 8)
    y.sum().backward()
    assert x.grad.shape == (0, 8)
    assert torch.equal(weight.grad.cpu(), torch.zeros(8)) and torch.equal(bias.grad.cpu(), torch.zeros(8))


def test_dweight_and_dbias_are_the_same_bits_on_every_run(device):
    x, weight, bias, dy = _inputs(67, 300, F16, device, seed=9, weight_dtype=F32)
    _y, mean, rstd = layernorm_fast_forward(x, weight, bias)
    runs = [layernorm_fast_backward(x, weight, bias, mean, rstd, dy) for _ in range(3)]
    for dx, dweight, dbias in runs[1:]:
        assert torch.equal(dx, runs[0][0]) and torch.equal(dweight, runs[0][1]) and torch.equal(dbias, runs[0][2])
    assert_close(runs[0][2], dy.double().sum(0).cpu(), tol=dgamma_tolerance(67, F16, F32))


def test_mean_and_rstd_are_the_rows_statistics(device):
    x, weight, bias, _ = _inputs(5, 300, F32, device, seed=4)
    _y, mean, rstd = layernorm_fast_forward(x, weight, bias, 1e-5)
    x64 = x.cpu().double()
    assert_close(mean, x64.mean(-1))
    assert_close(rstd, torch.rsqrt(x64.var(-1, unbiased=False) + 1e-5))


# ----------------------------------------------------------------------------- contract


def test_bad_inputs_are_refused_before_anything_is_allocated(device):
    x, weight, bias, dy = _inputs(4, 16, F32, device)
    cases = [
        (r"bias must have shape \(N,\) = \(16,\); got \(8,\)", (x, weight, bias[:8])),
        (r"bias must be float32, float16 or bfloat16 for the fast path; got torch.float64", (x, weight, bias.double())),
        (r"bias must be on the same device as x .*got meta", (x, weight, bias.to("meta"))),
        (r"bias must be a torch.Tensor; got list", (x, weight, [0.0] * 16)),
        (r"weight must have shape \(N,\) = \(16,\); got \(8,\)", (x, weight[:8], bias)),
        (r"eps must be finite and >= 0; got -1e-05", (x, weight, bias, -1e-5)),
        (r"eps must be a real number; got NoneType", (x, weight, bias, None)),
        (r"x must have 1 <= N columns", (x[:, :0], None, None)),
    ]
    for match, args in cases:
        with refused_before_allocating(match):
            layernorm_fast(*args)
    with refused_before_allocating(r"x must be 2-D"):
        layernorm_fast_forward(x.view(2, 2, 16), weight, bias)
    _y, mean, rstd = layernorm_fast_forward(x, weight, bias)
    with refused_before_allocating(r"mean must be float32 of shape \(M,\) = \(4,\); got torch.float16"):
        layernorm_fast_backward(x, weight, bias, mean.half(), rstd, dy)
    with refused_before_allocating(r"dy must have the shape and dtype of x"):
        layernorm_fast_backward(x, weight, bias, mean, rstd, dy[:2])
    with pytest.raises(ContractError, match=r"normalized_shape \(300000,\) has 300000"):
        FastLayerNorm(300000, device="meta")
    with pytest.raises(ContractError, match=r"x's last dimensions must be normalized_shape \(16,\)"):
        FastLayerNorm(16, device=device)(x[:, :8])


def test_double_backward_is_a_clear_error(device):
    x, weight, bias, _ = _inputs(3, 16, F32, device, seed=18)
    x.requires_grad_()
    (dx,) = torch.autograd.grad(layernorm_fast(x, weight, bias).square().sum(), x, create_graph=True)
    with pytest.raises(RuntimeError, match="^layernorm_fast: double backward .* Use torch.nn.functional.layer_norm"):
        dx.sum().backward()


# ----------------------------------------------------------------------------- ops, compile, torch.func


def test_opcheck_passes_on_both_operators(device):
    x, weight, bias, dy = _inputs(6, 40, F16, device, seed=17, weight_dtype=F32)
    for w, b in ((weight, bias), (weight, None), (None, bias), (None, None)):
        args = [None if t is None else t.detach().clone().requires_grad_() for t in (x, w, b)]
        torch.library.opcheck(_forward_op, (*args, 1e-5))
        _y, mean, rstd = _forward_op(x, w, b, 1e-5)
        torch.library.opcheck(_backward_op, (x, w, b, mean, rstd, dy))


def test_meta_tensors_get_the_shapes_and_dtypes():
    y = layernorm_fast(torch.empty(2, 3, 8, device="meta", dtype=F16), torch.empty(8, device="meta"),
                       torch.empty(8, device="meta"))
    assert (y.shape, y.dtype) == ((2, 3, 8), F16)


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_torch_compile_fullgraph_traces_it_and_gives_eager_numbers(backend, device):
    x, weight, bias, dy = _inputs(5, 48, F32, device, seed=4)

    def layer(x, weight, bias):
        return (layernorm_fast(x * 2.0, weight, bias) * dy).sum()

    assert_compiled_call_matches_eager(layer, (x, weight, bias), backend, device)


def test_vmap_grad_and_jacrev(device):
    x, weight, bias, dy = _inputs(12, 16, F32, device, seed=6)
    batched = torch.func.vmap(lambda a: layernorm_fast(a, weight, bias))(x.view(3, 4, 16))
    assert torch.equal(batched, layernorm_fast(x, weight, bias).view(3, 4, 16))
    with pytest.raises(ContractError, match="the weight or the bias is batched"):
        torch.func.vmap(lambda a, b: layernorm_fast(a, weight, b))(x.view(3, 4, 16), bias.expand(3, 16))
    grads = torch.func.grad(lambda a, w, b: (layernorm_fast(a, w, b) * dy).sum(), argnums=(0, 1, 2))(x, weight, bias)
    leaves = [t.detach().clone().requires_grad_() for t in (x, weight, bias)]
    (layernorm_fast(*leaves) * dy).sum().backward()
    for got, leaf in zip(grads, leaves):
        assert torch.equal(got, leaf.grad)
    x5, w5, b5 = x[:2, :5], weight[:5], bias[:5]
    jacobian = torch.func.jacrev(lambda a: layernorm_fast(a, w5, b5))(x5)
    want = torch.func.jacrev(lambda a: F.layer_norm(a, (5,), w5.double(), b5.double()))(x5.double())
    assert_close(jacobian, want, dtype=F32)


# ----------------------------------------------------------------------------- the module


@pytest.mark.parametrize("kwargs", [{}, {"bias": False}, {"elementwise_affine": False}, {"eps": 1e-3}], ids=str)
def test_the_module_is_torch_nn_layernorm_with_fast_kernels(kwargs, device):
    torch.manual_seed(0)
    theirs = torch.nn.LayerNorm(24, device=device, **kwargs)
    ours = FastLayerNorm(24, device=device, **kwargs)
    assert ours.eps == theirs.eps == kwargs.get("eps", 1e-5)
    assert ours.state_dict().keys() == theirs.state_dict().keys()
    with torch.no_grad():
        for p in theirs.parameters():
            p.normal_()
    ours.load_state_dict(theirs.state_dict())
    theirs.load_state_dict(ours.state_dict())
    x = torch.randn(2, 5, 24, device=device) * 3 + 1
    assert_close(ours(x), theirs(x).double())


def test_a_multi_dimensional_normalized_shape_is_one_row(device):
    theirs = torch.nn.LayerNorm((3, 8), device=device)
    with torch.no_grad():
        theirs.weight.normal_()
        theirs.bias.normal_()
    ours = FastLayerNorm((3, 8), device=device)
    ours.load_state_dict(theirs.state_dict())
    x = torch.randn(4, 3, 8, device=device, requires_grad=True)
    x_theirs = x.detach().clone().requires_grad_()
    dy = torch.randn(4, 3, 8, device=device)
    ours(x).backward(dy)
    theirs(x_theirs).backward(dy)
    assert_close(x.grad, x_theirs.grad.double())
    assert_close(ours.weight.grad, theirs.weight.grad.double(), tol=dgamma_tolerance(4, F32, F32))
    assert_close(ours.bias.grad, theirs.bias.grad.double(), tol=dgamma_tolerance(4, F32, F32))


@pytest.mark.parametrize("dtype", [F32, F16])
def test_under_cpu_autocast_it_gives_torchs_dtype(dtype, device):
    if device.type != "cpu":
        pytest.skip("the kernels run on the CPU under the interpreter only; CUDA's autocast has its own test")
    x = torch.randn(3, 16).to(dtype)
    ours, theirs = FastLayerNorm(16), torch.nn.LayerNorm(16)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        got, want = ours(x), theirs(x)
    assert got.dtype == want.dtype == dtype
    assert_close(got, want.double(), dtype=dtype)


@gpu_only
@pytest.mark.parametrize("dtype", [F16, BF16])
def test_under_cuda_autocast_it_computes_in_float32_as_torch(dtype):
    x = torch.randn(64, 768, device="cuda").to(dtype).requires_grad_()
    ours, theirs = FastLayerNorm(768, device="cuda"), torch.nn.LayerNorm(768, device="cuda")
    with torch.autocast("cuda", dtype=dtype):
        got, want = ours(x), theirs(x)
    assert got.dtype == want.dtype == F32
    assert_close(got, want.double(), dtype=F32)
    got.sum().backward()
    assert x.grad.dtype == dtype

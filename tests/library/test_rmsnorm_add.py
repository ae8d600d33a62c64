"""The fused residual add + RMSNorm (rmsnorm.rmsnorm_add): the eager formula's numbers, its contract, its ops.

The oracle is the eager formula: h = x + residual computed by torch in the tensors' dtypes (the rounded
sum a model's residual stream holds), then the reference norm and its backward in float64 on that h
(rmsnorm.testing.oracle). residual_out must be that h bit for bit. Tolerances: rmsnorm.testing.TOLERANCES
and dgamma_tolerance, declared before these tests. Outputs are NaN-poisoned (conftest).

Under the CPU interpreter bf16 is refused, so bf16 cases run on a GPU only; the rest run on both.
"""

import math

import pytest
import torch

from compiled_model import assert_compiled_call_matches_eager
from rmsnorm import ContractError, rmsnorm_add, rmsnorm_fast, rmsnorm_reference
from rmsnorm.config import ONE_BLOCK_MAX_N
from rmsnorm.forward import forward_key
from rmsnorm.fused_add import _add_backward_op, _add_forward_op
from rmsnorm.testing import assert_close, dgamma_tolerance, make_inputs, oracle

GPU = torch.cuda.is_available()
gpu_only = pytest.mark.skipif(not GPU, reason="needs a CUDA GPU (bf16 runs there)")
F32, F16, BF16 = torch.float32, torch.float16, torch.bfloat16
#: Backward widths past one block (backward_config(N).one_block(N) is False there, for every dtype).
BACKWARD_LOOPED_N = 16385


def _inputs(shape, dtype, residual_dtype, device, seed=0, weight_dtype=None):
    """x, residual, weight, dy, d_residual_out: seeded, drawn on the CPU (make_inputs), then cast."""
    M, N = math.prod(shape[:-1]), shape[-1]
    x, weight, dy = make_inputs(M, N, dtype, device=device, seed=seed, weight_dtype=weight_dtype)
    residual, _, d_residual_out = make_inputs(M, N, residual_dtype, device=device, seed=seed + 1)
    return (x.view(shape), residual.view(shape), weight, dy.view(shape), d_residual_out.view(shape))


def _check_against_the_eager_formula(x, residual, weight, dy, d_residual_out, eps=1e-6, offset=0.0):
    """Forward and backward of rmsnorm_add against the float64 oracle at h = x + residual (eager's rounding)."""
    x_in = x.detach().clone().requires_grad_()
    r_in = residual.detach().clone().requires_grad_()
    w_in = None if weight is None else weight.detach().clone().requires_grad_()
    y, residual_out = rmsnorm_add(x_in, r_in, w_in, eps, offset=offset)
    h = x + residual  # eager: rounded to the promoted dtype
    assert y.dtype == x.dtype and residual_out.dtype == h.dtype and y.shape == residual_out.shape == x.shape
    assert torch.equal(residual_out, h)  # bit for bit: it is the eager add
    N = x.shape[-1]
    ones = torch.ones(N, dtype=torch.float64)
    y64, dh64, dweight64 = oracle(h.reshape(-1, N), ones if weight is None else weight, dy.reshape(-1, N), eps,
                                  offset=offset)
    dh64 = dh64 + d_residual_out.reshape(-1, N).double().cpu()
    assert_close(y.reshape(-1, N), y64, dtype=x.dtype)
    torch.autograd.backward((y, residual_out), (dy, d_residual_out))
    assert x_in.grad.dtype == x.dtype and r_in.grad.dtype == residual.dtype
    assert_close(x_in.grad.reshape(-1, N), dh64, dtype=x.dtype)
    assert_close(r_in.grad.reshape(-1, N), dh64, dtype=residual.dtype)
    if residual.dtype == x.dtype:
        assert torch.equal(x_in.grad, r_in.grad)  # one value, d h, for both inputs
    if weight is not None:
        assert w_in.grad.dtype == weight.dtype
        M = h.reshape(-1, N).shape[0]
        assert_close(w_in.grad, dweight64, tol=dgamma_tolerance(M, x.dtype, weight.dtype))


DTYPE_PAIRS = [
    pytest.param(F32, F32, id="fp32"),
    pytest.param(F16, F16, id="fp16"),
    pytest.param(F16, F32, id="fp16+fp32-residual"),
    pytest.param(BF16, BF16, id="bf16", marks=gpu_only),
    pytest.param(BF16, F32, id="bf16+fp32-residual", marks=gpu_only),
]
#: One block, either side of the forward's last one-block width, odd, and past the backward's one block.
SHAPES = [(1, 1), (3, 7), (17, 257), (5, 1000), (2, ONE_BLOCK_MAX_N), (2, ONE_BLOCK_MAX_N + 1), (3, 4097),
          (2, BACKWARD_LOOPED_N)]


@pytest.mark.parametrize("dtype, residual_dtype", DTYPE_PAIRS)
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_forward_and_backward_match_the_eager_formula(shape, dtype, residual_dtype, device):
    _check_against_the_eager_formula(*_inputs(shape, dtype, residual_dtype, device, seed=shape[1]))


@pytest.mark.parametrize("dtype", [F32, F16, pytest.param(BF16, marks=gpu_only)], ids=["fp32", "fp16", "bf16"])
@pytest.mark.parametrize("N", [257, ONE_BLOCK_MAX_N + 1])  # one block, and the column loop
def test_y_is_the_plain_norm_of_residual_out_bit_for_bit(N, dtype, device):
    # the same kernel and configuration on the same rounded h: a norm of the unrounded sum would differ. (At
    # dense short odd rows the plain norm takes the flat kernels instead, within tolerance: rmsnorm/flat.py.)
    x, residual, weight, _, _ = _inputs((3, N), dtype, dtype, device, seed=N)
    y, residual_out = rmsnorm_add(x, residual, weight, offset=1.0)
    assert torch.equal(y, rmsnorm_fast(x + residual, weight, offset=1.0))


@pytest.mark.parametrize("dtype, residual_dtype", DTYPE_PAIRS)
def test_leading_dimensions_offset_and_no_weight(dtype, residual_dtype, device):
    x, residual, weight, dy, dres = _inputs((2, 3, 5, 96), dtype, residual_dtype, device, seed=5)
    _check_against_the_eager_formula(x, residual, weight, dy, dres)
    _check_against_the_eager_formula(x, residual, weight, dy, dres, offset=1.0)
    _check_against_the_eager_formula(x, residual, None, dy, dres, eps=1e-5)


@pytest.mark.parametrize("N", [200, ONE_BLOCK_MAX_N + 3])  # one block, and the column loop
def test_rows_with_strides_are_read_in_place_and_other_layouts_copied(N, device):
    M = 6
    x_buf, r_buf, weight, dy, dres = _inputs((M, N + 16), F16, F32, device, seed=9)
    x, residual = x_buf[:, 8:8 + N], r_buf[:, 3:3 + N]  # row strides N + 16, column offsets 8 and 3
    assert x.stride(0) != N and residual.stride(0) != N
    weight = weight[:N].contiguous()
    _check_against_the_eager_formula(x, residual, weight, dy[:, :N], dres[:, :N])
    # a transposed residual (last stride != 1) is copied once by the functional, with the same numbers
    r_t = residual.t().contiguous().t()
    _check_against_the_eager_formula(x, r_t, weight, dy[:, :N], dres[:, :N])


def test_no_rows(device):
    x, residual, weight, _, _ = _inputs((0, 64), F32, F32, device)
    y, residual_out = rmsnorm_add(x.requires_grad_(), residual.requires_grad_(), weight.requires_grad_())
    assert y.shape == residual_out.shape == (0, 64)
    (y.sum() + residual_out.sum()).backward()
    assert x.grad.shape == (0, 64) and torch.equal(weight.grad, torch.zeros_like(weight))


def test_inputs_are_never_written_and_outputs_are_new_tensors(device):
    x, residual, weight, dy, dres = _inputs((4, 33), F32, F32, device)
    before = [t.clone() for t in (x, residual, weight)]
    y, residual_out = rmsnorm_add(x, residual, weight)
    for t, kept in zip((x, residual, weight), before):
        assert torch.equal(t, kept)
    pointers = {t.untyped_storage().data_ptr() for t in (x, residual, weight)}
    assert y.untyped_storage().data_ptr() not in pointers and residual_out.untyped_storage().data_ptr() not in pointers


def test_an_unused_output_has_a_zero_gradient(device):
    x, residual, weight, dy, _ = _inputs((3, 40), F32, F32, device, seed=2)
    x.requires_grad_()
    y, _ = rmsnorm_add(x, residual, weight)
    (dx,) = torch.autograd.grad((y * dy).sum(), x)
    h = (x + residual).detach().requires_grad_()
    (dh,) = torch.autograd.grad((rmsnorm_fast(h, weight) * dy).sum(), h)
    torch.testing.assert_close(dx, dh, rtol=0, atol=0)  # the same kernel: d_residual_out = 0 adds nothing
    weight.requires_grad_()
    _, residual_out = rmsnorm_add(x, residual, weight)
    dx, dweight = torch.autograd.grad((residual_out * dy).sum(), (x, weight))
    torch.testing.assert_close(dx, dy, rtol=0, atol=0)  # y unused: its gradient is zero, h's is d residual_out
    torch.testing.assert_close(dweight, torch.zeros_like(weight), rtol=0, atol=0)


# ----------------------------------------------------------------------------- contract


def _refused(match, *args, **kwargs):
    from rmsnorm.testing import refused_before_allocating

    with refused_before_allocating(match):
        rmsnorm_add(*args, **kwargs)


def test_bad_inputs_are_refused_before_anything_is_allocated(device):
    x, residual, weight, _, _ = _inputs((4, 16), F32, F32, device)
    _refused(r"residual must have the shape of x \(4, 16\) \(no broadcasting\); got \(16,\)", x, residual[0], weight)
    _refused(r"residual must have the shape of x \(2, 2, 16\).*got \(4, 16\)", x.view(2, 2, 16), residual, weight)
    _refused(r"residual must have x's dtype \(torch.float32\), or float32 with a 16-bit x; got torch.float16",
             x, residual.half(), weight)
    _refused(r"residual must have x's dtype \(torch.float16\).*got torch.float64", x.half(), residual.double(),
             weight)
    _refused(r"residual must be on the same device as x .*got meta", x, residual.to("meta"), weight)
    _refused(r"residual must be a torch.Tensor; got list", x, [1.0], weight)
    _refused(r"weight must have shape \(N,\) = \(16,\); got \(8,\)", x, residual, weight[:8])
    _refused(r"eps must be finite and >= 0; got -1.0", x, residual, weight, -1.0)
    _refused(r"offset is 1.0 but there is no weight", x, residual, None, offset=1.0)


def test_the_backward_op_refuses_gradients_of_the_wrong_dtype(device):
    x, residual, weight, dy, dres = _inputs((4, 16), F16, F32, device)
    _y, h, rstd = _add_forward_op(x, residual, weight, 1e-6)
    with pytest.raises(ContractError, match=r"d_residual_out must have the shape and dtype of residual_out"):
        _add_backward_op(h, weight, rstd, dy, dres.half())
    with pytest.raises(ContractError, match=r"dy must have y's dtype: residual_out's \(torch.float32\).*float64"):
        _add_backward_op(h, weight, rstd, dy.double(), dres)


def test_double_backward_is_a_clear_error(device):
    x, residual, weight, _, _ = _inputs((3, 16), F32, F32, device, seed=18)
    x.requires_grad_()
    y, residual_out = rmsnorm_add(x, residual, weight)
    (dx,) = torch.autograd.grad(y.square().sum() + residual_out.sum(), x, create_graph=True)
    with pytest.raises(RuntimeError, match="^rmsnorm_add: double backward .* Use torch's add and torch.nn.functional"):
        dx.sum().backward()


@pytest.mark.parametrize("in_dims", [(0, 0), (1, 1), (0, None)], ids=str)
def test_vmap_folds_the_batch_into_rows(in_dims, device):
    x, residual, weight, _, _ = _inputs((3, 4, 16), F32, F32, device, seed=6)
    r = residual if in_dims[1] is not None else residual[0]
    y, residual_out = torch.func.vmap(lambda a, b: rmsnorm_add(a, b, weight), in_dims=in_dims)(x, r)
    xs = x.movedim(in_dims[0], 0)
    rs = r.movedim(in_dims[1], 0) if in_dims[1] is not None else r.expand_as(xs)
    want_y, want_residual_out = rmsnorm_add(xs, rs, weight)  # the same rows, one call: the same numbers
    assert torch.equal(y, want_y) and torch.equal(residual_out, want_residual_out)
    with pytest.raises(ContractError, match="the weight is batched"):
        torch.func.vmap(lambda a, w: rmsnorm_add(a, a, w))(x, weight.expand(3, 16))


def test_grad_and_jacrev_give_eager_autograds_numbers(device):
    x, residual, weight, dy, dres = _inputs((3, 16), F16, F32, device, seed=8)

    def loss(a, b, w):
        y, h = rmsnorm_add(a, b, w)
        return (y.float() * dy.float()).sum() + (h * dres).sum()

    got = torch.func.grad(loss, argnums=(0, 1, 2))(x, residual, weight)
    leaves = [t.detach().clone().requires_grad_() for t in (x, residual, weight)]
    loss(*leaves).backward()
    for g, leaf in zip(got, leaves):
        assert g.dtype == leaf.dtype and torch.equal(g, leaf.grad)
    x32, r32, w32 = x.float()[:2, :5], residual[:2, :5], weight.float()[:5]
    jacobian = torch.func.jacrev(lambda a: rmsnorm_add(a, r32, w32)[0])(x32)
    want = torch.func.jacrev(lambda a: rmsnorm_reference((a + r32).double(), w32.double()))(x32.double())
    assert_close(jacobian, want, dtype=F32)


# ----------------------------------------------------------------------------- ops, compile, launch keys


def test_opcheck_passes_on_both_operators(device):
    for dtype, residual_dtype in ((F32, F32), (F16, F32)):
        x, residual, weight, dy, dres = _inputs((6, 40), dtype, residual_dtype, device, seed=17)
        torch.library.opcheck(_add_forward_op, (x.requires_grad_(), residual.requires_grad_(),
                                                weight.requires_grad_(), 1e-6))
        _y, h, rstd = _add_forward_op(x.detach(), residual.detach(), weight.detach(), 1e-6)
        torch.library.opcheck(_add_backward_op, (h, weight.detach(), rstd, dy, dres))
        torch.library.opcheck(_add_forward_op, (x.detach(), residual.detach(), None, 1e-5))
        torch.library.opcheck(_add_forward_op, (x.detach(), residual.detach(), weight.detach(), 1e-5, 1.0))


def test_meta_tensors_get_the_shapes_and_dtypes(device):
    x, residual = torch.empty(2, 3, 8, device="meta", dtype=F16), torch.empty(2, 3, 8, device="meta", dtype=F32)
    y, residual_out = rmsnorm_add(x, residual, torch.empty(8, device="meta"))
    assert (y.shape, y.dtype, residual_out.shape, residual_out.dtype) == ((2, 3, 8), F16, (2, 3, 8), F32)


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_torch_compile_fullgraph_traces_it_and_gives_eager_numbers(backend, device):
    x, residual, weight, dy, _ = _inputs((5, 48), F32, F32, device, seed=4)

    def layer(x, residual, weight):
        y, h = rmsnorm_add(x * 2.0, residual, weight)
        return (y * dy).sum() + h.square().sum()

    assert_compiled_call_matches_eager(layer, (x, residual, weight), backend, device)


def test_the_forward_key_holds_the_residuals_specialisations(device):
    from rmsnorm import forward_config

    x, residual, weight, _, _ = _inputs((32, 64), F16, F16, device)
    y, rstd = torch.empty_like(x), torch.empty(32, device=device)
    config = forward_config(64, F16)

    def key(r, out):
        return forward_key(x, weight, y, rstd, config, False, True, 0.0, r, out)

    base = key(residual, residual.clone())
    assert base != forward_key(x, weight, y, rstd, config, False, True, 0.0)  # HAS_RESIDUAL
    assert key(residual.float(), residual.float()) != base  # dtypes
    buf = torch.zeros(32 * 80 + 1, dtype=F16, device=device)
    assert key(buf[1:1 + 32 * 64].view(32, 64), residual) != base  # address mod 16
    assert key(buf[: 32 * 80].view(32, 80)[:, :64], residual) != base  # row stride

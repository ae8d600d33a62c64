"""The fast path (rmsnorm): campaigns against the float64 oracle, layouts, contract, custom op.

Tolerances: rmsnorm.testing.TOLERANCES (bf16 declared with the fast path,
before its first run) and rmsnorm.testing.dgamma_tolerance (atol grows as √M:
dgamma sums M rounded terms). Outputs are NaN-poisoned (conftest), so an
element a kernel forgets to write cannot pass.

Under the CPU interpreter the campaign runs the cases up to CPU_MAX_ELEMENTS
elements and refuses bf16 (the interpreter computes it wrongly); the GPU runs
every case, bf16 and the 2³¹-element forward.
"""

import itertools
import re
import sys

import pytest
import torch

import rmsnorm.article
from compiled_model import assert_compiled_matches_eager, norm_between_linears
from rmsnorm import (
    FAST_MAX_N,
    ContractError,
    FastConfig,
    FastRMSNorm,
    backward_config,
    default_device,
    forward_config,
    grid_size,
    num_programs,
    rmsnorm_fast,
    rmsnorm_fast_backward,
    rmsnorm_fast_forward,
    row_alignment,
)
from rmsnorm.autograd import _as_rows, _backward_op, _forward_op
from rmsnorm.config import INTERPRETER_PROGRAMS
from rmsnorm.reference import backward_from_rstd
from rmsnorm.testing import (
    TOLERANCES,
    assert_close,
    dgamma_tolerance,
    inductor_unavailable,
    make_inputs,
    oracle,
    refused_before_allocating,
    rstd_oracle,
    tolerance_share,
)

GPU = torch.cuda.is_available()
gpu_only = pytest.mark.skipif(not GPU, reason="needs a CUDA GPU (bf16 and the large cases run there)")
cpu_only = pytest.mark.skipif(GPU, reason="about the CPU interpreter")
#: Largest case (M·N) the campaign runs under the interpreter (about a second each there).
CPU_MAX_ELEMENTS = 150_000
CAMPAIGN_M = (1, 17, 199, 1025, 4097)
CAMPAIGN_N = (1, 2, 3, 8, 17, 64, 255, 257, 769, 1128, 2049, 4096, 4097, 8191, 12289, 32768, 65536, 131072, 262144)
DTYPES = (torch.float32, torch.float16, torch.bfloat16)


def _cases():
    for dtype, M, N in itertools.product(DTYPES, CAMPAIGN_M, CAMPAIGN_N):
        marks = []
        if dtype == torch.bfloat16:
            marks.append(gpu_only)
        elif M * N > CPU_MAX_ELEMENTS:
            marks.append(
                pytest.mark.skipif(
                    not GPU, reason=f"{M}x{N} is for the GPU (interpreter: > {CPU_MAX_ELEMENTS:,} elements)"
                )
            )
        yield pytest.param(M, N, dtype, id=f"{M}x{N}-{str(dtype)[6:]}", marks=marks)


#: A campaign case whose x takes this many bytes or more runs under the ``large_gpu_memory`` fixture (conftest).
LARGE_GPU_BYTES = 256 << 20
#: The float64 oracle is computed and compared a slice of rows at a time, each of at most this many
#: elements (256 MiB in float64), so that a wide case's check needs little beyond its own tensors.
ORACLE_CHUNK_ELEMENTS = 1 << 25


def _check_all(x, gamma, dy, eps=1e-6):
    y, rstd = rmsnorm_fast_forward(x, gamma, eps)
    dx, dgamma = rmsnorm_fast_backward(x, gamma, rstd, dy)
    assert y.dtype == x.dtype and dx.dtype == x.dtype and dgamma.dtype == gamma.dtype
    M, N = x.shape
    dg64 = torch.zeros(N, dtype=torch.float64, device=x.device)
    step = max(1, ORACLE_CHUNK_ELEMENTS // max(N, 1))
    for start in range(0, M, step):  # dgamma sums over rows: the slices' sums add up
        rows = slice(start, start + step)
        y64, dx64, dg_rows = oracle(x[rows], gamma, dy[rows], eps, on=x.device)
        where = f" (rows {start}..{min(start + step, M) - 1})" if step < M else ""
        assert_close(y[rows], y64, dtype=x.dtype, msg="y" + where)
        assert_close(rstd[rows], rstd_oracle(x[rows], eps, on=x.device), dtype=torch.float32, msg="rstd" + where)
        assert_close(dx[rows], dx64, dtype=x.dtype, msg="dx" + where)
        dg64 += dg_rows
    assert_close(dgamma, dg64, tol=dgamma_tolerance(M, x.dtype, gamma.dtype), msg="dgamma")
    return y, rstd, dx, dgamma


@pytest.mark.parametrize("M, N, dtype", list(_cases()))
def test_campaign_against_the_float64_oracle(M, N, dtype, device, request):
    large = M * N * dtype.itemsize >= LARGE_GPU_BYTES
    if large:
        request.getfixturevalue("large_gpu_memory")
    # A large case draws on the GPU: drawing GiBs on the CPU, under the lock, took most of its minutes.
    x, gamma, dy = make_inputs(M, N, dtype, device=device, seed=M * 31 + N, draw_on_device=large)
    _check_all(x, gamma, dy)


def test_the_check_by_row_slices_sees_every_row(monkeypatch, device):
    this = sys.modules[__name__]
    monkeypatch.setattr(this, "ORACLE_CHUNK_ELEMENTS", 3 * 257)  # slices of 3 rows: 0..2, …, 15..16
    x, gamma, dy = make_inputs(17, 257, torch.float32, device=device, seed=5)
    _check_all(x, gamma, dy)

    real = rmsnorm_fast_backward

    def last_row_wrong(*args):
        dx, dgamma = real(*args)
        dx[-1, 0] += 1.0
        return dx, dgamma

    monkeypatch.setattr(this, "rmsnorm_fast_backward", last_row_wrong)
    with pytest.raises(AssertionError, match=r"dx \(rows 15\.\.16\)"):
        _check_all(x, gamma, dy)


def test_row_alignment_is_the_largest_power_of_two_dividing_n_and_the_strides():
    assert row_alignment(2, 1000, 1000) == 8 and row_alignment(4, 1000, 1000) == 4  # 16 bytes at most
    assert row_alignment(2, 3000, 3000, 3000) == 8 and row_alignment(2, 1004, 1004) == 4
    assert row_alignment(2, 1000, 1001) == 1 and row_alignment(2, 257) == 1  # an odd stride, an odd N
    assert row_alignment(2, 4096, 0) == 8  # a broadcast row (stride 0) is aligned


#: Views whose rows are not all 16-byte aligned: a pointer one element off, an odd row stride, a stride of 4 mod 8.
UNALIGNED_VIEWS = ("shifted_by_one_element", "odd_row_stride", "stride_multiple_of_4")


def _view(kind, M, N, dtype, device, seed):
    if kind == "shifted_by_one_element":  # buf[:, 1:N + 1]: every row starts 2 (or 4) bytes past a boundary
        return make_inputs(M, N + 8, dtype, device=device, seed=seed)[0][:, 1:N + 1]
    if kind == "odd_row_stride":  # row stride N + 1
        return make_inputs(M, N + 1, dtype, device=device, seed=seed)[0][:, :N]
    return make_inputs(M, N + 4, dtype, device=device, seed=seed)[0][:, :N]  # 8-byte aligned rows in 16 bits


@pytest.mark.parametrize("kind", UNALIGNED_VIEWS)
@pytest.mark.parametrize("N", [1000, 3000, pytest.param(12000, marks=gpu_only)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, pytest.param(torch.bfloat16, marks=gpu_only)])
def test_unaligned_views_and_odd_row_strides_are_right(kind, N, dtype, device):
    """N a multiple of 8 but the rows not 16-byte aligned: the kernels must not assume they are."""
    x = _view(kind, 9, N, dtype, device, seed=N)
    dy = _view(kind, 9, N, dtype, device, seed=N + 1)
    gamma = make_inputs(1, N, dtype, device=device, seed=2)[1]
    assert x.stride(1) == 1 and _as_rows(x).data_ptr() == x.data_ptr()  # read in place
    expected = row_alignment(x.element_size(), N, x.stride(0), dy.stride(0), N)
    # the shifted view's strides are multiples of 8 (its pointer is what is off, and Triton sees that itself)
    assert expected == {"shifted_by_one_element": 16 // x.element_size(), "odd_row_stride": 1,
                        "stride_multiple_of_4": 4}[kind]
    _check_all(x, gamma, dy)


@pytest.mark.parametrize("M, N", [(1, 5), (33, 1000), (7, 5000)])
def test_backward_checked_on_its_own_with_the_saved_rstd(M, N, device):
    x, gamma, dy = make_inputs(M, N, torch.float32, device=device, seed=3)
    # an rstd the forward did not compute (scaled by 1.5): the backward must use the one it is given
    rstd = (1.5 * rstd_oracle(x, 1e-6)).float().to(x.device)
    dx, dgamma = rmsnorm_fast_backward(x, gamma, rstd, dy)
    dx64, dg64 = backward_from_rstd(x.double(), gamma.double(), dy.double(), rstd.double())
    assert_close(dx, dx64, msg="dx")
    assert_close(dgamma, dg64, tol=dgamma_tolerance(M, x.dtype, gamma.dtype), msg="dgamma")


@pytest.mark.parametrize("x_dtype", [torch.float16, pytest.param(torch.bfloat16, marks=gpu_only)])
def test_fp32_gamma_with_16_bit_activations(x_dtype, device):
    x, _, dy = make_inputs(65, 777, x_dtype, device=device, seed=5)
    gamma = make_inputs(1, 777, torch.float32, device=device, seed=6)[1]
    _, _, dx, dgamma = _check_all(x, gamma, dy)
    assert dgamma.dtype == torch.float32 and dx.dtype == x_dtype


@pytest.mark.parametrize("N", [300, 5000])
def test_row_strided_x_is_read_in_place(N, device):
    buf = make_inputs(40, N + 64, torch.float32, device=device, seed=7)[0]
    x = buf[:, 16:16 + N]  # a slice of a wider buffer: row stride N + 64, unit column stride
    gamma, dy = make_inputs(40, N, torch.float32, device=device, seed=8)[1:]
    assert _as_rows(x).data_ptr() == x.data_ptr()  # no copy
    _check_all(x, gamma, dy[:, :N])
    dy_strided = torch.cat([dy, dy], dim=1)[:, :N]  # row-strided dy
    y, rstd = rmsnorm_fast_forward(x, gamma)
    dx, _ = rmsnorm_fast_backward(x, gamma, rstd, dy_strided)
    assert_close(dx, oracle(x, gamma, dy)[1], msg="dx with a row-strided dy")


def test_other_layouts_are_copied_once_and_still_right(device):
    x, gamma, _ = make_inputs(30, 20, torch.float32, device=device, seed=9)
    xt = x.t().contiguous().t()  # column-major: unit stride in the first dimension
    assert xt.stride(-1) != 1 and _as_rows(xt).stride(-1) == 1
    assert_close(rmsnorm_fast(xt, gamma), oracle(x, gamma))
    x3 = make_inputs(4 * 6, 20, torch.float32, device=device, seed=10)[0].view(4, 6, 20)[:, ::2]  # not collapsible
    assert_close(rmsnorm_fast(x3, gamma), oracle(x3.reshape(-1, 20), gamma).view(4, 3, 20))


@pytest.mark.parametrize("layout", ["stride0_from_sum", "row_strided_from_cat", "column_strided_from_t"])
def test_any_dy_layout_through_autograd(layout, device):
    x, gamma, dy = make_inputs(24, 40, torch.float32, device=device, seed=11)
    xr, gr = x.clone().requires_grad_(), gamma.clone().requires_grad_()
    y = rmsnorm_fast(xr, gr)
    if layout == "stride0_from_sum":
        y.sum().backward()
        dy = torch.ones_like(x)
    elif layout == "row_strided_from_cat":
        (torch.cat([y, 2 * y], dim=1) * torch.cat([dy, dy], dim=1)).sum().backward()
        dy = 3 * dy
    else:
        dyt = dy.t().contiguous()  # (40, 24): y.t() * dyt gives y a column-strided dy
        (y.t() * dyt).sum().backward()
    _, dx64, dg64 = oracle(x, gamma, dy)
    assert_close(xr.grad, dx64, msg="dx")
    assert_close(gr.grad, dg64, tol=dgamma_tolerance(24, x.dtype, gamma.dtype), msg="dgamma")


def test_m_zero_zero_row_and_nan_row_confined(device):
    y, rstd = rmsnorm_fast_forward(torch.empty(0, 8, device=device), torch.ones(8, device=device))
    assert y.shape == (0, 8) and rstd.shape == (0,)
    dx, dgamma = rmsnorm_fast_backward(torch.empty(0, 8, device=device), torch.ones(8, device=device),
                                       rstd, torch.empty(0, 8, device=device))
    assert dx.shape == (0, 8) and torch.equal(dgamma.cpu(), torch.zeros(8))
    x, gamma, dy = make_inputs(9, 300, torch.float32, device=device, seed=12)
    x[2] = 0.0
    x[5, 7] = float("nan")
    y, rstd = rmsnorm_fast_forward(x, gamma)
    dx, _ = rmsnorm_fast_backward(x, gamma, rstd, dy)
    assert torch.equal(y[2].cpu(), torch.zeros(300)) and rstd[2].item() == pytest.approx(1e3, rel=1e-6)
    assert torch.isfinite(dx[2]).all()
    assert torch.isnan(y[5]).all() and torch.isnan(dx[5]).all()
    others = [r for r in range(9) if r != 5]
    assert torch.isfinite(y[others]).all() and torch.isfinite(dx[others]).all()  # NaN stays in its row


def test_fast_equals_the_article_path_on_its_domain(device):
    for (M, N), dtype in itertools.product([(1, 257), (64, 1000), (9, 4096)], (torch.float32, torch.float16)):
        x, gamma, dy = make_inputs(M, N, dtype, device=device, seed=13)
        y_a, rstd_a = rmsnorm.article.forward_op(x, gamma)
        dx_a, partial = rmsnorm.article.backward_rows(x, gamma, dy, rstd_a, 1e-6)
        dg_a = rmsnorm.article.reduce_gamma_gradient(partial, dtype)
        y, rstd = rmsnorm_fast_forward(x, gamma)
        dx, dg = rmsnorm_fast_backward(x, gamma, rstd, dy)
        assert_close(y, y_a)
        assert_close(rstd, rstd_a)
        assert_close(dx, dx_a)
        assert_close(dg, dg_a, tol=dgamma_tolerance(M, dtype, dtype))


def test_dgamma_is_bitwise_identical_from_run_to_run(device):
    x, gamma, dy = make_inputs(1025, 769, torch.float32, device=device, seed=14)
    y, rstd = rmsnorm_fast_forward(x, gamma)
    first = rmsnorm_fast_backward(x, gamma, rstd, dy)[1]
    for _ in range(3):
        assert torch.equal(rmsnorm_fast_backward(x, gamma, rstd, dy)[1], first)


@pytest.mark.parametrize("cfg", [
    FastConfig(BLOCK_M=1, BLOCK_N=64, num_warps=4, programs_per_sm=1, num_stages=1),  # loop over 64-wide blocks
    FastConfig(BLOCK_M=8, BLOCK_N=512, num_warps=4, programs_per_sm=3, num_stages=2),
    FastConfig(BLOCK_M=2, BLOCK_N=64, num_warps=4, programs_per_sm=None),  # the loop, two rows a step, per block
    # N compiled in (a constexpr): one block, the loop, and the loop of two rows a step
    FastConfig(BLOCK_M=2, BLOCK_N=512, num_warps=4, programs_per_sm=2, num_stages=2, static_n=True),
    FastConfig(BLOCK_M=1, BLOCK_N=64, num_warps=4, programs_per_sm=1, static_n=True),
    FastConfig(BLOCK_M=2, BLOCK_N=64, num_warps=4, programs_per_sm=None, static_n=True),
])
def test_any_config_gives_the_same_numbers(cfg, device):
    x, gamma, dy = make_inputs(77, 300, torch.float32, device=device, seed=15)
    y, rstd = rmsnorm_fast_forward(x, gamma, config=cfg)
    dx, dgamma = rmsnorm_fast_backward(x, gamma, rstd, dy, config=cfg)
    y64, dx64, dg64 = oracle(x, gamma, dy)
    assert_close(y, y64)
    assert_close(dx, dx64)
    assert_close(dgamma, dg64, tol=dgamma_tolerance(77, x.dtype, gamma.dtype))


@pytest.mark.parametrize("norm", ["rmsnorm", "offset", "layernorm", "fused add"])
def test_a_persistent_forward_holds_the_scale_and_bias_once_with_the_same_numbers(norm, device):
    """A persistent program loads a one-block row's scale (weight + offset) and bias once for all its row blocks;
    one program per row block loads them each time. The arithmetic is the same, so the outputs are bitwise so."""
    from rmsnorm.forward import launch_add_forward
    from rmsnorm.layernorm_launchers import launch_layernorm_forward

    x, weight, _ = make_inputs(77, 300, torch.float32, device=device, seed=17)
    held, per_block = (FastConfig(BLOCK_M=4, BLOCK_N=512, num_warps=4, programs_per_sm=pps, num_stages=1)
                       for pps in (3, None))
    runs = {"rmsnorm": lambda cfg: rmsnorm_fast_forward(x, weight, 1e-6, config=cfg),
            "offset": lambda cfg: rmsnorm_fast_forward(x, weight - 1.0, 1e-6, config=cfg, offset=1.0),
            "layernorm": lambda cfg: launch_layernorm_forward(x, weight, weight.flip(0), 1e-5, cfg),
            "fused add": lambda cfg: launch_add_forward(x, x.flip(0), weight, 1e-6, cfg)}
    for got, want in zip(runs[norm](held), runs[norm](per_block), strict=True):
        assert torch.equal(got, want)
    assert_close(runs[norm](held)[0], runs[norm](None)[0])  # and the table's, to the tolerance


def test_no_weight(device):
    x, _, dy = make_inputs(10, 50, torch.float32, device=device, seed=16)
    y, rstd = rmsnorm_fast_forward(x, None)
    dx, dgamma = rmsnorm_fast_backward(x, None, rstd, dy)
    ones = torch.ones(50, device=device)
    y64, dx64, _ = oracle(x, ones, dy)
    assert dgamma is None
    assert_close(y, y64)
    assert_close(dx, dx64)


# ----------------------------------------------------------------------------- the contract


def _bad_calls(device):
    x, gamma, dy = make_inputs(4, 8, torch.float32, device=device)
    rstd = torch.ones(4, device=device)
    wide = torch.ones(1, FAST_MAX_N + 1, device=device)
    return [
        ("x must be 2-D", lambda: rmsnorm_fast_forward(x.view(2, 2, 8), gamma)),
        ("float32, float16 or bfloat16", lambda: rmsnorm_fast_forward(x.double(), gamma.double())),
        ("float32, float16 or bfloat16", lambda: rmsnorm_fast_forward(x.int(), gamma)),
        (f"1 <= N <= {FAST_MAX_N}", lambda: rmsnorm_fast_forward(wide, torch.ones(FAST_MAX_N + 1, device=device))),
        ("1 <= N", lambda: rmsnorm_fast(torch.ones(3, 0, device=device), gamma)),
        ("weight must have shape (N,) = (8,)", lambda: rmsnorm_fast_forward(x, gamma[:7])),
        ("unit stride in its last dimension", lambda: rmsnorm_fast_forward(x.t().contiguous().t(), gamma)),
        ("unit stride in its last dimension", lambda: rmsnorm_fast_forward(x, torch.ones(16, device=device)[::2])),
        ("eps must be finite and >= 0", lambda: rmsnorm_fast_forward(x, gamma, -1e-6)),
        ("eps must be finite and >= 0", lambda: rmsnorm_fast_forward(x, gamma, float("nan"))),
        ("eps must be a real number", lambda: rmsnorm_fast_forward(x, gamma, True)),
        ("rstd must be float32 of shape (M,)", lambda: rmsnorm_fast_backward(x, gamma, rstd.half(), dy)),
        ("rstd must be float32 of shape (M,)", lambda: rmsnorm_fast_backward(x, gamma, rstd[:3], dy)),
        ("dy must have the shape and dtype of x", lambda: rmsnorm_fast_backward(x, gamma, rstd, dy.half())),
        ("dy must have the shape and dtype of x", lambda: rmsnorm_fast_backward(x, gamma, rstd, dy[:3])),
        ("at least 1 dimension", lambda: rmsnorm_fast(torch.tensor(1.0, device=device), gamma)),
        ("normalized_shape (2, 131073) has 262146", lambda: FastRMSNorm((2, 131073), device="meta")),
        ("x's last dimensions must be normalized_shape (3, 8)", lambda: FastRMSNorm((3, 8), device=device)(
            torch.ones(4, 8, 3, device=device))),
    ]


def test_contract_errors_name_the_rule_before_anything_is_allocated(device):
    for expected, call in _bad_calls(device):
        with refused_before_allocating(re.escape(expected)):
            call()


@cpu_only
def test_bf16_is_refused_under_the_interpreter_with_the_reason():
    x = torch.ones(2, 8, dtype=torch.bfloat16)
    with pytest.raises(ContractError, match="computes bfloat16 wrongly") as refused:
        rmsnorm_fast_forward(x, torch.ones(8))
    assert "on the CPU keep x and the weight in float32 or float16" in str(refused.value)  # what to do
    assert rmsnorm_fast_forward(x.float(), torch.ones(8))[0].dtype == torch.float32  # and doing it works
    with pytest.raises(ContractError, match="weight is bfloat16 on the CPU"):
        rmsnorm_fast_forward(x.float(), torch.ones(8, dtype=torch.bfloat16))


@cpu_only
def test_interpreter_bf16_is_still_wrong():
    """Why bf16 is refused on the CPU: if this starts failing, the interpreter was fixed; lift the refusal."""
    import triton
    import triton.language as tl

    @triton.jit
    def add_and_store(a_ptr, b_ptr, sum_ptr, cast_ptr, BLOCK: tl.constexpr):
        cols = tl.arange(0, BLOCK)
        a = tl.load(a_ptr + cols)
        b = tl.load(b_ptr + cols)
        tl.store(sum_ptr + cols, a + b)  # bf16 + bf16
        tl.store(cast_ptr + cols, a.to(tl.float32) * b.to(tl.float32))  # fp32 → bf16 store

    g = torch.Generator().manual_seed(0)
    a = torch.randn(64, generator=g).bfloat16()
    b = torch.randn(64, generator=g).bfloat16()
    total, cast = torch.empty_like(a), torch.empty_like(a)
    add_and_store[(1,)](a, b, total, cast, BLOCK=64)
    assert not torch.equal(total, a + b)
    assert not torch.equal(cast, (a.float() * b.float()).bfloat16())


# ----------------------------------------------------------------------------- the custom op, the module


def test_opcheck_passes_on_both_operators(device):
    x, gamma, dy = make_inputs(6, 40, torch.float32, device=device, seed=17)
    y, rstd = rmsnorm_fast_forward(x, gamma)
    torch.library.opcheck(_forward_op, (x.requires_grad_(), gamma.requires_grad_(), 1e-6))
    torch.library.opcheck(_backward_op, (x.detach(), gamma.detach(), rstd, dy))
    torch.library.opcheck(_forward_op, (x.detach(), None, 1e-5))


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_torch_compile_fullgraph_traces_it_and_gives_eager_numbers(backend, device):
    if backend == "inductor" and inductor_unavailable(device):
        pytest.skip(inductor_unavailable(device))
    # aot_eager: the traced graph run by eager kernels, so bit for bit; inductor: its own
    # matmul/elementwise kernels around our op, so within the float32 tolerance
    tol = {"rtol": 0, "atol": 0} if backend == "aot_eager" else TOLERANCES[torch.float32]
    model = norm_between_linears(device)
    assert_compiled_matches_eager(model, torch.randn(20, 32, device=device), backend, tol)


def test_double_backward_is_a_clear_error(device):
    x, gamma, _ = make_inputs(3, 16, torch.float32, device=device, seed=18)
    x.requires_grad_()
    (dx,) = torch.autograd.grad(rmsnorm_fast(x, gamma).square().sum(), x, create_graph=True)
    with pytest.raises(RuntimeError, match="double backward"):
        dx.sum().backward()


def test_fast_module_is_a_drop_in_for_torch_nn_rmsnorm(device):
    torch.manual_seed(1)
    ref = torch.nn.RMSNorm(64, device=device)  # eps=None: the eps of the computation dtype (float32)
    fast = FastRMSNorm(64, device=device)
    assert isinstance(fast, torch.nn.RMSNorm) and fast.eps is None
    with torch.no_grad():
        ref.weight.copy_(1 + torch.randn(64, device=device) / 4)
    fast.load_state_dict(ref.state_dict())
    assert fast.state_dict().keys() == ref.state_dict().keys()
    x = torch.randn(5, 7, 64, device=device)
    assert_close(fast(x), ref(x).double())
    bare_ref, bare = (
        torch.nn.RMSNorm(64, eps=1e-5, elementwise_affine=False),
        FastRMSNorm(64, eps=1e-5, elementwise_affine=False),
    )
    assert bare.weight is None and bare.state_dict().keys() == bare_ref.state_dict().keys()
    assert_close(bare.to(device)(x), bare_ref.to(device)(x).double())
    fast.weight.data.fill_(3.0)
    fast.reset_parameters()  # inherited: back to ones
    assert torch.equal(fast.weight.detach().cpu(), torch.ones(64))


def test_a_multi_dimensional_normalized_shape_is_one_row_as_torch_normalises_it(device):
    """torch.nn.RMSNorm((3, 8)) normalises over the last two dimensions: one row of 24, the weight a (3, 8) view."""
    torch.manual_seed(2)
    theirs = torch.nn.RMSNorm((3, 8), eps=1e-6, device=device)
    with torch.no_grad():
        theirs.weight.copy_(1 + torch.randn(3, 8, device=device) / 4)
    ours = FastRMSNorm((3, 8), eps=1e-6, device=device)
    ours.load_state_dict(theirs.state_dict())
    assert ours.weight.shape == (3, 8)
    x = torch.randn(2, 4, 3, 8, device=device, requires_grad=True)
    x_theirs = x.detach().clone().requires_grad_()
    dy = torch.randn(2, 4, 3, 8, device=device)
    y = ours(x)
    assert y.shape == x.shape
    assert_close(y, theirs(x_theirs).double())
    y.backward(dy)
    theirs(x_theirs).backward(dy)
    assert_close(x.grad, x_theirs.grad.double())
    assert_close(ours.weight.grad, theirs.weight.grad.double(), tol=dgamma_tolerance(8, torch.float32, torch.float32))
    bare, bare_theirs = (norm((3, 8), elementwise_affine=False, device=device)
                         for norm in (FastRMSNorm, torch.nn.RMSNorm))
    assert_close(bare(x.detach()), bare_theirs(x.detach()).double())



@pytest.mark.parametrize("module, torch_module, functional", [
    (FastRMSNorm, torch.nn.RMSNorm, lambda x: torch.nn.functional.rms_norm(x, ())),
    (rmsnorm.FastLayerNorm, torch.nn.LayerNorm, lambda x: torch.nn.functional.layer_norm(x, ()))])
def test_an_empty_normalized_shape_is_refused_as_torch_refuses_its_call(module, torch_module, functional):
    """normalized_shape () would normalise each element by itself: torch builds the module and refuses the call;
    ours refuses at construction, before a weight is allocated."""
    with pytest.raises(RuntimeError, match="at least 1-dimensional"):
        functional(torch.randn(3))
    for shape in ((), []):
        with pytest.raises(ContractError, match=f"^{module.__name__}: normalized_shape must have at least one dim"):
            module(shape)
        torch_module(shape)  # torch's constructor takes it



def test_where_autocast_casts_torchs_norms_to_float32_so_do_ours(monkeypatch, device):
    """CUDA autocast casts rms_norm's and layer_norm's inputs to float32 (float32 out); so do the functionals and
    the modules, but a FastRMSNorm made with autocast_to_float32=False (Hugging Face's norms) and the fused add
    (no torch op to follow) keep x's dtype. Here CPU autocast stands in for CUDA's (AUTOCAST_FLOAT32 names the
    CPU): the test on a GPU compares with torch itself."""
    if device.type != "cpu":
        pytest.skip("CPU autocast stands in for CUDA's here; test_under_cuda_autocast_... compares with torch")
    monkeypatch.setattr(rmsnorm.autograd, "AUTOCAST_FLOAT32", ("cpu",))
    monkeypatch.setattr(rmsnorm.autograd, "TORCH_AUTOCASTS", {"rms_norm": True, "layer_norm": True})  # torch 2.13's
    torch.manual_seed(4)
    x, w = torch.randn(5, 16).half(), 1 + torch.randn(16) / 4
    torch_like, hf_like = FastRMSNorm(16, eps=1e-6), FastRMSNorm(16, eps=1e-6, autocast_to_float32=False)
    layernorm = rmsnorm.FastLayerNorm(16)
    for norm in (torch_like, hf_like):
        norm.weight.data.copy_(w)
    assert "autocast_to_float32=False" in repr(hf_like) and "autocast" not in repr(torch_like)
    leaf = x.clone().requires_grad_()
    with torch.autocast("cpu", dtype=torch.float16):
        got = {"functional": rmsnorm.rmsnorm_fast(leaf, w.half(), 1e-6), "module": torch_like(x),
               "hugging face's": hf_like(x), "layernorm": layernorm(x), "fused add": rmsnorm.rmsnorm_add(x, x, w)[0]}
        with pytest.raises(ContractError, match="float64"):  # autocast casts 16-bit floats only: no cast here
            rmsnorm.rmsnorm_fast(x.double(), w, 1e-6)
    assert {name: y.dtype for name, y in got.items()} == {
        "functional": torch.float32, "module": torch.float32, "hugging face's": torch.float16,
        "layernorm": torch.float32, "fused add": torch.float16}
    assert torch.equal(got["functional"], rmsnorm.rmsnorm_fast(x.float(), w.half().float(), 1e-6))
    assert torch.equal(got["module"], torch_like(x.float()))
    assert torch.equal(got["hugging face's"], hf_like(x))
    assert torch.equal(got["layernorm"], layernorm(x.float()))
    got["functional"].sum().backward()
    assert leaf.grad.dtype == torch.float16



def test_autocast_to_float32_survives_pickles_old_and_new_and_runs_on_meta_under_autocast():
    """The flag is state of the module object, not of the state_dict: a pickle keeps it, one made before it existed
    (no attribute in its __dict__) reads the default; either mode runs on a meta x with autocast on."""
    import pickle

    hf_like = FastRMSNorm(8, autocast_to_float32=False)
    assert pickle.loads(pickle.dumps(hf_like)).autocast_to_float32 is False
    assert list(hf_like.state_dict()) == ["weight"]
    old = FastRMSNorm(8, device=default_device())
    del old.__dict__["autocast_to_float32"]  # as unpickled from before the attribute
    old = pickle.loads(pickle.dumps(old))
    assert old.autocast_to_float32 is True and "autocast" not in repr(old)
    assert old(torch.ones(2, 8, device=old.weight.device)).shape == (2, 8)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        for norm in (FastRMSNorm(8, device="meta"), FastRMSNorm(8, device="meta", autocast_to_float32=False)):
            y = norm(torch.empty(3, 8, device="meta", dtype=torch.float16))
            assert y.shape == (3, 8) and y.device.type == "meta"


@gpu_only
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_under_cuda_autocast_the_module_gives_torch_rmsnorms_dtype(dtype):
    """torch.nn.RMSNorm returns float32 under CUDA autocast where this torch's autocast casts rms_norm (2.13), x's
    dtype where it does not (2.11): the module follows whichever runs; Hugging Face's mode keeps x's dtype."""
    torch.manual_seed(5)
    x = torch.randn(64, 768, device="cuda").to(dtype).requires_grad_()
    ours, theirs = FastRMSNorm(768, eps=1e-6, device="cuda"), torch.nn.RMSNorm(768, eps=1e-6, device="cuda")
    hf_like = FastRMSNorm(768, eps=1e-6, device="cuda", autocast_to_float32=False)
    with torch.autocast("cuda", dtype=dtype):
        got, want, kept = ours(x), theirs(x), hf_like(x)
    casts = rmsnorm.autograd.TORCH_AUTOCASTS["rms_norm"]
    assert got.dtype == want.dtype == (torch.float32 if casts else dtype) and kept.dtype == dtype
    assert_close(got, want.double(), dtype=got.dtype)
    got.sum().backward()
    assert x.grad.dtype == dtype


@gpu_only
def test_forward_past_2_31_elements_uses_int64_offsets(large_gpu_memory):
    M, N = (1 << 31) // 4096 + 3, 4096  # 2³¹ + 12288 elements
    x = torch.empty(M, N, dtype=torch.bfloat16, device="cuda").normal_()
    y, rstd = rmsnorm_fast_forward(x, None)
    tail = x[-4:]
    assert_close(y[-4:], oracle(tail, torch.ones(N, device="cuda")), dtype=torch.bfloat16)
    assert_close(rstd[-4:], rstd_oracle(tail, 1e-6), dtype=torch.float32)


def test_row_arithmetic_is_float64_only_for_short_float32_rows():
    from rmsnorm.config import FLOAT64_MAX_N, row_arithmetic_dtype

    assert row_arithmetic_dtype(FLOAT64_MAX_N, torch.float32) == torch.float64
    assert row_arithmetic_dtype(FLOAT64_MAX_N + 1, torch.float32) == torch.float32
    assert {row_arithmetic_dtype(N, d) for N in (1, FAST_MAX_N) for d in (torch.float16, torch.bfloat16)} == {
        torch.float32}


def test_tolerance_share_is_one_exactly_where_assert_close_stops_passing():
    expected = torch.tensor([0.0, 1.0, -200.0], dtype=torch.float64)
    limit = 1e-5 + 1e-4 * expected.abs()  # float32's declared atol + rtol·|expected|
    for scale, passes in ((0.5, True), (0.999, True), (1.01, False)):
        actual = (expected + scale * limit * torch.tensor([1.0, -1.0, 1.0], dtype=torch.float64)).float()
        share = tolerance_share(actual, expected)
        assert share == pytest.approx(scale, rel=1e-2) and (share <= 1) == passes
        if passes:
            assert_close(actual, expected)
        else:
            with pytest.raises(AssertionError):
                assert_close(actual, expected)


@pytest.mark.parametrize("N", [65, 127, 257])
def test_float32_arithmetic_keeps_float32_rows_well_inside_the_tolerance(N, device):
    """Past FLOAT64_MAX_N float32 rows are computed in float32: the worst error is under a quarter of the bound."""
    M = (1 << (22 if GPU else 15)) // N
    x, gamma, dy = make_inputs(M, N, torch.float32, device=device, seed=N)
    _, rstd = rmsnorm_fast_forward(x, gamma, 1e-6)
    dx, _ = rmsnorm_fast_backward(x, gamma, rstd, dy)
    share = tolerance_share(dx, oracle(x, gamma, dy, 1e-6, on=x.device)[1])
    assert share < 0.25, f"N = {N}: worst error {share:.2f} of the declared tolerance"


def test_config_tables_cover_every_n():
    for N in (1, 255, 4096, 8192, 8193, 65536, 131073, FAST_MAX_N):
        for dtype in DTYPES:
            cfg = backward_config(N, dtype)
            assert cfg.one_block(N) or cfg.BLOCK_M == 1  # the looped backward takes one row per step
            assert forward_config(N, dtype).BLOCK_N >= min(N, 1024)


def test_grid_size_is_programs_per_sm_times_sms_capped_by_the_row_blocks(device):
    persistent, per_block = FastConfig(1, 256, 4, programs_per_sm=2), FastConfig(1, 256, 4, programs_per_sm=None)
    assert grid_size(persistent, 1000, 132) == 264 and grid_size(persistent, 100, 132) == 100
    assert grid_size(per_block, 1000, 132) == 1000 and grid_size(persistent, 1, 132) == 1
    if device.type == "cuda":  # num_programs is grid_size with this card's SM count
        sms = torch.cuda.get_device_properties(device).multi_processor_count
        assert num_programs(persistent, device, 10**6) == grid_size(persistent, 10**6, sms) == 2 * sms
    else:  # the interpreter runs programs one after another: a few are enough
        assert num_programs(persistent, device, 1000) == INTERPRETER_PROGRAMS


def test_the_campaign_reaches_both_ends_of_the_contract():
    """CONTRIBUTING.md: the campaign has M = 1 and widths up to FAST_MAX_N, odd and non-power-of-two ones among them."""
    assert 1 in CAMPAIGN_M and max(CAMPAIGN_N) == FAST_MAX_N and min(CAMPAIGN_N) == 1
    assert any(n % 2 for n in CAMPAIGN_N if n > 1) and any(n & (n - 1) for n in CAMPAIGN_N)

"""The fast path in ordinary model code: empty batches, broadcast gradients, torch's eps default, compiled views.

What a user's code does without thinking about the kernels: a reduced loss
(``.sum()``, ``.mean()``) gives the backward an expanded dy with zero strides;
an MoE expert or the last shard of a dataset gives an empty batch;
``torch.nn.RMSNorm(eps=None)`` is swapped for :class:`FastRMSNorm`; q/k heads
are views of a fused QKV buffer; ``torch.compile(dynamic=True)`` is the
default for varying sequence lengths. Each is checked against a stated
oracle: the float64 reference, the installed torch's own ``torch.nn.RMSNorm``,
or the same code run eagerly (bit for bit under the ``aot_eager`` backend,
which runs the traced graph with eager kernels; within the dtype's declared
tolerance under inductor, whose kernels around ours round differently).

Under the CPU interpreter bf16 is refused, so the bf16 cases run on a GPU
(``gpu`` mark). Inductor on the CPU needs a C++ compiler; where there is none
those cases skip with the reason (:func:`rmsnorm.testing.inductor_unavailable`).
"""

import itertools
import math

import pytest
import torch
from torch._dynamo.testing import CompileCounterWithBackend

import rmsnorm.autograd as fast_autograd
from rmsnorm import ContractError, FastRMSNorm, rmsnorm_fast
from rmsnorm.autograd import _as_rows, _backward_op, _forward_op
from rmsnorm.testing import TOLERANCES, assert_close, dgamma_tolerance, inductor_unavailable, make_inputs, oracle

GPU = torch.cuda.is_available()
gpu_only = [pytest.mark.gpu, pytest.mark.skipif(not GPU, reason="bf16 runs on a GPU only (the interpreter refuses it)")]
EXACT = {"rtol": 0, "atol": 0}


def _leaf(t: torch.Tensor) -> torch.Tensor:
    return t.detach().clone().requires_grad_()


# ----------------------------------------------------------------------------- empty batches, reduced losses

EMPTY_SHAPES = [(0, 40), (0, 1), (3, 0, 40), (0, 5, 40)]
DTYPE_PAIRS = [(torch.float32, torch.float32), (torch.float16, torch.float32), (torch.float32, torch.float16)]


@pytest.mark.parametrize("loss", ["sum", "mean"])
@pytest.mark.parametrize("x_dtype, gamma_dtype", DTYPE_PAIRS, ids=lambda d: str(d)[6:])
@pytest.mark.parametrize("shape", EMPTY_SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_an_empty_batch_gives_an_empty_dx_and_a_zero_dgamma(shape, x_dtype, gamma_dtype, loss, device):
    N = shape[-1]
    x = torch.randn(shape, device=device).to(x_dtype).requires_grad_()
    gamma = (1 + torch.randn(N, device=device) / 4).to(gamma_dtype).requires_grad_()
    y = rmsnorm_fast(x, gamma)
    assert y.shape == x.shape and y.dtype == x_dtype
    getattr(y, loss)().backward()  # .sum(): dy is an expanded empty tensor, strides (0, 0)
    assert x.grad.shape == x.shape and x.grad.dtype == x_dtype
    assert gamma.grad.dtype == gamma_dtype and torch.equal(gamma.grad.cpu(), torch.zeros(N, dtype=gamma_dtype))
    bare = _leaf(x)
    getattr(rmsnorm_fast(bare, None), loss)().backward()
    assert bare.grad.shape == x.shape and bare.grad.dtype == x_dtype


@pytest.mark.parametrize("elementwise_affine", [True, False])
@pytest.mark.parametrize("shape", EMPTY_SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_an_empty_batch_through_the_module(shape, elementwise_affine, device):
    N = shape[-1]
    fast = FastRMSNorm(N, eps=1e-6, elementwise_affine=elementwise_affine, device=device, dtype=torch.float16)
    x = torch.randn(shape, device=device).requires_grad_()  # fp32 activations, fp16 weight
    fast(x).sum().backward()
    assert x.grad.shape == x.shape and x.grad.dtype == torch.float32
    if elementwise_affine:
        assert fast.weight.grad.dtype == torch.float16
        assert torch.equal(fast.weight.grad.cpu(), torch.zeros(N, dtype=torch.float16))


def test_opcheck_passes_on_an_empty_batch_with_an_expanded_dy(device):
    x, gamma = torch.empty(0, 40, device=device), torch.ones(40, device=device)
    y, rstd = _forward_op(x, gamma, 1e-6)
    dy = torch.ones(1, 1, device=device).expand(0, 40)  # what y.sum() hands the backward
    assert dy.stride() == (0, 0)
    torch.library.opcheck(_backward_op, (x, gamma, rstd, dy))
    torch.library.opcheck(_forward_op, (x.requires_grad_(), gamma.requires_grad_(), 1e-6))


@pytest.mark.parametrize("loss", ["sum", "mean", "column_sums", "row_sums"])
def test_a_broadcast_dy_from_a_reduced_loss(loss, device):
    M, N = 24, 40
    x, gamma, v = make_inputs(M, N, torch.float32, device=device, seed=21)
    xr, gr = _leaf(x), _leaf(gamma)
    y = rmsnorm_fast(xr, gr)
    strides = []
    y.register_hook(lambda g: strides.append(g.stride()))
    if loss == "sum":
        y.sum().backward()
        dy, layout = torch.ones(M, N), (0, 0)
    elif loss == "mean":
        y.mean().backward()  # torch's MeanBackward divides the expanded ones: a dense dy, layout not asserted
        dy, layout = torch.full((M, N), 1 / (M * N)), None
    elif loss == "column_sums":  # y.sum(0) · v[0]: dy = v[0] expanded over the rows
        (y.sum(0) * v[0]).sum().backward()
        dy, layout = v[0].cpu().expand(M, N), (0, 1)
    else:  # y.sum(1) · v[:, 0]: dy = v[:, 0] expanded over the columns
        (y.sum(1) * v[:, 0]).sum().backward()
        dy, layout = v[:, 0].cpu()[:, None].expand(M, N), (1, 0)
    assert len(strides) == 1
    if layout is not None:
        assert strides[0] == layout  # the layout the backward was really given
    _, dx64, dg64 = oracle(x, gamma, dy)
    assert_close(xr.grad, dx64, msg="dx")
    assert_close(gr.grad, dg64, tol=dgamma_tolerance(M, x.dtype, gamma.dtype), msg="dgamma")


# ----------------------------------------------------------------------------- eps=None is torch.nn.RMSNorm's

_PAIRS = list(itertools.product((torch.float32, torch.float16, torch.bfloat16), repeat=2))


def _pair(x_dtype, w_dtype):
    marks = gpu_only if torch.bfloat16 in (x_dtype, w_dtype) else []
    return pytest.param(x_dtype, w_dtype, id=f"x_{str(x_dtype)[6:]}-w_{str(w_dtype)[6:]}", marks=marks)


@pytest.mark.filterwarnings("ignore:Mismatch dtype between input and weight")  # torch's own module, mixed dtypes
@pytest.mark.parametrize("x_dtype, w_dtype", [_pair(*p) for p in _PAIRS])
def test_eps_none_gives_what_the_installed_torch_nn_rmsnorm_gives(x_dtype, w_dtype, device):
    # scale 0.01: mean(x²) ≈ 1e-4, where finfo(float16).eps = 9.8e-4 would dominate and finfo(float32).eps does not
    g = torch.Generator().manual_seed(22)
    x = (0.01 * torch.randn(5, 7, 64, generator=g)).to(device, x_dtype)
    ref = torch.nn.RMSNorm(64, device=device, dtype=w_dtype)
    with torch.no_grad():
        ref.weight.copy_(1 + torch.randn(64, generator=g) / 4)
    fast = FastRMSNorm(64, device=device, dtype=w_dtype)
    fast.load_state_dict(ref.state_dict())
    assert ref.eps is None and fast.eps is None
    y, y_ref = fast(x), ref(x)
    assert y.dtype == y_ref.dtype == x_dtype
    torch.testing.assert_close(y, y_ref, **TOLERANCES[x_dtype])
    bare, bare_ref = FastRMSNorm(64, elementwise_affine=False), torch.nn.RMSNorm(64, elementwise_affine=False)
    torch.testing.assert_close(bare(x), bare_ref(x), **TOLERANCES[x_dtype])
    functional = rmsnorm_fast(x, fast.weight, eps=None)  # the function takes eps=None as F.rms_norm does
    torch.testing.assert_close(functional, torch.nn.functional.rms_norm(x, (64,), ref.weight, eps=None),
                               **TOLERANCES[x_dtype])


def test_an_input_of_another_width_is_refused_naming_x_not_the_weight(device):
    with pytest.raises(ContractError, match=r"x's last dimension must be N = 64 .*got x of shape \(4, 65\)"):
        FastRMSNorm(64, device=device)(torch.randn(4, 65, device=device))
    with pytest.raises(ContractError, match=r"got x of shape \(\)"):
        FastRMSNorm(64, device=device)(torch.tensor(1.0, device=device))


# ----------------------------------------------------------------------------- torch.compile over views

T, H, D = 6, 4, 40  # tokens, heads, head dim: a fused QKV buffer is (T, 3·H·D)


def _layouts(device):
    """name → (base leaf, function of the base giving x (..., D), whether x's rows collapse to one row stride)."""
    g = torch.Generator().manual_seed(23)

    def base(*shape):
        return torch.randn(*shape, generator=g).to(device).requires_grad_()

    return {
        "slice": (base(T, D + 24), lambda b: b[:, 8:8 + D], True),  # buf[:, :N]-like: row stride D + 24
        "slice_3d": (base(3, T, D + 8), lambda b: b[..., :D], True),  # (3, T, D), strides (T·(D+8), D+8, 1)
        "head_view": (base(T, 3 * H * D), lambda b: b[:, :H * D].view(T, H, D), False),  # q heads of a QKV
        "k_heads": (base(T, 3, H, D), lambda b: b[:, 1], False),  # k heads of a (T, 3, H, D) view
        "transposed": (base(H, T, D), lambda b: b.transpose(0, 1), False),  # (T, H, D) read as (H, T, D)
        "column_major": (base(D, T), lambda b: b.t(), False),  # stride(-1) = T: copied first
    }


LAYOUTS = list(_layouts("cpu"))


@pytest.mark.parametrize("layout", LAYOUTS)
def test_rows_are_read_in_place_exactly_when_one_row_stride_describes_them(layout, device):
    b, make_x, collapsible = _layouts(device)[layout]
    x = make_x(b)
    rows = _as_rows(x)
    assert rows.shape == (x.numel() // D, D) and rows.stride(-1) == 1
    assert (rows.data_ptr() == x.data_ptr()) == collapsible  # a view when possible, else one copy
    assert torch.equal(rows, x.reshape(-1, D))


@pytest.mark.parametrize("layout", LAYOUTS)
def test_the_kernel_reads_a_collapsible_view_in_place_under_compile(layout, device, monkeypatch):
    b, make_x, collapsible = _layouts(device)[layout]
    seen = []
    launcher = fast_autograd.launch_forward

    def recording(x, gamma, eps, *config_and_offset):
        seen.append((x.data_ptr(), x.stride()))
        return launcher(x, gamma, eps, *config_and_offset)

    monkeypatch.setattr(fast_autograd, "launch_forward", recording)  # what the op's implementation calls
    x = make_x(b)
    torch.compile(lambda t: rmsnorm_fast(make_x(t), None), fullgraph=True, backend="aot_eager")(b)
    assert len(seen) == 1 and (seen[0][0] == x.data_ptr()) == collapsible


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
@pytest.mark.parametrize("fullgraph", [True, False], ids=["fullgraph", "graph_breaks_allowed"])
@pytest.mark.parametrize("layout", LAYOUTS)
def test_torch_compile_over_a_view_gives_the_eager_numbers(layout, fullgraph, backend, device):
    if backend == "inductor" and inductor_unavailable(device):
        pytest.skip(inductor_unavailable(device))
    b, make_x, _ = _layouts(device)[layout]
    gamma = _leaf(1 + torch.randn(D, device=device) / 4)
    dy = torch.randn(make_x(b).shape, device=device)

    def f(base, gamma):
        return rmsnorm_fast(make_x(base), gamma)

    def run(fn):
        base, g = _leaf(b), _leaf(gamma)
        y = fn(base, g)
        (y * dy).sum().backward()
        return y, base.grad, g.grad

    y, dbase, dgamma = run(f)
    x = make_x(b).detach()
    y64, dx64, dg64 = oracle(x.reshape(-1, D), gamma, dy.reshape(-1, D))
    assert_close(y.reshape(-1, D), y64, msg="eager y")  # the eager numbers are right to begin with
    assert_close(make_x(dbase).reshape(-1, D), dx64, msg="eager dx")
    assert_close(dgamma, dg64, tol=dgamma_tolerance(x.numel() // D, x.dtype, gamma.dtype), msg="eager dgamma")
    compiled = run(torch.compile(f, fullgraph=fullgraph, backend=backend))
    tol = EXACT if backend == "aot_eager" else TOLERANCES[torch.float32]
    for name, got, want in zip(("y", "dbase", "dgamma"), compiled, (y, dbase, dgamma)):
        torch.testing.assert_close(got, want, **tol, msg=lambda m, name=name: f"{name}: {m}")


# ----------------------------------------------------------------------------- torch.compile(dynamic=True)


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
@pytest.mark.parametrize("eps", [1e-6, None])
@pytest.mark.parametrize("fullgraph", [True, False], ids=["fullgraph", "graph_breaks_allowed"])
def test_dynamic_shapes_compile_to_one_graph_without_recompiles(fullgraph, eps, backend, device):
    if backend == "inductor" and inductor_unavailable(device):
        pytest.skip(inductor_unavailable(device))
    torch.manual_seed(24)
    model = torch.nn.Sequential(torch.nn.Linear(32, 48), FastRMSNorm(48, eps=eps), torch.nn.Linear(48, 4)).to(device)
    counters = torch._dynamo.utils.counters
    counters.clear()
    counter = CompileCounterWithBackend(backend)  # counts the times its backend is handed a graph
    compiled = torch.compile(model, dynamic=True, fullgraph=fullgraph, backend=counter)
    tol = EXACT if backend == "aot_eager" else TOLERANCES[torch.float32]
    for seq_len in (5, 9, 13):
        x = torch.randn(2, seq_len, 32, device=device)
        model.zero_grad()
        want = model(x)
        want.square().sum().backward()
        grads = [p.grad.clone() for p in model.parameters()]
        model.zero_grad()
        got = compiled(x)
        got.square().sum().backward()
        torch.testing.assert_close(got, want, **tol)
        for p, grad in zip(model.parameters(), grads):
            torch.testing.assert_close(p.grad, grad, **tol)
        if seq_len == 5:
            compiles_after_the_first_call = counter.frame_count
    assert dict(counters["graph_break"]) == {}
    assert counters["stats"]["unique_graphs"] == 1  # the whole model in one graph
    # No recompile for the second and third lengths. (The first call may hand the backend a graph twice:
    # eps starts as a symbolic float, the op's float argument specialises it, and Dynamo restarts once.)
    recompiles = counter.frame_count - compiles_after_the_first_call
    assert recompiles == 0, f"{recompiles} recompiles for the second and third sequence lengths"


BAD_EPS = [(-1e-6, "finite and >= 0; got -1e-06"), (math.nan, "got nan"),
           (math.inf, "got inf"), (-math.inf, "got -inf"), (True, "real number; got bool"),
           ("1e-6", "real number; got str")]


@pytest.mark.parametrize("eps, pattern", BAD_EPS, ids=[repr(e) for e, _ in BAD_EPS])
def test_a_bad_eps_is_still_a_clear_eager_error(eps, pattern, device):
    x, gamma, _ = make_inputs(3, 8, torch.float32, device=device)
    with pytest.raises(ContractError, match=f"eps must be .*{pattern}"):
        rmsnorm_fast(x, gamma, eps)
    with pytest.raises(ContractError, match=f"eps must be .*{pattern}"):
        FastRMSNorm(8, eps=eps)  # at construction, as the article's RMSNorm does
    module = FastRMSNorm(8, device=device)
    module.eps = eps  # set after construction: refused at the call
    with pytest.raises(ContractError, match=f"eps must be .*{pattern}"):
        module(x)


def test_eps_zero_is_taken_as_torchs_norms_take_it(device):
    """eps = 0 is valid for F.rms_norm, F.layer_norm and their modules: every fast entry point takes it and gives
    torch's numbers on rows that are not all equal (a row of zeros gives NaN there, as in torch); the article's
    contract, which the course teaches, still asks eps > 0."""
    import torch.nn.functional as F

    from rmsnorm import FastLayerNorm, layernorm_fast, rmsnorm_add, swap_rmsnorm
    from rmsnorm.article import RMSNorm as ArticleRMSNorm

    x, gamma, _ = make_inputs(5, 24, torch.float32, device=device)
    bias = torch.randn(24, device=device)
    x64, g64 = x.double(), gamma.double()
    for got, want in (
            (rmsnorm_fast(x, gamma, 0.0), F.rms_norm(x64, (24,), g64, 0.0)),
            (FastRMSNorm(24, eps=0.0, device=device)(x), F.rms_norm(x64, (24,), None, 0.0)),
            (layernorm_fast(x, gamma, bias, 0.0), F.layer_norm(x64, (24,), g64, bias.double(), 0.0)),
            (FastLayerNorm(24, eps=0.0, device=device)(x), F.layer_norm(x64, (24,), None, None, 0.0)),
            (rmsnorm_add(x, x, gamma, 0.0)[0], F.rms_norm(2 * x64, (24,), g64, 0.0))):
        assert_close(got, want, dtype=torch.float32)
    zeros = torch.zeros(2, 24, device=device)
    assert torch.equal(rmsnorm_fast(zeros, gamma, 0.0).isnan(), F.rms_norm(zeros, (24,), gamma, 0.0).isnan())
    model = torch.nn.Sequential(torch.nn.RMSNorm(24, eps=0.0, device=device))
    swapped = swap_rmsnorm(model)
    assert swapped == 1 and swapped.names == ("0",) and isinstance(model[0], FastRMSNorm) and model[0].eps == 0.0
    with pytest.raises(ContractError, match="eps must be finite and > 0"):
        ArticleRMSNorm(24, eps=0.0)


def test_a_swap_refuses_a_negative_eps_in_the_contracts_words(device):
    from rmsnorm import swap_layernorm, swap_rmsnorm

    for swap, norm in ((swap_rmsnorm, torch.nn.RMSNorm(24, eps=-1e-6, device=device)),
                       (swap_layernorm, torch.nn.LayerNorm(24, eps=-1e-6, device=device))):
        with pytest.raises(ContractError, match=r"its eps is refused by the fast path: eps must be finite and >= 0; "
                                                r"got -1e-06"):
            swap(torch.nn.Sequential(norm))


@pytest.mark.parametrize("eps, pattern", BAD_EPS[:4], ids=[repr(e) for e, _ in BAD_EPS[:4]])
def test_a_bad_eps_under_compile_is_the_same_error(eps, pattern, device):
    x, gamma, _ = make_inputs(3, 8, torch.float32, device=device)
    compiled = torch.compile(lambda x: rmsnorm_fast(x, gamma, eps), backend="aot_eager")
    with pytest.raises(ContractError, match=f"eps must be .*{pattern}"):
        compiled(x)
    # a module compiled with a good eps, then given a bad one: the guard on eps fails, Dynamo retraces, and the
    # operator refuses the value when the compiled call runs: the same ContractError, not wrapped in Dynamo's
    # Unsupported under fullgraph=True, and nothing given up: a norm compiled next compiles whole
    for dynamic, fullgraph in itertools.product((None, True), (False, True)):
        torch._dynamo.reset()
        module = FastRMSNorm(8, eps=1e-6, device=device)
        compiled = torch.compile(module, dynamic=dynamic, fullgraph=fullgraph, backend="aot_eager")
        compiled(x)
        module.eps = eps
        with pytest.raises(ContractError, match=f"eps must be .*{pattern}"):
            compiled(x)
        module.eps = 1e-6
        torch.testing.assert_close(compiled(x), module(x), **EXACT)
        counter = CompileCounterWithBackend("aot_eager")
        fresh = FastRMSNorm(8, device=device)
        torch.testing.assert_close(torch.compile(fresh, fullgraph=True, backend=counter)(x), fresh(x), **EXACT)
        assert counter.frame_count == 1


@pytest.mark.parametrize("what_raised", ["function, then module", "module's eps", "module's eps, static"])
def test_a_norm_compiled_after_dynamo_gave_up_on_ours_still_gives_the_eager_numbers(what_raised, device):
    """Dynamo skips a function from then on, for every caller, when tracing it raised ("Failed to handle
    graph break gracefully. Skipping the function and falling back to eager"): here x of the wrong width, refused
    while Dynamo traced FastRMSNorm.forward (and an eps of the wrong type, refused while it traced rmsnorm_fast).
    Until ``torch._dynamo.reset()`` every later ``torch.compile`` of any FastRMSNorm runs the given-up frames
    eagerly while Dynamo tries to compile each frame they call. The eager path must then run outside Dynamo: it
    read ``data_ptr()`` for its launch key, and the call failed with "unsupported operand type(s) for &" (a
    fullgraph compile) instead of giving the eager numbers."""
    x, gamma, _ = make_inputs(3, 8, torch.float32, device=device)
    if what_raised == "function, then module":  # rmsnorm_fast given up too
        with pytest.raises(ContractError, match="eps must be a real number; got str"):
            torch.compile(lambda x: rmsnorm_fast(x, gamma, "1e-6"), backend="aot_eager")(x)
    module = FastRMSNorm(8, eps=1e-6, device=device)
    refused = torch.compile(module, dynamic=None if what_raised.endswith("static") else True, backend="aot_eager")
    refused(x)
    with pytest.raises(ContractError, match="x's last dimension must be N = 8"):
        refused(torch.cat([x, x], dim=1))
    if what_raised.startswith("module's eps"):  # rmsnorm_fast given up, through the module
        module.eps = "1e-6"
        with pytest.raises(ContractError, match="eps must be a real number; got str"):
            refused(x)
    # Dynamo gave up on both FastRMSNorm.forward and rmsnorm_fast: fullgraph=True would find nothing to compile
    # (torch 2.13 says so: "found no compiled frames"; notebooks/TROUBLESHOOTING.md says what to do)
    norm = FastRMSNorm(8, device=device)
    xe, xc = _leaf(x), _leaf(x)
    want = norm(xe)
    want.square().sum().backward()
    eager_dgamma, norm.weight.grad = norm.weight.grad, None
    got = torch.compile(norm, backend="aot_eager")(xc)
    got.square().sum().backward()
    torch.testing.assert_close(got, want, **EXACT)
    torch.testing.assert_close(xc.grad, xe.grad, **EXACT)
    torch.testing.assert_close(norm.weight.grad, eager_dgamma, **EXACT)

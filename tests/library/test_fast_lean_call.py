"""The fast path's lean eager call: the direct launch's cache key, its fallbacks, streams, CUDA graphs.

rmsnorm/launch.py launches a compiled kernel below Triton's ``kernel[grid]``
binder. Its one risk is a cache key coarser than Triton's specialisation (a
kernel compiled at M = 1 treats M as the constant 1, and must never run at
M = 2). The CPU tests check the key's classes; the GPU tests check that the
kernel it reuses is the very object Triton's own binder picks for the same
arguments, that both launch paths give the same numbers, that it launches
on the current stream, and that CUDA graphs (a ``torch.cuda.graph`` capture,
and ``torch.compile(mode="reduce-overhead")`` training) give eager's numbers.
"""

import warnings
from dataclasses import replace

import pytest
import torch
import triton

import rmsnorm
from rmsnorm import FastRMSNorm, native_launch, rmsnorm_fast, rmsnorm_fast_backward, rmsnorm_fast_forward
from rmsnorm import launch as launch_module
from rmsnorm.config import FastConfig, backward_config, forward_config, num_programs, row_align_hint
from rmsnorm.forward import _launch as forward_launcher
from rmsnorm.forward import forward_key, rmsnorm_fast_forward_kernel
from rmsnorm.launch import DirectLauncher, triton_is_tested
from rmsnorm.testing import make_inputs

GPU = torch.cuda.is_available() and not rmsnorm.device.interpreter_active()
gpu_only = pytest.mark.skipif(not GPU, reason="needs a CUDA GPU: the direct launch calls compiled kernels")
two_gpus = pytest.mark.skipif(
    not (GPU and torch.cuda.device_count() >= 2),
    reason="needs two CUDA GPUs (only one-GPU machines were lent when this was written)",
)


@pytest.fixture(autouse=True)
def tritons_launcher(monkeypatch):
    """These tests are about the launch through Triton's launcher (``CompiledKernel.run``): the native launch, on by
    default, is off for each, so that a plan it kept cannot run in its place (tests/library/test_native_launch.py
    tests that path, and every path against the others)."""
    monkeypatch.setattr(native_launch.state, "enabled", False)


# ----------------------------------------------------------------------------- the key (any machine)


def _forward_key(x, gamma=None, config=None):
    M, N = x.shape
    config = config or forward_config(N, x.dtype)
    w = x if gamma is None else gamma
    y, rstd = torch.empty(M, N, dtype=x.dtype), torch.empty(M)
    return forward_key(x, w, y, rstd, config, False, gamma is not None)


def test_the_forward_key_tells_apart_what_triton_specialises_on():
    buf = torch.zeros(64 * 64 + 16, dtype=torch.float16)
    x = buf[: 32 * 64].view(32, 64)
    base = _forward_key(x)
    assert _forward_key(buf[16:16 + 32 * 64].view(32, 64)) != _forward_key(buf[1:1 + 32 * 64].view(32, 64))
    assert _forward_key(buf[1:1 + 32 * 64].view(32, 64)) != base  # 2 bytes in: not 16-byte aligned
    assert _forward_key(x[:1]) != _forward_key(x[:2]) != _forward_key(x[:16])  # M = 1 is a constant to Triton
    assert _forward_key(x.float()) != base  # dtype
    assert _forward_key(x, gamma=torch.ones(64)) != base  # a weight, and its dtype
    assert _forward_key(buf[: 32 * 80].view(32, 80)[:, :64]) != base  # another row stride
    other = FastConfig(BLOCK_M=4, BLOCK_N=64, num_warps=4, programs_per_sm=None, num_stages=1)
    assert _forward_key(x, config=other) != _forward_key(x, config=replace(other, num_warps=8))
    assert _forward_key(x, config=other) != _forward_key(x, config=replace(other, BLOCK_M=8))
    assert _forward_key(x[:17]) == _forward_key(x[:31])  # M = 17 and 31: one class for Triton too


def _backward_key(x, dy=None, gamma=None, config=None, one_block=True, block_m=4, dres=None):
    from rmsnorm.backward import backward_key

    M, N = x.shape
    config = config or backward_config(N, x.dtype)
    dy = x if dy is None else dy
    w = x if gamma is None else gamma
    dx, partial, rstd = torch.empty(M, N, dtype=x.dtype), torch.empty(4, N), torch.empty(M)
    return backward_key(x, w, rstd, dy, dx, partial, rstd, config, one_block, block_m, gamma is not None, dres)


def test_the_backward_key_tells_apart_what_triton_specialises_on():
    """The backward's key, as the forward's: dtypes (dy's too), alignment, strides, M's classes, N, config, dres."""
    buf = torch.zeros(64 * 80 + 16, dtype=torch.float16)
    x = buf[: 32 * 64].view(32, 64)
    base = _backward_key(x)
    assert _backward_key(buf[1:1 + 32 * 64].view(32, 64)) != base  # 2 bytes in: not 16-byte aligned
    assert _backward_key(x, dy=buf[8:8 + 32 * 64].view(32, 64)) == base  # 16 bytes in: still aligned
    assert _backward_key(x, dy=buf[1:1 + 32 * 64].view(32, 64)) != base
    assert _backward_key(x, dy=x.float()) != base  # dy's dtype (the fused add's float32 residual stream)
    assert _backward_key(x[:1]) != _backward_key(x[:2]) != _backward_key(x[:16])  # M = 1, M % 16
    assert _backward_key(x[:17]) == _backward_key(x[:31])
    assert _backward_key(buf[: 32 * 80].view(32, 80)[:, :64]) != base  # another row stride
    assert _backward_key(x, gamma=torch.ones(64)) != _backward_key(x, gamma=torch.ones(64).half())
    assert _backward_key(x, one_block=False, block_m=1) != base
    assert _backward_key(x, dres=x) != base and _backward_key(x, dres=x) != _backward_key(x, dres=x.float())
    other = FastConfig(BLOCK_M=4, BLOCK_N=64, num_warps=4, programs_per_sm=None, num_stages=1)
    assert _backward_key(x, config=other) != _backward_key(x, config=replace(other, num_warps=8))


def test_an_untested_triton_falls_back_saying_so_once_at_the_first_compiled_launch(monkeypatch, device):
    monkeypatch.setattr(launch_module, "triton_is_tested", lambda version=triton.__version__: False)
    monkeypatch.setattr(DirectLauncher, "_warned", False)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        first = DirectLauncher(rmsnorm_fast_forward_kernel)  # building one (at import) says nothing
        second = DirectLauncher(rmsnorm_fast_forward_kernel)
    assert not first.usable and not second.usable
    assert first.untested is (device.type == "cuda")  # under the interpreter nothing is compiled: no warning
    x = torch.randn(8, 64, device=device)
    if device.type == "cuda":
        monkeypatch.setattr(rmsnorm.forward, "_launch", first)
        with pytest.warns(RuntimeWarning, match="not one of the versions"):
            rmsnorm.rmsnorm_fast_forward(x, None, 1e-6)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        if device.type == "cuda":
            monkeypatch.setattr(rmsnorm.forward, "_launch", second)
        rmsnorm.rmsnorm_fast_forward(x, None, 1e-6)  # once per process, and never under the interpreter
    assert triton_is_tested("3.6.0") and triton_is_tested("3.7.1") and not triton_is_tested("9.0.0")


# ----------------------------------------------------------------------------- x checked once, quickly


def _contract_cases(device):
    """(what is wrong or None, x, gamma, eps): each case breaks at most one rule of check_fast_inputs."""
    dt = torch.float32
    x = torch.randn(8, 64, device=device, dtype=dt)
    g = torch.randn(64, device=device, dtype=dt)
    other = "cpu" if device.type == "cuda" else "meta"
    yield None, x, g, 1e-6
    yield None, x, None, 1e-6
    yield None, x, g.half(), 1e-5
    yield None, x[:, :1], g[:1], 1e-6  # N = 1: any column stride
    yield None, torch.randn(64, 8, device=device).t()[:, :1], g[:1], 1e-6
    yield "x is not a tensor", x.tolist(), g, 1e-6
    yield "x is 3-D", x.view(2, 4, 64), g, 1e-6
    yield "x is 1-D", x[0], g, 1e-6
    yield "x is float64", x.double(), g, 1e-6
    yield "x is int", x.int(), g, 1e-6
    yield "x is on another device", x.to(other), g, 1e-6
    yield "x's column stride", x.t().contiguous().t(), g, 1e-6
    yield "x is sparse", x.to_sparse(), g, 1e-6
    yield "N = 0", x[:, :0], g[:0], 1e-6
    yield "gamma's shape", x, g[:32], 1e-6
    yield "gamma is 2-D", x, g.view(1, 64), 1e-6
    yield "gamma's stride", x, torch.randn(128, device=device)[::2], 1e-6
    yield "gamma is float64", x, g.double(), 1e-6
    yield "gamma is on another device", x, g.to(other), 1e-6
    yield "gamma is not a tensor", x, g.tolist(), 1e-6
    yield "eps < 0", x, g, -1e-6
    yield "eps is nan", x, g, float("nan")
    yield "eps is inf", x, g, float("inf")
    yield "eps is a bool", x, g, True
    yield "eps is a string", x, g, "1e-6"


def _built_extension():
    """The native extension, built or loaded from torch's cache; the test skipped where a tool it needs is missing."""
    missing = native_launch.missing_toolchain()
    if missing is not None:
        pytest.skip(f"the extension cannot be built here: {missing}")
    return native_launch.compile_extension()


def _quick_check(kind):
    """The contract's quick check in Python (_plainly_valid), or the native extension's C version of it."""
    from rmsnorm import contract

    if kind == "python":
        return contract._plainly_valid
    if contract._SPLIT:
        pytest.skip("Triton and the package disagree on the interpreter: every input goes to the rules")
    module = _built_extension()
    module.configure_quick_check(rmsnorm.FAST_MAX_N, contract._INTERPRETED)
    return module.plainly_valid


@pytest.mark.filterwarnings("ignore:The PyTorch API of nested tensors is in prototype stage")  # the strided kind
@pytest.mark.parametrize("kind", ["python", "c"])
def test_the_quick_check_passes_only_what_every_rule_passes(device, kind):
    """check_fast_inputs reads a few attributes for the common valid case (the quick check, in Python or, once the
    native extension is loaded, in C); anything it does not pass goes through every rule, so every bad input is
    still refused."""
    from rmsnorm.contract import check_fast_inputs

    quick = _quick_check(kind)
    for wrong, x, gamma, eps in _contract_cases(device):
        if wrong is None:
            assert quick(x, gamma, eps) is True, "a common valid call takes the quick check"
            assert quick(x, None if gamma is None else torch.nn.Parameter(gamma), eps) is True
            check_fast_inputs(x, gamma, eps)
        else:
            assert quick(x, gamma, eps) is False, wrong
            with pytest.raises(rmsnorm.ContractError):
                check_fast_inputs(x, gamma, eps)
    x = torch.randn(4, 64, device=device)
    subclassed = torch.ones(64, device=device).as_subclass(_TensorSubclass)
    for rare in [(x, None, 1), (torch.nn.Parameter(x), None, 1e-6), (x, subclassed, 1e-6), (x, None, 0.0)]:
        assert quick(*rare) is False, "valid, the slow way"
        check_fast_inputs(*rare)
    nested = torch.nested.nested_tensor([torch.randn(8), torch.randn(8)], device=device)  # 2-D, strided, no strides
    with pytest.raises(RuntimeError):  # as torch raises it, from either check: never an abort
        quick(nested, None, 1e-6)
    widest = torch.empty(1, rmsnorm.FAST_MAX_N, device=device)
    assert quick(widest, None, 1e-6) is True
    assert quick(torch.empty(1, rmsnorm.FAST_MAX_N + 1, device=device), None, 1e-6) is False  # too many columns


class _TensorSubclass(torch.Tensor):
    pass


def test_the_loaded_extension_gives_the_contract_its_quick_check(monkeypatch):
    from rmsnorm import contract

    module = _built_extension()
    monkeypatch.setattr(native_launch, "build", lambda: module)
    monkeypatch.setattr(native_launch.state, "tried", False)
    monkeypatch.setattr(native_launch.state, "module", None)
    monkeypatch.setattr(contract, "quick_check", contract._plainly_valid)
    assert native_launch.extension() is module
    assert contract.quick_check is (contract._plainly_valid if contract._SPLIT else module.plainly_valid)


def test_an_eager_call_binds_no_signature_and_a_transform_still_works(device, monkeypatch):
    """Outside torch.func the call's Function (the plain norm's, the fused add's) takes ``ctx`` in its
    forward: ``Function.apply`` binds the arguments of one with a separate ``setup_context`` through
    ``inspect.signature`` on every call (about 20 µs of host time a call). Under a transform the call
    takes the Function that has one."""
    import inspect

    from torch.func import grad

    x, gamma, _ = make_inputs(3, 64, torch.float32, device)
    real, calls = inspect.signature, []
    def counted(fn, *args, **kwargs):  # Triton's launch reads its kernels' signatures too: count the Functions'
        if getattr(fn, "__qualname__", "").endswith(".forward"):
            calls.append(fn.__qualname__)
        return real(fn, *args, **kwargs)

    monkeypatch.setattr(inspect, "signature", counted)
    for requires_grad in (False, True):
        y = rmsnorm_fast(x.clone().requires_grad_(requires_grad), gamma)
        y2, h = rmsnorm.rmsnorm_add(x.clone().requires_grad_(requires_grad), x.clone(), gamma)
        if requires_grad:
            y.sum().backward()
            (y2.sum() + h.sum()).backward()
    assert calls == []
    assert type(rmsnorm_fast(x.clone().requires_grad_(), gamma).grad_fn).__name__ == "_FastRMSNormFunctionBackward"
    monkeypatch.setattr(inspect, "signature", real)
    dx = grad(lambda t: rmsnorm_fast(t, gamma).square().sum())(x)
    xr = x.clone().requires_grad_()
    rmsnorm_fast(xr, gamma).square().sum().backward()
    torch.testing.assert_close(dx, xr.grad)


def _three_norms(x, gamma):
    """(name, call) for the three functionals, each on fresh copies of x (and a residual) and gamma."""
    yield "rmsnorm_fast", lambda x, g: rmsnorm_fast(x, g)
    yield "rmsnorm_add", lambda x, g: torch.cat(rmsnorm.rmsnorm_add(x, x.detach() * 0.5, g))
    yield "layernorm_fast", lambda x, g: rmsnorm.layernorm_fast(x, g, g.detach() * 0.25)


def test_a_backward_fills_no_zeros_for_the_statistics(device):
    """rstd, and the LayerNorm's mean, have no gradient: autograd fills none for them (set_materialize_grads(False));
    filling them would be one more launch a statistic on every backward of a model."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class Record(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            ops.append(func.overloadpacket.__name__)
            return func(*args, **(kwargs or {}))

    x, gamma, _ = make_inputs(5, 48, torch.float32, device, seed=2)
    for name, call in _three_norms(x, gamma):
        leaf, weight = x.clone().requires_grad_(), gamma.clone().requires_grad_()
        y = call(leaf, weight)
        dy, ops = torch.ones_like(y), []
        with Record():
            y.backward(dy)
        assert ops, name
        assert not {"zeros", "zeros_like", "new_zeros", "zero_"} & set(ops), (name, ops)
        assert leaf.grad is not None and weight.grad is not None, name


def test_a_call_with_no_gradient_to_record_launches_without_a_function(device, monkeypatch):
    """No grad, inference mode, or no input that requires grad: the call goes to the launcher with no
    autograd.Function (it costs the host about what the launch does), with the recorded call's numbers bit
    for bit; a call with a gradient to record still goes through its Function (run_eagerly)."""
    from rmsnorm import autograd

    x, gamma, _ = make_inputs(5, 48, torch.float32, device, seed=2)
    for name, call in _three_norms(x, gamma):
        recorded = call(x.clone().requires_grad_(), gamma.clone().requires_grad_())
        assert recorded.grad_fn is not None, name
        functions = (autograd._FastRMSNormFunction, rmsnorm.fused_add._FusedAddRMSNormFunction,
                     rmsnorm.layernorm._FastLayerNormFunction)

        def refused(*args):
            raise AssertionError(f"{name}: a Function applied where no gradient is recorded")

        for function in functions:
            monkeypatch.setattr(function, "apply", refused)
        monkeypatch.setattr(autograd, "_autograd_apply", lambda function, *args: refused())
        with torch.no_grad():
            no_grad = call(x.clone().requires_grad_(), gamma.clone().requires_grad_())
        with torch.inference_mode():
            inference = call(x.clone(), gamma.clone())
        plain = call(x.clone(), gamma.clone())
        for y in (no_grad, inference, plain):
            assert y.grad_fn is None and not y.requires_grad, name
            assert torch.equal(y, recorded.detach()), name
        with pytest.raises(AssertionError, match="applied where no gradient"):
            call(x.clone(), gamma.clone().requires_grad_())  # the weight alone needs its gradient
        monkeypatch.undo()


def test_forward_mode_ad_is_refused_as_before_never_dropped(device):
    """A dual tensor (torch.autograd.forward_ad) needs the Function's jvp, which it has not: the call raises
    torch's own NotImplementedError, under no grad too, instead of returning y without its tangent."""
    import torch.autograd.forward_ad as fwAD

    x, gamma, _ = make_inputs(3, 32, torch.float32, device, seed=4)
    for name, call in _three_norms(x, gamma):
        with torch.no_grad(), fwAD.dual_level():
            dual = fwAD.make_dual(x.clone(), torch.ones_like(x))
            with pytest.raises(NotImplementedError, match="jvp"):
                call(dual, gamma)


# ----------------------------------------------------------------------------- on a GPU


def _forward_variants():
    """Inputs that differ in what Triton specialises on: M (1, a multiple of 16, neither), alignment, dtype."""
    for dtype in (torch.float16, torch.float32):
        for M in (1, 2, 16, 17, 64):
            for offset in (0, 1, 8):  # 1 element in: misaligned; 8: aligned, but rows 264 apart (not 16k)
                N = 256
                buf = torch.randn(M * (N + offset) + offset, device="cuda", dtype=dtype)
                yield buf[offset:offset + M * (N + offset)].view(M, N + offset)[:, :N]


@gpu_only
def test_one_key_never_stands_for_two_of_tritons_kernels():
    """Where two launches share a key of ours, Triton's own binder picks the same compiled kernel for both,
    and that is the kernel our cache holds: nothing compiled for one class of arguments runs another."""
    picks: dict = {}
    for x in _forward_variants():
        M, N = x.shape
        cfg = forward_config(N, x.dtype)
        rows = -(-M // cfg.BLOCK_M)
        P = num_programs(cfg, x.device, rows)
        y, rstd = torch.empty(M, N, device="cuda", dtype=x.dtype), torch.empty(M, device="cuda")
        triton_pick = rmsnorm_fast_forward_kernel[(P,)](  # Triton's own binder, not our cache
            x, x.stride(0), x, y, y.stride(0), rstd, M, N, 1e-6, False, 0.0, cfg.one_block(N), cfg.BLOCK_M, cfg.BLOCK_N,
            P < rows, cfg.num_stages, row_align_hint(x.element_size(), N, x.stride(0), N), num_warps=cfg.num_warps)
        key = forward_key(x, x, y, rstd, cfg, P < rows, False)
        assert picks.setdefault(key, triton_pick) is triton_pick, f"one key, two kernels: M={M}, {x.dtype}"
        for _ in range(2):  # a miss, then a hit
            got, _ = rmsnorm_fast_forward(x, None)
        assert forward_launcher.cache[forward_key(x, x, got, rstd, cfg, P < rows, False)].kernel is triton_pick
        torch.testing.assert_close(got, y, rtol=0, atol=0)
    assert len(set(map(id, picks.values()))) > 1  # the variants did reach several specialisations


@gpu_only
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_direct_and_binder_launches_give_the_same_numbers(dtype, monkeypatch):
    x, gamma, dy = make_inputs(300, 1000, dtype, device="cuda", seed=3)
    direct = [rmsnorm_fast_forward(x, gamma) for _ in range(2)][-1]
    direct_bwd = rmsnorm_fast_backward(x, gamma, direct[1], dy)
    rmsnorm_fast_backward(x, gamma, direct[1], dy)
    monkeypatch.setattr(
        DirectLauncher, "__call__", lambda self, key, grid, *args, **opts: self.kernel[grid](*args, **opts)
    )
    binder = rmsnorm_fast_forward(x, gamma)
    binder_bwd = rmsnorm_fast_backward(x, gamma, binder[1], dy)
    for a, b in zip((*direct, *direct_bwd), (*binder, *binder_bwd)):
        assert torch.equal(a, b)


@gpu_only
def test_it_launches_on_the_current_stream():
    x, gamma, dy = make_inputs(2048, 4096, torch.float16, device="cuda", seed=4)
    expected = rmsnorm_fast(x, gamma)
    rmsnorm_fast(x, gamma)  # cached
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        x_side = x * 1  # written on the side stream: a launch on another stream would race with it
        got = rmsnorm_fast(x_side, gamma)
    side.synchronize()
    assert torch.equal(got, expected)


@two_gpus
def test_a_kernel_cached_on_one_gpu_is_not_reused_on_another():
    x0, gamma0, _ = make_inputs(64, 4096, torch.bfloat16, device="cuda:0", seed=5)
    x1, gamma1 = x0.to("cuda:1"), gamma0.to("cuda:1")
    y0 = rmsnorm_fast(x0, gamma0)
    rmsnorm_fast(x0, gamma0)
    with torch.cuda.device(0):  # tensors on cuda:1 while cuda:0 is current
        y1 = rmsnorm_fast(x1, gamma1)
    assert y1.device == x1.device and torch.equal(y1.cpu(), y0.cpu())
    with torch.cuda.device(1):
        y1 = rmsnorm_fast(x1, gamma1)
        y1 = rmsnorm_fast(x1, gamma1)
    assert torch.equal(y1.cpu(), y0.cpu())
    assert {key[0] for key in forward_launcher.cache} >= {0, 1}


@gpu_only
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_a_cuda_graph_replays_forward_and_backward_with_eager_numbers(dtype):
    norm = FastRMSNorm(4096, eps=1e-6, device="cuda", dtype=dtype)
    with torch.no_grad():
        norm.weight.normal_()
    x = torch.randn(512, 4096, device="cuda", dtype=dtype, requires_grad=True)
    dy = torch.randn_like(x)

    def step():
        norm.weight.grad = None
        x.grad = None
        y = norm(x)
        y.backward(dy)
        return y

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm-up on a side stream, as PyTorch's CUDA-graph docs do
        for _ in range(3):
            step()
    torch.cuda.current_stream().wait_stream(side)
    y_eager = step().detach().clone()
    dx_eager, dgamma_eager = x.grad.clone(), norm.weight.grad.clone()
    graph = torch.cuda.CUDAGraph()
    x.grad = norm.weight.grad = None
    with torch.cuda.graph(graph):
        y_graph = norm(x)
        y_graph.backward(dy)
    with torch.no_grad():
        x.grad.fill_(float("nan"))
        norm.weight.grad.fill_(float("nan"))
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(y_graph, y_eager)
    assert torch.equal(x.grad, dx_eager)
    assert torch.equal(norm.weight.grad, dgamma_eager)  # bitwise: a fixed-order reduction


def _train(norm_cls, steps=4):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(256, 512), norm_cls(512, eps=1e-6), torch.nn.Linear(512, 64)).cuda()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    compiled = torch.compile(model, mode="reduce-overhead")
    data = torch.randn(steps, 128, 256, device="cuda", generator=torch.Generator("cuda").manual_seed(1))
    losses = []
    for i in range(steps):
        torch.compiler.cudagraph_mark_step_begin()
        loss = compiled(data[i]).square().mean()
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        losses.append(loss.item())
    return losses, [p.detach().clone() for p in model.parameters()]


@gpu_only
def test_reduce_overhead_training_matches_torch_rmsnorm():
    """``torch.compile(mode="reduce-overhead")`` (CUDA graphs), written as PyTorch documents it."""
    fast_losses, fast_params = _train(FastRMSNorm)
    torch._dynamo.reset()
    ref_losses, ref_params = _train(torch.nn.RMSNorm)
    torch.testing.assert_close(torch.tensor(fast_losses), torch.tensor(ref_losses), rtol=1e-4, atol=1e-6)
    for got, want in zip(fast_params, ref_params):
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)

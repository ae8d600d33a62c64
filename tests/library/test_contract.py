"""Every contract rule has a negative test: ContractError (a ValueError) naming the
tensor, the rule and the value seen, raised before any output is allocated, with the
inputs left untouched."""

import math

import pytest
import torch

import rmsnorm
from rmsnorm import ContractError
from rmsnorm.article import RMSNorm, backward_rows, check_contract, forward_op, reduce_gamma_gradient
from rmsnorm.article import rmsnorm as rmsnorm_fn
from rmsnorm.testing import rstd_oracle


def ok(M=4, N=8, dtype=torch.float32, device=None):
    device = device or rmsnorm.default_device()
    g = torch.Generator().manual_seed(0)
    return torch.randn(M, N, generator=g).to(device, dtype), torch.randn(N, generator=g).to(device, dtype)


BAD_FORWARD = {
    "x not a tensor": (lambda x, g: ([[1.0, 2.0]], g), r"x must be a torch.Tensor; got list"),
    "x transposed": (lambda x, g: (torch.ones(8, 4, device=x.device).t(), g),
                     r"x must be contiguous .*strides \(1, 4\)"),
    "weight strided": (lambda x, g: (x, torch.ones(16, device=x.device)[::2]),
                      r"weight must be contiguous .*strides \(2,\)"),
    "x bfloat16": (lambda x, g: (x.bfloat16(), g.bfloat16()), r"x must be float32 or float16 .*torch.bfloat16"),
    "x float64": (lambda x, g: (x.double(), g.double()), r"x must be float32 or float16 .*torch.float64"),
    "x int32": (lambda x, g: (x.int(), g.int()), r"x must be float32 or float16 .*torch.int32"),
    "weight other dtype": (lambda x, g: (x, g.half()),
                          r"weight must have the dtype of x \(torch.float32\); got torch.float16"),
    "weight other device": (lambda x, g: (x, g.to("meta")), r"weight must be on the same device as x .*got meta"),
    "unsupported device": (lambda x, g: (x.to("meta"), g.to("meta")), r"x must be on a CUDA device .*got meta"),
    "x 1-D": (lambda x, g: (x[0], g), r"x must be 2-D \(M, N\); got 1-D shape \(8,\)"),
    "x 3-D": (lambda x, g: (x.view(2, 2, 8), g), r"x must be 2-D \(M, N\); got 3-D"),
    "N = 0": (lambda x, g: (x[:, :0], g[:0]), r"1 <= N <= 4096 columns; got N = 0"),
    "N = 4097": (lambda x, g: (torch.ones(1, 4097, device=x.device), torch.ones(4097, device=x.device)),
                 r"got N = 4097"),
    "weight too long": (lambda x, g: (x, torch.ones(9, device=x.device)),
                       r"weight must have shape \(N,\) = \(8,\); got \(9,\)"),
    "weight 2-D": (lambda x, g: (x, g.view(1, 8)), r"weight must have shape \(N,\) = \(8,\); got \(1, 8\)"),
    "scratch 4097 x 4096": (
        # zeros, not empty: NaN != NaN
        lambda x, g: (torch.zeros(4097, 4096, device=x.device), torch.ones(4096, device=x.device)),
        r"\(4097, 4096\) needs M\*N\*4 = 67,125,248 bytes .*67,108,864 bytes \(64 MiB\)",
    ),
}


@pytest.mark.parametrize("name", BAD_FORWARD)
def test_forward_rejects(name, no_allocation):
    make, pattern = BAD_FORWARD[name]
    x, gamma = make(*ok())
    before = [t.clone() if isinstance(t, torch.Tensor) and t.device.type != "meta" else None for t in (x, gamma)]
    with pytest.raises(ContractError, match=pattern):
        forward_op(x, gamma)
    for t, b in zip((x, gamma), before):
        if b is not None:
            assert torch.equal(t, b), "an input was modified"


@pytest.mark.parametrize(
    "eps, pattern",
    [(0, "> 0; got 0"), (0.0, "> 0; got 0.0"), (-1e-6, "> 0; got -1e-06"), (math.nan, "got nan"),
     (math.inf, "got inf"), (-math.inf, "got -inf"), ("1e-6", "real number; got str"),
     (None, "real number; got NoneType"), (True, "real number; got bool"),
     (torch.tensor(1e-6), "real number; got Tensor")],
)
def test_eps_rejected(eps, pattern, no_allocation):
    x, gamma = ok()
    with pytest.raises(ContractError, match=f"eps must be .*{pattern}"):
        forward_op(x, gamma, eps)


def test_contract_error_is_a_value_error():
    assert issubclass(ContractError, ValueError)


def test_scratch_limit_4096_x_4096_passes_the_contract():
    x = torch.empty(4096, 4096, device=rmsnorm.default_device())
    check_contract(x, torch.ones(4096, device=x.device), 1e-6)  # exactly 64 MiB: allowed


def test_cpu_without_interpreter_says_how_to_enable_it(monkeypatch, no_allocation):
    monkeypatch.setattr("rmsnorm.contract.interpreter_active", lambda: False)
    x, gamma = ok(device=torch.device("cpu"))
    with pytest.raises(ContractError, match="TRITON_INTERPRET=1"):
        forward_op(x, gamma)


def test_partial_on_the_cpu_without_interpreter_says_how_to_enable_it(monkeypatch, no_allocation):
    monkeypatch.setattr("rmsnorm.contract.interpreter_active", lambda: False)
    with pytest.raises(ContractError, match="partial is on the CPU .*TRITON_INTERPRET=1"):
        reduce_gamma_gradient(torch.ones(4, 8), torch.float32)


def test_partial_on_an_unsupported_device_is_refused(no_allocation):
    with pytest.raises(ContractError, match="partial must be on a CUDA device .*got meta"):
        reduce_gamma_gradient(torch.ones(4, 8, device="meta"), torch.float32)


def _saved(M=4, N=8):
    x, gamma = ok(M, N)
    rstd = rstd_oracle(x).to(x.device, torch.float32)
    return x, gamma, torch.ones_like(x), rstd


BAD_BACKWARD = {
    "dy shape": (lambda x, g, dy, r: (x, g, dy[:2], r), r"dy must have the shape of x \(4, 8\); got \(2, 8\)"),
    "dy dtype": (lambda x, g, dy, r: (x, g, dy.half(), r), r"dy must have the dtype of x .*got torch.float16"),
    "dy device": (lambda x, g, dy, r: (x, g, dy.to("meta"), r), r"dy must be on the same device as x"),
    "dy non-contiguous": (lambda x, g, dy, r: (x, g, torch.ones(8, 4, device=x.device).t(), r),
                          r"dy must be contiguous"),
    "dy not a tensor": (lambda x, g, dy, r: (x, g, 1.0, r), r"dy must be a torch.Tensor"),
    "rstd dtype": (lambda x, g, dy, r: (x, g, dy, r.half()), r"rstd must be float32 .*got torch.float16"),
    "rstd shape": (lambda x, g, dy, r: (x, g, dy, r[:3]), r"rstd must have shape \(M,\) = \(4,\); got \(3,\)"),
    "x transposed": (lambda x, g, dy, r: (torch.ones(8, 4, device=x.device).t(), g, dy, r), r"x must be contiguous"),
}


@pytest.mark.parametrize("name", BAD_BACKWARD)
def test_backward_rows_rejects(name, no_allocation):
    make, pattern = BAD_BACKWARD[name]
    x, gamma, dy, rstd = make(*_saved())
    with pytest.raises(ContractError, match=pattern):
        backward_rows(x, gamma, dy, rstd, 1e-6)


@pytest.mark.parametrize(
    "partial, dtype, pattern",
    [
        (torch.ones(4, 8, dtype=torch.float16), torch.float16, r"partial must be a 2-D float32 tensor"),
        (torch.ones(8), torch.float32, r"partial must be a 2-D float32 tensor .*got 1-D"),
        (torch.ones(4, 8), torch.bfloat16, r"dgamma dtype must be float32 or float16; got torch.bfloat16"),
        (torch.ones(8, 4).t(), torch.float32, r"partial must be contiguous"),
        (torch.ones(2, 4097), torch.float32, r"got N = 4097"),
    ],
)
def test_reduce_gamma_gradient_rejects(partial, dtype, pattern, no_allocation):
    with pytest.raises(ContractError, match=pattern):
        reduce_gamma_gradient(partial.to(rmsnorm.default_device()), dtype)


def test_rmsnorm_rejects_non_contiguous_nd_without_copying():
    x = torch.ones(3, 8, 5, device=rmsnorm.default_device()).transpose(1, 2)  # (3, 5, 8), not contiguous
    with pytest.raises(ContractError, match=r"x must be contiguous .*\(3, 5, 8\)"):
        rmsnorm_fn(x, torch.ones(8, device=x.device))


@pytest.mark.parametrize("x, pattern", [(torch.tensor(1.0), "at least 1 dimension"),
                                        (torch.ones(2, 0), "got shape \\(2, 0\\)")])
def test_rmsnorm_rejects_bad_rank(x, pattern):
    with pytest.raises(ContractError, match=pattern):
        rmsnorm_fn(x, torch.ones(1))


@pytest.mark.parametrize(
    "shape, eps, pattern",
    [((2, 3), 1e-6, r"normalized_shape must be \(N,\)"), (0, 1e-6, r"got \(0,\)"), (4097, 1e-6, r"got \(4097,\)"),
     (8, 0.0, r"eps must be finite and > 0")],
)
def test_module_rejects(shape, eps, pattern):
    with pytest.raises(ContractError, match=pattern):
        RMSNorm(shape, eps=eps)


def test_refused_before_allocating_fails_on_each_way_a_check_can_be_missed():
    from rmsnorm import device
    from rmsnorm.testing import refused_before_allocating

    x, gamma = ok()
    with refused_before_allocating("x must be contiguous"):
        forward_op(x.t(), gamma)
    with pytest.raises(AssertionError, match="no ContractError was raised"), refused_before_allocating():
        pass
    with pytest.raises(AssertionError, match="allocated before the contract"), refused_before_allocating():
        forward_op(x, gamma)  # accepted: it allocates its outputs
    with pytest.raises(AssertionError, match="allocated before the contract"), refused_before_allocating():
        device.new_output((2,), torch.float32, x.device)
        raise ContractError("too late")
    with pytest.raises(AssertionError, match="does not match"), refused_before_allocating("weight"):
        forward_op(x.t(), gamma)
    assert forward_op(x, gamma)[0].shape == x.shape  # the guard is off again


def test_recording_stand_in_records_and_launches():
    from rmsnorm.article import rmsnorm_forward_kernel
    from rmsnorm.testing import recording

    x, gamma = ok(M=3, N=5)
    stand_in, launches = recording(rmsnorm_forward_kernel)
    y, _ = forward_op(x, gamma, kernel=stand_in)
    assert [(launch.grid, launch.kwargs["BLOCK_SIZE"]) for launch in launches] == [((3,), 8)]
    assert torch.equal(y, forward_op(x, gamma)[0])

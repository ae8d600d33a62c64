"""Exercise 15 · LayerNorm: both solutions pass, each wrong variant gets its own message.

Wrong variants: wrong_variants_layernorm.FORWARD and BACKWARD (the checker's reference kernels with one
slip each). The float64 oracles are checked against torch's own LayerNorm (forward, and autograd through it),
each compared on the device the case's tensors are on; the cancelling case is checked to do what it is there for.

Source: solutions/15_layernorm.ipynb.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

import wrong_variants_layernorm as wv
from checker_support import assert_passes, two_checker_tests
from rmsnorm.testing import TOLERANCES
from rmsnorm_course import checkers
from rmsnorm_course.checkers.diagnose import close
from rmsnorm_course.checkers.ex15_layernorm import SHIFT, SHIFTED_TOLERANCE, backward_cases, forward_cases
from rmsnorm_course.checkers.ex15_symptoms import BACKWARD, FORWARD, correct_backward, correct_forward, forward
from rmsnorm_course.teaching.layernorm import layernorm_backward_kernel, layernorm_forward_kernel

#: exercise → (checker, wrong variants).
EXERCISES = {"forward": (checkers.check_layernorm_kernel, wv.FORWARD),
             "backward": (checkers.check_layernorm_backward_kernel, wv.BACKWARD)}

(test_each_wrong_variant_is_named_in_its_own_words, test_every_variant_has_its_own_expected_words,
 test_every_symptom_differs_from_the_oracle_on_some_case) = two_checker_tests(
    EXERCISES, {"forward": (FORWARD, forward_cases, correct_forward),
                "backward": (BACKWARD, backward_cases, correct_backward)})


def test_both_solutions_pass():
    assert_passes(checkers.check_layernorm_kernel(layernorm_forward_kernel))
    assert_passes(checkers.check_layernorm_backward_kernel(layernorm_backward_kernel))


def test_the_four_slips_of_the_issue_are_among_the_variants():
    assert {"naive variance", "unbiased variance"} <= set(wv.FORWARD)
    assert {"dx without the mean term", "dbias summed over the wrong axis"} <= set(wv.BACKWARD)


def test_the_forward_oracle_is_torchs_layer_norm():
    for case in forward_cases():
        x, weight, bias = (case.inputs[k] for k in ("x", "weight", "bias"))
        want = {k: v.to(x.device) for k, v in correct_forward(case).items()}  # compared where torch ran
        y = F.layer_norm(x.double(), (case.N,), weight.double(), bias.double(), case.eps)
        torch.testing.assert_close(y, want["y"], rtol=1e-10, atol=1e-10, msg=case.label)
        mean, var = x.double().mean(-1), x.double().var(-1, unbiased=False)
        torch.testing.assert_close(want["mean"], mean, rtol=1e-12, atol=1e-12, msg=case.label)
        torch.testing.assert_close(want["rstd"], torch.rsqrt(var + case.eps), rtol=1e-10, atol=0, msg=case.label)


def test_the_backward_oracle_is_autograd_through_torchs_layer_norm():
    for case in backward_cases():
        if case.dtype != torch.float32:
            continue
        x, weight, dy = (case.inputs[k].double() for k in ("x", "weight", "dy"))
        x, weight, bias = x.requires_grad_(), weight.requires_grad_(), torch.zeros_like(weight, requires_grad=True)
        y = F.layer_norm(x, (case.N,), weight, bias, 1e-6)
        dx, dweight, dbias = torch.autograd.grad((y * dy).sum(), (x, weight, bias))
        want = {k: v.to(x.device) for k, v in correct_backward(case).items()}  # compared where autograd ran
        # the oracle starts from the float32 mean and rstd the kernel is given; autograd from exact ones
        torch.testing.assert_close(want["dx"], dx, rtol=1e-5, atol=1e-6, msg=case.label)
        torch.testing.assert_close(want["dweight_partial"].sum(0), dweight, rtol=1e-5, atol=1e-5, msg=case.label)
        torch.testing.assert_close(want["dbias_partial"].sum(0), dbias, rtol=1e-12, atol=1e-12, msg=case.label)


def test_the_cases_expose_the_slips_they_are_there_for():
    cases = forward_cases()
    assert 1 in {c.M for c in cases} and any(c.stride > c.N for c in cases) and torch.float16 in {c.dtype
                                                                                                   for c in cases}
    constant = [c for c in cases if (c.f64("x") == c.f64("x")[:, :1]).all(-1).any()]
    assert constant and all(c.eps == 0.5 for c in constant)  # variance 0: eps alone keeps rstd finite
    grids = backward_cases()
    assert {1, 3, 4} <= {c.programs for c in grids} and any(c.programs > c.M for c in grids)
    for case in grids:  # mean(u) far from 0: dx without its mean term is off in every case
        u = case.f64("dy") * case.f64("weight")
        assert (u.mean(-1).abs() > 0.1).all(), case.label


def test_the_cancelling_case_separates_the_two_pass_from_the_naive_variance_in_float32():
    shifted = [c for c in forward_cases() if c.tolerance is not None]
    assert len(shifted) == 1 and shifted[0].tolerance == SHIFTED_TOLERANCE
    case = shifted[0]
    x = case.inputs["x"].float()
    assert (x.double().mean(-1) - SHIFT).abs().max() < 1
    right = correct_forward(case)["rstd"]
    mean = x.mean(-1, keepdim=True)
    two_pass = torch.rsqrt((x - mean).square().mean(-1) + case.eps)
    naive = torch.rsqrt(x.square().mean(-1) - mean.squeeze(-1).square() + case.eps)  # NaN where it came out < 0
    assert close(two_pass, right, SHIFTED_TOLERANCE)
    assert not close(naive, right, SHIFTED_TOLERANCE)
    others = [c for c in forward_cases() if c.tolerance is None and c.dtype == torch.float32]
    for other in others:  # where the rows' mean is near 0 the naive variance passes: only this case shows it
        x = other.inputs["x"].float()
        naive = torch.rsqrt(x.square().mean(-1) - x.mean(-1).square() + other.eps)
        assert close(naive, correct_forward(other)["rstd"], TOLERANCES[torch.float32]), other.label


def test_the_unbiased_variance_is_beyond_float32s_tolerance_at_every_n():
    for case in forward_cases():
        if case.dtype == torch.float32:
            unbiased = forward(case, var_divisor=case.N - 1)["rstd"]
            assert not close(unbiased, correct_forward(case)["rstd"], TOLERANCES[torch.float32]), case.label

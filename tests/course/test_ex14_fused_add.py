"""Exercise 14 · the fused residual add: both solutions pass, each wrong variant gets its own message.

Wrong variants: wrong_variants_fused_add.FORWARD and BACKWARD (the checker's reference kernels with
one slip each). The symptoms' float64 models are checked against the library's own fused add, so that
the oracle is the op a model calls.

Source: solutions/14_fusing_the_residual.ipynb.
"""

from __future__ import annotations

import torch

import wrong_variants_fused_add as wv
from checker_support import assert_passes, two_checker_tests
from rmsnorm import rmsnorm_add
from rmsnorm.testing import TOLERANCES
from rmsnorm_course import checkers
from rmsnorm_course.checkers.ex14_fused_add import RSTD_OF_16_BIT_H, backward_cases, forward_cases
from rmsnorm_course.checkers.ex14_symptoms import BACKWARD, FORWARD, correct_backward, correct_forward, forward, stream
from rmsnorm_course.teaching.fused_add import fused_add_backward_kernel, fused_add_forward_kernel

#: exercise → (checker, wrong variants).
EXERCISES = {"forward": (checkers.check_fused_add_kernel, wv.FORWARD),
             "backward": (checkers.check_fused_add_backward_kernel, wv.BACKWARD)}

(test_each_wrong_variant_is_named_in_its_own_words, test_every_variant_has_its_own_expected_words,
 test_every_symptom_differs_from_the_oracle_on_some_case) = two_checker_tests(
    EXERCISES, {"forward": (FORWARD, forward_cases, correct_forward),
                "backward": (BACKWARD, backward_cases, correct_backward)})


def test_both_solutions_pass():
    assert_passes(checkers.check_fused_add_kernel(fused_add_forward_kernel))
    assert_passes(checkers.check_fused_add_backward_kernel(fused_add_backward_kernel))


def test_the_forward_oracle_is_the_librarys_fused_add():
    for case in forward_cases():
        x, residual, weight = (case.inputs[k] for k in ("x", "residual", "weight"))
        y, residual_out = rmsnorm_add(x, residual, weight, case.eps, offset=case.offset)
        want = correct_forward(case)  # float64 on the CPU; the library's outputs are where the inputs are
        residual_out, y = residual_out.to(want["y"].device), y.to(want["y"].device)
        assert torch.equal(residual_out.double(), want["residual_out"])  # the add is eager's, bit for bit
        torch.testing.assert_close(y.double(), want["y"], **TOLERANCES[y.dtype], msg=case.label)


def test_the_backward_oracle_is_autograd_through_the_librarys_fused_add():
    for case in backward_cases():
        if case.dtype != torch.float32:
            continue
        h, weight, dy, dres = (case.inputs[k].double() for k in ("h", "weight", "dy", "dres"))
        h = h.requires_grad_()
        h_hat = h * torch.rsqrt(h.square().mean(-1, keepdim=True) + case.eps)  # the eps rstd was saved with
        y = h_hat * (weight + case.offset)
        (dh,) = torch.autograd.grad((y * dy).sum() + (h * dres).sum(), h)  # h is also residual_out
        want = correct_backward(case)["dh"]  # float64 on the CPU; autograd ran where the case's tensors are
        torch.testing.assert_close(want, dh.to(want.device), rtol=1e-5, atol=1e-6, msg=case.label)


def test_the_cases_expose_the_slips_they_are_there_for():
    forward, backward = forward_cases(), backward_cases()
    for cases in (forward, backward):
        assert {0.0, 1.0} == {c.offset for c in cases}  # OFFSET ignored shows
        assert 1 in {c.M for c in cases} and any(c.row_stride for c in cases) and torch.float16 in {c.dtype
                                                                                                   for c in cases}
    assert any(c.inputs["residual"].dtype == torch.float32 != c.dtype for c in forward)  # a float32 stream
    zero = [c for c in forward if (c.f64("x") + c.f64("residual") == 0).all(-1).any()]
    assert zero and all(c.eps == 0.5 for c in zero)  # a row of h = 0: eps alone keeps rstd finite


def test_the_16_bit_rstd_tolerance_separates_the_stored_h_from_the_unrounded_sum():
    rounded = [c for c in forward_cases() if c.inputs["residual"].dtype == torch.float16]
    assert rounded
    rtol = RSTD_OF_16_BIT_H["rtol"]
    for case in rounded:
        right = correct_forward(case)["rstd"]
        h = stream(case).float()  # the stored h, in float32 as the kernel reads it
        in_float32 = torch.rsqrt(h.square().sum(-1) / case.N + case.eps).double()
        assert (in_float32 / right - 1).abs().max() < rtol / 10  # float32 arithmetic on the stored h
        unrounded = forward(case, h=stream(case, torch.float32))["rstd"]
        assert (unrounded / right - 1).abs().max() > 4 * rtol  # the norm of the unrounded sum

"""The three campaigns (forward y, dx, dgamma), 72 cases each, against the float64 oracle.

Oracle: rmsnorm.testing.oracle (the reference formulas in float64 on the
kernel's own inputs). Tolerances: rmsnorm.testing.TOLERANCES, the article's.
"""

import functools

import pytest
import torch

from rmsnorm.article import backward_rows, forward_op, reduce_gamma_gradient
from rmsnorm.testing import CAMPAIGN, assert_close, make_inputs, oracle, rstd_oracle


def test_campaign_has_72_cases_with_the_required_shapes():
    assert len(CAMPAIGN) == 72
    shapes = {(c.M, c.N) for c in CAMPAIGN}
    Ms = {M for M, _ in shapes}
    Ns = {N for _, N in shapes}
    assert {1, 17} <= Ms and {256, 257, 4096} <= Ns
    assert any(N & (N - 1) for N in Ns)  # N not a power of two
    assert {c.dtype for c in CAMPAIGN} == {torch.float32, torch.float16}


# Each case runs its three kernels once; the three campaigns read the results.
# Under the CPU interpreter this halves the run time. The xdist_group mark keeps
# a case's three tests on one worker (pytest -n 2 --dist loadgroup).
PARAMS = [pytest.param(c, id=str(c), marks=pytest.mark.xdist_group(str(c))) for c in CAMPAIGN]


@functools.cache
def _run(case):
    x, gamma, dy = make_inputs(case.M, case.N, case.dtype, seed=case.M * 7919 + case.N)
    y, rstd = forward_op(x, gamma)
    dx, partial = backward_rows(x, gamma, dy, rstd, 1e-6)
    dgamma = reduce_gamma_gradient(partial, gamma.dtype)
    return (x, gamma, dy), (y, rstd, dx, dgamma), oracle(x, gamma, dy)


@pytest.mark.parametrize("case", PARAMS)
def test_forward(case):
    (x, _, _), (y, rstd, _, _), (y64, _, _) = _run(case)
    assert y.dtype == case.dtype and rstd.dtype == torch.float32
    assert_close(y, y64)
    assert_close(rstd, rstd_oracle(x), dtype=torch.float32)


@pytest.mark.parametrize("case", PARAMS)
def test_dx(case):
    _, (_, _, dx, _), (_, dx64, _) = _run(case)
    assert dx.dtype == case.dtype
    assert_close(dx, dx64)


@pytest.mark.parametrize("case", PARAMS)
def test_dgamma(case):
    _, (_, _, _, dgamma), (_, _, dgamma64) = _run(case)
    assert dgamma.dtype == case.dtype and dgamma.shape == (case.N,)
    assert_close(dgamma, dgamma64)

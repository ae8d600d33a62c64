"""scripts/probe_row_pieces.py on any machine: the pieces a row is held in, and both kernels against the oracle.

On a CPU the kernels run under Triton's interpreter (tests/conftest.py), at widths whose pieces take each branch:
one piece, two, three, and three with the last one masked; with the last row block masked too.
"""

import pytest
import torch

import checkout_scripts
from rmsnorm.testing import assert_close, dgamma_tolerance, make_inputs, oracle


@pytest.fixture(scope="module")
def probe():
    return checkout_scripts.load("scripts/probe_row_pieces.py")


@pytest.mark.parametrize("N, expected", [(4096, (4096,)), (5120, (4096, 1024)), (4097, (4096, 1)),
                                         (7168, (4096, 2048, 1024)), (12289, (8192, 4096, 1)),
                                         (1000, (512, 256, 256)), (1, (1,)), (3, (2, 1))])
def test_a_row_is_its_largest_powers_of_two_and_a_covering_last_piece(probe, N, expected):
    assert probe.pieces(N) == expected
    assert N <= sum(expected) <= 1 << (N - 1).bit_length()


def test_bad_widths_are_refused(probe):
    with pytest.raises(ValueError, match="N=0"):
        probe.pieces(0)


@pytest.mark.parametrize("N", [32, 40, 37, 5, 23])  # one piece; 32 + 8; 32 + 4 + 1; 4 + 1; 16 + 4 + 4 (3 masked)
def test_both_layouts_give_the_oracles_numbers(probe, N, device):
    M = 5
    x, w, dy = make_inputs(M, N, torch.float32, device, seed=N)
    y64, dx64, dg64 = oracle(x, w, dy)
    rstd64 = torch.rsqrt(x.double().square().mean(1) + 1e-6)
    for name, layout in probe.layouts(N):
        for block_m in (1, 4):  # 5 rows: the second block of 4 has one
            y, rstd = probe.run_forward(x, w, 1e-6, layout, block_m, 4)
            assert_close(y, y64.to(device), dtype=torch.float32)
            assert_close(rstd.double(), rstd64, dtype=torch.float32)
            dx, dg = probe.run_backward(x, w, rstd, dy, layout, block_m, 4, programs=4)
            assert_close(dx, dx64.to(device), dtype=torch.float32)
            assert_close(dg, dg64.to(device), tol=dgamma_tolerance(M, torch.float32, w.dtype))
    assert [name for name, _ in probe.layouts(N)] == (["padded"] if N == 32 else ["padded", "pieces"])

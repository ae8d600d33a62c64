"""Known-answer canary, run first: if this fails, nothing else is worth reading.

(tests/conftest.py also runs it before any test, on every xdist worker.)"""

import pytest

from rmsnorm.article import forward_op
from rmsnorm.testing import check_canary
from rmsnorm_course.teaching import buggy


def test_row_of_257_ones_gives_0_9999995(device):
    check_canary(device)


def test_the_canary_catches_the_block_denominator(device, monkeypatch):
    def wrong_forward(x, gamma, eps=1e-6):
        return forward_op(x, gamma, eps, kernel=buggy.rmsnorm_forward_kernel_block_mean)

    monkeypatch.setattr("rmsnorm.article.forward.forward_op", wrong_forward)
    with pytest.raises(AssertionError, match="257 ones must give 0.9999995"):
        check_canary(device)

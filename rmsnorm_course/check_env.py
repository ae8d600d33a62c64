"""``python -m rmsnorm_course.check_env``: prove the kernels can run here, then say where.

On a GPU: CUDA is initialised and one forward is computed and compared with
the reference. Without a GPU: the interpreter canary (a row of 257 ones must
give 0.9999995 everywhere). Exit status 0 only when the check passed.

Source: the original article's ``check_environment.py`` step ("seeing a card
is not proof that it can be used"); notebooks/TROUBLESHOOTING.md.
"""

from __future__ import annotations

import sys

import torch
import triton

from rmsnorm.article import forward_op
from rmsnorm.device import default_device, describe_backend
from rmsnorm.testing import assert_close, check_canary, make_inputs, oracle


def main() -> int:
    """Run the check; print one line per step; return the exit status."""
    device = default_device()
    print(f"python {sys.version.split()[0]} | torch {torch.__version__} | triton {triton.__version__}")
    print(f"kernels run on: {describe_backend()}")
    x, gamma, _ = make_inputs(17, 257, device=device)
    try:
        check_canary(device)
        assert_close(forward_op(x, gamma)[0], oracle(x, gamma))
    except AssertionError as err:
        print(f"FAILED: {err}")
        return 1
    print("OK: canary (257 ones -> 0.9999995) and a 17x257 forward match the reference")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""The article's kernels: RMSNorm as the Italian article writes it, which lessons 03–08 teach.

One program per row, the whole row in one block (1 ≤ N ≤ 4096), contiguous float32/float16, the
dgamma partials in an (M, N) float32 buffer summed by a second kernel. The lab times them as the
``article`` provider. A model imports the fast path instead (:func:`rmsnorm.rmsnorm`).

Public API:

- :func:`check_contract`, :data:`MAX_N`, :data:`MAX_SCRATCH_BYTES`, :func:`scratch_bytes` — the input contract.
- :func:`forward_op` → (y, rstd); :func:`backward_rows` → (dx, partial);
  :func:`reduce_gamma_gradient` → dgamma — the kernels' launchers.
- :class:`RMSNormFunction`, :func:`rmsnorm`, :data:`CALLS` — autograd.
- :class:`RMSNorm` — the module (``weight``; state_dict-compatible with ``torch.nn.RMSNorm``).

Source: notebooks/03_forward_kernel.ipynb … 08_n_vs_block_exercise.ipynb.
"""

from . import reduction
from .autograd import CALLS, CallCounter, RMSNormFunction, rmsnorm
from .backward import backward_rows, rmsnorm_dx_kernel
from .contract import KERNEL_DTYPES, MAX_N, MAX_SCRATCH_BYTES, check_contract, scratch_bytes
from .forward import forward_op, rmsnorm_forward_kernel
from .module import RMSNorm
from .reduction import reduce_gamma_gradient, rmsnorm_dgamma_kernel

__all__ = [
    "CALLS",
    "CallCounter",
    "KERNEL_DTYPES",
    "MAX_N",
    "MAX_SCRATCH_BYTES",
    "RMSNorm",
    "RMSNormFunction",
    "backward_rows",
    "check_contract",
    "forward_op",
    "reduce_gamma_gradient",
    "reduction",
    "rmsnorm",
    "rmsnorm_dgamma_kernel",
    "rmsnorm_dx_kernel",
    "rmsnorm_forward_kernel",
    "scratch_bytes",
]

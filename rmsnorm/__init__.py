"""rmsnorm: RMSNorm in Triton, verified before it is accelerated.

The package every lesson imports. Importing it first chooses where kernels
run (a CUDA GPU, or Triton's interpreter on the CPU), then defines them.

Public API (the original article's names):

- :func:`rmsnorm_reference`, :func:`manual_backward` — the PyTorch oracle.
- :func:`check_contract`, :class:`ContractError` — the input contract.
- :func:`forward_op` → (y, rstd); :func:`backward_rows` → (dx, partial);
  :func:`reduce_gamma_gradient` → dgamma — the kernels' launchers.
- :class:`RMSNormFunction`, :func:`rmsnorm`, :data:`CALLS` — autograd.
- :class:`RMSNorm` — the module (``weight``; state_dict-compatible with
  ``torch.nn.RMSNorm``).

The fast path (lessons 09–12), beside the article's, in :mod:`rmsnorm.fast`:

- :func:`rmsnorm_fast`, :class:`FastRMSNorm` — one-pass fused backward, bf16,
  rows up to 262144, row strides, a custom op that ``torch.compile`` traces.
- :func:`rmsnorm_fast_forward`, :func:`rmsnorm_fast_backward` — its launchers.

Teaching kernels, which a lesson or an exercise launches and a model never does, are in
:mod:`rmsnorm.teaching` (the primer, the deliberately buggy kernels, exercises 09 and 10's
kernels); none of them is imported here.

The course's machinery (the checkers, the training run of lesson 06) is a package of its own,
:mod:`rmsnorm_course`, which imports this one; this one imports it only where an old path is
asked for: ``rmsnorm.checkers``, ``rmsnorm.training``, ``rmsnorm.primer`` and ``rmsnorm.buggy``
still import the modules that moved, as the very same module objects (:mod:`rmsnorm._aliases`).

One convention per fact:

- **eps.** New code says ``eps``, as torch, Liger and quack do (the fast path, the teaching
  kernels of 09 and 10). The article's path keeps the article's ``epsilon``
  (:func:`rmsnorm_reference`, :func:`forward_op`, :func:`backward_rows`, :class:`RMSNormFunction`),
  since lessons 03–08 print those signatures and exercises 03–08 require them.
- **Kernel arguments.** In the fast kernels each row stride comes right after its pointer
  (``x_ptr, x_row_stride, gamma_ptr, …``). The article's kernels keep the article's order,
  pointers first, then strides, and an exercise's kernel keeps the signature its checker launches.
- **Interpreted?** :func:`device.interpreter_active` (re-exported as :func:`interpreter_active`)
  is the one way to ask whether kernels run in Triton's interpreter: it is recorded once, at
  import, and truthful also under ``TRITON_INTERPRET=1`` on a GPU machine (whether there is a
  GPU to time on is another question, ``torch.cuda.is_available()``, which the benchmarks ask).

Source: notebooks/01_formula.ipynb … 13_into_a_model.ipynb.
"""

from . import device as _device  # first: decides where kernels run, before any @triton.jit below

# isort: split

from . import _aliases  # noqa: E402
from .autograd import CALLS, CallCounter, RMSNormFunction, rmsnorm  # noqa: E402
from .backward import backward_rows, rmsnorm_dx_kernel  # noqa: E402
from .contract import (  # noqa: E402
    MAX_N,
    MAX_SCRATCH_BYTES,
    ContractError,
    check_contract,
    scratch_bytes,
)
from .device import InterpreterUnavailableError, default_device, interpreter_active  # noqa: E402
from .fast import FastRMSNorm, rmsnorm_fast, rmsnorm_fast_backward, rmsnorm_fast_forward  # noqa: E402
from .forward import forward_op, rmsnorm_forward_kernel  # noqa: E402
from .module import RMSNorm  # noqa: E402
from .reduction import reduce_gamma_gradient, rmsnorm_dgamma_kernel  # noqa: E402
from .reference import manual_backward, rmsnorm_reference  # noqa: E402

_device.check_backend(rmsnorm_forward_kernel)
_aliases.install()  # the old paths of what moved (rmsnorm.checkers, rmsnorm.training, rmsnorm.primer, rmsnorm.buggy)


def describe_backend() -> str:
    """One line saying where the kernels run: ``'GPU: NVIDIA H200'`` or the interpreter."""
    return _device.describe(rmsnorm_forward_kernel)


__all__ = [
    "CALLS",
    "CallCounter",
    "ContractError",
    "FastRMSNorm",
    "InterpreterUnavailableError",
    "MAX_N",
    "MAX_SCRATCH_BYTES",
    "RMSNorm",
    "RMSNormFunction",
    "backward_rows",
    "check_contract",
    "default_device",
    "describe_backend",
    "forward_op",
    "interpreter_active",
    "manual_backward",
    "reduce_gamma_gradient",
    "rmsnorm",
    "rmsnorm_dgamma_kernel",
    "rmsnorm_dx_kernel",
    "rmsnorm_fast",
    "rmsnorm_fast_backward",
    "rmsnorm_fast_forward",
    "rmsnorm_forward_kernel",
    "rmsnorm_reference",
    "scratch_bytes",
]

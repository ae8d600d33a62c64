"""Where the kernels run: a CUDA GPU, or Triton's interpreter on the CPU.

Importing this module (the first thing :mod:`rmsnorm` does) decides, once,
before any kernel is defined. On a machine without CUDA it switches Triton to
its interpreter (``TRITON_INTERPRET=1``), so that the very same ``@triton.jit``
kernels run on CPU tensors, one program after another, in NumPy. Nothing is
copied or re-typed for the CPU: the interpreter executes the kernel source
itself. It then records what Triton really decided, in :data:`INTERPRETED`:
every other module asks :func:`interpreter_active`, never a kernel.

Source: notebooks/03_forward_kernel.ipynb; Triton's interpreter is documented
in the Triton FAQ/debugging guide (``TRITON_INTERPRET=1``).
"""

from __future__ import annotations

import os
import sys

import torch

INTERPRET_ENV = "TRITON_INTERPRET"


class InterpreterUnavailableError(RuntimeError):
    """No CUDA device, and Triton's interpreter could not be switched on."""


def select_backend() -> None:
    """Without CUDA, switch on the interpreter, unless it is too late or refused.

    Must run before any ``@triton.jit`` kernel is defined (Triton decides at
    decoration time whether a kernel is compiled or interpreted). An explicit
    ``TRITON_INTERPRET=0`` in the environment is respected and never
    overridden; :func:`check_backend` then reports the problem.
    """
    if torch.cuda.is_available():
        return
    if INTERPRET_ENV not in os.environ and "triton" not in sys.modules:
        os.environ[INTERPRET_ENV] = "1"
    # Triton imported earlier without the variable: its own @jit helpers
    # (tl.sum, ...) were compiled-mode objects, so switching on now would give
    # kernels that fail inside the interpreter. Leave it off: check_backend
    # then stops the import with the fix.


def _kernels_will_be_interpreted() -> bool:
    """What Triton decides for a kernel defined now: a probe, defined and never launched."""
    import triton

    @triton.jit
    def _probe():  # pragma: no cover - never launched
        pass

    return is_interpreted(_probe)


def is_interpreted(kernel) -> bool:
    """True when ``kernel`` (a ``@triton.jit`` object) runs in the interpreter."""
    from triton.runtime.interpreter import InterpretedFunction

    return isinstance(kernel, InterpretedFunction)


def check_backend(kernel) -> None:
    """Fail early, with the fix, when kernels can run nowhere.

    Args:
        kernel: any kernel of the package, already defined.

    Raises:
        InterpreterUnavailableError: no CUDA device and ``kernel`` is compiled,
            not interpreted (``TRITON_INTERPRET=0`` was set, or Triton was
            imported before :mod:`rmsnorm` without the variable: the
            interpreter must be on before ``triton`` is first imported).
    """
    if torch.cuda.is_available() or is_interpreted(kernel):
        return
    seen = os.environ.get(INTERPRET_ENV, "<unset>")
    raise InterpreterUnavailableError(
        "rmsnorm: no CUDA device, and Triton's interpreter is off "
        f"({INTERPRET_ENV}={seen}). It can only be switched on before triton is imported, "
        "and triton was imported first (or the variable was set to 0). The kernels cannot run. "
        "Restart Python (in Jupyter: restart the kernel), then import rmsnorm before triton, "
        f"or set {INTERPRET_ENV}=1 in the environment before starting Python."
    )


def interpreter_active() -> bool:
    """True when the package's kernels run in Triton's interpreter (recorded once, at import).

    Truthful on every machine: also True on a GPU machine started with
    ``TRITON_INTERPRET=1``, where the kernels are interpreted although CUDA is there.
    """
    return INTERPRETED


def describe(kernel) -> str:
    """One line saying where the kernels run, e.g. ``'GPU: NVIDIA H200'``.

    Args:
        kernel: any kernel of the package.

    Returns:
        ``"CPU, Triton interpreter"`` when interpreted, else ``"GPU: <name>"``.
    """
    if is_interpreted(kernel):
        return "CPU, Triton interpreter (TRITON_INTERPRET=1)"
    return f"GPU: {torch.cuda.get_device_name(0)}"


#: When True, :func:`new_output` fills every new output with NaN (tests turn it on).
POISON_OUTPUTS = False
#: When True, :func:`new_output` raises AssertionError: nothing may be allocated (see
#: :func:`rmsnorm.testing.refused_before_allocating`).
FORBID_OUTPUTS = False


def new_output(shape, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """Allocate a kernel output: the single place the launchers allocate.

    Normally ``torch.empty`` (the kernel must write every element). While
    :data:`POISON_OUTPUTS` is set (see :func:`rmsnorm.testing.poisoned_outputs`)
    the tensor is filled with NaN, so an element the kernel forgets to write
    cannot pass a comparison. While :data:`FORBID_OUTPUTS` is set it raises
    AssertionError instead: a launcher allocated before its contract refused.
    """
    if FORBID_OUTPUTS:
        raise AssertionError("an output was allocated before the contract was checked")
    out = torch.empty(shape, dtype=dtype, device=device)
    if POISON_OUTPUTS:
        out.fill_(float("nan"))
    return out


def default_device() -> torch.device:
    """``cuda`` when a GPU is usable, else ``cpu`` (interpreter)."""
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def mend_interpreter_index() -> bool:
    """Let Triton 3.6's interpreter turn a scalar into an ``int`` under NumPy >= 2.4; True when it mended.

    The interpreter holds every scalar (``M``, a loop bound) as a NumPy array of
    shape ``(1,)`` and gives ``tl.tensor`` an ``__index__`` of
    ``int(self.handle.data)``, which NumPy 2.4 and later refuse ("only 0-dimensional
    arrays can be converted to Python scalars"; the H200 has NumPy 2.5.2), so
    ``range(0, M, BLOCK_M)`` fails in every kernel that loops over a scalar. Triton 3.7 squeezes the
    array first (``int(self.handle.data.squeeze())``); this does the same, only
    where the installed interpreter still has the old line and the installed
    NumPy refuses it. Nothing else of the interpreter changes.

    Source: triton/runtime/interpreter.py, ``_patch_lang_tensor`` (3.6 vs 3.7).
    """
    import inspect

    import numpy as np
    from triton.runtime import interpreter

    original = getattr(interpreter, "_patch_lang_tensor", None)
    if original is None or getattr(original, "mended_by_rmsnorm", False):
        return False
    try:
        int(np.zeros(1, dtype=np.int32))
        return False  # this NumPy still converts a one-element array
    except TypeError:
        pass
    try:
        old_line = "int(self.handle.data))" in inspect.getsource(original)
    except (OSError, TypeError):  # pragma: no cover - source not shipped
        old_line = False
    if not old_line:
        return False

    def _patch_lang_tensor(tensor, scope):
        original(tensor, scope)
        scope.set_attr(tensor, "__index__", lambda self: int(self.handle.data.squeeze()))

    _patch_lang_tensor.mended_by_rmsnorm = True
    interpreter._patch_lang_tensor = _patch_lang_tensor
    return True


select_backend()
#: Whether the kernels defined after this import run in Triton's interpreter (decided once, here).
INTERPRETED: bool = _kernels_will_be_interpreted()
#: Whether :func:`mend_interpreter_index` had to mend this Triton + NumPy (Triton 3.6 with NumPy >= 2.4).
INTERPRETER_MENDED: bool = INTERPRETED and mend_interpreter_index()

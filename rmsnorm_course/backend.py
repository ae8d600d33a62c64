"""Where the course's kernels run: the GPU, or Triton's interpreter on a machine without one.

The library (:mod:`rmsnorm`) changes nothing in its caller's process; the course does, on
purpose, in its first import: on a machine without CUDA it sets ``TRITON_INTERPRET=1`` before
triton is imported (Triton decides at ``@triton.jit`` time whether a kernel is compiled or
interpreted), so that the very same kernels run on CPU tensors, one program after another, in
NumPy. Nothing is copied or re-typed for the CPU: the interpreter executes the kernel source
itself. It then mends the interpreter where Triton 3.6 meets NumPy ≥ 2.4
(:func:`mend_interpreter_index`). ``tests/conftest.py`` and the checkers' child processes get
the same by importing :mod:`rmsnorm_course` first.

An explicit ``TRITON_INTERPRET=0`` is respected. Where triton was imported before the course
without the variable, the interpreter cannot be switched on any more: the first launch on a CPU
tensor then raises :class:`rmsnorm.InterpreterUnavailableError`, which names the fix.

Source: notebooks/03_forward_kernel.ipynb; Triton's FAQ (``TRITON_INTERPRET=1``).
"""

from __future__ import annotations

import os
import sys

import torch

#: The variable Triton reads (rmsnorm.device names it too; importing that module would import triton first).
INTERPRET_ENV = "TRITON_INTERPRET"


def choose_backend() -> bool:
    """Without CUDA, switch Triton's interpreter on (unless too late or refused) and mend it.

    Returns:
        True when the interpreter is on after the call (kernels defined from now on are interpreted).
    """
    if not torch.cuda.is_available() and INTERPRET_ENV not in os.environ and "triton" not in sys.modules:
        os.environ[INTERPRET_ENV] = "1"
    from rmsnorm.device import interpreter_active

    interpreted = interpreter_active()
    if interpreted:
        mend_interpreter_index()
    return interpreted


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

"""Where the kernels run: a CUDA GPU, or Triton's interpreter on the CPU.

Triton decides when ``@triton.jit`` runs (when :mod:`rmsnorm` is imported)
whether a kernel is compiled or interpreted, from ``TRITON_INTERPRET`` as it
was when triton was first imported. The library reads that decision and
changes nothing: it sets no environment variable and no Triton setting.
Whoever wants the interpreter on a machine without CUDA sets
``TRITON_INTERPRET=1`` before anything imports triton (the course does it in
its first import, :mod:`rmsnorm_course.backend`; the tests in ``conftest.py``).
Without a GPU and without the interpreter, the first launch is refused with
:class:`~rmsnorm.contract.InterpreterUnavailableError`, which names the fix.

Source: notebooks/03_forward_kernel.ipynb; Triton's interpreter is documented
in the Triton FAQ/debugging guide (``TRITON_INTERPRET=1``).
"""

from __future__ import annotations

import functools

import torch

#: The variable that switches Triton's interpreter on, read once when triton is imported.
INTERPRET_ENV = "TRITON_INTERPRET"


def is_interpreted(kernel) -> bool:
    """True when ``kernel`` (a ``@triton.jit`` object) runs in the interpreter."""
    from triton.runtime.interpreter import InterpretedFunction

    return isinstance(kernel, InterpretedFunction)


@functools.cache
def interpreter_active() -> bool:
    """True when the library's kernels run in Triton's interpreter.

    A probe kernel, defined at the first call (when :mod:`rmsnorm` is imported) and never launched,
    is asked: ``@triton.jit`` reads ``TRITON_INTERPRET`` when it decorates, so the probe gets the same
    answer as the package's kernels. Also True on a GPU machine started with ``TRITON_INTERPRET=1``.
    """
    import triton

    @triton.jit
    def _probe():  # pragma: no cover - never launched
        pass

    return is_interpreted(_probe)


@functools.cache
def interpreter_split() -> bool:
    """True when the package's kernels and Triton's own library (``tl.sum``…) disagree on the interpreter.

    Triton's library is decorated when triton is imported, the package's kernels when :mod:`rmsnorm`
    is: ``TRITON_INTERPRET`` set between the two (after building a Hugging Face model or a
    ``torch.compile``, which import triton) gives interpreted kernels that call compiled library
    functions, which Triton refuses with "Cannot call @triton.jit'd outside of the scope of a kernel".
    """
    import triton.language as tl

    return is_interpreted(tl.standard.sum) != interpreter_active()


def describe_backend() -> str:
    """One line saying where the kernels run: ``'GPU: NVIDIA H200'`` or the interpreter."""
    if interpreter_split():
        return f"nowhere: {INTERPRET_ENV} changed between importing triton and importing rmsnorm"
    if interpreter_active():
        return "CPU, Triton interpreter (TRITON_INTERPRET=1)"
    if not torch.cuda.is_available():
        return f"nowhere: no CUDA device, and Triton's interpreter is off ({INTERPRET_ENV} unset before triton)"
    return f"GPU: {torch.cuda.get_device_name(0)}"


def new_output(shape, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """Allocate a kernel output: the single place the launchers allocate (``torch.empty``).

    The kernel must write every element. Tests replace this function for a block
    (:func:`rmsnorm.testing.poisoned_outputs` fills outputs with NaN, so an element a
    kernel forgets to write cannot pass; :func:`rmsnorm.testing.outputs_forbidden` raises),
    which is why launchers call it as ``device.new_output``.
    """
    return torch.empty(shape, dtype=dtype, device=device)


#: :func:`new_output` as defined here: tests replace the name, and the native launch's C path (csrc/fast_path.cpp)
#: allocates as it does only while the name holds this function or :func:`nan_output`.
EMPTY_OUTPUT = new_output


def nan_output(shape, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """An output filled with NaN: what :func:`rmsnorm.testing.poisoned_outputs` puts in :func:`new_output`'s place,
    so that an element a kernel forgets to write stays NaN (the native launch's C paths fill their own alike)."""
    return torch.full(shape, float("nan"), dtype=dtype, device=device)


def default_device() -> torch.device:
    """``cuda`` when a GPU is usable, else ``cpu`` (interpreter)."""
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")

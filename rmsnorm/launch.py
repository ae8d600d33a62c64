"""Launching the fast kernels with less host time than ``kernel[grid](...)``.

``kernel[grid](*args)`` runs Triton's binder on every call: it specialises
each argument (dtype, 16-byte alignment, integer classes), builds a cache
key, looks the compiled kernel up and asks the driver for the current stream.
On the H200's host that is about 27 µs a launch, against about 10 µs for the
compiled kernel's own launcher (``CompiledKernel.run``) called with the raw
stream handle (measured side by side in one process, torch 2.11, triton 3.6).
A forward + backward launches three kernels, so this is most of the gap to
``torch.nn.functional.rms_norm`` at the sizes real batches have.

:class:`DirectLauncher` keeps its own cache of compiled kernels, under a
key the launcher builds from what it knows of its own arguments (classifying
every argument generically cost about 7 µs a launch on that host, a third of
what there was to save). The key must be at least as fine as Triton's
specialisation, so that a kernel compiled for one class of arguments is
never reused for another; each launcher's key holds

- the device index and the launch options (``num_warps``, ``num_stages``);
- every constexpr's value (through the :class:`~rmsnorm.config.FastConfig`);
- for every tensor: its dtype and whether its address is a multiple of 16
  bytes (the key holds ``data_ptr() & 15``; Triton specialises pointers on that);
- for every run-time integer: whether it is 1, whether it is a multiple of 16
  and whether it fits 32 bits (the key holds ``(v == 1, not v & 15, v >> 31)``;
  Triton specialises on all three: a kernel compiled at M = 1 treats M as
  the constant 1), or the value itself.

A miss launches through ``kernel[grid]`` (which compiles) and keeps the
compiled kernel it returns; a hit calls that kernel's launcher directly, on
``torch.cuda.current_stream()``. ``kernel[grid]`` is used instead, every time,

- under Triton's CPU interpreter (there is nothing compiled to call);
- when the tensors are not on the current CUDA device (the compiled kernel's
  handle belongs to one device);
- when a Triton launch hook is set (profilers such as Proton rely on it);
- on a Triton version this module was not tested with (:data:`TESTED_TRITON`),
  with a one-time warning.

tests/library/test_fast_lean_call.py checks, on a GPU, that a key of ours never stands
for two of Triton's compiled kernels, that the kernel cached here is the very
object Triton's own binder picks for the same arguments, and that both paths
give the same numbers; on the CPU it checks the forward's key.

Source: vLLM PR #34838 (a cached compiled-kernel launch); triton
``runtime/jit.py`` (``JITFunction.run``) and ``compiler/compiler.py``
(``CompiledKernel.run``).
"""

from __future__ import annotations

import warnings

import torch
import triton

from .device import interpreter_active

#: Triton versions (major.minor) whose launcher calling convention this module was tested with.
TESTED_TRITON = ("3.6", "3.7")


def _launch_hooks_set() -> bool:
    """True when a Triton launch hook is registered (a profiler such as Proton listens to launches)."""
    knobs = getattr(triton, "knobs", None)
    if knobs is None:
        return False
    for hook in (knobs.runtime.launch_enter_hook, knobs.runtime.launch_exit_hook):
        if hook is not None and getattr(hook, "calls", True):  # an empty HookChain is no hook
            return True
    return False


def triton_is_tested(version: str = triton.__version__) -> bool:
    """True when ``version`` (e.g. "3.6.0") is one :data:`TESTED_TRITON` lists."""
    return ".".join(version.split(".")[:2]) in TESTED_TRITON


def _warn_untested() -> None:
    DirectLauncher._warned = True
    warnings.warn(
        f"rmsnorm: triton {triton.__version__} is not one of the versions whose compiled-kernel launcher the "
        f"fast path calls directly ({', '.join(TESTED_TRITON)}; constraints.txt pins a tested pair), so it "
        "launches through Triton's own kernel[grid]: the same kernels and numbers, with more host time per call",
        RuntimeWarning,
        stacklevel=3,
    )


class DirectLauncher:
    """Launch one ``@triton.jit`` kernel through its compiled launcher, cached under the caller's key.

    Args:
        kernel: the ``triton.jit`` function.

    Call it as ``launcher(key, grid, *args, **options)``: ``key`` is a tuple
    whose first item is the CUDA device index and whose rest must tell apart
    everything Triton specialises on (see the module docstring); ``grid`` is a
    tuple of up to three ints; ``args`` are every kernel argument, constexprs
    included, positionally and in the kernel's order; ``options`` are
    Triton's launch options (``num_warps``, ``num_stages``). Returns nothing.
    """

    _warned = False

    def __init__(self, kernel) -> None:
        self.kernel = kernel
        self.cache: dict = {}
        self.usable = triton_is_tested() and not interpreter_active()
        #: Compiled kernels, launched through ``kernel[grid]`` only because this triton is untested:
        #: said once, at the first such launch (not at import, and never under the interpreter).
        self.untested = not triton_is_tested() and not interpreter_active()

    def __call__(self, key: tuple, grid: tuple[int, ...], *args, **options) -> None:
        if not self.usable or key[0] != torch.cuda.current_device() or _launch_hooks_set():
            if self.untested and not DirectLauncher._warned:
                _warn_untested()
            self.kernel[grid](*args, **options)
            return
        compiled = self.cache.get(key)
        if compiled is None:
            self.cache[key] = self.kernel[grid](*args, **options)
            return
        compiled.run(
            grid[0], grid[1] if len(grid) > 1 else 1, grid[2] if len(grid) > 2 else 1,
            torch._C._cuda_getCurrentRawStream(key[0]), compiled.function, compiled.packed_metadata,
            None, None, None, *args,
        )

"""Launching the fast kernels with less host time than ``kernel[grid](...)``: three paths, one cache.

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
compiled kernel it returns; a hit launches that kernel on
``torch.cuda.current_stream()``, below the binder, through one of

- ``"native"`` (the default; ``RMSNORM_NATIVE_LAUNCH=0`` or :func:`~rmsnorm.native_launch.set_native_launch`
  switches it off): rmsnorm's own C++ launcher (:mod:`rmsnorm.native_launch`),
  one C call that packs the arguments and calls ``cuLaunchKernelEx``, from a plan made once per compiled kernel;
  and for the forward and the backward (the plain norm's, the fused add's, the LayerNorm's) with their default
  configuration, each whole launch in one C call (:func:`~rmsnorm.forward.launch_forward`,
  :func:`~rmsnorm.forward.launch_add_forward`, :func:`~rmsnorm.layernorm_launchers.launch_layernorm_forward`,
  :func:`~rmsnorm.backward.launch_backward`, :func:`~rmsnorm.layernorm_launchers.launch_layernorm_backward`: key,
  grid, outputs and launches, csrc/fast_path.cpp), from plans this launcher hands over;
- ``"triton-launcher"``: the compiled kernel's own launcher, ``CompiledKernel.run``, where the native launch is
  switched off, could not be built (said once, in a warning) or cannot pack the kernel's signature.

``kernel[grid]`` (``"binder"``) is used instead, every time,

- under Triton's CPU interpreter (``"interpreter"``: there is nothing compiled to call);
- when the tensors are not on the current CUDA device (the compiled kernel's
  handle belongs to one device);
- when a Triton launch hook is set (profilers such as Proton rely on it);
- on a Triton version this module was not tested with (:data:`TESTED_TRITON`),
  with a one-time warning.

:func:`launch_path` says which path eager calls take in this process. The launchers are generic over
kernels: anything ``@triton.jit`` whose caller can build such a key launches through them.

tests/library/test_fast_lean_call.py checks, on a GPU, that a key of ours never stands
for two of Triton's compiled kernels, that the kernel cached here is the very
object Triton's own binder picks for the same arguments, and that the paths
give the same numbers; on the CPU it checks the forward's key.
tests/library/test_native_launch.py checks the native launcher's packing and plans, its fallback and
:func:`launch_path` on the CPU, and on a GPU its numbers, streams, CUDA graphs and two devices.

Source: vLLM PR #34838 (a cached compiled-kernel launch); triton
``runtime/jit.py`` (``JITFunction.run``) and ``compiler/compiler.py``
(``CompiledKernel.run``).
"""

from __future__ import annotations

import warnings

import torch
import triton

from . import native_launch
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


class CachedKernel:
    """One entry of a :class:`DirectLauncher`'s cache.

    Attributes:
        kernel: the ``CompiledKernel`` Triton's binder returned at the miss.
        plan: its native launch plan (:func:`~rmsnorm.native_launch.plan_for`), None until the first hit
            with the native launcher on, False where Triton's launcher runs it.
        scratch: whether the kernel takes scratch buffers (allocated per launch).
    """

    __slots__ = ("kernel", "plan", "scratch")

    def __init__(self, kernel) -> None:
        self.kernel = kernel
        self.plan = None
        self.scratch = native_launch.needs_scratch(kernel)


class DirectLauncher:
    """Launch one ``@triton.jit`` kernel below Triton's binder, cached under the caller's key.

    Args:
        kernel: the ``triton.jit`` function.

    Call it as ``launcher(key, grid, *args, **options)``: ``key`` is a tuple
    whose first item is the CUDA device index and whose rest must tell apart
    everything Triton specialises on (see the module docstring); ``grid`` is a
    tuple of up to three ints; ``args`` are every kernel argument, constexprs
    included, positionally and in the kernel's order; ``options`` are
    Triton's launch options (``num_warps``, ``num_stages``). Returns nothing.
    The tensors must be on the key's device (the callers' contracts check it).
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
        entry = self.cache.get(key)
        if entry is None:
            self.cache[key] = CachedKernel(self.kernel[grid](*args, **options))
            return
        stream = torch._C._cuda_getCurrentRawStream(key[0])
        if native_launch.state.enabled:
            plan = entry.plan
            if plan is None:
                plan = entry.plan = native_launch.plan_for(entry.kernel)
            if plan:
                if entry.scratch:
                    native_launch.state.module.launch(
                        plan, grid, stream, args, *native_launch.scratch_buffers(entry.kernel, grid, stream))
                else:
                    native_launch.state.module.launch(plan, grid, stream, args)
                return
        compiled = entry.kernel
        compiled.run(
            grid[0], grid[1] if len(grid) > 1 else 1, grid[2] if len(grid) > 2 else 1,
            stream, compiled.function, compiled.packed_metadata, None, None, None, *args,
        )


def launch_path() -> str:
    """The path eager calls launch the compiled kernels by, in this process.

    Returns:
        ``"native"`` (rmsnorm's C++ launcher, :mod:`rmsnorm.native_launch`: the default), ``"triton-launcher"``
        (``CompiledKernel.run``: the native launch switched off, or it could not be built),
        ``"binder"`` (``kernel[grid]`` on every call: a Triton version outside :data:`TESTED_TRITON`),
        ``"interpreter"`` (Triton's CPU interpreter), or ``"unavailable"`` (no CUDA device and no
        interpreter: the kernels cannot run). Per call, a launch hook or tensors on another device than
        the current one take ``kernel[grid]`` whatever this says.

    With the native launch on, asking builds it if no launch has yet (a few seconds, once; a failure warns once).
    """
    if interpreter_active():
        return "interpreter"
    if not torch.cuda.is_available():
        return "unavailable"
    if not triton_is_tested():
        return "binder"
    if native_launch.state.enabled and native_launch.extension() is not None:
        return "native"
    return "triton-launcher"

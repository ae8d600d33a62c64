"""rmsnorm's own launcher for kernels Triton has compiled: a small C++ extension around ``cuLaunchKernelEx``.

A compiled kernel's own launcher (``CompiledKernel.run``) is Triton's Python and C code: on every
call it allocates the scratch buffers in Python, parses a tuple of launch options, flattens the
arguments by their annotations and packs them one Python object at a time. The extension here
(``csrc/triton_launch.cpp``) does the last two in one C call, from a plan this module builds once
per compiled kernel:

- the argument codes, one per kernel argument in the kernel's order, from Triton's signature
  (``compiled.src.signature``: constexprs skipped, pointers from ``data_ptr()``, integers and
  floats at the width Triton's launcher packs them: ``i1`` as one byte, ``fp32`` as four);
- the CUfunction handle Triton loaded (``compiled.function``), ``num_warps``, ``num_ctas`` (the
  cluster), the dynamic shared memory in bytes (past 48 KiB the driver is asked once, with
  ``cuFuncSetAttribute``, as Triton's ``load_binary`` asks it), and the PDL and cooperative flags;
- the two pointers Triton 3.6 and 3.7 append to every kernel, global scratch and profile scratch:
  0 when the kernel needs none, else allocated per launch with Triton's own allocators.

A kernel whose signature holds anything else (a tuple, a tensor descriptor) gets no plan, and Triton's
launcher runs it.

The extension's second part (``csrc/fast_path.cpp``) is the plain forward's and backward's whole eager launch in
one C call each: :func:`~rmsnorm.forward.launch_forward` with the default configuration hands it x, the weight, eps
and the offset, and it computes the key, finds the plan, allocates y and rstd (``at::empty``), packs the nine
arguments and launches, or returns None where it has no plan and the Python path runs (and, through
:func:`remember_forward`, hands it the plan it launched with); the fused add's forward
(:func:`~rmsnorm.forward.launch_add_forward`: residual_out too) and the LayerNorm's
(:func:`~rmsnorm.layernorm_launchers.launch_layernorm_forward`: mean too) launch the same kernel from it, each its
own kind of launch; :func:`~rmsnorm.backward.launch_backward` likewise launches the backward kernel (the plain
norm's, or the fused add's with ``dres``) and the dgamma sum (:func:`remember_backward`), and
:func:`~rmsnorm.layernorm_launchers.launch_layernorm_backward` the LayerNorm's kernel and its dweight and dbias
sums. It is compiled against torch's C++ headers, so the extension's name holds
torch's version. Once loaded it also runs the contract's quick check (:func:`rmsnorm.contract.install_quick_check`).

It is on unless switched off (``RMSNORM_NATIVE_LAUNCH=0``, :func:`set_native_launch`): with the forward's and
backward's C paths a whole eager launch is one C call, where Triton's compiled launcher runs Python around its own
(``scripts/probe_launch_path.py`` times the host µs of both beside eager ``torch.nn.RMSNorm``'s).
The extension is compiled at the first compiled launch with ``torch.utils.cpp_extension`` into torch's extension cache
(``TORCH_EXTENSIONS_DIR``, by default ``~/.cache/torch_extensions``), from this package's sources and the
``cuda.h`` Triton ships; it opens ``libcuda.so.1`` with ``dlopen``, as Triton's launcher does, so it builds on a
machine without a driver. The build needs a C++ compiler and ninja (``pip install ninja``) and takes a few seconds
to a minute, once per torch version and source text.
Where it cannot be built or the driver cannot be opened (no compiler, no ninja, no ``cuda.h``), one
RuntimeWarning says why and Triton's launcher runs everything.

Source: triton ``backends/nvidia/driver.py`` and ``driver.c`` (3.6 and 3.7: ``CudaLauncher``, ``_launch``);
flash-attention PR #2823 and tritonbench #1016 (a raw launch below Triton's).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import sys
import warnings
from pathlib import Path

import triton

from . import contract, device

#: The extension's C++ sources: the generic launch, and the forward's and backward's own path (csrc/fast_path.cpp).
SOURCES = tuple(Path(__file__).with_name("csrc") / name for name in ("triton_launch.cpp", "fast_path.cpp"))
#: Their shared header.
HEADER = Path(__file__).with_name("csrc") / "triton_launch.h"

#: Triton's signature types → the extension's argument codes (csrc/triton_launch.cpp; pointers, ``*…``, are "P").
ARG_CODES = {
    "constexpr": "x", "i1": "b", "i8": "b", "u1": "B", "u8": "B", "i16": "h", "u16": "H", "i32": "i", "u32": "I",
    "i64": "q", "u64": "Q", "fp16": "e", "bf16": "E", "fp32": "f", "f32": "f", "fp64": "d",
}

#: Dynamic shared memory a kernel takes without asking the driver, in bytes (48 KiB).
DEFAULT_DYNAMIC_SHARED = 48 * 1024


#: RMSNORM_NATIVE_LAUNCH's spellings, lower-cased: on (unset and empty too), and off.
SWITCH_ON, SWITCH_OFF = ("", "1", "true", "yes", "on"), ("0", "false", "no", "off")


def enabled_from_environment(environ=os.environ) -> bool:
    """Whether a process starts with the native launch on: ``RMSNORM_NATIVE_LAUNCH`` unset, empty, ``1``, ``true``,
    ``yes`` or ``on`` (any case): on; ``0``, ``false``, ``no`` or ``off``: off.

    Raises:
        ValueError: any other value, at ``import rmsnorm`` (a typo must not silently pick a path).
    """
    value = environ.get("RMSNORM_NATIVE_LAUNCH", "").strip().lower()
    if value not in SWITCH_ON + SWITCH_OFF:
        raise ValueError(f"RMSNORM_NATIVE_LAUNCH must be 0 (Triton's launcher) or 1 (rmsnorm's native launch, the "
                         f"default), or false/true, no/yes, off/on; got {environ['RMSNORM_NATIVE_LAUNCH']!r}")
    return value in SWITCH_ON


class _State:
    """The extension once loaded (``module``), or why it is not (``failure``); ``enabled``: whether launches use it."""

    module = None
    failure: str | None = None
    tried = False
    # On unless switched off (RMSNORM_NATIVE_LAUNCH=0, set_native_launch(False)): its C paths launch a whole forward
    # or backward in one C call (host µs: scripts/probe_launch_path.py), for a C++ build at first use.
    enabled = enabled_from_environment()


state = _State()


def set_native_launch(enabled: bool) -> None:
    """Launch compiled kernels through the extension (True, the default) or through Triton's launcher (False).

    Takes effect at the next launch, for kernels already cached too. ``RMSNORM_NATIVE_LAUNCH=0`` in the
    environment starts a process with it off; off, the extension is never built.
    """
    if not isinstance(enabled, bool):
        raise TypeError(f"set_native_launch takes True or False; got {enabled!r}")
    state.enabled = enabled


def include_dir() -> Path:
    """The folder holding the ``cuda.h`` Triton ships with its NVIDIA backend."""
    import triton.backends.nvidia as nvidia

    return Path(nvidia.__file__).parent / "include"


def extension_name(source: bytes) -> str:
    """The extension's module name: one per source text and torch build, so that either changed builds it afresh.

    The C paths are compiled against torch's C++ headers (ATen), so a module built under one torch must never
    be loaded under another; torch's extension cache keys on the name and the sources only.
    """
    import torch

    stamp = source + f"\0torch {torch.__version__} {torch.version.git_version}\0".encode()
    return "rmsnorm_triton_launch_" + hashlib.sha256(stamp).hexdigest()[:12]


def sources_text() -> bytes:
    """The extension's sources and header, as its name hashes them."""
    return b"\0".join(path.read_bytes() for path in (*SOURCES, HEADER))


def build():
    """Compile (or load from torch's extension cache) the extension and open the driver; returns the module.

    Raises:
        FileNotFoundError: no compiler, no ninja or no ``cuda.h`` (:func:`missing_toolchain`).
        RuntimeError, OSError, subprocess.CalledProcessError: the build fails; ``libcuda.so.1`` cannot be opened or
            lacks ``cuLaunchKernelEx``.
    """
    module = compile_extension()
    module.open_driver()
    return module


_NO_NINJA = "no ninja on PATH or beside this Python (pip install ninja)"


def _ninja_folder() -> Path | None:
    """Where a build finds ninja that PATH does not: this interpreter's bin folder, where pip installs it and
    which may not be on PATH; None where PATH finds one.

    Raises:
        FileNotFoundError: neither has ninja.
    """
    if shutil.which("ninja") is not None:
        return None
    venv_bin = Path(sys.executable).parent
    if (venv_bin / "ninja").is_file():
        return venv_bin
    raise FileNotFoundError(_NO_NINJA)


def missing_toolchain() -> str | None:
    """What this machine lacks to build the extension, or None where it has all of it.

    A build needs the C++ compiler torch's ``cpp_extension`` calls (``$CXX``, else ``c++``), ninja (on PATH or
    installed by pip beside this interpreter) and the ``cuda.h`` Triton ships. A machine that lacks the compiler
    or ``cuda.h`` still loads an extension already in torch's extension cache (ninja finds nothing to do), so
    :func:`compile_extension` asks only for ninja before it starts, and names what is missing after a failure.
    """
    compiler = os.environ.get("CXX", "c++")  # as cpp_extension reads it
    if shutil.which(compiler) is None:
        return f"no C++ compiler ({compiler}) on PATH"
    try:
        _ninja_folder()
    except FileNotFoundError as error:
        return str(error)
    if not (include_dir() / "cuda.h").is_file():
        return f"no cuda.h in {include_dir()} (triton {triton.__version__})"
    return None


def compile_extension():
    """The extension compiled (or loaded from torch's extension cache), the driver not yet opened.

    Raises:
        FileNotFoundError: no ninja (which even a cached load runs), or the build failed where
            :func:`missing_toolchain` names a missing tool (the build's own error is its cause).
        RuntimeError, subprocess.CalledProcessError: the build fails with every tool present.
    """
    from torch.utils import cpp_extension

    ninja_folder = _ninja_folder()
    include = include_dir()
    path = os.environ.get("PATH")
    if ninja_folder is not None:
        os.environ["PATH"] = os.pathsep.join(filter(None, (str(ninja_folder), path)))
    try:
        return cpp_extension.load(
            name=extension_name(sources_text()), sources=[str(path) for path in SOURCES],
            extra_include_paths=[str(include)],
            extra_cflags=["-O2"], extra_ldflags=["-ldl"], verbose=False,
        )
    except Exception as error:
        missing = missing_toolchain()
        if missing is not None:
            raise FileNotFoundError(missing) from error
        raise
    finally:
        if path is None:
            os.environ.pop("PATH", None)
        else:
            os.environ["PATH"] = path


def extension():
    """The loaded extension, built at the first call; None, with one RuntimeWarning, where that fails.

    Once loaded it also gives the contract its quick check (:func:`rmsnorm.contract.install_quick_check`).
    """
    if not state.tried:
        state.tried = True
        try:
            state.module = build()
        except Exception as error:  # noqa: BLE001 (whatever the toolchain raised: said once, then Triton's launcher)
            state.failure = f"{type(error).__name__}: {str(error).strip().splitlines()[-1] if str(error) else ''}"
            warnings.warn(
                f"rmsnorm: its native launcher could not be built or loaded ({state.failure}); compiled kernels "
                "launch through Triton's own launcher instead: the same kernels and numbers, with more host time "
                "per call. rmsnorm.launch_path() says which path runs",
                RuntimeWarning,
                stacklevel=4,
            )
        else:
            contract.install_quick_check(state.module)
    return state.module


def arg_codes(signature: dict) -> bytes | None:
    """Triton's signature (argument name → type) as the extension's codes; None if it holds a type it does not pack.

    Args:
        signature: ``compiled.src.signature``: every argument in the kernel's order, "constexpr" for those
            compiled in (None arguments included), "*fp16"-like strings for pointers, "i32"-like for scalars.
    """
    codes = []
    for ty in signature.values():
        if not isinstance(ty, str):  # a tuple of arguments: Triton's launcher flattens those
            return None
        code = "P" if ty.startswith("*") else ARG_CODES.get(ty)
        if code is None:  # a tensor descriptor, or a type newer than this table
            return None
        codes.append(code)
    return "".join(codes).encode()


def plan_for(compiled) -> tuple | bool:
    """The launch plan of one compiled kernel, or False where Triton's launcher must run it.

    Returns:
        ``(codes, function, num_warps, num_ctas, shared_bytes, launch_pdl, launch_cooperative_grid)``,
        what the extension's ``launch`` takes; False when the extension is unavailable or the signature
        holds a type it does not pack. Scratch sizes are read per launch by :func:`scratch_buffers`.
    """
    module = extension()
    codes = arg_codes(getattr(getattr(compiled, "src", None), "signature", None) or {})
    if module is None or codes is None or compiled.function is None:
        return False
    metadata = compiled.metadata
    if metadata.shared > DEFAULT_DYNAMIC_SHARED:
        module.allow_dynamic_shared(compiled.function, metadata.shared)
    return (codes, compiled.function, metadata.num_warps, getattr(metadata, "num_ctas", 1), metadata.shared,
            bool(getattr(metadata, "launch_pdl", False)), bool(getattr(metadata, "launch_cooperative_grid", False)))


def remember_forward(launcher, key: tuple, x, weight, offset: float, y, rstd, config, residual=None,
                     residual_out=None, mean=None, bias=None) -> bool:
    """Hand the extension's forward path (csrc/fast_path.cpp) the plan of a forward the Python path just launched.

    Args:
        launcher: the forward's :class:`~rmsnorm.launch.DirectLauncher`; key: the launch's key there.
        x, weight, offset, y, rstd: the launch's tensors and offset (y and rstd as the launcher allocated them).
        config: the default configuration the launch ran with (its BLOCK_M and programs_per_sm set the grid).
        residual, residual_out: the fused add's input and output (its launches are their own kind in the C path);
        mean, bias: the LayerNorm's output and bias (None without one); all None for the plain norm.

    Returns:
        Whether a plan was kept: not where the launch went through Triton's binder (nothing cached), the kernel
        takes scratch, its signature cannot be packed or the extension is unavailable.
    """
    kept = _kept_plan(launcher, key)
    if kept is None:
        return False
    return state.module.remember_forward(x, weight, offset, y, rstd, kept[0], config.BLOCK_M, _grid_cap(x, config),
                                         kept[1], residual, residual_out, mean, bias)


def launch_from_c(entry: str, config, *args):
    """A launcher's whole launch from the C paths (csrc/fast_path.cpp): the outputs, or None where Python runs it.

    Args:
        entry: the extension's function (``forward``, ``forward_add``, ``forward_layernorm``, ``backward``,
            ``backward_layernorm``); it takes ``args`` and then ``poison``, and returns None where it has no plan.
        config: the launcher's configuration: only the default (None) is planned in C.

    Returns:
        None where the C path may not run (an explicit configuration, the native launch off or not built, or an
        allocator the tests put in ``rmsnorm.device.new_output`` other than the NaN poison: the Python path must
        call it) or has no plan yet; else the outputs, filled with NaN first under ``device.nan_output``
        (:func:`rmsnorm.testing.poisoned_outputs`), left as ``at::empty`` makes them under ``device.EMPTY_OUTPUT``.
    """
    if config is not None or not state.enabled or state.module is None:
        return None
    allocate = device.new_output
    if allocate is not device.EMPTY_OUTPUT and allocate is not device.nan_output:
        return None
    return getattr(state.module, entry)(*args, allocate is device.nan_output)


def _grid_cap(x, config) -> int:
    """The most programs a launch of ``config`` takes on x's device (SMs × programs_per_sm), 0 for no cap."""
    from .config import sm_count

    return 0 if config.programs_per_sm is None else sm_count(x.device.index) * config.programs_per_sm


def _kept_plan(launcher, key: tuple):
    """(plan, compiled kernel) of the launch ``key`` names in ``launcher``'s cache, or None: not cached (Triton's
    binder ran it), scratch taken, or a signature the extension cannot pack."""
    entry = launcher.cache.get(key)
    if entry is None or entry.scratch:
        return None
    if entry.plan is None:
        entry.plan = plan_for(entry.kernel)
    return (entry.plan, entry.kernel) if entry.plan else None


def remember_backward(backward: tuple, dgamma: tuple, x, weight, rstd, dy, offset: float, outputs: tuple,
                      shape: tuple, config, dres=None, layernorm: tuple | None = None) -> bool:
    """Hand the extension's backward path (csrc/fast_path.cpp) the plans of a backward the Python path just launched.

    Args:
        backward, dgamma: (launcher, key) of the backward kernel's launch and of the dgamma kernel's (key None
            without a weight).
        x, weight, rstd, dy, offset: the launch's inputs.
        outputs: (dx, partial, mean_ux, dgamma) as the launch allocated them (mean_ux is rstd for one block).
        shape: (block_m, one_block, compute is float64, dgamma's columns per program).
        config: the default configuration the launch ran with (its programs_per_sm caps the grid).
        dres: the fused add's gradient of residual_out (x is then its residual_out), or None: the plain norm's.
        layernorm: the LayerNorm's (mean, bias, bias_partial, mean_u, dbias, (launcher, key) of the dbias sum), bias,
            bias_partial, dbias and the key None without a bias; None for the RMSNorm's.

    Returns:
        Whether the plans were kept (as :func:`remember_forward`).
    """
    kept = _kept_plan(*backward)
    kept_dgamma = None if weight is None else _kept_plan(*dgamma)
    if kept is None or (weight is not None and kept_dgamma is None):
        return False
    if layernorm is not None:
        *tensors, dbias_launch = layernorm
        kept_dbias = None if tensors[1] is None else _kept_plan(*dbias_launch)
        if tensors[1] is not None and kept_dbias is None:
            return False
        layernorm = (*tensors, kept_dbias or (None, None))
    block_m, one_block, float64, reduce_block_n = shape
    return state.module.remember_backward(x, weight, rstd, dy, offset, outputs, kept, kept_dgamma or (None, None),
                                          (block_m, _grid_cap(x, config), one_block, float64, reduce_block_n), dres,
                                          layernorm)


def needs_scratch(compiled) -> bool:
    """True when the kernel takes a global or profile scratch buffer (Triton sizes it per program)."""
    metadata = compiled.metadata
    return bool(getattr(metadata, "global_scratch_size", 0) or getattr(metadata, "profile_scratch_size", 0))


def scratch_buffers(compiled, grid: tuple[int, ...], stream: int) -> tuple:
    """(global, profile) scratch for one launch, from Triton's allocators, as ``CudaLauncher.__call__`` makes them."""
    from triton.runtime import _allocation

    metadata, programs = compiled.metadata, 1
    for n in grid:
        programs *= n
    buffers = []
    for size, align, allocator in (
        (metadata.global_scratch_size, metadata.global_scratch_align, _allocation._allocator),
        (metadata.profile_scratch_size, metadata.profile_scratch_align, _allocation._profile_allocator),
    ):
        buffers.append(allocator.get()(programs * getattr(metadata, "num_ctas", 1) * size, align, stream)
                       if size > 0 else None)
    return tuple(buffers)

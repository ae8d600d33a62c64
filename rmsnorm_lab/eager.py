"""What "eager" means on this machine: which kernel ``torch.nn.functional.rms_norm`` runs.

``F.rms_norm`` calls ``aten::_fused_rms_norm`` (and autograd ``aten::_fused_rms_norm_backward``).
From torch 2.13, ``torch._native`` (imported by ``import torch``) may install an override of both
ops at the CUDA dispatch key that routes a call to a vendored QuACK (CuTe DSL) kernel. It is
registered only when torch is a CUDA build and ``nvidia-cutlass-dsl`` (module ``cutlass``) and
``apache-tvm-ffi`` (``tvm_ffi``) are found at import, at a known-good cutlass version
(``torch/_native/cutedsl_utils.py``), and ``TORCH_DISABLE_NATIVE_JIT`` is not 1. Each call then
takes it only when ``_fused_rms_norm_cond`` says yes (``torch/_native/ops/norm/rmsnorm_impl.py``):
a CUDA x of compute capability 9.x or 10.x, float16/bfloat16/float32, a contiguous weight of x's
dtype, x not empty, and N whose vector width ``gcd(N, 128 / bits) · bits`` is 32, 64 or 128 bits
(odd N in 16-bit dtypes falls to aten). Everything else runs aten. torch 2.11 (the H200's) has no
``torch._native``: eager there is aten.

:func:`eager_provenance` says which without running a kernel; :func:`force_aten` switches the
override off and back on (``torch._native.registry.deregister_op_overrides`` /
``reenable_op_overrides`` by op symbol). Per process, ``TORCH_DISABLE_NATIVE_JIT=1`` set before
``import torch`` keeps it from being registered at all. No argument of ``F.rms_norm`` selects it
per call.

Source: torch 2.13's ``torch/_native`` (``registry.py``, ``cutedsl_utils.py``,
``ops/norm/rmsnorm_impl.py``); tracker issue 35 §3.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
from typing import Any, Iterator

import torch

#: The aten ops that torch._native overrides for RMSNorm (forward, backward).
NATIVE_OPS = ("_fused_rms_norm", "_fused_rms_norm_backward")
#: The dispatch key the override is installed at.
NATIVE_DISPATCH_KEY = "CUDA"
#: Compute capability majors whose GPUs take the override (``rmsnorm_impl._is_supported``).
NATIVE_MAJORS = (9, 10)
#: Which calls take the override where the verdict is ``native-quack`` (the others run aten).
NATIVE_WHEN = ("CUDA x, float16/bfloat16/float32, contiguous weight of x's dtype, x not empty, N with a "
               "32/64/128-bit vector (gcd(N, 128/bits)*bits; odd N in 16-bit dtypes: aten)")


def native_registry():
    """``torch._native.registry``, or None on a torch without it (2.11 and older)."""
    try:
        return importlib.import_module("torch._native.registry")
    except ImportError:
        return None


def _override_nodes(op: str = NATIVE_OPS[0], dispatch_key: str | None = NATIVE_DISPATCH_KEY) -> list | None:
    """torch._native's override nodes of ``op`` ([] if none; every key when ``dispatch_key`` is None), or None.

    None: this torch has no torch._native. Reads ``registry._graphs``, where ``register_op_override``
    keeps one node per override with its ``active`` flag (torch 2.13 has no public getter of it).
    """
    registry = native_registry()
    if registry is None:
        return None
    graphs = getattr(registry, "_graphs", {})
    return [node for (name, key), nodes in graphs.items() if name == op and dispatch_key in (None, key)
            for node in nodes]


def _found(module: str) -> bool:
    """Whether ``module`` can be imported, found as torch finds it (``find_spec``: nothing is imported)."""
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def _capability() -> tuple[int, int] | None:
    return tuple(torch.cuda.get_device_capability(0)) if torch.cuda.is_available() else None


def eager_provenance() -> dict[str, Any]:
    """Which implementation eager ``F.rms_norm`` runs in this process, asked without running a kernel.

    Returns:
        dict with ``torch`` (version), ``torch_native`` (torch._native exists), ``native_registered``
        (an override of ``aten::_fused_rms_norm`` at CUDA is registered), ``native_active`` (and not
        switched off, e.g. by :func:`force_aten`), ``cutlass_importable`` (``nvidia-cutlass-dsl``),
        ``tvm_ffi_importable`` (``apache-tvm-ffi``, torch's other requirement),
        ``compute_capability`` ("9.0", or None without CUDA), ``verdict`` (``"aten"`` or
        ``"native-quack"``) and, for ``native-quack``, ``native_when``: the calls that take it
        (:data:`NATIVE_WHEN`; the others run aten).
    """
    nodes = _override_nodes()
    capability = _capability()
    info: dict[str, Any] = {
        "torch": torch.__version__,
        "torch_native": nodes is not None,
        "native_registered": bool(nodes),
        "native_active": any(getattr(node, "active", True) for node in nodes or []),
        "cutlass_importable": _found("cutlass"),
        "tvm_ffi_importable": _found("tvm_ffi"),
        "compute_capability": None if capability is None else f"{capability[0]}.{capability[1]}",
    }
    native = (info["native_active"] and info["cutlass_importable"] and capability is not None
              and capability[0] in NATIVE_MAJORS)
    info["verdict"] = "native-quack" if native else "aten"
    if native:
        info["native_when"] = NATIVE_WHEN
    return info


def native_refuses(x: torch.Tensor, weight: torch.Tensor, eps: float) -> str | None:
    """None when eager ``F.rms_norm(x, (N,), weight, eps)`` takes torch._native's QuACK kernel, else why not."""
    verdict = eager_provenance()
    if verdict["verdict"] != "native-quack":
        if not verdict["torch_native"]:
            return f"torch {verdict['torch']} has no torch._native: eager F.rms_norm is aten"
        missing = ["the override is not registered" if not verdict["native_registered"] else
                   "the override is switched off" if not verdict["native_active"] else None,
                   None if verdict["cutlass_importable"] else "nvidia-cutlass-dsl is not importable"]
        missing = [reason for reason in missing if reason]
        if verdict["compute_capability"] is None:
            missing.append("no CUDA GPU")
        elif int(verdict["compute_capability"].split(".")[0]) not in NATIVE_MAJORS:
            missing.append(f"compute capability {verdict['compute_capability']} is not 9.x or 10.x")
        return "torch._native's QuACK RMSNorm does not run here: " + "; ".join(missing)
    from torch._native.ops.norm.rmsnorm_impl import _fused_rms_norm_cond

    if not _fused_rms_norm_cond(x, [x.shape[-1]], weight, eps):
        return f"torch._native routes these inputs to aten; it takes {NATIVE_WHEN}"
    return None


@contextlib.contextmanager
def force_aten() -> Iterator[None]:
    """Eager ``F.rms_norm`` (forward and backward) runs aten inside; the override comes back on exit.

    Switches off only the ops whose override is active on entry
    (``torch._native.registry.deregister_op_overrides(disable_op_symbols=...)``) and re-enables
    exactly those (``reenable_op_overrides``), so an override already off stays off. Each switch
    re-installs torch's dispatcher entries: hold it around a whole timing, not around each call.
    Without torch._native (torch 2.11) it does nothing: eager is aten already.
    """
    registry = native_registry()
    switched = [op for op in NATIVE_OPS if any(node.active for node in _override_nodes(op, None) or [])]
    if registry is None or not switched:
        yield
        return
    registry.deregister_op_overrides(disable_op_symbols=switched)
    try:
        yield
    finally:
        registry.reenable_op_overrides(enable_op_symbols=switched)

"""The fast path's input contract: wider than the article's, and just as loud.

What the fast kernels accept (anything else raises :class:`ContractError`,
naming the tensor, the rule and the value, before anything is allocated):

- ``x``: float32, float16 or bfloat16, 2-D (M, N) with 1 ≤ N ≤ 262144 and any
  M ≥ 0 (offsets are int64, so M·N ≥ 2³¹ is fine). The last dimension must
  have unit stride; the row stride may be anything (a slice ``buf[:, :N]`` is
  read in place). The strides of an empty tensor (M = 0) are not checked:
  they describe no memory, and nothing is read. The functional :func:`rmsnorm.rmsnorm_fast` makes any
  other layout contiguous first (one copy) and flattens leading dimensions.
- ``weight``: (N,) float32, float16 or bfloat16 with unit stride, on x's
  device; its dtype may differ from x's (fp32 weights, bf16 activations).
- ``eps``: a finite real number ≥ 0: 0 as torch's norms take it (a row of zeros is then NaN, as there); torch leaves
  negative and non-finite eps unchecked, this refuses them.
- ``residual`` (the fused add, :func:`rmsnorm.rmsnorm_add`): x's shape (no broadcasting), device and
  layout rule, in x's dtype or float32 with a 16-bit x (:func:`residual_out_dtype`).
- bfloat16 is refused under Triton's CPU interpreter (see
  :data:`INTERPRETER_BF16_REASON`); it runs on the GPU.
- No DTensor (``torch.distributed.tensor``), as x or as weight: a kernel reads
  one device's memory, so it would normalise a shard as if it were the whole
  tensor and never sum dgamma across ranks. :func:`refuse_dtensor` names the
  placements and the way out (``full_tensor()``, or ``torch.nn.RMSNorm``,
  which DTensor shards). A plain tensor on each rank (DDP; FSDP2, which
  unshards the weight before the forward) is what the kernels take.

Scratch is (P, N) float32 for the dgamma partials (P = the number of
programs, a few per SM): no M·N buffer, so no scratch limit.

Source: notebooks/11_extending_the_contract.ipynb.
"""

from __future__ import annotations

import math
import numbers
import os

import torch

from .device import INTERPRET_ENV, interpreter_active, interpreter_split

try:  # torch built without distributed support has no DTensor, and so cannot pass one
    from torch.distributed.tensor import DTensor
except ImportError:  # pragma: no cover - every wheel this project installs has it
    DTensor = None

#: Widest row the fast path accepts (a loop over column blocks beyond one block).
FAST_MAX_N = 262144
#: Dtypes of x, dy and weight on the fast path.
FAST_DTYPES = (torch.float32, torch.float16, torch.bfloat16)
#: Why bf16 is refused under the interpreter (checked with triton 3.6 and 3.7.1, see
#: tests/library/test_fast.py::test_interpreter_bf16_is_still_wrong): it stores bf16 by
#: truncating instead of rounding to nearest, and adds bf16 values as integers.
INTERPRETER_BF16_REASON = (
    "Triton's CPU interpreter computes bfloat16 wrongly (it adds bf16 bit patterns as integers "
    "and truncates float32 -> bf16 stores instead of rounding to nearest), so bf16 runs on a GPU only: "
    "on the CPU keep x and the weight in float32 or float16 (model.float())"
)


class ContractError(ValueError):
    """An input breaks the kernels' contract. A ``ValueError``."""


class InterpreterUnavailableError(ContractError, RuntimeError):
    """CPU tensors, and Triton's interpreter is off: the kernels can run nowhere. A :class:`ContractError`."""


def _require_tensor(name: str, t) -> None:
    if not isinstance(t, torch.Tensor):
        raise ContractError(f"{name} must be a torch.Tensor; got {type(t).__name__}")
    if t.layout != torch.strided:
        raise ContractError(f"{name} must be a dense (strided) tensor; got layout {t.layout}")


def _require_device(name: str, t: torch.Tensor, expected: torch.device) -> None:
    if t.device != expected:
        raise ContractError(f"{name} must be on the same device as x ({expected}); got {t.device}")


def _require_kernel_device(name: str, t: torch.Tensor) -> None:
    """A device the kernels can run on: CUDA, or the CPU while the interpreter is on."""
    if interpreter_split():
        seen = os.environ.get(INTERPRET_ENV, "<unset>")
        raise InterpreterUnavailableError(
            f"rmsnorm: triton was imported before {INTERPRET_ENV} was set as it is now ({INTERPRET_ENV}={seen}), "
            "so Triton's own functions and the package's kernels disagree on the interpreter and no kernel can "
            "run. Something imported triton first: building a Hugging Face model, torch.compile, or an "
            f"import of triton itself. Restart Python (in Jupyter: restart the kernel) and set {INTERPRET_ENV} "
            "at the very top, before importing torch, transformers or rmsnorm"
        )
    if t.device.type == "cpu":
        if not interpreter_active():
            seen = os.environ.get(INTERPRET_ENV, "<unset>")
            raise InterpreterUnavailableError(
                f"rmsnorm: {name} is on the CPU and Triton's interpreter is off ({INTERPRET_ENV}={seen} when "
                "triton was imported), so the kernels cannot run. Move the tensors to a CUDA device, or restart "
                f"Python (in Jupyter: restart the kernel) with {INTERPRET_ENV}=1 set before triton is imported: "
                f"in the shell ({INTERPRET_ENV}=1 python ...), or with os.environ['{INTERPRET_ENV}'] = '1' before "
                "the first import of triton or rmsnorm"
            )
    elif t.device.type != "cuda":
        raise ContractError(f"{name} must be on a CUDA device (or the CPU with the interpreter); got {t.device}")


def _functorch_wrapped(*tensors) -> bool:
    """True when a ``torch.func`` transform (vmap, grad, jacrev…) wraps one of ``tensors``: no storage to launch on."""
    return any(isinstance(t, torch.Tensor) and torch._C._functorch.is_functorch_wrapped_tensor(t) for t in tensors)


def check_eps(eps, name: str = "eps", *, allow_zero: bool = True) -> None:
    """Raise unless ``eps`` is a finite real number ≥ 0 (bool excluded): 0 included, as torch's norms take it.

    Args:
        name: what the message calls it (the fast path says ``eps``, like torch).
        allow_zero: False for the article's contract (:mod:`rmsnorm.article.contract`), which asks eps > 0.

    Raises:
        ContractError: for negatives (and 0 where ``allow_zero`` is False), NaN, ±inf, bool, tensors, strings, None.
    """
    if isinstance(eps, bool) or not isinstance(eps, numbers.Real):
        raise ContractError(f"{name} must be a real number; got {type(eps).__name__} {eps!r}")
    # comparisons, not math.isfinite: torch.compile(dynamic=True) makes a module's float eps symbolic,
    # and traces (guards on) a comparison where it cannot trace math.isfinite. NaN fails both.
    if not ((0 <= eps) if allow_zero else (0 < eps)) or not eps < math.inf:
        raise ContractError(f"{name} must be finite and {'>=' if allow_zero else '>'} 0; got {eps!r}")


def check_offset(offset, weight) -> None:
    """Raise unless ``offset`` is a finite real number, and 0 when there is no weight.

    y = x · rstd · (weight + offset): 1.0 is the zero-centred convention of Gemma and Qwen3.5
    (QuACK's ``weight_offset``, Liger's ``offset``, TransformerEngine's ``zero_centered_gamma``).
    Without a weight there is nothing to offset: QuACK and TransformerEngine tie the offset to
    the weight, so a non-zero offset with ``weight=None`` is refused rather than read as a scale.

    Raises:
        ContractError: for bool, non-real values, NaN, ±inf, or offset ≠ 0 with ``weight`` None.
    """
    if isinstance(offset, bool) or not isinstance(offset, numbers.Real) or not -math.inf < offset < math.inf:
        raise ContractError(f"offset must be a finite real number; got {type(offset).__name__} {offset!r}")
    if weight is None and offset != 0:
        raise ContractError(f"offset is {offset!r} but there is no weight: y = x · rstd · (weight + offset) "
                            "needs a weight (pass one, or offset=0.0)")


def _require_dtype(name: str, t: torch.Tensor) -> None:
    if t.dtype not in FAST_DTYPES:
        raise ContractError(f"{name} must be float32, float16 or bfloat16 for the fast path; got {t.dtype}")
    if t.dtype == torch.bfloat16 and t.device.type == "cpu" and interpreter_active():
        raise ContractError(f"{name} is bfloat16 on the CPU: {INTERPRETER_BF16_REASON}")


def _require_unit_last_stride(name: str, t: torch.Tensor) -> None:
    # An empty tensor's strides describe no layout: torch calls every empty tensor contiguous, and
    # .contiguous() returns it unchanged (the dy of y.sum() for an empty batch is expanded, strides (0, 0)).
    if t.dim() >= 1 and t.shape[-1] > 1 and t.stride(-1) != 1 and t.numel() > 0:
        raise ContractError(
            f"{name} must have unit stride in its last dimension; got strides {tuple(t.stride())} "
            f"for shape {tuple(t.shape)} (rmsnorm_fast copies such inputs once; the launchers do not)"
        )


def refuse_dtensor(name: str, t) -> None:
    """Raise when ``t`` is a DTensor: the kernels would see one rank's shard only.

    Liger all-gathers a DTensor input; quack refuses it; so does the fast path,
    because a silent all-gather would undo what sharding is for (the memory of
    sequence parallelism) and change the output's placement, and a correct
    sharded norm needs dgamma reduced across the mesh (a ``Partial`` gradient).

    Args:
        name: what the message calls the tensor (``x``, ``weight``).
        t: any object; only a ``torch.distributed.tensor.DTensor`` is refused.

    Raises:
        ContractError: naming the tensor, its placements and mesh, and what to do instead.

    Source: quack ``rmsnorm.py`` (refuses), Liger ``ops/rms_norm.py`` (all-gathers); checked by
    tests/library/test_distributed.py.
    """
    if DTensor is None or not isinstance(t, DTensor):
        return
    layout = f"placements {tuple(t.placements)} on {t.device_mesh}, global shape {tuple(t.shape)}"
    if name == "weight":
        remedy = (
            "A sharded weight must be whole when the norm runs: put the norm inside a module given to "
            "FSDP2's fully_shard (it unshards the weight before the forward), or pass weight.full_tensor()"
        )
    else:
        remedy = (
            f"Pass {name}.full_tensor() (an all-gather: every rank gets the whole tensor) and shard the result "
            "again if you need to; or, for a tensor sharded on a leading dimension (sequence parallelism), "
            "use torch.nn.RMSNorm / torch.nn.functional.rms_norm, which DTensor shards itself"
        )
    raise ContractError(
        f"{name} is a DTensor ({layout}); the fast kernels read one device's memory, so they would "
        f"normalise the local shard as if it were the whole tensor and not reduce dgamma across ranks. {remedy}"
    )


_DTYPES = frozenset(FAST_DTYPES)
_INTERPRETED = interpreter_active()
#: Triton's library and the package's kernels disagree on the interpreter: every input goes to the rules,
#: where :func:`_require_kernel_device` names the cause.
_SPLIT = interpreter_split()
#: Types a weight may have on the quick path (a DTensor Parameter has type DTensor, so it takes the rules).
_PLAIN = (torch.Tensor, torch.nn.Parameter)


def _plainly_valid(x, weight, eps) -> bool:
    """True when x, weight and eps pass every rule of :func:`check_fast_inputs`, read in a few attributes.

    The common case of a model's call (a 2-D CUDA tensor, a weight, a float eps) costs the host a
    few µs here instead of a walk through each rule; False means "let the rules say what is wrong"
    (or that the input is valid in a rarer way: an int eps, eps = 0, an empty tensor, the interpreter).
    tests/library/test_fast_user_code.py holds it to the rules, one broken rule at a time.
    """
    if _SPLIT or type(x) is not torch.Tensor or x.layout is not torch.strided or x.dim() != 2 or x.dtype not in _DTYPES:
        return False
    if not (x.is_cuda or (_INTERPRETED and x.is_cpu and x.dtype is not torch.bfloat16)):
        return False
    N = x.shape[1]
    if not 1 <= N <= FAST_MAX_N or (x.stride(1) != 1 and N != 1):
        return False
    if weight is not None and not (
        type(weight) in _PLAIN and weight.layout is torch.strided and weight.dim() == 1
        and weight.shape[0] == N and weight.dtype in _DTYPES and (weight.stride(0) == 1 or N == 1)
        and weight.device == x.device and not (weight.dtype is torch.bfloat16 and weight.is_cpu)
    ):
        return False
    return type(eps) is float and 0 < eps < math.inf


#: The quick check :func:`check_fast_inputs` runs first: :func:`_plainly_valid`, or the same rules in C once the
#: native launch's extension is loaded (:func:`install_quick_check`), about 0.3 µs a call instead of 5.
quick_check = _plainly_valid


def install_quick_check(module) -> None:
    """Make the extension's ``plainly_valid`` (csrc/fast_path.cpp) the quick check, configured with this contract.

    Called by :func:`rmsnorm.native_launch.extension` once it has loaded the extension. Nothing changes where
    Triton's library and the package disagree on the interpreter (``_SPLIT``: every input goes to the rules).
    tests/library/test_fast_lean_call.py holds both checks to the rules, one broken rule at a time.
    """
    global quick_check
    if _SPLIT:
        return
    module.configure_quick_check(FAST_MAX_N, _INTERPRETED)
    quick_check = module.plainly_valid


def check_fast_inputs(x: torch.Tensor, weight: torch.Tensor | None, eps) -> None:
    """Check x, weight and eps against the fast path's contract.

    Args:
        x: (M, N) activations, unit stride in the last dimension.
        weight: (N,) γ, or None (no affine weight).
        eps: the stabiliser added to mean(x²).

    Raises:
        ContractError: naming the tensor, the rule and the value seen (a DTensor
            x or weight: its placements, see :func:`refuse_dtensor`); nothing
            has been allocated or written when it is raised.

    Source: notebooks/11_extending_the_contract.ipynb.
    """
    if quick_check(x, weight, eps):  # the common case, in a few attribute reads
        return
    _require_tensor("x", x)
    refuse_dtensor("x", x)
    if weight is not None:
        refuse_dtensor("weight", weight)
    if x.dim() != 2:
        raise ContractError(f"x must be 2-D (M, N) for the fast launchers; got {x.dim()}-D shape {tuple(x.shape)}")
    _require_dtype("x", x)
    _require_kernel_device("x", x)
    M, N = x.shape
    if not 1 <= N <= FAST_MAX_N:
        raise ContractError(f"x must have 1 <= N <= {FAST_MAX_N} columns on the fast path; got N = {N}")
    _require_unit_last_stride("x", x)
    if weight is not None:
        _require_tensor("weight", weight)
        _require_dtype("weight", weight)
        _require_device("weight", weight, x.device)
        if tuple(weight.shape) != (N,):
            raise ContractError(f"weight must have shape (N,) = ({N},); got {tuple(weight.shape)}")
        _require_unit_last_stride("weight", weight)
    check_eps(eps)


def check_fast_backward_inputs(
    x: torch.Tensor, weight: torch.Tensor | None, rstd: torch.Tensor, dy: torch.Tensor
) -> None:
    """Check what the fused backward reads: x and weight as in the forward, rstd and dy.

    Rules: rstd is (M,) float32 on x's device, unit stride; dy has x's shape,
    dtype and device, with unit stride in its last dimension (any row stride).

    Raises:
        ContractError: naming the tensor, the rule and the value seen.

    Source: notebooks/10_one_pass_backward.ipynb.
    """
    check_fast_inputs(x, weight, 1.0)
    _require_rstd(rstd, x)
    _require_like("dy", dy, x, "x", x.dtype)


def _require_rstd(rstd, x: torch.Tensor, name: str = "rstd") -> None:
    """A per-row statistic from the forward (rstd; the LayerNorm's mean too): (M,) float32 on x's device."""
    _require_tensor(name, rstd)
    if rstd.dtype != torch.float32 or tuple(rstd.shape) != (x.shape[0],):
        raise ContractError(
            f"{name} must be float32 of shape (M,) = ({x.shape[0]},); got {rstd.dtype} {tuple(rstd.shape)}"
        )
    _require_device(name, rstd, x.device)
    _require_unit_last_stride(name, rstd)


def _require_like(name: str, t, x: torch.Tensor, x_name: str, dtype: torch.dtype) -> None:
    """``t`` has x's shape and device, ``dtype``, and unit stride in its last dimension (any row stride)."""
    _require_tensor(name, t)
    if tuple(t.shape) != tuple(x.shape) or t.dtype != dtype:
        of = f"the shape and dtype of {x_name}" if dtype == x.dtype else f"the shape of {x_name} and dtype {dtype}"
        raise ContractError(f"{name} must have {of} {tuple(x.shape)} {dtype}; got {tuple(t.shape)} {t.dtype}")
    refuse_dtensor(name, t)
    _require_device(name, t, x.device)
    _require_unit_last_stride(name, t)


def residual_out_dtype(x_dtype: torch.dtype, residual_dtype: torch.dtype) -> torch.dtype | None:
    """The dtype of residual_out = x + residual that the fused add accepts, or None for a refused pair.

    For every accepted pair it is the residual's own dtype (the stream keeps its dtype), which is also
    ``torch.promote_types`` of the pair: the launcher and the operator's fake allocate residual_out in it.
    The residual has x's dtype (the sum is rounded to it, as torch rounds it), or it is float32 with a
    16-bit x (a float32 residual stream: torch promotes the sum to float32). Any other pair is refused:
    a 16-bit residual with a float32 x would promote the stream of a float32 model for no reason, and
    float16 with bfloat16 promotes to float32 in torch, which no model's residual stream does.
    """
    if residual_dtype == x_dtype or (residual_dtype == torch.float32 and x_dtype in (torch.float16, torch.bfloat16)):
        return residual_dtype
    return None


def check_add_inputs(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor | None, eps) -> None:
    """Check the fused add's inputs: x, weight and eps as :func:`check_fast_inputs`, and the residual.

    Rules for ``residual``: a plain (not DTensor) tensor of x's shape, on x's device, with unit stride in
    its last dimension (any row stride), in a dtype :func:`residual_out_dtype` accepts.

    Raises:
        ContractError: naming the tensor, the rule and the value seen, before anything is allocated.

    Source: Liger-Kernel ``ops/fused_add_rms_norm.py``; vLLM ``fused_add_rms_norm``.
    """
    check_fast_inputs(x, weight, eps)
    _require_tensor("residual", residual)
    refuse_dtensor("residual", residual)
    if tuple(residual.shape) != tuple(x.shape):
        raise ContractError(f"residual must have the shape of x {tuple(x.shape)} (no broadcasting); "
                            f"got {tuple(residual.shape)}")
    _require_device("residual", residual, x.device)
    if residual_out_dtype(x.dtype, residual.dtype) is None:
        raise ContractError(f"residual must have x's dtype ({x.dtype}), or float32 with a 16-bit x; "
                            f"got {residual.dtype}")
    _require_unit_last_stride("residual", residual)


def check_add_backward_inputs(residual_out: torch.Tensor, weight: torch.Tensor | None, rstd: torch.Tensor,
                              dy: torch.Tensor, d_residual_out: torch.Tensor) -> None:
    """Check what the fused add's backward reads: residual_out (the norm's input), weight, rstd, dy, d_residual_out.

    Rules: residual_out and weight as x and weight in :func:`check_fast_inputs`; rstd as in
    :func:`check_fast_backward_inputs`; dy of residual_out's shape, in its dtype or (with a float32
    residual_out) 16-bit, y's dtype; d_residual_out of residual_out's shape and dtype. Both gradients
    with unit stride in the last dimension.

    Raises:
        ContractError: naming the tensor, the rule and the value seen.
    """
    check_fast_inputs(residual_out, weight, 1.0)
    _require_rstd(rstd, residual_out)
    _require_tensor("dy", dy)
    if residual_out_dtype(dy.dtype, residual_out.dtype) is None:  # dy has y's dtype, which is x's
        raise ContractError(f"dy must have y's dtype: residual_out's ({residual_out.dtype}), or 16-bit with a "
                            f"float32 residual_out; got {dy.dtype}")
    _require_like("dy", dy, residual_out, "residual_out", dy.dtype)
    _require_like("d_residual_out", d_residual_out, residual_out, "residual_out", residual_out.dtype)

"""How a learner's kernel is judged: read it, compile it for a GPU, run it where it can do no harm.

1. :func:`preflight` reads the kernel (never runs it): a skeleton says "not
   done yet", a wrong signature or an unmasked block access is named with its
   line, before anything is launched.
2. :func:`check_kernel` then, at the same time, (a) compiles the kernel for a
   CUDA target on the CPU (:mod:`rmsnorm.checkers._gpu_compile`; only under the
   interpreter: on a GPU it is compiled for real) and (b) runs the exercise's
   cases in a child process (:mod:`rmsnorm.checkers.isolate`), so that a crash
   or an endless loop becomes a message.
3. In the child, :func:`run_kernel_cases` launches the kernel on every case
   with each tensor inside a larger buffer: NaN before and after it (and in
   the padding of rows, for the cases whose rows are further apart than N), so
   a read outside a tensor shows as NaN, a write outside it changes the
   guard, and a write into an input changes the input. Under the interpreter,
   a masked load without ``other=`` gives NaN in its masked lanes (on a GPU
   they hold whatever memory held; the interpreter would give 0).

Source: solutions/03_forward_kernel.ipynb, 04_backward_derivation.ipynb,
05_gamma_reduction.ipynb, 08_n_vs_block_exercise.ipynb.
"""

from __future__ import annotations

import ast
import contextlib
import inspect
import textwrap
import warnings
from collections.abc import Callable, Sequence

import torch

from . import isolate
from .diagnose import Case, Outputs
from .feedback import Feedback, describe_error, is_not_implemented, name_of, not_done, source_of, wrong

#: Elements of NaN guard before every tensor the checker hands a kernel.
GUARD = 1024
#: Words of :func:`describe_error` that mark a kernel that raised (its message beats the GPU compiler's).
RAISED = " raised "


# --------------------------------------------------------------------------- reading the kernel


def _first_line(kernel) -> int:
    try:
        return inspect.getsourcelines(kernel.fn)[1]
    except (OSError, TypeError):
        return 1


def preflight(exercise: str, kernel, reference, mask_example: str) -> Feedback | None:
    """Static checks of a learner's kernel against the package kernel it replaces.

    Args:
        exercise: name shown in the feedback.
        kernel: the learner's ``@triton.jit`` function.
        reference: the package kernel whose signature the launcher expects.
        mask_example: what an unmasked access would do in this exercise, in words.

    Returns:
        A "not done yet" or "wrong" :class:`Feedback`, or None when the kernel may be launched.
    """
    name = name_of(kernel)
    if not isolate.is_kernel(kernel):
        return wrong(exercise, f"{name} is not a Triton kernel: put `@triton.jit` on the line above `def`.")
    source = source_of(kernel)
    if source is None:
        return wrong(exercise, f"the source of {name} cannot be read: define it in a notebook cell or a .py file.")
    if raises_not_implemented(source):
        return not_done(exercise, name)
    expected = inspect.signature(reference.fn).parameters
    got = list(inspect.signature(kernel.fn).parameters)
    by_keyword = [p for p, param in expected.items() if "constexpr" in str(param.annotation)]
    if len(got) != len(expected) or got[len(got) - len(by_keyword):] != by_keyword:
        return wrong(
            exercise,
            f"{name} takes ({', '.join(got)}), but the launcher passes ({', '.join(expected)}): "
            f"keep the signature of `{reference.fn.__name__}`, in the same order, with "
            f"{' and '.join(by_keyword)} last and spelled exactly (the launcher passes them by name).",
        )
    first = _first_line(kernel)
    for line, call in unmasked_accesses(source):
        return wrong(
            exercise,
            f"line {first + line - 1} of your cell, `{call}`, has no mask. {mask_example}: pass `mask=`, "
            "and `other=0` for a load.",
        )
    return None


def raises_not_implemented(source: str) -> bool:
    """True when the kernel has a ``raise NotImplementedError`` statement (the skeleton), not merely the word."""
    for node in ast.walk(ast.parse(textwrap.dedent(source))):
        if isinstance(node, ast.Raise) and node.exc is not None:
            exc = node.exc.func if isinstance(node.exc, ast.Call) else node.exc
            if isinstance(exc, ast.Name) and exc.id == "NotImplementedError":
                return True
    return False


def _block_names(tree) -> set[str]:
    blocks: set[str] = set()
    assigns = [n for n in ast.walk(tree) if isinstance(n, (ast.Assign, ast.AugAssign, ast.AnnAssign))]
    for _ in range(len(assigns) + 1):  # names may depend on later names inside loops
        before = len(blocks)
        for node in assigns:
            if node.value is not None and _is_block(node.value, blocks):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                blocks.update(t.id for target in targets for t in ast.walk(target) if isinstance(t, ast.Name))
        if len(blocks) == before:
            break
    return blocks


def _is_block(node, blocks) -> bool:
    for sub in ast.walk(node):
        if isinstance(sub, ast.Name) and sub.id in blocks:
            return True
        if isinstance(sub, ast.Attribute) and sub.attr == "arange":
            return True
    return False


def _memory_calls(tree):
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in ("load", "store"):
            yield node


def unmasked_accesses(source: str) -> list[tuple[int, str]]:
    """Every ``tl.load``/``tl.store`` of a block of pointers that has no mask.

    A pointer is a *block* when its expression uses ``tl.arange`` or a name
    assigned (directly or through other names) from one; ``tl.store(rstd_ptr +
    row, rstd)`` is a single element and needs no mask.

    Returns:
        (line number within the kernel's source, the call's text) per access.
    """
    tree = ast.parse(textwrap.dedent(source))
    blocks = _block_names(tree)
    found = []
    for node in _memory_calls(tree):
        positional_mask = 2 if node.func.attr == "store" else 1  # store(ptr, value, mask); load(ptr, mask)
        has_mask = len(node.args) > positional_mask or any(k.arg == "mask" for k in node.keywords)
        pointer = node.args[0] if node.args else next((k.value for k in node.keywords if k.arg == "pointer"), None)
        if not has_mask and pointer is not None and _is_block(pointer, blocks):
            found.append((node.lineno, ast.unparse(node)))
    return sorted(found)


def masked_loads_without_other(source: str) -> list[tuple[int, str]]:
    """Every ``tl.load`` with a mask and no ``other=``: its masked lanes are undefined on a GPU.

    Returns:
        (line number within the kernel's source, the call's text) per load.
    """
    found = []
    for node in _memory_calls(ast.parse(textwrap.dedent(source))):
        if node.func.attr != "load":
            continue
        has_mask = len(node.args) > 1 or any(k.arg == "mask" for k in node.keywords)
        has_other = len(node.args) > 2 or any(k.arg == "other" for k in node.keywords)
        if has_mask and not has_other:
            found.append((node.lineno, ast.unparse(node)))
    return sorted(found)


# --------------------------------------------------------------------------- guarded buffers (in the child)


class Buffers:
    """Allocates every tensor a kernel sees inside a NaN-guarded buffer, and says afterwards what changed.

    Each tensor sits :data:`GUARD` elements into its buffer; after it come its
    rows' padding (rows ``row_stride`` apart) and a guard as long as the whole
    tensor again, so that a wrong row offset lands in NaN, not in another tensor.
    """

    def __init__(self, guard_value: float = float("nan")) -> None:
        self.guard_value = guard_value
        self.entries: list[tuple[str, str, torch.Tensor, torch.Tensor, torch.Tensor]] = []

    def _place(self, shape, dtype, device, row_stride):
        rows, cols = (shape[0], shape[1]) if len(shape) == 2 else (1, shape[0])
        stride = row_stride or cols
        span = (rows - 1) * stride + cols
        buffer = torch.full((GUARD + span + GUARD + rows * stride,), self.guard_value, dtype=dtype, device=device)
        strides = (stride, 1) if len(shape) == 2 else (1,)
        view = buffer.as_strided(tuple(shape), strides, GUARD)
        return view, buffer

    def input(self, name: str, t: torch.Tensor, row_stride: int | None = None) -> torch.Tensor:
        """A copy of ``t`` in a guarded buffer (read-only for the kernel)."""
        view, buffer = self._place(t.shape, t.dtype, t.device, row_stride)
        view.copy_(t)
        self.entries.append(("input", name, view, buffer, buffer.clone()))
        return view

    def output(self, name: str, shape, dtype, device, row_stride: int | None = None) -> torch.Tensor:
        """A NaN-filled output in a guarded buffer."""
        view, buffer = self._place(shape, dtype, device, row_stride)
        view.fill_(float("nan"))
        self.entries.append(("output", name, view, buffer, buffer.clone()))
        return view

    def problems(self) -> str | None:
        """What the kernel changed that it must not: an input, or memory outside an output."""
        for kind, name, view, buffer, before in self.entries:
            changed = _bits(buffer) != _bits(before)
            if kind == "input" and changed.any():
                return f"it wrote into {name}, an input: a kernel only reads its inputs (check the pointer of each `tl.store`)"
            inside = torch.zeros(buffer.numel(), dtype=torch.bool)
            inside.as_strided(view.shape, view.stride(), view.storage_offset()).fill_(True)
            offset = view.storage_offset()
            outside = changed & ~inside
            if outside.any():
                where = int(torch.nonzero(outside)[0]) - offset
                side = "before its first element" if where < 0 else "past its last element" if where >= _span(view) else "between its rows"
                return (f"it wrote outside {name} ({side}, element offset {where}): check the row offset "
                        "(`row * row_stride`) and the store's mask")
        return None


def _span(view: torch.Tensor) -> int:
    return (view.shape[0] - 1) * view.stride(0) + view.shape[-1] if view.dim() == 2 else view.numel()


def _bits(t: torch.Tensor) -> torch.Tensor:
    """The raw bits of a float tensor (NaN equal to NaN), as integers, on the CPU."""
    as_int = {2: torch.int16, 4: torch.int32, 8: torch.int64}[t.element_size()]
    return t.detach().contiguous().view(as_int).cpu()


@contextlib.contextmanager
def nan_for_missing_other(enabled: bool = True):
    """Under the interpreter: masked lanes of a load without ``other=`` read as NaN (the GPU leaves them undefined)."""
    try:
        from triton.runtime import interpreter
    except ImportError:  # pragma: no cover
        enabled = False
    if not enabled or not hasattr(interpreter, "InterpreterBuilder"):
        yield
        return
    import numpy as np

    builder = interpreter.InterpreterBuilder
    original = builder.create_masked_load

    def create_masked_load(self, ptrs, mask, other, *args, **kwargs):
        if other is None:
            dtype_tt = ptrs.get_element_ty()
            dtype_np = interpreter._get_np_dtype(dtype_tt)
            if np.issubdtype(dtype_np, np.floating):
                other = interpreter.TensorHandle(np.full_like(ptrs.data, np.nan, dtype=dtype_np), dtype_tt)
        return original(self, ptrs, mask, other, *args, **kwargs)

    builder.create_masked_load = create_masked_load
    try:
        yield
    finally:
        builder.create_masked_load = original


# --------------------------------------------------------------------------- running the cases (in the child)

#: launch(case, kernel, buffers) -> outputs: the kernel launched as the package launcher would.
Launch = Callable[[Case, object, Buffers], Outputs]


def _nan_where_finite(outputs: Outputs, expected: Outputs) -> bool:
    for name, want in expected.items():
        got = outputs.get(name)
        if isinstance(got, torch.Tensor) and got.shape == want.shape:
            if (torch.isnan(got.detach().cpu().double()) & torch.isfinite(want)).any():
                return True
    return False


def _launch(case, kernel, launch, guard_value=float("nan"), nan_other=True):
    buffers = Buffers(guard_value)
    with nan_for_missing_other(nan_other and isolate.interpreted()):
        outputs = launch(case, kernel, buffers)
    return {k: v.detach().cpu().clone() for k, v in outputs.items()}, buffers.problems()


def run_kernel_cases(
    exercise: str, kernel, cases: Sequence[Case], launch: Launch, expected: Callable[[Case], Outputs], example: str,
) -> list[Outputs] | Feedback:
    """Launch ``kernel`` on every case in guarded buffers; runs in the checker's child process.

    Returns:
        The outputs of every case (CPU copies), or a :class:`Feedback` when the
        kernel raised, wrote where it must not, read outside a tensor, or let
        the undefined lanes of a masked load without ``other=`` into a result.
    """
    name = name_of(kernel)
    results = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # float16 overflow warnings of the interpreter: the feedback says it
        for case in cases:
            isolate.progress(f"the case {case.label}")
            try:
                outputs, problem = _launch(case, kernel, launch)
                if problem is not None:
                    return wrong(exercise, f"on {case.label}, {name} ran but {problem}.")
                want = expected(case)
                if _nan_where_finite(outputs, want):
                    found = _explain_nan(exercise, kernel, case, launch, want)
                    if found is not None:
                        return found
            except Exception as error:  # noqa: BLE001 - any learner error becomes feedback
                if is_not_implemented(error):
                    return not_done(exercise, name)
                rejected = compile_error_message(kernel, error)
                if rejected is not None:  # on a GPU the kernel is compiled here, in the child
                    return wrong(exercise, rejected)
                if "illegal memory access" in str(error) or "illegal address" in str(error):
                    return wrong(exercise, f"on {case.label}, your kernel {name} read or wrote outside the tensor: "
                                 "CUDA stopped it with an illegal memory access. Check the row offset "
                                 "(`row * row_stride`) and the masks (`cols < N`, also on the last row).")
                return wrong(exercise, f"on {case.label}: " + describe_error(name, error, example))  # says RAISED
            results.append(outputs)
    return results


def gpu_rejects(name: str, line: int | None, text: str, message: str) -> str:
    """The message for a kernel the GPU compiler refuses (from the CPU's compile check or a GPU's own compile)."""
    where = f" at line {line} of your cell, `{text}`" if line else ""
    lines = message.strip().splitlines()
    return (f"the interpreter runs {name}, but Triton's compiler for a GPU rejects it{where}: "
            f"{lines[-1] if lines else ''} (The interpreter is lenient; the GPU is not: e.g. a loop variable must "
            "keep its dtype, so start an accumulator as `tl.zeros(..., dtype=tl.float32)` or `0.0`, and a "
            "block's width must be a `tl.constexpr`.)")


def compile_error_message(kernel, error: BaseException) -> str | None:
    """For a Triton CompilationError (a GPU compiling the learner's kernel): the message with its line; else None."""
    try:
        from triton.compiler.errors import CompilationError
    except ImportError:  # pragma: no cover
        return None
    found = next((e for e in [error, error.__cause__, error.__context__] if isinstance(e, CompilationError)), None)
    if found is None:
        return None
    line, text = None, ""
    node = getattr(found, "node", None)
    try:
        lines, first = inspect.getsourcelines(kernel.fn)
        def_index = next((i for i, t in enumerate(lines) if t.lstrip().startswith("def ")), 0)
        if node is not None and getattr(node, "lineno", None) is not None:
            index = def_index + node.lineno - 1
            line, text = first + index, lines[index].strip()
    except (OSError, TypeError, IndexError):
        pass
    cause = found.__cause__ or found
    return gpu_rejects(name_of(kernel), line, text, f"{type(cause).__name__}: {cause}" if cause is not found else str(found))


def _explain_nan(exercise, kernel, case, launch, want) -> Feedback | None:
    """NaN where a number was expected: an other-less masked load, or a read outside a tensor? None if neither."""
    name = name_of(kernel)
    if isolate.interpreted():
        outputs, _ = _launch(case, kernel, launch, nan_other=False)
        if not _nan_where_finite(outputs, want):
            source = source_of(kernel) or ""
            loads = masked_loads_without_other(source)
            first = _first_line(kernel)
            where = (f"line {first + loads[0][0] - 1} of your cell, `{loads[0][1]}`, has a mask but no `other=`"
                     if loads else "a masked load has no `other=`")
            return wrong(exercise, f"on {case.label}, {where}: on a GPU its masked lanes hold whatever memory "
                         "held (the interpreter happens to give 0), and here they reached the result. "
                         "Pass `other=0` (the value that adds nothing to a sum).")
    outputs, problem = _launch(case, kernel, launch, guard_value=1.0)
    if problem is not None:
        return wrong(exercise, f"on {case.label}, {name} ran but {problem}.")
    if not _nan_where_finite(outputs, want):
        return wrong(exercise, f"on {case.label}, {name} read outside its tensors: its result depends on the memory "
                     "just before or after a tensor (or between rows), which the checker filled with NaN. Check the "
                     "row offset (`row * row_stride`, not `row * N` or `row * BLOCK_SIZE`) and the masks of every "
                     "`tl.load` (`cols < N`).")
    return None


# --------------------------------------------------------------------------- in the parent


def check_kernel(exercise: str, kernel, reference, target: tuple[str, str], signatures, mask_example: str) -> Feedback:
    """Judge a learner's kernel: preflight, then the GPU compile and the isolated run, at the same time.

    Args:
        exercise: name shown in the feedback.
        kernel: the learner's ``@triton.jit`` kernel.
        reference: the package kernel with the signature the launcher expects.
        target: (module, function) run in the child with the rebuilt kernel; returns a Feedback.
        signatures: [(signature, constexprs)] of the package kernel's parameters, for the GPU compile.
        mask_example: see :func:`preflight`.

    Returns:
        A :class:`Feedback`; never raises.
    """
    early = preflight(exercise, kernel, reference, mask_example)
    if early is not None:
        return early
    name = name_of(kernel)
    spec = isolate.kernel_spec(kernel)
    names = list(inspect.signature(kernel.fn).parameters)
    ours = list(inspect.signature(reference.fn).parameters)
    renamed = [({names[ours.index(k)]: v for k, v in sig.items()}, {names[ours.index(k)]: v for k, v in const.items()})
               for sig, const in signatures]
    compiling = isolate.start_gpu_compile(spec, renamed)
    outcome = isolate.wait(isolate.start(target, [isolate.KernelSource(spec)], interpret=isolate.interpreted()),
                           isolate.CASE_TIME_LIMIT_S)
    if outcome.kind in ("crashed", "timeout"):
        isolate.cancel_gpu_compile(compiling)
        return isolate.outcome_feedback(exercise, outcome, f"your kernel {name}")
    compiled = isolate.finish_gpu_compile(compiling)
    raised = outcome.kind == "done" and RAISED in outcome.value.message  # the interpreter's own error says more
    if compiled is not None and not compiled["ok"] and not raised:
        return wrong(exercise, gpu_rejects(name, compiled.get("line"), compiled.get("text", ""), compiled["message"]))
    return isolate.outcome_feedback(exercise, outcome, f"your kernel {name}")

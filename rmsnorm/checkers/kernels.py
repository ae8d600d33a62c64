"""How a learner's kernel is judged: read it, compile it for a GPU, run it where it can do no harm.

1. :func:`preflight` reads the kernel (never runs it): a skeleton says "not
   done yet", a wrong signature or an unmasked block access is named with its
   line, before anything is launched.
2. :func:`check_kernel` then, at the same time, (a) compiles the kernel for a
   CUDA target on the CPU (:mod:`rmsnorm.checkers.gpu_compile`; only under the
   interpreter: on a GPU it is compiled for real) and (b) runs the exercise's
   cases in a child process (:mod:`rmsnorm.checkers.isolate`), so that a crash
   or an endless loop becomes a message.
3. In the child, :func:`run_kernel_cases` launches the kernel on every case
   with each tensor inside a NaN-guarded buffer (:mod:`rmsnorm.checkers.guards`): NaN before and after it (and in
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
import inspect
import textwrap
import warnings
from collections.abc import Callable, Sequence

import torch

from . import gpu_compile, isolate
from .diagnose import Case, Outputs
from .guards import Buffers, nan_for_missing_other
from .shipping import KernelSource, is_kernel, kernel_spec
from .feedback import Feedback, describe_error, is_not_implemented, name_of, not_done, source_of, wrong

#: Words of :func:`describe_error` that mark a kernel that raised (its message beats the GPU compiler's).
RAISED = " raised "


# --------------------------------------------------------------------------- reading the kernel


def first_line(kernel) -> int:
    """Line of the kernel's decorator in its cell or file (1 when the source cannot be read)."""
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
    if not is_kernel(kernel):
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
    first = first_line(kernel)
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
                rejected = gpu_compile.compile_error_message(kernel, error, example)
                if rejected is not None:  # on a GPU the kernel is compiled here, in the child
                    return wrong(exercise, rejected)
                if "illegal memory access" in str(error) or "illegal address" in str(error):
                    return wrong(exercise, f"on {case.label}, your kernel {name} read or wrote outside the tensor: "
                                 "CUDA stopped it with an illegal memory access. Check the row offset "
                                 "(`row * row_stride`) and the masks (`cols < N`, also on the last row).")
                return wrong(exercise, f"on {case.label}: " + describe_error(name, error, example))  # says RAISED
            results.append(outputs)
    return results


def _explain_nan(exercise, kernel, case, launch, want) -> Feedback | None:
    """NaN where a number was expected: an other-less masked load, or a read outside a tensor? None if neither."""
    name = name_of(kernel)
    if isolate.interpreted():
        outputs, _ = _launch(case, kernel, launch, nan_other=False)
        if not _nan_where_finite(outputs, want):
            source = source_of(kernel) or ""
            loads = masked_loads_without_other(source)
            first = first_line(kernel)
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


def check_kernel(exercise: str, kernel, reference, target: tuple[str, str], signatures, mask_example: str,
                 extra_args: tuple = (), limit_s: float | None = None) -> Feedback:
    """Judge a learner's kernel: preflight, then the GPU compile and the isolated run, at the same time.

    Args:
        exercise: name shown in the feedback.
        kernel: the learner's ``@triton.jit`` kernel.
        reference: the package kernel with the signature the launcher expects.
        target: (module, function) run in the child as ``target(rebuilt_kernel, *extra_args)``; returns a Feedback.
        signatures: [(signature, constexprs)] of the package kernel's parameters, for the GPU compile.
        mask_example: see :func:`preflight`.
        extra_args: more arguments for ``target`` (picklable).
        limit_s: seconds the child may take; default :data:`isolate.CASE_TIME_LIMIT_S`.

    Returns:
        A :class:`Feedback`; never raises.
    """
    early = preflight(exercise, kernel, reference, mask_example)
    if early is not None:
        return early
    name = name_of(kernel)
    spec = kernel_spec(kernel)
    names = list(inspect.signature(kernel.fn).parameters)
    ours = list(inspect.signature(reference.fn).parameters)
    renamed = [({names[ours.index(k)]: v for k, v in sig.items()}, {names[ours.index(k)]: v for k, v in const.items()})
               for sig, const in signatures]
    compiling = gpu_compile.start_gpu_compile(spec, renamed)
    outcome = isolate.wait(isolate.start(target, [KernelSource(spec), *extra_args], interpret=isolate.interpreted()),
                           isolate.CASE_TIME_LIMIT_S if limit_s is None else limit_s)
    if outcome.kind in ("crashed", "timeout"):
        gpu_compile.cancel_gpu_compile(compiling)
        return isolate.outcome_feedback(exercise, outcome, f"your kernel {name}")
    compiled = gpu_compile.finish_gpu_compile(compiling)
    raised = outcome.kind == "done" and RAISED in outcome.value.message  # the interpreter's own error says more
    if compiled is not None and not compiled["ok"] and not raised:
        return wrong(exercise, gpu_compile.gpu_rejects(name, compiled.get("line"), compiled.get("text", ""), compiled["message"]))
    return isolate.outcome_feedback(exercise, outcome, f"your kernel {name}")

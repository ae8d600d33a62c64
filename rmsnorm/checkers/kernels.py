"""Before a learner's kernel is launched: is it a kernel, with the launcher's signature, masked?

These checks read the kernel's source (never run it), so that a skeleton says
"not done yet" instead of failing to compile on a GPU, and an unmasked load or
store is named *before* it reads or writes past the end of a row (on the CPU
interpreter that would touch memory outside the tensor).

Then :func:`run_kernel_cases` launches the kernel through the package's own
launcher (``forward_op(..., kernel=...)`` and friends) on every case, with
NaN-filled outputs, and catches any exception as a feedback.

Source: solutions/03_forward_kernel.ipynb, 04_backward_derivation.ipynb,
05_gamma_reduction.ipynb, 08_n_vs_block_exercise.ipynb.
"""

from __future__ import annotations

import ast
import inspect
import textwrap
import warnings
from collections.abc import Callable, Sequence

from ..testing import poisoned_outputs
from .diagnose import Case, Outputs
from .feedback import Feedback, describe_error, is_not_implemented, name_of, not_done, source_of, wrong


def preflight(exercise: str, kernel, reference) -> Feedback | None:
    """Static checks of a learner's kernel against the package kernel it replaces.

    Args:
        exercise: name shown in the feedback.
        kernel: the learner's ``@triton.jit`` function.
        reference: the package kernel whose signature the launcher expects.

    Returns:
        A "not done yet" or "wrong" :class:`Feedback`, or None when the kernel
        may be launched.
    """
    name = name_of(kernel)
    if not hasattr(kernel, "fn") or not callable(getattr(kernel, "__getitem__", None)):
        return wrong(exercise, f"{name} is not a Triton kernel: put `@triton.jit` on the line above `def`.")
    source = source_of(kernel)
    if source is not None and "NotImplementedError" in source:
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
    if source is not None:
        for line, call in unmasked_accesses(source):
            return wrong(
                exercise,
                f"line {line} of {name}, `{call}`, has no mask. With N = 257 the lanes 257…511 of the block "
                "would read or write past the row (past the tensor on the last row): pass `mask=` "
                "(e.g. `cols < N`), and `other=0` for a load.",
            )
    return None


def unmasked_accesses(source: str) -> list[tuple[int, str]]:
    """Every ``tl.load``/``tl.store`` of a block of pointers that has no mask.

    A pointer is a *block* when its expression uses ``tl.arange`` or a name
    assigned (directly or through other names) from one; ``tl.store(rstd_ptr +
    row, rstd)`` is a single element and needs no mask.

    Returns:
        (line number within the kernel's source, the call's text) per access.
    """
    tree = ast.parse(textwrap.dedent(source))
    blocks: set[str] = set()

    def is_block(node) -> bool:
        for sub in ast.walk(node):
            if isinstance(sub, ast.Name) and sub.id in blocks:
                return True
            if isinstance(sub, ast.Attribute) and sub.attr == "arange":
                return True
        return False

    assigns = [n for n in ast.walk(tree) if isinstance(n, (ast.Assign, ast.AugAssign, ast.AnnAssign))]
    for _ in range(len(assigns) + 1):  # names may depend on later names inside loops
        before = len(blocks)
        for node in assigns:
            if node.value is not None and is_block(node.value):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                blocks.update(t.id for target in targets for t in ast.walk(target) if isinstance(t, ast.Name))
        if len(blocks) == before:
            break
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in ("load", "store"):
            positional_mask = 2 if node.func.attr == "store" else 1  # store(ptr, value, mask); load(ptr, mask)
            has_mask = len(node.args) > positional_mask or any(k.arg == "mask" for k in node.keywords)
            pointer = node.args[0] if node.args else next((k.value for k in node.keywords if k.arg == "pointer"), None)
            if not has_mask and pointer is not None and is_block(pointer):
                found.append((node.lineno, ast.unparse(node)))
    return sorted(found)


def run_kernel_cases(
    exercise: str, kernel, cases: Sequence[Case], launch: Callable[[Case, object], Outputs]
) -> list[Outputs] | Feedback:
    """Launch ``kernel`` on every case through ``launch(case, kernel)``, outputs NaN-filled.

    Returns:
        The outputs of every case, or a :class:`Feedback` when the kernel
        raised (NotImplementedError → "not done yet", anything else → "wrong").
    """
    results = []
    with poisoned_outputs(), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # float16 overflow warnings of the interpreter: the feedback says it
        for case in cases:
            try:
                results.append(launch(case, kernel))
            except Exception as error:  # noqa: BLE001 - any learner error becomes feedback
                if is_not_implemented(error):
                    return not_done(exercise, name_of(kernel))
                return wrong(exercise, f"on {case.label}: " + describe_error(name_of(kernel), error))
    return results

"""Reading a learner's kernel before it runs: the skeleton, the signature, unmasked accesses, loads without ``other=``.

:func:`preflight` never runs the kernel: a skeleton says "not done yet", a
wrong signature (a block width without ``: tl.constexpr`` included) or an
unmasked block access is named with its line, before anything is launched
(:func:`rmsnorm_course.checkers.kernels.check` calls it first). :func:`rows_without_int64` finds a row index
multiplied by a stride in int32; kernels.check names it once the kernel passes, where the exercise asks for int64.

Source: solutions/03_forward_kernel.ipynb … 10_one_pass_backward.ipynb.
"""

from __future__ import annotations

import ast
import inspect
import textwrap

from .feedback import Feedback, name_of, not_done, source_of, wrong
from .shipping import is_kernel

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
    learner = inspect.signature(kernel.fn).parameters
    for p in by_keyword:
        if "constexpr" not in str(learner[p].annotation):
            return wrong(
                exercise,
                f"the signature of {name}, line {first + _parameter_line(source, p) - 1} of your cell, declares "
                f"`{p}` without `: tl.constexpr`: write `{p}: tl.constexpr`. A block's width (`tl.arange(0, {p})`) "
                "must be known when the kernel compiles, and only a `tl.constexpr` parameter is.",
            )
    for line, call in unmasked_accesses(source):
        return wrong(
            exercise,
            f"line {first + line - 1} of your cell, `{call}`, has no mask. {mask_example}: pass `mask=`, "
            "and `other=0` for a load.",
        )
    return None


def _parameter_line(source: str, parameter: str) -> int:
    """Line of ``parameter`` in the kernel's ``def`` (within the kernel's source; the ``def`` line if not found)."""
    for node in ast.walk(ast.parse(textwrap.dedent(source))):
        if isinstance(node, ast.FunctionDef):
            return next((arg.lineno for arg in node.args.args if arg.arg == parameter), node.lineno)
    return 1


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


# --------------------------------------------------------------------------- row offsets in int32


def _is_int64_cast(node) -> bool:
    """``v.to(tl.int64)``, ``tl.cast(v, tl.int64)`` (or ``v.to(dtype=tl.int64)``)."""
    if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in ("to", "cast")):
        return False
    args = [*node.args, *(k.value for k in node.keywords)]
    return any(isinstance(a, ast.Attribute) and a.attr in ("int64", "uint64") for a in args)


def _mentions(node, names: set[str]) -> bool:
    return any(isinstance(sub, ast.Name) and sub.id in names for sub in ast.walk(node))


def _program_id(node) -> bool:
    return any(isinstance(sub, ast.Call) and isinstance(sub.func, ast.Attribute) and sub.func.attr == "program_id"
               for sub in ast.walk(node))


def _widened(node, wide: set[str]) -> bool:
    return any(_is_int64_cast(sub) for sub in ast.walk(node)) or _mentions(node, wide)


def rows_without_int64(source: str) -> list[tuple[int, str, str]]:
    """Every row index (from ``tl.program_id`` or a ``range`` loop's variable) multiplied by a stride in int32.

    A name is a row index when it is assigned from ``tl.program_id``, is a ``for … in range(…)`` variable, or is
    assigned from such a name; it is widened when an assignment of it casts to int64 (``.to(tl.int64)``,
    ``tl.cast(…, tl.int64)``) or uses a widened name. A product whose one side is a parameter named ``*stride*``
    and whose other side uses a row index, with no cast to int64 and no widened name, is computed in int32.

    Returns:
        (line number within the kernel's source, the line's statement, the row index's name) per product.
    """
    tree = ast.parse(textwrap.dedent(source))
    function = next((n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)), None)
    if function is None:
        return []
    strides = {a.arg for a in function.args.args if "stride" in a.arg}
    rows = {n.target.id for n in ast.walk(tree) if isinstance(n, ast.For) and isinstance(n.target, ast.Name)
            and isinstance(n.iter, ast.Call) and isinstance(n.iter.func, ast.Name) and n.iter.func.id == "range"}
    assigns = [(t.id, n.value) for n in ast.walk(tree) if isinstance(n, (ast.Assign, ast.AnnAssign, ast.AugAssign))
               and n.value is not None
               for target in (n.targets if isinstance(n, ast.Assign) else [n.target])
               for t in ast.walk(target) if isinstance(t, ast.Name)]
    wide: set[str] = set()
    for _ in range(len(assigns) + 1):  # names may depend on later names inside loops
        before = (len(rows), len(wide))
        for name, value in assigns:
            if _program_id(value) or _mentions(value, rows):
                rows.add(name)
            if _widened(value, wide):
                wide.add(name)
        if (len(rows), len(wide)) == before:
            break
    statements = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.stmt) and not isinstance(node, (ast.FunctionDef, ast.For, ast.While, ast.If)):
            for sub in ast.walk(node):
                statements.setdefault(id(sub), node)
    found, seen = [], set()
    for node in ast.walk(tree):
        if not (isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mult)):
            continue
        for index, stride in ((node.left, node.right), (node.right, node.left)):
            if not (isinstance(stride, ast.Name) and stride.id in strides) or _widened(index, wide):
                continue
            named = next((sub.id for sub in ast.walk(index) if isinstance(sub, ast.Name) and sub.id in rows), None)
            if named is None and not _program_id(index):
                continue
            statement = statements.get(id(node), node)
            if statement.lineno not in seen:
                seen.add(statement.lineno)
                found.append((statement.lineno, ast.unparse(statement), named or "tl.program_id(0)"))
    return sorted(found)

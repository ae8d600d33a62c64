"""Triton's shape errors of `tl.load` and `tl.store` in plain words: both shapes, and the usual fix.

Triton refuses a store whose value (or mask) has another shape than its pointers ("Expected pointer
argument to have shape [32, 32] but got [32]"), a block stored at, or a block mask given to, a single
address, and a mask whose shape does not fit the pointers' ("incompatible dimensions at index 1: 32 and
16"), and a block as wide as a runtime value (`tl.arange(0, N)`: "arange's arguments must be of type
tl.constexpr"). Its words name neither the value nor what to do; :func:`words` does, from the error's text and the
learner's line. One translator for every kernel exercise: the interpreter's errors
(:func:`~.feedback.describe_error`) and a GPU compiler's (:func:`~.gpu_compile.gpu_rejects`) go through it.

Source: triton/language/semantic.py (load, store, broadcast_impl_value) at the pinned Triton.
"""

from __future__ import annotations

import ast
import re

_STORE_SHAPE = re.compile(r"Expected pointer argument to have shape (.+?) but got (.+)$")
_SCALAR_POINTER = re.compile(r"(Value|Mask|Other) argument cannot be block type if pointer argument is not a block")
_INCOMPATIBLE = re.compile(r"incompatible dimensions at index (\d+): (\d+) and (\d+)")
_ARANGE_CONSTEXPR = "arange's arguments must be of type tl.constexpr"
_ARANGE_CALL = re.compile(r"tl\.arange\(([^()]*)\)")


def _shape(text: str) -> str:
    """"['constexpr[32]', 'constexpr[32]']" (or "[32, 32]") → "(32, 32)"."""
    sizes = re.findall(r"\d+", text)
    return "(" + ", ".join(sizes) + ("," if len(sizes) == 1 else "") + ")"


def _call(line: str) -> tuple[str, list[str]] | None:
    """('store' or 'load', its arguments as written) for the `tl.store`/`tl.load` call of ``line``, or None."""
    code = line.split("#")[0].strip()
    try:
        tree = ast.parse(code)
    except SyntaxError:
        return None
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in ("store", "load"):
            args = [ast.unparse(a) for a in node.args]
            args += [f"{k.arg}={ast.unparse(k.value)}" for k in node.keywords if k.arg == "mask"]
            return node.func.attr, args
    return None


def _arange(line: str) -> str:
    """A block's width made from a runtime value (``tl.arange(0, N)``): what a block is, and the fix."""
    found = _ARANGE_CALL.search(line)
    call = f"`{found.group(0)}`" if found is not None else "this `tl.arange`"
    return (f"{call} takes its bounds from a runtime value: a block's width must be known when the kernel is "
            "compiled, and be a power of two, so `tl.arange` takes compile-time bounds (`tl.constexpr`) only; N is a "
            "runtime argument. Use the kernel's BLOCK_SIZE (the launcher passes next_power_of_2(N)), "
            "`cols = tl.arange(0, BLOCK_SIZE)`, and switch off the lanes past the row with the mask `cols < N`.")


def words(message: str, line: str = "") -> str | None:
    """What a shape error of a load or store means, naming both shapes and the usual fix; None for other errors.
    A block's width from a runtime value (``tl.arange(0, N)``) is named too.

    Args:
        message: Triton's message (its last line will do).
        line: the learner's line that raised it (names the pointer and the value), or "".
    """
    if _ARANGE_CONSTEXPR in message:
        return _arange(line)
    call = _call(line) if line else None
    kind, args = call if call is not None else ("store" if "store" in line else "load", [])
    pointer = f"`{args[0]}`" if args else "its pointers"
    value = f"`{args[1]}`" if kind == "store" and len(args) > 1 and not args[1].startswith("mask=") else "the value"
    found = _STORE_SHAPE.search(message)
    if found is not None:
        block, pointers = _shape(found.group(1)), _shape(found.group(2))
        tile = args[1] if value != "the value" and args[1].isidentifier() else "tile"
        return (f"this `tl.store` writes {value} (or uses a mask) of shape {block} through the pointers {pointer}, of "
                f"shape {pointers}: a store writes one value per pointer, so value, mask and pointers must have one "
                f"shape. A 2-D tile stored through a row of pointers must be reduced first (`tl.sum({tile}, axis=0)` "
                f"gives one value per column); or, if every element of the tile has its place, build 2-D pointers "
                f"from `rows[:, None]` and `cols[None, :]`.")
    found = _SCALAR_POINTER.search(message)
    if found is not None:
        what = {"Value": f"a block ({value})", "Mask": "a block mask", "Other": "a block `other=`"}[found.group(1)]
        fix = ("reduce the block to one number first (`tl.sum(block, axis=0)`), or write it through a block of "
               "pointers (`ptr + cols`, with a mask)" if found.group(1) == "Value" else
               "drop the mask (a single address needs none), or make the address a block (`ptr + cols`)")
        return (f"this `tl.{kind}` gets {what} with a single address, {pointer} (a scalar pointer, shape ()): "
                f"one address holds one number: {fix}.")
    found = _INCOMPATIBLE.search(message)
    if found is not None and call is not None and (any(a.startswith("mask=") for a in args) or "other=" in line):
        index, left, right = found.groups()
        return (f"the mask (or `other=`) of this `tl.{kind}` and its pointers {pointer} have shapes that do not fit "
                f"together: along dimension {index}, {left} against {right}. A mask must have the pointers' shape or "
                "broadcast to it: build both from the same offsets, and for a 2-D block combine the 1-D ones with "
                "`[:, None]` and `[None, :]` (e.g. `(rows[:, None] < M) & (cols[None, :] < N)`).")
    return None

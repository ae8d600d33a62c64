"""Compile a learner's kernel for a CUDA target while it runs in the interpreter: the parent's side.

The compiler needs Triton imported with the interpreter off, so it runs in a
server process of its own (:mod:`rmsnorm_course.checkers.compile_server`, started once
per session): the checker hands it the kernel's source, runs the cases at the
same time, then reads the answer. On a GPU machine nothing is started: the
kernel is compiled for real in the checker's child, and
:func:`compile_error_message` words its error the same way.

Source: solutions/03_forward_kernel.ipynb … 08_n_vs_block_exercise.ipynb;
Triton's ``triton.compile`` and ``triton.compiler.ASTSource``.
"""

from __future__ import annotations

import ast
import inspect
import json
import os
import pickle
import re
import select
import subprocess
import sys
import textwrap
import time

from rmsnorm.device import interpreter_active as interpreted
from . import compile_server, shape_errors
from .feedback import caused_by, name_of

#: Seconds the compile server may take for one kernel (one compilation per dtype; about 0.5 s each, cached after).
COMPILE_TIME_LIMIT_S = 120.0

_COMPILER: subprocess.Popen | None = None
_JOBS = 0


def _compiler() -> subprocess.Popen:
    """The compile server (one per session): a fresh interpreter with Triton's interpreter off."""
    global _COMPILER
    if _COMPILER is None or _COMPILER.poll() is not None:
        env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
        _COMPILER = subprocess.Popen(
            [sys.executable, compile_server.__file__], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL, env=env,
        )
    return _COMPILER


def _stop_compiler() -> None:
    global _COMPILER
    if _COMPILER is not None:
        _COMPILER.kill()
        _COMPILER.wait()
        _COMPILER = None


def start_gpu_compile(spec: dict, signatures):
    """Hand a kernel to the compile server for a CUDA target; None on a GPU (it is compiled for real there).

    Returns:
        The server, which answers in :func:`finish_gpu_compile`, or None.
    """
    if not interpreted():
        return None
    global _JOBS
    _JOBS += 1
    try:
        server = _compiler()
        job = pickle.dumps({"job": _JOBS, "kernel": spec, "signatures": signatures})
        server.stdin.write(len(job).to_bytes(8, "big") + job)
        server.stdin.flush()
    except (OSError, pickle.PicklingError):
        _stop_compiler()
        return None
    return server, _JOBS


def cancel_gpu_compile(server) -> None:
    """Forget a job handed to the server (the run failed first): the server is stopped, a new one starts next time."""
    if server is not None:
        _stop_compiler()


def finish_gpu_compile(server, limit_s: float | None = None) -> dict | None:
    """The compile result ({"ok": True} or the error), or None when it could not run (no compiler, time-out)."""
    if server is None:
        return None
    server, job = server
    deadline = time.monotonic() + (limit_s or COMPILE_TIME_LIMIT_S)
    while True:  # answers to jobs nobody waited for (an interrupted check) are skipped
        ready, _, _ = select.select([server.stdout], [], [], max(0.0, deadline - time.monotonic()))
        line = server.stdout.readline() if ready else b""
        try:
            result = json.loads(line.decode()) if line else None
        except ValueError:
            result = None
        if result is None:
            _stop_compiler()
            return None
        if result.get("job") == job:
            return result if result.get("ok") is not None else None


#: The accumulator most exercises start before a loop (an :class:`~.spec.ExerciseSpec` may declare its own).
ACCUMULATOR = "tl.zeros([BLOCK_SIZE], dtype=tl.float32)"


def accumulated_in_loop(source: str, variable: str) -> bool | None:
    """Whether a loop of ``source`` adds to ``variable`` (``v += …``, ``v = v + …``); None when unreadable."""
    try:
        tree = ast.parse(textwrap.dedent(source))
    except SyntaxError:
        return None
    for loop in (n for n in ast.walk(tree) if isinstance(n, (ast.For, ast.While))):
        for node in (n for statement in loop.body for n in ast.walk(statement)):
            if isinstance(node, ast.AugAssign) and isinstance(node.target, ast.Name) and node.target.id == variable:
                return True
            assigned = isinstance(node, ast.Assign) and any(
                isinstance(t, ast.Name) and t.id == variable for t in node.targets)
            if assigned and any(isinstance(v, ast.Name) and v.id == variable for v in ast.walk(node.value)):
                return True
    return False


def read_in_a_later_loop(source: str, variable: str) -> bool:
    """Whether ``variable`` is assigned in one loop of ``source`` and read, never assigned, in another loop
    (neither inside the other): pass 2 reusing pass 1's block."""
    try:
        tree = ast.parse(textwrap.dedent(source))
    except SyntaxError:
        return False
    loops = [n for n in ast.walk(tree) if isinstance(n, (ast.For, ast.While))]

    def names(loop, kind) -> bool:
        return any(isinstance(n, ast.Name) and n.id == variable and isinstance(n.ctx, kind)
                   for statement in loop.body for n in ast.walk(statement))

    def inside(a, b) -> bool:
        return any(n is a for n in ast.walk(b))

    return any(names(a, ast.Store) and names(b, ast.Load) and not names(b, ast.Store)
               and not inside(a, b) and not inside(b, a) for a in loops for b in loops if a is not b)


def gpu_rejects(name: str, line: int | None, text: str, message: str, example: str = "", source: str = "",
                accumulator: str = ACCUMULATOR) -> str:
    """The message for a kernel the GPU compiler refuses (from the CPU's compile check or a GPU's own compile).

    Under the interpreter it says that the interpreter ran the kernel; on a GPU, where nothing
    ran, it says only that the kernel does not compile, and shows a call (``example``) that
    gives the whole compiler error. ``source`` (the kernel's text) tells an accumulator made inside a loop from a
    variable merely defined there; ``accumulator`` is the exercise's own (``tl.zeros((BLOCK_M, BLOCK_N), …)`` in 05).
    """
    where = f" at line {line} of your cell, `{text}`" if line else ""
    # Both wordings say REJECTS: kernels.verdict recognises a GPU's own compile error by it.
    lines = message.strip().splitlines()
    last = lines[-1] if lines else ""
    made_inside = _MADE_INSIDE.search(message)
    if FLOOR_ON_FLOAT.search(message) and "//" in text:
        if interpreted():
            return f"the interpreter runs {name}, but {REJECTS}{where}: {last} {floor_division(text)}"
        return f"{name} does not compile: {REJECTS}{where}: {last} {floor_division(text)}"
    if made_inside:  # under the interpreter it ran, so the name exists: it is made inside a loop (or an `if`)
        # The error comes before the line here: "rejects it at line" stays the words of the other refusals.
        variable = made_inside.group(1)
        hint = (f"created inside a loop (or an `if`), and the compiler does not carry a variable made there past it: "
                f"{MADE_IN_LOOP} (`{variable} = {accumulator}` for a block, `0.0` for a "
                "single number), and inside the loop only add to it.")
        if source and accumulated_in_loop(source, variable) is False:  # not an accumulator: a value made in the loop
            hint = ("defined only inside a loop (or an `if`) and used after it, and the compiler does not carry a "
                    "variable made there past it: use it only inside the loop, or compute it before the loop "
                    "(from what exists there) if the code after the loop needs it.")
            if read_in_a_later_loop(source, variable):
                hint = (f"made in one loop and read in another, which the compiler does not allow: the other loop "
                        f"sees no `{variable}` (the interpreter hands it what the earlier loop left: for a block, "
                        f"the last block). Make `{variable}` where that loop sees it: before both loops if it is the "
                        "same on every turn (a row's pointer), inside the loop that reads it if it changes with the "
                        "block (a block of x: load it there).")
        if interpreted():
            return f"the interpreter runs {name}, but {REJECTS}: {last}{where}. `{variable}` is {hint}"
        how = f" To see the whole compiler error, call it yourself, e.g. `{example}`." if example else ""
        return f"{name} does not compile: {REJECTS}: {last}{where}. If `{variable}` is {hint}{how}"
    reshaped = _LOOP_SHAPE.search(message)
    if reshaped is not None and ("[" in reshaped.group(2)) != ("[" in reshaped.group(3)):
        variable, before, _ = reshaped.groups()
        turned = ("starts as a block before the loop and is given a single number inside it (a `tl.sum` assigned "
                  "to it?)" if "[" in before else
                  "starts as a single number before the loop and is given a block inside it")
        ran = f"the interpreter runs {name}, but " if interpreted() else f"{name} does not compile: "
        overwritten = ""
        if accumulated_in_loop(source, variable) is False:  # assigned, never added to: the last turn alone counts
            overwritten = (f" The loop also overwrites `{variable}` on every turn (it never adds to it), so in the "
                           "interpreter only the last turn counts.")
        return (f"{ran}{REJECTS}{where}: `{variable}` {turned}, and on a GPU a loop's variable keeps its shape: "
                f"{last}{overwritten} Keep `{variable}` as it starts, add to it inside the loop (`{variable} += …`), "
                "and reduce it once after the loop if you need one number (`tl.sum(…, axis=0)`).")
    shapes = shape_errors.words(last, text)
    if shapes is not None:  # a load's or store's shapes, in words (the interpreter raises the same error)
        ran = f"the interpreter runs {name}, but " if interpreted() else f"{name} does not compile: "
        return f"{ran}{REJECTS}{where}: {shapes} (Triton: {last})"
    if interpreted():
        return (f"the interpreter runs {name}, but {REJECTS}{where}: {last} (The "
                f"interpreter is lenient; the GPU is not: e.g. {_loop_variable(accumulator)}, and {_CONSTEXPR_WIDTH}.)")
    how = f" To see the whole compiler error, call it yourself, e.g. `{example}`." if example else ""
    return (f"{name} does not compile: {REJECTS}{where}: {last} (common causes: a keyword "
            f"the function does not take; {_loop_variable(accumulator)}; {_CONSTEXPR_WIDTH}.){how}")


#: Words of every message for a kernel the GPU compiler refuses.
REJECTS = "Triton's compiler for a GPU rejects it"
#: The two GPU-only rules a kernel that runs in the interpreter most often breaks.
def _loop_variable(accumulator: str = ACCUMULATOR) -> str:
    return ("a variable changed in a loop must keep its dtype and shape, so start an accumulator as what it "
            f"will be: `{accumulator}` for a block, `0.0` for a single number")


_LOOP_VARIABLE = _loop_variable()
_CONSTEXPR_WIDTH = "a block's width must be a `tl.constexpr`"
#: The compiler's words for a name it does not know: under the interpreter, one first assigned inside a loop.
_MADE_INSIDE = re.compile(r"NameError\W+(?:name )?'?(\w+)'? is not defined")
#: Triton's words for a loop's variable whose type (shape or dtype) changes in the loop.
_LOOP_SHAPE = re.compile(r"Loop-carried variable (\w+) has initial type (.+?) but is re-assigned to (.+?) in loop")
#: Triton's words for an integer-only operator (``//``, ``%``) on a float block or number.
FLOOR_ON_FLOAT = re.compile(r"unexpected type (fp|bf)\d+")


def floor_division(line: str) -> str:
    """What a message about ``//`` on float values says, with the learner's ``line`` written with ``/``."""
    code = line.split("#")[0].strip().replace("//", "/")
    return "`//` is integer (floor) division, which Triton refuses on float values: use `/`" + (
        f": `{code}`." if code else ".")

#: What a message about such a name asks for.
MADE_IN_LOOP = "create it once, before the loop, as what it will be"


def compile_error_message(kernel, error: BaseException, example: str = "",
                          accumulator: str = ACCUMULATOR) -> str | None:
    """For a Triton CompilationError (a GPU compiling the learner's kernel): the message with its line; else None.

    ``example`` is a call the learner can run to see the compiler's whole error (see :func:`gpu_rejects`).
    """
    try:
        from triton.compiler.errors import CompilationError
    except ImportError:  # pragma: no cover
        return None
    found = caused_by(error, CompilationError)
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
    message = f"{type(cause).__name__}: {cause}" if cause is not found else str(found)
    try:
        source = inspect.getsource(kernel.fn)
    except (OSError, TypeError, AttributeError):
        source = ""
    return gpu_rejects(name_of(kernel), line, text, message, example, source, accumulator)

"""Compile a learner's kernel for a CUDA GPU on a machine without one: the code the GPU compiler rejects.

Triton's interpreter runs some code that the compiler refuses (an accumulator
whose dtype changes inside a loop, a Python list in a kernel, a non-constexpr
``tl.arange`` bound…). Triton's compiler needs no GPU to turn a kernel into
PTX and cubin for a CUDA target (``triton.compile(ASTSource(...),
target=GPUTarget("cuda", 90, 32))``; ptxas ships inside the triton wheel), so
the checker compiles the learner's kernel for an H100-class target and reports
a compile error with its line.

This file runs as a *script* in a fresh interpreter (``python compile_server.py``),
because the compiler needs Triton imported with the interpreter off, and a
process that imported :mod:`rmsnorm` on a CPU has it on. It therefore imports
nothing from :mod:`rmsnorm`; :mod:`rmsnorm_course.checkers.isolate` uses
:func:`define_kernel` from here too.

It serves one job after another (started once per session, it saves the
interpreter's and Triton's start-up on every check). Each job on stdin: an
8-byte big-endian length, then a pickle of {"job": n, "kernel": spec, "signatures":
[(signature, constexprs), ...]}; each answer on stdout: one JSON line with the
same "job", and {"ok": true} or {"ok": false, "stage": ..., "message": ..., "line": n, "text": ...}.

Source: solutions/03_forward_kernel.ipynb … 08_n_vs_block_exercise.ipynb;
Triton's ``triton.compile`` and ``triton.compiler.ASTSource``.
"""

from __future__ import annotations

import importlib
import json
import pickle
import sys
import tempfile
from pathlib import Path

#: The target the kernels are compiled for when there is no GPU: CUDA, compute capability 9.0, 32-lane warps.
TARGET = ("cuda", 90, 32)


def define_kernel(spec: dict, folder: Path):
    """Define a shipped kernel again: its source goes to a file (Triton reads it), line numbers kept.

    Args:
        spec: {"name", "source", "first_line", "filename", "names"}; names maps a global to
            ("module", name) | ("kernel", spec) | ("value", value).
        folder: where the file goes.

    Returns:
        The ``@triton.jit`` object, compiled or interpreted as this process's Triton is set.
    """
    import triton
    import triton.language as tl

    namespace = {"__name__": f"learner_{spec['name']}", "triton": triton, "tl": tl}
    for name, (kind, value) in spec["names"].items():
        if kind == "module":
            namespace[name] = importlib.import_module(value)
        elif kind == "kernel":
            namespace[name] = define_kernel(value, folder)
        else:
            namespace[name] = value
    path = folder / f"{spec['name']}.py"
    text = "\n" * (spec["first_line"] - 1) + spec["source"]
    path.write_text(text, encoding="utf-8")
    exec(compile(text, str(path), "exec"), namespace)  # noqa: S102 - the learner's kernel, in its own process
    return namespace[spec["name"]]


def compile_all(spec: dict, signatures) -> dict:
    """Compile ``spec`` for every (signature, constexprs); the first failure, or ok."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource
    from triton.compiler.errors import CompilationError

    folder = Path(tempfile.mkdtemp(prefix="rmsnorm_gpu_compile_"))
    kernel = define_kernel(spec, folder)
    target = GPUTarget(*TARGET)
    for signature, constexprs in signatures:
        try:
            triton.compile(ASTSource(kernel, signature, constexprs), target=target)
        except CompilationError as error:
            cause = error.__cause__ or error
            line, text = None, ""
            node = getattr(error, "node", None)
            lines = spec["source"].splitlines()
            def_index = next((i for i, t in enumerate(lines) if t.lstrip().startswith("def ")), 0)
            if node is not None and getattr(node, "lineno", None) is not None:
                index = def_index + node.lineno - 1  # the compiler counts lines from `def`
                if 0 <= index < len(lines):
                    line, text = spec["first_line"] + index, lines[index].strip()
            return {"ok": False, "stage": "front end", "message": f"{type(cause).__name__}: {cause}",
                    "line": line, "text": text, "signature": signature}
        except Exception as error:  # noqa: BLE001 - a later stage (MLIR passes, LLVM, ptxas)
            message = str(error).strip().splitlines()
            missing = (
                isinstance(error, (FileNotFoundError, ImportError))
                or "ptxas" in str(error)
                and "not found" in str(error)
            )
            return {"ok": None if missing else False, "stage": "back end", "line": None, "text": "",
                    "message": f"{type(error).__name__}: {message[0] if message else ''}", "signature": signature}
    return {"ok": True}


def main() -> None:
    stdin, stdout = sys.stdin.buffer, sys.stdout
    while True:
        header = stdin.read(8)
        if len(header) < 8:
            return
        job = pickle.loads(stdin.read(int.from_bytes(header, "big")))
        try:
            answer = compile_all(job["kernel"], job["signatures"])
        except Exception as error:  # noqa: BLE001 - e.g. the kernel's source does not even define it
            answer = {"ok": None, "message": f"{type(error).__name__}: {error}"}
        answer["job"] = job["job"]
        stdout.write(json.dumps(answer) + "\n")
        stdout.flush()


if __name__ == "__main__":
    main()

"""Print the walk of exercise 03's checker through the package's files: file:function in call order.

Usage (on the CPU, Triton's interpreter)::

    PYTHONPATH=. python tools/call_walk.py

The parent's side is traced on a real ``check_forward_kernel`` call (its children run in
processes of their own); the child's side is traced by running the child's entry point,
``isolate._child_main``, in this process on the payload the parent ships. Every call from one
file of ``rmsnorm_course/checkers`` into another is a step, printed once, where it first happens.
At the end it says, per process, whether any file was entered again while it was still on the
stack (a call back into a file the walk had left) and which files each file is entered from.
"""

from __future__ import annotations

import multiprocessing
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT)]

import rmsnorm_course  # noqa: E402,F401  (first: the interpreter is switched on before triton is imported)
from rmsnorm.article.forward import rmsnorm_forward_kernel  # noqa: E402
from rmsnorm_course import checkers  # noqa: E402
from rmsnorm_course.checkers import ex03_forward, isolate  # noqa: E402

PACKAGE = str(ROOT / "rmsnorm_course" / "checkers") + "/"


def _file(frame) -> str | None:
    name = frame.f_code.co_filename
    return name[len(PACKAGE):] if name.startswith(PACKAGE) else None


def trace(run) -> tuple[list[str], list[str], dict[str, set[str]]]:
    """Run ``run()``; return its steps ("a.py:f → b.py:g"), its call-backs and each file's callers."""
    steps, backs, callers = [], [], {}

    def profile(frame, event, arg):
        if event != "call":
            return
        callee = _file(frame)
        if callee is None:
            return
        stack, below = [], frame.f_back
        while below is not None:
            name = _file(below)
            if name is not None and (not stack or stack[-1][0] != name):
                stack.append((name, below.f_code.co_name))
            below = below.f_back
        if not stack or stack[0][0] == callee:
            return
        caller, function = stack[0]
        step = f"{caller}:{function} → {callee}:{frame.f_code.co_name}"
        if step not in steps:
            steps.append(step)
        callers.setdefault(callee, set()).add(caller)
        if any(name == callee for name, _ in stack[1:]) and step not in backs:
            backs.append(step)

    sys.setprofile(profile)
    try:
        run()
    finally:
        sys.setprofile(None)
    return steps, backs, callers


def _child() -> None:
    """The child's side: ``isolate._child_main`` on what the parent ships for the package's own kernel."""
    import cloudpickle

    from rmsnorm_course.checkers import shipping
    from rmsnorm_course.checkers.run_loop import judge

    args = [ex03_forward.SPEC, shipping.KernelSource(shipping.kernel_spec(rmsnorm_forward_kernel))]
    payload = cloudpickle.dumps((judge, list(args), shipping.source_lines(args)))
    ours, theirs = multiprocessing.Pipe(duplex=False)
    isolate._child_main(theirs, payload, True)
    while True:
        try:
            kind, value = ours.recv()
        except EOFError:
            break
        if kind == "done":
            print("child:", cloudpickle.loads(value).status)


def main() -> None:
    def parent() -> None:
        print("parent:", checkers.check_forward_kernel(rmsnorm_forward_kernel).status)

    for side, run in (("parent", parent), ("child", _child)):
        steps, backs, callers = trace(run)
        print(f"\n## {side}: {len(steps)} steps")
        print("\n".join(steps))
        print(f"call-backs (a call into a file still on the stack below its caller): {len(backs)}")
        print("\n".join(backs))
        print("entered from:")
        for callee, names in sorted(callers.items()):
            print(f"  {callee}: {', '.join(sorted(names))}")


if __name__ == "__main__":
    main()

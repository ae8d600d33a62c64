"""Run the learner's code in a child process, so that nothing it does can crash, hang or break the checker.

A learner's kernel that reads outside its tensor kills the process that runs
it (Triton's interpreter reads raw memory); a loop whose start never advances
never ends. So every checker runs the learner's code in a child process with
a time limit, and turns what happened into a :class:`Feedback`:

- the child died of a signal → "your kernel read or wrote outside the tensor";
- no progress for :data:`CASE_TIME_LIMIT_S` seconds → "did not finish" (one
  limit and one message for every exercise);
- anything else the child reports is the checker's own feedback.

Children come from a ``forkserver`` (a clean server process that imports torch
once, never CUDA, then forks one child per check): about 0.3 s per check
instead of the 2 s of a fresh interpreter, and on a GPU machine each child
initialises CUDA itself. On a GPU machine a child can also be asked to
interpret its kernels (``start(..., interpret=True)``): it then comes from a
second forkserver, started once with :data:`INTERPRETER_ENVIRONMENT` (Triton's
interpreter on, CUDA out of sight) and warm like a CPU machine's, so that it
runs exactly as a CPU machine's child does (the interpreter must be on before
triton is imported, which the first server's children have done). Where that
second server cannot be had, a fresh ``spawn`` process with the same
environment does the same, slower. A learner's ``@triton.jit`` kernel is
defined in a notebook cell, which a child cannot import: its source is shipped
(:class:`KernelSource`) and executed again in the child. Plain Python
functions and classes travel with cloudpickle.

Source: solutions/03_forward_kernel.ipynb … 10_one_pass_backward.ipynb;
Python's ``multiprocessing`` (forkserver, spawn), cloudpickle.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import multiprocessing.connection as mp_connection
import multiprocessing.spawn as mp_spawn
import os
import signal
import sys
import tempfile
import time
import traceback
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import cloudpickle

from . import progress
from .compile_server import define_kernel
from .feedback import Feedback, wrong
from .shipping import KernelSource, restore_sources, source_lines
from .shipping import dumps as shipping_dumps

#: Seconds a child may run the learner's code without reporting progress (one case) before it is stopped: the one
#: time limit of every exercise.
CASE_TIME_LIMIT_S = 60.0
#: Seconds a child may take to start, before it runs anything of the learner's (a fresh interpreter imports torch
#: and triton; a forked one is ready in a fraction of a second).
START_TIME_LIMIT_S = 180.0
#: Modules the forkserver imports once, none of which touches CUDA (torch.testing.assert_close imports
#: torch.distributed.tensor on its first call: about a second, paid once here instead of in every child).
PRELOAD = ["torch", "torch.testing", "torch.distributed.tensor"]
#: The environment of a child that interprets its kernels on a GPU machine: the interpreter on, CUDA out of sight
#: (its tensors, like a CPU machine's, are on the CPU, where the interpreter's loads and stores are checked).
INTERPRETER_ENVIRONMENT = {"TRITON_INTERPRET": "1", "CUDA_VISIBLE_DEVICES": ""}

_CONTEXT = None
_INTERPRETER_SERVER = None


def _context():
    global _CONTEXT
    if _CONTEXT is None:
        _CONTEXT = multiprocessing.get_context("forkserver")
        # Under the interpreter the server also imports rmsnorm and runs each kernel once (warm children);
        # on a GPU it must not touch CUDA, so it imports torch only.
        _CONTEXT.set_forkserver_preload(PRELOAD + (["rmsnorm_course.checkers._warm"] if interpreted() else []))
    return _CONTEXT


def _interpreter_server():
    """The second forkserver, for interpreted children on a GPU machine.

    None where multiprocessing has no room for it.
    """
    global _INTERPRETER_SERVER
    if _INTERPRETER_SERVER is None:
        from multiprocessing import forkserver

        if not (hasattr(forkserver, "ForkServer") and hasattr(forkserver, "connect_to_new_process")):
            return None  # pragma: no cover - another Python's multiprocessing
        _INTERPRETER_SERVER = forkserver.ForkServer()
        _INTERPRETER_SERVER.set_forkserver_preload(PRELOAD + ["rmsnorm_course.checkers._warm"])
    return _INTERPRETER_SERVER


@contextlib.contextmanager
def _through(server):
    """Forkserver children started in the block come from ``server`` (multiprocessing keeps one server per process)."""
    from multiprocessing import forkserver

    original = forkserver.connect_to_new_process
    forkserver.connect_to_new_process = server.connect_to_new_process
    try:
        yield
    finally:
        forkserver.connect_to_new_process = original


# --------------------------------------------------------------------------- the child


def _child_main(conn, payload: bytes, interpret: bool) -> None:
    """Entry point of a child: check where it runs kernels, rebuild the learner's objects, run the target."""
    try:
        conn.send(("ready", None))  # started: from here on, the learner's code runs under the time limit
        if interpreted() != interpret:  # chosen by the environment the child started with
            raise RuntimeError(f"the checker's child runs kernels {'not ' if interpret else ''}in the interpreter, "
                               "unlike what the checker asked for")
        target, args, sources = cloudpickle.loads(payload)
        restore_sources(args, sources)  # the learner's line numbers and text in tracebacks
        folder = Path(tempfile.mkdtemp(prefix="rmsnorm_checker_"))
        args = [define_kernel(a.spec, folder) if isinstance(a, KernelSource) else a for a in args]
        progress.channel = conn  # progress.say reports to the parent
        result = target(*args)
        conn.send(("done", cloudpickle.dumps(result)))
    except BaseException as error:  # noqa: BLE001 - reported to the parent, which turns it into feedback
        conn.send(("error", (type(error).__name__, str(error), traceback.format_exc())))
    finally:
        conn.close()


# --------------------------------------------------------------------------- the parent


@dataclass
class Outcome:
    """How a child ended: ``kind`` is "done", "error", "crashed", "timeout" or "unpicklable"."""

    kind: str
    value: object = None
    last_progress: str = ""
    seconds: float = 0.0
    feedback: Feedback | None = None  #: what it means for the learner (:func:`run_judges` sets it)


def start(target: Callable, args, *, interpret: bool):
    """Start a child running ``target(*args)``; returns (process, connection) or an Outcome.

    Args:
        target: what the child runs (cloudpickled with its arguments: a module's function travels as a
            reference, one defined in a notebook by value).
        args: its arguments (learner's kernels as :class:`KernelSource`).
        interpret: whether the child runs kernels in Triton's interpreter. As
            this process does: a child of the forkserver. Interpreted on a GPU
            machine: a child of the second forkserver, which runs with
            :data:`INTERPRETER_ENVIRONMENT`.

    Raises:
        ValueError: ``interpret`` is False in a process that interprets its kernels (no GPU to compile for).
    """
    if not interpret and interpreted():
        raise ValueError("a process that interprets its kernels cannot start a child that runs them on a GPU")
    try:
        payload = shipping_dumps((target, list(args), source_lines(args)))
    except Exception as error:  # noqa: BLE001 - e.g. an open file among the learner's globals
        return Outcome("unpicklable", f"{type(error).__name__}: {error}")
    elsewhere = interpret and not interpreted()  # a GPU machine's interpreted child
    server = _interpreter_server() if elsewhere else None
    ctx = multiprocessing.get_context("spawn") if elsewhere and server is None else _context()
    parent, child = ctx.Pipe(duplex=False)
    process = ctx.Process(target=_child_main, args=(child, payload, interpret), daemon=True)
    with (_without_main(), _environment(INTERPRETER_ENVIRONMENT if elsewhere else {}),
          _through(server) if server is not None else contextlib.nullcontext()):
        process.start()  # the second server starts, the first time, with that environment
    child.close()
    return process, parent


@contextlib.contextmanager
def _environment(overrides: dict[str, str]):
    """``os.environ`` with ``overrides`` while a child or a server is started (it inherits it), as it was afterwards."""
    before = {name: os.environ.get(name) for name in overrides}
    os.environ.update(overrides)
    try:
        yield
    finally:
        for name, value in before.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


@contextlib.contextmanager
def _without_main():
    """Children do not import the parent's ``__main__`` (a script, or ipykernel's launcher): nothing there is needed."""
    original = mp_spawn.get_preparation_data

    def preparation_data(name):
        data = original(name)
        data.pop("init_main_from_name", None)
        data.pop("init_main_from_path", None)
        return data

    mp_spawn.get_preparation_data = preparation_data
    try:
        yield
    finally:
        mp_spawn.get_preparation_data = original


def wait(started, limit_s: float) -> Outcome:
    """Wait for a child started by :func:`start`, at most ``limit_s`` seconds without progress."""
    return wait_all([started], limit_s)[0]


def wait_all(started: list, limit_s: float) -> list[Outcome]:
    """Wait for children started by :func:`start`, each at most ``limit_s`` seconds without progress.

    They run at the same time. A child's start-up (until it says it is ready)
    may take :data:`START_TIME_LIMIT_S`. When one crashes or runs out of time,
    that decides the verdict: the others are stopped (their Outcome is "stopped").

    Returns:
        One :class:`Outcome` per child, in the order given.
    """
    begin = time.monotonic()
    outcomes: list[Outcome | None] = [s if isinstance(s, Outcome) else None for s in started]
    running = {i: (s[0], s[1]) for i, s in enumerate(started) if not isinstance(s, Outcome)}
    last = {i: ("starting", begin) for i in running}
    ready: set[int] = set()

    def deadline(i):
        return last[i][1] + (limit_s if i in ready else START_TIME_LIMIT_S)

    try:
        while running and not any(o is not None and o.kind in ("crashed", "timeout") for o in outcomes):
            now = time.monotonic()
            for i in [i for i in running if now >= deadline(i)]:  # no progress for limit_s
                _stop(running.pop(i)[0])
                outcomes[i] = Outcome("timeout", limit_s if i in ready else START_TIME_LIMIT_S, last[i][0], now - begin)
            if not running:
                break
            timeout = max(0.0, min(deadline(i) for i in running) - now)
            readable = mp_connection.wait([conn for _, conn in running.values()], timeout)
            for i in [i for i, (_, conn) in running.items() if conn in readable]:
                outcome = _receive(*running[i], last, i, begin)
                ready.add(i)
                if outcome is not None:
                    running.pop(i)
                    outcomes[i] = outcome
    finally:
        for i, (process, conn) in running.items():
            _stop(process)
            outcomes[i] = outcomes[i] or Outcome("stopped", None, last[i][0], time.monotonic() - begin)
        for s in started:
            if not isinstance(s, Outcome):
                s[1].close()
    return outcomes


def _receive(process, conn, last: dict, i: int, begin: float) -> Outcome | None:
    """Read what child ``i`` sent: None after a progress report (``last[i]`` updated), else how it ended."""
    try:
        kind, value = conn.recv()
    except (EOFError, OSError):
        process.join(5)
        return Outcome("crashed", process.exitcode, last[i][0], time.monotonic() - begin)
    if kind in ("progress", "ready"):
        last[i] = (value if kind == "progress" else last[i][0], time.monotonic())
        return None
    process.join(5)
    if process.is_alive():
        _stop(process)
    if kind == "done":
        return Outcome("done", cloudpickle.loads(value), last[i][0], time.monotonic() - begin)
    return Outcome(kind, value, last[i][0], time.monotonic() - begin)


def _stop(process) -> None:
    process.kill()
    process.join(5)


def interpreted() -> bool:
    """True when this process runs kernels in Triton's interpreter (:func:`rmsnorm.device.interpreter_active`)."""
    from rmsnorm.device import interpreter_active

    return interpreter_active()


#: What the interpreter's server imports on start (its warm-up runs the package's three kernels once).
_INTERPRETER_PROBE = "import rmsnorm_course.checkers._warm"
_interpreter_runs: str | None | bool = False  # False: not asked yet; None: it runs; str: why not


def interpreter_unavailable() -> str | None:
    """None when Triton's interpreter runs this package's kernels here; else why not (asked once, then kept).

    Where this process interprets its kernels, it is the interpreter, so None. On a GPU machine
    the interpreter's judge runs in children of their own, and an environment whose Triton and
    NumPy do not agree breaks the interpreter there alone (seen on the H200 with triton 3.6 and
    NumPy 2.4: "only 0-dimensional arrays can be converted to Python scalars", which
    :func:`rmsnorm.device.mend_interpreter_index` now mends; constraints.txt pins a pair that works).
    A fresh process with :data:`INTERPRETER_ENVIRONMENT` imports what that server
    imports on start (:mod:`rmsnorm_course.checkers._warm`, which runs the package's three kernels once),
    and its error is the reason.
    """
    global _interpreter_runs
    if interpreted():
        return None
    if _interpreter_runs is False:
        import subprocess

        env = {**os.environ, **INTERPRETER_ENVIRONMENT}
        try:
            done = subprocess.run([sys.executable, "-c", _INTERPRETER_PROBE], env=env, capture_output=True,
                                  text=True, timeout=120)
            lines = [line for line in done.stderr.strip().splitlines() if line.strip()]
            _interpreter_runs = None if done.returncode == 0 else (lines[-1] if lines else f"exit {done.returncode}")
        except subprocess.TimeoutExpired:
            _interpreter_runs = "it did not run the package's kernels within 120 s"
    return _interpreter_runs


def _when(outcome: Outcome) -> str:
    """Where the child was when it stopped: the case it last announced, or before the first (its start-up and a
    checker's own first call of the learner's code)."""
    return "before the first case" if outcome.last_progress == "starting" else f"during {outcome.last_progress}"


def crash_message(outcome: Outcome, who: str) -> str:
    """Plain words for a child that died: a signal means memory outside the tensors was touched."""
    code = outcome.value
    signame = ""
    if isinstance(code, int) and code < 0:
        try:
            signame = f" ({signal.Signals(-code).name})"
        except ValueError:
            pass
    return (f"{who} read or wrote outside the tensor and stopped the process running it{signame}, "
            f"{_when(outcome)}: check the row offset (`row * row_stride`) and the masks "
            "(`cols < N`, also on the last row). Your notebook is safe: the checker ran it in a separate process.")


def timeout_message(outcome: Outcome, who: str) -> str:
    """Plain words for a child stopped by the time limit."""
    loop = ("Does every loop move towards its end (`for start in range(0, N, BLOCK_SIZE)` does by itself; a "
            "`while` loop must change its own condition)?" if who.startswith("your kernel")
            else "Does every `while` condition become false?")
    return (f"{who} did not finish in {outcome.value:g} s ({_when(outcome)}): a loop never ends. "
            f"{loop} The checker stopped it; your notebook is safe.")


def outcome_feedback(exercise: str, outcome: Outcome, who: str) -> Feedback:
    """The feedback of a finished child: its own result, or a message for a crash, a time-out or an error."""
    if outcome.kind == "done":
        return outcome.value
    if outcome.kind == "crashed":
        return wrong(exercise, crash_message(outcome, who))
    if outcome.kind == "timeout":
        return wrong(exercise, timeout_message(outcome, who))
    if outcome.kind == "unpicklable":
        return wrong(exercise, f"the checker could not hand {who} to its separate process ({outcome.value}); "
                     "define it in a cell of its own, using only numbers, strings and modules from outside.")
    name, text, trace = outcome.value
    return wrong(exercise, f"the checker failed while judging {who} ({name}: {text.splitlines()[0] if text else ''}). "
                 "Please report this, with your code, to the course's instructors.")


def judges() -> tuple[bool, ...]:
    """Where the learner's kernel is run, one child each: True for Triton's interpreter, False for the GPU.

    The interpreter's judge (NaN in the masked lanes of a load without
    ``other=``, guarded buffers on the CPU) runs on every machine, so a verdict
    does not depend on the device; on a GPU machine the kernel is also compiled
    and run on the GPU, which finds what the interpreter cannot (the GPU's own
    compile errors, illegal addresses).

    Where Triton's interpreter does not run (a GPU machine whose Triton and NumPy
    disagree, :func:`interpreter_unavailable`), the GPU
    judges alone, and a RuntimeWarning, once, says so and what it changes.
    """
    if interpreted():
        return (True,)
    broken = interpreter_unavailable()
    if broken is None:
        return (True, False)
    global _warned_gpu_only
    if not _warned_gpu_only:
        _warned_gpu_only = True
        warnings.warn(
            f"Triton's interpreter does not run on this machine ({broken}), so the checkers judge kernels on the GPU "
            "alone. Most verdicts are the same; but a masked tl.load without other= reads whatever the GPU leaves in "
            "the masked lanes (often 0), so a kernel a CPU machine refuses for it can pass here. Install the pinned "
            "triton and numpy (constraints.txt) to judge on both.",
            RuntimeWarning,
            stacklevel=2,
        )
    return (False,)


_warned_gpu_only = False


def run_judges(target: Callable, args, exercise: str, who: str, limit_s: float | None = None) -> list[Outcome]:
    """Run ``target(*args)`` in one child per judge of :func:`judges`, at the same time; each ended with its Feedback.

    Returns:
        One :class:`Outcome` per judge, in the order of :func:`judges`, its ``feedback`` set by
        :func:`outcome_feedback` (None for a child stopped because another crashed or ran out of time).
    """
    started = [start(target, args, interpret=interpret) for interpret in judges()]
    outcomes = wait_all(started, CASE_TIME_LIMIT_S if limit_s is None else limit_s)
    for outcome in outcomes:
        if outcome.kind != "stopped":
            outcome.feedback = outcome_feedback(exercise, outcome, who)
    return outcomes


def run_python_check(exercise: str, target: Callable, args, who: str) -> Feedback:
    """Run a checker's ``target(*args)`` on a learner's Python function or class in a child.

    The learner's objects travel with cloudpickle (by value when defined in a
    notebook). When they cannot travel (an open file among their globals…),
    the check runs in this process instead: it still never raises, but cannot
    stop an endless loop.
    """
    started = start(target, args, interpret=interpreted())
    if isinstance(started, Outcome) and started.kind == "unpicklable":
        return target(*args)
    return outcome_feedback(exercise, wait(started, CASE_TIME_LIMIT_S), who)


if sys.platform == "win32":  # pragma: no cover - the course runs on Linux (Triton's requirement)
    raise ImportError("rmsnorm_course.checkers needs a POSIX system (forkserver)")

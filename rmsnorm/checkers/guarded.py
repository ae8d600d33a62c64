"""Launching a learner's Part II kernel safely: NaN all around its tensors, a time limit, errors as messages.

The checkers of lessons 09 and 10 launch the learner's kernel themselves
(fixed signatures, simpler than the package's), so they also guard it:

- every tensor handed to the kernel is a view at the start of a larger
  buffer filled with NaN (:func:`surround`): a read past a row, past the
  tensor, or at another row's offset reads NaN instead of memory that is not
  ours, and the NaN shows in the outputs; a write past a tensor lands in the
  buffer, where :func:`written_outside` finds it;
- a kernel that never ends is stopped: under the CPU interpreter a SIGALRM
  timer raises :class:`KernelTimeout` inside the kernel's Python loop; on a
  GPU (where the launch returns at once, after compiling) the checker polls a
  CUDA event and gives up ``time_limit_s`` after each launch;
- under the interpreter, every address a load, store or atomic touches must
  lie in one of those buffers (:func:`bounds_checked` wraps the interpreter's
  memory operations): a read far outside, which would crash the Python
  process, raises :class:`OutOfBounds` instead, named with the learner's line;
- any exception from the learner's code becomes a "wrong" (or "not done
  yet") :class:`~rmsnorm.checkers.Feedback` naming the learner's line.

All of this runs inside the checker's separate process
(:func:`rmsnorm.checkers.kernels.check_kernel`, on :mod:`rmsnorm.checkers.isolate`,
as for lessons 03–05): a crash, an illegal address that spoils a GPU context, or
a kernel still running on the GPU ends with that process, never with the
learner's notebook.

Source: solutions/09_the_long_row.ipynb, solutions/10_one_pass_backward.ipynb.
"""

from __future__ import annotations

import contextlib
import signal
import threading
import time
import warnings
from collections.abc import Callable, Sequence

import numpy as np
import torch

try:  # the interpreter's builder, wrapped by bounds_checked (absent or different in other Triton versions)
    from triton.runtime import interpreter as _interpreter
except ImportError:  # pragma: no cover
    _interpreter = None

from . import gpu_compile
from .diagnose import Case, Outputs, Run, Symptom, _case_passes
from .feedback import Feedback, describe_error, is_not_implemented, learner_frame, name_of, not_done, wrong

#: Elements of NaN after the last element a kernel may touch, in every guarded buffer.
GUARD = 1024
#: Seconds a checker lets all its launches run (the interpreter runs a correct kernel in about one).
DEFAULT_TIME_LIMIT_S = 30.0


class KernelTimeout(Exception):
    """Raised inside a learner's kernel under the interpreter when the time limit has passed."""


class OutOfBounds(Exception):
    """Raised inside a learner's kernel under the interpreter for an address outside every buffer it was given."""


def _describe_address(address: int, itemsize: int, buffers: dict[str, torch.Tensor]) -> str:
    """'12 elements past the end of x's buffer' for the buffer nearest to ``address``."""
    best = None
    for name, buffer in buffers.items():
        start = buffer.data_ptr()
        end = start + buffer.numel() * buffer.element_size()
        distance = start - address if address < start else address + itemsize - end
        if best is None or distance < best[0]:
            where = "before the start of" if address < start else "past the end of"
            best = (distance, f"{max(1, distance // itemsize):,} element(s) {where} {name}'s buffer")
    if best is None:
        return "an address outside every tensor"
    return best[1] + (" (the nearest tensor)" if len(buffers) > 1 else "")


@contextlib.contextmanager
def bounds_checked(buffers: dict[str, torch.Tensor]):
    """Under Triton's interpreter, refuse any memory access outside ``buffers`` (name → tensor) with OutOfBounds.

    Wraps ``InterpreterBuilder``'s masked load and store (plain and block-pointer
    loads and stores go through them) and its atomics for the duration of the
    block; elsewhere (a GPU) it does nothing.
    """
    builder = getattr(_interpreter, "InterpreterBuilder", None) if _interpreter is not None else None
    names = ("create_masked_load", "create_masked_store", "create_atomic_rmw", "create_atomic_cas")
    if builder is None or torch.cuda.is_available() or not all(hasattr(builder, n) for n in names):
        yield
        return
    spans = [(b.data_ptr(), b.data_ptr() + b.numel() * b.element_size()) for b in buffers.values()]
    originals = {n: getattr(builder, n) for n in names}

    def check(ptrs, mask, kind):
        itemsize = np.dtype(_interpreter._get_np_dtype(ptrs.get_element_ty())).itemsize
        addresses = np.asarray(ptrs.data).astype(np.uint64)
        if mask is not None:
            addresses = addresses[np.broadcast_to(np.asarray(mask.data, dtype=bool), addresses.shape)]
        ok = np.zeros(addresses.shape, dtype=bool)
        for start, end in spans:
            ok |= (addresses >= start) & (addresses + itemsize <= end)
        if not ok.all():
            bad = int(addresses[~ok].reshape(-1)[0])
            raise OutOfBounds(f"a {kind} at {_describe_address(bad, itemsize, buffers)}")

    def masked_load(self, ptrs, mask, *args):
        check(ptrs, mask, "load")
        return originals["create_masked_load"](self, ptrs, mask, *args)

    def masked_store(self, ptrs, value, mask, *args):
        check(ptrs, mask, "store")
        return originals["create_masked_store"](self, ptrs, value, mask, *args)

    def atomic_rmw(self, op, ptr, val, mask, *args):
        check(ptr, mask, "atomic operation")
        return originals["create_atomic_rmw"](self, op, ptr, val, mask, *args)

    def atomic_cas(self, ptr, *args):
        check(ptr, None, "atomic operation")
        return originals["create_atomic_cas"](self, ptr, *args)

    replacements = {"create_masked_load": masked_load, "create_masked_store": masked_store,
                    "create_atomic_rmw": atomic_rmw, "create_atomic_cas": atomic_cas}
    try:
        for n, fn in replacements.items():
            setattr(builder, n, fn)
        yield
    finally:
        for n, fn in originals.items():
            setattr(builder, n, fn)


def surround(values: torch.Tensor, capacity: int, row_stride: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Copy ``values`` into the start of a NaN-filled buffer of ``capacity`` + GUARD elements.

    Args:
        values: (M, N) or (N,) tensor, any float dtype.
        capacity: elements the buffer holds before its guard (at least what the
            values occupy: M · row_stride for a matrix, N for a vector).
        row_stride: elements between rows in the buffer (default N); the
            columns N … row_stride − 1 of each row are NaN padding.

    Returns:
        (view, buffer): the view has the shape of ``values`` (row stride
        ``row_stride``, unit column stride) and starts at the buffer's start.
    """
    buffer = torch.full((capacity + GUARD,), float("nan"), dtype=values.dtype, device=values.device)
    if values.dim() == 1:
        view = buffer[: values.shape[0]]
    else:
        M, N = values.shape
        view = buffer.as_strided((M, N), (row_stride or N, 1))
    view.copy_(values)
    return view, buffer


def written_outside(view: torch.Tensor, buffer: torch.Tensor) -> torch.Tensor:
    """Flat indices of ``buffer`` that are no longer NaN but lie outside ``view`` (writes past it)."""
    inside = torch.zeros(buffer.shape[0], dtype=torch.bool, device=buffer.device)
    inside.as_strided(view.shape, view.stride()).fill_(True)
    return torch.nonzero(~inside & ~torch.isnan(buffer)).reshape(-1).cpu()


@contextlib.contextmanager
def time_limit(seconds: float):
    """Raise :class:`KernelTimeout` in the main thread after ``seconds`` (POSIX; elsewhere no limit)."""
    if threading.current_thread() is not threading.main_thread() or not hasattr(signal, "setitimer"):
        yield
        return

    def stop(signum, frame):
        raise KernelTimeout(f"did not finish within {seconds:g} s")

    previous = signal.signal(signal.SIGALRM, stop)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def wait_for_gpu(deadline: float) -> bool:
    """On CUDA, wait for the work queued so far until ``deadline`` (time.monotonic); False if it is not done."""
    if not torch.cuda.is_available():
        return True
    done = torch.cuda.Event()
    done.record()
    while not done.query():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.005)
    return True


def _timeout_message(kernel, case: Case, seconds: float) -> str:
    where = "it was stopped with the checker's separate process; your notebook is not affected"
    return (f"on {case.label}: {name_of(kernel)} did not finish within {seconds:g} s ({where}). A loop that never "
            "ends: check that its bound and its step move towards the end (e.g. `for start in range(0, N, "
            "BLOCK_SIZE)`; a `while` loop must change its own condition).")


def run_guarded(
    exercise: str, kernel, cases: Sequence[Case], launch: Callable[[Case, object], Outputs],
    time_limit_s: float = DEFAULT_TIME_LIMIT_S,
) -> list[Outputs] | Feedback:
    """Launch ``kernel`` on every case through ``launch(case, kernel)`` under one time limit.

    Returns:
        The outputs of every case, or a :class:`Feedback` when the kernel
        raised (NotImplementedError → "not done yet", anything else →
        "wrong", naming the learner's line) or ran past the limit.
    """
    results = []
    on_gpu = torch.cuda.is_available()
    deadline = time.monotonic() + time_limit_s  # the interpreter's: all launches together
    for case in cases:
        remaining = max(0.1, deadline - time.monotonic())
        try:
            with warnings.catch_warnings(), contextlib.nullcontext() if on_gpu else time_limit(remaining):
                warnings.simplefilter("ignore")  # float16 overflow warnings of the interpreter
                outputs = launch(case, kernel)
                finished = wait_for_gpu(time.monotonic() + time_limit_s)  # compiling is not counted
        except KernelTimeout:
            return wrong(exercise, _timeout_message(kernel, case, time_limit_s))
        except Exception as error:  # noqa: BLE001 - any learner error becomes feedback
            if _caused_by(error, KernelTimeout):
                return wrong(exercise, _timeout_message(kernel, case, time_limit_s))
            outside = _caused_by(error, OutOfBounds)
            if outside:
                return wrong(exercise, f"on {case.label}: {name_of(kernel)} made {outside}{_learner_line(error)}, "
                             "outside every tensor it was given (stopped before it happened). Check that address: "
                             "the row offset (`row * row_stride`), the column offset, and the mask.")
            if is_not_implemented(error):
                return not_done(exercise, name_of(kernel))
            rejected = gpu_compile.compile_error_message(kernel, error)
            if rejected is not None:  # on a GPU the kernel is compiled here, in the child
                return wrong(exercise, rejected)
            return wrong(exercise, f"on {case.label}: " + describe_error(name_of(kernel), error))
        if not finished:
            return wrong(exercise, _timeout_message(kernel, case, time_limit_s))
        results.append(outputs)
    return results


def _caused_by(error: BaseException, kind: type) -> str:
    """The message of the ``kind`` exception that ``error`` is or wraps (the interpreter wraps kernel errors), or ''."""
    seen = 0
    while error is not None and seen < 10:
        if isinstance(error, kind):
            return str(error) or kind.__name__
        error = error.__cause__ or error.__context__
        seen += 1
    return ""


def _learner_line(error: BaseException) -> str:
    """' (at line 12: `x = tl.load(...)`)' for the deepest frame of the learner's code in the exception chain, or ''."""
    frame = learner_frame(error)
    if frame is None or not frame.line:
        return ""
    return f" (at line {frame.lineno}: `{frame.line.strip()}`)"


def refine(exercise: str, feedback: Feedback, runs: Sequence[Run], symptoms: Sequence[Symptom], stride_fix: str,
           nan_note: str) -> Feedback:
    """After :func:`~rmsnorm.checkers.diagnose.diagnose` failed: the two hints the guarded cases allow.

    When no symptom was named and only the cases whose rows are further apart
    than N fail, the rows are addressed with N: ``stride_fix`` ends that
    message. When a value is still NaN, ``nan_note`` (where the NaN comes from
    in this exercise) is added. Otherwise ``feedback`` as it is.
    """
    if feedback.passed:
        return feedback
    named = any(s.summary in feedback.message for s in symptoms)
    strided = [r for r in runs if r.case.row_stride]
    others = [r for r in runs if not r.case.row_stride]
    if not named and strided and all(map(_case_passes, others)) and not all(map(_case_passes, strided)):
        return wrong(exercise, f"every case with row_stride = N passes, but not {strided[0].case.label}: {stride_fix}")
    if "is still NaN" in feedback.message:
        return wrong(exercise, f"{feedback.message} {nan_note}")
    return feedback

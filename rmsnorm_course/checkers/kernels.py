"""How a learner's kernel is judged, the parent's side: read it, compile it for a GPU, run it where it can do no harm.

One harness for every kernel exercise (03, 04, 05, the fix of 08, 09, 10). :func:`check`
calls, in this order, helpers that return without calling back:

1. :func:`~rmsnorm_course.checkers.preflight.preflight` reads the kernel (never runs
   it): a skeleton says "not done yet", a wrong signature or an unmasked block
   access is named with its line, before anything is launched.
2. :func:`~rmsnorm_course.checkers.shipping.kernel_spec` takes its source, and
   :func:`~rmsnorm_course.checkers.gpu_compile.start_gpu_compile` starts compiling it for a
   CUDA target on the CPU (only under the interpreter: on a GPU it is compiled for real).
3. :func:`~rmsnorm_course.checkers.isolate.run_judges` runs, at the same time, the one run loop
   (:func:`rmsnorm_course.checkers.run_loop.judge`) on the spec in child processes, one per judge
   (the interpreter's on every machine; on a GPU machine the GPU's too), so that a crash or an
   endless loop becomes a message, with one time limit; it hands back each child's Feedback.
4. :func:`~rmsnorm_course.checkers.gpu_compile.finish_gpu_compile` reads the compile's answer, and
   :func:`verdict` makes one verdict of it all: "wrong" when any judge says so, in the words a CPU
   machine gives.
5. Where the exercise asks for the row index in int64 (``ExerciseSpec.int64_row``), a kernel that passes but
   multiplies an int32 row index by a stride (:func:`~rmsnorm_course.checkers.preflight.rows_without_int64`) is named.

Source: solutions/03_forward_kernel.ipynb, 04_backward_derivation.ipynb,
05_gamma_reduction.ipynb, 08_n_vs_block_exercise.ipynb, 09_the_long_row.ipynb,
10_one_pass_backward.ipynb.
"""

from __future__ import annotations

import inspect
from collections.abc import Sequence
from dataclasses import replace

from . import gpu_compile, isolate
from .feedback import Feedback, checker_failed, name_of, source_of, wrong
from .preflight import first_line, masked_loads_without_other, preflight, rows_without_int64, unmasked_accesses  # noqa: F401
from .run_loop import OUTSIDE_EVERY, RAISED, judge, past_every_buffer
from .shipping import KernelSource, kernel_spec
from .spec import ExerciseSpec


def check(spec: ExerciseSpec, kernel) -> Feedback:
    """Judge a learner's kernel against an exercise's spec: preflight, then the GPU compile and the isolated runs.

    The GPU compile (under the interpreter only) and the children of
    :func:`~rmsnorm_course.checkers.isolate.judges` run at the same time; each child gets the spec and the
    kernel's source, cloudpickled, and runs :func:`~rmsnorm_course.checkers.run_loop.judge` on them.

    Args:
        spec: the exercise (:class:`~rmsnorm_course.checkers.spec.ExerciseSpec`).
        kernel: the learner's ``@triton.jit`` kernel (or whatever the learner passed).

    Returns:
        A :class:`Feedback`; never raises. "wrong" when any judge of
        :func:`~rmsnorm_course.checkers.isolate.judges` says so, in the words a CPU machine gives (the
        interpreter's), except that a GPU's own compile error is worded as on a GPU.
    """
    try:
        return _check(spec, kernel)
    except Exception as error:  # noqa: BLE001 - a checker never raises in a learner's notebook
        return checker_failed(spec.exercise, error)


def _check(spec: ExerciseSpec, kernel) -> Feedback:
    early = preflight(spec.exercise, kernel, spec.reference, spec.mask_note)
    if early is not None:
        return early
    name = name_of(kernel)
    source = kernel_spec(kernel)
    names = list(inspect.signature(kernel.fn).parameters)
    ours = list(inspect.signature(spec.reference.fn).parameters)
    renamed = [({names[ours.index(k)]: v for k, v in sig.items()}, {names[ours.index(k)]: v for k, v in const.items()})
               for sig, const in spec.signatures]
    compiling = gpu_compile.start_gpu_compile(source, renamed)  # under the interpreter only
    outcomes = isolate.run_judges(judge, [spec, KernelSource(source)], spec.exercise, f"your kernel {name}")
    if any(o.kind in ("crashed", "timeout") for o in outcomes):
        gpu_compile.cancel_gpu_compile(compiling)
        return _where_it_crashed(spec, name, source, outcomes) or verdict(spec.exercise, name, outcomes, None)
    result = verdict(spec.exercise, name, outcomes, gpu_compile.finish_gpu_compile(compiling),
                     source_of(kernel) or "", spec.accumulator)
    if result.passed and spec.int64_row is not None:
        return _int32_row(spec, kernel) or result
    return result


def _where_it_crashed(spec: ExerciseSpec, name: str, source, outcomes) -> Feedback | None:
    """A kernel that killed its process: run again in the interpreter, every access checked before it happens.

    The crash says only that memory outside the tensors was touched; the run with ``bounds`` stops the first
    access outside every buffer and names the tensor, the line and what its lanes' addresses show
    (:mod:`~rmsnorm_course.checkers.addresses`). None where that run does not find it (the crash's own words then).
    """
    crashed = next((o for o in outcomes if o.kind == "crashed"), None)
    if crashed is None or spec.bounds:
        return None
    started = isolate.start(judge, [replace(spec, bounds=True), KernelSource(source)], interpret=True)
    again = isolate.wait(started, isolate.CASE_TIME_LIMIT_S)
    found = again.value if again.kind == "done" else None
    if found is None or found.passed or OUTSIDE_EVERY not in found.message:
        return None
    access, _, reading = found.message.partition(f", {OUTSIDE_EVERY} (stopped before it happened). ")
    return wrong(spec.exercise, past_every_buffer(name, access, "" if reading.startswith("Check that address") else
                                                  reading))


def _int32_row(spec: ExerciseSpec, kernel) -> Feedback | None:
    """A kernel that passes, but multiplies an int32 row index by a stride where the exercise asks for int64."""
    found = rows_without_int64(source_of(kernel) or "")
    if not found:
        return None
    line, statement, row = found[0]
    return wrong(
        spec.exercise,
        f"every case gives the right numbers, but line {first_line(kernel) + line - 1} of your cell, `{statement}`, "
        f"multiplies the row index `{row}` by a stride in int32 (`tl.program_id` and a `range` loop's variable are "
        "int32): once M · stride passes 2^31 elements (4 GiB of float16, e.g. 32768 rows of 65536), the offset "
        "overflows int32 and the kernel reads and writes the wrong memory. The exercise asks for the row index in "
        f"int64 before it meets a stride: {spec.int64_row}.",
    )


def verdict(exercise: str, name: str, outcomes: Sequence[isolate.Outcome], compiled: dict | None, source: str = "",
            accumulator: str = gpu_compile.ACCUMULATOR) -> Feedback:
    """One verdict from the judges' outcomes (in the order of :func:`~.isolate.judges`) and the CPU's compile check.

    In this order: a judge that crashed or ran out of time; the interpreter's
    own error; a GPU compiler's refusal (the CPU's compile check, or the GPU's
    own compile in its child); the interpreter's "wrong" (the words a CPU
    machine gives); the GPU's verdict; the interpreter's.

    Args:
        exercise: name shown in the feedback.
        name: the learner's kernel, as :func:`~rmsnorm_course.checkers.feedback.name_of` gives it.
        outcomes: the interpreter's :class:`~rmsnorm_course.checkers.isolate.Outcome`, then the GPU's if there is one,
            each with its ``feedback``.
        compiled: the answer of :func:`~rmsnorm_course.checkers.gpu_compile.finish_gpu_compile`, or None.
        source: the kernel's text, and accumulator: the exercise's accumulator, for
            :func:`~rmsnorm_course.checkers.gpu_compile.gpu_rejects`.
    """
    ended = next((o for o in outcomes if o.kind in ("crashed", "timeout")), None)
    if ended is not None:
        return ended.feedback
    interpreted, *on_gpu = [o.feedback for o in outcomes]
    raised = not interpreted.passed and RAISED in interpreted.message  # the interpreter's own error says more
    if compiled is not None and not compiled["ok"] and not raised:
        return wrong(
            exercise, gpu_compile.gpu_rejects(name, compiled.get("line"), compiled.get("text", ""), compiled["message"],
                                              source=source, accumulator=accumulator)
        )
    rejected = [f for f in on_gpu if gpu_compile.REJECTS in f.message]  # the GPU compiled it in its child
    if rejected and not raised:
        return rejected[0]
    if not interpreted.passed or not on_gpu:
        return interpreted
    return on_gpu[0]

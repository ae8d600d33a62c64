"""How a learner's kernel is judged: read it, compile it for a GPU, run it where it can do no harm.

One harness for every kernel exercise (03, 04, 05, the fix of 08, 09, 10):

1. :func:`~rmsnorm_course.checkers.preflight.preflight` reads the kernel (never runs
   it): a skeleton says "not done yet", a wrong signature or an unmasked block
   access is named with its line, before anything is launched.
2. :func:`check` (given the exercise's spec) then, at the same time, (a) compiles the kernel for a
   CUDA target on the CPU (:mod:`rmsnorm_course.checkers.gpu_compile`; only under the
   interpreter: on a GPU it is compiled for real) and (b) runs the exercise's
   cases in child processes (:mod:`rmsnorm_course.checkers.isolate`), so that a crash
   or an endless loop becomes a message, with one time limit. The interpreter's
   judge runs on every machine (:func:`judges`): on a GPU machine in a child of
   its own, beside the child that runs the kernel on the GPU. A verdict is
   "wrong" when either says so, in the words a CPU machine gives.
3. In a child, :func:`judge` (the one run loop, :func:`run_cases`) launches the kernel on every case
   with each tensor inside a NaN-guarded buffer (:mod:`rmsnorm_course.checkers.guards`): NaN before and after it (and in
   the padding of rows, for the cases whose rows are further apart than N), so
   a read outside a tensor shows as NaN, a write outside it changes the
   guard, and a write into an input changes the input. Under the interpreter,
   a masked load without ``other=`` gives NaN in its masked lanes (on a GPU
   they hold whatever memory held, often 0), and for 09 and 10 every address
   is checked against the buffers before it is touched.

Source: solutions/03_forward_kernel.ipynb, 04_backward_derivation.ipynb,
05_gamma_reduction.ipynb, 08_n_vs_block_exercise.ipynb, 09_the_long_row.ipynb,
10_one_pass_backward.ipynb.
"""

from __future__ import annotations

import inspect
import warnings
from collections.abc import Sequence

import torch

from . import gpu_compile, isolate
from .diagnose import Case, Outputs, Run, _case_passes, diagnose
from .feedback import (
    Feedback,
    caused_by,
    describe_error,
    is_not_implemented,
    learner_frame,
    name_of,
    never_raises,
    not_done,
    source_of,
    wrong,
)
from .guards import Buffers, OutOfBounds, interpreter_guards
from .preflight import first_line, masked_loads_without_other, preflight, unmasked_accesses  # noqa: F401 (re-exported)
from .shipping import KernelSource, kernel_spec
from .spec import ExerciseSpec

#: Words of :func:`describe_error` that mark a kernel that raised (its message beats the GPU compiler's).
RAISED = " raised "

# --------------------------------------------------------------------------- running the cases (in the child)

def _nan_where_finite(outputs: Outputs, expected: Outputs) -> bool:
    for name, want in expected.items():
        got = outputs.get(name)
        if isinstance(got, torch.Tensor) and got.shape == want.shape:
            if (torch.isnan(got.detach().cpu().double()) & torch.isfinite(want)).any():
                return True
    return False


def _launch(case, kernel, launch, bounds: bool, guard_value=float("nan"), nan_other=True):
    buffers = Buffers(guard_value)
    with interpreter_guards(nan_other, buffers if bounds else None):
        outputs = launch(case, kernel, buffers)
    return {k: v.detach().cpu().clone() for k, v in outputs.items()}, buffers.problems()


def judge(spec: ExerciseSpec, kernel) -> Feedback:
    """In the checker's child process: run ``kernel`` on the spec's cases and say what is wrong (the one run loop).

    In this order: the kernel's errors, writes outside, reads outside and NaN
    from masked lanes (:func:`run_cases`); then each of the spec's first looks;
    then its symptoms (:func:`~rmsnorm_course.checkers.diagnose.diagnose`) and,
    where the spec says, the hints of :func:`refine`.
    """
    cases = spec.cases()
    outputs = run_cases(spec, kernel, cases)
    if isinstance(outputs, Feedback):
        return outputs
    runs = [Run(case, out, spec.oracle(case)) for case, out in zip(cases, outputs)]
    for look in spec.first_looks:
        message = look(runs)
        if message is not None:
            return wrong(spec.exercise, message)
    feedback = diagnose(spec.exercise, runs, spec.symptoms, spec.success(runs))
    if spec.stride_fix is None:
        return feedback
    return refine(spec.exercise, feedback, runs, spec.symptoms, spec.stride_fix, spec.nan_note)


def run_cases(spec: ExerciseSpec, kernel, cases: Sequence[Case]) -> list[Outputs] | Feedback:
    """Launch ``kernel`` on every case in guarded buffers; runs in the checker's child process.

    Under the interpreter (on every device: see :func:`check`), the masked
    lanes of a load without ``other=`` read NaN. With ``spec.bounds``, an
    access outside every buffer is refused (:class:`OutOfBounds`, named with
    the learner's line) instead of crashing the process.

    Returns:
        The outputs of every case (CPU copies), or a :class:`Feedback` when the
        kernel raised, wrote where it must not, read outside a tensor, or let
        the undefined lanes of a masked load without ``other=`` into a result.
    """
    exercise, launch, bounds = spec.exercise, spec.launch, spec.bounds
    name = name_of(kernel)
    results = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # float16 overflow warnings of the interpreter: the feedback says it
        for case in cases:
            isolate.progress(f"the case {case.label}")
            try:
                outputs, problem = _launch(case, kernel, launch, bounds)
                if problem is not None:
                    return wrong(exercise, f"on {case.label}, {name} ran but {problem}.")
                want = spec.oracle(case)
                if _nan_where_finite(outputs, want):
                    found = _explain_nan(exercise, kernel, case, launch, want, bounds, reads_outside=not bounds)
                    if found is not None:
                        return found
            except Exception as error:  # noqa: BLE001 - any learner error becomes feedback
                return _error_feedback(exercise, kernel, case, error, spec.example)
            results.append(outputs)
    return results


def _error_feedback(exercise: str, kernel, case: Case, error: Exception, example: str) -> Feedback:
    """What an exception from the learner's kernel means, in words (one translator for every kernel exercise)."""
    name = name_of(kernel)
    outside = caused_by(error, OutOfBounds)
    if outside is not None:
        return wrong(exercise, f"on {case.label}: {name} made {outside}{_learner_line(error)}, outside every tensor "
                     "it was given (stopped before it happened). Check that address: the row offset "
                     "(`row * row_stride`), the column offset, and the mask.")
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


def _learner_line(error: BaseException) -> str:
    """' (at line 12: `x = tl.load(...)`)' for the deepest frame of the learner's code in the exception chain, or ''."""
    frame = learner_frame(error)
    if frame is None or not frame.line:
        return ""
    return f" (at line {frame.lineno}: `{frame.line.strip()}`)"


def _explain_nan(exercise, kernel, case, launch, want, bounds, reads_outside) -> Feedback | None:
    """NaN where a number was expected: an other-less masked load, or a read outside a tensor? None if neither."""
    name = name_of(kernel)
    if isolate.interpreted():
        outputs, _ = _launch(case, kernel, launch, bounds, nan_other=False)
        if not _nan_where_finite(outputs, want):
            source = source_of(kernel) or ""
            loads = masked_loads_without_other(source)
            first = first_line(kernel)
            where = (f"line {first + loads[0][0] - 1} of your cell, `{loads[0][1]}`, has a mask but no `other=`"
                     if loads else "a masked load has no `other=`")
            return wrong(exercise, f"on {case.label}, {where}: on a GPU its masked lanes hold whatever memory "
                         "held (often 0, so the numbers can look right there), and the checker, which fills them "
                         "with NaN, found them in the result. Pass `other=0` (the value that adds nothing to a sum).")
    if not reads_outside:
        return None
    outputs, problem = _launch(case, kernel, launch, bounds, guard_value=1.0)
    if problem is not None:
        return wrong(exercise, f"on {case.label}, {name} ran but {problem}.")
    if not _nan_where_finite(outputs, want):
        return wrong(exercise, f"on {case.label}, {name} read outside its tensors: its result depends on the memory "
                     "just before or after a tensor (or between rows), which the checker filled with NaN. Check the "
                     "row offset (`row * row_stride`, not `row * N` or `row * BLOCK_SIZE`) and the masks of every "
                     "`tl.load` (`cols < N`).")
    return None


def refine(exercise: str, feedback: Feedback, runs: Sequence[Run], symptoms, stride_fix: str,
           nan_note: str | None) -> Feedback:
    """After :func:`~rmsnorm_course.checkers.diagnose.diagnose` failed: two hints that cases with a row stride allow.

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
    if nan_note is not None and "is still NaN" in feedback.message:
        return wrong(exercise, f"{feedback.message} {nan_note}")
    return feedback


# --------------------------------------------------------------------------- in the parent


def judges() -> tuple[bool, ...]:
    """Where the learner's kernel is run, one child each: True for Triton's interpreter, False for the GPU.

    The interpreter's judge (NaN in the masked lanes of a load without
    ``other=``, guarded buffers on the CPU) runs on every machine, so a verdict
    does not depend on the device; on a GPU machine the kernel is also compiled
    and run on the GPU, which finds what the interpreter cannot (the GPU's own
    compile errors, illegal addresses).

    Where Triton's interpreter does not run (a GPU machine whose Triton and NumPy
    disagree, :func:`~rmsnorm_course.checkers.isolate.interpreter_unavailable`), the GPU
    judges alone, and a RuntimeWarning, once, says so and what it changes.
    """
    if isolate.interpreted():
        return (True,)
    broken = isolate.interpreter_unavailable()
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


def check(spec: ExerciseSpec, kernel) -> Feedback:
    """Judge a learner's kernel against an exercise's spec: preflight, then the GPU compile and the isolated runs.

    The GPU compile (under the interpreter only) and the children of
    :func:`judges` run at the same time; each child gets the spec and the
    kernel's source, cloudpickled, and runs :func:`judge` on them.

    Args:
        spec: the exercise (:class:`~rmsnorm_course.checkers.spec.ExerciseSpec`).
        kernel: the learner's ``@triton.jit`` kernel (or whatever the learner passed).

    Returns:
        A :class:`Feedback`; never raises. "wrong" when any judge of
        :func:`judges` says so, in the words a CPU machine gives (the
        interpreter's), except that a GPU's own compile error is worded as on a GPU.
    """
    return never_raises(spec.exercise)(_check)(spec, kernel)


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
    started = [isolate.start(judge, [spec, KernelSource(source)], interpret=interpret) for interpret in judges()]
    outcomes = isolate.wait_all(started, isolate.CASE_TIME_LIMIT_S)
    if any(o.kind in ("crashed", "timeout") for o in outcomes):
        gpu_compile.cancel_gpu_compile(compiling)
        return verdict(spec.exercise, name, outcomes, None)
    return verdict(spec.exercise, name, outcomes, gpu_compile.finish_gpu_compile(compiling))


def verdict(exercise: str, name: str, outcomes: Sequence[isolate.Outcome], compiled: dict | None) -> Feedback:
    """One verdict from the judges' outcomes (in the order of :func:`judges`) and the CPU's compile check.

    In this order: a judge that crashed or ran out of time; the interpreter's
    own error; a GPU compiler's refusal (the CPU's compile check, or the GPU's
    own compile in its child); the interpreter's "wrong" (the words a CPU
    machine gives); the GPU's verdict; the interpreter's.

    Args:
        exercise: name shown in the feedback.
        name: the learner's kernel, as :func:`~rmsnorm_course.checkers.feedback.name_of` gives it.
        outcomes: the interpreter's :class:`~rmsnorm_course.checkers.isolate.Outcome`, then the GPU's if there is one.
        compiled: the answer of :func:`~rmsnorm_course.checkers.gpu_compile.finish_gpu_compile`, or None.
    """
    who = f"your kernel {name}"
    ended = next((o for o in outcomes if o.kind in ("crashed", "timeout")), None)
    if ended is not None:
        return isolate.outcome_feedback(exercise, ended, who)
    interpreted, *on_gpu = [isolate.outcome_feedback(exercise, o, who) for o in outcomes]
    raised = not interpreted.passed and RAISED in interpreted.message  # the interpreter's own error says more
    if compiled is not None and not compiled["ok"] and not raised:
        return wrong(
            exercise, gpu_compile.gpu_rejects(name, compiled.get("line"), compiled.get("text", ""), compiled["message"])
        )
    rejected = [f for f in on_gpu if gpu_compile.REJECTS in f.message]  # the GPU compiled it in its child
    if rejected and not raised:
        return rejected[0]
    if not interpreted.passed or not on_gpu:
        return interpreted
    return on_gpu[0]

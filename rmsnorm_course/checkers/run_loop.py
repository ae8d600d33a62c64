"""The one run loop: in the checker's child process, a learner's kernel run on an exercise's cases and judged.

:func:`judge` is what the child runs (:mod:`rmsnorm_course.checkers.isolate`
ships it, with the spec and the kernel's source, and calls it): the spec's
cases, each launched as the spec's :class:`~rmsnorm_course.checkers.spec.Launch`
declares, with each tensor inside a NaN-guarded buffer
(:mod:`rmsnorm_course.checkers.guards`): NaN before and after it (and in the
padding of rows, for the cases whose rows are further apart than N), so a read
outside a tensor shows as NaN, a write outside it changes the guard, and a
write into an input changes the input. Under the interpreter, a masked load
without ``other=`` gives NaN in its masked lanes (on a GPU they hold whatever
memory held, often 0), and every address a load or store touches is checked
against the elements of the tensors: for 09 and 10 an access outside every
buffer is refused before it happens, and an access into a guard or the padding
between rows, which may leave the numbers right, fails a kernel that otherwise
passes (:func:`stray_message`). Then the spec's oracle, its first looks, its
symptoms (:mod:`rmsnorm_course.checkers.diagnose`) and one translator of the
kernel's errors. It returns a Feedback and calls nothing of the parent's side.

Source: solutions/03_forward_kernel.ipynb, 04_backward_derivation.ipynb,
05_gamma_reduction.ipynb, 08_n_vs_block_exercise.ipynb, 09_the_long_row.ipynb,
10_one_pass_backward.ipynb.
"""

from __future__ import annotations

import re
import warnings
from collections.abc import Sequence

import torch

from rmsnorm.device import interpreter_active
from . import progress
from .diagnose import Case, Outputs, Run, _case_passes, _matches, diagnose
from .feedback import (
    Feedback,
    _chain,
    caused_by,
    describe_error,
    is_not_implemented,
    learner_frame,
    name_of,
    not_done,
    source_of,
    wrong,
)
from .gpu_compile import (
    ACCUMULATOR,
    FLOOR_ON_FLOAT,
    MADE_IN_LOOP,
    accumulated_in_loop,
    compile_error_message,
    floor_division,
)
from .guards import Buffers, OutOfBounds, interpreter_guards
from .preflight import first_line, masked_loads_without_other
from .spec import PROBE, ExerciseSpec, Launch

#: Words of an access outside every buffer, stopped before it happened (``spec.bounds``).
OUTSIDE_EVERY = "outside every tensor it was given"
#: Words of :func:`describe_error` that mark a kernel that raised (its message beats the GPU compiler's).
RAISED = " raised "

def _nan_where_finite(outputs: Outputs, expected: Outputs) -> bool:
    for name, want in expected.items():
        got = outputs.get(name)
        if isinstance(got, torch.Tensor) and got.shape == want.shape:
            if (torch.isnan(got.detach().cpu().double()) & torch.isfinite(want)).any():
                return True
    return False


def _launch(case: Case, kernel, launch: Launch, bounds: bool, guard_value=float("nan"), nan_other=True,
            strays: list | None = None):
    """Place the launch's tensors in guarded buffers, launch ``kernel``; (its outputs, what it must not have done).

    The first access outside the tensors' elements (:attr:`~.guards.Buffers.stray`) goes to ``strays``, with the case.
    """
    buffers = Buffers(guard_value)
    device = next(t.data.device for t in launch.tensors if t.data is not None)
    placed = {t.name: buffers.input(t.name, t.data, t.row_stride, t.room) if t.data is not None
              else buffers.output(t.name, t.shape, t.dtype, device, t.row_stride, t.room, t.fix)
              for t in launch.tensors}
    args = [placed[a] if isinstance(a, str) else a for a in launch.args]
    try:
        with interpreter_guards(nan_other, buffers, refuse=bounds):
            kernel[launch.grid](*args, **launch.options)
    finally:
        if strays is not None:
            strays.extend((case, found) for found in (buffers.stray, buffers.far) if found is not None)
    outputs = {t.name: placed[t.name].detach().cpu().clone() for t in launch.tensors if t.data is None}
    return outputs, buffers.problems()


def judge(spec: ExerciseSpec, kernel) -> Feedback:
    """In the checker's child process: run ``kernel`` on the spec's cases and say what is wrong (the one run loop).

    In this order: the kernel's errors, writes outside, reads outside and NaN
    from masked lanes (:func:`run_cases`); then each of the spec's first looks;
    then its symptoms (:func:`~rmsnorm_course.checkers.diagnose.diagnose`); a kernel they pass that touched
    memory outside the tensors' elements (:func:`stray_message`); and,
    where the spec says, the hints of :func:`refine` and the words its ``by_source`` reads in the kernel's text.
    """
    cases = spec.cases()
    strays: list = []
    outputs = run_cases(spec, kernel, cases, strays)
    if isinstance(outputs, Feedback):
        return outputs
    runs = [Run(case, out, spec.oracle(case)) for case, out in zip(cases, outputs)]
    for look in spec.first_looks:
        message = look(runs)
        if message is not None:
            return wrong(spec.exercise, message)
    feedback = diagnose(spec.exercise, runs, spec.symptoms, spec.success(runs), spec.parts, spec.terms,
                        spec.looped_row)
    feedback = _all_nan(spec.exercise, feedback, runs)
    shown = [(case, stray) for case, stray in strays if not feedback.passed and case.label in feedback.message]
    if _UNEXPLAINED_NAN in feedback.message and shown:  # no symptom named the NaN; a stray load on its case did
        found, read = _nan_from_outside(shown)
        if read:  # the load's lanes name the slip: the suspects that follow the NaN go
            feedback = wrong(spec.exercise, feedback.message.split(_UNEXPLAINED_NAN)[0] + _UNEXPLAINED_NAN + found)
        else:
            feedback = wrong(spec.exercise, f"{feedback.message}{found}")
    if feedback.passed and strays:
        return wrong(spec.exercise, stray_message(spec, kernel, *strays[0]))
    if spec.by_source is not None and not feedback.passed:
        feedback = wrong(spec.exercise, spec.by_source(feedback.message, source_of(kernel) or ""))
    if spec.stride_fix is not None:
        feedback = refine(spec.exercise, feedback, runs, spec.symptoms, spec.stride_fix, spec.nan_note)
    return feedback


def run_cases(spec: ExerciseSpec, kernel, cases: Sequence[Case],
              strays: list | None = None) -> list[Outputs] | Feedback:
    """Launch ``kernel`` on every case in guarded buffers; runs in the checker's child process.

    Under the interpreter (on every device: see :func:`~rmsnorm_course.checkers.isolate.judges`), the masked
    lanes of a load without ``other=`` read NaN. With ``spec.bounds``, an
    access outside every buffer is refused (:class:`OutOfBounds`, named with
    the learner's line) instead of crashing the process. The first access of each case outside the
    tensors' elements goes to ``strays`` as (case, :class:`OutOfBounds`).

    Returns:
        The outputs of every case (CPU copies), or a :class:`Feedback` when the
        kernel raised, wrote where it must not, read outside a tensor, or let
        the undefined lanes of a masked load without ``other=`` into a result.
    """
    exercise, bounds = spec.exercise, spec.bounds
    name = name_of(kernel)
    results = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # float16 overflow warnings of the interpreter: the feedback says it
        for case in cases:
            progress.say(f"the case {case.label}")
            try:
                launch = spec.launch(case)
                seen: list = []
                outputs, problem = _launch(case, kernel, launch, bounds, strays=seen)
                if strays is not None:
                    strays.extend(seen)
                far = next((stray for _, stray in seen if stray.tensor is None), None)
                if far is not None:  # what lies past every buffer is anyone's memory: judge the access, not the numbers
                    return wrong(exercise, past_every_buffer(name, f"on {case.label}: {name} made {far}"
                                                             f"{_frame_words(far.frame)}", far.reading()))
                if problem is not None:
                    return wrong(exercise, f"on {case.label}, {name} ran but {_with_reading(problem, seen)}")
                want = spec.oracle(case)
                if _nan_where_finite(outputs, want):
                    found = _explain_nan(exercise, kernel, case, launch, want, bounds, reads_outside=not bounds,
                                         outside=spec.outside)
                    if found is not None:
                        return found
            except Exception as error:  # noqa: BLE001 - any learner error becomes feedback
                words = spec.explain_error(case, error) if spec.explain_error is not None else None
                if words is not None:  # says RAISED, as describe_error does
                    return wrong(exercise, f"on {case.label}, {name} raised {type(_chain(error)[-1]).__name__}"
                                 f"{_learner_line(error)}: {words}")
                return _error_feedback(exercise, kernel, case, error, spec.example, spec.accumulator)
            results.append(outputs)
    return results


#: What a kernel that reached past every buffer is told, whether its process died of it or not.
PAST_EVERY_BUFFER = ("{name} read or wrote outside the tensor, past every buffer the checker gave it (on a CPU that "
                     "can stop the process, on a GPU it is an illegal address; your notebook is safe: the checker ran "
                     "it in a separate process). Checked address by address, {access}. {reading}")


def past_every_buffer(name: str, access: str, reading: str) -> str:
    """The message of an access past every buffer: ``access`` says where, ``reading`` what its lanes show ("")."""
    return PAST_EVERY_BUFFER.format(name=f"your kernel {name}", access=access, reading=reading or (
        "Check that address: the row offset (`row * row_stride`), the column offset, and the mask."))


def _error_feedback(exercise: str, kernel, case: Case, error: Exception, example: str,
                    accumulator: str = ACCUMULATOR) -> Feedback:
    """What an exception from the learner's kernel means, in words (one translator for every kernel exercise)."""
    name = name_of(kernel)
    outside = caused_by(error, OutOfBounds)
    if outside is not None:
        reading = outside.reading()
        return wrong(exercise, f"on {case.label}: {name} made {outside}{_learner_line(error)}, {OUTSIDE_EVERY} "
                     "(stopped before it happened). " + (reading or "Check that address: the row offset "
                     "(`row * row_stride`), the column offset, and the mask."))
    if is_not_implemented(error):
        return not_done(exercise, name)
    rejected = compile_error_message(kernel, error, example, accumulator)
    if rejected is not None:  # on a GPU the kernel is compiled here, in the child
        return wrong(exercise, rejected)
    frame = learner_frame(error)
    if FLOOR_ON_FLOAT.search(str(_chain(error)[-1])) and frame is not None and "//" in (frame.line or ""):
        return wrong(exercise, f"on {case.label}: {name} raised TypeError{_learner_line(error)}: "
                     f"{floor_division(frame.line or '')}")
    unbound = _unbound_after_loop(kernel, error, accumulator)
    if unbound is not None:
        return wrong(exercise, f"on {case.label}: {name} raised UnboundLocalError{_learner_line(error)}: {unbound}")
    if "illegal memory access" in str(error) or "illegal address" in str(error):
        return wrong(exercise, f"on {case.label}, your kernel {name} read or wrote outside the tensor: "
                     "CUDA stopped it with an illegal memory access. Check the row offset "
                     "(`row * row_stride`) and the masks (`cols < N`, also on the last row).")
    return wrong(exercise, f"on {case.label}: " + describe_error(name, error, example))  # says RAISED


def _unbound_after_loop(kernel, error: BaseException, accumulator: str) -> str | None:
    """A name made only inside a loop, read after a loop that ran no step for this program: what to do, or None."""
    original = _chain(error)[-1]
    found = re.search(r"local variable '(\w+)'", str(original))
    if not isinstance(original, UnboundLocalError) or found is None:
        return None
    variable = found.group(1)
    reason = (f"`{variable}` is defined only inside the loop and used after it, and a program whose loop runs no "
              "step (a program with no rows of its own) never defines it; a GPU's compiler refuses it anyway: it "
              "does not carry a variable made inside a loop past it.")
    if accumulated_in_loop(source_of(kernel) or "", variable):
        return (f"{reason} {MADE_IN_LOOP} (`{variable} = {accumulator}` for a block, `0.0` for a single number), "
                "and inside the loop only add to it.")
    return f"{reason} Use it only inside the loop, or compute it before the loop if the code after the loop needs it."


def _learner_line(error: BaseException) -> str:
    """' (at line 12: `x = tl.load(...)`)' for the deepest frame of the learner's code in the exception chain, or ''."""
    return _frame_words(learner_frame(error))


def _frame_words(frame) -> str:
    """' (at line 12: `x = tl.load(...)`)' for a ``traceback.FrameSummary``, or '' (None, or no text)."""
    if frame is None or not frame.line:
        return ""
    return f" (at line {frame.lineno}: `{frame.line.strip()}`)"


#: What an access outside the tensors' elements does on a GPU, by its kind.
_ON_A_GPU = {
    "load": "reads memory that is not {tensor}'s elements (the next row's values, the padding, or past the buffer "
            "on the last row): the numbers come out right here only because the checker's memory there is harmless",
    "store": "writes where no element of {tensor} lies: into the padding, into the next row (a race with the program "
             "that owns it), or past the buffer on the last row",
    "atomic operation": "changes memory where no element of {tensor} lies",
}

#: How to keep each kind of stray access in, where the spec's ``masks`` do not say it (:class:`~.spec.ExerciseSpec`).
_MASKS = {
    "columns": "mask every load and store with the column mask, `mask = cols < N`: only its lanes are read or "
               "written, so the lanes past the row's last column touch nothing",
    "rows": "only rows 0 … M − 1 exist: mask the rows past M, or stop the loop over rows at M",
    "start": "check the address: the row offset (`row * row_stride`) and the column offset",
}


def stray_message(spec: ExerciseSpec, kernel, case: Case, stray: OutOfBounds) -> str:
    """The message for a kernel whose numbers are right but that read or wrote outside a tensor's elements."""
    tensor = stray.tensor or "a tensor"
    axis = "columns" if stray.axis in ("elements", "") else stray.axis
    fix = spec.masks.get(stray.tensor or "", spec.masks.get(axis, _MASKS.get(axis, _MASKS["start"])))
    gpu = _ON_A_GPU.get(stray.kind, _ON_A_GPU["load"]).format(tensor=tensor)
    reading = stray.reading()
    return (f"on {case.label}, {name_of(kernel)} gets the numbers right, but it made {stray}"
            f"{_frame_words(stray.frame)}, outside the tensor's elements (every address of an unmasked lane is "
            f"checked). On a GPU that {stray.kind} {gpu}. " + (reading or f"The fix: {fix}."))


def _explain_nan(exercise, kernel, case, launch, want, bounds, reads_outside, outside=()) -> Feedback | None:
    """NaN where a number was expected: an other-less masked load, or a read outside a tensor? None if neither.

    A read outside is run again with :data:`~.spec.PROBE` around every tensor; where one of ``outside`` (the
    exercise's models of such reads) predicts that run's outputs, its words name the slip.
    """
    name = name_of(kernel)
    if interpreter_active():
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
    seen: list = []
    outputs, problem = _launch(case, kernel, launch, bounds, guard_value=PROBE, strays=seen)
    if problem is not None:
        return wrong(exercise, f"on {case.label}, {name} ran but {_with_reading(problem, seen)}")
    if not _nan_where_finite(outputs, want):
        run = Run(case, outputs, want)
        named = next((s for s in outside if _matches(run, {**want, **s.model(case)})), None)
        if named is not None:
            return wrong(exercise, f"on {case.label}, {name} read outside its tensors: {named.summary}. {named.fix}")
        loads = [stray for _, stray in seen if stray.kind == "load"]
        if loads:
            stray = loads[0]
            reading = stray.reading()
            return wrong(exercise, f"on {case.label}, {name} read outside its tensors: it made {stray}"
                         f"{_frame_words(stray.frame)}, and what it read there reached the result. "
                         + (reading or _AXIS_HINTS.get(stray.axis, _AXIS_HINTS["start"])))
        return wrong(exercise, f"on {case.label}, {name} read outside its tensors: its result depends on the memory "
                     "just before or after a tensor (or between rows), which the checker filled with NaN. Check the "
                     "row offset (`row * row_stride`, not `row * N` or `row * BLOCK_SIZE`) and the masks of every "
                     "`tl.load` (`cols < N`).")
    return None


#: Where a stray load's address went, when its lanes fit no model of :mod:`~.addresses`: what to check.
_AXIS_HINTS = {
    "columns": "Check that load's column mask (`cols < N`) and its row offset (`row * row_stride`: where the rows "
               "lie further apart than N, padding lies between them).",
    "rows": "That row does not exist: check the row offset (`row * row_stride`) and the bound of any loop over rows.",
    "elements": "Check that load's mask and how many elements the tensor holds (one per row, or one per column).",
    "start": "Check that load's address: the pointer, the row offset (`row * row_stride`) and the column offset.",
}


def _nan_from_outside(strays: list) -> tuple[str, str]:
    """Where a NaN can come from when the kernel also read outside a tensor: (words for that load, what its lanes
    show or "")."""
    loads = [(case, stray) for case, stray in strays if stray.kind == "load"]
    if not loads:
        return "", ""
    case, stray = loads[0]
    reading = stray.reading()
    return (f" On {case.label} it made {stray}{_frame_words(stray.frame)}: the checker's NaN lies there, so that load "
            f"brings NaN in. {reading}").rstrip(), reading


#: The generic suspects of a write outside a tensor (:meth:`~.guards.Buffers.problems`), dropped where the
#: addresses name the slip.
_GENERIC_SUSPECTS = ": check the row offset"


def _with_reading(problem: str, strays: list) -> str:
    """``problem`` as a sentence, and what the first stray access's lanes show; its generic suspects go when they do."""
    reading = _read_back(strays)
    if reading and _GENERIC_SUSPECTS in problem:
        problem = problem.split(_GENERIC_SUSPECTS)[0]
    return f"{problem}.{reading}"


def _read_back(strays: list) -> str:
    """' ' + what the first stray access's lanes show (:func:`~.addresses.reading`), or ''."""
    for _, stray in strays:
        reading = stray.reading()
        if reading:
            return f" {reading}"
    return ""


_UNEXPLAINED_NAN = "is still NaN: never written, or computed from NaN."


def _all_nan(exercise: str, feedback: Feedback, runs: Sequence[Run]) -> Feedback:
    """Where every output of every case is NaN, as the checker filled them: the two causes that fit, and where
    the second comes from (a load from an output's pointer reads the checker's NaN)."""
    if feedback.passed or not feedback.message.endswith(_UNEXPLAINED_NAN):
        return feedback
    if not all(isinstance(out, torch.Tensor) and bool(torch.isnan(out.detach().cpu()).all())
               for run in runs for out in run.actual.values()):
        return feedback
    return wrong(exercise, f"{feedback.message} Every output of every case is NaN, as the checker fills the outputs "
                 "before the launch: either nothing is stored, or what is stored is computed from NaN. The checker's "
                 "NaN is in the outputs and around the inputs, so a load from an output's pointer (`y_ptr` where "
                 "`x_ptr` belongs) or from outside the inputs reads it: check each load's pointer, and that each "
                 "store is reached.")


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
    if nan_note is not None and feedback.message.endswith(_UNEXPLAINED_NAN):
        # only where diagnose named no cause of the NaN (a hint follows that sentence when it did)
        return wrong(exercise, f"{feedback.message} {nan_note}")
    return feedback

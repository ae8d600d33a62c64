"""An exercise, declared once: what a learner's kernel is judged against, as data.

Every kernel exercise (03, 04, 05, 08's fix, 09, 10) is one frozen
:class:`ExerciseSpec`; :func:`rmsnorm_course.checkers.kernels.check` judges any
kernel against any spec, and ships the spec (cloudpickled, with the learner's
kernel source) to the checker's child process, where
:func:`rmsnorm_course.checkers.kernels.judge` runs it: one run loop, one time
limit, one error translator. A new exercise is a spec plus its symptoms.

Source: solutions/03_forward_kernel.ipynb … 10_one_pass_backward.ipynb.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from .diagnose import Case, Outputs, Run, Symptom
from .guards import Buffers

#: launch(case, kernel, buffers) -> outputs: the kernel launched as the package launcher (or the exercise) would.
Launch = Callable[[Case, object, Buffers], Outputs]


@dataclass(frozen=True)
class ExerciseSpec:
    """One kernel exercise: reference, signature, cases, launch, symptoms and messages.

    Attributes:
        exercise: the name every Feedback shows ("03 · forward kernel").
        reference: the package (or teaching) ``@triton.jit`` kernel whose signature the learner keeps.
        signatures: ((argument types, constexprs), …) of the reference's parameters, one per dtype, for
            the compile for a CUDA target.
        cases: () -> the cases (:class:`~rmsnorm_course.checkers.diagnose.Case`), built in the child.
        launch: launches the learner's kernel on one case, its tensors from the guarded buffers it is given.
        oracle: case -> float64 outputs (where NaN may not appear).
        symptoms: the classic slips, each a float64 model with its words
            (:class:`~rmsnorm_course.checkers.diagnose.Symptom`), tried in order.
        success: runs -> the message of a kernel that passes.
        example: a call the learner can run to see a whole traceback ("" where none helps).
        mask_note: what an unmasked block access would do here (ends the preflight's message).
        first_looks: runs -> a message or None, each tried before the symptoms (a slip no float64
            model captures, such as a value rounded to 16 bits).
        stride_fix: where only the cases whose rows are further apart than N fail, the end of that
            message (None: not said).
        nan_note: added to a message about a value that is still NaN (None: nothing added).
        bounds: under the interpreter, refuse an access outside every buffer before it happens; the
            symptoms then name the reads just outside a row (a NaN that reached a result is theirs to
            explain), which otherwise are "read outside its tensors".
    """

    exercise: str
    reference: object
    signatures: tuple[tuple[dict, dict], ...]
    cases: Callable[[], Sequence[Case]]
    launch: Launch
    oracle: Callable[[Case], Outputs]
    symptoms: tuple[Symptom, ...]
    success: Callable[[Sequence[Run]], str]
    example: str = ""
    mask_note: str = ""
    first_looks: tuple[Callable[[Sequence[Run]], str | None], ...] = ()
    stride_fix: str | None = None
    nan_note: str | None = None
    bounds: bool = False


def typed(parameters: dict[str, str], constexprs: dict, dtypes=("fp32", "fp16")) -> tuple[tuple[dict, dict], ...]:
    """The signatures of a kernel for each dtype of x: ``{t}`` in a type stands for it (``"*{t}"``)."""
    return tuple(({name: kind.format(t=t) for name, kind in parameters.items()}, dict(constexprs)) for t in dtypes)

"""An exercise, declared once: what a learner's kernel or function is judged against, as data.

Every kernel exercise (03, 04, 05, 08's fix, 09, 10, 14, 15) is one frozen
:class:`ExerciseSpec`; :func:`rmsnorm_course.checkers.kernels.check` judges any
kernel against any spec, and ships the spec (cloudpickled, with the learner's
kernel source) to the checker's child process, where
:func:`rmsnorm_course.checkers.run_loop.judge` runs it: one run loop, one time
limit, one error translator. Every Python exercise, of numbers, readings or fakes
checked against an oracle (01, 02, 06, 07, 08's hypothesis, 11–13), is one frozen :class:`FunctionSpec`
(07 and 12, two answers each, one spec per answer), judged in the same child,
under the same time limit, by :func:`rmsnorm_course.checkers.functions.check`.
A new exercise is a spec plus its symptoms.

Source: solutions/01_formula.ipynb … 15_layernorm.ipynb.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

import torch

from .diagnose import Case, Outputs, Run, Symptom

#: What the guards hold in the second run of a kernel whose result came out NaN: a read outside a tensor then
#: brings this number in, and an exercise's models of such reads (:attr:`ExerciseSpec.outside`) predict the result.
#: Not 1: a row of ones read from outside would look like a row of 257 ones, and RMSNorm cannot tell them apart.
PROBE = 2.0


@dataclass(frozen=True)
class Tensor:
    """One tensor a kernel is given, placed by the run loop in a NaN-guarded buffer (:mod:`~.guards`).

    Attributes:
        name: its name in messages and in :attr:`Launch.args`.
        data: an input's values (copied into the buffer; the kernel must not change them); None for an output.
        shape: an output's shape; ``dtype`` its dtype (it starts as NaN, on the device of the first input).
        row_stride: elements between the starts of its rows (None: its width).
        room: elements of guard after it (None: as long as the whole tensor again).
        fix: how a write outside it is worded (see :meth:`~.guards.Buffers.output`).
    """

    name: str
    data: torch.Tensor | None = None
    shape: tuple[int, ...] = ()
    dtype: torch.dtype | None = None
    row_stride: int | None = None
    room: int | None = None
    fix: str | Callable[[list[int]], str] | None = None


def given(name: str, data: torch.Tensor, row_stride: int | None = None, room: int | None = None) -> Tensor:
    """An input of the kernel: ``data``, copied into a guarded buffer."""
    return Tensor(name, data, row_stride=row_stride, room=room)


def made(name: str, shape, dtype: torch.dtype, row_stride: int | None = None, room: int | None = None,
         fix: str | Callable[[list[int]], str] | None = None) -> Tensor:
    """An output of the kernel: NaN-filled, in a guarded buffer; the run loop returns it."""
    return Tensor(name, None, tuple(shape), dtype, row_stride, room, fix)


@dataclass(frozen=True)
class Launch:
    """How a kernel is launched on one case, as data: the run loop places the tensors and makes the call.

    ``kernel[grid](*args, **options)``, where each ``str`` of ``args`` names one of ``tensors`` (its
    guarded copy); the outputs (:func:`made`) are what the launch returns, in the order declared.
    """

    tensors: tuple[Tensor, ...]
    grid: tuple[int, ...]
    args: tuple
    options: dict = field(default_factory=dict)


@dataclass(frozen=True)
class ExerciseSpec:
    """One kernel exercise: reference, signature, cases, launch, symptoms and messages.

    Attributes:
        exercise: the name every Feedback shows ("03 · forward kernel").
        reference: the package (or teaching) ``@triton.jit`` kernel whose signature the learner keeps.
        signatures: ((argument types, constexprs), …) of the reference's parameters, one per dtype, for
            the compile for a CUDA target.
        cases: () -> the cases (:class:`~rmsnorm_course.checkers.diagnose.Case`), built in the child.
        launch: case -> :class:`Launch`, the launch the package launcher (or the exercise) makes, as data.
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
        outside: the classic reads outside a tensor (a row mask off by one, a row offset one row too
            far), each a float64 model of the outputs when the memory around every tensor holds
            :data:`PROBE`; tried on the case where the read showed, so that the message names
            the address or mask at fault, not every suspect.
        explain_error: (case, error) -> what an error the kernel raised on that case means here, or None
            (the run loop's own words then): 05's shapes of BLOCK_M for BLOCK_N, which only its case with
            BLOCK_M ≠ BLOCK_N can raise.
        int64_row: where the exercise asks for the row index in int64, the cast it shows (a kernel that passes
            but multiplies an int32 row index by a stride is then named, with this fix; None: not checked).
        masks: the words that keep a load or store inside a tensor's elements, where one went outside them but the
            numbers came out right (:func:`~rmsnorm_course.checkers.run_loop.stray_message`): by what it passed,
            "columns" (a 1-D tensor's elements too) or "rows", or by the tensor's name; the run loop's own words
            where a key is missing.
        looped_row: the block is narrower than the row by design (09): the row's last columns left unwritten are
            named as a column loop that stops early, not as a fixed block width.
        accumulator: the accumulator the exercise starts before its loop, as advice shows it (05's is 2-D).
        by_source: (message, the kernel's source) -> the message: where two slips give the same numbers
            and one symptom names both, the line that is in the kernel picks the one (10's mean of u · x
            or rstd on dx's first term only).
        parts: where no symptom matches, the words for the part of the code behind each shape of error
            (:data:`~rmsnorm_course.checkers.shapes.PARTS`: a key, or ``"output.key"`` for one output, to its
            words); an empty mapping keeps the generic words.
        terms: (runs, name of the first wrong output) -> words naming which term of its formula is off
            (:func:`~rmsnorm_course.checkers.dx_terms.explainer`), tried before ``parts``; None: not tried.
    """

    exercise: str
    reference: object
    signatures: tuple[tuple[dict, dict], ...]
    cases: Callable[[], Sequence[Case]]
    launch: Callable[[Case], Launch]
    oracle: Callable[[Case], Outputs]
    symptoms: tuple[Symptom, ...]
    success: Callable[[Sequence[Run]], str]
    example: str = ""
    mask_note: str = ""
    first_looks: tuple[Callable[[Sequence[Run]], str | None], ...] = ()
    stride_fix: str | None = None
    nan_note: str | None = None
    bounds: bool = False
    outside: tuple[Symptom, ...] = ()
    explain_error: Callable[[Case, BaseException], str | None] | None = None
    by_source: Callable[[str, str], str] | None = None
    parts: Mapping[str, str] = field(default_factory=dict)
    terms: Callable[[Sequence[Run], str], str | None] | None = None
    int64_row: str | None = None
    accumulator: str = "tl.zeros([BLOCK_SIZE], dtype=tl.float32)"
    looped_row: bool = False
    masks: Mapping[str, str] = field(default_factory=dict)


class Refused(Exception):
    """Raised by a :class:`FunctionSpec`'s ``cases`` or ``run``: the answer is wrong before any number is compared."""


class Raised(Exception):
    """Raised by a :class:`FunctionSpec`'s ``cases`` or ``run`` when the learner's code raised ``error``.

    Attributes:
        where: the learner's code that raised, as messages name it (```my_row```, ```MyFunction`.backward``).
        error: what it raised.
        example: a call that shows the whole traceback ("": the spec's ``example``).
    """

    def __init__(self, where: str, error: BaseException, example: str = ""):
        super().__init__(where, error)
        self.where, self.error, self.example = where, error, example


@dataclass(frozen=True)
class FunctionSpec:
    """One Python exercise (01, 02, 06, 07, 08's hypothesis, 11–13): a learner's function or class, its cases,
    oracle, symptoms and messages.

    :func:`rmsnorm_course.checkers.functions.check` judges any answer against any such spec, in the
    checker's child process (the spec travels there cloudpickled, with the answer): ``cases``, then for each
    case ``run``, ``oracle`` and ``verify``; then ``first_looks``, then the symptoms.

    Attributes:
        exercise: the name every Feedback shows ("02 · PyTorch reference").
        reference: the package's own answer (function or class) the learner writes again.
        cases: (answer, **given) -> the cases; 01's one case is the learner's own row, so it calls the answer;
            ``given`` is what the notebook hands along (07's samples, 12's and 13's committed tables).
        run: (answer, case) -> the learner's outputs on the case. It raises :class:`Raised` where the
            learner's code raised and :class:`Refused` for an answer of the wrong kind, shape or dtype.
        oracle: case -> the float64 outputs (any values where ``verify`` compares them or
            ``first_looks`` do, as 07's, 08's and 11–13's do).
        symptoms: the classic slips, each a float64 model with its words, tried in order.
        success: runs -> the message of an answer that passes.
        example: a call the learner can run to see a whole traceback.
        explain: (error, case) -> words for an error of the learner's code that says more than its
            traceback (None: the traceback's own words).
        name_the_case: start the words for a learner's error with the case it met ("on 4×4 float32: ").
        verify: run -> a message or None, right after each case's run (later cases do not run). A spec with a
            verify and no symptoms passes once every run is verified and no first look objects.
        first_looks: runs -> a message or None, each tried before the symptoms.
    """

    exercise: str
    reference: object
    cases: Callable[..., Sequence[Case]]
    run: Callable[[object, Case], Outputs]
    oracle: Callable[[Case], Outputs]
    symptoms: tuple[Symptom, ...]
    success: Callable[[Sequence[Run]], str]
    example: str = ""
    explain: Callable[[BaseException, Case], str | None] | None = None
    name_the_case: bool = False
    verify: Callable[[Run], str | None] | None = None
    first_looks: tuple[Callable[[Sequence[Run]], str | None], ...] = ()


def checked_rows(around: str, outside: str, stride_note: str = "") -> dict:
    """The fields of a spec whose accesses outside every buffer are refused (09, 10): bounds, and the words for rows
    and NaN.

    Args:
        around: what the NaN surrounds ("x and gamma").
        outside: where a read that brings NaN went ("a row (a mask past N, another row's offset)").
        stride_note: ends the message for rows addressed with N (" (a slice … has row_stride > N)").
    """
    return {"bounds": True,
            "stride_fix": f"address the rows with `row * row_stride`, never `row * N`{stride_note}.",
            "nan_note": f"Everything around {around} is NaN here, so a read outside {outside} shows up as NaN."}


def typed(parameters: dict[str, str], constexprs: dict, dtypes=("fp32", "fp16")) -> tuple[tuple[dict, dict], ...]:
    """The signatures of a kernel for each dtype of x: ``{t}`` in a type stands for it (``"*{t}"``)."""
    return tuple(({name: kind.format(t=t) for name, kind in parameters.items()}, dict(constexprs)) for t in dtypes)

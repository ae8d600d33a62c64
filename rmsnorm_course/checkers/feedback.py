"""The answer a checker gives: a small object that reads well in a notebook and in a test.

A checker never raises for a learner's mistake: it returns a :class:`Feedback`
whose ``status`` is ``"passed"``, ``"not done yet"`` or ``"wrong"`` and whose
``message`` says, in plain words, what is wrong. The solutions notebooks then
``assert feedback.passed, feedback`` (inside an nbgrader hidden-test block),
so a wrong solution fails nbval, while a learner's skeleton shows
"not done yet" without a traceback.

Source: solutions/*.ipynb (every check cell).
"""

from __future__ import annotations

import html
import inspect
import traceback
from dataclasses import dataclass

from . import shape_errors

PASSED = "passed"
NOT_DONE = "not done yet"
WRONG = "wrong"

_COLOURS = {PASSED: "#1a7f37", NOT_DONE: "#9a6700", WRONG: "#cf222e"}


@dataclass(frozen=True)
class Feedback:
    """What a checker found.

    Attributes:
        exercise: the exercise, e.g. ``"03 · forward kernel"``.
        status: ``"passed"``, ``"not done yet"`` or ``"wrong"``.
        message: one or two sentences in plain words, with the numbers seen.
    """

    exercise: str
    status: str
    message: str

    @property
    def passed(self) -> bool:
        """True only for ``status == "passed"``."""
        return self.status == PASSED

    def __str__(self) -> str:
        return f"[{self.exercise}] {self.status}: {self.message}"

    __repr__ = __str__

    def _repr_html_(self) -> str:
        colour = _COLOURS.get(self.status, "#57606a")
        return (
            f'<div style="border-left: 4px solid {colour}; padding: 0.3em 0.8em; margin: 0.3em 0">'
            f'<b style="color: {colour}">{html.escape(self.status)}</b> '
            f"<span style=\"color: #57606a\">[{html.escape(self.exercise)}]</span><br>"
            f"{code_to_html(self.message)}</div>"
        )


def code_to_html(text: str) -> str:
    """Escape ``text`` for HTML and show each `backquoted` span as <code> (no literal backquotes left)."""
    parts = text.split("`")
    if len(parts) % 2 == 0:  # an unpaired backquote: escape everything as it is
        return html.escape(text)
    return "".join(
        html.escape(part) if i % 2 == 0 else f"<code>{html.escape(part)}</code>" for i, part in enumerate(parts)
    )


def passed(exercise: str, message: str) -> Feedback:
    """A :class:`Feedback` with status "passed"."""
    return Feedback(exercise, PASSED, message)


def wrong(exercise: str, message: str) -> Feedback:
    """A :class:`Feedback` with status "wrong"."""
    return Feedback(exercise, WRONG, message)


def not_done(exercise: str, name: str) -> Feedback:
    """A :class:`Feedback` for a skeleton that still raises NotImplementedError."""
    return Feedback(
        exercise,
        NOT_DONE,
        f"{name} still raises NotImplementedError. Replace the lines `# YOUR CODE HERE` / "
        "`raise NotImplementedError()` with your code, run that cell, then run this one again.",
    )


def is_not_implemented(error: BaseException) -> bool:
    """True when ``error`` is, or wraps, a NotImplementedError.

    Triton's interpreter wraps an exception raised inside a kernel in an
    ``InterpreterError`` whose message names the original one.
    """
    return any(isinstance(e, NotImplementedError) or str(e).startswith("NotImplementedError") for e in _chain(error))


def caused_by(error: BaseException, kind: type) -> BaseException | None:
    """The ``kind`` exception that ``error`` is or wraps (the interpreter wraps a kernel's errors), or None."""
    return next((e for e in _chain(error) if isinstance(e, kind)), None)


#: Frames that are not the learner's: the package, the checkers (their patches of the interpreter run inside the
#: learner's kernel), installed libraries (also Debian's dist-packages, and Cython sources such as pandas'
#: ``hashtable_class_helper.pxi``, whose frames carry a relative name), Python's own.
_NOT_LEARNER = ("/rmsnorm/", "/rmsnorm_course/checkers/", "/torch/", "/triton/", "/multiprocessing/", "/cloudpickle/",
                "/numpy/", "/site-packages/", "/dist-packages/", ".pxi", ".pyx", "<frozen")


def _chain(error: BaseException) -> list[BaseException]:
    chain, seen = [], set()
    while error is not None and id(error) not in seen and len(chain) < 10:
        chain.append(error)
        seen.add(id(error))
        error = error.__cause__ or error.__context__
    return chain


def innermost_learner_frame(frames, copies_last: bool = True):
    """The innermost of ``frames`` (``traceback.FrameSummary``, outermost first) in the learner's code, or None.

    With ``copies_last``, a cell or the learner's file first, else a kernel the checker defined again from the
    learner's cell; without it, the innermost of either (on a whole stack, whose outer frames hold the child
    process's own ``<string>``, the kernel's frame is the innermost).
    """
    for frame in reversed(frames):
        if not any(part in frame.filename for part in _NOT_LEARNER) and not (
                copies_last and "rmsnorm_checker_" in frame.filename):
            return frame
    return next((frame for frame in reversed(frames) if "rmsnorm_checker_" in frame.filename), None)


def learner_frame(error: BaseException):
    """The innermost traceback frame in the learner's code (a cell or their file), across chained errors."""
    for link in reversed(_chain(error)):  # the original error is last in the chain
        frame = innermost_learner_frame(traceback.extract_tb(link.__traceback__))
        if frame is not None:
            return frame
    return None


def _place(filename: str) -> str:
    """'your cell' for a notebook cell (or a kernel the checker defined again from one), else the file's name."""
    name = filename.replace("\\", "/").rsplit("/", 1)[-1]
    if filename.startswith("<") or "ipykernel" in filename or "rmsnorm_checker_" in filename:
        return "your cell"
    return f"`{name}`"


def describe_error(name: str, error: BaseException, example: str = "") -> str:
    """One plain sentence for an exception raised by the learner's code.

    Names the original exception (Triton's interpreter wraps it), its first
    line, the learner's line and its text, and how to call the code yourself.
    """
    original = _chain(error)[-1]
    first = (str(original).strip().splitlines() or [""])[0][:300]
    frame = learner_frame(error)
    where = ""
    if frame is not None:
        text = f": `{frame.line.strip()}`" if frame.line else ""
        where = f" at line {frame.lineno} of {_place(frame.filename)}{text}"
    how = f" To see the whole traceback, call it yourself, e.g. `{example}`." if example else (
        " Call it yourself on a small input to see the whole traceback.")
    said = shape_errors.words(first, (frame.line or "") if frame is not None else "")
    if said is not None:  # a load's or store's shapes: Triton's words name neither the value nor the fix
        return f"{name} raised {type(original).__name__}{where}: {said} (Triton: {first}.){how}"
    if "'int' object has no attribute 'to'" in first:  # a loop variable under the interpreter
        how = (" Under Triton's interpreter a loop variable (and a plain integer argument) is a Python int, "
               "which has no `.to`: write `tl.cast(row, tl.int64)`, which works on the GPU too." + how)
    return f"{name} raised {type(original).__name__}{where}: {first}.{how}"


def checker_failed(exercise: str, error: BaseException) -> Feedback:
    """The "wrong" Feedback of a checker that met an error of its own (it never raises in a notebook)."""
    return Feedback(exercise, WRONG, f"the checker could not judge this answer: "
                    f"{describe_error('your code, or the checker,', error)} If your code looks "
                    "right, please report this to the course's instructors.")


def name_of(obj) -> str:
    """The name a learner gave to a function, kernel or class, in backquotes."""
    fn = getattr(obj, "fn", obj)
    return f"`{getattr(fn, '__name__', type(obj).__name__)}`"


def source_of(obj) -> str | None:
    """The source text of a function, kernel (its ``.fn``) or class; None if unavailable."""
    try:
        return inspect.getsource(getattr(obj, "fn", obj))
    except (OSError, TypeError):
        return None

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
            f"{html.escape(self.message)}</div>"
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
    seen = 0
    while error is not None and seen < 10:
        if isinstance(error, NotImplementedError) or str(error).startswith("NotImplementedError"):
            return True
        error = error.__cause__ or error.__context__
        seen += 1
    return False


def describe_error(name: str, error: BaseException) -> str:
    """One plain sentence for an exception raised by the learner's code.

    Names the exception, its first line, and the learner's line it came from
    when the traceback reaches a notebook cell or file outside the package.
    """
    first = (str(error).strip().splitlines() or [""])[0][:300]
    where = ""
    for frame in reversed(traceback.extract_tb(error.__traceback__)):
        if "/rmsnorm/" not in frame.filename and "/torch/" not in frame.filename and "/triton/" not in frame.filename:
            where = f" (at `{frame.line.strip()}`)" if frame.line else ""
            break
    return (
        f"{name} raised {type(error).__name__}: {first}{where}. Call it yourself on a small "
        "input to see the whole traceback."
    )


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

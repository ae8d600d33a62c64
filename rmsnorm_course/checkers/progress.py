"""A child's progress reports: what the learner's code is doing now, sent to the parent that waits for it.

The parent (:func:`rmsnorm_course.checkers.isolate.wait_all`) stops a child
that reports nothing for the time limit, and names the last report in its
message ("during the case a row of 257 ones"). The child's entry point sets
:data:`channel`; the run loop and the Python checkers call :func:`say` before
each case, and never call back into :mod:`~rmsnorm_course.checkers.isolate`.

Source: solutions/03_forward_kernel.ipynb … 10_one_pass_backward.ipynb.
"""

from __future__ import annotations

#: In a child: the connection to its parent (set by the child's entry point); None in the parent.
channel = None


def say(what: str) -> None:
    """Report ``what`` (e.g. "the case M = 1") to the parent; nothing in the parent."""
    if channel is not None:
        channel.send(("progress", what))

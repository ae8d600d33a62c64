"""Every widget in the notebooks answers: each visible control, when moved, changes the printed output.

nbval runs a widget cell but cannot see what the widget shows when a control moves (lesson 05's
``interactive`` once showed two sliders and no output, because ``interactive`` does not display a
return value). This test runs each notebook that builds an ``interactive`` with nbclient, then, in
the same kernel, moves every visible control of every ``interactive`` in turn and records what the
callback printed or displayed. The browser test (tests/browser, ``make test-browser``) does the
same with a mouse and a keyboard in JupyterLab.
"""

import copy
import json
import re
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient
from nbclient.exceptions import CellTimeoutError, DeadKernelError

from kernel_start import AsyncKernelManager  # ipc sockets, no ports to race for; stderr in a start error

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS = sorted(p for folder in ("notebooks", "solutions", "exercises") for p in (ROOT / folder).glob("*.ipynb"))
WIDGET_CALL = re.compile(r"\binteract(ive)?\(")
WITH_WIDGETS = [p for p in NOTEBOOKS if any(WIDGET_CALL.search(c.source) for c in nbformat.read(p, as_version=4).cells
                                          if c.cell_type == "code")]

# Runs in the notebook's kernel after its last cell. Prints one JSON line: for each interactive,
# the output before and after its first update and each move of a visible control (or the error
# its callback raised). Sliders are moved from the widget's first state and put back; each option
# of a dropdown is chosen in turn, and at each the sliders it shows are moved again.
PROBE = r'''
import contextlib as _contextlib
import io as _io
import json as _json
import sys as _sys

from ipywidgets import interactive as _interactive
from ipywidgets.widgets.widget import _instances as _widgets


def _probe_output(action):
    """What `action` printed or displayed, and the exception the callback raised (shown, not raised)."""
    shell, printed, shown, raised = get_ipython(), _io.StringIO(), [], []
    publish, show_traceback = shell.display_pub.publish, shell.showtraceback
    shell.display_pub.publish = lambda data, *args, **kwargs: shown.append(repr(data.get("text/plain", sorted(data))))
    shell.showtraceback = lambda *args, **kwargs: raised.append(repr(_sys.exc_info()[1]))
    try:
        with _contextlib.redirect_stdout(printed):
            action()
    finally:
        shell.display_pub.publish, shell.showtraceback = publish, show_traceback
    return {"output": printed.getvalue() + "".join(shown), "error": raised[0] if raised else None}


def _move(control):
    """Give `control` another value it allows: the next option, or the slider's other end."""
    if hasattr(control, "options"):
        return lambda: setattr(control, "index", (control.index + 1) % len(control.options))
    if hasattr(control, "min") and hasattr(control, "max"):
        return lambda: setattr(control, "value", control.max if control.value == control.min else control.min)
    raise TypeError(f"the widget test cannot move a {type(control).__name__}: teach _move how")


def _hidden(control):
    return control.layout.display == "none" or control.layout.visibility == "hidden"


def _step(steps, name, action):
    """Run `action` (a move), recording the output before it (the last step's) and after it."""
    before = steps[-1]["output"] if steps else None
    steps.append({"control": name, "before": before, **_probe_output(action)})


def _move_each_visible_control(w, steps, state):
    """Move each visible non-choice control of `w` once, then put it back (lesson 01's x2 at N = 2 is hidden)."""
    for control in w.kwargs_widgets:
        if hasattr(control, "options") or _hidden(control):
            continue
        value = control.value
        _step(steps, f"{control.description} ({state})", _move(control))
        _step(steps, f"{control.description} back ({state})", lambda: setattr(control, "value", value))


_report = []
for _w in [w for w in list(_widgets.values()) if isinstance(w, _interactive)]:
    _steps = []
    _step(_steps, "(first update)", _w.update)
    _move_each_visible_control(_w, _steps, "as first shown")
    for _chooser in [c for c in _w.kwargs_widgets if hasattr(c, "options") and not _hidden(c)]:
        for _ in range(len(_chooser.options)):  # every option, then back to the first shown
            _step(_steps, _chooser.description, _move(_chooser))
            _move_each_visible_control(_w, _steps, f"{_chooser.description} = {_chooser.value}")
    _report.append({"function": _w.f.__name__, "steps": _steps})
print(_json.dumps(_report))
'''


def _execute(nb, path):
    """Run the notebook (and the probe) in a fresh kernel; one more try if the client waits on an idle kernel.

    Under heavy load (two test suites at once in Docker) nbclient was seen waiting forever for a
    reply from a kernel that sat idle: a lost message, not a wrong notebook. A per-cell limit of
    120 s turns that into CellTimeoutError, and one retry on a new kernel tells the two apart:
    a notebook that really hangs or fails does so twice, and the second error is raised.
    """
    for attempt in (1, 2):
        run = copy.deepcopy(nb)
        try:
            NotebookClient(run, timeout=120, startup_timeout=120, kernel_name="python3",
                           kernel_manager_class=AsyncKernelManager,
                           resources={"metadata": {"path": str(path.parent)}}).execute()
        except (CellTimeoutError, DeadKernelError):
            if attempt == 2:
                raise
            continue
        return run


@pytest.mark.parametrize("path", WITH_WIDGETS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_every_widget_control_changes_the_output(path):
    nb = nbformat.read(path, as_version=4)
    expected = sum(len(WIDGET_CALL.findall(c.source)) for c in nb.cells if c.cell_type == "code")
    nb.cells.append(nbformat.v4.new_code_cell(PROBE))
    nb = _execute(nb, path)
    printed = "".join(o.get("text", "") for o in nb.cells[-1].outputs if o.get("name") == "stdout")
    report = json.loads(printed.strip().splitlines()[-1])

    assert len(report) == expected, (
        f"{path.name}: {expected} interact(ive) call(s) in the source, {len(report)} widget(s) found"
    )
    for widget in report:
        steps = widget["steps"]
        assert len(steps) >= 2, f"{widget['function']}: no visible control"
        for step in steps:
            where = f"{path.name}, {widget['function']}, {step['control']}"
            assert step["error"] is None, f"{where}: the callback raised {step['error']}"
            assert step["output"].strip(), (
                f"{where}: the widget shows nothing (interactive does not display a return value: print it)"
            )
            assert step["output"] != step["before"], f"{where}: the output did not change ({step['output']!r})"


def test_widget_notebooks_are_found():
    """The three lessons with widgets are the ones this test runs, so it cannot pass by finding none."""
    assert {p.name for p in WITH_WIDGETS} >= {
        "01_formula.ipynb",
        "05_gamma_reduction.ipynb",
        "08_n_vs_block_exercise.ipynb",
    }

"""Every notebook is committed clean: valid nbformat v4, no outputs, no execution counts.

Outputs in git make diffs unreadable and let a stale result pass for a fresh one
(nbval runs with ``--nbval-lax``, so stored outputs are never what is checked).
The content checked is what git would commit: the staged copy of a tracked
notebook (a working copy you ran in JupyterLab may keep its outputs until you
stage it), and the file itself when it is untracked or git is unavailable. In
CI's fresh clone both are the committed file. Fix a failure with ``make strip``.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOK_DIRS = ("notebooks", "solutions", "exercises")
NOTEBOOKS = sorted(
    path
    for folder in NOTEBOOK_DIRS
    for path in (ROOT / folder).rglob("*.ipynb")
    if ".ipynb_checkpoints" not in path.parts
)


def committed_text(path: Path) -> str:
    """The notebook as git would commit it: the staged blob, else the file on disk."""
    relative = path.relative_to(ROOT).as_posix()
    try:
        staged = subprocess.run(
            ["git", "-C", str(ROOT), "show", f":{relative}"],
            capture_output=True,
            text=True,
            check=False,
        )
    except FileNotFoundError:  # no git on this machine
        return path.read_text(encoding="utf-8")
    if staged.returncode == 0:
        return staged.stdout
    return path.read_text(encoding="utf-8")  # untracked, or not a git checkout


def test_every_notebook_is_in_a_course_folder():
    """`make test` runs the notebooks under notebooks/, solutions/ and exercises/ only."""
    try:
        listed = subprocess.run(
            ["git", "-C", str(ROOT), "ls-files", "--cached", "--others", "--exclude-standard", "--", "*.ipynb"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.split()
    except (FileNotFoundError, subprocess.CalledProcessError):
        pytest.skip("not a git checkout: cannot list the notebooks git would commit")
    elsewhere = [name for name in listed if name.split("/")[0] not in NOTEBOOK_DIRS]
    assert not elsewhere, f"notebooks outside {NOTEBOOK_DIRS} are never tested: {elsewhere}"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_notebook_is_committed_clean(path: Path):
    text = committed_text(path)
    ids = [cell.get("id") for cell in json.loads(text)["cells"]]  # as committed: nbformat's reader fills them in
    assert None not in ids and len(set(ids)) == len(ids), (
        f"cells {[i for i, cell_id in enumerate(ids) if cell_id is None]} have no id, or ids repeat: nbformat 4.5 "
        "requires a unique id on every cell (JupyterLab adds them when it saves)"
    )
    notebook = nbformat.reads(text, as_version=nbformat.NO_CONVERT)
    assert notebook.nbformat == 4, f"nbformat {notebook.nbformat}, expected 4"
    nbformat.validate(notebook)  # raises nbformat.ValidationError with the offending field
    dirty = [
        index
        for index, cell in enumerate(notebook.cells)
        if cell.cell_type == "code" and (cell.outputs or cell.execution_count is not None)
    ]
    assert not dirty, (
        f"code cells {dirty} carry outputs or execution counts; run `make strip` and stage again"
    )

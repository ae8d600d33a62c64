"""Generate the learner notebooks exercises/exNN_*.ipynb from the full ones in solutions/NN_*.ipynb.

Usage:
    python tools/make_exercises.py            # (re)write exercises/ from solutions/
    python tools/make_exercises.py --check    # write nothing; exit 1 if exercises/ is out of date

What it does to each notebook is exactly what nbgrader's ``ClearSolutions``
and ``ClearHiddenTests`` preprocessors do (nbgrader 0.9, default settings),
reimplemented with nbformat alone:

- In every cell, each region from a line containing ``BEGIN SOLUTION`` to a
  line containing ``END SOLUTION`` is replaced by the stub, indented like the
  BEGIN line: ``# YOUR CODE HERE`` / ``raise NotImplementedError()`` in a code
  cell, ``YOUR ANSWER HERE`` in a Markdown cell. A cell marked as an nbgrader
  solution cell but without a region is replaced by the stub as a whole.
- Each region from ``BEGIN HIDDEN TESTS`` to ``END HIDDEN TESTS`` is removed.
- A region in a cell that is not marked in its nbgrader metadata (solution
  cell for a solution region, grade cell for hidden tests), a nested BEGIN, or
  a BEGIN without its END is an error, as in nbgrader (``enforce_metadata``).
- Outputs and execution counts are cleared; ``celltoolbar`` is dropped from
  the notebook's metadata. Everything else (cell ids, metadata) is kept.

Why not nbgrader itself: it installs some 40 packages (Jupyter server,
JupyterLab, SQLAlchemy, alembic…), and nbgrader 0.9.6 needs Python ≥ 3.11
while the course supports 3.10; the GPU machine has only nbformat, nbclient and
nbval. ``tests/course/test_exercises_sync.py`` checks that this script and nbgrader
give the same cells whenever nbgrader is importable.

Source: INSTRUCTORS.md ("Handing out and resetting the exercises"); nbgrader's
``nbgrader/preprocessors/clearsolutions.py`` and ``clearhiddentests.py``.
"""

from __future__ import annotations

import argparse
import copy
import json
import re
import sys
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parent.parent
SOLUTIONS = ROOT / "solutions"
EXERCISES = ROOT / "exercises"

BEGIN_SOLUTION, END_SOLUTION = "BEGIN SOLUTION", "END SOLUTION"
BEGIN_HIDDEN, END_HIDDEN = "BEGIN HIDDEN TESTS", "END HIDDEN TESTS"
CODE_STUB = "# YOUR CODE HERE\nraise NotImplementedError()"
TEXT_STUB = "YOUR ANSWER HERE"


class MarkerError(ValueError):
    """A solution or hidden-test region is malformed, or sits in a cell not marked for it."""


def _nbgrader(cell, key: str) -> bool:
    return bool(cell.get("metadata", {}).get("nbgrader", {}).get(key, False))


def _replace_regions(source: str, begin: str, end: str, stub: list[str] | None) -> tuple[str, bool]:
    """Replace (stub given) or remove (stub None) every begin…end region of ``source``.

    Returns:
        (new source, whether a region was found).

    Raises:
        MarkerError: nested begin, or a begin without an end.
    """
    new_lines, inside, found = [], False, False
    for line in source.split("\n"):
        if begin in line:
            if inside:
                raise MarkerError(f"nested '{begin}'")
            inside = found = True
            indent = re.match(r"\s*", line).group(0)
            new_lines.extend(indent + stub_line for stub_line in (stub or []))
        elif end in line:
            inside = False
        elif not inside:
            new_lines.append(line)
    if inside:
        raise MarkerError(f"'{begin}' without '{end}'")
    return "\n".join(new_lines), found


def clear_solutions(nb) -> None:
    """nbgrader's ClearSolutions, in place: solution regions (and unmarked solution cells) become stubs.

    Raises:
        MarkerError: a malformed region, or a region in a cell not marked ``solution``.
    """
    for index, cell in enumerate(nb.cells):
        stub = CODE_STUB if cell.cell_type == "code" else TEXT_STUB
        cell.source, replaced = _replace_regions(cell.source, BEGIN_SOLUTION, END_SOLUTION, stub.split("\n"))
        if replaced and not _nbgrader(cell, "solution"):
            raise MarkerError(f"cell {index}: solution region in a cell not marked as an nbgrader solution cell")
        if _nbgrader(cell, "solution") and not replaced:
            cell.source = stub
    nb.metadata.pop("celltoolbar", None)


def clear_hidden_tests(nb) -> None:
    """nbgrader's ClearHiddenTests, in place: hidden-test regions are removed.

    Raises:
        MarkerError: a malformed region, or a region in a cell not marked ``grade``.
    """
    for index, cell in enumerate(nb.cells):
        cell.source, removed = _replace_regions(cell.source, BEGIN_HIDDEN, END_HIDDEN, None)
        if removed and not _nbgrader(cell, "grade"):
            raise MarkerError(f"cell {index}: hidden-test region in a cell not marked as an nbgrader grade cell")
    nb.metadata.pop("celltoolbar", None)


def make_exercise(solution):
    """The learner copy of a full notebook (a new notebook; the argument is not changed).

    Args:
        solution: an nbformat v4 notebook with nbgrader markers.

    Returns:
        The notebook with solutions stubbed, hidden tests removed, outputs cleared.

    Raises:
        MarkerError: as :func:`clear_solutions` and :func:`clear_hidden_tests`.
    """
    nb = copy.deepcopy(solution)
    clear_solutions(nb)
    clear_hidden_tests(nb)
    for cell in nb.cells:
        if cell.cell_type == "code":
            cell.outputs = []
            cell.execution_count = None
    return nb


def render(nb) -> str:
    """The notebook's text as written to disk (nbformat's JSON, with a final newline)."""
    text = nbformat.writes(nb)
    return text if text.endswith("\n") else text + "\n"


def exercise_name(solution_name: str) -> str:
    """``NN_name.ipynb`` → ``exNN_name.ipynb``: the exercise's file name for a solution's (or a lesson's)."""
    return "ex" + solution_name


_SIBLING_LINK = re.compile(r"\]\(([0-9][0-9]_[A-Za-z0-9_]+\.ipynb)")


def link_exercises(nb):
    """Point the markdown's links to sibling notebooks (``](03_forward_kernel.ipynb)``) at their exercises.

    In solutions/ such a link is another solution; in exercises/ it must be another exercise,
    which has its own name (:func:`exercise_name`). Changes ``nb`` in place and returns it.
    """
    for cell in nb.cells:
        if cell.cell_type == "markdown":
            cell.source = _SIBLING_LINK.sub(lambda m: "](" + exercise_name(m.group(1)), cell.source)
    return nb


def expected_exercises(solutions: Path = SOLUTIONS) -> dict[str, str]:
    """File name → text of every exercise notebook generated from ``solutions`` (NN_*.ipynb).

    The exercise of ``solutions/NN_name.ipynb`` is ``exercises/exNN_name.ipynb``: its own file name,
    so that JupyterLab's tab of the exercise does not read like the lesson's (``notebooks/NN_name``).

    Raises:
        MarkerError: naming the notebook, for a malformed or misplaced marker.
    """
    out = {}
    for path in sorted(solutions.glob("[0-9][0-9]_*.ipynb")):
        try:
            out[exercise_name(path.name)] = render(link_exercises(make_exercise(nbformat.read(path, as_version=4))))
        except MarkerError as error:
            raise MarkerError(f"{path}: {error}") from None
    return out


def out_of_date(exercises: Path, expected: dict[str, str]) -> tuple[list[str], list[str]]:
    """(generated notebooks missing or different on disk, notebooks on disk with no solution).

    Notebooks are compared as JSON data, not as text, so that another nbformat
    version's formatting of the same notebook does not count as a difference.
    """
    present = {p.name for p in exercises.glob("*.ipynb")} if exercises.is_dir() else set()
    changed = [
        name for name, text in expected.items()
        if name not in present or json.loads((exercises / name).read_text(encoding="utf-8")) != json.loads(text)
    ]
    return sorted(changed), sorted(present - set(expected))


def main(argv: list[str] | None = None) -> int:
    """Write exercises/ (or, with --check, report what differs). Returns the exit status."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="write nothing; exit 1 if exercises/ is out of date")
    parser.add_argument("--solutions", type=Path, default=SOLUTIONS)
    parser.add_argument("--exercises", type=Path, default=EXERCISES)
    args = parser.parse_args(argv)
    expected = expected_exercises(args.solutions)
    changed, stale = out_of_date(args.exercises, expected)
    if args.check:
        for name in changed:
            print(f"out of date: {args.exercises / name} (run `make exercises`)")
        for name in stale:
            print(f"no solution for: {args.exercises / name}")
        return 1 if changed or stale else 0
    args.exercises.mkdir(parents=True, exist_ok=True)
    for name in changed:
        (args.exercises / name).write_text(expected[name], encoding="utf-8")
    for name in stale:
        (args.exercises / name).unlink()
    print(f"exercises/: {len(expected)} notebooks, {len(changed)} written, {len(stale)} removed (no solution).")
    return 0


if __name__ == "__main__":
    sys.exit(main())

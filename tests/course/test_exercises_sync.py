"""exercises/ is generated from solutions/ (tools/make_exercises.py), never edited by hand.

The generator reimplements nbgrader's ClearSolutions and ClearHiddenTests
with nbformat alone; where nbgrader is importable, a test checks that both
give the same cells (elsewhere, e.g. on the GPU machine, that one test skips).
Needs nbformat only.
"""

from __future__ import annotations

import importlib.util
import json
import re
import sys
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools"))
import make_exercises as gen  # noqa: E402

SOLUTIONS = sorted((ROOT / "solutions").glob("[0-9][0-9]_*.ipynb"))


def test_committed_exercises_are_what_the_generator_makes():
    expected = gen.expected_exercises(ROOT / "solutions")
    changed, stale = gen.out_of_date(ROOT / "exercises", expected)
    assert not changed, f"exercises out of date (edit solutions/, then run `make exercises`): {changed}"
    assert not stale, f"exercises without a solution notebook: {stale}"
    lessons = {gen.exercise_name(p.name) for p in (ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb")}
    assert set(expected) == lessons, sorted(set(expected) ^ lessons)  # one exercise per lesson: exNN_<lesson>
    assert not set(expected) & {p.name for p in (ROOT / "notebooks").glob("*.ipynb")}  # no two tabs read alike


@pytest.mark.parametrize("folder", ["notebooks", "solutions", "exercises"])
def test_every_link_to_a_notebook_leads_to_one(folder):
    broken = []
    for path in sorted((ROOT / folder).glob("*.ipynb")):
        for cell in nbformat.read(path, as_version=4).cells:
            if cell.cell_type == "markdown":
                for target in re.findall(r"\]\(([^)#\s]+\.ipynb)", cell.source):
                    if not (path.parent / target).is_file():
                        broken.append(f"{path.name} → {target}")
    assert not broken, broken


@pytest.mark.parametrize("path", SOLUTIONS, ids=lambda p: p.name)
def test_each_solution_has_exercises_checks_and_hidden_asserts(path):
    nb = nbformat.read(path, as_version=4)
    code = [c for c in nb.cells if c.cell_type == "code"]
    solutions = [c for c in code if c.metadata.get("nbgrader", {}).get("solution")]
    checks = [c for c in code if c.metadata.get("nbgrader", {}).get("grade")]
    assert solutions and len(checks) >= len(solutions), (len(solutions), len(checks))
    for cell in checks:
        assert "### BEGIN HIDDEN TESTS\nassert feedback.passed, feedback\n### END HIDDEN TESTS" in cell.source, (
            cell.source
        )
    learner = gen.make_exercise(nb)
    assert "BEGIN SOLUTION" not in json.dumps(learner) and "HIDDEN TESTS" not in json.dumps(learner)
    stubs = [c for c in learner.cells if c.cell_type == "code" and "raise NotImplementedError()" in c.source]
    assert len(stubs) == len(solutions)


def _notebook(*cells):
    nb = nbformat.v4.new_notebook(
        metadata={"kernelspec": {"name": "python3", "language": "python", "display_name": "Python 3"}}
    )
    nb.cells = list(cells)
    return nb


def _cell(source, kind="code", **nbgrader):
    cell = (nbformat.v4.new_code_cell if kind == "code" else nbformat.v4.new_markdown_cell)(source)
    if nbgrader:
        cell.metadata["nbgrader"] = {"schema_version": 3, "grade_id": f"id{id(cell)}", "locked": False, "task": False,
                                     "solution": False, "grade": False, **nbgrader}
    return cell


SEMANTICS = _notebook(
    _cell("def f(x):\n    # hint\n    ### BEGIN SOLUTION\n    return x\n    ### END SOLUTION\n\ny = 1", solution=True),
    _cell("whole cell answer", solution=True),
    _cell("Text: <!-- BEGIN SOLUTION -->\nsecret\n<!-- END SOLUTION -->", kind="markdown", solution=True, grade=True,
          points=1),
    _cell("feedback = 1\n### BEGIN HIDDEN TESTS\nassert feedback\n### END HIDDEN TESTS", grade=True, points=1,
          locked=True),
    _cell("plain = 2"),
)
EXPECTED_SOURCES = [
    "def f(x):\n    # hint\n    # YOUR CODE HERE\n    raise NotImplementedError()\n\ny = 1",
    "# YOUR CODE HERE\nraise NotImplementedError()",
    "YOUR ANSWER HERE",  # the BEGIN line goes entirely (only its indent is kept)
    "feedback = 1",
    "plain = 2",
]


def test_marker_semantics_are_nbgrader_s():
    learner = gen.make_exercise(SEMANTICS)
    assert [c.source for c in learner.cells] == EXPECTED_SOURCES
    assert SEMANTICS.cells[0].source.count("BEGIN SOLUTION") == 1  # the input is not modified


@pytest.mark.parametrize(("cells", "message"), [
    ((_cell("### BEGIN SOLUTION\nx = 1\n### END SOLUTION"),), "not marked as an nbgrader solution cell"),
    ((_cell("### BEGIN HIDDEN TESTS\nassert 1\n### END HIDDEN TESTS"),), "not marked as an nbgrader grade cell"),
    ((_cell("### BEGIN SOLUTION\n### BEGIN SOLUTION\n### END SOLUTION", solution=True),), "nested"),
    ((_cell("### BEGIN SOLUTION\nx = 1", solution=True),), "without"),
])
def test_malformed_markers_are_refused_as_nbgrader_does(cells, message):
    with pytest.raises(gen.MarkerError, match=message):
        gen.make_exercise(_notebook(*cells))


def test_check_mode_reports_an_edited_exercise(tmp_path):
    (tmp_path / "solutions").mkdir()
    nbformat.write(SEMANTICS, tmp_path / "solutions" / "01_demo.ipynb")
    folders = ["--solutions", str(tmp_path / "solutions"), "--exercises", str(tmp_path / "exercises")]
    assert gen.main(folders) == 0 and gen.main([*folders, "--check"]) == 0
    edited = tmp_path / "exercises" / "ex01_demo.ipynb"
    edited.write_text(edited.read_text(encoding="utf-8").replace("plain = 2", "plain = 3"), encoding="utf-8")
    (tmp_path / "exercises" / "ex99_orphan.ipynb").write_text(edited.read_text(encoding="utf-8"), encoding="utf-8")
    assert gen.main([*folders, "--check"]) == 1
    assert gen.main(folders) == 0 and not (tmp_path / "exercises" / "ex99_orphan.ipynb").exists()
    assert gen.main([*folders, "--check"]) == 0


@pytest.mark.skipif(importlib.util.find_spec("nbgrader") is None,
                    reason="nbgrader is not installed "
                           "(the course does not need it; this only cross-checks the generator)")
@pytest.mark.parametrize("path", [*SOLUTIONS, None], ids=lambda p: p.name if p else "marker-semantics")
def test_the_generator_agrees_with_nbgrader(path):
    from nbgrader.preprocessors import ClearHiddenTests, ClearOutput, ClearSolutions

    nb = nbformat.read(path, as_version=4) if path else SEMANTICS
    ours = gen.make_exercise(nb)
    theirs = json.loads(nbformat.writes(nb))
    theirs = nbformat.reads(json.dumps(theirs), as_version=4)
    for preprocessor in (ClearSolutions(), ClearOutput(), ClearHiddenTests()):
        theirs, _ = preprocessor.preprocess(theirs, {})
    assert [c.source for c in ours.cells] == [c.source for c in theirs.cells]

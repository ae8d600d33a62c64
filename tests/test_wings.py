"""Three packages, dependencies pointing one way: the course imports the lab and the library, the lab the library.

The library (rmsnorm) is what a model imports: torch, triton and numpy. The lab (rmsnorm_lab) times and
tabulates; the course (rmsnorm_course) grades and teaches. The import graph is read from the source (every
import, at top level or inside a function), so a lazy import that points back up is caught too.
"""

import ast
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import torch

import rmsnorm
import rmsnorm.article
from rmsnorm import device

ROOT = Path(rmsnorm.__file__).resolve().parent.parent
WINGS = ("rmsnorm", "rmsnorm_lab", "rmsnorm_course")  # bottom to top


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {_module_name(p): p for wing in WINGS for p in (ROOT / wing).rglob("*.py")}


def _imports(path: Path) -> set[str]:
    """Modules of the three wings imported anywhere in ``path``."""
    name = _module_name(path)
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([node.module] if node.module else []))
            # `from pkg import sub` imports the submodule pkg.sub; `from pkg import name` imports pkg
            candidates = [f"{base}.{a.name}" if f"{base}.{a.name}" in MODULES else base for a in node.names]
        elif isinstance(node, ast.Import):
            candidates = [alias.name for alias in node.names]
        else:
            continue
        found |= {c for c in candidates if c in MODULES}
    return found - {name}


GRAPH = {name: _imports(path) for name, path in MODULES.items()}


def _wing(module: str) -> int:
    return WINGS.index(module.split(".")[0])


def test_no_import_points_back_up():
    upward = sorted((a, b) for a, targets in GRAPH.items() for b in targets if _wing(b) > _wing(a))
    assert upward == []
    assert any(_wing(b) < _wing(a) for a, targets in GRAPH.items() for b in targets)  # the graph was read


def test_no_import_cycle():
    visiting, done = [], set()

    def visit(node):
        if node in visiting:
            raise AssertionError("import cycle: " + " -> ".join(visiting[visiting.index(node):] + [node]))
        if node in done:
            return
        visiting.append(node)
        for nxt in sorted(GRAPH[node]):
            if nxt not in WINGS:  # a package's __init__ (imports everything): not a cycle edge
                visit(nxt)
        visiting.pop()
        done.add(node)

    for node in sorted(GRAPH):
        visit(node)


def test_each_exercise_checker_has_one_test_file_named_after_it():
    checkers = ROOT / "rmsnorm_course" / "checkers"
    exercises = {p.stem for p in checkers.glob("ex[0-9][0-9]_*.py") if not p.stem.endswith("_symptoms")}
    tests = {p.stem.removeprefix("test_") for p in (ROOT / "tests" / "course").glob("test_ex[0-9][0-9]_*.py")}
    assert tests == exercises


def test_the_library_holds_no_lab_no_teaching_and_no_shims():
    library = ROOT / "rmsnorm"
    modules = sorted(str(p.relative_to(library)) for p in library.rglob("*.py"))
    assert [m for m in modules if m.split("/")[0] in ("bench", "teaching", "fast", "_aliases.py")] == []
    assert "forward.py" in modules and "article/forward.py" in modules


def test_the_root_names_are_the_fast_path():
    from rmsnorm import ContractError, FastRMSNorm, RMSNorm, rmsnorm_fast, swap_rmsnorm  # noqa: F401
    from rmsnorm import rmsnorm as functional

    assert functional is rmsnorm_fast and RMSNorm is FastRMSNorm
    assert rmsnorm.article.rmsnorm is not rmsnorm_fast and issubclass(rmsnorm.article.RMSNorm, torch.nn.Module)
    assert set(rmsnorm.__all__) <= set(dir(rmsnorm)) and set(rmsnorm.article.__all__) <= set(dir(rmsnorm.article))


def test_pip_install_gives_the_library_alone_and_the_extras_bring_lab_and_course():
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    assert sorted(d.split(">")[0].split(";")[0].split("=")[0].strip() for d in project["dependencies"]) == [
        "numpy", "torch", "triton"]
    extras = project["optional-dependencies"]
    assert {"lab", "course"} <= set(extras)
    for package in ("pandas",):
        assert any(d.startswith(package) for d in extras["lab"])
    assert any(d.startswith("cloudpickle") for d in extras["course"])


def test_every_kernel_agrees_with_the_record():
    kernels = (rmsnorm.rmsnorm_fast_forward_kernel, rmsnorm.rmsnorm_fast_backward_kernel,
               rmsnorm.rmsnorm_fast_dgamma_kernel, rmsnorm.article.rmsnorm_forward_kernel,
               rmsnorm.article.rmsnorm_dx_kernel, rmsnorm.article.rmsnorm_dgamma_kernel)
    assert {device.is_interpreted(k) for k in kernels} == {rmsnorm.interpreter_active()}
    assert ("interpreter" in rmsnorm.describe_backend()) is rmsnorm.interpreter_active()


@pytest.mark.parametrize("launch", ["fast", "article"])
def test_the_contract_asks_whether_the_interpreter_is_on(monkeypatch, launch, no_allocation):
    monkeypatch.setattr("rmsnorm.contract.interpreter_active", lambda: False)
    monkeypatch.setattr("rmsnorm.contract._INTERPRETED", False)  # the fast path's quick check reads it once
    x, weight = torch.ones(1, 2), torch.ones(2)
    call = rmsnorm.rmsnorm_fast_forward if launch == "fast" else rmsnorm.article.forward_op
    with pytest.raises(rmsnorm.InterpreterUnavailableError, match="interpreter is off"):
        call(x, weight, 1e-6)


def test_the_environment_check_runs():
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-m", "rmsnorm_course.check_env"], capture_output=True, text=True,
                          env=env, timeout=300, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1].startswith("OK: ")


@pytest.mark.parametrize("csv", ["kernel_time_before_after.csv", "kernel_time_layernorm_before_after.csv"])
def test_a_change_that_should_not_move_the_kernels_did_not(csv):
    """results/h200/: the RMSNorm's kernels before and after a change that should not move them, one H200 call at the
    main grid, forward and backward: the library wing's move; LayerNorm joining the kernels (issue 40's 2 % rule)."""
    from rmsnorm_lab.pages import ab_moved, new_over_old
    from rmsnorm_lab.sidebyside import GRID

    run = pd.read_csv(ROOT / "results" / "h200" / csv)
    assert set(run["checkout"]) == {"old", "new"} and run.groupby("checkout")["run"].nunique().eq(2).all()
    table = new_over_old(run)
    cases = table.reset_index()
    grid = {(M, N, str(dtype).removeprefix("torch.")) for M, N, dtype in GRID}
    assert set(zip(cases["M"], cases["N"], cases["dtype"])) == grid
    assert len(table) == len(GRID) * run["pass"].nunique() and table.notna().all().all()
    assert ab_moved(table).empty, ab_moved(table)

"""Two packages: the kernel library (rmsnorm) that a model imports, and the course (rmsnorm_course) that grades.

The library never imports the course, except through the old import paths of what moved
(rmsnorm._aliases), and each old path gives the very module object of the new one.
"""

from __future__ import annotations

import ast
import os
import pickle
import subprocess
import sys
from pathlib import Path

import pytest

import rmsnorm
from rmsnorm import _aliases

ROOT = Path(__file__).resolve().parent.parent
LIBRARY = ROOT / "rmsnorm"
COURSE = ROOT / "rmsnorm_course"

#: (old name, new name) of every module that moved, packages and their submodules.
MOVED = [("rmsnorm.training", "rmsnorm_course.training"), ("rmsnorm.checkers", "rmsnorm_course.checkers"),
         ("rmsnorm.primer", "rmsnorm.teaching.primer"), ("rmsnorm.buggy", "rmsnorm.teaching.buggy")] + [
    (f"rmsnorm.checkers.{p.stem}", f"rmsnorm_course.checkers.{p.stem}")
    for p in sorted((COURSE / "checkers").glob("*.py"))
    if p.stem not in ("__init__", "_warm", "compile_server")  # _warm runs kernels on import; compile_server is a script
]


def _python(code: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300, cwd=ROOT)


def test_the_aliases_name_every_old_path():
    assert _aliases.new_name("rmsnorm.checkers") == "rmsnorm_course.checkers"
    assert _aliases.new_name("rmsnorm.checkers.isolate") == "rmsnorm_course.checkers.isolate"
    assert _aliases.new_name("rmsnorm.training") == "rmsnorm_course.training"
    assert _aliases.new_name("rmsnorm.buggy") == "rmsnorm.teaching.buggy"
    assert _aliases.new_name("rmsnorm.primer") == "rmsnorm.teaching.primer"
    assert _aliases.new_name("rmsnorm.checkersx") is None
    assert _aliases.new_name("rmsnorm.fast") is None
    assert _aliases.new_name("rmsnorm") is None


@pytest.mark.parametrize(("old", "new"), MOVED, ids=[old for old, _ in MOVED])
def test_an_old_path_gives_the_very_module_of_the_new_one(old, new):
    import importlib

    module = importlib.import_module(old)
    assert module is importlib.import_module(new)
    assert module is sys.modules[old] is sys.modules[new]
    assert module.__name__ == new and module.__spec__.name == new  # its own name and spec, not the alias's


def test_a_patch_under_the_old_name_is_seen_under_the_new_one(monkeypatch):
    import rmsnorm.checkers.isolate as old
    import rmsnorm_course.checkers.isolate as new

    assert old is new and rmsnorm.checkers.isolate is new
    monkeypatch.setattr(old, "CASE_TIME_LIMIT_S", 12.5)
    assert new.CASE_TIME_LIMIT_S == 12.5
    monkeypatch.setattr("rmsnorm.checkers.isolate.CASE_TIME_LIMIT_S", 7.0)
    assert new.CASE_TIME_LIMIT_S == 7.0


def test_from_imports_of_the_old_paths_give_the_same_objects():
    from rmsnorm.checkers import Feedback, check_by_hand
    from rmsnorm.training import make_splits
    from rmsnorm_course import checkers, training

    assert check_by_hand is checkers.check_by_hand and Feedback is checkers.Feedback
    assert make_splits is training.make_splits


def test_a_function_pickled_by_name_loads_under_either_path():
    from rmsnorm_course.checkers import feedback

    assert pickle.loads(pickle.dumps(feedback.wrong)) is feedback.wrong
    assert feedback.wrong.__module__ == "rmsnorm_course.checkers.feedback"


def test_importing_the_library_loads_nothing_of_the_course():
    done = _python("import sys, rmsnorm, rmsnorm.fast; print(sorted(m for m in sys.modules "
                   "if m.startswith(('rmsnorm_course', 'rmsnorm.teaching')) or 'checkers' in m))")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def test_a_fresh_process_imports_the_old_paths():
    done = _python("import rmsnorm.checkers.isolate, rmsnorm.training, rmsnorm_course.checkers.isolate as b; "
                   "import sys; assert sys.modules['rmsnorm.checkers.isolate'] is b; print('ok', b.__name__)")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ok rmsnorm_course.checkers.isolate"


def test_the_environment_check_still_runs_from_the_library():
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-m", "rmsnorm.check_env"], capture_output=True, text=True, env=env,
                          timeout=300, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1].startswith("OK: ")


def _course_imports(path: Path) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        names = ([node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level
                 else [a.name for a in node.names] if isinstance(node, ast.Import) else [])
        found += [n for n in names if n == "rmsnorm_course" or n.startswith("rmsnorm_course.")]
    return found


def test_no_module_of_the_library_imports_the_course():
    importing = {str(p.relative_to(ROOT)): _course_imports(p) for p in sorted(LIBRARY.rglob("*.py"))}
    assert {p: names for p, names in importing.items() if names} == {}
    assert "rmsnorm_course" in (LIBRARY / "_aliases.py").read_text(encoding="utf-8")  # the one place it is named

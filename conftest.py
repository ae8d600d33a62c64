"""Spreads `make test` over pytest-xdist workers test by test, but keeps a notebook on one worker.

nbval runs a notebook as one test item per cell, in one kernel, so the cells of a notebook must
run in order on one worker. `--dist loadfile` does that but also keeps every test of a file on
one worker, and a long file (a checker test judges each wrong variant in its own child
process, which on a GPU starts CUDA and compiles the variant) then ran alone for minutes at the
end. Under `--dist load` this scheduler hands out each test on its own and each notebook whole.
(`--dist loadgroup` with an xdist_group mark per notebook would say the same, but pytest 9 keeps
the node id where pytest-xdist 3.8 no longer changes it, and the groups are silently ignored.)

It also makes nbval start each notebook's kernel over unix sockets, with the kernel's stderr kept
and put into the error when the kernel dies at start (tests/kernel_start.py says why).
"""
from __future__ import annotations

import sys
from pathlib import Path

import pytest


def pytest_configure(config):
    if config.pluginmanager.hasplugin("nbval"):
        # tests/ is on sys.path once pytest imports tests/conftest.py; a run of notebooks alone puts it there here.
        tests = str(Path(__file__).resolve().parent / "tests")
        if tests not in sys.path:
            sys.path.insert(0, tests)
        import kernel_start

        kernel_start.install_in_nbval()


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    if config.getvalue("dist") != "load":
        return None  # pytest-xdist's own scheduler for the other --dist modes
    from xdist.scheduler import LoadScopeScheduling

    class NotebookWholeScheduling(LoadScopeScheduling):
        """One work unit per test, and one per notebook (all its cells, in order)."""

        def _split_scope(self, nodeid: str) -> str:
            path = nodeid.split("::", 1)[0]
            return path if path.endswith(".ipynb") else nodeid

    return NotebookWholeScheduling(config, log)

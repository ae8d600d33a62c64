"""Spreads `make test` over pytest-xdist workers test by test, but keeps a notebook on one worker.

nbval runs a notebook as one test item per cell, in one kernel, so the cells of a notebook must
run in order on one worker. `--dist loadfile` does that but also keeps every test of a file on
one worker, and a long file (tests/test_checkers.py judges each wrong variant in its own child
process, which on a GPU starts CUDA and compiles the variant) then ran alone for minutes at the
end. Under `--dist load` this scheduler hands out each test on its own and each notebook whole.
(`--dist loadgroup` with an xdist_group mark per notebook would say the same, but pytest 9 keeps
the node id where pytest-xdist 3.8 no longer changes it, and the groups are silently ignored.)
"""
from __future__ import annotations

import pytest


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

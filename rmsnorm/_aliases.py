"""Old import paths of modules that moved: each old name gives the very module object of the new one.

``rmsnorm.checkers`` (and every ``rmsnorm.checkers.<module>``) and ``rmsnorm.training`` are the course's
machinery, which lives in its own package, :mod:`rmsnorm_course`; ``rmsnorm.primer`` and ``rmsnorm.buggy``
are teaching kernels, in :mod:`rmsnorm.teaching`. Notebooks, scripts, child processes and pickles that
name the old paths keep working: a finder on :data:`sys.meta_path` answers each old name by importing the
new one and handing back that same module (not a second copy, so a module attribute patched under one
name is patched under the other, and a module-level cache is shared). Nothing is imported until an old
name is imported: ``import rmsnorm`` alone loads none of the course.

Source: tracker issue 19 (the library and the course, apart); the import system's finders and loaders
(https://docs.python.org/3/reference/import.html#finders-and-loaders).
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys

#: Old name → new name; an old name also covers its submodules (``rmsnorm.checkers.isolate``).
ALIASES = {
    "rmsnorm.checkers": "rmsnorm_course.checkers",
    "rmsnorm.training": "rmsnorm_course.training",
    "rmsnorm.primer": "rmsnorm.teaching.primer",
    "rmsnorm.buggy": "rmsnorm.teaching.buggy",
}


def new_name(old: str) -> str | None:
    """The module an old import path now names, or None where ``old`` did not move.

    Args:
        old: a dotted module name, e.g. ``"rmsnorm.checkers.isolate"``.

    Returns:
        The dotted name of the module it is now (``"rmsnorm_course.checkers.isolate"``), or None.
    """
    for prefix, target in ALIASES.items():
        if old == prefix or old.startswith(prefix + "."):
            return target + old[len(prefix):]
    return None


class _SameModuleLoader(importlib.abc.Loader):
    """Loads an old name as the module of its new name, which keeps its own ``__name__`` and ``__spec__``."""

    def __init__(self, target: str):
        self._target = target
        self._spec = None

    def create_module(self, spec):
        module = importlib.import_module(self._target)
        self._spec = module.__spec__
        return module

    def exec_module(self, module):
        # The import system has just set the old name's spec on the module: give it back its own.
        module.__spec__ = self._spec


class AliasFinder(importlib.abc.MetaPathFinder):
    """Finds the old names of :data:`ALIASES` (first on :data:`sys.meta_path`, before the file finders)."""

    def find_spec(self, fullname, path=None, target=None):
        target_name = new_name(fullname)
        if target_name is None:
            return None
        return importlib.machinery.ModuleSpec(fullname, _SameModuleLoader(target_name))


def install() -> None:
    """Put one :class:`AliasFinder` first on :data:`sys.meta_path` (a second call changes nothing)."""
    if not any(isinstance(finder, AliasFinder) for finder in sys.meta_path):
        sys.meta_path.insert(0, AliasFinder())

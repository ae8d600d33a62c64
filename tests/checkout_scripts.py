"""Load a script of the checkout (scripts/…, tools/…) as a module, to call its main() from a test."""

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def load(relative_path: str):
    """The module defined by ``ROOT / relative_path`` (e.g. ``"scripts/benchmark.py"``), freshly executed."""
    path = ROOT / relative_path
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module

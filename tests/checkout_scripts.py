"""Load a script of the checkout (scripts/…, tools/…) as a module, to call its main() from a test; run the PTX tool."""

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def load(relative_path: str):
    """The module defined by ``ROOT / relative_path`` (e.g. ``"scripts/benchmark.py"``), freshly executed."""
    path = ROOT / relative_path
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def ptx_tool(*args) -> str:
    """What ``tools/ptx_vector_accesses.py *args`` prints, run in compiled mode (TRITON_INTERPRET unset: it compiles
    for sm_90 and never launches, so no GPU is needed).

    Raises:
        AssertionError: the tool failed (its stderr's end in the message).
    """
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    done = subprocess.run([sys.executable, str(ROOT / "tools" / "ptx_vector_accesses.py"), *map(str, args)],
                          capture_output=True, text=True, env=env, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout

"""Where kernels run is decided once, in rmsnorm.device, and every module asks it there: no import cycles.

The import graph read here spans both packages, the library (rmsnorm) and the course (rmsnorm_course).
"""

import ast
from pathlib import Path

import pytest

import rmsnorm
from rmsnorm import device

PACKAGE = Path(rmsnorm.__file__).resolve().parent
COURSE = PACKAGE.parent / "rmsnorm_course"


def test_the_record_matches_the_kernels():
    assert isinstance(device.INTERPRETED, bool)
    for kernel in (rmsnorm.rmsnorm_forward_kernel, rmsnorm.rmsnorm_dx_kernel, rmsnorm.rmsnorm_dgamma_kernel):
        assert device.is_interpreted(kernel) is device.INTERPRETED
    assert rmsnorm.interpreter_active() is device.INTERPRETED
    assert ("interpreter" in rmsnorm.describe_backend()) is device.INTERPRETED


def test_the_contract_asks_device(monkeypatch):
    import torch

    monkeypatch.setattr(device, "INTERPRETED", False)
    with pytest.raises(rmsnorm.ContractError, match="interpreter is off"):
        rmsnorm.forward_op(torch.ones(1, 2), torch.ones(2))


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path) -> set[str]:
    """Package modules imported anywhere in ``path`` (top level or inside functions)."""
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
        found |= {c for c in candidates if c.startswith("rmsnorm") and c in MODULES}
    return found - {name}


MODULES = {_module_name(p): p for folder in (PACKAGE, COURSE) for p in folder.rglob("*.py")}


def test_no_import_cycle_in_the_package():
    graph = {name: _imports(path) for name, path in MODULES.items()}
    assert "rmsnorm.device" in graph["rmsnorm.contract"] and "rmsnorm.forward" not in graph["rmsnorm.contract"]
    visiting, done = [], set()

    def visit(node):
        if node in visiting:
            raise AssertionError("import cycle: " + " -> ".join(visiting[visiting.index(node):] + [node]))
        if node in done:
            return
        visiting.append(node)
        for nxt in sorted(graph[node]):
            if nxt not in ("rmsnorm", "rmsnorm_course"):  # a package's __init__ (imports everything): not a cycle edge
                visit(nxt)
        visiting.pop()
        done.add(node)

    for node in sorted(graph):
        visit(node)

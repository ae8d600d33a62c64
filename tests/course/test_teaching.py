"""The teaching kernels (rmsnorm_course.teaching): 09, 10, 14 and 15 hold the solutions' kernels, line for line.

The solution notebooks write the kernel a learner writes; the package holds the same kernel as the
exercise's reference, the one its checker launches and its tests mutate. difflib holds the two to one
code (the package's docstring and the solution's nbgrader markers aside), as tests/course/test_ex08_n_vs_block.py
does for the buggy kernels, so that neither can drift.
"""

from __future__ import annotations

import ast
import difflib
import inspect
import json
import textwrap
from pathlib import Path

import pytest

import rmsnorm_course.teaching.buggy
import rmsnorm_course.teaching.primer  # noqa: F401  (loaded here, compared with its old path rmsnorm_course.teaching.primer below)
from rmsnorm_course.teaching.fused_add import fused_add_backward_kernel, fused_add_forward_kernel
from rmsnorm_course.teaching.layernorm import layernorm_backward_kernel, layernorm_forward_kernel
from rmsnorm_course.teaching.long_row import long_row_forward_kernel
from rmsnorm_course.teaching.one_pass import one_pass_backward_kernel

ROOT = Path(__file__).resolve().parents[2]
MARKERS = ("### BEGIN SOLUTION", "### END SOLUTION")

#: (solution notebook, the kernel's name there, the package's kernel).
PAIRS = [
    ("09_the_long_row.ipynb", "my_long_row_kernel", long_row_forward_kernel),
    ("10_one_pass_backward.ipynb", "my_one_pass_kernel", one_pass_backward_kernel),
    ("14_fusing_the_residual.ipynb", "my_fused_add_kernel", fused_add_forward_kernel),
    ("14_fusing_the_residual.ipynb", "my_fused_add_backward_kernel", fused_add_backward_kernel),
    ("15_layernorm.ipynb", "my_layernorm_kernel", layernorm_forward_kernel),
    ("15_layernorm.ipynb", "my_layernorm_backward_kernel", layernorm_backward_kernel),
]


def _solution_kernel(notebook: str, name: str) -> list[str]:
    """The lines of the solution's kernel, decorator to last line, without the nbgrader markers."""
    cells = json.loads((ROOT / "solutions" / notebook).read_text(encoding="utf-8"))["cells"]
    sources = [
        "".join(c["source"]) for c in cells if c["cell_type"] == "code" and f"def {name}(" in "".join(c["source"])
    ]
    assert len(sources) == 1, f"{notebook}: {len(sources)} cells define {name}"
    lines = [line for line in sources[0].splitlines() if line.strip() not in MARKERS]
    start = lines.index("@triton.jit")
    end = start + 2
    while end < len(lines) and (not lines[end].strip() or lines[end][0].isspace() or lines[end] == "):"):
        end += 1
    return [line.rstrip() for line in lines[start:end]]


def _package_kernel(kernel, name: str) -> list[str]:
    """The lines of the package's kernel, decorator to last line, without its docstring, renamed ``name``."""
    source = textwrap.dedent(inspect.getsource(kernel.fn))
    function = ast.parse(source).body[0]
    doc = function.body[0]
    assert isinstance(doc, ast.Expr) and isinstance(doc.value, ast.Constant), "the package kernel has a docstring"
    lines = source.splitlines()
    del lines[doc.lineno - 1:doc.end_lineno]
    return [line.rstrip().replace(f"def {kernel.fn.__name__}(", f"def {name}(") for line in lines]


@pytest.mark.parametrize(("notebook", "name", "kernel"), PAIRS, ids=[p[1] for p in PAIRS])
def test_the_solutions_kernel_is_the_packages_teaching_kernel(notebook, name, kernel):
    solution = _solution_kernel(notebook, name)
    package = _package_kernel(kernel, name)
    assert solution[:2] == ["@triton.jit", f"def {name}("]
    changed = [d for d in difflib.ndiff(package, solution) if d[:1] in "+-"]
    assert changed == [], "\n".join(changed)
    assert len(solution) > 20  # the whole kernel was compared, not an empty match


def test_the_package_kernels_are_where_the_checkers_find_them():
    from rmsnorm_course.checkers import ex09_long_row, ex10_one_pass

    assert ex09_long_row.long_row_forward_kernel is long_row_forward_kernel
    assert ex10_one_pass.one_pass_backward_kernel is one_pass_backward_kernel
    assert long_row_forward_kernel.fn.__module__ == "rmsnorm_course.teaching.long_row"
    assert one_pass_backward_kernel.fn.__module__ == "rmsnorm_course.teaching.one_pass"

"""The checkers' shared harness: feedback, cases, guards, shipping to the child, and skeletons.

Whatever an exercise: no checker raises whatever it is given, a Feedback reads well in a notebook
and in a test, the kernel exercises' cases hold the shapes the course requires, an error names the
learner's line, a kernel defined in a notebook cell travels to the child with its helpers, and
every exercise notebook's code runs top to bottom, in process, with all its checkers saying "not
done yet". Each exercise's own verdicts: test_exNN_*.py; the judges and the devices: test_isolate.py.

Source: solutions/*.ipynb and exercises/*.ipynb.
"""

from __future__ import annotations

import linecache
from pathlib import Path

import nbformat
import pytest
import torch
import triton
import triton.language as tl

import rmsnorm.article
import wrong_variants as wv
import wrong_variants_fake_and_tuning as wv11
import wrong_variants_norm_share as wv13
from rmsnorm.device import interpreter_active
from rmsnorm_course import checkers
from rmsnorm_course.checkers import (
    Feedback,
    ex03_forward,
    ex04_dx,
    ex05_dgamma,
    ex09_long_row,
    ex10_one_pass,
    ex14_fused_add,
    ex15_layernorm,
    functions,
    isolate,
)
from rmsnorm_course.checkers.cases import FLOAT16_MAX, row_cases
from rmsnorm_course.checkers.ex13_into_a_model import check_norm_share
from rmsnorm_course.checkers.guards import Buffers, interpreter_guards
from rmsnorm_course.checkers.kernels import unmasked_accesses
from rmsnorm_course.checkers.spec import FunctionSpec
from verdict_variants import _define_in_cell, _kernel_with_helper, _prediction, _samples, _solution_row

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("check", [checkers.check_by_hand, checkers.check_reference, checkers.check_forward_kernel,
                                   checkers.check_dx_kernel, checkers.check_dgamma_kernel,
                                   checkers.check_autograd_function, checkers.check_hypothesis,
                                   checkers.check_prediction, checkers.check_fixed_dx_kernel])
@pytest.mark.parametrize("answer", [None, 42, "my_kernel", torch.ones(3)], ids=["None", "int", "str", "tensor"])
def test_no_checker_raises_whatever_it_is_given(check, answer):
    feedback = check(answer)
    assert isinstance(feedback, Feedback) and feedback.status == "wrong", feedback


def test_html_feedback_shows_code_not_backquotes():
    html = Feedback("03 · forward kernel", "wrong", "pass `mask=cols < N` and `other=0`")._repr_html_()
    assert "<code>mask=cols &lt; N</code>" in html and "<code>other=0</code>" in html and "`" not in html


def test_feedback_reads_well_in_a_notebook_and_in_a_test():
    feedback = checkers.check_hypothesis(wv._hypothesis("swapped"))
    assert str(feedback).startswith("[08 · hypothesis] wrong: ") and repr(feedback) == str(feedback)
    html = Feedback("03 · forward kernel", "wrong", "mask with cols < N").__repr__(), Feedback(
        "03 · forward kernel", "wrong", "mask with cols < N")._repr_html_()
    assert "cols < N" in html[0] and "cols &lt; N" in html[1] and "cols < N" not in html[1]  # escaped for HTML


def test_a_kernel_error_names_the_learners_line_and_shows_a_call():
    kernel = wv.mutate(
        rmsnorm.article.rmsnorm_forward_kernel,
        ("gamma_ptr + cols, mask=mask, other=0)", "gamma_ptr + cols, mask=mask, other=0, maks=mask)"),
    )
    feedback = checkers.check_forward_kernel(kernel)
    line = next(
        i for i, text in enumerate(Path(kernel.fn.__code__.co_filename).read_text().splitlines(), 1) if "maks=" in text
    )
    assert f"at line {line} of" in feedback.message and "my_forward_kernel[(3,)](" in feedback.message, feedback


MEDIAN, PERCENT, FRACTION, PICK, SHARE = wv._median(), wv._percent(), wv11._fraction(), wv11._pick(), wv13._share()
HYPOTHESIS = wv._hypothesis("right")
#: Each Python exercise: how the notebook calls its checker, and the answer that reaches the child.
PYTHON_EXERCISES = {
    "01": (lambda: checkers.check_by_hand(_solution_row), _solution_row),
    "02": (lambda: checkers.check_reference(rmsnorm.rmsnorm_reference), rmsnorm.rmsnorm_reference),
    "06": (lambda: checkers.check_autograd_function(rmsnorm.article.RMSNormFunction), rmsnorm.article.RMSNormFunction),
    "07 · prediction": (lambda: checkers.check_prediction(_prediction), _prediction),
    "07 · reading": (lambda: checkers.check_benchmark_reading(MEDIAN, PERCENT, _samples(), _prediction),
                     (MEDIAN, PERCENT)),
    "08 · hypothesis": (lambda: checkers.check_hypothesis(HYPOTHESIS), HYPOTHESIS),
    "11": (lambda: checkers.check_fake_implementation(wv11.fake_forward, wv11.fake_backward),
           (wv11.fake_forward, wv11.fake_backward)),
    "12 · fraction": (lambda: checkers.check_copy_fraction(FRACTION), FRACTION),
    "12 · picking": (lambda: checkers.check_pick_config(PICK), PICK),
    "13": (lambda: check_norm_share(SHARE), SHARE),
}


@pytest.mark.parametrize("exercise", PYTHON_EXERCISES)
def test_a_python_exercise_is_a_spec_judged_by_one_harness_in_the_child(exercise, monkeypatch):
    checked, answer = PYTHON_EXERCISES[exercise]
    started = []
    real_start = isolate.start
    monkeypatch.setattr(isolate, "start", lambda *a, **k: started.append(a) or real_start(*a, **k))
    assert checked().passed
    assert len(started) == 1  # one child per check
    target, (spec, shipped, _given) = started[0]  # the harness's one judge, given the exercise's spec as data
    assert target is functions.judge and isinstance(spec, FunctionSpec) and shipped == answer
    assert spec.exercise.startswith(exercise)


# --------------------------------------------------------------------------- the cases and the guards


def test_the_overflow_case_overflows_in_float16_and_not_in_float32():
    case = next(c for c in row_cases() if "x² often past 65504" in c.label)
    x = case.inputs["x"].cpu()
    assert case.dtype == torch.float16 and (case.f64("x").square().amax(-1) > FLOAT16_MAX).all()
    assert torch.isinf(x.square()).any(-1).all()  # every row has a square that overflows in float16
    assert torch.isfinite(x.float().square().sum(-1)).all()  # and none in float32


def test_cases_include_the_shapes_the_course_requires():
    cases = row_cases()
    assert {1, 17} <= {c.M for c in cases} and {256, 257} <= {c.N for c in cases}
    assert torch.float16 in {c.dtype for c in cases}
    ones = cases[0]
    assert ones.N == 257 and ones.block_size == 512 and torch.equal(ones.inputs["x"], torch.ones_like(ones.inputs["x"]))


def test_unmasked_access_finder_ignores_single_elements():
    source = (
        "def k(x_ptr, rstd_ptr, N, BLOCK_SIZE):\n"
        "    row = tl.program_id(0)\n"
        "    cols = tl.arange(0, BLOCK_SIZE)\n"
        "    offsets = row * N + cols\n"
        "    x = tl.load(x_ptr + offsets)\n"
        "    tl.store(rstd_ptr + row, x)\n"
        "    tl.store(x_ptr + offsets, x, cols < N)\n"
    )
    assert [line for line, _ in unmasked_accesses(source)] == [5]


def test_guard_finds_writes_outside_and_keeps_nan_around():
    buffers = Buffers()
    view = buffers.output("y", (3, 4), torch.float32, "cpu", row_stride=6, room=100)
    buffer = buffers.buffers()["y"]
    assert view.shape == (3, 4) and view.stride() == (6, 1) and buffer.numel() == 1024 + 2 * 6 + 4 + 100
    assert torch.isnan(buffer).all() and buffers.problems() is None and buffers.written_outside("y") == []
    view.fill_(1.0)
    buffer[1024 + 5] = 1.0  # padding of row 0
    buffer[-1] = 1.0  # the guard after it
    assert buffers.written_outside("y") == [5, 16 + 100 - 1]
    assert buffers.problems().startswith("it wrote outside y (between its rows, element offset 5)")


@triton.jit
def _row_block_kernel(x_ptr, y_ptr, row_stride, N, LIMIT, BLOCK: tl.constexpr):
    """Copies row `row` of x into y through one block masked with `cols < LIMIT`, after reading x[0, 0] alone."""
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    first = tl.load(x_ptr)  # a scalar at the tensor's first element
    x = tl.load(x_ptr + row * row_stride + cols, mask=cols < LIMIT, other=0.0)
    tl.store(y_ptr + row * row_stride + cols, x + first * 0, mask=cols < LIMIT)


def _strays(N: int, limit: int, row_stride: int):
    """Launch :func:`_row_block_kernel` on 3 rows of N (rows ``row_stride`` apart) in guarded buffers: the stray."""
    buffers = Buffers()
    x = buffers.input("x", torch.arange(3.0 * N).reshape(3, N), row_stride=row_stride)
    y = buffers.output("y", (3, N), torch.float32, "cpu", row_stride=row_stride)
    with interpreter_guards(True, buffers, refuse=True):
        _row_block_kernel[(3,)](x, y, row_stride, N, limit, BLOCK=8)
    return buffers.stray


@pytest.mark.skipif(not interpreter_active(), reason="the address check watches the interpreter's memory operations")
def test_the_address_check_counts_unmasked_lanes_only_and_allows_a_scalar_at_the_first_element():
    assert _strays(N=5, limit=5, row_stride=7) is None  # lanes 5…7 masked: nothing outside


@pytest.mark.skipif(not interpreter_active(), reason="the address check watches the interpreter's memory operations")
def test_the_address_check_names_the_tensor_the_access_and_the_row_and_column():
    stray = _strays(N=5, limit=7, row_stride=7)  # lanes 5 and 6 land in the padding between rows
    assert str(stray) == "a load at column 5 of row 0 of x, past its N = 5 columns (the padding between its rows)"
    assert (stray.kind, stray.tensor, stray.axis) == ("load", "x", "columns")
    assert stray.frame is not None and "tl.load(x_ptr + row * row_stride + cols" in stray.frame.line
    stray = _strays(N=5, limit=7, row_stride=5)  # rows N apart: only the last row's lanes leave the tensor
    assert str(stray) == "a load at column 5 of row 2 of x, past its N = 5 columns"


@pytest.mark.parametrize("spec", [ex03_forward.SPEC, ex04_dx.SPEC, ex05_dgamma.SPEC, ex09_long_row.SPEC,
                                  ex10_one_pass.SPEC, ex14_fused_add.FORWARD_SPEC, ex14_fused_add.BACKWARD_SPEC,
                                  ex15_layernorm.FORWARD_SPEC, ex15_layernorm.BACKWARD_SPEC],
                         ids=lambda spec: spec.exercise)
def test_every_kernel_exercise_has_a_case_whose_rows_are_further_apart_than_n(spec):
    # A block that runs past its row's last column lands in the next row's elements where rows are N apart, which
    # no address check can tell from that row's own; in the padding it is outside every element.
    assert any(case.stride > case.N for case in spec.cases())


# --------------------------------------------------------------------------- exercise skeletons


def _run_in_process(path: Path) -> list[Feedback]:
    """Run a notebook's code cells in one namespace (as a kernel would) and collect what they display."""
    nb = nbformat.read(path, as_version=4)
    shown: list = []
    namespace = {"__name__": "__main__", "display": shown.append}
    for index, cell in enumerate(nb.cells):
        if cell.cell_type != "code":
            continue
        filename = f"<{path.name} cell {index}>"
        linecache.cache[filename] = (len(cell.source), None, cell.source.splitlines(True), filename)  # for Triton
        exec(compile(cell.source, filename, "exec"), namespace)  # noqa: S102 - our own notebooks
    return [item for item in shown if isinstance(item, Feedback)]


EXERCISES = sorted((ROOT / "exercises").glob("ex[0-9][0-9]_*.ipynb"))


@pytest.mark.parametrize("path", EXERCISES, ids=lambda p: p.name)
def test_every_exercise_skeleton_runs_and_says_not_done_yet(path):
    nb = nbformat.read(path, as_version=4)
    graded = [c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade") and c.cell_type == "code"]
    feedbacks = _run_in_process(path)
    learner = [f for f in feedbacks if f.exercise.split(" · ")[0] == path.name[2:4]]
    assert graded and len(learner) >= len(graded), (len(graded), feedbacks)
    assert all(f.status == "not done yet" for f in learner), learner


# --------------------------------------------------------------------------- the learner's code travels to the child


def test_a_kernel_defined_in_a_notebook_cell_is_judged_in_the_child():
    nb = nbformat.read(ROOT / "solutions" / "03_forward_kernel.ipynb", as_version=4)
    cell = next(c.source for c in nb.cells if c.cell_type == "code" and "def my_forward_kernel" in c.source)
    namespace = _define_in_cell("import triton\nimport triton.language as tl\n" + cell, "<solutions 03 cell>")
    assert checkers.check_forward_kernel(namespace["my_forward_kernel"]).passed
    wrong_cell = cell.replace("/ N + eps", "/ BLOCK_SIZE + eps")
    namespace = _define_in_cell(
        "import triton\nimport triton.language as tl\n" + wrong_cell, "<solutions 03 wrong cell>"
    )
    assert "divided by BLOCK_SIZE instead of N" in checkers.check_forward_kernel(namespace["my_forward_kernel"]).message


def test_a_kernel_using_a_helper_kernel_and_a_global_constant_travels_with_them():
    feedback = checkers.check_forward_kernel(_kernel_with_helper("tl.constexpr(1.0)", "<helper cell>"))
    assert feedback.passed, feedback

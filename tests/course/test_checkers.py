"""Every exercise checker is proven: the solution passes, each classic wrong variant is named.

The wrong variants live in tests/course/wrong_variants.py (kernels are one-line-ish
mutations of the package kernels). Each must be rejected with its own message,
asserted by substring, and a skeleton must get "not done yet", not a traceback.
Finally every exercise notebook's code runs top to bottom, in process, and all
its checkers say "not done yet".

Source: solutions/*.ipynb and exercises/*.ipynb.
"""

from __future__ import annotations

import inspect
import linecache
import os
import re
import sys
from pathlib import Path

import cloudpickle
import nbformat
import pytest
import torch

import rmsnorm.article
import rmsnorm_course.teaching.buggy
import wrong_variants as wv
import wrong_variants_long_row_and_one_pass as wv910
from rmsnorm_course import checkers
from rmsnorm_course.checkers import Feedback, gpu_compile, isolate, kernels
from rmsnorm_course.checkers.cases import FLOAT16_MAX, row_cases
from rmsnorm_course.checkers.kernels import unmasked_accesses
from verdict_variants import _prediction, _samples, _solution_row  # the answers the verdict fixture records too

#: None where Triton's interpreter runs (every CPU machine; a GPU machine with the pinned triton and numpy);
#: else why not: the checkers then judge on the GPU alone, and say so (isolate.judges).
INTERPRETER_BROKEN = isolate.interpreter_unavailable()
needs_interpreter = pytest.mark.skipif(
    INTERPRETER_BROKEN is not None,
    reason=f"Triton's interpreter does not run here ({INTERPRETER_BROKEN}): GPU judge alone")

ROOT = Path(__file__).resolve().parents[2]

# The checkers run a learner's functions in a child process; ours live in these two modules, which a child
# would otherwise import (and wrong_variants defines ~60 kernels on import): ship them by value, as a notebook's.
cloudpickle.register_pickle_by_value(wv)
cloudpickle.register_pickle_by_value(sys.modules[__name__])


RIGHT = {
    "01": lambda: checkers.check_by_hand(_solution_row),
    "02": lambda: checkers.check_reference(rmsnorm.rmsnorm_reference),
    "03": lambda: checkers.check_forward_kernel(rmsnorm.article.rmsnorm_forward_kernel),
    "04": lambda: checkers.check_dx_kernel(rmsnorm.article.rmsnorm_dx_kernel),
    "05": lambda: checkers.check_dgamma_kernel(rmsnorm.article.rmsnorm_dgamma_kernel),
    "06": lambda: checkers.check_autograd_function(rmsnorm.article.RMSNormFunction),
    "07 prediction": lambda: checkers.check_prediction(_prediction),
    "07 reading": lambda: checkers.check_benchmark_reading(wv._median(), wv._percent(), _samples(), _prediction),
    "08 hypothesis": lambda: checkers.check_hypothesis(wv._hypothesis("right")),
    "08 fix": lambda: checkers.check_fixed_dx_kernel(rmsnorm.article.rmsnorm_dx_kernel),
}


@pytest.mark.parametrize("exercise", RIGHT)
def test_the_solution_passes(exercise):
    feedback = RIGHT[exercise]()
    assert isinstance(feedback, Feedback) and feedback.passed, feedback


def _cases(table, check):
    return [pytest.param(check, *table[name], id=name) for name in table]


WRONG = [
    *_cases(wv.BY_HAND, checkers.check_by_hand),
    *_cases(wv.REFERENCE, checkers.check_reference),
    *_cases(wv.FORWARD, checkers.check_forward_kernel),
    *_cases(wv.DX, checkers.check_dx_kernel),
    *_cases(wv.DGAMMA, checkers.check_dgamma_kernel),
    *_cases(wv.AUTOGRAD, checkers.check_autograd_function),
    *_cases(wv.HYPOTHESIS, checkers.check_hypothesis),
    pytest.param(checkers.check_fixed_dx_kernel, *wv.DX["masked load of dy without other"], id="08 fix: no other="),
]


#: Per-case time limit for the variants that never end (a normal case takes well under 1 s).
HANG_LIMIT_S = 4.0


@pytest.mark.parametrize(("check", "variant", "expected"), WRONG)
def test_each_wrong_variant_is_named(check, variant, expected, monkeypatch):
    # On every device: a load without other= is named by the interpreter's judge, which runs on a GPU machine too.
    if expected == wv.NO_OTHER and INTERPRETER_BROKEN is not None:
        pytest.skip(f"Triton's interpreter does not run here ({INTERPRETER_BROKEN}); a GPU reads 0 there, not NaN")
    if expected == wv.NEVER_ENDS:
        monkeypatch.setattr(isolate, "CASE_TIME_LIMIT_S", HANG_LIMIT_S)
        expected = f"did not finish in {HANG_LIMIT_S:g} s"
    feedback = check(variant)
    assert not feedback.passed, feedback
    assert feedback.status == ("not done yet" if expected == "not done yet" else "wrong"), feedback
    assert expected in str(feedback), feedback


def test_messages_of_distinct_numbers_show_distinct_digits():
    # rstd rounded to float16 differs from the oracle in the 4th significant digit:
    # 3 decimals would print equal numbers.
    feedback = checkers.check_forward_kernel(wv.FORWARD["rstd kept in 16 bits"][0])
    shown = re.search(r"rstd\[\d+\] = ([-\d.e]+), expected ([-\d.e]+)", feedback.message)
    assert shown and shown.group(1) != shown.group(2), feedback


@pytest.mark.parametrize("check", [checkers.check_by_hand, checkers.check_reference, checkers.check_forward_kernel,
                                   checkers.check_dx_kernel, checkers.check_dgamma_kernel,
                                   checkers.check_autograd_function, checkers.check_hypothesis,
                                   checkers.check_prediction, checkers.check_fixed_dx_kernel])
@pytest.mark.parametrize("answer", [None, 42, "my_kernel", torch.ones(3)], ids=["None", "int", "str", "tensor"])
def test_no_checker_raises_whatever_it_is_given(check, answer):
    feedback = check(answer)
    assert isinstance(feedback, Feedback) and feedback.status == "wrong", feedback


def test_a_checker_never_raises_on_a_wrong_samples_table():
    feedback = checkers.check_benchmark_reading(wv._median(), wv._percent(), "not a table", _prediction)
    assert isinstance(feedback, Feedback) and feedback.status == "wrong", feedback


def test_html_feedback_shows_code_not_backquotes():
    html = Feedback("03 · forward kernel", "wrong", "pass `mask=cols < N` and `other=0`")._repr_html_()
    assert "<code>mask=cols &lt; N</code>" in html and "<code>other=0</code>" in html and "`" not in html


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


@pytest.mark.parametrize("name", wv.BENCHMARK)
def test_each_wrong_benchmark_reading_is_named(name):
    (median_us, percent_change), expected = wv.BENCHMARK[name]
    feedback = checkers.check_benchmark_reading(median_us, percent_change, _samples(), _prediction)
    assert not feedback.passed and expected in str(feedback), feedback


def test_the_fix_checker_names_the_unfixed_kernel():
    feedback = checkers.check_fixed_dx_kernel(rmsnorm_course.teaching.buggy.rmsnorm_dx_kernel_block_mean)
    assert feedback.exercise.startswith("08") and "divided by BLOCK_SIZE instead of N" in feedback.message


def test_every_checker_has_at_least_three_named_wrong_variants():
    tables = {"01": wv.BY_HAND, "02": wv.REFERENCE, "03": wv.FORWARD, "04": wv.DX, "05": wv.DGAMMA,
              "06": wv.AUTOGRAD, "07": wv.BENCHMARK, "08": wv.HYPOTHESIS}
    for exercise, table in tables.items():
        named = {expected for _, expected in table.values()} - {"not done yet"}
        assert len(named) >= 3, (exercise, named)


def _prediction_skeleton():
    raise NotImplementedError()


def test_malformed_predictions_are_refused():
    assert checkers.check_prediction(lambda: {"forward": "faster"}).status == "wrong"
    assert checkers.check_prediction(_prediction_skeleton).status == "not done yet"


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


def test_feedback_reads_well_in_a_notebook_and_in_a_test():
    feedback = checkers.check_hypothesis(wv._hypothesis("swapped"))
    assert str(feedback).startswith("[08 · hypothesis] wrong: ") and repr(feedback) == str(feedback)
    html = Feedback("03 · forward kernel", "wrong", "mask with cols < N").__repr__(), Feedback(
        "03 · forward kernel", "wrong", "mask with cols < N")._repr_html_()
    assert "cols < N" in html[0] and "cols &lt; N" in html[1] and "cols < N" not in html[1]  # escaped for HTML


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


def _define_in_cell(source: str, filename: str) -> dict:
    """Run ``source`` as a notebook cell would (its text in linecache, where Triton and inspect read it)."""
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    namespace = {"__name__": "__main__"}
    exec(compile(source, filename, "exec"), namespace)  # noqa: S102 - our own solution's cell
    return namespace


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


def _kernel_with_helper(scale: str) -> str:
    return (
        f"import triton\nimport triton.language as tl\n\nSCALE = {scale}\n\n\n"
        "@triton.jit\ndef square(v):\n    return v * v * SCALE\n\n\n"
        + inspect.getsource(rmsnorm.article.rmsnorm_forward_kernel.fn).replace("tl.sum(x * x, axis=0)",
                                                                       "tl.sum(square(x), axis=0)")
    )


def test_a_kernel_using_a_helper_kernel_and_a_global_constant_travels_with_them():
    namespace = _define_in_cell(_kernel_with_helper("tl.constexpr(1.0)"), "<helper cell>")
    feedback = checkers.check_forward_kernel(namespace["rmsnorm_forward_kernel"])
    assert feedback.passed, feedback


def test_a_global_the_gpu_compiler_refuses_is_named_though_the_interpreter_runs_it():
    namespace = _define_in_cell(_kernel_with_helper("1.0"), "<helper cell, plain global>")
    feedback = checkers.check_forward_kernel(namespace["rmsnorm_forward_kernel"])
    assert (
        "compiler for a GPU rejects it" in feedback.message
        and "Cannot access global variable SCALE" in feedback.message
    ), feedback


def test_the_gpu_compile_message_says_what_ran(monkeypatch):
    # Under the interpreter the kernel ran and only the compile check refused it; on a GPU nothing
    # ran, so the message must not mention the interpreter and shows a call that gives the whole error.
    from rmsnorm_course.checkers import gpu_compile

    args = (
        "`my_kernel`",
        21,
        "acc += x",
        "CompilationError: Loop-carried variable acc has initial type int32",
        "my_kernel[(3,)](x)",
    )
    monkeypatch.setattr(gpu_compile, "interpreted", lambda: True)
    cpu = gpu_compile.gpu_rejects(*args)
    monkeypatch.setattr(gpu_compile, "interpreted", lambda: False)
    gpu = gpu_compile.gpu_rejects(*args)
    for message in (cpu, gpu):
        assert (
            wv.GPU_REJECTS in message
            and "at line 21 of your cell, `acc += x`" in message
            and "initial type int32" in message
        )
    assert cpu.startswith("the interpreter runs `my_kernel`") and "my_kernel[(3,)](x)" not in cpu
    assert (
        "interpreter" not in gpu
        and gpu.startswith("`my_kernel` does not compile")
        and "e.g. `my_kernel[(3,)](x)`" in gpu
    )


# --------------------------------------------------------------------------- one verdict on every device


@needs_interpreter
def test_every_device_runs_the_interpreters_judge_with_nan_in_masked_lanes(monkeypatch):
    # A GPU reads 0 (or anything) in the masked lanes of a load without other=; the interpreter's judge, run on
    # every machine, fills them with NaN and names the load.
    asked = []
    real_start = isolate.start
    monkeypatch.setattr(isolate, "start", lambda *a, **k: asked.append(k["interpret"]) or real_start(*a, **k))
    feedback = checkers.check_forward_kernel(wv.FORWARD["masked load of x without other"][0])
    assert feedback.status == "wrong" and wv.NO_OTHER in feedback.message and "(often 0" in feedback.message, feedback
    assert asked == ([True] if isolate.interpreted() else [True, False])


#: Right kernels with a masked load without other= whose masked lanes never reach a result.
UNREACHED_OTHER = {
    "03": (checkers.check_forward_kernel, wv.mutate(rmsnorm.article.rmsnorm_forward_kernel, (
        "gamma_ptr + cols, mask=mask, other=0)", "gamma_ptr + cols, mask=mask)"))),
    "09": (checkers.check_long_row_kernel, wv.mutate(wv910.L, (
        "tl.load(gamma_ptr + start + cols, mask=mask, other=0.0)", "tl.load(gamma_ptr + start + cols, mask=mask)"))),
    "10": (checkers.check_one_pass_kernel, wv.mutate(wv910.B, (
        "x = tl.load(x_ptr + offsets, mask=mask, other=0.0)",
        "x = tl.where(mask, tl.load(x_ptr + offsets, mask=mask), 0.0)"))),
}


@needs_interpreter
@pytest.mark.parametrize("exercise", UNREACHED_OTHER)
def test_a_load_without_other_whose_masked_lanes_reach_nothing_passes(exercise):
    # The interpreter's judge looks at the result, not at the source: a rule on the source alone would refuse these.
    check, kernel = UNREACHED_OTHER[exercise]
    assert kernels.masked_loads_without_other(inspect.getsource(kernel.fn))
    feedback = check(kernel)
    assert feedback.passed, feedback


@needs_interpreter
@pytest.mark.parametrize("server", ["second forkserver", "spawn"])
def test_on_a_gpu_machine_the_interpreters_judge_runs_in_a_child_with_the_interpreter_on(server, monkeypatch):
    # As on a GPU machine (kernels compiled in this process): the interpreter's child comes from a second
    # forkserver started with TRITON_INTERPRET=1 and no CUDA (or, without one, from a fresh process started so),
    # and this process's environment is left as it was.
    monkeypatch.setattr(isolate, "interpreted", lambda: False)
    if server == "spawn":
        monkeypatch.setattr(isolate, "_interpreter_server", lambda: None)
    monkeypatch.setattr(isolate, "judges", lambda: (True,))  # the interpreter's judge alone (no GPU to run the other)
    environments, servers = [], []
    real_environment, real_through = isolate._environment, isolate._through
    monkeypatch.setattr(isolate, "_environment", lambda env: environments.append(env) or real_environment(env))
    monkeypatch.setattr(isolate, "_through", lambda s: servers.append(s) or real_through(s))
    before = dict(os.environ)
    feedback = checkers.check_forward_kernel(wv.FORWARD["masked load of x without other"][0])
    assert feedback.status == "wrong" and wv.NO_OTHER in feedback.message, feedback
    assert environments == [{"TRITON_INTERPRET": "1", "CUDA_VISIBLE_DEVICES": ""}] and dict(os.environ) == before
    assert servers == ([isolate._INTERPRETER_SERVER] if server == "second forkserver" else [])
    assert checkers.check_long_row_kernel(wv910.L).passed  # 09's bounds check works in such a child too


def _ended(outcome: isolate.Outcome) -> isolate.Outcome:
    """The outcome with its feedback, as isolate.run_judges gives it."""
    if outcome.kind != "stopped":
        outcome.feedback = isolate.outcome_feedback("03 · forward kernel", outcome, "your kernel `k`")
    return outcome


def _done(status: str, message: str) -> isolate.Outcome:
    feedback = Feedback("03 · forward kernel", status, message)
    return _ended(isolate.Outcome("done", feedback, "the case a row of 257 ones"))


_NO_OTHER = f"on a row of 257 ones, line 20 of your cell, `tl.load(x_ptr + cols, mask=mask)`, {wv.NO_OTHER}: ..."
_GPU_REJECTS = f"`k` does not compile: {gpu_compile.REJECTS} at line 21 of your cell, `acc += x`: ..."
_RAISED = "on a row of 257 ones: `k` raised AttributeError at line 20 of your cell: ..."
_TIMEOUT = _ended(isolate.Outcome("timeout", 60.0, "the case a row of 257 ones"))
_STOPPED = isolate.Outcome("stopped", None, "the case a row of 257 ones")


_ACC = {"ok": False, "line": 21, "text": "acc += x", "message": "CompilationError: acc"}  # the CPU's compile check

#: (judges' outcomes, the CPU's compile check, a substring of the verdict): "passed" when it ends with " ok".
VERDICTS = {
    "the GPU read 0s: the interpreter's NaN": ([_done("wrong", _NO_OTHER), _done("passed", "GPU ok")], None, _NO_OTHER),
    "GPU only": ([_done("passed", "ok"), _done("wrong", "illegal memory access")], None, "illegal memory access"),
    "both: the CPU's words": ([_done("wrong", "y is wrong"), _done("wrong", "y is off")], None, "y is wrong"),
    "the GPU's compiler first": ([_done("wrong", "y is wrong"), _done("wrong", _GPU_REJECTS)], None, _GPU_REJECTS),
    "but the interpreter's own error": ([_done("wrong", _RAISED), _done("wrong", _GPU_REJECTS)], None, _RAISED),
    "a time-out": ([_TIMEOUT, _STOPPED], None, "did not finish in 60 s"),
    "a crash": ([_done("passed", "ok"), _ended(isolate.Outcome("crashed", -11, "the case x"))], None, wv.CRASHED),
    "CPU: the compile check": ([_done("passed", "ok")], _ACC, "but Triton's compiler for a GPU rejects it at line 21"),
    "CPU: one judge": ([_done("passed", "CPU ok")], None, "CPU ok"),
    "both pass: the GPU's numbers": ([_done("passed", "CPU ok"), _done("passed", "GPU ok")], None, "GPU ok"),
}


@pytest.mark.parametrize("case", VERDICTS)
def test_the_verdict_is_wrong_when_either_judge_says_so(case, monkeypatch):
    outcomes, compiled, expected = VERDICTS[case]
    monkeypatch.setattr(gpu_compile, "interpreted", lambda: True)
    feedback = kernels.verdict("03 · forward kernel", "`k`", outcomes, compiled)
    assert feedback.status == ("passed" if expected.endswith(" ok") else "wrong"), feedback
    assert expected in feedback.message, feedback


gpu_only = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (the CPU runs the other tests)")

#: Every wrong kernel of exercises 03, 04, 05, 08 (the fix), 09 and 10 with the message the CPU gives it.
KERNEL_VARIANTS = [
    *_cases(wv.FORWARD, checkers.check_forward_kernel), *_cases(wv.DX, checkers.check_dx_kernel),
    *_cases(wv.DGAMMA, checkers.check_dgamma_kernel), *_cases(wv.DX, checkers.check_fixed_dx_kernel),
    *_cases(wv910.LONG_ROW, checkers.check_long_row_kernel), *_cases(wv910.ONE_PASS, checkers.check_one_pass_kernel),
]


@needs_interpreter
@pytest.mark.gpu
@gpu_only
@pytest.mark.parametrize(("check", "variant", "expected"), KERNEL_VARIANTS)
def test_on_a_gpu_every_kernel_verdict_is_the_cpus(check, variant, expected, monkeypatch):
    if expected == wv.NEVER_ENDS:
        monkeypatch.setattr(isolate, "CASE_TIME_LIMIT_S", HANG_LIMIT_S)
        expected = f"did not finish in {HANG_LIMIT_S:g} s"
    feedback = check(variant)  # the interpreter's judge and the GPU's
    assert feedback.status == ("not done yet" if expected == "not done yet" else "wrong"), feedback
    assert expected in str(feedback), feedback  # str: status and message ("not done yet" is the status)
    if expected != wv.GPU_REJECTS:  # worded as on a GPU (nothing ran), and the interpreter alone runs it
        monkeypatch.setattr(isolate, "judges", lambda: (True,))
        assert feedback.message == check(variant).message  # the interpreter's judge alone: the CPU's words


def test_where_the_interpreter_does_not_run_the_gpu_judges_alone_and_says_so(monkeypatch):
    monkeypatch.setattr(isolate, "interpreted", lambda: False)  # as on a GPU machine
    monkeypatch.setattr(isolate, "interpreter_unavailable", lambda: "TypeError('only 0-dimensional arrays ...')")
    monkeypatch.setattr(isolate, "_warned_gpu_only", False)
    with pytest.warns(RuntimeWarning, match=r"judge kernels on the GPU alone.*without other="):
        assert isolate.judges() == (False,)
    assert isolate.judges() == (False,)  # warned once
    monkeypatch.setattr(isolate, "interpreter_unavailable", lambda: None)
    assert isolate.judges() == (True, False)


def test_the_interpreter_probe_runs_the_package_kernels_in_a_fresh_process(monkeypatch):
    monkeypatch.setattr(isolate, "interpreted", lambda: False)  # ask as a GPU machine would
    monkeypatch.setattr(isolate, "_interpreter_runs", False)
    assert isolate.interpreter_unavailable() is None  # this machine's interpreter runs them
    monkeypatch.setattr(isolate, "_interpreter_runs", False)
    monkeypatch.setattr(isolate, "_INTERPRETER_PROBE", "raise TypeError('only 0-dimensional arrays')")
    assert isolate.interpreter_unavailable() == "TypeError: only 0-dimensional arrays"
    monkeypatch.setattr(isolate, "_INTERPRETER_PROBE", "pass")
    assert isolate.interpreter_unavailable() == "TypeError: only 0-dimensional arrays"  # asked once, then kept


def test_a_gpu_compile_error_is_named_however_deep_it_is_wrapped():
    # A GPU child's launch may wrap the compiler's error more than once; one exception walker finds it.
    from triton.compiler.errors import CompilationError

    try:
        try:
            try:
                source = inspect.getsource(rmsnorm.article.rmsnorm_forward_kernel.fn)
                raise CompilationError(source, None, "acc has type int32")
            except CompilationError as inner:
                raise RuntimeError("launch failed") from inner
        except RuntimeError as outer:
            raise ValueError("judge failed") from outer
    except ValueError as error:
        message = gpu_compile.compile_error_message(rmsnorm.article.rmsnorm_forward_kernel, error)
    assert message is not None and gpu_compile.REJECTS in message and "acc has type int32" in message, message

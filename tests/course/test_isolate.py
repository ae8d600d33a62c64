"""The checkers' child process and its two judges: one verdict on every device.

Where Triton's interpreter runs, its judge runs on every machine (NaN in the masked lanes of a
load without ``other=``, every address checked); on a GPU machine the GPU's judge runs too, and
the verdict is wrong when either says so. A global the GPU's compiler refuses is named though the
interpreter runs it. Every wrong kernel of exercises 03, 04, 05, 08 (the fix), 09, 10, 14 and 15 gets the
CPU's verdict and words on a GPU (gpu mark): this is where a GPU machine checks them, once each (the
per-exercise tests of the same variants skip there: checker_support.covered_by_isolate_on_a_gpu).

Source: solutions/03_forward_kernel.ipynb … 10_one_pass_backward.ipynb.
"""

from __future__ import annotations

import inspect
import os

import pytest
import torch

import rmsnorm.article
import wrong_variants as wv
import wrong_variants_fused_add as wv14
import wrong_variants_layernorm as wv15
import wrong_variants_long_row_and_one_pass as wv910
from checker_support import assert_verdict, contains, needs_interpreter
from rmsnorm_course import checkers
from rmsnorm_course.checkers import Feedback, gpu_compile, isolate, kernels
from verdict_variants import HANG_LIMIT_S, _kernel_with_helper, fixture_rows, normalise


def test_a_global_the_gpu_compiler_refuses_is_named_though_the_interpreter_runs_it():
    feedback = checkers.check_forward_kernel(_kernel_with_helper("1.0", "<helper cell, plain global>"))
    assert (
        "compiler for a GPU rejects it" in feedback.message
        and "Cannot access global variable SCALE" in feedback.message
    ), feedback


def test_the_gpu_compile_message_says_what_ran(monkeypatch):
    # Under the interpreter the kernel ran and only the compile check refused it; on a GPU nothing
    # ran, so the message must not mention the interpreter and shows a call that gives the whole error.
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


def test_a_name_the_gpu_compiler_does_not_know_is_one_made_inside_a_loop(monkeypatch):
    # Under the interpreter the kernel ran, so the name exists: it was made inside a loop (or an `if`). On a GPU
    # nothing ran (it may be a typo): the message says "if". Both ask for it once, before the loop.
    args = ("`my_kernel`", 25, "rstd = tl.rsqrt(tl.sum(sum_sq, axis=0) / N + eps)",
            "NameError('sum_sq is not defined')", "my_kernel[(3,)](x)")
    monkeypatch.setattr(gpu_compile, "interpreted", lambda: True)
    cpu = gpu_compile.gpu_rejects(*args)
    monkeypatch.setattr(gpu_compile, "interpreted", lambda: False)
    gpu = gpu_compile.gpu_rejects(*args)
    for message in (cpu, gpu):
        assert gpu_compile.REJECTS in message and wv910.MADE_IN_LOOP in message and "`sum_sq = tl.zeros(" in message
        assert "at line 25 of your cell, `rstd = tl.rsqrt(" in message and wv.GPU_REJECTS not in message  # its own
    assert "`sum_sq` is created inside a loop" in cpu and "If `sum_sq` is created inside a loop" in gpu


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
FIXTURE_ROWS = fixture_rows()

def _variants(exercise: str, table: dict, check) -> list:
    """One ``pytest.param(check, fixture_key, answer, expected, id=name)`` per wrong variant of ``table``."""
    return [pytest.param(check, (exercise, name), *table[name], id=name) for name in table]


#: Every wrong kernel of exercises 03, 04, 05, 08 (the fix), 09, 10, 14 and 15 with the message the CPU gives it.
KERNEL_VARIANTS = [
    *_variants("03", wv.FORWARD, checkers.check_forward_kernel), *_variants("04", wv.DX, checkers.check_dx_kernel),
    *_variants("05", wv.DGAMMA, checkers.check_dgamma_kernel),
    *_variants("08 fix", wv.DX, checkers.check_fixed_dx_kernel),
    *_variants("09", wv910.LONG_ROW, checkers.check_long_row_kernel),
    *_variants("10", wv910.ONE_PASS, checkers.check_one_pass_kernel),
    *_variants("14 forward", wv14.FORWARD, checkers.check_fused_add_kernel),
    *_variants("14 backward", wv14.BACKWARD, checkers.check_fused_add_backward_kernel),
    *_variants("15 forward", wv15.FORWARD, checkers.check_layernorm_kernel),
    *_variants("15 backward", wv15.BACKWARD, checkers.check_layernorm_backward_kernel),
]


#: The exercises whose per-exercise tests also hold each variant's feedback free of every other variant's words
#: (long_row_support.assert_each_wrong_variant_is_named, checker_support.two_checker_tests), which skip on a GPU.
OWN_WORDS = {"09": wv910.LONG_ROW, "10": wv910.ONE_PASS, "14 forward": wv14.FORWARD, "14 backward": wv14.BACKWARD,
             "15 forward": wv15.FORWARD, "15 backward": wv15.BACKWARD}


@needs_interpreter
@pytest.mark.gpu
@gpu_only
@pytest.mark.parametrize(("check", "key", "variant", "expected"), KERNEL_VARIANTS)
def test_on_a_gpu_every_kernel_verdict_is_the_cpus(check, key, variant, expected, monkeypatch):
    if expected == wv.NEVER_ENDS:
        monkeypatch.setattr(isolate, "CASE_TIME_LIMIT_S", HANG_LIMIT_S)
        expected = f"did not finish in {HANG_LIMIT_S:g} s"
    feedback = check(variant)  # the interpreter's judge and the GPU's
    assert_verdict(feedback, expected)
    table = OWN_WORDS.get(key[0], {})
    others = [name for name, (_, words) in table.items() if name != key[1] and contains(str(feedback), words)]
    assert others == [], (key, others)  # its own words, no other variant's
    if gpu_compile.REJECTS in feedback.message:
        return  # worded as on a GPU: nothing ran
    cpu = FIXTURE_ROWS.get(key)
    if cpu is None:  # a variant the fixture holds under another exercise: the interpreter's judge alone, here
        monkeypatch.setattr(isolate, "judges", lambda: (True,))
        assert feedback.message == check(variant).message
    else:  # the CPU's words, as the fixture holds them
        assert (feedback.status, normalise(feedback.message)) == (cpu["verdict"], cpu["message"])


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

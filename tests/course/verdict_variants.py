"""Every learner answer the checker tests build, named, for the verdicts fixture (tests/data/verdicts.csv).

:func:`variants` lists (exercise, variant, run, hangs): the solutions, every wrong
variant of tests/course/wrong_variants*.py, and the other answers the checker tests
(tests/course/test_ex*.py, test_harness.py, test_isolate.py) build (answers that are
not code at all, right kernels with an unreached masked load, a kernel with a helper
kernel and a global, accesses far outside every tensor, loops that never end).
``run()`` calls the public checker and returns its Feedback; ``hangs`` says the
answer runs into the time limit (which the caller shortens to :data:`HANG_LIMIT_S`).

:func:`normalise` removes from a message what varies from run to run: temporary
folders, the counter in the names of mutated kernels, memory addresses, the
distance of an access far outside every tensor from the nearest buffer (and
which buffer that is), and newlines (written as a literal ``\\n``, one message a line in the CSV).

Never import this from the course package or a notebook.
"""

from __future__ import annotations

import csv
import inspect
import linecache
import re
import sys
from collections.abc import Callable
from pathlib import Path

import cloudpickle
import torch

import rmsnorm
import rmsnorm.article
import rmsnorm_course.teaching.buggy
import wrong_variants as wv
import wrong_variants_fake_and_tuning as wv11
import wrong_variants_fused_add as wv14
import wrong_variants_layernorm as wv15
import wrong_variants_long_row_and_one_pass as wv910
import wrong_variants_norm_share as wv13
from rmsnorm_course import checkers
from rmsnorm_course.checkers.ex10_one_pass import one_pass_backward_kernel
from rmsnorm_course.checkers.ex13_into_a_model import check_norm_share
from rmsnorm_course.teaching.fused_add import fused_add_backward_kernel, fused_add_forward_kernel
from rmsnorm_course.teaching.layernorm import layernorm_backward_kernel, layernorm_forward_kernel
from rmsnorm_course.teaching.long_row import long_row_forward_kernel

#: The time limit of the answers that never end (a normal case takes well under 1 s).
HANG_LIMIT_S = 4.0
#: The fixture's columns.
COLUMNS = ["exercise", "variant", "verdict", "message"]
#: The fixture, written on the CPU by tools/record_verdicts.py.
FIXTURE = Path(__file__).resolve().parents[1] / "data" / "verdicts.csv"


def fixture_rows() -> dict[tuple[str, str], dict[str, str]]:
    """The fixture's rows by (exercise, variant)."""
    with FIXTURE.open(encoding="utf-8") as handle:
        return {(row["exercise"], row["variant"]): row for row in csv.DictReader(handle)}

for _module in (wv, wv11, wv13, sys.modules[__name__]):  # a child gets them by value, as a notebook's
    cloudpickle.register_pickle_by_value(_module)


def normalise(message: str) -> str:
    """The message without what varies from run to run (see the module's docstring)."""
    message = re.sub(r"/tmp/[^\s/`'\"]+", "<tmp>", message)
    message = re.sub(r"\b(wrong_\w+?_kernel)_\d+\b", r"\1_N", message)
    message = re.sub(r"0x[0-9a-fA-F]{6,}", "0x…", message)
    message = re.sub(r"at [\d,]+ element\(s\) (?:past the end|before the start) of \w+'s buffer",
                     "at <distance> from <tensor>'s buffer", message)  # far outside: where memory happens to be
    return message.replace("\r", "").replace("\n", "\\n")


def _solution_row():
    return [1.0, 2.0, 2.0, 4.0], [1.0, 1.0, 0.5, 2.0], 0.4, [0.4, 0.8, 0.4, 3.2]


def _prediction():
    return {"forward": "more", "forward_backward": "less"}


def _samples():
    from rmsnorm_lab import load_results

    return load_results().samples


def _fast_csv():
    import json

    import pandas as pd

    from rmsnorm_lab import RESULTS_DIR

    env = json.loads((RESULTS_DIR / "fast_environment.json").read_text())
    return pd.read_csv(RESULTS_DIR / "fast.csv"), env["copy_rate_gbps"], pd.read_csv(RESULTS_DIR / "fast_tuning.csv")


SHAPES = [(65536, 256, "float16", "backward"), (32768, 4096, "bfloat16", "backward"),
          (4096, 4096, "float32", "forward")]


def _step_tables():
    from pathlib import Path

    from rmsnorm_lab.model import load_model_kernels, load_model_step

    folder = Path(__file__).resolve().parents[1] / "data" / "model_step_fixture"
    return load_model_step(folder), load_model_kernels(folder)


def _define_in_cell(source: str, filename: str) -> dict:
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    namespace = {"__name__": "__main__"}
    exec(compile(source, filename, "exec"), namespace)  # noqa: S102 - our own test kernel
    return namespace


def _kernel_with_helper(scale: str, filename: str):
    source = (
        f"import triton\nimport triton.language as tl\n\nSCALE = {scale}\n\n\n"
        "@triton.jit\ndef square(v):\n    return v * v * SCALE\n\n\n"
        + inspect.getsource(rmsnorm.article.rmsnorm_forward_kernel.fn).replace("tl.sum(x * x, axis=0)",
                                                                               "tl.sum(square(x), axis=0)")
    )
    return _define_in_cell(source, filename)["rmsnorm_forward_kernel"]


Variant = tuple[str, str, Callable[[], object], bool]


def _table(exercise: str, table: dict, check) -> list[Variant]:
    return [(exercise, name, (lambda v=answer: check(v)), expected == wv.NEVER_ENDS)
            for name, (answer, expected) in table.items()]


def variants() -> list[Variant]:
    """(exercise, variant, run, hangs) for every answer (see the module's docstring); names unique per exercise."""
    c = checkers
    out: list[Variant] = [
        ("01", "solution", lambda: c.check_by_hand(_solution_row), False),
        ("02", "solution", lambda: c.check_reference(rmsnorm.rmsnorm_reference), False),
        ("03", "solution", lambda: c.check_forward_kernel(rmsnorm.article.rmsnorm_forward_kernel), False),
        ("04", "solution", lambda: c.check_dx_kernel(rmsnorm.article.rmsnorm_dx_kernel), False),
        ("05", "solution", lambda: c.check_dgamma_kernel(rmsnorm.article.rmsnorm_dgamma_kernel), False),
        ("06", "solution", lambda: c.check_autograd_function(rmsnorm.article.RMSNormFunction), False),
        ("07 prediction", "solution", lambda: c.check_prediction(_prediction), False),
        ("07 reading", "solution",
         lambda: c.check_benchmark_reading(wv._median(), wv._percent(), _samples(), _prediction), False),
        ("08 hypothesis", "solution", lambda: c.check_hypothesis(wv._hypothesis("right")), False),
        ("08 fix", "solution", lambda: c.check_fixed_dx_kernel(rmsnorm.article.rmsnorm_dx_kernel), False),
        ("09", "solution", lambda: c.check_long_row_kernel(long_row_forward_kernel), False),
        ("10", "solution", lambda: c.check_one_pass_kernel(one_pass_backward_kernel), False),
        ("11", "solution", lambda: c.check_fake_implementation(wv11.fake_forward, wv11.fake_backward), False),
        ("11", "forward alone", lambda: c.check_fake_implementation(wv11.fake_forward), False),
        ("11", "forward alone, rstd in x's dtype", lambda: c.check_fake_implementation(wv11._fwd_rstd_in_x_dtype),
         False),
        ("12 copy fraction", "solution", lambda: c.check_copy_fraction(wv11._fraction(), *_fast_csv()[:2]), False),
        ("12 pick config", "solution", lambda: c.check_pick_config(wv11._pick(), _fast_csv()[2], SHAPES), False),
        ("13", "solution", lambda: check_norm_share(wv13._share(), *_step_tables(), "the fixture"), False),
        ("14 forward", "solution", lambda: c.check_fused_add_kernel(fused_add_forward_kernel), False),
        ("14 backward", "solution", lambda: c.check_fused_add_backward_kernel(fused_add_backward_kernel), False),
        ("15 forward", "solution", lambda: c.check_layernorm_kernel(layernorm_forward_kernel), False),
        ("15 backward", "solution", lambda: c.check_layernorm_backward_kernel(layernorm_backward_kernel), False),
    ]
    out += _table("01", wv.BY_HAND, c.check_by_hand)
    out += _table("02", wv.REFERENCE, c.check_reference)
    out += _table("03", wv.FORWARD, c.check_forward_kernel)
    out += _table("04", wv.DX, c.check_dx_kernel)
    out += _table("05", wv.DGAMMA, c.check_dgamma_kernel)
    out += _table("06", wv.AUTOGRAD, c.check_autograd_function)
    out += [("06", "eps hard-coded in backward", lambda: c.check_autograd_function(wv.EpsHardCodedInBackward), False)]
    out += [("07 reading", name, (lambda a=args: c.check_benchmark_reading(*a, _samples(), _prediction)), False)
            for name, (args, _) in wv.BENCHMARK.items()]
    out += [("07 reading", "not a table",
             lambda: c.check_benchmark_reading(wv._median(), wv._percent(), "not a table", _prediction), False),
            ("07 prediction", "malformed", lambda: c.check_prediction(lambda: {"forward": "faster"}), False)]
    out += _table("08 hypothesis", wv.HYPOTHESIS, c.check_hypothesis)
    out += [("08 fix", "masked load of dy without other",
             lambda: c.check_fixed_dx_kernel(wv.DX["masked load of dy without other"][0]), False),
            ("08 fix", "the unfixed kernel",
             lambda: c.check_fixed_dx_kernel(rmsnorm_course.teaching.buggy.rmsnorm_dx_kernel_block_mean), False)]
    out += _table("08 fix", wv.FIX, c.check_fixed_dx_kernel)
    out += _table("09", wv910.LONG_ROW, c.check_long_row_kernel)
    out += _table("10", wv910.ONE_PASS, c.check_one_pass_kernel)
    out += [("09", "never ends", lambda: c.check_long_row_kernel(wv910.NEVER_ENDS), True),
            ("10", "never ends", lambda: c.check_one_pass_kernel(wv910.ONE_PASS_NEVER_ENDS), True)]
    for name, (kernel, _) in wv910.FAR_OUTSIDE.items():
        check = c.check_long_row_kernel if name.startswith("09") else c.check_one_pass_kernel
        out.append((name[:2], name[3:], (lambda k=kernel, ch=check: ch(k)), False))
    out += [
        ("03", "unreached load without other", lambda: c.check_forward_kernel(wv.mutate(
            rmsnorm.article.rmsnorm_forward_kernel,
            ("gamma_ptr + cols, mask=mask, other=0)", "gamma_ptr + cols, mask=mask)"))), False),
        ("09", "unreached load without other", lambda: c.check_long_row_kernel(wv.mutate(wv910.L, (
            "tl.load(gamma_ptr + start + cols, mask=mask, other=0.0)",
            "tl.load(gamma_ptr + start + cols, mask=mask)"))), False),
        ("10", "unreached load without other", lambda: c.check_one_pass_kernel(wv.mutate(wv910.B, (
            "x = tl.load(x_ptr + offsets, mask=mask, other=0.0)",
            "x = tl.where(mask, tl.load(x_ptr + offsets, mask=mask), 0.0)"))), False),
        ("03", "misspelt keyword", lambda: c.check_forward_kernel(wv.mutate(
            rmsnorm.article.rmsnorm_forward_kernel,
            ("gamma_ptr + cols, mask=mask, other=0)", "gamma_ptr + cols, mask=mask, other=0, maks=mask)"))), False),
        ("03", "helper kernel and constexpr global",
         lambda: c.check_forward_kernel(_kernel_with_helper("tl.constexpr(1.0)", "<helper cell>")), False),
        ("03", "helper kernel and plain global",
         lambda: c.check_forward_kernel(_kernel_with_helper("1.0", "<helper cell, plain global>")), False),
        ("09", "renamed pointer", lambda: c.check_long_row_kernel(wv.mutate(
            long_row_forward_kernel, ("    x_ptr,  #", "    x_in,  #"), ("x_row = x_ptr + row", "x_row = x_in + row"))),
         False),
    ]
    answers = {"None": None, "int": 42, "str": "my_kernel", "tensor": torch.ones(3)}
    for exercise, check in (("01", c.check_by_hand), ("02", c.check_reference), ("03", c.check_forward_kernel),
                            ("04", c.check_dx_kernel), ("05", c.check_dgamma_kernel),
                            ("06", c.check_autograd_function), ("07 prediction", c.check_prediction),
                            ("08 hypothesis", c.check_hypothesis), ("08 fix", c.check_fixed_dx_kernel),
                            ("09", c.check_long_row_kernel), ("10", c.check_one_pass_kernel),
                            ("14 forward", c.check_fused_add_kernel),
                            ("14 backward", c.check_fused_add_backward_kernel),
                            ("15 forward", c.check_layernorm_kernel),
                            ("15 backward", c.check_layernorm_backward_kernel)):
        out += [(exercise, f"answer is {label}", (lambda a=answer, ch=check: ch(a)), False)
                for label, answer in answers.items()]
    out += [("11", name, (lambda p=pair: c.check_fake_implementation(*p)), False)
            for name, (pair, _) in wv11.FAKE.items()]
    out += [("12 copy fraction", name, (lambda f=fn: c.check_copy_fraction(f, *_fast_csv()[:2])), False)
            for name, (fn, _) in wv11.COPY_FRACTION.items()]
    out += [("12 pick config", name, (lambda f=fn: c.check_pick_config(f, _fast_csv()[2], SHAPES)), False)
            for name, (fn, _) in wv11.PICK_CONFIG.items()]
    out += [("13", name, (lambda f=fn: check_norm_share(f, *_step_tables())), False)
            for name, (fn, _) in wv13.NORM_SHARE.items()]
    out += _table("14 forward", wv14.FORWARD, c.check_fused_add_kernel)
    out += _table("14 backward", wv14.BACKWARD, c.check_fused_add_backward_kernel)
    out += _table("15 forward", wv15.FORWARD, c.check_layernorm_kernel)
    out += _table("15 backward", wv15.BACKWARD, c.check_layernorm_backward_kernel)
    keys = [(e, v) for e, v, _, _ in out]
    assert len(keys) == len(set(keys)), "two variants of one exercise share a name"
    return out

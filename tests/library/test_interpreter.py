"""Importing the library changes nothing in its caller's process; the course switches the interpreter on."""

import operator
import os
import subprocess
import sys
import textwrap

import pytest
import torch

import rmsnorm
from rmsnorm import device
from rmsnorm_course import backend

no_cuda = pytest.mark.skipif(torch.cuda.is_available(), reason="the interpreter path is for machines without CUDA")


def _python(code, **env):
    full_env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"} | env
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                          env=full_env, timeout=180)


#: Run in a fresh process: the environment, Triton's knobs and the interpreter's one patched function, before
#: and after `import rmsnorm`, and the modules the import loaded.
_SNAPSHOT = """
    import os, sys, torch, triton
    from triton.runtime import interpreter

    def knobs():
        groups = ("runtime", "compilation", "cache", "language", "autotuning", "build", "nvidia", "amd", "proton")
        seen = {}
        for group in groups:
            g = getattr(triton.knobs, group, None)
            for name in dir(g):
                if not name.startswith("_") and not callable(getattr(type(g), name, None)):
                    seen[f"{group}.{name}"] = repr(getattr(g, name))
        return seen

    env, kn, patch = dict(os.environ), knobs(), interpreter._patch_lang_tensor
    before = set(sys.modules)
    import rmsnorm
    loaded = sorted(set(sys.modules) - before)
    assert dict(os.environ) == env, {k: v for k, v in os.environ.items() if env.get(k) != v}
    assert knobs() == kn, {k: v for k, v in knobs().items() if kn.get(k) != v}
    assert interpreter._patch_lang_tensor is patch
    unwanted = [m for m in loaded if m.split(".")[0] in ("pandas", "matplotlib", "rmsnorm_lab", "rmsnorm_course")
                or m.startswith("torch._dynamo")]
    assert not unwanted, unwanted
    print("ok", rmsnorm.interpreter_active())
"""


@no_cuda
def test_import_changes_no_environment_no_knob_and_loads_no_lab_course_or_dynamo():
    # triton imported first, with the variable set, so that the knobs can be read before rmsnorm comes
    done = _python(_SNAPSHOT, TRITON_INTERPRET="1")
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["ok", "True"]


@no_cuda
def test_without_the_variable_import_works_and_the_first_launch_names_the_fix():
    done = _python("""
        import os, torch, rmsnorm
        assert "TRITON_INTERPRET" not in os.environ and not rmsnorm.interpreter_active()
        for call in (lambda: rmsnorm.rmsnorm(torch.ones(2, 4), torch.ones(4)),
                     lambda: rmsnorm.article.forward_op(torch.ones(2, 4), torch.ones(4))):
            try:
                call()
            except rmsnorm.InterpreterUnavailableError as error:
                assert isinstance(error, rmsnorm.ContractError)
                print(str(error))
            else:
                raise SystemExit("no error")
        """.replace("import os, torch, rmsnorm", "import os, torch, rmsnorm, rmsnorm.article"))
    assert done.returncode == 0, done.stderr
    lines = done.stdout.strip().splitlines()
    assert len(lines) == 2
    for line in lines:
        assert "interpreter is off" in line and "TRITON_INTERPRET=1" in line and "restart" in line


@no_cuda
def test_the_course_switches_the_interpreter_on_before_triton():
    assert os.environ.get("TRITON_INTERPRET") == "1"  # this process imported rmsnorm_course first (conftest)
    assert rmsnorm.interpreter_active()
    assert device.is_interpreted(rmsnorm.rmsnorm_fast_forward_kernel)
    assert rmsnorm.rmsnorm_fast_forward_kernel.fn.__module__ == "rmsnorm.forward"  # the same code, not a CPU copy
    assert "interpreter" in rmsnorm.describe_backend()
    done = _python("""
        import rmsnorm_course, rmsnorm.article, torch
        y, _ = rmsnorm.article.forward_op(torch.ones(1, 257), torch.ones(257))
        print(rmsnorm.interpreter_active(), round(y[0, 0].item(), 7))
        """)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["True", "0.9999995"]


@no_cuda
@pytest.mark.parametrize("first", ["import triton", "import os; os.environ['TRITON_INTERPRET'] = '0'"])
def test_too_late_or_refused_the_course_leaves_it_off_and_the_launch_names_the_fix(first):
    done = _python(f"""
        {first}
        import rmsnorm_course, rmsnorm, torch
        assert not rmsnorm.interpreter_active()
        try:
            rmsnorm.rmsnorm(torch.ones(2, 4), torch.ones(4))
        except rmsnorm.InterpreterUnavailableError as error:
            print("refused", "TRITON_INTERPRET=1" in str(error))
        """)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["refused", "True"]


@no_cuda
def test_the_variable_set_after_triton_but_before_rmsnorm_is_named_at_the_first_launch():
    # A model engineer's order: build a Hugging Face model (it imports triton), then set the variable and
    # import rmsnorm. The package's kernels are then interpreted and Triton's tl.sum is not.
    done = _python("""
        import os, triton, torch
        os.environ["TRITON_INTERPRET"] = "1"
        import rmsnorm, rmsnorm.article
        print(rmsnorm.interpreter_active(), rmsnorm.device.interpreter_split(), "nowhere" in rmsnorm.describe_backend())
        for call in (lambda: rmsnorm.rmsnorm(torch.ones(2, 4), torch.ones(4)),
                     lambda: rmsnorm.FastRMSNorm(4)(torch.ones(2, 4)),
                     lambda: rmsnorm.article.forward_op(torch.ones(2, 4), torch.ones(4))):
            try:
                call()
            except rmsnorm.InterpreterUnavailableError as error:
                print("refused", "imported before" in str(error) and "at the very top" in str(error))
        """)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["True", "True", "True"] + ["refused", "True"] * 3


@no_cuda
def test_variable_set_before_python_allows_importing_triton_first():
    done = _python("""
        import triton
        import rmsnorm.article, torch
        print(rmsnorm.article.reduce_gamma_gradient(torch.ones(3, 2), torch.float32).tolist())
        """, TRITON_INTERPRET="1")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[3.0, 3.0]"


def test_the_interpreter_runs_a_loop_over_a_scalar_in_a_fresh_process():
    # On every device: Triton 3.6's interpreter with NumPy 2.4 failed here ("only 0-dimensional arrays can be
    # converted to Python scalars"): range(0, M, BLOCK) turns the scalar M into an int. The course mends it.
    code = """
        import rmsnorm_course, rmsnorm.article, torch, triton, triton.language as tl
        @triton.jit
        def count(out_ptr, M, BLOCK: tl.constexpr):
            total = 0
            for start in range(0, M, BLOCK):
                total += 1
            tl.store(out_ptr, total)
        out = torch.zeros(1, dtype=torch.int32)
        count[(1,)](out, 10, BLOCK=4)
        print(out.item(), rmsnorm.article.reduce_gamma_gradient(torch.ones(5, 2), torch.float32).tolist())
        """
    done = _python(code, TRITON_INTERPRET="1", CUDA_VISIBLE_DEVICES="")
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["3", "[5.0,", "5.0]"]


def test_the_mend_replaces_the_old_index_line_only(monkeypatch):
    import numpy as np
    from triton.runtime import interpreter

    class Scope:
        def set_attr(self, obj, name, value):
            setattr(obj, name, value)

    def _patch_lang_tensor(tensor, scope):  # Triton 3.6's line
        scope.set_attr(tensor, "__index__", lambda self: int(self.handle.data))

    class Handle:
        data = np.array([7], dtype=np.int32)  # a scalar, as the interpreter holds it

    class Tensor:
        handle = Handle()

    monkeypatch.setattr(interpreter, "_patch_lang_tensor", _patch_lang_tensor)
    try:
        int(np.zeros(1))
        numpy_refuses = False
    except TypeError:
        numpy_refuses = True
    assert backend.mend_interpreter_index() is numpy_refuses
    interpreter._patch_lang_tensor(Tensor, Scope())
    if numpy_refuses:
        assert operator.index(Tensor()) == 7
    assert backend.mend_interpreter_index() is False  # once
    monkeypatch.setattr(interpreter, "_patch_lang_tensor", lambda tensor, scope: scope.set_attr(
        tensor, "__index__", lambda self: int(self.handle.data.squeeze())))  # Triton 3.7's line: left alone
    assert backend.mend_interpreter_index() is False

"""The CPU path: the interpreter is switched on at import, and refused loudly when it can't be."""

import operator
import os
import subprocess
import sys

import pytest
import torch

import rmsnorm
from rmsnorm import device

no_cuda = pytest.mark.skipif(torch.cuda.is_available(), reason="the interpreter path is for machines without CUDA")


@no_cuda
def test_import_switches_the_interpreter_on_and_kernels_are_the_package_source():
    assert os.environ.get("TRITON_INTERPRET") == "1"
    assert rmsnorm.interpreter_active()
    for kernel in (rmsnorm.rmsnorm_forward_kernel, rmsnorm.rmsnorm_dx_kernel, rmsnorm.rmsnorm_dgamma_kernel):
        assert device.is_interpreted(kernel)
        assert kernel.fn.__module__.startswith("rmsnorm.")  # the same code, not a CPU copy
    assert "interpreter" in rmsnorm.describe_backend()


def _python(code, **env):
    full_env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"} | env
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=full_env, timeout=120)


@no_cuda
def test_explicit_interpret_off_is_refused_with_the_fix():
    done = _python("import rmsnorm", TRITON_INTERPRET="0")
    assert done.returncode != 0
    assert "InterpreterUnavailableError" in done.stderr and "TRITON_INTERPRET=1" in done.stderr


@no_cuda
def test_triton_imported_before_rmsnorm_is_refused_with_the_fix():
    done = _python("import triton\nimport rmsnorm")
    assert done.returncode != 0
    assert "import rmsnorm before triton" in done.stderr and "TRITON_INTERPRET=1" in done.stderr


@no_cuda
def test_variable_set_before_python_allows_importing_triton_first():
    done = _python(
        "import triton\nimport rmsnorm, torch\n"
        "print(rmsnorm.reduce_gamma_gradient(torch.ones(3, 2), torch.float32).tolist())",
        TRITON_INTERPRET="1",
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[3.0, 3.0]"


@no_cuda
def test_fresh_process_without_the_variable_runs_the_canary():
    done = _python(
        "import rmsnorm, torch\ny, _ = rmsnorm.forward_op(torch.ones(1, 257), torch.ones(257))\n"
        "print(round(y[0, 0].item(), 7))"
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "0.9999995"


def test_the_interpreter_runs_a_loop_over_a_scalar_in_a_fresh_process():
    # On every device: Triton 3.6's interpreter with NumPy 2.4 failed here ("only 0-dimensional arrays can be
    # converted to Python scalars"): range(0, M, BLOCK) turns the scalar M into an int. rmsnorm.device mends it.
    code = (
        "import rmsnorm, torch, triton, triton.language as tl\n"
        "@triton.jit\n"
        "def count(out_ptr, M, BLOCK: tl.constexpr):\n"
        "    total = 0\n"
        "    for start in range(0, M, BLOCK):\n"
        "        total += 1\n"
        "    tl.store(out_ptr, total)\n"
        "out = torch.zeros(1, dtype=torch.int32)\n"
        "count[(1,)](out, 10, BLOCK=4)\n"
        "print(out.item(), rmsnorm.reduce_gamma_gradient(torch.ones(5, 2), torch.float32).tolist())\n"
    )
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
    assert device.mend_interpreter_index() is numpy_refuses
    interpreter._patch_lang_tensor(Tensor, Scope())
    if numpy_refuses:
        assert operator.index(Tensor()) == 7
    assert device.mend_interpreter_index() is False  # once
    monkeypatch.setattr(interpreter, "_patch_lang_tensor", lambda tensor, scope: scope.set_attr(
        tensor, "__index__", lambda self: int(self.handle.data.squeeze())))  # Triton 3.7's line: left alone
    assert device.mend_interpreter_index() is False

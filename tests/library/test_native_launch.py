"""The native launch (rmsnorm/native_launch.py, csrc/triton_launch.cpp): packing, plans, the fallback, the paths.

On the CPU: the C++ extension is compiled here (it opens no driver until asked), its packing is
checked byte for byte against Python's struct module, and its launch against a stand-in libcuda.so.1
that records the launch configuration it is handed; the launcher's choice of path is checked with
a stand-in compiled kernel and a stand-in extension (what each path is handed); a build that fails
falls back with one warning; :func:`rmsnorm.launch_path` names each path. On a GPU: the native path
is the one taken, and it gives the numbers Triton's launcher and binder give, on the current stream,
under a CUDA graph and torch.compile, past 48 KiB of shared memory, with scratch, and on a second GPU.
"""

import os
import struct
import subprocess
import sys
import warnings
from pathlib import Path
from types import SimpleNamespace
from unittest import mock

import pytest
import torch
import triton
import triton.language as tl

import rmsnorm
from rmsnorm import launch as launch_module
from rmsnorm import native_launch
from rmsnorm.launch import CachedKernel, DirectLauncher, launch_path
from rmsnorm.reference import rmsnorm_reference
from rmsnorm.testing import assert_close, make_inputs

GPU = torch.cuda.is_available() and not rmsnorm.device.interpreter_active()
gpu_only = pytest.mark.skipif(not GPU, reason="needs a CUDA GPU: the native launch calls compiled kernels")
two_gpus = pytest.mark.skipif(
    not (GPU and torch.cuda.device_count() >= 2),
    reason="needs two CUDA GPUs (only one-GPU machines were lent when this was written)",
)
toolchain = pytest.mark.skipif(
    native_launch.missing_toolchain() is not None,
    reason=f"the extension cannot be built here: {native_launch.missing_toolchain()}",
)


@pytest.fixture(autouse=True)
def native_launch_on(monkeypatch):
    """These tests are about the native launch: on for each, as a process starts without RMSNORM_NATIVE_LAUNCH=0."""
    monkeypatch.setattr(native_launch.state, "enabled", True)


@pytest.fixture
def fresh_state(monkeypatch):
    """The extension not yet tried, the native launch on: as a new process starts (the contract's quick check put
    back afterwards, as loading an extension replaces it)."""
    for name, value in (("module", None), ("failure", None), ("tried", False), ("enabled", True)):
        monkeypatch.setattr(native_launch.state, name, value)
    monkeypatch.setattr(rmsnorm.contract, "quick_check", rmsnorm.contract.quick_check)
    return native_launch.state


# ----------------------------------------------------------------------------- packing (the C++ itself)


@pytest.fixture(scope="module")
def compiled_extension():
    return native_launch.compile_extension()


def _bf16_bits(value: float) -> bytes:
    """bfloat16 as Triton's launcher packs it: float32's upper half (truncated, not rounded)."""
    return struct.pack("<I", struct.unpack("<I", struct.pack("<f", value))[0] >> 16)[:2]


@toolchain
def test_the_arguments_are_packed_as_the_driver_reads_them(compiled_extension):
    x = torch.zeros(5)
    codes = b"PxPPibqfEedhHBIQ"
    args = (x, "constexpr", None, 4096, -7, True, -(2**40), 1e-6, 1 / 3, 0.5, 2.0, -3, 65535, 255, 2**32 - 1,
            2**64 - 1)
    expected = (struct.pack("<QQQ", x.data_ptr(), 0, 4096) + struct.pack("<ibq", -7, 1, -(2**40))
                + struct.pack("<f", 1e-6) + _bf16_bits(1 / 3) + struct.pack("<edhHBIQ", 0.5, 2.0, -3, 65535, 255,
                                                                           2**32 - 1, 2**64 - 1)
                + struct.pack("<QQ", 0, 0))  # then global and profile scratch, which Triton 3.6 and 3.7 append
    assert compiled_extension.pack(codes, args, 0, None) == expected
    scratch = torch.zeros(3)
    assert compiled_extension.pack(b"i", (1,), scratch, 77)[-16:] == struct.pack("<QQ", scratch.data_ptr(), 77)


@toolchain
@pytest.mark.parametrize("codes, args, error, match", [
    (b"i", (2**31,), OverflowError, "does not fit"),
    (b"b", (128,), OverflowError, "does not fit"),
    (b"I", (-1,), OverflowError, "does not fit"),
    (b"i", (1.5,), TypeError, "integer"),
    (b"f", ("x",), TypeError, "real number"),
    (b"P", (object(),), AttributeError, "data_ptr"),
    (b"ii", (1,), TypeError, "takes 2 arguments, 1 were given"),
    (b"z", (1,), ValueError, "unknown argument code"),
    (b"i" * 63, (1,) * 63, ValueError, "more kernel arguments"),
])
def test_an_argument_it_cannot_pack_raises_before_any_launch(compiled_extension, codes, args, error, match):
    with pytest.raises(error, match=match):
        compiled_extension.pack(codes, args, 0, 0)


#: A stand-in libcuda.so.1: records what cuLaunchKernelEx and cuFuncSetAttribute were handed, launches nothing.
FAKE_DRIVER = r"""
#include <string.h>
#include "cuda.h"
long long rec[64];           /* grid xyz, block xyz, shared, stream, attributes, function, launches, then attrs */
unsigned long long params[16];
int params_read = 0, set_calls = 0, set_attribute = -1, set_value = -1;
CUresult cuLaunchKernelEx(const CUlaunchConfig *c, CUfunction f, void **p, void **extra) {
  if (f == (CUfunction)0xBAD) return CUDA_ERROR_INVALID_HANDLE;
  long long v[10] = {c->gridDimX, c->gridDimY, c->gridDimZ, c->blockDimX, c->blockDimY, c->blockDimZ,
                     c->sharedMemBytes, (long long)c->hStream, c->numAttrs, (long long)f};
  memcpy(rec, v, sizeof v);
  rec[10] += 1;
  for (unsigned i = 0; i < c->numAttrs && i < 8; ++i) {
    unsigned u[3];
    memcpy(u, &c->attrs[i].value, sizeof u);
    rec[16 + 4 * i] = c->attrs[i].id; rec[17 + 4 * i] = u[0]; rec[18 + 4 * i] = u[1]; rec[19 + 4 * i] = u[2];
  }
  for (int i = 0; i < params_read; ++i) memcpy(&params[i], p[i], 8);
  return CUDA_SUCCESS;
}
CUresult cuGetErrorString(CUresult e, const char **s) { *s = "invalid resource handle (fake)"; return CUDA_SUCCESS; }
CUresult cuFuncGetAttribute(int *v, CUfunction_attribute a, CUfunction f) { *v = 1000; return CUDA_SUCCESS; }
CUresult cuFuncSetAttribute(CUfunction f, CUfunction_attribute a, int v) {
  set_calls += 1; set_attribute = a; set_value = v; return CUDA_SUCCESS;
}
"""

#: What runs against the stand-in driver, in a child process (dlopen reads LD_LIBRARY_PATH at its start).
FAKE_DRIVER_CHILD = r"""
import ctypes, json, struct
import torch
from rmsnorm import native_launch
module = native_launch.build()  # compiles (cached) and opens libcuda.so.1: the stand-in
lib = ctypes.CDLL("libcuda.so.1")
rec, params = (ctypes.c_longlong * 64).in_dll(lib, "rec"), (ctypes.c_ulonglong * 16).in_dll(lib, "params")
ctypes.c_int.in_dll(lib, "params_read").value = 5
x = torch.zeros(4)
out = {"x": x.data_ptr()}
module.launch((b"Pixf", 0x1234, 8, 2, 70000, True, True), (3, 2), 77, (x, 5, "constexpr", 0.5))
out["clustered"] = (list(rec[:11]), [list(rec[16 + 4 * i:20 + 4 * i]) for i in range(4)], list(params[:5]))
ctypes.c_int.in_dll(lib, "params_read").value = 0  # the launches below pass fewer than 5: none read
module.launch((b"i", 0x99, 4, 1, 0, False, False), (7,), 0, (1,))
out["plain"] = list(rec[:11])
module.launch((b"i", 0x99, 4, 1, 0, False, False), (0,), 0, (1,))
out["empty_grid_launches"] = rec[10]
module.launch((b"i", 0x99, 4, 16, 0, False, False), (1,), 0, (1,))
out["sixteen"] = [ctypes.c_int.in_dll(lib, n).value for n in ("set_calls", "set_attribute", "set_value")]
module.allow_dynamic_shared(0x99, 900)  # 1000 allowed already: not lowered
module.allow_dynamic_shared(0x99, 100000)
out["shared"] = [ctypes.c_int.in_dll(lib, n).value for n in ("set_calls", "set_attribute", "set_value")]
try:
    module.launch((b"i", 0xBAD, 4, 1, 0, False, False), (1,), 0, (1,))
except RuntimeError as error:
    out["error"] = str(error)
print(json.dumps(out))
"""


@toolchain
def test_the_launch_hands_the_driver_triton_s_configuration(tmp_path, compiled_extension):
    """The launch against a stand-in libcuda.so.1 (no GPU needed): grid × num_ctas, 32 · num_warps threads, the
    shared memory, the stream, PDL, cooperative and a (num_ctas, 1, 1) cluster spread over SMs, as Triton's
    _launch sets them; the parameters in order, then the two scratch pointers; errors named."""
    import json
    import os
    import subprocess
    import sys

    (tmp_path / "fake.c").write_text(FAKE_DRIVER)
    subprocess.run(["cc", "-shared", "-fPIC", f"-I{native_launch.include_dir()}", str(tmp_path / "fake.c"), "-o",
                    str(tmp_path / "libcuda.so.1")], check=True)
    env = dict(os.environ, LD_LIBRARY_PATH=f"{tmp_path}{os.pathsep}{os.environ.get('LD_LIBRARY_PATH', '')}")
    done = subprocess.run([sys.executable, "-c", FAKE_DRIVER_CHILD], env=env, capture_output=True, text=True,
                          timeout=300, cwd=str(Path(__file__).resolve().parents[2]))
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout.strip().splitlines()[-1])
    config, attributes, params = out["clustered"]
    assert config == [6, 2, 1, 256, 1, 1, 70000, 77, 4, 0x1234, 1]  # grid x · num_ctas; 32 · 8 threads
    assert attributes == [[6, 1, 0, 0], [2, 1, 0, 0], [4, 2, 1, 1], [5, 1, 0, 0]]  # PDL, cooperative, cluster, SPREAD
    assert params == [out["x"], 5, struct.unpack("<I", struct.pack("<f", 0.5))[0], 0, 0]
    assert out["plain"] == [7, 1, 1, 128, 1, 1, 0, 0, 0, 0x99, 2]  # no attribute: a plain launch
    assert out["empty_grid_launches"] == 2  # an empty grid launches nothing
    assert out["sixteen"] == [1, 14, 1]  # a cluster of 16 asks for non-portable cluster sizes first
    assert out["shared"] == [2, 8, 100000]  # MAX_DYNAMIC_SHARED_SIZE_BYTES raised, never lowered
    assert out["error"] == ("rmsnorm native launch: cuLaunchKernelEx failed: invalid resource handle (fake) "
                            "(CUresult 400)")


# ----------------------------------------------------------------------------- plans and paths (stand-ins)


def test_the_codes_follow_tritons_signature():
    signature = {"x_ptr": "*bf16", "stride": "i32", "M": "i64", "eps": "fp32", "flag": "i1", "w_ptr": "constexpr",
                 "BLOCK": "constexpr", "h": "fp16", "u": "u64"}
    assert native_launch.arg_codes(signature) == b"PiqfbxxeQ"
    assert native_launch.arg_codes({"pair": ("*fp32", "i32")}) is None  # a tuple: Triton's launcher flattens it
    assert native_launch.arg_codes({"desc": "tensordesc<fp16[64, 64]>"}) is None


def _compiled(shared=0, signature=None, scratch=0):
    """A stand-in CompiledKernel: what the launcher reads of Triton's."""
    calls = []
    metadata = SimpleNamespace(num_warps=4, num_ctas=1, shared=shared, launch_pdl=False,
                               launch_cooperative_grid=False, global_scratch_size=scratch, global_scratch_align=1,
                               profile_scratch_size=0, profile_scratch_align=1)
    return SimpleNamespace(src=SimpleNamespace(signature=signature or {"x_ptr": "*fp32", "n": "i32", "B": "constexpr"}),
                           metadata=metadata, function=0xF00, packed_metadata=(4, 1, shared),
                           run=lambda *a: calls.append(a), calls=calls)


class _StandInKernel:
    """``kernel[grid](*args)`` records the binder's launches and returns one compiled stand-in."""

    def __init__(self, compiled):
        self.compiled, self.binder_calls = compiled, []

    def __getitem__(self, grid):
        def launch(*args, **options):
            self.binder_calls.append((grid, args))
            return self.compiled
        return launch


class _StandInExtension:
    def __init__(self):
        self.launches, self.shared = [], []

    def launch(self, *args):
        self.launches.append(args)

    def allow_dynamic_shared(self, function, nbytes):
        self.shared.append((function, nbytes))

    def configure_quick_check(self, max_n, cpu):
        pass

    plainly_valid = staticmethod(rmsnorm.contract._plainly_valid)


@pytest.fixture
def on_a_gpu(monkeypatch, fresh_state):
    """The launcher as on a GPU: usable, device 0 current, stream 1234, no hooks; the extension a stand-in."""
    extension = _StandInExtension()
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(torch._C, "_cuda_getCurrentRawStream", lambda index: 1234, raising=False)
    monkeypatch.setattr(launch_module, "_launch_hooks_set", lambda: False)
    monkeypatch.setattr(native_launch, "build", lambda: extension)
    return extension


def _launcher(compiled):
    launcher = DirectLauncher(_StandInKernel(compiled))
    launcher.usable = True
    return launcher


def test_a_hit_goes_native_with_the_plan_the_stream_and_the_arguments(on_a_gpu):
    compiled = _compiled(shared=96 * 1024)
    launcher = _launcher(compiled)
    x = torch.zeros(4)
    launcher((0, "k"), (3,), x, 7, 64, num_warps=4)  # a miss: Triton's binder compiles and launches
    assert launcher.kernel.binder_calls == [((3,), (x, 7, 64))] and on_a_gpu.launches == []
    assert isinstance(launcher.cache[(0, "k")], CachedKernel) and launcher.cache[(0, "k")].kernel is compiled
    launcher((0, "k"), (5, 2), x, 8, 64, num_warps=4)
    assert on_a_gpu.launches == [((b"Pix", 0xF00, 4, 1, 96 * 1024, False, False), (5, 2), 1234, (x, 8, 64))]
    assert on_a_gpu.shared == [(0xF00, 96 * 1024)]  # past 48 KiB the driver is asked, once per kernel
    launcher((0, "k"), (5,), x, 8, 64, num_warps=4)
    assert len(on_a_gpu.launches) == 2 and on_a_gpu.shared == [(0xF00, 96 * 1024)] and compiled.calls == []
    assert len(launcher.kernel.binder_calls) == 1


@pytest.mark.parametrize("value, on", [(None, True), ("", True), ("1", True), (" 1 ", True), ("TRUE", True),
                                       ("yes", True), ("On", True), ("0", False), ("false", False), ("No", False),
                                       ("off", False)])
def test_a_process_starts_with_the_native_launch_on_unless_the_environment_says_off(value, on):
    environ = {} if value is None else {"RMSNORM_NATIVE_LAUNCH": value}
    assert native_launch.enabled_from_environment(environ) is on


@pytest.mark.parametrize("value", ["2", "enable", "nope", "0x1"])
def test_any_other_value_of_the_switch_is_refused_by_name(value):
    with pytest.raises(ValueError, match=f"RMSNORM_NATIVE_LAUNCH must be 0 .* got '{value}'"):
        native_launch.enabled_from_environment({"RMSNORM_NATIVE_LAUNCH": value})


@pytest.mark.parametrize("value, says", [(None, "True"), ("0", "False"),
                                         ("sure", "ValueError: RMSNORM_NATIVE_LAUNCH must")])
def test_a_new_process_reads_the_switch_at_import(value, says):
    env = {key: v for key, v in os.environ.items() if key != "RMSNORM_NATIVE_LAUNCH"}
    if value is not None:
        env["RMSNORM_NATIVE_LAUNCH"] = value
    done = subprocess.run([sys.executable, "-c", "import rmsnorm; print(rmsnorm.native_launch.state.enabled)"],
                          env=env, capture_output=True, text=True, timeout=300,
                          cwd=Path(rmsnorm.__file__).resolve().parent.parent)
    assert says in (done.stdout + done.stderr).splitlines()[-1], done.stderr[-2000:]
    assert (done.returncode == 0) is (value != "sure")


def test_switched_off_or_unbuildable_it_runs_tritons_launcher(on_a_gpu, monkeypatch):
    compiled = _compiled()
    launcher = _launcher(compiled)
    x = torch.zeros(4)
    launcher((0, "k"), (3,), x, 7, 64)
    native_launch.set_native_launch(False)
    launcher((0, "k"), (3,), x, 7, 64)
    assert compiled.calls == [(3, 1, 1, 1234, 0xF00, (4, 1, 0), None, None, None, x, 7, 64)]
    assert on_a_gpu.launches == [] and not native_launch.state.tried  # off: never built
    native_launch.set_native_launch(True)
    launcher((0, "k"), (3,), x, 7, 64)  # on again: kernels already cached go native too
    assert len(on_a_gpu.launches) == 1
    with pytest.raises(TypeError):
        native_launch.set_native_launch("no")


def test_a_signature_it_cannot_pack_runs_tritons_launcher(on_a_gpu):
    compiled = _compiled(signature={"pair": ("*fp32", "i32")})
    launcher = _launcher(compiled)
    for _ in range(3):
        launcher((0, "k"), (1,), (1, 2))
    assert len(compiled.calls) == 2 and on_a_gpu.launches == [] and launcher.cache[(0, "k")].plan is False


def test_scratch_is_allocated_per_launch_and_passed_after_the_arguments(on_a_gpu):
    from triton.runtime import _allocation

    sizes = []
    token = _allocation._allocator.set(lambda size, align, stream: sizes.append(size) or 99)  # a ContextVar
    try:
        launcher = _launcher(_compiled(scratch=256))
        launcher((0, "k"), (3, 2), 5, 7, 64)
        launcher((0, "k"), (3, 2), 5, 7, 64)
    finally:
        _allocation._allocator.reset(token)
    assert sizes == [6 * 256]  # programs × bytes per program, as Triton's CudaLauncher sizes it
    assert on_a_gpu.launches[0][-2:] == (99, None)


def test_a_build_that_fails_warns_once_and_falls_back(monkeypatch, fresh_state):
    def no_compiler():
        raise RuntimeError("Ninja is required to load C++ extensions")

    monkeypatch.setattr(native_launch, "build", no_compiler)
    monkeypatch.setattr(native_launch, "compile_extension", no_compiler)
    with pytest.warns(RuntimeWarning, match="could not be built or loaded .*Ninja is required.*Triton's own launcher"):
        assert native_launch.plan_for(_compiled()) is False
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert native_launch.plan_for(_compiled()) is False  # said once per process
    assert native_launch.state.failure == "RuntimeError: Ninja is required to load C++ extensions"


def test_a_machine_without_a_compiler_is_told_which_tool_is_missing(monkeypatch, fresh_state, tmp_path):
    from torch.utils import cpp_extension

    def build_fails(**kwargs):
        raise RuntimeError("Error building extension 'rmsnorm_native': c++: not found")

    def tool(name):  # an executable stand-in on PATH: whether this machine has the real one does not matter
        (tmp_path / name).write_text("#!/bin/sh\n")
        (tmp_path / name).chmod(0o755)

    tool("ninja")
    monkeypatch.setenv("PATH", os.pathsep.join((str(tmp_path), os.environ.get("PATH", ""))))
    monkeypatch.setenv("CXX", str(tmp_path / "no-such-c++"))
    assert native_launch.missing_toolchain() == f"no C++ compiler ({tmp_path / 'no-such-c++'}) on PATH"
    monkeypatch.setattr(cpp_extension, "load", build_fails)
    with pytest.raises(FileNotFoundError, match="no C\\+\\+ compiler .*no-such-c\\+\\+") as raised:
        native_launch.compile_extension()
    assert "Error building extension" in str(raised.value.__cause__)  # the build's own error, kept as the cause
    with pytest.warns(RuntimeWarning, match="could not be built or loaded .FileNotFoundError: no C\\+\\+ compiler"):
        assert native_launch.extension() is None
    cached = object()  # torch's extension cache holds the build: ninja loads it without calling the compiler
    monkeypatch.setattr(cpp_extension, "load", lambda **kwargs: cached)
    assert native_launch.compile_extension() is cached
    monkeypatch.delenv("CXX")
    (tmp_path / "ninja").unlink()
    monkeypatch.setenv("PATH", str(tmp_path))  # neither c++ nor ninja
    monkeypatch.setattr(native_launch.sys, "executable", str(tmp_path / "python"))
    assert native_launch.missing_toolchain() == "no C++ compiler (c++) on PATH"
    tool("c++")
    assert native_launch.missing_toolchain().startswith("no ninja")
    with pytest.raises(FileNotFoundError, match="no ninja"):  # which even a cached load runs: asked first
        native_launch.compile_extension()


def test_the_ninja_pip_installed_beside_python_is_put_on_path_for_the_build_only(monkeypatch, tmp_path):
    """pip installs ninja into the interpreter's bin folder, which an activated-less venv leaves off PATH:
    the build runs with that folder first on PATH, and PATH is as it was afterwards, the build failed or not."""
    from torch.utils import cpp_extension

    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "ninja").write_text("#!/bin/sh\n")
    (tmp_path / "bin" / "ninja").chmod(0o755)
    monkeypatch.setattr(native_launch.sys, "executable", str(tmp_path / "bin" / "python"))
    monkeypatch.setenv("PATH", str(tmp_path / "elsewhere"))
    seen = []

    def load(**kwargs):
        seen.append(os.environ["PATH"])
        if len(seen) == 2:
            raise RuntimeError("the build failed")
        return "built"

    monkeypatch.setattr(cpp_extension, "load", load)
    assert native_launch.compile_extension() == "built"
    with pytest.raises((RuntimeError, FileNotFoundError)):
        native_launch.compile_extension()
    assert seen == [os.pathsep.join((str(tmp_path / "bin"), str(tmp_path / "elsewhere")))] * 2
    assert os.environ["PATH"] == str(tmp_path / "elsewhere")


def test_launch_path_names_each_path(monkeypatch, fresh_state):
    monkeypatch.setattr(launch_module, "interpreter_active", lambda: True)
    assert launch_path() == "interpreter"
    monkeypatch.setattr(launch_module, "interpreter_active", lambda: False)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert launch_path() == "unavailable"
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(launch_module, "triton_is_tested", lambda version=triton.__version__: False)
    assert launch_path() == "binder"
    monkeypatch.setattr(launch_module, "triton_is_tested", lambda version=triton.__version__: True)
    monkeypatch.setattr(native_launch, "build", _StandInExtension)
    assert launch_path() == "native"
    native_launch.set_native_launch(False)
    assert launch_path() == "triton-launcher"
    native_launch.set_native_launch(True)
    monkeypatch.setattr(native_launch.state, "module", None)
    monkeypatch.setattr(native_launch.state, "tried", True)  # a build that failed
    assert launch_path() == "triton-launcher"
    assert rmsnorm.launch_path is launch_path


# ----------------------------------------------------------------------------- the forward's own path (C++)

#: The forward kernel's codes for a plain norm with a weight (csrc/fast_path.cpp): nine arguments, then constexprs.
FORWARD_CODES = b"PiPPiPiif" + b"x" * (len(rmsnorm.forward.rmsnorm_fast_forward_kernel.arg_names) - 9)


def _forward_plan(codes=FORWARD_CODES):
    return (codes, 0xF00, 4, 1, 0, False, False)


def _rows(M=64, N=4096, dtype=torch.float16):
    x, w = torch.randn(M, N, dtype=dtype), torch.randn(N, dtype=dtype)
    return x, w, torch.empty(M, N, dtype=dtype), torch.empty(M)


@pytest.fixture
def forward_path(compiled_extension):
    """The extension with no plan kept, before and after."""
    compiled_extension.forget_plans()
    yield compiled_extension
    compiled_extension.forget_plans()


@toolchain
def test_the_forward_path_packs_the_nine_arguments_of_a_kept_plan(forward_path):
    x, w, y, rstd = _rows()
    assert forward_path.forward_params(x, w, 1e-6, 0.0, y, rstd) is None  # nothing kept: the Python path runs
    assert forward_path.remember_forward(x, w, 0.0, y, rstd, _forward_plan(), 4, 0, object()) is True
    programs, params = forward_path.forward_params(x, w, 1e-6, 0.0, y, rstd)
    assert programs == 16  # one program per block of 4 rows
    assert params == struct.pack("<QiQQiQiifQQ", x.data_ptr(), 4096, w.data_ptr(), y.data_ptr(), 4096,
                                 rstd.data_ptr(), 64, 4096, 1e-6, 0, 0)  # then the two scratch pointers
    # the same kind of launch on other tensors: the plan's codes, their values
    x2, w2, y2, rstd2 = _rows(M=48)
    assert forward_path.forward_params(x2, w2, 2e-5, 0.0, y2, rstd2)[1][:8] == struct.pack("<Q", x2.data_ptr())
    assert forward_path.plans()[0] == 1


@toolchain
def test_a_kernel_whose_finaliser_reaches_the_tables_is_dropped_after_the_update(forward_path):
    """Replacing a kept plan drops the old kernel's reference; a finaliser it runs may reach the tables (here it
    forgets every plan, which frees the entry being updated): the references are dropped after the update."""
    x, w, y, rstd = _rows()
    seen = []

    class Kernel:
        def __del__(self):
            seen.append(forward_path.plans()[0])
            forward_path.forget_plans()

    assert forward_path.remember_forward(x, w, 0.0, y, rstd, _forward_plan(), 4, 0, Kernel()) is True
    assert forward_path.remember_forward(x, w, 0.0, y, rstd, _forward_plan(), 4, 0, object()) is True
    assert seen == [1]  # the finaliser ran once the new plan was in place, not halfway through it
    assert forward_path.plans()[0] == 0 and forward_path.forward_params(x, w, 1e-6, 0.0, y, rstd) is None


@toolchain
@pytest.mark.parametrize("other", ["offset", "no weight", "N", "row stride", "x dtype", "weight dtype", "M of 1",
                                   "M not a multiple of 16", "x misaligned", "weight misaligned"])
def test_the_forward_path_keys_on_all_that_triton_specialises(forward_path, other):
    """A launch that differs from the kept one in anything the kernel or its configuration depends on misses.

    (Whether the rows are one dense run, which chooses a flat rule, follows from the row stride, N and M = 1.)
    """
    x, w, y, rstd = _rows(M=64, N=4096)
    forward_path.remember_forward(x, w, 0.0, y, rstd, _forward_plan(), 4, 0, object())
    xo, wo = {
        "offset": (x, w), "no weight": (x, None), "N": (x[:, :4095].contiguous(), w[:4095]),
        "row stride": (torch.randn(64, 4104, dtype=torch.float16)[:, :4096], w), "x dtype": (x.bfloat16(), w),
        "weight dtype": (x, w.float()), "M of 1": (x[:1], w), "M not a multiple of 16": (x[:63], w),
        "x misaligned": (torch.randn(64 * 4096 + 1, dtype=torch.float16)[1:].view(64, 4096), w),
        "weight misaligned": (x, torch.randn(4096 + 1, dtype=torch.float16)[1:]),
    }[other]
    offset = 1.0 if other == "offset" else 0.0
    assert forward_path.forward_params(xo, wo, 1e-6, offset, torch.empty_like(xo), torch.empty(xo.shape[0])) is None
    assert forward_path.forward_params(x, w, 1e-6, 0.0, y, rstd) is not None


@toolchain
def test_the_forward_path_keeps_only_what_it_can_launch(forward_path):
    x, w, y, rstd = _rows()
    plan = _forward_plan()
    unaligned = torch.empty(64 * 4096 + 1, dtype=torch.float16)[1:].view(64, 4096)
    padded = torch.empty(64, 4104, dtype=torch.float16)[:, :4096]
    assert forward_path.remember_forward(x, w, 0.0, unaligned, rstd, plan, 4, 0, None) is False
    assert forward_path.remember_forward(x, w, 0.0, padded, rstd, plan, 4, 0, None) is False
    for codes in (FORWARD_CODES[:8], b"PiPPiPiie" + FORWARD_CODES[9:], FORWARD_CODES[:-1] + b"P",
                  b"iiPPiPiif" + FORWARD_CODES[9:]):  # too short, a half eps, a pointer among constexprs, x as int
        assert forward_path.remember_forward(x, w, 0.0, y, rstd, _forward_plan(codes), 4, 0, None) is False
    assert forward_path.plans()[0] == 0
    with pytest.raises(TypeError, match="plan is"):
        forward_path.remember_forward(x, w, 0.0, y, rstd, (b"P",), 4, 0, None)
    with pytest.raises(ValueError, match="block_m >= 1"):
        forward_path.remember_forward(x, w, 0.0, y, rstd, plan, 0, 0, None)


@toolchain
def test_the_forward_path_keeps_one_plan_per_persistent_and_a_grid_capped_at_the_sms(forward_path):
    """PERSISTENT is a constexpr: a grid capped below the row blocks needs its own compiled kernel."""
    small, large = _rows(M=32, N=256), _rows(M=4096, N=256)
    forward_path.remember_forward(*small[:2], 0.0, *small[2:], _forward_plan(), 16, 132, None)
    assert forward_path.forward_params(small[0], small[1], 1e-6, 0.0, *small[2:])[0] == 2
    assert forward_path.forward_params(large[0], large[1], 1e-6, 0.0, *large[2:]) is None  # 256 blocks > 132
    forward_path.remember_forward(*large[:2], 0.0, *large[2:], _forward_plan(), 16, 132, None)
    assert forward_path.forward_params(large[0], large[1], 1e-6, 0.0, *large[2:])[0] == 132
    assert forward_path.plans()[0] == 2


@toolchain
def test_the_forward_path_hands_back_an_integer_that_outgrows_its_code(forward_path):
    """Never truncated: an M the kept kernel's code cannot hold (here int8, for the test) goes to the Python path."""
    small, large = _rows(M=64, N=8), _rows(M=160, N=8)  # the same key: M a multiple of 16 in both
    forward_path.remember_forward(*small[:2], 0.0, *small[2:], _forward_plan(b"PiPPiPbif" + FORWARD_CODES[9:]), 4,
                                  0, None)
    assert forward_path.forward_params(small[0], small[1], 1e-6, 0.0, *small[2:]) is not None
    assert forward_path.forward_params(large[0], large[1], 1e-6, 0.0, *large[2:]) is None


@toolchain
def test_the_forward_path_turns_away_a_tensor_it_cannot_key_without_aborting(forward_path):
    """A sparse x (or weight): its strides and data_ptr() throw in C++; the call raises, the process lives."""
    x, w, y, rstd = _rows()
    forward_path.remember_forward(x, w, 0.0, y, rstd, _forward_plan(), 4, 0, None)
    for xs, ws in ((x.float().to_sparse(), w), (x, w.float().to_sparse())):
        with pytest.raises(TypeError, match="strided"):
            forward_path.forward_params(xs, ws, 1e-6, 0.0, y, rstd)
        assert forward_path.forward(xs, ws, 1e-6, 0.0, False) is None


def _specialisation(kernel, *args, **options):
    """The codes Triton's binder gives ``kernel`` for these arguments on a CUDA backend (sm_90), computed on the CPU."""
    compiler = pytest.importorskip("triton.backends.nvidia.compiler")
    from triton.backends.compiler import GPUTarget
    from triton.runtime.jit import create_function_from_signature

    backend = compiler.CUDABackend(GPUTarget("cuda", 90, 32))
    kernel = triton.runtime.jit.JITFunction(kernel.fn)  # the compiled kernel's binder, the interpreter on or off
    _, spec, _ = create_function_from_signature(kernel.signature, kernel.params, backend)(*args, **options)
    return native_launch.arg_codes(dict(enumerate(ty for ty, _ in spec)))


def _forward_launch(kind, M=64, N=4096, dtype=torch.float16, weight=True, bias=True, residual_dtype=None,
                    residual_stride=None):
    """One forward launch of ``kind`` ("plain", "add", "layernorm") as _run makes it: (tensors, extra, values,
    constexprs), extra being (residual, residual_out, mean, bias) as remember_forward and forward_params take it."""
    from rmsnorm.config import forward_config, grid_size, row_align_hint

    x = _padded(M, N, N + 8, dtype)  # rows not dense: the blocked kernel's rule, as for the fused add and LayerNorm
    w = torch.randn(N, dtype=dtype) if weight else None
    y, rstd = torch.empty(M, N, dtype=dtype), torch.empty(M)
    residual = residual_out = mean = b = None
    if kind == "add":
        residual = _padded(M, N, residual_stride or N, residual_dtype or dtype)
        residual_out = torch.empty(M, N, dtype=residual.dtype)
    if kind == "layernorm":
        mean = torch.empty(M)
        b = torch.randn(N, dtype=dtype) if bias else None
    config = forward_config(N, dtype, False)
    P = grid_size(config, -(-M // config.BLOCK_M), 132)
    strides = (x.stride(0), N) + ((residual.stride(0), N) if residual is not None else ())
    values = (x, x.stride(0), x if w is None else w, y, N, rstd, M, N, 1e-6)
    constexprs = (w is not None, 0.0, config.one_block(N), config.BLOCK_M, config.BLOCK_N, P < -(-M // config.BLOCK_M),
                  config.num_stages, row_align_hint(x.element_size(), N, *strides),
                  residual, None if residual is None else residual.stride(0), residual_out,
                  None if residual is None else N, residual is not None, config.static(N), mean, b, mean is not None,
                  b is not None)
    cap = 0 if config.programs_per_sm is None else 132 * config.programs_per_sm
    return (x, w, y, rstd), (residual, residual_out, mean, b), values + constexprs, (config.BLOCK_M, cap, P)


FORWARD_KINDS = {
    "plain": {"kind": "plain"}, "plain, no weight": {"kind": "plain", "weight": False},
    "fused add": {"kind": "add"}, "fused add, float32 residual": {"kind": "add", "residual_dtype": torch.float32},
    "fused add, residual rows in a wider buffer": {"kind": "add", "residual_stride": 4104},
    "fused add, one row": {"kind": "add", "M": 1}, "fused add, no weight": {"kind": "add", "weight": False},
    "layernorm": {"kind": "layernorm"}, "layernorm, no bias": {"kind": "layernorm", "bias": False},
    "layernorm, no weight": {"kind": "layernorm", "weight": False},
    "layernorm, 20000 columns": {"kind": "layernorm", "M": 7, "N": 20000, "dtype": torch.float32},
}


@toolchain
@pytest.mark.parametrize("case", FORWARD_KINDS)
def test_tritons_own_codes_for_each_kind_of_forward_are_kept_and_packed(forward_path, case):
    """The plain norm's, the fused add's and the LayerNorm's launches of the one forward kernel: the codes Triton's
    binder gives each are the ones its kind allows (kAllowedCodes, kAddCodes, kLayerNormCodes), kept, and packed as
    Triton would pack them."""
    from rmsnorm.forward import rmsnorm_fast_forward_kernel

    (x, w, y, rstd), extra, args, (block_m, cap, P) = _forward_launch(**FORWARD_KINDS[case])
    codes = _specialisation(rmsnorm_fast_forward_kernel, *args)
    assert forward_path.remember_forward(x, w, 0.0, y, rstd, _forward_plan(codes), block_m, cap, object(),
                                         *extra) is True
    kept = [(c, v.data_ptr() if isinstance(v, torch.Tensor) else v) for c, v in zip(codes.decode(), args) if c != "x"]
    expected = b"".join(struct.pack("<" + {"P": "Q", "i": "i", "q": "q", "f": "f"}[c], v) for c, v in kept)
    programs, params = forward_path.forward_params(x, w, 1e-6, 0.0, y, rstd, *extra)
    assert programs == P and params == expected + struct.pack("<QQ", 0, 0)
    if any(t is not None for t in extra):  # another kind of launch on the same x and weight: its own plan
        assert forward_path.forward_params(x, w, 1e-6, 0.0, y, rstd) is None
    else:
        assert forward_path.forward_params(x, w, 1e-6, 0.0, y, rstd, None, None, torch.empty(x.shape[0]), None) is None
    assert forward_path.plans()[0] == 1


@toolchain
@pytest.mark.parametrize("other", ["residual dtype", "residual row stride", "residual misaligned", "no bias",
                                   "bias dtype", "bias misaligned"])
def test_the_fused_add_s_and_the_layernorm_s_launches_key_on_their_own_tensors(forward_path, other):
    kind = "add" if other.startswith("residual") else "layernorm"
    (x, w, y, rstd), extra, args, (block_m, cap, _) = _forward_launch(kind)
    codes = _specialisation(rmsnorm.forward.rmsnorm_fast_forward_kernel, *args)
    assert forward_path.remember_forward(x, w, 0.0, y, rstd, _forward_plan(codes), block_m, cap, None, *extra)
    residual, residual_out, mean, bias = extra
    changed = {
        "residual dtype": lambda: (residual.float(), residual_out.float(), None, None),
        "residual row stride": lambda: (_padded(64, 4096, 4112), residual_out, None, None),
        "residual misaligned": lambda: (_padded(64, 4096, 4104, shift=1), residual_out, None, None),
        "no bias": lambda: (None, None, mean, None),
        "bias dtype": lambda: (None, None, mean, bias.float()),
        "bias misaligned": lambda: (None, None, mean, torch.randn(4097, dtype=torch.float16)[1:]),
    }[other]()
    assert forward_path.forward_params(x, w, 1e-6, 0.0, y, rstd, *changed) is None
    assert forward_path.forward_params(x, w, 1e-6, 0.0, y, rstd, *extra) is not None


@toolchain
def test_the_fused_add_s_and_the_layernorm_s_plans_are_kept_only_for_outputs_made_as_the_c_path_makes_them(
        forward_path):
    (x, w, y, rstd), (residual, residual_out, _, _), args, shape = _forward_launch("add")
    codes = _specialisation(rmsnorm.forward.rmsnorm_fast_forward_kernel, *args)
    plan = _forward_plan(codes)
    for wrong in (residual_out.float(), _padded(64, 4096, 4104), _padded(64, 4096, 4096, shift=1), residual_out[:63]):
        assert forward_path.remember_forward(x, w, 0.0, y, rstd, plan, *shape[:2], None, residual, wrong, None,
                                             None) is False
    assert forward_path.remember_forward(x, w, 0.0, y, rstd, _forward_plan(FORWARD_CODES), *shape[:2], None,
                                         residual, residual_out, None, None) is False  # a plain norm's codes
    assert forward_path.remember_forward(x, w, 0.0, y.float(), rstd, plan, *shape[:2], None, residual, residual_out,
                                         None, None) is False  # y not in x's dtype
    (x, w, y, rstd), (_, _, mean, bias), args, shape = _forward_launch("layernorm")
    codes = _specialisation(rmsnorm.forward.rmsnorm_fast_forward_kernel, *args)
    for wrong in (mean.double(), torch.empty(65)[1:], mean[:63]):
        assert forward_path.remember_forward(x, w, 0.0, y, rstd, _forward_plan(codes), *shape[:2], None, None, None,
                                             wrong, bias) is False
    assert forward_path.remember_forward(x, w, 0.0, y, rstd, _forward_plan(codes), *shape[:2], None, None, None,
                                         mean, None) is False  # codes for a bias, no bias given
    assert forward_path.plans()[0] == 0
    for extra in ((x, None, None, None), (x, y, mean, None), (None, None, None, w)):  # no kind of launch
        with pytest.raises(ValueError, match="the fused add"):
            forward_path.remember_forward(x, w, 0.0, y, rstd, _forward_plan(codes), *shape[:2], None, *extra)
    with pytest.raises(TypeError, match="remember_forward"):
        forward_path.remember_forward(x, w, 0.0, y, rstd, _forward_plan(codes), *shape[:2], None, None)


def test_the_fused_add_s_and_the_layernorm_s_forwards_take_the_c_path_as_default(monkeypatch, fresh_state):
    from rmsnorm import forward as forward_module
    from rmsnorm import layernorm_launchers

    x, r, w, b = torch.randn(4, 8), torch.randn(4, 8), torch.randn(8), torch.randn(8)
    outputs = (torch.zeros(4, 8), torch.zeros(4, 8), torch.zeros(4))
    standin = _ForwardStandIn(outputs)
    standin.forward_add = standin.forward_layernorm = standin.forward
    monkeypatch.setattr(native_launch.state, "module", standin)
    assert forward_module.launch_add_forward(x, r, w, 1e-6, None, 1.0) is outputs
    assert layernorm_launchers.launch_layernorm_forward(x, w, b, 1e-5) is outputs
    assert standin.calls == [(x, r, w, 1e-6, 1.0, True), (x, w, b, 1e-5, True)]  # poisoned (tests/conftest.py)
    with mock.patch.object(forward_module, "_run", lambda *a: None), \
            mock.patch.object(layernorm_launchers, "_run", lambda *a: None):
        config = rmsnorm.config.forward_config(8, x.dtype)
        assert forward_module.launch_add_forward(x, r, w, 1e-6, config)[0] is not outputs[0]  # explicit: Python
        assert layernorm_launchers.launch_layernorm_forward(x, w, b, 1e-5, config)[0] is not outputs[0]
        native_launch.set_native_launch(False)
        assert forward_module.launch_add_forward(x, r, w, 1e-6)[0] is not outputs[0]
        assert layernorm_launchers.launch_layernorm_forward(x, w, b, 1e-5)[0] is not outputs[0]
    assert len(standin.calls) == 2


def test_the_forward_hands_over_each_default_launch_it_ran(monkeypatch):
    """_run hands remember_forward the plain norm's, the fused add's and the LayerNorm's launches with the default
    configuration (on the CPU under the interpreter: the hand-over itself, recorded), never an explicit one's."""
    from rmsnorm import forward as forward_module

    handed = []
    monkeypatch.setattr(native_launch.state, "enabled", True)
    monkeypatch.setattr(native_launch, "remember_forward", lambda *args: handed.append(args))
    x, r, w, b = torch.randn(4, 8), torch.randn(4, 8), torch.randn(8), torch.randn(8)
    monkeypatch.setattr(forward_module, "_launch", lambda *args, **kwargs: None)  # no kernel: the hand-over only
    y, rstd = torch.empty(4, 8), torch.empty(4)
    forward_module._run(x, w, 1e-6, None, 0.0, y, rstd, None, None)
    residual_out = torch.empty(4, 8)
    forward_module._run(x, w, 1e-6, None, 1.0, y, rstd, r, residual_out)
    mean = torch.empty(4)
    forward_module._run(x, w, 1e-5, None, 0.0, y, rstd, None, None, mean, b)
    forward_module._run(x, w, 1e-6, rmsnorm.config.forward_config(8, x.dtype, False), 0.0, y, rstd, None, None)
    assert len(handed) == 3
    assert [h[-4:] for h in handed] == [(None, None, None, None), (r, residual_out, None, None), (None, None, mean, b)]
    assert all(h[2] is x and h[3] is w for h in handed) and [h[4] for h in handed] == [0.0, 1.0, 0.0]


@pytest.fixture
def torch_allocator():
    """The launchers' own allocator back (tests/conftest.py poisons every output with device.nan_output)."""
    with mock.patch.object(rmsnorm.device, "new_output", rmsnorm.device.EMPTY_OUTPUT):
        yield


class _ForwardStandIn:
    """A stand-in extension: its forward records the call and returns what it is told to."""

    def __init__(self, result):
        self.result, self.calls = result, []

    def forward(self, *args):
        self.calls.append(args)
        return self.result


def test_launch_forward_takes_the_c_path_as_default_with_torch_s_allocator_or_the_poison(monkeypatch, fresh_state):
    """The C path only with the default configuration; with the outputs poisoned (tests/conftest.py, around this
    test too) it is told to fill its own with NaN; with any other allocator (outputs_forbidden) the Python path runs."""
    from rmsnorm import forward as forward_module
    from rmsnorm.testing import outputs_forbidden

    x, w = torch.randn(4, 8), torch.randn(8)
    outputs = (torch.zeros(4, 8), torch.zeros(4))
    standin = _ForwardStandIn(outputs)
    monkeypatch.setattr(native_launch.state, "module", standin)
    assert forward_module.launch_forward(x, w, 1e-6, None, 1.0) is outputs
    with mock.patch.object(rmsnorm.device, "new_output", rmsnorm.device.EMPTY_OUTPUT):
        assert forward_module.launch_forward(x, w, 1e-6) is outputs
    assert standin.calls == [(x, w, 1e-6, 1.0, True), (x, w, 1e-6, 0.0, False)]
    with outputs_forbidden():  # the allocator replaced by another: never the C path
        with pytest.raises(AssertionError, match="an output was allocated"):
            forward_module.launch_forward(x, w, 1e-6)
    native_launch.set_native_launch(False)
    with mock.patch.object(forward_module, "_run", lambda *a: None):  # the Python path, its launch stubbed
        y, rstd = forward_module.launch_forward(x, w, 1e-6)
        assert torch.isnan(y).all() and torch.isnan(rstd).all()  # poisoned by the Python path's allocator
        native_launch.set_native_launch(True)
        forward_module.launch_forward(x, w, 1e-6, config=rmsnorm.config.forward_config(8, x.dtype))
    assert len(standin.calls) == 2  # switched off, or an explicit configuration: the Python path


#: The backward kernel's codes (12 arguments, then constexprs) and the dgamma kernel's (4, then constexprs).
BACKWARD_CODES = b"PiPPPiPiPPii" + b"x" * (len(rmsnorm.backward.rmsnorm_fast_backward_kernel.arg_names) - 12)
DGAMMA_CODES = b"PPii" + b"x" * (len(rmsnorm.backward.rmsnorm_fast_dgamma_kernel.arg_names) - 4)


def _backward_call(M=64, N=4096, dtype=torch.float16, weight=True, one_block=True, P=16):
    """(inputs, outputs) of one backward launch as run_backward allocates them: x, weight, rstd, dy; then dx,
    partial (P, N), mean_ux (rstd for one block, else (M,) float32) and dgamma."""
    x, dy, rstd = torch.randn(M, N, dtype=dtype), torch.randn(M, N, dtype=dtype), torch.rand(M) + 0.5
    w = torch.randn(N, dtype=dtype) if weight else None
    dx = torch.empty(M, N, dtype=dtype)
    partial = torch.empty(P, N) if weight else dx
    mean_ux = rstd if one_block else torch.empty(M)
    return (x, w, rstd, dy), (dx, partial, mean_ux, torch.empty(N, dtype=dtype) if weight else None)


def _remember_backward(module, inputs, outputs, block_m=4, cap=0, one_block=True, codes=BACKWARD_CODES,
                       dgamma_codes=DGAMMA_CODES, dres=None):
    x, w = inputs[:2]
    return module.remember_backward(*inputs, 0.0, outputs, (_forward_plan(codes), object()),
                                    (_forward_plan(dgamma_codes), object()) if w is not None else (None, None),
                                    (block_m, cap, one_block, False, 128), dres)


#: The fused add's backward codes: the plain twelve, 8 constexprs, then dres and its row stride.
BACKWARD_ADD_CODES = BACKWARD_CODES[:20] + b"Pi" + BACKWARD_CODES[22:]


@toolchain
@pytest.mark.parametrize("other", ["no dres", "dres dtype", "dres row stride", "dres misaligned", "dres's shape"])
def test_the_fused_add_s_backward_keys_on_its_dres(forward_path, other):
    inputs, outputs = _backward_call()
    dres = _padded(64, 4096, 4104)
    assert _remember_backward(forward_path, inputs, outputs, codes=BACKWARD_ADD_CODES, dres=dres) is True
    assert _remember_backward(forward_path, inputs, outputs, codes=BACKWARD_CODES, dres=dres) is False  # plain codes
    assert _remember_backward(forward_path, inputs, outputs, codes=BACKWARD_ADD_CODES, dres=dres[:63]) is False
    changed = {"no dres": None, "dres dtype": dres.float(), "dres row stride": _padded(64, 4096, 4112),
               "dres misaligned": _padded(64, 4096, 4104, shift=1), "dres's shape": dres[:, :4095]}[other]
    assert forward_path.backward_params(*inputs, 0.0, *outputs, changed) is None
    assert forward_path.backward_params(*inputs, 0.0, *outputs, dres) is not None
    assert forward_path.plans() == (0, 2)


@toolchain
def test_a_backward_kernel_whose_finaliser_reaches_the_tables_is_dropped_after_the_update(forward_path):
    """As the forward's: a finaliser run by a replaced backward or dgamma kernel forgets every plan; the update
    it interrupted (three slots of one entry) is over by then."""
    inputs, outputs = _backward_call()
    seen = []

    class Kernel:
        def __del__(self):
            seen.append(forward_path.plans())
            forward_path.forget_plans()

    def remember(kernel, dgamma_kernel):
        return forward_path.remember_backward(*inputs, 0.0, outputs, (_forward_plan(BACKWARD_CODES), kernel),
                                              (_forward_plan(DGAMMA_CODES), dgamma_kernel),
                                              (4, 0, True, False, 128), None)

    assert remember(Kernel(), Kernel()) is True
    assert remember(object(), object()) is True
    assert seen == [(0, 2), (0, 0)]  # the first finaliser ran with the new entry whole (both kernels), the second
    # after it
    assert forward_path.plans() == (0, 0) and forward_path.backward_params(*inputs, 0.0, *outputs) is None


@toolchain
@pytest.mark.parametrize("weight", [True, False])
def test_the_backward_path_packs_both_kernels_arguments_of_kept_plans(forward_path, weight):
    inputs, outputs = _backward_call(weight=weight)
    x, w, rstd, dy = inputs
    dx, partial, mean_ux, dgamma = outputs
    assert forward_path.backward_params(*inputs, 0.0, *outputs) is None  # nothing kept
    assert _remember_backward(forward_path, inputs, outputs) is True
    programs, params, dgamma_params = forward_path.backward_params(*inputs, 0.0, *outputs)
    assert programs == 16  # 64 rows, 4 a program
    assert params == struct.pack("<QiQQQiQiQQiiQQ", x.data_ptr(), 4096, (w if weight else x).data_ptr(),
                                 rstd.data_ptr(), dy.data_ptr(), 4096, dx.data_ptr(), 4096, partial.data_ptr(),
                                 mean_ux.data_ptr(), 64, 4096, 0, 0)
    if weight:
        assert dgamma_params == struct.pack("<QQiiQQ", partial.data_ptr(), dgamma.data_ptr(), 16, 4096, 0, 0)
    else:
        assert dgamma_params is None
    assert forward_path.plans() == (0, 2 if weight else 1)


@toolchain
@pytest.mark.parametrize("other", ["offset", "dy row stride", "x row stride", "dy dtype", "rstd misaligned",
                                   "dy misaligned", "M of 1", "no weight"])
def test_the_backward_path_keys_on_all_that_triton_specialises(forward_path, other):
    inputs, outputs = _backward_call()
    _remember_backward(forward_path, inputs, outputs)
    x, w, rstd, dy = inputs
    wide = torch.randn(64, 4104, dtype=torch.float16)[:, :4096]
    offset, changed = 0.0, {
        "offset": inputs, "dy row stride": (x, w, rstd, wide), "x row stride": (wide, w, rstd, dy),
        "dy dtype": (x, w, rstd, dy.float()), "rstd misaligned": (x, w, torch.rand(65)[1:], dy),
        "dy misaligned": (x, w, rstd, torch.randn(64 * 4096 + 1, dtype=torch.float16)[1:].view(64, 4096)),
        "M of 1": (x[:1], w, rstd[:1], dy[:1]), "no weight": (x, None, rstd, dy),
    }[other]
    if other == "offset":
        offset = 1.0
    assert forward_path.backward_params(*changed, offset, *outputs) is None
    assert forward_path.backward_params(*inputs, 0.0, *outputs) is not None


@toolchain
def test_the_backward_path_keeps_a_dgamma_plan_per_class_of_its_grid(forward_path):
    """P, the partials' rows, is the dgamma kernel's run-time integer: 1, a multiple of 16 or neither."""
    inputs, outputs = _backward_call(M=64, P=16)
    _remember_backward(forward_path, inputs, outputs, cap=16)
    more_rows = _backward_call(M=128, P=16)  # capped at 16 programs: the same class of P
    assert forward_path.backward_params(*more_rows[0], 0.0, *more_rows[1])[0] == 16
    fewer_rows = _backward_call(M=48, P=12)  # the same key (M a multiple of 16), P of another class
    assert forward_path.backward_params(*fewer_rows[0], 0.0, *fewer_rows[1]) is None
    _remember_backward(forward_path, *fewer_rows, cap=16)
    assert forward_path.backward_params(*fewer_rows[0], 0.0, *fewer_rows[1])[0] == 12
    assert forward_path.plans() == (0, 3)  # one backward plan, dgamma's for two classes of P
    two_a_program = _backward_call(M=48, P=16)  # another configuration (2 rows a program): its entry afresh
    assert _remember_backward(forward_path, *two_a_program, cap=16, block_m=2) is True
    assert forward_path.plans() == (0, 2)  # the backward's, and dgamma's for P = 16 (48 rows, 2 a program, capped)
    assert forward_path.backward_params(*two_a_program[0], 0.0, *two_a_program[1])[0] == 16


@toolchain
def test_the_backward_path_keeps_only_what_it_can_launch(forward_path):
    inputs, (dx, partial, mean_ux, dgamma) = _backward_call()
    padded = torch.empty(64, 4104, dtype=torch.float16)[:, :4096]
    for outputs, one_block in (((padded, partial, mean_ux, dgamma), True), ((dx, partial[:15], mean_ux, dgamma), True),
                               ((dx, partial, mean_ux, dgamma.float()), True),
                               ((dx, partial, torch.empty(64), dgamma), True),  # one block: mean_ux is rstd
                               ((dx, partial, torch.empty(64, dtype=torch.float64), dgamma), False)):
        assert _remember_backward(forward_path, inputs, outputs, one_block=one_block) is False
    outputs = (dx, partial, mean_ux, dgamma)
    assert _remember_backward(forward_path, inputs, outputs, codes=BACKWARD_CODES[:-1] + b"P") is False
    assert _remember_backward(forward_path, inputs, outputs, dgamma_codes=b"PPif" + DGAMMA_CODES[4:]) is False
    assert forward_path.plans() == (0, 0)
    with pytest.raises(TypeError, match="remember_backward"):
        forward_path.remember_backward(*inputs, 0.0, outputs[:3], None, None, None)


def test_launch_backward_takes_the_c_path_only_as_default(monkeypatch, fresh_state):
    """The plain norm's backward and the fused add's (with dres) go to the C path with the default configuration."""
    from rmsnorm import backward as backward_module

    x, w, dy, rstd = torch.randn(4, 8), torch.randn(8), torch.randn(4, 8), torch.ones(4)
    grads = (torch.zeros(4, 8), torch.zeros(8))
    standin = _ForwardStandIn(grads)
    standin.backward = standin.forward
    monkeypatch.setattr(native_launch.state, "module", standin)
    assert backward_module.launch_backward(x, w, rstd, dy, None, 1.0) is grads
    assert backward_module.launch_backward(x, w, rstd, dy, None, 0.0, dy) is grads  # the fused add's
    # poisoned outputs (tests/conftest.py): NaN in C too
    assert standin.calls == [(x, w, rstd, dy, 1.0, None, True), (x, w, rstd, dy, 0.0, dy, True)]
    with mock.patch.object(backward_module, "run_backward", lambda *a: ("python", None, None)):
        assert backward_module.launch_backward(x, w, rstd, dy, rmsnorm.config.backward_config(8, x.dtype))[0] == \
            "python"
        native_launch.set_native_launch(False)
        assert backward_module.launch_backward(x, w, rstd, dy)[0] == "python"
    assert len(standin.calls) == 2


def _padded(M, N, stride, dtype=torch.float16, shift=0):
    """(M, N) rows read in place from a buffer of row stride ``stride``, starting ``shift`` elements in."""
    return torch.randn(M * stride + shift, dtype=dtype)[shift:].view(M, stride)[:, :N]


@toolchain
@pytest.mark.parametrize("other", ["N", "x dtype", "weight dtype", "x misaligned", "weight misaligned",
                                   "M not a multiple of 16", "x row stride alone", "dy row stride alone"])
def test_the_backward_path_keys_on_each_item_alone(forward_path, other):
    """Each call differs from the kept one in one item of the key only (dense rows, M's classes and the other
    strides equal), so that no other item hides a missing one."""
    padded = other in ("N", "x row stride alone", "dy row stride alone")
    if padded:  # rows not dense in both calls: the strides and N vary alone
        x, dy = _padded(64, 4096, 4104), _padded(64, 4096, 4104)
        w, rstd = torch.randn(4096, dtype=torch.float16), torch.rand(64) + 0.5
        inputs = (x, w, rstd, dy)
        dx, partial, _, dgamma = _backward_call()[1]
        outputs = (dx, partial, rstd, dgamma)  # one block: mean_ux is rstd
    else:
        inputs, outputs = _backward_call()
        x, w, rstd, dy = inputs
    assert _remember_backward(forward_path, inputs, outputs) is True
    changed = {
        "N": lambda: (x[:, :4095], w[:4095], rstd, dy[:, :4095]),
        "x dtype": lambda: (x.bfloat16(), w, rstd, dy),
        "weight dtype": lambda: (x, w.float(), rstd, dy),
        "x misaligned": lambda: (_padded(64, 4096, 4096, shift=1), w, rstd, dy),
        "weight misaligned": lambda: (x, torch.randn(4097, dtype=torch.float16)[1:], rstd, dy),
        "M not a multiple of 16": lambda: (x[:63], w, rstd[:63], dy[:63]),
        "x row stride alone": lambda: (_padded(64, 4096, 4112), w, rstd, dy),
        "dy row stride alone": lambda: (x, w, rstd, _padded(64, 4096, 4112)),
    }[other]()
    assert forward_path.backward_params(*changed, 0.0, *outputs) is None
    assert forward_path.backward_params(*inputs, 0.0, *outputs) is not None


@toolchain
def test_the_backward_path_keeps_no_plan_for_misaligned_or_mistyped_outputs(forward_path):
    inputs, (dx, partial, mean_ux, dgamma) = _backward_call(one_block=False)
    for outputs in ((_padded(64, 4096, 4096, shift=1), partial, mean_ux, dgamma),
                    (dx, _padded(16, 4096, 4096, torch.float32, shift=1), mean_ux, dgamma),
                    (dx, partial, torch.empty(65)[1:], dgamma),
                    (dx, partial, mean_ux, torch.empty(4097, dtype=torch.float16)[1:]),
                    (dx.float(), partial, mean_ux, dgamma), (dx, partial.double(), mean_ux, dgamma)):
        assert _remember_backward(forward_path, inputs, outputs, one_block=False) is False
    assert forward_path.plans() == (0, 0)
    one_row, (dx, partial, _, dgamma) = _backward_call(M=1, P=1)
    wide_row = torch.empty(1, 4104, dtype=torch.float16)[:, :4096]  # contiguous, but a row stride other than N
    assert _remember_backward(forward_path, one_row, (wide_row, partial, one_row[2], dgamma)) is False
    assert forward_path.backward_params(*one_row, 0.0, dx[0], partial, one_row[2], dgamma) is None  # 1-D dx


def test_launch_backward_tells_c_to_poison_only_under_the_poison_and_leaves_other_allocators_to_python(
        monkeypatch, fresh_state):
    from rmsnorm import backward as backward_module
    from rmsnorm.testing import outputs_forbidden

    x, w, dy, rstd = torch.randn(4, 8), torch.randn(8), torch.randn(4, 8), torch.ones(4)
    standin = _ForwardStandIn((torch.zeros(4, 8), torch.zeros(8)))
    standin.backward = standin.forward
    monkeypatch.setattr(native_launch.state, "module", standin)
    with mock.patch.object(rmsnorm.device, "new_output", rmsnorm.device.EMPTY_OUTPUT):
        backward_module.launch_backward(x, w, rstd, dy)
    assert standin.calls == [(x, w, rstd, dy, 0.0, None, False)]
    with outputs_forbidden(), mock.patch.object(backward_module, "run_backward", lambda *a: ("python", None, None)):
        assert backward_module.launch_backward(x, w, rstd, dy)[0] == "python"
    assert len(standin.calls) == 1


def test_run_backward_hands_over_the_launch_it_ran(monkeypatch, device):
    """The plain, the fused add's and the LayerNorm's default backward hand remember_backward their launches' keys,
    outputs and shape (the hand-over itself, recorded: on the CPU under the interpreter nothing is cached); the
    LayerNorm's with its own tensors and its dbias sum's launch."""
    from rmsnorm import backward as backward_module

    handed = []
    monkeypatch.setattr(native_launch.state, "enabled", True)
    monkeypatch.setattr(native_launch, "remember_backward", lambda *args: handed.append(args))
    x, dy, rstd = torch.randn(4, 8, device=device), torch.randn(4, 8, device=device), torch.rand(4, device=device) + 0.5
    w = torch.randn(8, device=device)
    dx, dgamma, _ = backward_module.run_backward(x, w, rstd, dy, None, 1.0)
    (backward, dgamma_launch, *tensors, offset, outputs, shape, config, dres, layernorm) = handed[0]
    config_default = rmsnorm.config.backward_config(8, x.dtype, True)
    assert backward[0] is backward_module._launch and backward[1][-1] == 1.0
    assert dgamma_launch == (backward_module._launch_dgamma, backward_module._dgamma_key(outputs[1], dgamma))
    assert tensors == [x, w, rstd, dy] and offset == 1.0 and config == config_default
    assert dres is None and layernorm is None
    assert outputs[0] is dx and outputs[3] is dgamma and outputs[2] is rstd  # one block: mean_ux is rstd
    assert shape == (config_default.BLOCK_M, True, True, backward_module.REDUCE_BLOCK_N)  # float32, N <= 64: float64
    backward_module.run_backward(x, w, rstd, dy, rmsnorm.config.backward_config(8, x.dtype))  # explicit: kept none
    assert len(handed) == 1
    dres = torch.randn(4, 8, device=device)
    backward_module.run_backward(x, w, rstd, dy, None, 0.0, dres)  # the fused add's: handed over with its dres
    assert len(handed) == 2 and handed[1][-2] is dres and handed[1][-1] is None
    assert handed[1][-3] == rmsnorm.config.backward_config(8, x.dtype)
    mean, bias = torch.zeros(4, device=device), torch.randn(8, device=device)
    dx, dweight, dbias = backward_module.run_backward(x, w, rstd, dy, None, 0.0, None, mean, bias)  # the LayerNorm's
    assert len(handed) == 3 and handed[2][-2] is None
    ln_mean, ln_bias, bias_partial, mean_u, ln_dbias, (launcher, key) = handed[2][-1]
    assert ln_mean is mean and ln_bias is bias and ln_dbias is dbias and mean_u is rstd  # one block: mean_u is rstd
    assert bias_partial.shape == (handed[2][7][1].shape[0], 8) and bias_partial.dtype == torch.float32
    assert launcher is backward_module._launch_dgamma and key == backward_module._dgamma_key(bias_partial, dbias)
    assert handed[2][-3] == rmsnorm.config.layernorm_backward_config(8, x.dtype)


@toolchain
@pytest.mark.parametrize("dres", [False, True], ids=["plain", "fused add"])
@pytest.mark.parametrize("M, N, weight", [(64, 4096, True), (64, 4096, False), (1, 4096, True), (1, 1, True),
                                          (1, 1, False), (64, 1, True), (7, 20000, True)])
def test_tritons_own_codes_for_the_backward_are_the_ones_kept_and_packed(forward_path, M, N, weight, dres):
    """The codes Triton's binder gives the two kernels (a CUDA backend's specialisation, computed on the CPU): 12
    and 4 leading ones of kBackwardCodes and kDgammaCodes, then constexprs only (the fused add's: kBackwardAddCodes,
    dres and its row stride after 8 constexprs); kept, and packed as Triton would."""
    compiler = pytest.importorskip("triton.backends.nvidia.compiler")
    from triton.backends.compiler import GPUTarget
    from triton.runtime.jit import create_function_from_signature

    from rmsnorm import backward as backward_module
    from rmsnorm.config import backward_config, grid_size, row_align_hint, row_arithmetic_dtype

    backend = compiler.CUDABackend(GPUTarget("cuda", 90, 32))

    def specialisation(kernel, *args, **options):
        kernel = triton.runtime.jit.JITFunction(kernel.fn)  # the compiled kernel's binder, the interpreter on or off
        _, spec, _ = create_function_from_signature(kernel.signature, kernel.params, backend)(*args, **options)
        return [ty for ty, _ in spec]

    x, dy, rstd = _padded(M, N, N + 8), _padded(M, N, N + 8), torch.rand(M) + 0.5  # not dense: never flat
    w = torch.randn(N, dtype=x.dtype) if weight else None
    config = backward_config(N, x.dtype, False)
    one_block = config.one_block(N)
    block_m = config.BLOCK_M if one_block else 1
    P = grid_size(config, -(-M // block_m), 132)
    dx = torch.empty(M, N, dtype=x.dtype)
    partial = torch.empty(P, N) if weight else dx
    compute = row_arithmetic_dtype(N, x.dtype)
    mean_ux = rstd if one_block else torch.empty(M, dtype=compute)
    dgamma = torch.empty(N, dtype=x.dtype) if weight else None
    d = _padded(M, N, N + 24) if dres else None
    values = (x, x.stride(0), x if w is None else w, rstd, dy, dy.stride(0), dx, dx.stride(0), partial, mean_ux, M, N)
    constexprs = (weight, 0.0, backward_module.TRITON_DTYPE[compute], one_block, block_m, config.BLOCK_N,
                  config.num_stages, row_align_hint(x.element_size(), N, x.stride(0), dy.stride(0), dx.stride(0),
                                                    *((d.stride(0),) if dres else ())))
    codes = native_launch.arg_codes(dict(enumerate(specialisation(
        backward_module.rmsnorm_fast_backward_kernel, *values, *constexprs, d, None if d is None else d.stride(0),
        dres, config.static(N), None, None, None, False, False))))
    leading = 22 if dres else 12
    assert codes[12:20] == b"x" * 8 and codes[leading:] == b"x" * (len(codes) - leading)
    dgamma_codes = None if not weight else native_launch.arg_codes(dict(enumerate(specialisation(
        backward_module.rmsnorm_fast_dgamma_kernel, partial, dgamma, P, N, backward_module.REDUCE_BLOCK_P,
        backward_module.REDUCE_BLOCK_N, row_align_hint(dgamma.element_size(), N)))))
    cap = 0 if config.programs_per_sm is None else 132 * config.programs_per_sm
    assert forward_path.remember_backward(
        x, w, rstd, dy, 0.0, (dx, partial, mean_ux, dgamma), (_forward_plan(codes), object()),
        (_forward_plan(dgamma_codes), object()) if weight else (None, None),
        (block_m, cap, one_block, compute is torch.float64, backward_module.REDUCE_BLOCK_N), d) is True

    def packed(codes, values):
        kept = [(c, v.data_ptr() if isinstance(v, torch.Tensor) else v) for c, v in zip(codes.decode(), values)]
        return b"".join(struct.pack("<" + {"P": "Q", "i": "i", "q": "q"}[c], v) for c, v in kept if c != "x") + \
            struct.pack("<QQ", 0, 0)

    programs, params, dgamma_params = forward_path.backward_params(x, w, rstd, dy, 0.0, dx, partial, mean_ux, dgamma,
                                                                   d)
    run_time = values + constexprs + ((d, d.stride(0)) if dres else ())
    assert programs == P and params == packed(codes, run_time)
    # the other kind (with dres or without) on the same tensors: its own plan, none kept
    assert forward_path.backward_params(x, w, rstd, dy, 0.0, dx, partial, mean_ux, dgamma, None if dres else dx) is None
    if weight:
        assert dgamma_params == packed(dgamma_codes, (partial, dgamma, P, N))


@toolchain
@pytest.mark.parametrize("M, N, weight, bias", [(64, 4096, True, True), (64, 4096, True, False),
                                                (64, 4096, False, True), (1, 1, True, True), (7, 20000, True, True),
                                                (16, 12288, True, True)])
def test_tritons_own_codes_for_the_layernorm_s_backward_are_kept_and_packed(forward_path, M, N, weight, bias):
    """The LayerNorm's backward (mean, bias_partial and mean_u after the fused add's constexprs) and its two sums:
    the codes Triton's binder gives them are kBackwardLayerNormCodes' and kDgammaCodes'; kept, and packed as Triton
    would pack them, dbias's sum its own plan (the bias's dtype)."""
    from rmsnorm import backward as backward_module
    from rmsnorm.config import grid_size, layernorm_backward_config, row_align_hint, row_arithmetic_dtype

    x, dy, rstd, mean = _padded(M, N, N + 8), _padded(M, N, N + 8), torch.rand(M) + 0.5, torch.randn(M)
    w = torch.randn(N, dtype=x.dtype) if weight else None
    b = torch.randn(N) if bias else None  # float32: dbias's sum is another specialisation than dweight's
    config = layernorm_backward_config(N, x.dtype)
    one_block = config.one_block(N)
    block_m = config.BLOCK_M if one_block else 1
    P = grid_size(config, -(-M // block_m), 132)
    compute = row_arithmetic_dtype(N, x.dtype)
    dx = torch.empty(M, N, dtype=x.dtype)
    partial = torch.empty(P, N) if weight else dx
    mean_ux = mean_u = rstd if one_block else torch.empty(M, dtype=compute)
    if not one_block:
        mean_u = torch.empty(M, dtype=compute)
    dgamma = torch.empty(N, dtype=x.dtype) if weight else None
    bias_partial, dbias = (torch.empty(P, N), torch.empty(N)) if bias else (None, None)
    values = (x, x.stride(0), x if w is None else w, rstd, dy, dy.stride(0), dx, dx.stride(0), partial, mean_ux, M, N)
    rest = (weight, 0.0, backward_module.TRITON_DTYPE[compute], one_block, block_m, config.BLOCK_N, config.num_stages,
            row_align_hint(x.element_size(), N, x.stride(0), dy.stride(0), dx.stride(0)), None, None, False,
            config.static(N), mean, bias_partial, mean_u, True, bias)
    codes = _specialisation(backward_module.rmsnorm_fast_backward_kernel, *values, *rest)
    assert codes[12:24] == b"x" * 12 and codes[27:] == b"x" * (len(codes) - 27)

    def sum_codes(partial, total):
        return _specialisation(backward_module.rmsnorm_fast_dgamma_kernel, partial, total, P, N,
                               backward_module.REDUCE_BLOCK_P, backward_module.REDUCE_BLOCK_N,
                               row_align_hint(total.element_size(), N))

    dbias_codes = sum_codes(bias_partial, dbias) if bias else None
    assert forward_path.remember_backward(
        x, w, rstd, dy, 0.0, (dx, partial, mean_ux, dgamma), (_forward_plan(codes), object()),
        (_forward_plan(sum_codes(partial, dgamma)), object()) if weight else (None, None),
        (block_m, 0 if config.programs_per_sm is None else 132 * config.programs_per_sm, one_block,
         compute is torch.float64, backward_module.REDUCE_BLOCK_N), None,
        (mean, b, bias_partial, mean_u, dbias, (_forward_plan(dbias_codes), object()) if bias else (None, None))) \
        is True
    assert forward_path.plans() == (0, 1 + weight + bias)

    def packed(codes, values):
        kept = [(c, v.data_ptr() if isinstance(v, torch.Tensor) else v) for c, v in zip(codes.decode(), values)]
        return b"".join(struct.pack("<" + {"P": "Q", "i": "i", "q": "q"}[c], v) for c, v in kept if c != "x") + \
            struct.pack("<QQ", 0, 0)

    layernorm = (mean, b, bias_partial, mean_u, dbias)
    programs, params, dgamma_params, dbias_params = forward_path.backward_params(
        x, w, rstd, dy, 0.0, dx, partial, mean_ux, dgamma, None, layernorm)
    assert programs == P and params == packed(codes, values + rest)
    assert (dgamma_params is None) == (not weight) and (dbias_params is None) == (not bias)
    if bias:
        assert dbias_params == packed(dbias_codes, (bias_partial, dbias, P, N))
    # the RMSNorm's backward on the same tensors: another kind of launch, none kept
    assert forward_path.backward_params(x, w, rstd, dy, 0.0, dx, partial, mean_ux, dgamma) is None
    other_mean = torch.randn(M + 1)[1:]  # the forward's mean at another address mod 16: another specialisation
    assert forward_path.backward_params(x, w, rstd, dy, 0.0, dx, partial, mean_ux, dgamma, None,
                                        (other_mean, *layernorm[1:])) is None
    if bias:  # the bias's dtype chooses dbias's sum: another key
        assert forward_path.backward_params(x, w, rstd, dy, 0.0, dx, partial, mean_ux, dgamma, None,
                                            (mean, b.half(), bias_partial, mean_u, dbias.half())) is None


# ----------------------------------------------------------------------------- on a GPU


def _every_path(fn):
    """fn() through the native launcher, Triton's launcher and Triton's binder (the kernels cached first)."""
    results = []
    fn()  # compiles and caches
    assert launch_path() == "native"
    results.append(fn())
    native_launch.set_native_launch(False)
    try:
        results.append(fn())
    finally:
        native_launch.set_native_launch(True)
    original = DirectLauncher.__call__
    try:
        DirectLauncher.__call__ = lambda self, key, grid, *args, **opts: self.kernel[grid](*args, **opts)
        native_launch.set_native_launch(False)  # else the forward's kept plans launch from C
        results.append(fn())
    finally:
        DirectLauncher.__call__ = original
        native_launch.set_native_launch(True)
    return results


@gpu_only
@pytest.mark.parametrize("M, N, dtype", [(1, 4096, torch.bfloat16), (64, 4096, torch.bfloat16),
                                         (128, 257, torch.float32), (300, 1000, torch.float16),
                                         (7, 20000, torch.float32)])
def test_native_launcher_and_binder_give_the_same_numbers(M, N, dtype):
    x, gamma, dy = make_inputs(M, N, dtype, device="cuda", seed=11)
    residual = torch.randn_like(x)

    def call():
        xr, gr = x.clone().requires_grad_(), gamma.clone().requires_grad_()
        y = rmsnorm.rmsnorm_fast(xr, gr)
        y.backward(dy)
        y2, h = rmsnorm.rmsnorm_add(x, residual, gamma)
        return y.detach(), xr.grad, gr.grad, y2, h

    native, triton_launcher, binder = _every_path(call)
    for a, b, c in zip(native, triton_launcher, binder):
        assert torch.equal(a, b) and torch.equal(a, c)


@gpu_only
def test_the_native_launch_runs_on_the_current_stream():
    x, gamma, _ = make_inputs(2048, 4096, torch.float16, device="cuda", seed=4)
    expected = rmsnorm.rmsnorm_fast(x, gamma)
    rmsnorm.rmsnorm_fast(x, gamma)  # cached: the next call is a native launch
    assert launch_path() == "native"
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        torch.cuda._sleep(100_000_000)  # tens of ms: a launch on another stream would read x_side unwritten
        x_side = x * 1
        got = rmsnorm.rmsnorm_fast(x_side, gamma)
    side.synchronize()
    assert torch.equal(got, expected)


@gpu_only
@toolchain
def test_threads_that_call_at_once_get_each_their_own_numbers_while_plans_are_kept():
    """Eight Python threads (a server's, a data pipeline's) call the forward, backward, fused add and LayerNorm at once,
    every plan forgotten first: the C paths keep plans while other threads look theirs up and launch with the GIL
    released. Each thread's results must equal Triton's launcher's on the same inputs, computed beforehand."""
    import concurrent.futures

    shapes = [(3 + 5 * i, N, dtype) for i, (N, dtype) in enumerate(
        [(4096, torch.bfloat16), (257, torch.float32), (1000, torch.float16), (12289, torch.bfloat16),
         (768, torch.float16), (65, torch.bfloat16), (20000, torch.float32), (2048, torch.bfloat16)])]
    inputs = [(*make_inputs(M, N, dtype, device="cuda", seed=31 + i), torch.randn(M, N, device="cuda", dtype=dtype))
              for i, (M, N, dtype) in enumerate(shapes)]

    def work(x, gamma, dy, residual, calls=20):
        outputs = []
        for _ in range(calls):  # with plans forgotten, the first calls keep them and the rest launch from C
            xr, gr = x.clone().requires_grad_(), gamma.clone().requires_grad_()
            y = rmsnorm.rmsnorm_fast(xr, gr)
            y.backward(dy)
            y2, h = rmsnorm.rmsnorm_add(x, residual, gamma)
            y3 = rmsnorm.layernorm_fast(x, gamma, gamma)
            outputs.append((y.detach(), xr.grad, gr.grad, y2, h, y3))
        torch.cuda.current_stream().synchronize()
        return outputs

    native_launch.set_native_launch(False)  # Triton compiles here, in one thread, and its launcher gives the numbers
    expected = [work(*args, calls=1)[0] for args in inputs]
    native_launch.set_native_launch(True)
    assert launch_path() == "native"
    native_launch.state.module.forget_plans()
    with concurrent.futures.ThreadPoolExecutor(len(inputs)) as pool:
        together = list(pool.map(lambda args: work(*args), inputs))
    assert all(native_launch.state.module.plans())  # the threads kept forward and backward plans
    for shape, runs, one in zip(shapes, together, expected):
        for run in runs:
            for got, want in zip(run, one, strict=True):
                assert torch.equal(got, want), f"{shape}: a thread's result differs from Triton's launcher's"


@gpu_only
def test_a_cuda_graph_captures_the_native_launch():
    norm = rmsnorm.FastRMSNorm(4096, eps=1e-6, device="cuda", dtype=torch.bfloat16)
    x = torch.randn(64, 4096, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    dy = torch.randn_like(x)
    for _ in range(2):  # compiled and cached: the capture records native launches
        norm(x).backward(dy)
    assert launch_path() == "native"
    x.grad = None
    y_eager = norm(x)
    y_eager.backward(dy)
    y_eager, dx_eager = y_eager.detach(), x.grad.clone()
    graph, x.grad, norm.weight.grad = torch.cuda.CUDAGraph(), None, None
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side), torch.cuda.graph(graph):
        y_graph = norm(x)
        y_graph.backward(dy)
    x.grad.fill_(float("nan"))
    y_graph.detach().fill_(float("nan"))
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(y_graph, y_eager) and torch.equal(x.grad, dx_eager)


@gpu_only
def test_torch_compile_traces_the_operator_whole_and_matches_the_native_eager_call():
    x, gamma, _ = make_inputs(64, 4096, torch.bfloat16, device="cuda", seed=6)
    eager = rmsnorm.rmsnorm_fast(x, gamma)
    compiled = torch.compile(rmsnorm.rmsnorm_fast, fullgraph=True)  # fullgraph: a graph break raises
    assert torch.equal(compiled(x, gamma), eager)
    assert launch_path() == "native"


def _forward_case(case):
    """(x, weight, offset) of one kind of forward launch."""
    x, w, _ = make_inputs(*case["shape"], case["dtype"], device="cuda", seed=3,
                          weight_dtype=case.get("weight_dtype"))
    if case.get("padded"):  # rows read in place from a wider buffer: not dense, ROW_ALIGN from the stride
        wide = torch.randn(x.shape[0], x.shape[1] + 24, device="cuda", dtype=x.dtype)
        wide[:, :x.shape[1]] = x
        x = wide[:, :x.shape[1]]
    return x, None if case.get("no_weight") else w, case.get("offset", 0.0)


FORWARD_CASES = {
    "1 x 4096 bf16": {"shape": (1, 4096), "dtype": torch.bfloat16},
    "64 x 4096 bf16": {"shape": (64, 4096), "dtype": torch.bfloat16},
    "17 x 257 fp32": {"shape": (17, 257), "dtype": torch.float32},
    "300 x 1000 fp16, rows in a wider buffer": {"shape": (300, 1000), "dtype": torch.float16, "padded": True},
    "64 x 4096 bf16, no weight": {"shape": (64, 4096), "dtype": torch.bfloat16, "no_weight": True},
    "64 x 4096 bf16, fp32 weight": {"shape": (64, 4096), "dtype": torch.bfloat16, "weight_dtype": torch.float32},
    "48 x 2048 bf16, offset 1": {"shape": (48, 2048), "dtype": torch.bfloat16, "offset": 1.0},
    "4096 x 128 fp16": {"shape": (4096, 128), "dtype": torch.float16},
    "8 x 131072 bf16": {"shape": (8, 131072), "dtype": torch.bfloat16},
}


@gpu_only
@pytest.mark.parametrize("case", FORWARD_CASES)
def test_the_forward_launches_from_c_once_kept_with_the_python_path_s_numbers(case, monkeypatch):
    """Under tests/conftest.py's poison: both paths' outputs start as NaN."""
    from rmsnorm import forward as forward_module

    x, w, offset = _forward_case(FORWARD_CASES[case])
    module = native_launch.extension()
    module.forget_plans()
    first = forward_module.launch_forward(x, w, 1e-6, None, offset)  # Python: compiles, launches, keeps the plan
    assert module.plans()[0] == 1

    def no_python_launch(*args, **kwargs):
        raise AssertionError("the Python path launched a kept kind of forward")

    monkeypatch.setattr(forward_module, "_run", no_python_launch)
    for _ in range(2):
        y, rstd = forward_module.launch_forward(x.clone() if x.is_contiguous() else x, w, 1e-6, None, offset)
        assert torch.equal(y, first[0]) and torch.equal(rstd, first[1])
        assert y.is_contiguous() and y.dtype == x.dtype and rstd.dtype == torch.float32
    monkeypatch.undo()
    weight = torch.ones(x.shape[1], device="cuda", dtype=torch.float64) if w is None else w.double()
    assert_close(y, rmsnorm_reference(x.double(), weight, 1e-6, offset), dtype=x.dtype)  # against float64


@gpu_only
@pytest.mark.parametrize("case", FORWARD_CASES)
def test_the_backward_launches_from_c_once_kept_with_the_python_path_s_numbers(case, monkeypatch):
    """Both kernels (dx and the partials, then dgamma's sum) from one C call, under tests/conftest.py's poison."""
    from rmsnorm import backward as backward_module
    from rmsnorm import forward as forward_module

    x, w, offset = _forward_case(FORWARD_CASES[case])
    dy = torch.randn(x.shape, device="cuda", dtype=x.dtype)
    rstd = forward_module.launch_forward(x, w, 1e-6, None, offset)[1]
    module = native_launch.extension()
    module.forget_plans()
    first = backward_module.launch_backward(x, w, rstd, dy, None, offset)  # Python: launches, keeps the plans
    assert module.plans()[1] == (1 if w is None else 2)

    def no_python_launch(*args, **kwargs):
        raise AssertionError("the Python path launched a kept kind of backward")

    monkeypatch.setattr(backward_module, "run_backward", no_python_launch)
    for _ in range(2):
        dx, dgamma = backward_module.launch_backward(x, w, rstd, dy, None, offset)
        assert torch.equal(dx, first[0]) and dx.is_contiguous() and dx.dtype == x.dtype
        assert (dgamma is None) == (w is None)
        if w is not None:
            assert torch.equal(dgamma, first[1]) and dgamma.dtype == w.dtype


OTHER_FORWARD_CASES = {
    "fused add, 64 x 4096 bf16": {"kind": "add", "shape": (64, 4096), "dtype": torch.bfloat16},
    "fused add, 1 x 4096 bf16, float32 residual": {"kind": "add", "shape": (1, 4096), "dtype": torch.bfloat16,
                                                   "residual_dtype": torch.float32},
    "fused add, 17 x 257 fp32, offset 1": {"kind": "add", "shape": (17, 257), "dtype": torch.float32, "offset": 1.0},
    "fused add, 300 x 1000 fp16, residual rows in a wider buffer": {"kind": "add", "shape": (300, 1000),
                                                                    "dtype": torch.float16, "padded": True},
    "fused add, 4096 x 128 fp16, no weight": {"kind": "add", "shape": (4096, 128), "dtype": torch.float16,
                                              "no_weight": True},
    "layernorm, 64 x 4096 bf16": {"kind": "layernorm", "shape": (64, 4096), "dtype": torch.bfloat16},
    "layernorm, 17 x 257 fp32, no bias": {"kind": "layernorm", "shape": (17, 257), "dtype": torch.float32,
                                          "no_bias": True},
    "layernorm, 4096 x 768 fp16, fp32 weight and bias": {"kind": "layernorm", "shape": (4096, 768),
                                                         "dtype": torch.float16, "weight_dtype": torch.float32},
    "layernorm, 8 x 131072 bf16": {"kind": "layernorm", "shape": (8, 131072), "dtype": torch.bfloat16},
}


@gpu_only
@pytest.mark.parametrize("case", OTHER_FORWARD_CASES)
def test_the_fused_add_s_and_the_layernorm_s_forwards_launch_from_c_once_kept(case, monkeypatch):
    """The same kernel, their own kinds of launch: the Python path's numbers bit for bit, its output dtypes, and
    float64's (the fused add's residual_out: x + residual as torch rounds it), under tests/conftest.py's poison."""
    from rmsnorm import forward as forward_module
    from rmsnorm import layernorm_launchers

    spec = OTHER_FORWARD_CASES[case]
    x, w, offset = _forward_case(spec)
    if spec["kind"] == "add":
        residual = torch.randn(x.shape, device="cuda", dtype=spec.get("residual_dtype", x.dtype))
        if spec.get("padded"):
            residual = torch.randn(x.shape[0], x.shape[1] + 40, device="cuda", dtype=residual.dtype)[:, :x.shape[1]]

        def call():
            return forward_module.launch_add_forward(x, residual, w, 1e-6, None, offset)
    else:
        bias = None if spec.get("no_bias") else 0.5 * torch.randn(x.shape[1], device="cuda", dtype=w.dtype)

        def call():
            return layernorm_launchers.launch_layernorm_forward(x, w, bias, 1e-5)
    module = native_launch.extension()
    module.forget_plans()
    first = call()  # Python: compiles, launches, keeps the plan
    assert module.plans()[0] == 1

    def no_python_launch(*args, **kwargs):
        raise AssertionError("the Python path launched a kept kind of forward")

    monkeypatch.setattr(forward_module, "_run", no_python_launch)
    monkeypatch.setattr(layernorm_launchers, "_run", no_python_launch)
    for _ in range(2):
        out = call()
        assert all(torch.equal(a, b) and a.dtype == b.dtype and a.is_contiguous() for a, b in zip(out, first))
    monkeypatch.undo()
    y, third, rstd = out
    assert y.dtype == x.dtype and rstd.dtype == torch.float32
    if spec["kind"] == "add":
        assert third.dtype == residual.dtype and torch.equal(third, x + residual)
        weight = torch.ones(x.shape[1], device="cuda", dtype=torch.float64) if w is None else w.double()
        assert_close(y, rmsnorm_reference(third.double(), weight, 1e-6, offset), dtype=x.dtype)
    else:
        expected = torch.nn.functional.layer_norm(x.double(), x.shape[1:], w.double(),
                                                  None if bias is None else bias.double(), 1e-5)
        assert_close(y, expected, dtype=x.dtype)
        assert_close(third, x.double().mean(1), dtype=torch.float32)


@gpu_only
@pytest.mark.parametrize("case", [c for c, spec in OTHER_FORWARD_CASES.items() if spec["kind"] == "add"])
def test_the_fused_add_s_backward_launches_from_c_once_kept(case, monkeypatch):
    """The fused add's backward (x its residual_out, dy in y's dtype, dres in residual_out's): both kernels from one
    C call once kept, the Python path's numbers bit for bit, under tests/conftest.py's poison."""
    from rmsnorm import backward as backward_module
    from rmsnorm import forward as forward_module

    spec = OTHER_FORWARD_CASES[case]
    x, w, offset = _forward_case(spec)
    residual = torch.randn(x.shape, device="cuda", dtype=spec.get("residual_dtype", x.dtype))
    _, residual_out, rstd = forward_module.launch_add_forward(x, residual, w, 1e-6, None, offset)
    dy = torch.randn(x.shape, device="cuda", dtype=x.dtype)
    dres = torch.randn(x.shape, device="cuda", dtype=residual_out.dtype)
    if spec.get("padded"):  # the gradients' rows in wider buffers: their row strides in the key
        dres = torch.randn(x.shape[0], x.shape[1] + 8, device="cuda", dtype=dres.dtype)[:, :x.shape[1]]
    module = native_launch.extension()
    module.forget_plans()
    first = backward_module.launch_backward(residual_out, w, rstd, dy, None, offset, dres)  # Python: keeps the plans
    assert module.plans()[1] == (1 if w is None else 2)

    def no_python_launch(*args, **kwargs):
        raise AssertionError("the Python path launched a kept kind of backward")

    monkeypatch.setattr(backward_module, "run_backward", no_python_launch)
    for _ in range(2):
        dh, dweight = backward_module.launch_backward(residual_out, w, rstd, dy, None, offset, dres)
        assert torch.equal(dh, first[0]) and dh.dtype == residual_out.dtype and dh.is_contiguous()
        assert (dweight is None) == (w is None) and (w is None or torch.equal(dweight, first[1]))
    with pytest.raises(AssertionError, match="Python path launched"):  # the plain norm's backward: its own kind
        backward_module.launch_backward(residual_out, w, rstd, dy.to(residual_out.dtype), None, offset)


@gpu_only
@pytest.mark.parametrize("case", [c for c, spec in OTHER_FORWARD_CASES.items() if spec["kind"] == "layernorm"])
def test_the_layernorm_s_backward_launches_from_c_once_kept(case, monkeypatch):
    """The LayerNorm's backward (the kernel, dweight's sum, dbias's sum) from one C call once kept, the Python path's
    numbers bit for bit, under tests/conftest.py's poison."""
    from rmsnorm import backward as backward_module
    from rmsnorm import layernorm_launchers

    spec = OTHER_FORWARD_CASES[case]
    x, w, _ = _forward_case(spec)
    bias = None if spec.get("no_bias") else 0.5 * torch.randn(x.shape[1], device="cuda", dtype=w.dtype)
    _, mean, rstd = layernorm_launchers.launch_layernorm_forward(x, w, bias, 1e-5)
    dy = torch.randn(x.shape, device="cuda", dtype=x.dtype)
    module = native_launch.extension()
    module.forget_plans()
    first = layernorm_launchers.launch_layernorm_backward(x, w, bias, mean, rstd, dy)  # Python: keeps the plans
    assert module.plans()[1] == 1 + (w is not None) + (bias is not None)

    def no_python_launch(*args, **kwargs):
        raise AssertionError("the Python path launched a kept kind of backward")

    monkeypatch.setattr(layernorm_launchers, "run_backward", no_python_launch)
    monkeypatch.setattr(backward_module, "run_backward", no_python_launch)
    for _ in range(2):
        out = layernorm_launchers.launch_layernorm_backward(x, w, bias, mean, rstd, dy)
        for got, want in zip(out, first):
            assert (got is None) == (want is None)
            assert got is None or (torch.equal(got, want) and got.dtype == want.dtype and got.is_contiguous())


@gpu_only
def test_a_launch_hook_or_another_current_device_sends_the_forward_back_to_python(monkeypatch):
    from rmsnorm import forward as forward_module

    x, w, _ = make_inputs(64, 4096, torch.bfloat16, device="cuda", seed=8)
    module = native_launch.extension()
    module.forget_plans()
    expected = forward_module.launch_forward(x, w, 1e-6)
    launches = []
    original = forward_module._run
    monkeypatch.setattr(forward_module, "_run", lambda *a, **k: launches.append(1) or original(*a, **k))
    forward_module.launch_forward(x, w, 1e-6)
    assert launches == []  # kept: from C
    monkeypatch.setattr(triton.knobs.runtime, "launch_enter_hook", lambda *args: None)  # as Proton sets one
    y, _ = forward_module.launch_forward(x, w, 1e-6)
    assert launches == [1] and torch.equal(y, expected[0])
    monkeypatch.setattr(torch._C, "_cuda_getDevice", lambda: 7)  # another device current: not ours to launch
    monkeypatch.setattr(triton.knobs.runtime, "launch_enter_hook", None)
    assert module.forward(x, w, 1e-6, 0.0, False) is None


@gpu_only
def test_the_forward_from_c_runs_under_a_cuda_graph_and_on_the_current_stream(torch_allocator):
    """With torch's allocator: outputs from at::empty, as outside the tests."""
    from rmsnorm import forward as forward_module

    x, w, _ = make_inputs(2048, 4096, torch.float16, device="cuda", seed=9)
    expected = forward_module.launch_forward(x, w, 1e-6)[0]  # Python: keeps the plan
    assert native_launch.extension().plans()[0] >= 1
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        torch.cuda._sleep(100_000_000)  # tens of ms: a launch on another stream would read x_side unwritten
        x_side = x * 1
        got = forward_module.launch_forward(x_side, w, 1e-6)[0]
    side.synchronize()
    assert torch.equal(got, expected)
    static_x, graph = x.clone(), torch.cuda.CUDAGraph()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side), torch.cuda.graph(graph):
        y_graph = forward_module.launch_forward(static_x, w, 1e-6)[0]
    static_x.copy_(x.flip(0))
    y_graph.fill_(float("nan"))
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(y_graph, expected.flip(0))


@triton.jit
def _tile_matmul_kernel(a_ptr, b_ptr, c_ptr, K, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                        BLOCK_K: tl.constexpr):
    """c (BLOCK_M, BLOCK_N) = a (BLOCK_M, K) @ b (K, BLOCK_N), row-major, one program: pipelined, much shared memory."""
    rows, cols, ks = tl.arange(0, BLOCK_M), tl.arange(0, BLOCK_N), tl.arange(0, BLOCK_K)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, K, BLOCK_K):
        a = tl.load(a_ptr + rows[:, None] * K + (k + ks)[None, :])
        b = tl.load(b_ptr + (k + ks)[:, None] * BLOCK_N + cols[None, :])
        acc = tl.dot(a, b, acc)
    tl.store(c_ptr + rows[:, None] * BLOCK_N + cols[None, :], acc)


@gpu_only
def test_a_kernel_past_48_kib_of_shared_memory_launches_natively():
    """Another kernel than the norm's (the launcher is generic) that takes more than 48 KiB of dynamic shared memory."""
    a = torch.randn(128, 1024, device="cuda", dtype=torch.float16)
    b = torch.randn(1024, 128, device="cuda", dtype=torch.float16)
    launcher = DirectLauncher(_tile_matmul_kernel)
    outputs = []
    for _ in range(2):  # a miss (Triton's binder), then a native launch
        c = torch.full((128, 128), float("nan"), device="cuda")
        launcher((0, a.data_ptr() & 15), (1,), a, b, c, 1024, 128, 128, 64, num_warps=4, num_stages=4)
        outputs.append(c)
    entry = next(iter(launcher.cache.values()))
    assert entry.kernel.metadata.shared > native_launch.DEFAULT_DYNAMIC_SHARED and entry.plan
    torch.testing.assert_close(outputs[1], outputs[0], rtol=0, atol=0)
    torch.testing.assert_close(outputs[1], a.float() @ b.float(), rtol=1e-2, atol=1e-1)


@triton.jit
def _copy_through_a_descriptor_kernel(x_ptr, y_ptr, N, BLOCK: tl.constexpr):
    """y = x (N, N) float32, block by block through device-made tensor descriptors (which take global scratch)."""
    x_desc = tl.make_tensor_descriptor(x_ptr, shape=[N, N], strides=[N, 1], block_shape=[BLOCK, BLOCK])
    y_desc = tl.make_tensor_descriptor(y_ptr, shape=[N, N], strides=[N, 1], block_shape=[BLOCK, BLOCK])
    i, j = tl.program_id(0) * BLOCK, tl.program_id(1) * BLOCK
    y_desc.store([i, j], x_desc.load([i, j]))


@gpu_only
def test_a_kernel_with_global_scratch_gets_it_per_launch():
    triton.set_allocator(lambda size, align, stream: torch.empty(size, dtype=torch.int8, device="cuda"))
    x = torch.randn(256, 256, device="cuda")
    launcher = DirectLauncher(_copy_through_a_descriptor_kernel)
    outputs = []
    for _ in range(2):
        y = torch.full_like(x, float("nan"))
        launcher((0,), (4, 4), x, y, 256, 64)
        outputs.append(y)
    entry = next(iter(launcher.cache.values()))
    assert entry.scratch and entry.plan
    assert torch.equal(outputs[0], x) and torch.equal(outputs[1], x)


@two_gpus
def test_the_native_launch_runs_on_the_second_gpu_and_not_across_devices():
    x0, gamma0, _ = make_inputs(64, 4096, torch.bfloat16, device="cuda:0", seed=5)
    x1, gamma1 = x0.to("cuda:1"), gamma0.to("cuda:1")
    y0 = rmsnorm.rmsnorm_fast(x0, gamma0)
    with torch.cuda.device(1):
        for _ in range(3):  # a miss, then native launches of cuda:1's own compiled kernel
            y1 = rmsnorm.rmsnorm_fast(x1, gamma1)
        assert launch_path() == "native"
    assert torch.equal(y1.cpu(), y0.cpu())
    with torch.cuda.device(0):  # tensors on cuda:1 while cuda:0 is current: Triton's binder, every time
        assert torch.equal(rmsnorm.rmsnorm_fast(x1, gamma1).cpu(), y0.cpu())
    from rmsnorm.forward import _launch as forward_launcher

    planned = {key[0] for key, entry in forward_launcher.cache.items() if entry.plan}
    assert planned >= {1}

"""The C++ floor: what any C++ route costs the host here, a ``torch.library`` C++ op launching an empty kernel.

The old floor (:mod:`rmsnorm_lab.floor`) is the fast kernels behind a bare autograd.Function, each
launched through Triton's ``kernel[grid]``. This one is what a norm shipped as a C++ operator (vLLM's,
SGLang's) would cost the host with a kernel that takes no time: :class:`CppFloorRMSNorm`, a
``torch.nn.RMSNorm`` subclass shaped as :class:`rmsnorm.FastRMSNorm` is (the same shape check, rows,
one ``torch.autograd.Function``), whose Function calls two operators defined in C++ with
``TORCH_LIBRARY`` and called through the dispatcher:

- ``rmsnorm_cpp_floor::forward(x, weight, eps) -> (y, rstd)``: allocates y and rstd as the fast path
  does, launches one empty kernel on torch's current stream;
- ``rmsnorm_cpp_floor::backward(x, weight, rstd, dy, programs) -> (dx, dweight)``: allocates dx, the
  (programs, N) float32 partials and dweight, launches the empty kernel twice (the fused backward
  and the dgamma reduction).

The empty kernel is a ``@triton.jit`` function with no body, compiled by Triton; the operators launch
its CUfunction with ``cuLaunchKernelEx`` (libcuda opened with dlopen), as rmsnorm's native launcher
does. Its outputs are garbage: the benchmark times it, it never checks it. Built at first use with
``torch.utils.cpp_extension.load_inline`` (a CUDA torch, CUDA_HOME and a compiler; about a minute).

Source: issue 41 ("a new floor"); PyTorch "Custom C++ and CUDA Operators" (TORCH_LIBRARY).
"""

from __future__ import annotations

import functools

import torch
import triton

from rmsnorm import ContractError

SOURCE = r"""
#include <ATen/ATen.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/library.h>
#include <cuda.h>
#include <dlfcn.h>

namespace {

using LaunchKernelEx = CUresult (*)(const CUlaunchConfig *, CUfunction, void **, void **);
LaunchKernelEx launch_kernel_ex = nullptr;
CUfunction empty_kernel = nullptr;

void set_kernel(int64_t handle) {
  void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  TORCH_CHECK(lib != nullptr, "rmsnorm_cpp_floor: cannot open libcuda.so.1");
  launch_kernel_ex = reinterpret_cast<LaunchKernelEx>(dlsym(lib, "cuLaunchKernelEx"));
  TORCH_CHECK(launch_kernel_ex != nullptr, "rmsnorm_cpp_floor: no cuLaunchKernelEx");
  empty_kernel = reinterpret_cast<CUfunction>(handle);
}

// The empty kernel takes four pointers, then Triton's global and profile scratch pointers.
void launch_empty(const at::Tensor &a, const at::Tensor &b, const at::Tensor &c, const at::Tensor &d) {
  TORCH_CHECK(empty_kernel != nullptr, "rmsnorm_cpp_floor: set_kernel was not called");
  uint64_t slots[6] = {reinterpret_cast<uint64_t>(a.data_ptr()), reinterpret_cast<uint64_t>(b.data_ptr()),
                       reinterpret_cast<uint64_t>(c.data_ptr()), reinterpret_cast<uint64_t>(d.data_ptr()), 0, 0};
  void *params[6];
  for (int i = 0; i < 6; ++i) params[i] = &slots[i];
  CUlaunchConfig config = {};
  config.gridDimX = config.gridDimY = config.gridDimZ = 1;
  config.blockDimX = 128;
  config.blockDimY = config.blockDimZ = 1;
  config.hStream = c10::cuda::getCurrentCUDAStream(a.device().index()).stream();
  CUresult status = launch_kernel_ex(&config, empty_kernel, params, nullptr);
  TORCH_CHECK(status == CUDA_SUCCESS, "rmsnorm_cpp_floor: cuLaunchKernelEx failed: ", static_cast<int>(status));
}

std::tuple<at::Tensor, at::Tensor> forward(const at::Tensor &x, const at::Tensor &weight, double eps) {
  auto y = at::empty_like(x);
  auto rstd = at::empty({x.size(0)}, x.options().dtype(at::kFloat));
  launch_empty(x, weight, y, rstd);
  return {y, rstd};
}

std::tuple<at::Tensor, at::Tensor> backward(const at::Tensor &x, const at::Tensor &weight, const at::Tensor &rstd,
                                            const at::Tensor &dy, int64_t programs) {
  auto dx = at::empty_like(x);
  auto partial = at::empty({programs, x.size(1)}, x.options().dtype(at::kFloat));
  auto dweight = at::empty_like(weight);
  launch_empty(x, rstd, dy, dx);
  launch_empty(partial, dweight, partial, dweight);
  return {dx, dweight};
}

}  // namespace

TORCH_LIBRARY(rmsnorm_cpp_floor, m) {
  m.def("set_kernel(int handle) -> ()", &set_kernel);
  m.def("forward(Tensor x, Tensor weight, float eps) -> (Tensor, Tensor)");
  m.def("backward(Tensor x, Tensor weight, Tensor rstd, Tensor dy, int programs) -> (Tensor, Tensor)");
}

TORCH_LIBRARY_IMPL(rmsnorm_cpp_floor, CUDA, m) {
  m.impl("forward", &forward);
  m.impl("backward", &backward);
}
"""


@triton.jit
def rmsnorm_bench_empty_kernel(a_ptr, b_ptr, c_ptr, d_ptr):
    """Nothing: the kernel a launch costs with no work in it (four pointers, as the floor's operators pass)."""
    pass


@functools.cache
def build() -> None:
    """Compile the operators (once per process; torch caches the build) and hand them the empty kernel.

    Raises:
        ContractError: no CUDA GPU.
        RuntimeError, OSError: the compiler, ninja or CUDA_HOME is missing, or the build fails.
    """
    if not torch.cuda.is_available():
        raise ContractError("the C++ floor launches on a CUDA GPU; there is none here")
    from torch.utils import cpp_extension

    cpp_extension.load_inline(name="rmsnorm_cpp_floor", cpp_sources=SOURCE, with_cuda=True, is_python_module=False,
                              extra_ldflags=["-ldl"], verbose=False)
    t = torch.empty(16, device="cuda")
    compiled = rmsnorm_bench_empty_kernel[(1,)](t, t, t, t)
    torch.ops.rmsnorm_cpp_floor.set_kernel(compiled.function)


@functools.cache
def _programs(index: int) -> int:
    """Rows of the backward's dgamma partials: one per SM, as the fast path's persistent grid has at most."""
    return torch.cuda.get_device_properties(index).multi_processor_count


class CppFloorFunction(torch.autograd.Function):
    """y = the C++ floor's forward operator (garbage); backward → the backward operator's (dx, dweight)."""

    @staticmethod
    def forward(ctx, x, weight, eps):
        y, rstd = torch.ops.rmsnorm_cpp_floor.forward.default(x, weight, eps)
        ctx.save_for_backward(x, weight, rstd)
        return y

    @staticmethod
    def backward(ctx, dy):
        x, weight, rstd = ctx.saved_tensors
        dx, dweight = torch.ops.rmsnorm_cpp_floor.backward.default(x, weight, rstd, dy, _programs(x.device.index))
        return dx, dweight, None


class CppFloorRMSNorm(torch.nn.RMSNorm):
    """A ``torch.nn.RMSNorm`` whose call goes to the C++ floor's operators, shaped as FastRMSNorm's call is."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        build()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.dim() == 0 or x.shape[-1] != self.normalized_shape[0]:
            raise ContractError(f"x's last dimension must be N = {self.normalized_shape[0]}; got {tuple(x.shape)}")
        rows = x if x.dim() == 2 else x.reshape(-1, x.shape[-1])
        y = CppFloorFunction.apply(rows, self.weight, self.eps)
        return y if rows is x else y.view(x.shape)

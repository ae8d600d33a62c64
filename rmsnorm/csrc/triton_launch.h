// What csrc/triton_launch.cpp (the generic launch) shares with csrc/fast_path.cpp (the forward's and backward's
// own path):
// the packed parameters, a compiled kernel's launch plan, and the launch through cuLaunchKernelEx.
#pragma once

#include <Python.h>

#include <cstdint>

#include "cuda.h"

namespace rmsnorm_launch {

constexpr int kMaxParams = 64;  // kernel arguments + the two scratch pointers

// The kernel's parameters as the driver reads them: one 8-byte slot each, `sizes` bytes of it used.
struct Params {
  uint64_t slots[kMaxParams];
  int sizes[kMaxParams];
  void *pointers[kMaxParams];
  int count = 0;
};

// One compiled kernel's launch plan (rmsnorm/native_launch.py, plan_for): `codes` is borrowed from the plan tuple.
struct Plan {
  PyObject *codes = nullptr;
  CUfunction function = nullptr;
  long num_warps = 4;
  long num_ctas = 1;
  long shared = 0;
  bool pdl = false;
  bool cooperative = false;
};

// plan = (codes: bytes, function: int, num_warps, num_ctas, shared_bytes, launch_pdl, launch_cooperative_grid).
// False with a Python error set when it is not one.
bool parse_plan(PyObject *plan, Plan *out);

// The `count` argument slots packed so far, then the two scratch pointers Triton 3.6 and 3.7 append; sets pointers.
void finish_params(Params *params, int count, uint64_t global_scratch, uint64_t profile_scratch);

// cuLaunchKernelEx as Triton's own launcher configures it (an empty grid launches nothing). False with a Python
// error set when the driver cannot be opened or refuses the launch.
bool launch_plan(const Plan &plan, const long dims[3], uint64_t stream, Params *params);

}  // namespace rmsnorm_launch

// The forward's and backward's own path (csrc/fast_path.cpp): its module functions, added to the extension's.
extern PyMethodDef rmsnorm_forward_methods[];

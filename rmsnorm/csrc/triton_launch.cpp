// Launch a kernel Triton has already compiled, through the driver's cuLaunchKernelEx, below Triton's binder.
//
// Generic over kernels: the caller hands over a plan built once per compiled kernel (rmsnorm/native_launch.py)
// and, on every call, the grid, the stream and the kernel's arguments in the kernel's order, constexprs included.
// The plan's codes say how each argument is packed (one character each, as Python's struct module spells them):
//
//   x  a constexpr: compiled in, not passed       P  a pointer: a tensor (its data_ptr()), an int, or None (0)
//   b  int8 (Triton's i1 and i8)   B  uint8       h  int16   H  uint16   i  int32   I  uint32   q  int64   Q  uint64
//   e  float16   E  bfloat16 (truncated, as Triton packs it)   f  float32   d  float64
//
// After the kernel's own arguments come the two pointers Triton 3.6 and 3.7 append to every kernel: global
// scratch and profile scratch (0 when the kernel needs none). The launch configuration follows Triton's own
// launcher (triton/backends/nvidia/driver.c, _launch): block = 32 · num_warps threads, grid x multiplied by
// num_ctas, a cluster of (num_ctas, 1, 1) with the SPREAD scheduling policy when num_ctas > 1, programmatic
// stream serialization (PDL) and cooperative launch when the kernel was compiled for them.
//
// The driver is opened with dlopen at the first launch, as Triton's launcher opens it, so this file compiles on
// a machine without a GPU driver (it needs Python.h and the cuda.h Triton ships), and pack() can be tested there.

#include "triton_launch.h"

#include <dlfcn.h>

#include <cstring>

using rmsnorm_launch::kMaxParams;
using rmsnorm_launch::Params;
using rmsnorm_launch::Plan;
using rmsnorm_launch::finish_params;
using rmsnorm_launch::launch_plan;
using rmsnorm_launch::parse_plan;

namespace {

using LaunchKernelEx = CUresult (*)(const CUlaunchConfig *, CUfunction, void **, void **);
using GetErrorString = CUresult (*)(CUresult, const char **);
using FuncGetAttribute = CUresult (*)(int *, CUfunction_attribute, CUfunction);
using FuncSetAttribute = CUresult (*)(CUfunction, CUfunction_attribute, int);

struct Driver {
  LaunchKernelEx launch_kernel_ex = nullptr;
  GetErrorString get_error_string = nullptr;
  FuncGetAttribute func_get_attribute = nullptr;
  FuncSetAttribute func_set_attribute = nullptr;
};
Driver driver;

bool load_driver() {
  if (driver.launch_kernel_ex != nullptr) return true;
  void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);  // kept open for the life of the process
  if (lib == nullptr) {
    PyErr_Format(PyExc_RuntimeError, "rmsnorm native launch: cannot open libcuda.so.1 (%s)", dlerror());
    return false;
  }
  driver.get_error_string = reinterpret_cast<GetErrorString>(dlsym(lib, "cuGetErrorString"));
  driver.func_get_attribute = reinterpret_cast<FuncGetAttribute>(dlsym(lib, "cuFuncGetAttribute"));
  driver.func_set_attribute = reinterpret_cast<FuncSetAttribute>(dlsym(lib, "cuFuncSetAttribute"));
  auto launch = reinterpret_cast<LaunchKernelEx>(dlsym(lib, "cuLaunchKernelEx"));
  if (launch == nullptr || driver.get_error_string == nullptr || driver.func_get_attribute == nullptr ||
      driver.func_set_attribute == nullptr) {
    PyErr_SetString(PyExc_RuntimeError,
                    "rmsnorm native launch: libcuda.so.1 lacks cuLaunchKernelEx (a driver older than CUDA 12)");
    return false;
  }
  driver.launch_kernel_ex = launch;
  return true;
}

bool check(CUresult status, const char *what) {
  if (status == CUDA_SUCCESS) return true;
  const char *message = nullptr;
  driver.get_error_string(status, &message);
  PyErr_Format(PyExc_RuntimeError, "rmsnorm native launch: %s failed: %s (CUresult %d)", what,
               message ? message : "unknown error", static_cast<int>(status));
  return false;
}

PyObject *data_ptr_name = nullptr;  // interned "data_ptr"

bool pointer_of(PyObject *obj, uint64_t *out) {
  if (obj == Py_None) {
    *out = 0;
    return true;
  }
  if (PyLong_Check(obj)) {
    *out = PyLong_AsUnsignedLongLong(obj);
    return !PyErr_Occurred();
  }
  PyObject *ptr = PyObject_CallMethodNoArgs(obj, data_ptr_name);
  if (ptr == nullptr) return false;
  *out = PyLong_AsUnsignedLongLong(ptr);
  Py_DECREF(ptr);
  return !PyErr_Occurred();
}

bool integer_in_range(PyObject *obj, long long low, unsigned long long high, long long *out, char code) {
  int overflow = 0;
  long long value = PyLong_AsLongLongAndOverflow(obj, &overflow);
  if (value == -1 && PyErr_Occurred()) return false;
  if (overflow > 0 && code == 'Q') {  // past int64: a uint64 may still hold it
    unsigned long long u = PyLong_AsUnsignedLongLong(obj);
    if (PyErr_Occurred()) return false;
    std::memcpy(out, &u, 8);
    return true;
  }
  if (overflow != 0 || value < low || (value > 0 && static_cast<unsigned long long>(value) > high)) {
    PyErr_Format(PyExc_OverflowError, "rmsnorm native launch: %R does not fit the kernel's '%c' argument", obj,
                 code);
    return false;
  }
  *out = value;
  return true;
}

// One argument into its 8-byte slot (little-endian: a narrower type sits in the slot's first bytes, where the
// driver reads it). Returns the argument's size in bytes, 0 for a constexpr, -1 with a Python error set.
int pack_one(char code, PyObject *obj, uint64_t *slot) {
  *slot = 0;
  long long v = 0;
  switch (code) {
    case 'x':
      return 0;
    case 'P':
      return pointer_of(obj, slot) ? 8 : -1;
    case 'b':
      if (!integer_in_range(obj, INT8_MIN, INT8_MAX, &v, code)) return -1;
      *reinterpret_cast<int8_t *>(slot) = static_cast<int8_t>(v);
      return 1;
    case 'B':
      if (!integer_in_range(obj, 0, UINT8_MAX, &v, code)) return -1;
      *reinterpret_cast<uint8_t *>(slot) = static_cast<uint8_t>(v);
      return 1;
    case 'h':
      if (!integer_in_range(obj, INT16_MIN, INT16_MAX, &v, code)) return -1;
      *reinterpret_cast<int16_t *>(slot) = static_cast<int16_t>(v);
      return 2;
    case 'H':
      if (!integer_in_range(obj, 0, UINT16_MAX, &v, code)) return -1;
      *reinterpret_cast<uint16_t *>(slot) = static_cast<uint16_t>(v);
      return 2;
    case 'i':
      if (!integer_in_range(obj, INT32_MIN, INT32_MAX, &v, code)) return -1;
      *reinterpret_cast<int32_t *>(slot) = static_cast<int32_t>(v);
      return 4;
    case 'I':
      if (!integer_in_range(obj, 0, UINT32_MAX, &v, code)) return -1;
      *reinterpret_cast<uint32_t *>(slot) = static_cast<uint32_t>(v);
      return 4;
    case 'q':
      if (!integer_in_range(obj, INT64_MIN, INT64_MAX, &v, code)) return -1;
      std::memcpy(slot, &v, 8);
      return 8;
    case 'Q':
      if (!integer_in_range(obj, 0, UINT64_MAX, &v, code)) return -1;
      std::memcpy(slot, &v, 8);
      return 8;
    case 'e': {
      double d = PyFloat_AsDouble(obj);
      if (d == -1.0 && PyErr_Occurred()) return -1;
#if PY_VERSION_HEX >= 0x030B0000
      if (PyFloat_Pack2(d, reinterpret_cast<char *>(slot), 1) < 0) return -1;
#else
      if (_PyFloat_Pack2(d, reinterpret_cast<unsigned char *>(slot), 1) < 0) return -1;
#endif
      return 2;
    }
    case 'E': {
      double d = PyFloat_AsDouble(obj);
      if (d == -1.0 && PyErr_Occurred()) return -1;
      float f = static_cast<float>(d);
      uint32_t bits;
      std::memcpy(&bits, &f, 4);
      *reinterpret_cast<uint16_t *>(slot) = static_cast<uint16_t>(bits >> 16);
      return 2;
    }
    case 'f': {
      double d = PyFloat_AsDouble(obj);
      if (d == -1.0 && PyErr_Occurred()) return -1;
      float f = static_cast<float>(d);
      std::memcpy(slot, &f, 4);
      return 4;
    }
    case 'd': {
      double d = PyFloat_AsDouble(obj);
      if (d == -1.0 && PyErr_Occurred()) return -1;
      std::memcpy(slot, &d, 8);
      return 8;
    }
    default:
      PyErr_Format(PyExc_ValueError, "rmsnorm native launch: unknown argument code '%c'", code);
      return -1;
  }
}

// codes (bytes) and args (tuple) → params: every non-constexpr argument, then the two scratch pointers.
bool pack_all(PyObject *codes, PyObject *args, uint64_t global_scratch, uint64_t profile_scratch, Params *params) {
  if (!PyBytes_Check(codes) || !PyTuple_Check(args)) {
    PyErr_SetString(PyExc_TypeError, "rmsnorm native launch: codes must be bytes and args a tuple");
    return false;
  }
  Py_ssize_t n = PyBytes_GET_SIZE(codes);
  if (PyTuple_GET_SIZE(args) != n) {
    PyErr_Format(PyExc_TypeError, "rmsnorm native launch: the kernel takes %zd arguments, %zd were given", n,
                 PyTuple_GET_SIZE(args));
    return false;
  }
  const char *code = PyBytes_AS_STRING(codes);
  int count = 0;
  for (Py_ssize_t i = 0; i < n; ++i) {
    if (count >= kMaxParams - 2) {
      PyErr_SetString(PyExc_ValueError, "rmsnorm native launch: more kernel arguments than it packs (62)");
      return false;
    }
    int size = pack_one(code[i], PyTuple_GET_ITEM(args, i), &params->slots[count]);
    if (size < 0) return false;
    if (size > 0) params->sizes[count++] = size;
  }
  finish_params(params, count, global_scratch, profile_scratch);
  return true;
}

bool unsigned_at(PyObject *const *args, Py_ssize_t i, uint64_t *out) {
  *out = PyLong_AsUnsignedLongLong(args[i]);
  return !PyErr_Occurred();
}

// pack(codes, args, global_scratch, profile_scratch) -> bytes (scratch: pointers as the arguments are): the kernel
// parameters as the driver reads them, one after another at their own sizes (what launch() hands cuLaunchKernelEx,
// for tests).
PyObject *pack(PyObject *, PyObject *const *args, Py_ssize_t nargs) {
  if (nargs != 4) {
    PyErr_SetString(PyExc_TypeError, "pack(codes, args, global_scratch, profile_scratch)");
    return nullptr;
  }
  uint64_t global_scratch, profile_scratch;
  if (!pointer_of(args[2], &global_scratch) || !pointer_of(args[3], &profile_scratch)) return nullptr;
  Params params;
  if (!pack_all(args[0], args[1], global_scratch, profile_scratch, &params)) return nullptr;
  char buffer[kMaxParams * 8];
  Py_ssize_t length = 0;
  for (int i = 0; i < params.count; ++i) {
    std::memcpy(buffer + length, &params.slots[i], params.sizes[i]);
    length += params.sizes[i];
  }
  return PyBytes_FromStringAndSize(buffer, length);
}

}  // namespace

namespace rmsnorm_launch {

bool parse_plan(PyObject *plan, Plan *out) {
  if (!PyTuple_Check(plan) || PyTuple_GET_SIZE(plan) != 7 || !PyBytes_Check(PyTuple_GET_ITEM(plan, 0))) {
    PyErr_SetString(PyExc_TypeError,
                    "rmsnorm native launch: a plan is (codes: bytes, function, num_warps, num_ctas, shared_bytes, "
                    "launch_pdl, launch_cooperative_grid)");
    return false;
  }
  out->codes = PyTuple_GET_ITEM(plan, 0);
  out->function = reinterpret_cast<CUfunction>(PyLong_AsUnsignedLongLong(PyTuple_GET_ITEM(plan, 1)));
  out->num_warps = PyLong_AsLong(PyTuple_GET_ITEM(plan, 2));
  out->num_ctas = PyLong_AsLong(PyTuple_GET_ITEM(plan, 3));
  out->shared = PyLong_AsLong(PyTuple_GET_ITEM(plan, 4));
  if (PyErr_Occurred()) return false;  // an item that is not an int
  int pdl = PyObject_IsTrue(PyTuple_GET_ITEM(plan, 5));
  int cooperative = PyObject_IsTrue(PyTuple_GET_ITEM(plan, 6));
  if (pdl < 0 || cooperative < 0) return false;
  out->pdl = pdl;
  out->cooperative = cooperative;
  return true;
}

void finish_params(Params *params, int count, uint64_t global_scratch, uint64_t profile_scratch) {
  const uint64_t scratch[2] = {global_scratch, profile_scratch};
  for (uint64_t pointer : scratch) {
    params->slots[count] = pointer;
    params->sizes[count++] = 8;
  }
  for (int i = 0; i < count; ++i) params->pointers[i] = &params->slots[i];
  params->count = count;
}

bool launch_plan(const Plan &plan, const long dims[3], uint64_t stream, Params *params) {
  if (dims[0] * dims[1] * dims[2] == 0) return true;  // an empty grid launches nothing, as Triton's launcher
  if (!load_driver()) return false;

  CUlaunchAttribute attributes[4] = {};  // zeroed: each value union holds only the field set
  unsigned int count = 0;
  if (plan.pdl) {
    attributes[count].id = CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
    attributes[count++].value.programmaticStreamSerializationAllowed = 1;
  }
  if (plan.cooperative) {
    attributes[count].id = CU_LAUNCH_ATTRIBUTE_COOPERATIVE;
    attributes[count++].value.cooperative = 1;
  }
  if (plan.num_ctas != 1) {
    attributes[count].id = CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION;
    attributes[count].value.clusterDim.x = static_cast<unsigned int>(plan.num_ctas);
    attributes[count].value.clusterDim.y = 1;
    attributes[count++].value.clusterDim.z = 1;
    attributes[count].id = CU_LAUNCH_ATTRIBUTE_CLUSTER_SCHEDULING_POLICY_PREFERENCE;
    attributes[count++].value.clusterSchedulingPolicyPreference = CU_CLUSTER_SCHEDULING_POLICY_SPREAD;
  }
  CUlaunchConfig config = {};
  config.gridDimX = static_cast<unsigned int>(dims[0] * plan.num_ctas);
  config.gridDimY = static_cast<unsigned int>(dims[1]);
  config.gridDimZ = static_cast<unsigned int>(dims[2]);
  config.blockDimX = static_cast<unsigned int>(32 * plan.num_warps);
  config.blockDimY = 1;
  config.blockDimZ = 1;
  config.sharedMemBytes = static_cast<unsigned int>(plan.shared);
  config.hStream = reinterpret_cast<CUstream>(stream);
  config.attrs = attributes;
  config.numAttrs = count;
  CUresult status = CUDA_SUCCESS;
  Py_BEGIN_ALLOW_THREADS;
  if (plan.num_ctas == 16) {  // a cluster of 16 is non-portable (Hopper and Blackwell allow it on request)
    status = driver.func_set_attribute(plan.function, CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED, 1);
  }
  if (status == CUDA_SUCCESS) status = driver.launch_kernel_ex(&config, plan.function, params->pointers, nullptr);
  Py_END_ALLOW_THREADS;
  return check(status, "cuLaunchKernelEx");
}

}  // namespace rmsnorm_launch

namespace {

// launch(plan, grid, stream, args[, global_scratch, profile_scratch]) -> None (scratch: as in pack)
// plan = (codes: bytes, function: int, num_warps, num_ctas, shared_bytes, launch_pdl, launch_cooperative_grid)
PyObject *launch(PyObject *, PyObject *const *args, Py_ssize_t nargs) {
  if (nargs != 4 && nargs != 6) {
    PyErr_SetString(PyExc_TypeError, "launch(plan, grid, stream, args[, global_scratch, profile_scratch])");
    return nullptr;
  }
  PyObject *grid = args[1];
  if (!PyTuple_Check(grid) || PyTuple_GET_SIZE(grid) < 1 || PyTuple_GET_SIZE(grid) > 3) {
    PyErr_SetString(PyExc_TypeError, "rmsnorm native launch: grid is a tuple of 1 to 3 ints");
    return nullptr;
  }
  Plan plan;
  if (!parse_plan(args[0], &plan)) return nullptr;
  long dims[3] = {1, 1, 1};
  for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(grid); ++i) dims[i] = PyLong_AsLong(PyTuple_GET_ITEM(grid, i));
  if (PyErr_Occurred()) return nullptr;  // a grid item that is not an int
  uint64_t stream, global_scratch = 0, profile_scratch = 0;
  if (!unsigned_at(args, 2, &stream)) return nullptr;
  if (nargs == 6 && (!pointer_of(args[4], &global_scratch) || !pointer_of(args[5], &profile_scratch))) {
    return nullptr;
  }
  Params params;
  if (!pack_all(plan.codes, args[3], global_scratch, profile_scratch, &params)) return nullptr;
  if (!launch_plan(plan, dims, stream, &params)) return nullptr;
  Py_RETURN_NONE;
}

// allow_dynamic_shared(function, bytes) -> None: lets the kernel take `bytes` of dynamic shared memory, which
// past 48 KiB the driver refuses until asked (cuFuncSetAttribute); never lowers what is already allowed.
PyObject *allow_dynamic_shared(PyObject *, PyObject *const *args, Py_ssize_t nargs) {
  if (nargs != 2) {
    PyErr_SetString(PyExc_TypeError, "allow_dynamic_shared(function, bytes)");
    return nullptr;
  }
  uint64_t function;
  if (!unsigned_at(args, 0, &function)) return nullptr;
  long bytes = PyLong_AsLong(args[1]);
  if (PyErr_Occurred() || !load_driver()) return nullptr;
  CUfunction handle = reinterpret_cast<CUfunction>(function);
  int allowed = 0;
  if (!check(driver.func_get_attribute(&allowed, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, handle),
             "cuFuncGetAttribute")) {
    return nullptr;
  }
  if (allowed < bytes &&
      !check(driver.func_set_attribute(handle, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                       static_cast<int>(bytes)),
             "cuFuncSetAttribute")) {
    return nullptr;
  }
  Py_RETURN_NONE;
}

// open_driver() -> None: opens libcuda.so.1 now, so that a machine without a driver is found before a launch.
PyObject *open_driver(PyObject *, PyObject *const *, Py_ssize_t) {
  if (!load_driver()) return nullptr;
  Py_RETURN_NONE;
}

PyMethodDef methods[] = {
    {"open_driver", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(open_driver)), METH_FASTCALL,
     "open_driver(): open libcuda.so.1 and find cuLaunchKernelEx"},
    {"launch", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(launch)), METH_FASTCALL,
     "launch(plan, grid, stream, args[, global_scratch, profile_scratch]): cuLaunchKernelEx"},
    {"pack", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(pack)), METH_FASTCALL,
     "pack(codes, args, global_scratch, profile_scratch) -> bytes: the kernel parameters, as launch packs them"},
    {"allow_dynamic_shared", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(allow_dynamic_shared)),
     METH_FASTCALL, "allow_dynamic_shared(function, bytes): raise the kernel's dynamic shared memory limit"},
    {nullptr, nullptr, 0, nullptr}};

PyModuleDef module = {PyModuleDef_HEAD_INIT, "rmsnorm_triton_launch", nullptr, -1, methods};

}  // namespace

#define RMSNORM_CONCAT_(a, b) a##b
#define RMSNORM_CONCAT(a, b) RMSNORM_CONCAT_(a, b)
#define RMSNORM_STRING_(a) #a
#define RMSNORM_STRING(a) RMSNORM_STRING_(a)

PyMODINIT_FUNC RMSNORM_CONCAT(PyInit_, TORCH_EXTENSION_NAME)(void) {
  data_ptr_name = PyUnicode_InternFromString("data_ptr");
  if (data_ptr_name == nullptr) return nullptr;
  module.m_name = RMSNORM_STRING(TORCH_EXTENSION_NAME);
  PyObject *created = PyModule_Create(&module);
  if (created != nullptr && PyModule_AddFunctions(created, rmsnorm_forward_methods) < 0) Py_CLEAR(created);
  return created;
}

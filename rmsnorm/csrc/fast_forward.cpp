// The fast forward's eager launch in one C call: the cache key, the grid, both outputs and the launch.
//
// rmsnorm.forward.launch_forward (Python) does, per call: two torch.empty, the configuration, the grid, a cache
// key of sixteen items, Triton's launcher. Each is small; together they cost the host more than torch's whole
// native op. Here they are one call into C++, from a table of plans that the Python path fills (remember_forward):
// the first call of each kind of launch runs in Python, compiles through Triton's binder and hands its compiled
// kernel's plan over; later calls of that kind launch from here. A call this file has no plan for returns None,
// and the Python path runs it (and remembers it).
//
// The key holds all that Triton specialises the kernel on and all that chooses its configuration, as
// rmsnorm.forward.forward_key does: the device; x's and the weight's dtypes and addresses mod 16; x's row stride
// and N by value (so ROW_ALIGN and STATIC_N too); M's classes (== 1, a multiple of 16, past 2^31 - 1); whether
// x's rows are one dense run (config.dense_rows: a flat rule may then apply); the weight's presence; the offset.
// The outputs are allocated here, contiguous: a plan is kept only for outputs 16-byte aligned, and a call whose
// fresh outputs are not (an allocator other than torch's caching one) goes back to Python. The entry holds the
// configuration's rows per program (BLOCK_M) and grid cap (SMs x programs_per_sm), from which the grid and
// PERSISTENT follow; one plan per value of PERSISTENT.
//
// The forward kernel's arguments are x, x's row stride, w, y, y's row stride, rstd, M, N and eps, then constexprs
// and None only (the fused add's and the LayerNorm's, off here): a plan whose codes say otherwise is not kept.

#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <torch/csrc/Exceptions.h>
#include <torch/csrc/autograd/python_variable.h>

#include <cstring>
#include <limits>
#include <unordered_map>

#include "triton_launch.h"

namespace {

using rmsnorm_launch::Params;
using rmsnorm_launch::Plan;

constexpr Py_ssize_t kLeadingArguments = 9;  // x, x_row_stride, w, y, y_row_stride, rstd, M, N, eps
// Which codes each leading argument may have: pointers, integers (x when Triton compiled a 1 in), a float32.
const char *const kAllowedCodes[kLeadingArguments] = {"P", "bBhHiIqQx", "P", "P", "bBhHiIqQx", "P",
                                                      "bBhHiIqQx", "bBhHiIqQx", "f"};

struct Key {
  int64_t x_row_stride = 0;
  int64_t n = 0;
  uint64_t offset_bits = 0;
  int32_t device = 0;
  int8_t x_dtype = 0;
  int8_t w_dtype = 0;
  uint8_t x_align = 0;
  uint8_t w_align = 0;
  uint8_t m_class = 0;
  bool dense = false;
  bool has_weight = false;

  bool operator==(const Key &o) const {
    return x_row_stride == o.x_row_stride && n == o.n && offset_bits == o.offset_bits && device == o.device &&
           x_dtype == o.x_dtype && w_dtype == o.w_dtype && x_align == o.x_align && w_align == o.w_align &&
           m_class == o.m_class && dense == o.dense && has_weight == o.has_weight;
  }
};

struct KeyHash {
  size_t operator()(const Key &k) const {
    uint64_t h = static_cast<uint64_t>(k.x_row_stride) * 0x9E3779B97F4A7C15ULL;
    h ^= static_cast<uint64_t>(k.n) + 0x9E3779B97F4A7C15ULL + (h << 6) + (h >> 2);
    h ^= k.offset_bits + 0x9E3779B97F4A7C15ULL + (h << 6) + (h >> 2);
    const uint64_t small = static_cast<uint64_t>(static_cast<uint32_t>(k.device)) |
                           static_cast<uint64_t>(static_cast<uint8_t>(k.x_dtype)) << 32 |
                           static_cast<uint64_t>(static_cast<uint8_t>(k.w_dtype)) << 40 |
                           static_cast<uint64_t>(k.x_align | k.w_align << 4) << 48 |
                           static_cast<uint64_t>(k.m_class | k.dense << 3 | k.has_weight << 4) << 56;
    h ^= small + 0x9E3779B97F4A7C15ULL + (h << 6) + (h >> 2);
    return static_cast<size_t>(h);
  }
};

// One compiled kernel: its plan, and strong references to the plan tuple (which owns plan.codes) and to the
// CompiledKernel (which keeps the CUfunction loaded).
struct Slot {
  Plan plan;
  PyObject *plan_tuple = nullptr;
  PyObject *kernel = nullptr;

  void clear() {
    Py_CLEAR(plan_tuple);
    Py_CLEAR(kernel);
  }
};

struct Entry {
  int64_t block_m = 1;
  int64_t cap = 0;  // programs at most (SMs x programs_per_sm); 0: one per row block
  Slot slots[2];    // by PERSISTENT
};

std::unordered_map<Key, Entry, KeyHash> entries;

// torch._C and triton.knobs.runtime, looked up once; torch._C._cuda_getDevice and _cuda_getCurrentRawStream are
// read from torch._C at each call, as the Python path reads them (a replacement, as tests make, is seen).
PyObject *torch_c = nullptr;
PyObject *get_device_name = nullptr;
PyObject *raw_stream_name = nullptr;
PyObject *triton_runtime = nullptr;
PyObject *calls_name = nullptr;
PyObject *hook_names[2] = {nullptr, nullptr};

bool look_up_context() {
  if (triton_runtime != nullptr) return true;
  if (torch_c == nullptr) torch_c = PyImport_ImportModule("torch._C");
  if (torch_c == nullptr) return false;
  if (get_device_name == nullptr) get_device_name = PyUnicode_InternFromString("_cuda_getDevice");
  if (raw_stream_name == nullptr) raw_stream_name = PyUnicode_InternFromString("_cuda_getCurrentRawStream");
  if (get_device_name == nullptr || raw_stream_name == nullptr) return false;
  PyObject *knobs = PyImport_ImportModule("triton.knobs");
  if (knobs == nullptr) return false;
  PyObject *runtime = PyObject_GetAttrString(knobs, "runtime");
  Py_DECREF(knobs);
  calls_name = PyUnicode_InternFromString("calls");
  hook_names[0] = PyUnicode_InternFromString("launch_enter_hook");
  hook_names[1] = PyUnicode_InternFromString("launch_exit_hook");
  if (runtime == nullptr || calls_name == nullptr || hook_names[0] == nullptr || hook_names[1] == nullptr) {
    Py_XDECREF(runtime);
    return false;
  }
  triton_runtime = runtime;
  return true;
}

// As rmsnorm.launch._launch_hooks_set: a launch hook is set (a profiler such as Proton listens to launches), an
// empty HookChain being none. -1 with a Python error set.
int launch_hooks_set() {
  for (PyObject *name : hook_names) {
    PyObject *hook = PyObject_GetAttr(triton_runtime, name);
    if (hook == nullptr) return -1;
    if (hook == Py_None) {
      Py_DECREF(hook);
      continue;
    }
    PyObject *calls = PyObject_GetAttr(hook, calls_name);
    Py_DECREF(hook);
    if (calls == nullptr) {  // a hook of another kind: a hook
      PyErr_Clear();
      return 1;
    }
    int truth = PyObject_IsTrue(calls);
    Py_DECREF(calls);
    if (truth != 0) return truth;
  }
  return 0;
}

uint8_t address_class(const at::Tensor &t) { return static_cast<uint8_t>(reinterpret_cast<uintptr_t>(t.data_ptr()) & 15); }

Key key_of(const at::Tensor &x, const at::Tensor *w, double offset) {
  Key key;
  const int64_t M = x.size(0);
  key.x_row_stride = x.stride(0);
  key.n = x.size(1);
  std::memcpy(&key.offset_bits, &offset, 8);
  key.device = x.get_device();
  key.x_dtype = static_cast<int8_t>(x.scalar_type());
  key.w_dtype = static_cast<int8_t>((w ? *w : x).scalar_type());
  key.x_align = address_class(x);
  key.w_align = address_class(w ? *w : x);
  key.m_class = static_cast<uint8_t>((M == 1) | (M % 16 == 0) << 1 | (M > INT32_MAX) << 2);
  key.dense = x.is_contiguous();
  key.has_weight = w != nullptr;
  return key;
}

// The grid (P programs) and PERSISTENT, as rmsnorm.config.grid_size makes them.
int64_t programs(const Entry &entry, int64_t M, bool *persistent) {
  const int64_t row_blocks = (M + entry.block_m - 1) / entry.block_m;
  int64_t p = entry.cap > 0 && entry.cap < row_blocks ? entry.cap : row_blocks;
  if (p < 1) p = 1;
  *persistent = p < row_blocks;
  return p;
}

// An integer or float argument into its slot, at the width its code says (csrc/triton_launch.cpp, pack_one).
// Returns the bytes used, 0 for a constexpr.
int pack_value(char code, int64_t integer, double real, uint64_t *slot) {
  *slot = 0;
  switch (code) {
    case 'x':
      return 0;
    case 'P':
    case 'q':
    case 'Q':
      std::memcpy(slot, &integer, 8);
      return 8;
    case 'i':
    case 'I': {
      int32_t v = static_cast<int32_t>(integer);
      std::memcpy(slot, &v, 4);
      return 4;
    }
    case 'h':
    case 'H': {
      int16_t v = static_cast<int16_t>(integer);
      std::memcpy(slot, &v, 2);
      return 2;
    }
    case 'b':
    case 'B': {
      int8_t v = static_cast<int8_t>(integer);
      std::memcpy(slot, &v, 1);
      return 1;
    }
    default: {  // 'f', the only other code a plan is kept with (kAllowedCodes)
      float f = static_cast<float>(real);
      std::memcpy(slot, &f, 4);
      return 4;
    }
  }
}

// Whether an integer fits the width of its code (Triton compiled the kernel for the class the key holds, but a
// row stride past 2^31 under an i32 code must never be truncated).
bool fits(char code, int64_t v) {
  switch (code) {
    case 'i': return v >= INT32_MIN && v <= INT32_MAX;
    case 'I': return v >= 0 && v <= static_cast<int64_t>(UINT32_MAX);
    case 'h': return v >= INT16_MIN && v <= INT16_MAX;
    case 'H': return v >= 0 && v <= UINT16_MAX;
    case 'b': return v >= INT8_MIN && v <= INT8_MAX;
    case 'B': return v >= 0 && v <= UINT8_MAX;
    case 'x': return v == 1;  // Triton compiles in an integer argument of 1, and only that
    default: return true;
  }
}

// The kernel's parameters for one launch; false (no error set) when a value does not fit its code.
bool pack_forward(const Plan &plan, const at::Tensor &x, const at::Tensor *w, const at::Tensor &y,
                  const at::Tensor &rstd, double eps, Params *params) {
  const char *codes = PyBytes_AS_STRING(plan.codes);
  const int64_t M = x.size(0), N = x.size(1);
  auto address = [](const at::Tensor &t) { return static_cast<int64_t>(reinterpret_cast<uintptr_t>(t.data_ptr())); };
  const int64_t values[kLeadingArguments] = {address(x), x.stride(0), address(w ? *w : x), address(y), y.stride(0),
                                             address(rstd), M, N, 0};
  int count = 0;
  for (Py_ssize_t i = 0; i < kLeadingArguments; ++i) {
    if (codes[i] != 'P' && codes[i] != 'f' && !fits(codes[i], values[i])) return false;
    const int size = pack_value(codes[i], values[i], eps, &params->slots[count]);
    if (size > 0) params->sizes[count++] = size;
  }
  rmsnorm_launch::finish_params(params, count, 0, 0);
  return true;
}

bool unpack(PyObject *obj, const at::Tensor **out) {
  if (obj == Py_None) {
    *out = nullptr;
    return true;
  }
  if (!THPVariable_Check(obj)) return false;
  *out = &THPVariable_Unpack(obj);
  // key_of reads strides and data_ptr(), which throw for a sparse or storage-less tensor: never ours to launch
  return (*out)->layout() == at::kStrided && (*out)->has_storage();
}

// Strong references to a slot's plan tuple and kernel for the length of one call: Python code runs between the
// look-up and the launch (torch._C's queries, the hooks, the allocator) and the launch releases the GIL, so a
// forget_forward or remember_forward meanwhile must not free the plan's codes under it.
struct Held {
  Plan plan;
  PyObject *plan_tuple = nullptr;
  PyObject *kernel = nullptr;
  explicit Held(const Slot &slot) : plan(slot.plan), plan_tuple(slot.plan_tuple), kernel(slot.kernel) {
    Py_XINCREF(plan_tuple);
    Py_XINCREF(kernel);
  }
  ~Held() {
    Py_XDECREF(plan_tuple);
    Py_XDECREF(kernel);
  }
  Held(const Held &) = delete;
  Held &operator=(const Held &) = delete;
};

// The entry's slot for this call, or nullptr (a miss); *p: the grid.
Slot *look_up(const at::Tensor &x, const at::Tensor *w, double offset, int64_t *p) {
  auto found = entries.find(key_of(x, w, offset));
  if (found == entries.end()) return nullptr;
  bool persistent = false;
  *p = programs(found->second, x.size(0), &persistent);
  Slot &slot = found->second.slots[persistent];
  return slot.plan_tuple != nullptr ? &slot : nullptr;
}

bool floats(PyObject *const *args, double *eps, double *offset) {
  *eps = PyFloat_AsDouble(args[2]);
  if (*eps == -1.0 && PyErr_Occurred()) return false;
  *offset = PyFloat_AsDouble(args[3]);
  return !(*offset == -1.0 && PyErr_Occurred());
}

// forward(x, weight, eps, offset, poison) -> (y, rstd) launched on the current stream, or None: no plan for this
// launch, or tensors it does not take (not CUDA, not on the current device, not 2-D), or a launch hook set. x (M, N)
// with M >= 1 and weight (N,) or None, checked by the caller (rmsnorm.contract.check_fast_inputs). poison: the
// outputs filled with NaN before the launch (tests: rmsnorm.testing.poisoned_outputs).
PyObject *forward(PyObject *, PyObject *const *args, Py_ssize_t nargs) {
  if (nargs != 5) {
    PyErr_SetString(PyExc_TypeError, "forward(x, weight, eps, offset, poison)");
    return nullptr;
  }
  HANDLE_TH_ERRORS  // every ATen call below: torch's errors as torch raises them, never a C++ exception out of here
  const int poison = PyObject_IsTrue(args[4]);
  if (poison < 0) return nullptr;
  const at::Tensor *x = nullptr, *w = nullptr;
  if (!unpack(args[0], &x) || x == nullptr || !unpack(args[1], &w)) Py_RETURN_NONE;
  if (!x->is_cuda() || x->dim() != 2 || x->size(0) == 0) Py_RETURN_NONE;
  double eps, offset;
  if (!floats(args, &eps, &offset)) return nullptr;
  int64_t p = 0;
  Slot *slot = look_up(*x, w, offset, &p);
  if (slot == nullptr) Py_RETURN_NONE;
  const Held held(*slot);  // slot is not read again
  if (!look_up_context()) return nullptr;
  PyObject *current = PyObject_CallMethodNoArgs(torch_c, get_device_name);
  if (current == nullptr) return nullptr;
  const long device = PyLong_AsLong(current);
  Py_DECREF(current);
  if (device == -1 && PyErr_Occurred()) return nullptr;
  if (device != x->get_device()) Py_RETURN_NONE;  // the compiled kernel's handle belongs to its device
  const int hooks = launch_hooks_set();
  if (hooks < 0) return nullptr;
  if (hooks > 0) Py_RETURN_NONE;
  PyObject *index = PyLong_FromLong(device);
  if (index == nullptr) return nullptr;
  PyObject *stream_obj = PyObject_CallMethodOneArg(torch_c, raw_stream_name, index);
  Py_DECREF(index);
  if (stream_obj == nullptr) return nullptr;
  const uint64_t stream = PyLong_AsUnsignedLongLong(stream_obj);
  Py_DECREF(stream_obj);
  if (PyErr_Occurred()) return nullptr;

  const int64_t M = x->size(0), N = x->size(1);
  at::Tensor y = at::empty({M, N}, x->options());
  at::Tensor rstd = at::empty({M}, x->options().dtype(at::kFloat));
  if (poison) {
    y.fill_(std::numeric_limits<double>::quiet_NaN());
    rstd.fill_(std::numeric_limits<double>::quiet_NaN());
  }
  if (address_class(y) != 0 || address_class(rstd) != 0) Py_RETURN_NONE;  // the plans are for aligned outputs
  Params params;
  if (!pack_forward(held.plan, *x, w, y, rstd, eps, &params)) Py_RETURN_NONE;
  const long dims[3] = {static_cast<long>(p), 1, 1};
  if (!rmsnorm_launch::launch_plan(held.plan, dims, stream, &params)) return nullptr;
  PyObject *out = PyTuple_New(2);
  if (out == nullptr) return nullptr;
  PyTuple_SET_ITEM(out, 0, THPVariable_Wrap(std::move(y)));
  if (PyTuple_GET_ITEM(out, 0) != nullptr) PyTuple_SET_ITEM(out, 1, THPVariable_Wrap(std::move(rstd)));
  if (PyTuple_GET_ITEM(out, 0) == nullptr || PyTuple_GET_ITEM(out, 1) == nullptr) {
    Py_DECREF(out);
    return nullptr;
  }
  return out;
  END_HANDLE_TH_ERRORS
}

// remember_forward(x, weight, offset, y, rstd, plan, block_m, cap, kernel) -> bool: keep the plan of the kernel
// the Python path has just launched for these tensors (rmsnorm.native_launch.remember_forward), under this call's
// key; False, keeping nothing, where this file could not launch it: outputs not 16-byte aligned or not
// contiguous, or codes other than the forward's (kAllowedCodes, then constexprs).
PyObject *remember_forward(PyObject *, PyObject *const *args, Py_ssize_t nargs) {
  if (nargs != 9) {
    PyErr_SetString(PyExc_TypeError, "remember_forward(x, weight, offset, y, rstd, plan, block_m, cap, kernel)");
    return nullptr;
  }
  HANDLE_TH_ERRORS
  const at::Tensor *x = nullptr, *w = nullptr, *y = nullptr, *rstd = nullptr;
  if (!unpack(args[0], &x) || x == nullptr || !unpack(args[1], &w) || !unpack(args[3], &y) || y == nullptr ||
      !unpack(args[4], &rstd) || rstd == nullptr) {
    PyErr_SetString(PyExc_TypeError, "remember_forward: x, y and rstd must be strided tensors, weight one or None");
    return nullptr;
  }
  if (x->dim() != 2 || x->size(0) == 0) {
    PyErr_SetString(PyExc_ValueError, "remember_forward: x must be (M, N) with M >= 1");
    return nullptr;
  }
  const double offset = PyFloat_AsDouble(args[2]);
  if (offset == -1.0 && PyErr_Occurred()) return nullptr;
  Plan plan;
  if (!rmsnorm_launch::parse_plan(args[5], &plan)) return nullptr;
  const int64_t block_m = PyLong_AsLongLong(args[6]), cap = PyLong_AsLongLong(args[7]);
  if (PyErr_Occurred()) return nullptr;
  if (block_m < 1 || cap < 0) {
    PyErr_SetString(PyExc_ValueError, "remember_forward: block_m >= 1 and cap >= 0");
    return nullptr;
  }
  const int64_t N = x->size(1);
  if (y->dim() != 2 || y->size(0) != x->size(0) || y->size(1) != N || y->stride(0) != N || rstd->dim() != 1 ||
      rstd->size(0) != x->size(0) || address_class(*y) != 0 || address_class(*rstd) != 0) {
    Py_RETURN_FALSE;
  }
  const Py_ssize_t n_codes = PyBytes_GET_SIZE(plan.codes);
  const char *codes = PyBytes_AS_STRING(plan.codes);
  if (n_codes < kLeadingArguments) Py_RETURN_FALSE;
  for (Py_ssize_t i = 0; i < n_codes; ++i) {
    if (i < kLeadingArguments ? std::strchr(kAllowedCodes[i], codes[i]) == nullptr : codes[i] != 'x') {
      Py_RETURN_FALSE;
    }
  }
  Entry &entry = entries[key_of(*x, w, offset)];
  if (entry.block_m != block_m || entry.cap != cap) {  // a configuration other than the kept one's: start afresh
    entry.slots[0].clear();
    entry.slots[1].clear();
    entry.block_m = block_m;
    entry.cap = cap;
  }
  bool persistent = false;
  programs(entry, x->size(0), &persistent);
  Slot &slot = entry.slots[persistent];
  slot.clear();
  Py_INCREF(args[5]);
  Py_INCREF(args[8]);
  slot.plan_tuple = args[5];
  slot.kernel = args[8];
  slot.plan = plan;
  Py_RETURN_TRUE;
  END_HANDLE_TH_ERRORS
}

// forward_params(x, weight, eps, offset, y, rstd) -> (programs, parameters: bytes) or None: what forward would
// hand the driver for these tensors and outputs (any device: for tests on a machine without a GPU).
PyObject *forward_params(PyObject *, PyObject *const *args, Py_ssize_t nargs) {
  if (nargs != 6) {
    PyErr_SetString(PyExc_TypeError, "forward_params(x, weight, eps, offset, y, rstd)");
    return nullptr;
  }
  HANDLE_TH_ERRORS
  const at::Tensor *x = nullptr, *w = nullptr, *y = nullptr, *rstd = nullptr;
  if (!unpack(args[0], &x) || x == nullptr || !unpack(args[1], &w) || !unpack(args[4], &y) || y == nullptr ||
      !unpack(args[5], &rstd) || rstd == nullptr) {
    PyErr_SetString(PyExc_TypeError, "forward_params: x, y and rstd must be strided tensors, weight one or None");
    return nullptr;
  }
  double eps, offset;
  if (!floats(args, &eps, &offset)) return nullptr;
  if (x->dim() != 2 || x->size(0) == 0) Py_RETURN_NONE;
  int64_t p = 0;
  Slot *slot = look_up(*x, w, offset, &p);
  if (slot == nullptr) Py_RETURN_NONE;
  Params params;
  if (!pack_forward(slot->plan, *x, w, *y, *rstd, eps, &params)) Py_RETURN_NONE;
  char buffer[rmsnorm_launch::kMaxParams * 8];
  Py_ssize_t length = 0;
  for (int i = 0; i < params.count; ++i) {
    std::memcpy(buffer + length, &params.slots[i], params.sizes[i]);
    length += params.sizes[i];
  }
  PyObject *bytes = PyBytes_FromStringAndSize(buffer, length);
  if (bytes == nullptr) return nullptr;
  return Py_BuildValue("(LN)", static_cast<long long>(p), bytes);
  END_HANDLE_TH_ERRORS
}

// forget_forward() -> None: drop every plan (and the references they hold).
PyObject *forget_forward(PyObject *, PyObject *const *, Py_ssize_t) {
  // out of the table first: a reference dropped below may run Python code that reaches the table again
  std::unordered_map<Key, Entry, KeyHash> dropped;
  dropped.swap(entries);
  for (auto &item : dropped) {
    item.second.slots[0].clear();
    item.second.slots[1].clear();
  }
  Py_RETURN_NONE;
}

// forward_plans() -> int: how many plans are kept.
PyObject *forward_plans(PyObject *, PyObject *const *, Py_ssize_t) {
  long count = 0;
  for (const auto &item : entries) count += (item.second.slots[0].plan_tuple != nullptr) +
                                           (item.second.slots[1].plan_tuple != nullptr);
  return PyLong_FromLong(count);
}

template <typename F>
PyCFunction fastcall(F f) {
  return reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(f));
}

}  // namespace

PyMethodDef rmsnorm_forward_methods[] = {
    {"forward", fastcall(forward), METH_FASTCALL,
     "forward(x, weight, eps, offset, poison) -> (y, rstd) or None: the fast forward launched from a kept plan"},
    {"remember_forward", fastcall(remember_forward), METH_FASTCALL,
     "remember_forward(x, weight, offset, y, rstd, plan, block_m, cap, kernel) -> bool: keep a plan"},
    {"forward_params", fastcall(forward_params), METH_FASTCALL,
     "forward_params(x, weight, eps, offset, y, rstd) -> (programs, bytes) or None: what forward would launch"},
    {"forget_forward", fastcall(forget_forward), METH_FASTCALL, "forget_forward(): drop every kept plan"},
    {"forward_plans", fastcall(forward_plans), METH_FASTCALL, "forward_plans() -> int: plans kept"},
    {nullptr, nullptr, 0, nullptr}};

// The fast forward's eager launch in one C call: the cache key, the grid, both outputs and the launch; and the
// backward's two launches likewise (below, "the backward").
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
// and None only for the plain norm: a plan whose codes say otherwise is not kept. The fused add (rmsnorm_add) and
// the LayerNorm launch the same kernel with more run-time arguments, each its own kind of launch in the key: the
// fused add its residual, the residual's row stride, residual_out and its row stride (a third output, contiguous in
// the residual's dtype, and the residual's dtype, address mod 16 and row stride in the key); the LayerNorm its mean
// (a third output) and its bias or None (the bias's presence, dtype and address mod 16 in the key).

#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <torch/csrc/Exceptions.h>
#include <torch/csrc/autograd/python_variable.h>

#include <algorithm>
#include <cstring>
#include <limits>
#include <unordered_map>
#include <vector>

#include "triton_launch.h"

namespace {

using rmsnorm_launch::Params;
using rmsnorm_launch::Plan;

constexpr Py_ssize_t kLeadingArguments = 9;  // x, x_row_stride, w, y, y_row_stride, rstd, M, N, eps
// Which codes each leading argument may have: pointers, integers (x when Triton compiled a 1 in), a float32.
const char *const kAllowedCodes[kLeadingArguments] = {"P", "bBhHiIqQx", "P", "P", "bBhHiIqQx", "P",
                                                      "bBhHiIqQx", "bBhHiIqQx", "f"};
#define LEADING_CODES "P", "bBhHiIqQx", "P", "P", "bBhHiIqQx", "P", "bBhHiIqQx", "bBhHiIqQx", "f"
#define CONSTEXPRS_8 "x", "x", "x", "x", "x", "x", "x", "x"
// The fused add's: the leading nine, HAS_WEIGHT … ROW_ALIGN (8 constexprs), then residual, its row stride,
// residual_out and its row stride (rmsnorm.forward.rmsnorm_fast_forward_kernel, arguments 17-20).
constexpr Py_ssize_t kAddArguments = 21;
const char *const kAddCodes[kAddArguments] = {LEADING_CODES, CONSTEXPRS_8, "P", "bBhHiIqQx", "P", "bBhHiIqQx"};
// The LayerNorm's: the leading nine, 14 constexprs (HAS_WEIGHT … ROW_ALIGN; the fused add's four None;
// HAS_RESIDUAL, STATIC_N), then mean and the bias (arguments 23 and 24; None without a bias: a constexpr).
constexpr Py_ssize_t kLayerNormArguments = 25;
const char *const kLayerNormCodes[kLayerNormArguments] = {LEADING_CODES, CONSTEXPRS_8, "x", "x", "x", "x", "x", "x",
                                                          "P", "P"};
const char *const kLayerNormNoBiasCodes[kLayerNormArguments] = {LEADING_CODES, CONSTEXPRS_8, "x", "x", "x", "x",
                                                                "x", "x", "P", "x"};
#undef LEADING_CODES
#undef CONSTEXPRS_8
// What pack_values is given at a constexpr's position among the run-time ones: an integer constexpr is a 1 Triton
// compiled in, the only value that code fits, and it packs nothing.
constexpr int64_t kCompiledIn = 1;

// Which kernel's launch a forward is: the plain norm's, the fused add's or the LayerNorm's.
enum Kind : int8_t { kPlain = 0, kAdd = 1, kLayerNorm = 2 };

// The fused add's residual or the LayerNorm's bias, where the launch has one.
struct Extra {
  Kind kind = kPlain;
  const at::Tensor *residual = nullptr;
  const at::Tensor *bias = nullptr;
};

struct Key {
  int64_t x_row_stride = 0;
  int64_t n = 0;
  uint64_t offset_bits = 0;
  int64_t extra_row_stride = 0;  // the residual's (the fused add)
  int32_t device = 0;
  int8_t x_dtype = 0;
  int8_t w_dtype = 0;
  int8_t kind = kPlain;
  int8_t extra_dtype = -1;  // the residual's or the bias's; -1: none
  uint8_t x_align = 0;
  uint8_t w_align = 0;
  uint8_t extra_align = 0;
  uint8_t m_class = 0;
  bool dense = false;
  bool has_weight = false;

  bool operator==(const Key &o) const {
    return x_row_stride == o.x_row_stride && n == o.n && offset_bits == o.offset_bits &&
           extra_row_stride == o.extra_row_stride && device == o.device && x_dtype == o.x_dtype &&
           w_dtype == o.w_dtype && kind == o.kind && extra_dtype == o.extra_dtype && x_align == o.x_align &&
           w_align == o.w_align && extra_align == o.extra_align && m_class == o.m_class && dense == o.dense &&
           has_weight == o.has_weight;
  }
};

struct KeyHash {
  size_t operator()(const Key &k) const {
    uint64_t h = static_cast<uint64_t>(k.x_row_stride) * 0x9E3779B97F4A7C15ULL;
    h ^= static_cast<uint64_t>(k.n) + 0x9E3779B97F4A7C15ULL + (h << 6) + (h >> 2);
    h ^= k.offset_bits + 0x9E3779B97F4A7C15ULL + (h << 6) + (h >> 2);
    h ^= static_cast<uint64_t>(k.extra_row_stride) + 0x9E3779B97F4A7C15ULL + (h << 6) + (h >> 2);
    const uint64_t extra = static_cast<uint64_t>(static_cast<uint8_t>(k.kind)) |
                           static_cast<uint64_t>(static_cast<uint8_t>(k.extra_dtype)) << 8 |
                           static_cast<uint64_t>(k.extra_align) << 16;
    h ^= extra + 0x9E3779B97F4A7C15ULL + (h << 6) + (h >> 2);
    const uint64_t small = static_cast<uint64_t>(static_cast<uint32_t>(k.device)) |
                           static_cast<uint64_t>(static_cast<uint8_t>(k.x_dtype)) << 32 |
                           static_cast<uint64_t>(static_cast<uint8_t>(k.w_dtype)) << 40 |
                           static_cast<uint64_t>(k.x_align | k.w_align << 4) << 48 |
                           static_cast<uint64_t>(k.m_class | k.dense << 3 | k.has_weight << 4) << 56;
    h ^= small + 0x9E3779B97F4A7C15ULL + (h << 6) + (h >> 2);
    return static_cast<size_t>(h);
  }
};

// The references an update of the tables replaces, dropped when the update is done (this object's end of scope):
// dropping one may run Python code (a finaliser) that reaches the tables again, and forget_plans there frees the
// Entry the update still holds a reference to. Declare it before that reference, so that it ends after it.
struct Released {
  std::vector<PyObject *> refs;

  // Room for every reference one update hands over (a backward entry's 17 slots, then the 3 it fills: 40), reserved:
  // a push_back that allocated could throw with a reference half handed over.
  Released() { refs.reserve(64); }
  Released(const Released &) = delete;
  Released &operator=(const Released &) = delete;
  ~Released() {
    for (PyObject *ref : refs) Py_XDECREF(ref);
  }
};

// One compiled kernel: its plan, and strong references to the plan tuple (which owns plan.codes) and to the
// CompiledKernel (which keeps the CUfunction loaded).
struct Slot {
  Plan plan;
  PyObject *plan_tuple = nullptr;
  PyObject *kernel = nullptr;

  // Drop both references now: only for a slot already out of the tables (forget_plans).
  void clear() {
    Py_CLEAR(plan_tuple);
    Py_CLEAR(kernel);
  }

  // Empty the slot, its references handed to `released`.
  void release(Released &released) {
    released.refs.push_back(plan_tuple);
    plan_tuple = nullptr;
    released.refs.push_back(kernel);
    kernel = nullptr;
  }

  // Keep `kept`, parsed from `tuple`, and the compiled kernel it belongs to (new references to both).
  void keep(const Plan &kept, PyObject *tuple, PyObject *compiled, Released &released) {
    release(released);
    plan_tuple = Py_NewRef(tuple);
    kernel = Py_NewRef(compiled);
    plan = kept;
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

uint8_t address_class(const at::Tensor &t) {
  return static_cast<uint8_t>(reinterpret_cast<uintptr_t>(t.data_ptr()) & 15);
}

Key key_of(const at::Tensor &x, const at::Tensor *w, double offset, const Extra &extra) {
  Key key;
  key.kind = extra.kind;
  const at::Tensor *other = extra.kind == kAdd ? extra.residual : extra.bias;
  if (other != nullptr) {
    key.extra_dtype = static_cast<int8_t>(other->scalar_type());
    key.extra_align = address_class(*other);
  }
  if (extra.kind == kAdd) key.extra_row_stride = extra.residual->stride(0);
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

int64_t address(const at::Tensor &t) { return static_cast<int64_t>(reinterpret_cast<uintptr_t>(t.data_ptr())); }

// The kernel's parameters for one launch: its first n arguments from values (a pointer's address or an integer;
// `real` for a float code), the rest compiled in. False (no error set) when a value does not fit its code.
bool pack_values(const Plan &plan, const int64_t *values, Py_ssize_t n, double real, Params *params) {
  const char *codes = PyBytes_AS_STRING(plan.codes);
  int count = 0;
  for (Py_ssize_t i = 0; i < n; ++i) {
    if (codes[i] != 'P' && codes[i] != 'f' && !fits(codes[i], values[i])) return false;
    const int size = pack_value(codes[i], values[i], real, &params->slots[count]);
    if (size > 0) params->sizes[count++] = size;
  }
  rmsnorm_launch::finish_params(params, count, 0, 0);
  return true;
}

// A forward's outputs: y and rstd, and the fused add's residual_out or the LayerNorm's mean (`third`).
struct Outputs {
  const at::Tensor *y = nullptr;
  const at::Tensor *rstd = nullptr;
  const at::Tensor *third = nullptr;
};

bool pack_forward(const Plan &plan, const at::Tensor &x, const at::Tensor *w, const Extra &extra,
                  const Outputs &out, double eps, Params *params) {
  int64_t values[kLayerNormArguments] = {address(x), x.stride(0), address(w ? *w : x), address(*out.y),
                                         out.y->stride(0), address(*out.rstd), x.size(0), x.size(1), 0};
  std::fill(values + kLeadingArguments, values + kLayerNormArguments, kCompiledIn);
  Py_ssize_t n = kLeadingArguments;
  if (extra.kind == kAdd) {
    values[17] = address(*extra.residual);
    values[18] = extra.residual->stride(0);
    values[19] = address(*out.third);
    values[20] = out.third->stride(0);
    n = kAddArguments;
  } else if (extra.kind == kLayerNorm) {
    values[23] = address(*out.third);
    if (extra.bias != nullptr) values[24] = address(*extra.bias);
    n = kLayerNormArguments;
  }
  return pack_values(plan, values, n, eps, params);
}

// Whether a plan's codes are what its file launches: `n` leading arguments each of its allowed codes, then
// constexprs only.
bool codes_allowed(const Plan &plan, const char *const *allowed, Py_ssize_t n) {
  const Py_ssize_t n_codes = PyBytes_GET_SIZE(plan.codes);
  const char *codes = PyBytes_AS_STRING(plan.codes);
  if (n_codes < n) return false;
  for (Py_ssize_t i = 0; i < n_codes; ++i) {
    if (i < n ? std::strchr(allowed[i], codes[i]) == nullptr : codes[i] != 'x') return false;
  }
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
Slot *look_up(const at::Tensor &x, const at::Tensor *w, double offset, const Extra &extra, int64_t *p) {
  auto found = entries.find(key_of(x, w, offset, extra));
  if (found == entries.end()) return nullptr;
  bool persistent = false;
  *p = programs(found->second, x.size(0), &persistent);
  Slot &slot = found->second.slots[persistent];
  return slot.plan_tuple != nullptr ? &slot : nullptr;
}

// Whether this call may launch on `device` from here: 1 with the current stream's handle in *stream; 0 where the
// Python path must (another device is current: the compiled kernel's handle belongs to its own; a launch hook is
// set); -1 with a Python error set.
int launch_target(int64_t device, uint64_t *stream) {
  if (!look_up_context()) return -1;
  PyObject *current = PyObject_CallMethodNoArgs(torch_c, get_device_name);
  if (current == nullptr) return -1;
  const long current_device = PyLong_AsLong(current);
  Py_DECREF(current);
  if (current_device == -1 && PyErr_Occurred()) return -1;
  if (current_device != device) return 0;
  const int hooks = launch_hooks_set();
  if (hooks != 0) return hooks < 0 ? -1 : 0;
  PyObject *index = PyLong_FromLong(current_device);
  if (index == nullptr) return -1;
  PyObject *handle = PyObject_CallMethodOneArg(torch_c, raw_stream_name, index);
  Py_DECREF(index);
  if (handle == nullptr) return -1;
  *stream = PyLong_AsUnsignedLongLong(handle);
  Py_DECREF(handle);
  return PyErr_Occurred() ? -1 : 1;
}

// (a, b) as a new tuple of tensors; b may be undefined (None). nullptr with a Python error set.
PyObject *tensor_pair(at::Tensor a, at::Tensor b) {
  PyObject *first = THPVariable_Wrap(std::move(a));
  if (first == nullptr) return nullptr;
  PyObject *second = b.defined() ? THPVariable_Wrap(std::move(b)) : Py_NewRef(Py_None);
  if (second == nullptr) {
    Py_DECREF(first);
    return nullptr;
  }
  PyObject *out = PyTuple_Pack(2, first, second);
  Py_DECREF(first);
  Py_DECREF(second);
  return out;
}

// A tensor as a new reference, or None where it is undefined.
PyObject *tensor_or_none(at::Tensor t) { return t.defined() ? THPVariable_Wrap(std::move(t)) : Py_NewRef(Py_None); }

// (a, b, c) as a new tuple, an undefined tensor as None. nullptr with a Python error set.
PyObject *tensor_triple(at::Tensor a, at::Tensor b, at::Tensor c) {
  PyObject *items[3] = {tensor_or_none(std::move(a)), tensor_or_none(std::move(b)), tensor_or_none(std::move(c))};
  PyObject *out = items[0] && items[1] && items[2] ? PyTuple_Pack(3, items[0], items[1], items[2]) : nullptr;
  for (PyObject *item : items) Py_XDECREF(item);
  return out;
}

bool read_double(PyObject *obj, double *out) {
  *out = PyFloat_AsDouble(obj);
  return !(*out == -1.0 && PyErr_Occurred());
}

bool floats(PyObject *const *args, double *eps, double *offset) {
  return read_double(args[2], eps) && read_double(args[3], offset);
}

// Whether `extra` fits x as the caller's checks left it (rmsnorm.contract.check_add_inputs, check_layernorm_inputs):
// a residual of x's shape on x's device, a bias of N elements. Anything else is the Python path's to refuse.
// t has x's (M, N) rows on x's device: the fused add's residual, its dres.
bool rows_like(const at::Tensor &t, const at::Tensor &x) {
  return t.dim() == 2 && t.size(0) == x.size(0) && t.size(1) == x.size(1) && t.device() == x.device();
}

// t is one value per row (n = M: the LayerNorm's mean) or per column (n = N: its bias).
bool vector_of(const at::Tensor &t, int64_t n) { return t.dim() == 1 && t.size(0) == n; }

bool extra_fits(const at::Tensor &x, const Extra &extra) {
  if (extra.kind == kAdd) return rows_like(*extra.residual, x);
  return extra.bias == nullptr || vector_of(*extra.bias, x.size(1));
}

// One kept kind of forward launched on the current stream: (y, rstd), or (y, residual_out, rstd) for the fused add,
// (y, mean, rstd) for the LayerNorm; None where the Python path must run it (no plan for this launch; tensors it
// does not take: not CUDA, not on the current device, not 2-D; a launch hook set; a value its codes cannot hold);
// nullptr with a Python error set. poison: the outputs filled with NaN before the launch
// (rmsnorm.testing.poisoned_outputs).
PyObject *launch_kind(const at::Tensor &x, const at::Tensor *w, const Extra &extra, double eps, double offset,
                      int poison) {
  if (!x.is_cuda() || x.dim() != 2 || x.size(0) == 0 || !extra_fits(x, extra)) Py_RETURN_NONE;
  int64_t p = 0;
  Slot *slot = look_up(x, w, offset, extra, &p);
  if (slot == nullptr) Py_RETURN_NONE;
  const Held held(*slot);  // slot is not read again
  uint64_t stream = 0;
  const int target = launch_target(x.get_device(), &stream);
  if (target < 0) return nullptr;
  if (target == 0) Py_RETURN_NONE;

  const int64_t M = x.size(0), N = x.size(1);
  at::Tensor y = at::empty({M, N}, x.options());
  at::Tensor rstd = at::empty({M}, x.options().dtype(at::kFloat));
  at::Tensor third;  // the fused add's residual_out, in the residual's dtype; the LayerNorm's mean
  if (extra.kind == kAdd) third = at::empty({M, N}, x.options().dtype(extra.residual->scalar_type()));
  if (extra.kind == kLayerNorm) third = at::empty({M}, x.options().dtype(at::kFloat));
  if (poison) {
    y.fill_(std::numeric_limits<double>::quiet_NaN());
    rstd.fill_(std::numeric_limits<double>::quiet_NaN());
    if (third.defined()) third.fill_(std::numeric_limits<double>::quiet_NaN());
  }
  if (address_class(y) != 0 || address_class(rstd) != 0 || (third.defined() && address_class(third) != 0)) {
    Py_RETURN_NONE;  // the plans are for aligned outputs
  }
  Params params;
  if (!pack_forward(held.plan, x, w, extra, Outputs{&y, &rstd, third.defined() ? &third : nullptr}, eps, &params)) {
    Py_RETURN_NONE;
  }
  const long dims[3] = {static_cast<long>(p), 1, 1};
  if (!rmsnorm_launch::launch_plan(held.plan, dims, stream, &params)) return nullptr;
  if (extra.kind == kPlain) return tensor_pair(std::move(y), std::move(rstd));
  return tensor_triple(std::move(y), std::move(third), std::move(rstd));
}

// forward(x, weight, eps, offset, poison) -> (y, rstd) launched on the current stream, or None (launch_kind). x
// (M, N) with M >= 1 and weight (N,) or None, checked by the caller (rmsnorm.contract.check_fast_inputs).
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
  double eps, offset;
  if (!floats(args, &eps, &offset)) return nullptr;
  return launch_kind(*x, w, Extra{}, eps, offset, poison);
  END_HANDLE_TH_ERRORS
}

// forward_add(x, residual, weight, eps, offset, poison) -> (y, residual_out, rstd) or None: the fused add's
// forward (rmsnorm.forward.launch_add_forward), checked by the caller (rmsnorm.contract.check_add_inputs).
PyObject *forward_add(PyObject *, PyObject *const *args, Py_ssize_t nargs) {
  if (nargs != 6) {
    PyErr_SetString(PyExc_TypeError, "forward_add(x, residual, weight, eps, offset, poison)");
    return nullptr;
  }
  HANDLE_TH_ERRORS
  const int poison = PyObject_IsTrue(args[5]);
  if (poison < 0) return nullptr;
  const at::Tensor *x = nullptr, *residual = nullptr, *w = nullptr;
  if (!unpack(args[0], &x) || x == nullptr || !unpack(args[1], &residual) || residual == nullptr ||
      !unpack(args[2], &w)) {
    Py_RETURN_NONE;
  }
  double eps, offset;
  if (!read_double(args[3], &eps) || !read_double(args[4], &offset)) return nullptr;
  return launch_kind(*x, w, Extra{kAdd, residual, nullptr}, eps, offset, poison);
  END_HANDLE_TH_ERRORS
}

// forward_layernorm(x, weight, bias, eps, poison) -> (y, mean, rstd) or None: the LayerNorm's forward
// (rmsnorm.layernorm_launchers.launch_layernorm_forward), checked by the caller (check_layernorm_inputs).
PyObject *forward_layernorm(PyObject *, PyObject *const *args, Py_ssize_t nargs) {
  if (nargs != 5) {
    PyErr_SetString(PyExc_TypeError, "forward_layernorm(x, weight, bias, eps, poison)");
    return nullptr;
  }
  HANDLE_TH_ERRORS
  const int poison = PyObject_IsTrue(args[4]);
  if (poison < 0) return nullptr;
  const at::Tensor *x = nullptr, *w = nullptr, *bias = nullptr;
  if (!unpack(args[0], &x) || x == nullptr || !unpack(args[1], &w) || !unpack(args[2], &bias)) Py_RETURN_NONE;
  double eps;
  if (!read_double(args[3], &eps)) return nullptr;
  return launch_kind(*x, w, Extra{kLayerNorm, nullptr, bias}, eps, 0.0, poison);
  END_HANDLE_TH_ERRORS
}

// The fused add's and the LayerNorm's tensors after a forward's first arguments, as remember_forward and
// forward_params take them: (residual, residual_out, mean, bias), all None for the plain norm; residual and
// residual_out for the fused add; mean and the bias (or None) for the LayerNorm. False with a Python error set
// when they are none of these.
bool unpack_extra(PyObject *const *args, const char *name, Extra *extra, const at::Tensor **third) {
  const at::Tensor *residual = nullptr, *residual_out = nullptr, *mean = nullptr, *bias = nullptr;
  if (!unpack(args[0], &residual) || !unpack(args[1], &residual_out) || !unpack(args[2], &mean) ||
      !unpack(args[3], &bias)) {
    PyErr_Format(PyExc_TypeError, "%s: residual, residual_out, mean and bias must be strided tensors or None", name);
    return false;
  }
  const bool add = residual != nullptr && residual_out != nullptr && mean == nullptr && bias == nullptr;
  const bool layernorm = mean != nullptr && residual == nullptr && residual_out == nullptr;
  const bool plain = !residual && !residual_out && !mean && !bias;
  if (!add && !layernorm && !plain) {
    PyErr_Format(PyExc_ValueError, "%s: residual and residual_out (the fused add), or mean and bias or None (the "
                 "LayerNorm), or none of them", name);
    return false;
  }
  *extra = add ? Extra{kAdd, residual, nullptr} : layernorm ? Extra{kLayerNorm, nullptr, bias} : Extra{};
  *third = add ? residual_out : mean;
  return true;
}

// remember_forward(x, weight, offset, y, rstd, plan, block_m, cap, kernel[, residual, residual_out, mean, bias])
// -> bool: keep the plan of the kernel the Python path has just launched for these tensors
// (rmsnorm.native_launch.remember_forward), under this call's key; False, keeping nothing, where this file could not
// launch it: outputs not as launch_kind allocates them (contiguous, 16-byte aligned, y in x's dtype, rstd and mean
// float32, residual_out in the residual's dtype), or codes other than its kind's (kAllowedCodes, kAddCodes,
// kLayerNormCodes, then constexprs).
PyObject *remember_forward(PyObject *, PyObject *const *args, Py_ssize_t nargs) {
  if (nargs != 9 && nargs != 13) {
    PyErr_SetString(PyExc_TypeError, "remember_forward(x, weight, offset, y, rstd, plan, block_m, cap, kernel"
                                     "[, residual, residual_out, mean, bias])");
    return nullptr;
  }
  HANDLE_TH_ERRORS
  const at::Tensor *x = nullptr, *w = nullptr, *y = nullptr, *rstd = nullptr, *third = nullptr;
  if (!unpack(args[0], &x) || x == nullptr || !unpack(args[1], &w) || !unpack(args[3], &y) || y == nullptr ||
      !unpack(args[4], &rstd) || rstd == nullptr) {
    PyErr_SetString(PyExc_TypeError, "remember_forward: x, y and rstd must be strided tensors, weight one or None");
    return nullptr;
  }
  Extra extra;
  if (nargs == 13 && !unpack_extra(args + 9, "remember_forward", &extra, &third)) return nullptr;
  if (x->dim() != 2 || x->size(0) == 0) {
    PyErr_SetString(PyExc_ValueError, "remember_forward: x must be (M, N) with M >= 1");
    return nullptr;
  }
  double offset;
  if (!read_double(args[2], &offset)) return nullptr;
  Plan plan;
  if (!rmsnorm_launch::parse_plan(args[5], &plan)) return nullptr;
  const int64_t block_m = PyLong_AsLongLong(args[6]), cap = PyLong_AsLongLong(args[7]);
  if (PyErr_Occurred()) return nullptr;
  if (block_m < 1 || cap < 0) {
    PyErr_SetString(PyExc_ValueError, "remember_forward: block_m >= 1 and cap >= 0");
    return nullptr;
  }
  const int64_t M = x->size(0), N = x->size(1);
  if (y->dim() != 2 || y->size(0) != M || y->size(1) != N || y->stride(0) != N || y->stride(1) != 1 ||
      y->scalar_type() != x->scalar_type() || rstd->dim() != 1 || rstd->size(0) != M ||
      rstd->scalar_type() != at::kFloat || address_class(*y) != 0 || address_class(*rstd) != 0) {
    Py_RETURN_FALSE;
  }
  if (!extra_fits(*x, extra)) Py_RETURN_FALSE;
  if (extra.kind == kAdd && (third->dim() != 2 || third->size(0) != M || third->size(1) != N ||
                             third->stride(0) != N || third->stride(1) != 1 ||
                             third->scalar_type() != extra.residual->scalar_type() || address_class(*third) != 0)) {
    Py_RETURN_FALSE;
  }
  if (extra.kind == kLayerNorm && (third->dim() != 1 || third->size(0) != M || third->scalar_type() != at::kFloat ||
                                   address_class(*third) != 0)) {
    Py_RETURN_FALSE;
  }
  const bool allowed =
      extra.kind == kPlain ? codes_allowed(plan, kAllowedCodes, kLeadingArguments)
      : extra.kind == kAdd ? codes_allowed(plan, kAddCodes, kAddArguments)
                           : codes_allowed(plan, extra.bias ? kLayerNormCodes : kLayerNormNoBiasCodes,
                                           kLayerNormArguments);
  if (!allowed) Py_RETURN_FALSE;
  Released released;
  Entry &entry = entries[key_of(*x, w, offset, extra)];
  if (entry.block_m != block_m || entry.cap != cap) {  // a configuration other than the kept one's: start afresh
    entry.slots[0].release(released);
    entry.slots[1].release(released);
    entry.block_m = block_m;
    entry.cap = cap;
  }
  bool persistent = false;
  programs(entry, M, &persistent);
  Slot &slot = entry.slots[persistent];
  slot.keep(plan, args[5], args[8], released);
  Py_RETURN_TRUE;
  END_HANDLE_TH_ERRORS
}

// The parameters as the driver reads them, one after another at their own sizes (for tests).
PyObject *packed_bytes(const Params &params) {
  char buffer[rmsnorm_launch::kMaxParams * 8];
  Py_ssize_t length = 0;
  for (int i = 0; i < params.count; ++i) {
    std::memcpy(buffer + length, &params.slots[i], params.sizes[i]);
    length += params.sizes[i];
  }
  return PyBytes_FromStringAndSize(buffer, length);
}

// forward_params(x, weight, eps, offset, y, rstd[, residual, residual_out, mean, bias]) -> (programs, parameters:
// bytes) or None: what launch_kind would hand the driver for these tensors and outputs (any device: for tests on a
// machine without a GPU).
PyObject *forward_params(PyObject *, PyObject *const *args, Py_ssize_t nargs) {
  if (nargs != 6 && nargs != 10) {
    PyErr_SetString(PyExc_TypeError, "forward_params(x, weight, eps, offset, y, rstd[, residual, residual_out, "
                                     "mean, bias])");
    return nullptr;
  }
  HANDLE_TH_ERRORS
  const at::Tensor *x = nullptr, *w = nullptr, *y = nullptr, *rstd = nullptr, *third = nullptr;
  if (!unpack(args[0], &x) || x == nullptr || !unpack(args[1], &w) || !unpack(args[4], &y) || y == nullptr ||
      !unpack(args[5], &rstd) || rstd == nullptr) {
    PyErr_SetString(PyExc_TypeError, "forward_params: x, y and rstd must be strided tensors, weight one or None");
    return nullptr;
  }
  Extra extra;
  if (nargs == 10 && !unpack_extra(args + 6, "forward_params", &extra, &third)) return nullptr;
  double eps, offset;
  if (!floats(args, &eps, &offset)) return nullptr;
  if (x->dim() != 2 || x->size(0) == 0 || !extra_fits(*x, extra)) Py_RETURN_NONE;
  int64_t p = 0;
  Slot *slot = look_up(*x, w, offset, extra, &p);
  if (slot == nullptr) Py_RETURN_NONE;
  Params params;
  if (!pack_forward(slot->plan, *x, w, extra, Outputs{y, rstd, third}, eps, &params)) Py_RETURN_NONE;
  PyObject *bytes = packed_bytes(params);
  if (bytes == nullptr) return nullptr;
  return Py_BuildValue("(LN)", static_cast<long long>(p), bytes);
  END_HANDLE_TH_ERRORS
}

// ------------------------------------------------------------------------------------------------ the backward

// The backward's launch (rmsnorm.backward.run_backward, the plain RMSNorm with its default configuration): dx,
// the (P, N) float32 partials of dgamma, the (M,) scratch of looped rows, then dgamma summed from the partials by
// a second kernel. Its key holds, as rmsnorm.backward.backward_key does, the device; the dtypes of x, the weight
// and dy; the addresses mod 16 of x, the weight, rstd and dy; x's and dy's row strides and N by value; M's
// classes; whether x's and dy's rows are dense (a flat rule); the weight's presence; the offset; and for the fused
// add's backward (x is then residual_out) the gradient of residual_out, dres: its dtype, address mod 16 and row
// stride (dx = the norm's dx + dres, HAS_DRES). The entry holds
// the configuration's rows per program, grid cap, ONE_BLOCK and row arithmetic dtype, the backward kernel's plan
// and one plan of the dgamma kernel per class of P (its partial rows: == 1, a multiple of 16, past 2^31 - 1).

// x, x_row_stride, w, rstd, dy, dy_row_stride, dx, dx_row_stride, partial, mean_ux, M, N
constexpr Py_ssize_t kBackwardArguments = 12;
const char *const kBackwardCodes[kBackwardArguments] = {"P", "bBhHiIqQx", "P", "P", "P", "bBhHiIqQx", "P",
                                                        "bBhHiIqQx", "P", "P", "bBhHiIqQx", "bBhHiIqQx"};
// The fused add's: the twelve, HAS_WEIGHT … ROW_ALIGN (8 constexprs), then dres and its row stride (arguments 20, 21).
constexpr Py_ssize_t kBackwardAddArguments = 22;
const char *const kBackwardAddCodes[kBackwardAddArguments] = {
    "P", "bBhHiIqQx", "P", "P", "P", "bBhHiIqQx", "P", "bBhHiIqQx", "P", "P", "bBhHiIqQx", "bBhHiIqQx",
    "x", "x", "x", "x", "x", "x", "x", "x", "P", "bBhHiIqQx"};
// The LayerNorm's: the twelve, 12 constexprs (HAS_WEIGHT … ROW_ALIGN; the fused add's None, None, False; STATIC_N),
// then mean, bias_partial (None without a bias: a constexpr) and mean_u (arguments 24-26).
constexpr Py_ssize_t kBackwardLayerNormArguments = 27;
#define BACKWARD_LEADING_CODES \
  "P", "bBhHiIqQx", "P", "P", "P", "bBhHiIqQx", "P", "bBhHiIqQx", "P", "P", "bBhHiIqQx", "bBhHiIqQx"
#define CONSTEXPRS_12 "x", "x", "x", "x", "x", "x", "x", "x", "x", "x", "x", "x"
const char *const kBackwardLayerNormCodes[kBackwardLayerNormArguments] = {BACKWARD_LEADING_CODES, CONSTEXPRS_12,
                                                                          "P", "P", "P"};
const char *const kBackwardLayerNormNoBiasCodes[kBackwardLayerNormArguments] = {BACKWARD_LEADING_CODES,
                                                                                CONSTEXPRS_12, "P", "x", "P"};
#undef BACKWARD_LEADING_CODES
#undef CONSTEXPRS_12
constexpr Py_ssize_t kDgammaArguments = 4;  // partial, dgamma, P, N
const char *const kDgammaCodes[kDgammaArguments] = {"P", "P", "bBhHiIqQx", "bBhHiIqQx"};

struct BackwardKey {
  int64_t x_row_stride = 0;
  int64_t dy_row_stride = 0;
  int64_t n = 0;
  uint64_t offset_bits = 0;
  int64_t dres_row_stride = 0;
  int32_t device = 0;
  int8_t x_dtype = 0;
  int8_t w_dtype = 0;
  int8_t dy_dtype = 0;
  int8_t dres_dtype = -1;  // -1: no dres (the plain norm)
  uint8_t dres_align = 0;
  bool layernorm = false;
  int8_t bias_dtype = -1;  // the LayerNorm's bias (dbias's dtype); -1: none
  uint8_t mean_align = 0;
  uint8_t aligns = 0;  // x | w << 4, each address mod 16
  uint8_t rstd_dy_aligns = 0;  // rstd | dy << 4
  uint8_t m_class = 0;
  bool dense = false;
  bool has_weight = false;

  bool operator==(const BackwardKey &o) const {
    return x_row_stride == o.x_row_stride && dy_row_stride == o.dy_row_stride && n == o.n &&
           offset_bits == o.offset_bits && device == o.device && x_dtype == o.x_dtype && w_dtype == o.w_dtype &&
           dy_dtype == o.dy_dtype && aligns == o.aligns && rstd_dy_aligns == o.rstd_dy_aligns &&
           m_class == o.m_class && dense == o.dense && has_weight == o.has_weight &&
           dres_row_stride == o.dres_row_stride && dres_dtype == o.dres_dtype && dres_align == o.dres_align &&
           layernorm == o.layernorm && bias_dtype == o.bias_dtype && mean_align == o.mean_align;
  }
};

struct BackwardKeyHash {
  size_t operator()(const BackwardKey &k) const {
    uint64_t h = static_cast<uint64_t>(k.x_row_stride) * 0x9E3779B97F4A7C15ULL;
    for (uint64_t v : {static_cast<uint64_t>(k.dy_row_stride), static_cast<uint64_t>(k.n), k.offset_bits}) {
      h ^= v + 0x9E3779B97F4A7C15ULL + (h << 6) + (h >> 2);
    }
    const uint64_t small = static_cast<uint64_t>(static_cast<uint32_t>(k.device)) |
                           static_cast<uint64_t>(static_cast<uint8_t>(k.x_dtype)) << 32 |
                           static_cast<uint64_t>(static_cast<uint8_t>(k.w_dtype)) << 40 |
                           static_cast<uint64_t>(static_cast<uint8_t>(k.dy_dtype)) << 48 |
                           static_cast<uint64_t>(k.m_class | k.dense << 3 | k.has_weight << 4) << 56;
    h ^= small + 0x9E3779B97F4A7C15ULL + (h << 6) + (h >> 2);
    h ^= (static_cast<uint64_t>(k.aligns) | static_cast<uint64_t>(k.rstd_dy_aligns) << 8 |
          static_cast<uint64_t>(static_cast<uint8_t>(k.dres_dtype)) << 16 | static_cast<uint64_t>(k.dres_align) << 24) +
         (h << 6) + (h >> 2);
    h ^= static_cast<uint64_t>(k.dres_row_stride) + 0x9E3779B97F4A7C15ULL + (h << 6) + (h >> 2);
    h ^= (static_cast<uint64_t>(k.layernorm) | static_cast<uint64_t>(static_cast<uint8_t>(k.bias_dtype)) << 8 |
          static_cast<uint64_t>(k.mean_align) << 16) + 0x9E3779B97F4A7C15ULL + (h << 6) + (h >> 2);
    return static_cast<size_t>(h);
  }
};

struct BackwardEntry {
  int64_t block_m = 1;
  int64_t cap = 0;
  int64_t reduce_block_n = 1;  // dgamma's columns per program
  bool one_block = true;       // false: the (M,) scratch is allocated, in `compute`
  at::ScalarType compute = at::kFloat;
  Slot backward;
  Slot dgamma[8];  // by P's class
  Slot dbias[8];   // the LayerNorm's dbias sum (the dgamma kernel for the bias's dtype), by P's class

  void clear() {
    backward.clear();
    for (Slot &slot : dgamma) slot.clear();
    for (Slot &slot : dbias) slot.clear();
  }

  void release(Released &released) {
    backward.release(released);
    for (Slot &slot : dgamma) slot.release(released);
    for (Slot &slot : dbias) slot.release(released);
  }
};

std::unordered_map<BackwardKey, BackwardEntry, BackwardKeyHash> backward_entries;

uint8_t integer_class(int64_t v) { return static_cast<uint8_t>((v == 1) | (v % 16 == 0) << 1 | (v > INT32_MAX) << 2); }

// The LayerNorm's inputs to its backward beyond the RMSNorm's: the forward's mean and the bias (or nullptr).
struct LayerNormInputs {
  const at::Tensor *mean = nullptr;  // nullptr: not the LayerNorm's backward
  const at::Tensor *bias = nullptr;
};

BackwardKey backward_key_of(const at::Tensor &x, const at::Tensor *w, const at::Tensor &rstd, const at::Tensor &dy,
                            double offset, const at::Tensor *dres, const LayerNormInputs &ln) {
  BackwardKey key;
  if (ln.mean != nullptr) {
    key.layernorm = true;
    key.mean_align = address_class(*ln.mean);
    if (ln.bias != nullptr) key.bias_dtype = static_cast<int8_t>(ln.bias->scalar_type());
  }
  if (dres != nullptr) {
    key.dres_row_stride = dres->stride(0);
    key.dres_dtype = static_cast<int8_t>(dres->scalar_type());
    key.dres_align = address_class(*dres);
  }
  key.x_row_stride = x.stride(0);
  key.dy_row_stride = dy.stride(0);
  key.n = x.size(1);
  std::memcpy(&key.offset_bits, &offset, 8);
  key.device = x.get_device();
  key.x_dtype = static_cast<int8_t>(x.scalar_type());
  key.w_dtype = static_cast<int8_t>((w ? *w : x).scalar_type());
  key.dy_dtype = static_cast<int8_t>(dy.scalar_type());
  key.aligns = static_cast<uint8_t>(address_class(x) | address_class(w ? *w : x) << 4);
  key.rstd_dy_aligns = static_cast<uint8_t>(address_class(rstd) | address_class(dy) << 4);
  key.m_class = integer_class(x.size(0));
  key.dense = x.is_contiguous() && dy.is_contiguous();
  key.has_weight = w != nullptr;
  return key;
}

int64_t backward_programs(const BackwardEntry &entry, int64_t M) {
  const int64_t row_blocks = (M + entry.block_m - 1) / entry.block_m;
  const int64_t p = entry.cap > 0 && entry.cap < row_blocks ? entry.cap : row_blocks;
  return p < 1 ? 1 : p;
}

// The tensors of one backward call: x, weight (or nullptr), rstd, dy; false where this file does not take them.
bool unpack_backward(PyObject *const *args, const at::Tensor **x, const at::Tensor **w, const at::Tensor **rstd,
                     const at::Tensor **dy) {
  return unpack(args[0], x) && *x != nullptr && unpack(args[1], w) && unpack(args[2], rstd) && *rstd != nullptr &&
         unpack(args[3], dy) && *dy != nullptr && (*x)->dim() == 2 && (*x)->size(0) > 0 && (*dy)->dim() == 2;
}

// Whether the fused add's dres (nullptr: the plain norm's backward) is what this file takes: x's shape on x's device.
bool dres_fits(const at::Tensor &x, const at::Tensor *dres) { return dres == nullptr || rows_like(*dres, x); }

// The fused add's dres (or nullptr) from `obj`; false where this file does not take it (not a strided tensor, or
// not dres_fits: the Python path's to run or refuse).
bool unpack_dres(PyObject *obj, const at::Tensor &x, const at::Tensor **dres) {
  return unpack(obj, dres) && dres_fits(x, *dres);
}

// The kept plans for this call, or false (a miss); *p: the backward's grid.
bool look_up_backward(const at::Tensor &x, const at::Tensor *w, const at::Tensor &rstd, const at::Tensor &dy,
                      double offset, const at::Tensor *dres, const LayerNormInputs &ln, int64_t *p,
                      BackwardEntry **entry) {
  auto found = backward_entries.find(backward_key_of(x, w, rstd, dy, offset, dres, ln));
  if (found == backward_entries.end() || found->second.backward.plan_tuple == nullptr) return false;
  *p = backward_programs(found->second, x.size(0));
  if (w != nullptr && found->second.dgamma[integer_class(*p)].plan_tuple == nullptr) return false;
  if (ln.bias != nullptr && found->second.dbias[integer_class(*p)].plan_tuple == nullptr) return false;
  *entry = &found->second;
  return true;
}

// The LayerNorm's backward's own tensors: the forward's mean, and the outputs bias_partial (nullptr without a bias)
// and mean_u (rstd when the row is one block).
struct LayerNormOutputs {
  const at::Tensor *mean = nullptr;  // nullptr: not the LayerNorm's backward
  const at::Tensor *bias_partial = nullptr;
  const at::Tensor *mean_u = nullptr;
};

bool pack_backward(const Plan &plan, const at::Tensor &x, const at::Tensor *w, const at::Tensor &rstd,
                   const at::Tensor &dy, const at::Tensor *dres, const at::Tensor &dx, const at::Tensor &partial,
                   const at::Tensor &mean_ux, const LayerNormOutputs &ln, Params *params) {
  int64_t values[kBackwardLayerNormArguments] = {address(x), x.stride(0), address(w ? *w : x), address(rstd),
                                                 address(dy), dy.stride(0), address(dx), dx.stride(0),
                                                 address(partial), address(mean_ux), x.size(0), x.size(1)};
  std::fill(values + kBackwardArguments, values + kBackwardLayerNormArguments, kCompiledIn);
  if (dres != nullptr) {
    values[20] = address(*dres);
    values[21] = dres->stride(0);
    return pack_values(plan, values, kBackwardAddArguments, 0.0, params);
  }
  if (ln.mean != nullptr) {
    values[24] = address(*ln.mean);
    if (ln.bias_partial != nullptr) values[25] = address(*ln.bias_partial);
    values[26] = address(*ln.mean_u);
    return pack_values(plan, values, kBackwardLayerNormArguments, 0.0, params);
  }
  return pack_values(plan, values, kBackwardArguments, 0.0, params);
}

bool pack_dgamma(const Plan &plan, const at::Tensor &partial, const at::Tensor &dgamma, Params *params) {
  const int64_t values[kDgammaArguments] = {address(partial), address(dgamma), partial.size(0), partial.size(1)};
  return pack_values(plan, values, kDgammaArguments, 0.0, params);
}

// One kept kind of backward launched on the current stream: the backward kernel, then the dgamma sum (with a
// weight) and the LayerNorm's dbias sum (with a bias). (dx, dgamma or None), or for the LayerNorm (dx, dweight or
// None, dbias or None); None where the Python path must run it (no plans, another device current, a launch hook,
// outputs not 16-byte aligned, a value its codes cannot hold); nullptr with a Python error set.
PyObject *launch_backward_kind(const at::Tensor &x, const at::Tensor *w, const at::Tensor &rstd, const at::Tensor &dy,
                               double offset, const at::Tensor *dres, const LayerNormInputs &ln, int poison) {
  if (!x.is_cuda()) Py_RETURN_NONE;
  int64_t p = 0;
  BackwardEntry *entry = nullptr;
  if (!look_up_backward(x, w, rstd, dy, offset, dres, ln, &p, &entry)) Py_RETURN_NONE;
  const Held held(entry->backward);
  const Held held_dgamma(entry->dgamma[integer_class(p)]);  // empty without a weight
  const Held held_dbias(entry->dbias[integer_class(p)]);    // empty without a bias
  const bool one_block = entry->one_block;
  const at::ScalarType compute = entry->compute;
  const int64_t reduce_block_n = entry->reduce_block_n;  // entry is not read after Python code has run
  uint64_t stream = 0;
  const int target = launch_target(x.get_device(), &stream);
  if (target < 0) return nullptr;
  if (target == 0) Py_RETURN_NONE;

  const int64_t M = x.size(0), N = x.size(1);
  const at::Tensor *bias = ln.bias;
  at::Tensor dx = at::empty({M, N}, x.options());
  at::Tensor partial = w ? at::empty({p, N}, x.options().dtype(at::kFloat)) : dx;
  at::Tensor mean_ux = one_block ? rstd : at::empty({M}, x.options().dtype(compute));
  at::Tensor dgamma = w ? at::empty({N}, x.options().dtype(w->scalar_type())) : at::Tensor();
  at::Tensor bias_partial = bias ? at::empty({p, N}, x.options().dtype(at::kFloat)) : at::Tensor();
  at::Tensor mean_u = ln.mean == nullptr ? at::Tensor() : one_block ? rstd : at::empty({M}, x.options().dtype(compute));
  at::Tensor dbias = bias ? at::empty({N}, x.options().dtype(bias->scalar_type())) : at::Tensor();
  at::Tensor *made[] = {&dx, &partial, &mean_ux, &dgamma, &bias_partial, &mean_u, &dbias};
  for (at::Tensor *t : made) {
    if (!t->defined() || t->is_same(rstd)) continue;
    if (poison) t->fill_(std::numeric_limits<double>::quiet_NaN());
    if (address_class(*t) != 0) Py_RETURN_NONE;  // the plans are for aligned outputs
  }
  const LayerNormOutputs ln_out{ln.mean, bias ? &bias_partial : nullptr, ln.mean ? &mean_u : nullptr};
  Params params, dgamma_params, dbias_params;
  if (!pack_backward(held.plan, x, w, rstd, dy, dres, dx, partial, mean_ux, ln_out, &params)) Py_RETURN_NONE;
  if (w && !pack_dgamma(held_dgamma.plan, partial, dgamma, &dgamma_params)) Py_RETURN_NONE;
  if (bias && !pack_dgamma(held_dbias.plan, bias_partial, dbias, &dbias_params)) Py_RETURN_NONE;
  const long dims[3] = {static_cast<long>(p), 1, 1};
  const long sum_dims[3] = {static_cast<long>((N + reduce_block_n - 1) / reduce_block_n), 1, 1};
  if (!rmsnorm_launch::launch_plan(held.plan, dims, stream, &params)) return nullptr;
  if (w && !rmsnorm_launch::launch_plan(held_dgamma.plan, sum_dims, stream, &dgamma_params)) return nullptr;
  if (bias && !rmsnorm_launch::launch_plan(held_dbias.plan, sum_dims, stream, &dbias_params)) return nullptr;
  if (ln.mean == nullptr) return tensor_pair(std::move(dx), std::move(dgamma));
  return tensor_triple(std::move(dx), std::move(dgamma), std::move(dbias));
}

// backward(x, weight, rstd, dy, offset, dres, poison) -> (dx, dgamma or None) launched on the current stream, or
// None (launch_backward_kind). The inputs are checked by the caller (rmsnorm.contract.check_fast_backward_inputs;
// the fused add's, with x its residual_out and dres the gradient of residual_out, else None:
// check_add_backward_inputs); poison: the outputs filled with NaN first.
PyObject *backward(PyObject *, PyObject *const *args, Py_ssize_t nargs) {
  if (nargs != 7) {
    PyErr_SetString(PyExc_TypeError, "backward(x, weight, rstd, dy, offset, dres, poison)");
    return nullptr;
  }
  HANDLE_TH_ERRORS
  const int poison = PyObject_IsTrue(args[6]);
  if (poison < 0) return nullptr;
  const at::Tensor *x = nullptr, *w = nullptr, *rstd = nullptr, *dy = nullptr, *dres = nullptr;
  if (!unpack_backward(args, &x, &w, &rstd, &dy) || !unpack_dres(args[5], *x, &dres)) Py_RETURN_NONE;
  const double offset = PyFloat_AsDouble(args[4]);
  if (offset == -1.0 && PyErr_Occurred()) return nullptr;
  return launch_backward_kind(*x, w, *rstd, *dy, offset, dres, LayerNormInputs{}, poison);
  END_HANDLE_TH_ERRORS
}

// Whether the LayerNorm's mean and bias are what this file takes: mean (M,), the bias (N,) or nullptr.
bool layernorm_inputs_fit(const at::Tensor &x, const LayerNormInputs &ln) {
  return ln.mean == nullptr ||
         (vector_of(*ln.mean, x.size(0)) && (ln.bias == nullptr || vector_of(*ln.bias, x.size(1))));
}

// backward_layernorm(x, weight, bias, mean, rstd, dy, poison) -> (dx, dweight or None, dbias or None) or None: the
// LayerNorm's backward (rmsnorm.layernorm_launchers.launch_layernorm_backward), checked by the caller
// (check_layernorm_backward_inputs).
PyObject *backward_layernorm(PyObject *, PyObject *const *args, Py_ssize_t nargs) {
  if (nargs != 7) {
    PyErr_SetString(PyExc_TypeError, "backward_layernorm(x, weight, bias, mean, rstd, dy, poison)");
    return nullptr;
  }
  HANDLE_TH_ERRORS
  const int poison = PyObject_IsTrue(args[6]);
  if (poison < 0) return nullptr;
  const at::Tensor *x = nullptr, *w = nullptr, *bias = nullptr, *mean = nullptr, *rstd = nullptr, *dy = nullptr;
  if (!unpack(args[0], &x) || x == nullptr || !unpack(args[1], &w) || !unpack(args[2], &bias) ||
      !unpack(args[3], &mean) || mean == nullptr || !unpack(args[4], &rstd) || rstd == nullptr ||
      !unpack(args[5], &dy) || dy == nullptr || x->dim() != 2 || x->size(0) == 0 || dy->dim() != 2) {
    Py_RETURN_NONE;
  }
  const LayerNormInputs ln{mean, bias};
  if (!layernorm_inputs_fit(*x, ln)) Py_RETURN_NONE;
  return launch_backward_kind(*x, w, *rstd, *dy, 0.0, nullptr, ln, poison);
  END_HANDLE_TH_ERRORS
}

// The LayerNorm's tensors of a kept or packed backward, from (mean, bias, bias_partial, mean_u, dbias[, (plan,
// kernel)]) (`size` items): bias, bias_partial and dbias None without a bias. False with a Python error set when the
// tuple is not one.
bool unpack_layernorm(PyObject *tuple, Py_ssize_t size, const char *usage, LayerNormInputs *in, LayerNormOutputs *out,
                      const at::Tensor **dbias) {
  const at::Tensor *mean = nullptr, *bias = nullptr, *bias_partial = nullptr, *mean_u = nullptr;
  if (!PyTuple_Check(tuple) || PyTuple_GET_SIZE(tuple) != size || !unpack(PyTuple_GET_ITEM(tuple, 0), &mean) ||
      mean == nullptr || !unpack(PyTuple_GET_ITEM(tuple, 1), &bias) ||
      !unpack(PyTuple_GET_ITEM(tuple, 2), &bias_partial) || !unpack(PyTuple_GET_ITEM(tuple, 3), &mean_u) ||
      mean_u == nullptr || !unpack(PyTuple_GET_ITEM(tuple, 4), dbias) || (bias == nullptr) != (*dbias == nullptr) ||
      (bias == nullptr) != (bias_partial == nullptr)) {
    PyErr_SetString(PyExc_TypeError, usage);
    return false;
  }
  *in = LayerNormInputs{mean, bias};
  *out = LayerNormOutputs{mean, bias_partial, mean_u};
  return true;
}

// Whether a (P, N) float32 partial and its (N,) sum are as launch_backward_kind allocates them.
bool partials_fit(const at::Tensor &partial, const at::Tensor &total, int64_t p, int64_t N, at::ScalarType dtype) {
  return partial.dim() == 2 && partial.size(0) == p && partial.size(1) == N && partial.is_contiguous() &&
         partial.scalar_type() == at::kFloat && address_class(partial) == 0 && total.dim() == 1 &&
         total.size(0) == N && total.scalar_type() == dtype && address_class(total) == 0;
}

// Whether a row scratch is as launch_backward_kind allocates it: rstd itself for one block, else (M,) in `compute`.
bool scratch_fits(const at::Tensor &scratch, const at::Tensor &rstd, bool one_block, int64_t M,
                  at::ScalarType compute) {
  return one_block ? scratch.is_same(rstd)
                   : (scratch.dim() == 1 && scratch.size(0) == M && scratch.scalar_type() == compute &&
                      address_class(scratch) == 0);
}

// remember_backward(x, weight, rstd, dy, offset, (dx, partial, mean_ux, dgamma), (plan, kernel),
//                   (dgamma_plan, dgamma_kernel), (block_m, cap, one_block, compute_is_float64, reduce_block_n)
//                   [, dres[, (mean, bias, bias_partial, mean_u, dbias, (dbias_plan, dbias_kernel))]]) -> bool
// Keep the plans of the kernels the Python path has just launched for these tensors, with what it allocated
// (dgamma_plan, dgamma_kernel and dgamma are None without a weight; mean_ux is rstd when one_block; the fused add's
// dres, or the LayerNorm's tuple, dres then None: its bias, bias_partial, dbias and dbias plan None without a bias,
// mean_u rstd when one_block). False, keeping nothing, where this file could not launch them: outputs not 16-byte
// aligned or not of the shapes it allocates, or codes other than the kernels' (kBackwardCodes, kBackwardAddCodes,
// kBackwardLayerNormCodes, kDgammaCodes, then constexprs).
PyObject *remember_backward(PyObject *, PyObject *const *args, Py_ssize_t nargs) {
  const char *usage = "remember_backward(x, weight, rstd, dy, offset, (dx, partial, mean_ux, dgamma), (plan, kernel), "
                      "(dgamma_plan, dgamma_kernel), (block_m, cap, one_block, compute_is_float64, reduce_block_n)"
                      "[, dres[, (mean, bias, bias_partial, mean_u, dbias, (dbias_plan, dbias_kernel))]])";
  if (nargs < 9 || nargs > 11 || !PyTuple_Check(args[5]) || PyTuple_GET_SIZE(args[5]) != 4 ||
      !PyTuple_Check(args[6]) || PyTuple_GET_SIZE(args[6]) != 2 || !PyTuple_Check(args[7]) ||
      PyTuple_GET_SIZE(args[7]) != 2 || !PyTuple_Check(args[8]) || PyTuple_GET_SIZE(args[8]) != 5) {
    PyErr_SetString(PyExc_TypeError, usage);
    return nullptr;
  }
  HANDLE_TH_ERRORS
  const at::Tensor *x = nullptr, *w = nullptr, *rstd = nullptr, *dy = nullptr;
  const at::Tensor *dx = nullptr, *partial = nullptr, *mean_ux = nullptr, *dgamma = nullptr;
  PyObject *outputs = args[5];
  if (!unpack_backward(args, &x, &w, &rstd, &dy) || !unpack(PyTuple_GET_ITEM(outputs, 0), &dx) || dx == nullptr ||
      !unpack(PyTuple_GET_ITEM(outputs, 1), &partial) || partial == nullptr ||
      !unpack(PyTuple_GET_ITEM(outputs, 2), &mean_ux) || mean_ux == nullptr ||
      !unpack(PyTuple_GET_ITEM(outputs, 3), &dgamma) || (w != nullptr) != (dgamma != nullptr)) {
    PyErr_SetString(PyExc_TypeError, usage);
    return nullptr;
  }
  const at::Tensor *dres = nullptr, *dbias = nullptr;
  if (nargs >= 10 && !unpack(args[9], &dres)) {
    PyErr_SetString(PyExc_TypeError, usage);
    return nullptr;
  }
  LayerNormInputs ln;
  LayerNormOutputs ln_out;
  PyObject *dbias_kept = nullptr;  // (dbias_plan, dbias_kernel)
  Plan dbias_plan;
  if (nargs == 11 && args[10] != Py_None) {
    if (dres != nullptr || !unpack_layernorm(args[10], 6, usage, &ln, &ln_out, &dbias)) {
      if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "remember_backward: dres or the LayerNorm's, not both");
      return nullptr;
    }
    dbias_kept = PyTuple_GET_ITEM(args[10], 5);
    if (!PyTuple_Check(dbias_kept) || PyTuple_GET_SIZE(dbias_kept) != 2) {
      PyErr_SetString(PyExc_TypeError, usage);
      return nullptr;
    }
    if (ln.bias && !rmsnorm_launch::parse_plan(PyTuple_GET_ITEM(dbias_kept, 0), &dbias_plan)) return nullptr;
  }
  const double offset = PyFloat_AsDouble(args[4]);
  if (offset == -1.0 && PyErr_Occurred()) return nullptr;
  PyObject *shape = args[8];
  const int64_t block_m = PyLong_AsLongLong(PyTuple_GET_ITEM(shape, 0));
  const int64_t cap = PyLong_AsLongLong(PyTuple_GET_ITEM(shape, 1));
  const int one_block = PyObject_IsTrue(PyTuple_GET_ITEM(shape, 2));
  const int compute_is_float64 = PyObject_IsTrue(PyTuple_GET_ITEM(shape, 3));
  const int64_t reduce_block_n = PyLong_AsLongLong(PyTuple_GET_ITEM(shape, 4));
  if (PyErr_Occurred() || one_block < 0 || compute_is_float64 < 0) return nullptr;
  if (block_m < 1 || cap < 0 || reduce_block_n < 1) {
    PyErr_SetString(PyExc_ValueError, "remember_backward: block_m >= 1, cap >= 0 and reduce_block_n >= 1");
    return nullptr;
  }
  Plan plan, dgamma_plan;
  if (!rmsnorm_launch::parse_plan(PyTuple_GET_ITEM(args[6], 0), &plan)) return nullptr;
  if (w && !rmsnorm_launch::parse_plan(PyTuple_GET_ITEM(args[7], 0), &dgamma_plan)) return nullptr;

  BackwardEntry shape_of;
  shape_of.block_m = block_m;
  shape_of.cap = cap;
  const int64_t M = x->size(0), N = x->size(1), p = backward_programs(shape_of, M);
  const at::ScalarType compute = compute_is_float64 ? at::kDouble : at::kFloat;
  // stride(0) == N as well: is_contiguous() ignores a single row's stride, which the kernel was compiled for
  const bool dx_ok = dx->dim() == 2 && dx->size(0) == M && dx->size(1) == N && dx->stride(0) == N &&
                     dx->is_contiguous() && dx->scalar_type() == x->scalar_type() && address_class(*dx) == 0;
  const bool partial_ok = !w || partials_fit(*partial, *dgamma, p, N, w->scalar_type());
  const bool mean_ux_ok = scratch_fits(*mean_ux, *rstd, one_block, M, compute);
  const bool layernorm_ok =
      ln.mean == nullptr ||
      (layernorm_inputs_fit(*x, ln) && scratch_fits(*ln_out.mean_u, *rstd, one_block, M, compute) &&
       (!ln.bias || partials_fit(*ln_out.bias_partial, *dbias, p, N, ln.bias->scalar_type())));
  const bool codes_ok =
      dres ? codes_allowed(plan, kBackwardAddCodes, kBackwardAddArguments)
      : ln.mean ? codes_allowed(plan, ln.bias ? kBackwardLayerNormCodes : kBackwardLayerNormNoBiasCodes,
                                kBackwardLayerNormArguments)
                : codes_allowed(plan, kBackwardCodes, kBackwardArguments);
  if (!dx_ok || !partial_ok || !mean_ux_ok || !layernorm_ok || !codes_ok || !dres_fits(*x, dres) ||
      (w && !codes_allowed(dgamma_plan, kDgammaCodes, kDgammaArguments)) ||
      (ln.bias && !codes_allowed(dbias_plan, kDgammaCodes, kDgammaArguments))) {
    Py_RETURN_FALSE;
  }
  Released released;
  BackwardEntry &entry = backward_entries[backward_key_of(*x, w, *rstd, *dy, offset, dres, ln)];
  if (entry.block_m != block_m || entry.cap != cap || entry.one_block != static_cast<bool>(one_block) ||
      entry.compute != compute || entry.reduce_block_n != reduce_block_n) {  // another configuration: afresh
    entry.release(released);
    entry.block_m = block_m;
    entry.cap = cap;
    entry.one_block = one_block;
    entry.compute = compute;
    entry.reduce_block_n = reduce_block_n;
  }
  entry.backward.keep(plan, PyTuple_GET_ITEM(args[6], 0), PyTuple_GET_ITEM(args[6], 1), released);
  if (w) {
    entry.dgamma[integer_class(p)].keep(dgamma_plan, PyTuple_GET_ITEM(args[7], 0), PyTuple_GET_ITEM(args[7], 1),
                                        released);
  }
  if (ln.bias) {
    entry.dbias[integer_class(p)].keep(dbias_plan, PyTuple_GET_ITEM(dbias_kept, 0), PyTuple_GET_ITEM(dbias_kept, 1),
                                       released);
  }
  Py_RETURN_TRUE;
  END_HANDLE_TH_ERRORS
}

// backward_params(x, weight, rstd, dy, offset, dx, partial, mean_ux, dgamma[, dres[, (mean, bias, bias_partial,
// mean_u, dbias)]]) -> (programs, backward parameters, dgamma parameters or None[, dbias parameters or None]) or
// None: what a backward would hand the driver for these tensors and outputs (any device: for tests on a machine
// without a GPU); the LayerNorm's tuple adds dbias's parameters.
PyObject *backward_params(PyObject *, PyObject *const *args, Py_ssize_t nargs) {
  const char *usage = "backward_params(x, weight, rstd, dy, offset, dx, partial, mean_ux, dgamma[, dres[, (mean, "
                      "bias, bias_partial, mean_u, dbias)]])";
  if (nargs < 9 || nargs > 11) {
    PyErr_SetString(PyExc_TypeError, usage);
    return nullptr;
  }
  HANDLE_TH_ERRORS
  const at::Tensor *x = nullptr, *w = nullptr, *rstd = nullptr, *dy = nullptr;
  const at::Tensor *dx = nullptr, *partial = nullptr, *mean_ux = nullptr, *dgamma = nullptr;
  if (!unpack_backward(args, &x, &w, &rstd, &dy) || !unpack(args[5], &dx) || dx == nullptr ||
      !unpack(args[6], &partial) || partial == nullptr || !unpack(args[7], &mean_ux) || mean_ux == nullptr ||
      !unpack(args[8], &dgamma) || dx->dim() != 2 || partial->dim() != 2) {
    Py_RETURN_NONE;  // pack_backward and pack_dgamma read dx's row stride and partial's (P, N)
  }
  const at::Tensor *dres = nullptr, *dbias = nullptr;
  if (nargs >= 10 && !unpack_dres(args[9], *x, &dres)) Py_RETURN_NONE;
  LayerNormInputs ln;
  LayerNormOutputs ln_out;
  const bool layernorm = nargs == 11;
  if (layernorm && !unpack_layernorm(args[10], 5, usage, &ln, &ln_out, &dbias)) return nullptr;
  if (!layernorm_inputs_fit(*x, ln) || (ln.bias && ln_out.bias_partial->dim() != 2)) Py_RETURN_NONE;
  const double offset = PyFloat_AsDouble(args[4]);
  if (offset == -1.0 && PyErr_Occurred()) return nullptr;
  int64_t p = 0;
  BackwardEntry *entry = nullptr;
  if (!look_up_backward(*x, w, *rstd, *dy, offset, dres, ln, &p, &entry)) Py_RETURN_NONE;
  Params params, dgamma_params, dbias_params;
  if (!pack_backward(entry->backward.plan, *x, w, *rstd, *dy, dres, *dx, *partial, *mean_ux, ln_out, &params)) {
    Py_RETURN_NONE;
  }
  if (w && (dgamma == nullptr || !pack_dgamma(entry->dgamma[integer_class(p)].plan, *partial, *dgamma,
                                              &dgamma_params))) {
    Py_RETURN_NONE;
  }
  if (ln.bias && !pack_dgamma(entry->dbias[integer_class(p)].plan, *ln_out.bias_partial, *dbias, &dbias_params)) {
    Py_RETURN_NONE;
  }
  PyObject *packed = packed_bytes(params);
  PyObject *dgamma_packed = w ? packed_bytes(dgamma_params) : Py_NewRef(Py_None);
  PyObject *dbias_packed = ln.bias ? packed_bytes(dbias_params) : Py_NewRef(Py_None);
  if (packed == nullptr || dgamma_packed == nullptr || dbias_packed == nullptr) {
    Py_XDECREF(packed);
    Py_XDECREF(dgamma_packed);
    Py_XDECREF(dbias_packed);
    return nullptr;
  }
  if (!layernorm) {
    Py_DECREF(dbias_packed);
    return Py_BuildValue("(LNN)", static_cast<long long>(p), packed, dgamma_packed);
  }
  return Py_BuildValue("(LNNN)", static_cast<long long>(p), packed, dgamma_packed, dbias_packed);
  END_HANDLE_TH_ERRORS
}

// forget_plans() -> None: drop every kept plan, the forward's and the backward's (and the references they hold).
PyObject *forget_plans(PyObject *, PyObject *const *, Py_ssize_t) {
  // out of the tables first: a reference dropped below may run Python code that reaches them again
  std::unordered_map<Key, Entry, KeyHash> dropped;
  std::unordered_map<BackwardKey, BackwardEntry, BackwardKeyHash> dropped_backward;
  dropped.swap(entries);
  dropped_backward.swap(backward_entries);
  for (auto &item : dropped) {
    item.second.slots[0].clear();
    item.second.slots[1].clear();
  }
  for (auto &item : dropped_backward) item.second.clear();
  Py_RETURN_NONE;
}

// The contract's quick check (rmsnorm.contract._plainly_valid), configured once by configure_quick_check: the
// most columns, and whether a CPU tensor (bf16 excepted) is valid (Triton's interpreter).
struct QuickCheck {
  int64_t max_n = 0;  // 0: not configured, every call False
  bool cpu = false;
} quick;

bool fast_dtype(at::ScalarType t) { return t == at::kFloat || t == at::kHalf || t == at::kBFloat16; }

bool on_kernel_device(const at::Tensor &t) {
  return t.is_cuda() || (quick.cpu && t.is_cpu() && t.scalar_type() != at::kBFloat16);
}

// configure_quick_check(max_n, cpu) -> None.
PyObject *configure_quick_check(PyObject *, PyObject *const *args, Py_ssize_t nargs) {
  if (nargs != 2) {
    PyErr_SetString(PyExc_TypeError, "configure_quick_check(max_n, cpu)");
    return nullptr;
  }
  const long long max_n = PyLong_AsLongLong(args[0]);
  if (max_n == -1 && PyErr_Occurred()) return nullptr;
  if (max_n < 1) {
    PyErr_SetString(PyExc_ValueError, "configure_quick_check: max_n must be at least 1");
    return nullptr;
  }
  const int cpu = PyObject_IsTrue(args[1]);
  if (cpu < 0) return nullptr;
  quick.max_n = max_n;
  quick.cpu = cpu != 0;
  Py_RETURN_NONE;
}

// plainly_valid(x, weight, eps) -> bool: True when x (M, N), exactly a torch.Tensor, weight (N,), a tensor or a
// Parameter, or None, and eps, a float, pass every rule of rmsnorm.contract.check_fast_inputs, as its
// _plainly_valid decides in Python; False means "let the rules say" (also for inputs valid in a rarer way: a
// Parameter x, an int eps). Raises only where the Python check does: a tensor without sizes or strides (nested).
PyObject *plainly_valid(PyObject *, PyObject *const *args, Py_ssize_t nargs) {
  if (nargs != 3) {
    PyErr_SetString(PyExc_TypeError, "plainly_valid(x, weight, eps)");
    return nullptr;
  }
  HANDLE_TH_ERRORS  // a tensor without strides (a nested one) raises as the Python check's reads do
  if (quick.max_n == 0 || Py_TYPE(args[0]) != reinterpret_cast<PyTypeObject *>(THPVariableClass) ||
      !PyFloat_CheckExact(args[2])) {
    Py_RETURN_FALSE;
  }
  const double eps = PyFloat_AS_DOUBLE(args[2]);
  if (!(eps > 0.0 && eps < std::numeric_limits<double>::infinity())) Py_RETURN_FALSE;
  const at::Tensor &x = THPVariable_Unpack(args[0]);
  if (x.layout() != at::kStrided || x.dim() != 2 || !fast_dtype(x.scalar_type()) || !on_kernel_device(x)) {
    Py_RETURN_FALSE;
  }
  const int64_t N = x.size(1);
  if (N < 1 || N > quick.max_n || (x.stride(1) != 1 && N != 1)) Py_RETURN_FALSE;
  PyObject *weight = args[1];
  if (weight == Py_None) Py_RETURN_TRUE;
  if (!THPVariable_CheckExact(weight)) Py_RETURN_FALSE;  // a torch.Tensor or a torch.nn.Parameter, no subclass
  const at::Tensor &w = THPVariable_Unpack(weight);
  if (w.layout() != at::kStrided || w.dim() != 1 || w.size(0) != N || !fast_dtype(w.scalar_type()) ||
      (w.stride(0) != 1 && N != 1) || w.device() != x.device() || !on_kernel_device(w)) {
    Py_RETURN_FALSE;
  }
  Py_RETURN_TRUE;
  END_HANDLE_TH_ERRORS
}

// plans() -> (forward, backward): how many plans are kept (the backward's: each kernel's, the sums' included).
PyObject *plans(PyObject *, PyObject *const *, Py_ssize_t) {
  long forward_count = 0, backward_count = 0;
  for (const auto &item : entries) {
    forward_count += (item.second.slots[0].plan_tuple != nullptr) + (item.second.slots[1].plan_tuple != nullptr);
  }
  for (const auto &item : backward_entries) {
    backward_count += item.second.backward.plan_tuple != nullptr;
    for (const Slot &slot : item.second.dgamma) backward_count += slot.plan_tuple != nullptr;
    for (const Slot &slot : item.second.dbias) backward_count += slot.plan_tuple != nullptr;
  }
  return Py_BuildValue("(ll)", forward_count, backward_count);
}

template <typename F>
PyCFunction fastcall(F f) {
  return reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(f));
}

}  // namespace

PyMethodDef rmsnorm_forward_methods[] = {
    {"forward", fastcall(forward), METH_FASTCALL,
     "forward(x, weight, eps, offset, poison) -> (y, rstd) or None: the fast forward launched from a kept plan"},
    {"forward_add", fastcall(forward_add), METH_FASTCALL,
     "forward_add(x, residual, weight, eps, offset, poison) -> (y, residual_out, rstd) or None: the fused add's"},
    {"forward_layernorm", fastcall(forward_layernorm), METH_FASTCALL,
     "forward_layernorm(x, weight, bias, eps, poison) -> (y, mean, rstd) or None: the LayerNorm's forward"},
    {"remember_forward", fastcall(remember_forward), METH_FASTCALL,
     "remember_forward(x, weight, offset, y, rstd, plan, block_m, cap, kernel[, residual, residual_out, mean, "
     "bias]) -> bool: keep a plan"},
    {"forward_params", fastcall(forward_params), METH_FASTCALL,
     "forward_params(x, weight, eps, offset, y, rstd[, residual, residual_out, mean, bias]) -> (programs, bytes) "
     "or None: what a forward would launch"},
    {"backward", fastcall(backward), METH_FASTCALL,
     "backward(x, weight, rstd, dy, offset, dres, poison) -> (dx, dgamma or None) or None: from kept plans"},
    {"backward_layernorm", fastcall(backward_layernorm), METH_FASTCALL,
     "backward_layernorm(x, weight, bias, mean, rstd, dy, poison) -> (dx, dweight, dbias) or None: the LayerNorm's"},
    {"remember_backward", fastcall(remember_backward), METH_FASTCALL,
     "remember_backward(x, weight, rstd, dy, offset, outputs, plan, dgamma_plan, shape[, dres[, layernorm]]) -> "
     "bool: keep plans"},
    {"backward_params", fastcall(backward_params), METH_FASTCALL,
     "backward_params(x, weight, rstd, dy, offset, dx, partial, mean_ux, dgamma[, dres[, layernorm]]) -> what a "
     "backward would launch"},
    {"forget_plans", fastcall(forget_plans), METH_FASTCALL, "forget_plans(): drop every kept plan"},
    {"plans", fastcall(plans), METH_FASTCALL, "plans() -> (forward, backward): plans kept"},
    {"configure_quick_check", fastcall(configure_quick_check), METH_FASTCALL,
     "configure_quick_check(max_n, cpu): what plainly_valid accepts"},
    {"plainly_valid", fastcall(plainly_valid), METH_FASTCALL,
     "plainly_valid(x, weight, eps) -> bool: rmsnorm.contract's quick check of the fast contract"},
    {nullptr, nullptr, 0, nullptr}};

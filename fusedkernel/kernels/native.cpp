// The native launch lane: add_rmsnorm's common eager cases in one C++ call.
//
// A decode step's forward costs the host more than the GPU: Python's argument
// checks, the output's allocation and Triton's launcher take ~2x a torch.add
// (docs/performance.md, section 2). This lane does the checks, the allocation
// and the launch (cuLaunchKernel of the kernel the Python path compiled) in
// C++. It takes only the plain cases: contiguous CUDA tensors, 16-byte aligned,
// hidden size a multiple of 16, no gradient wanted, a whole-row kernel
// registered for this (device, hidden size, dtypes, residual output or not),
// the tensors' device current, no Triton launch hooks, no torch function or
// dispatch mode; an in-place residual that no other argument overlaps.
// For anything else it returns None and the caller takes the Python path,
// which checks, reports errors and launches as always.
#include <torch/extension.h>
#include <torch/csrc/Exceptions.h>
#include <torch/csrc/autograd/python_variable.h>
#include <ATen/EmptyTensor.h>
#include <ATen/PythonTorchFunctionTLS.h>
#include <c10/core/Allocator.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <c10/core/impl/TorchDispatchModeTLS.h>
#include <dlfcn.h>

#include <cstdint>
#include <unordered_map>

namespace {

// The CUDA driver API, resolved from the driver torch already loaded (no CUDA headers needed).
typedef int (*LaunchFn)(void*, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, void*, void**,
                        void**);
typedef int (*CtxFn)(void**);
typedef int (*ErrFn)(int, const char**);
LaunchFn cu_launch = nullptr;
CtxFn cu_ctx_get_current = nullptr;
ErrFn cu_error_string = nullptr;

PyObject* triton_runtime = nullptr;  // triton.knobs.runtime, for its launch hooks
PyObject* calls_name = nullptr;      // interned attribute names
PyObject* enter_name = nullptr;
PyObject* exit_name = nullptr;

struct Kernel {
  void* function;
  unsigned threads, shared_bytes;
  int64_t block_m;
};
// Keyed by device, dtypes, whether the kernel stores the residual sum, and hidden size.
std::unordered_map<uint64_t, Kernel> kernels;

// The float32 normal range, as _validation.check_eps.
constexpr double kEpsMin = 1.1754943508222875e-38, kEpsMax = 3.4028234663852886e+38;

uint64_t kernel_key(int64_t device, int64_t n_cols, c10::ScalarType x_dtype, c10::ScalarType w_dtype,
                    bool has_res) {
  return (uint64_t(device) << 56) | (uint64_t(uint8_t(x_dtype)) << 48) | (uint64_t(uint8_t(w_dtype)) << 40) |
         (uint64_t(has_res) << 39) | uint64_t(n_cols);
}

bool overlap(const at::Tensor& a, const at::Tensor& b) {
  const auto a0 = reinterpret_cast<uintptr_t>(a.data_ptr()), b0 = reinterpret_cast<uintptr_t>(b.data_ptr());
  return a0 < b0 + b.nbytes() && b0 < a0 + a.nbytes();
}

// The kernel reads raw, aligned memory: a dense, contiguous CUDA tensor with real storage (not a functorch,
// functionalization or zero-tensor wrapper, whose data pointer is null or not its own), no lazy negation.
bool plain_tensor(PyObject* obj) {
  // Exact torch.Tensor or nn.Parameter (THPVariable_CheckExact): a subclass may mean something else.
  if (!THPVariable_CheckExact(obj)) return false;
  const at::Tensor& t = THPVariable_Unpack(obj);
  const c10::DispatchKeySet keys = t.key_set();
  return t.is_cuda() && t.layout() == c10::kStrided && !t.is_nested() && t.has_storage() && !t.is_neg() &&
         !keys.has(c10::DispatchKey::Python) && !keys.has(c10::DispatchKey::Functionalize) &&
         !keys.has(c10::DispatchKey::ZeroTensor) && t.is_contiguous() && t.data_ptr() != nullptr &&
         (reinterpret_cast<uintptr_t>(t.data_ptr()) & 15) == 0;
}

// A 2-tuple of new references (stolen); null if either is null.
PyObject* pair(PyObject* a, PyObject* b) {
  PyObject* t = a && b ? PyTuple_New(2) : nullptr;
  if (t == nullptr) {
    Py_XDECREF(a);
    Py_XDECREF(b);
    return nullptr;
  }
  PyTuple_SET_ITEM(t, 0, a);
  PyTuple_SET_ITEM(t, 1, b);
  return t;
}

// Whether a Triton launch hook (a profiler's) is set: Triton 3.6's hooks are HookChains, set when their list
// of calls is not empty. Anything unexpected counts as set, so the Python path (which calls hooks) runs.
bool hooked(PyObject* name) {
  PyObject* hook = PyObject_GetAttr(triton_runtime, name);
  if (hook == nullptr) {
    PyErr_Clear();
    return true;
  }
  bool set = hook != Py_None;
  if (set) {
    PyObject* calls = PyObject_GetAttr(hook, calls_name);
    const int truth = calls == nullptr ? -1 : PyObject_IsTrue(calls);
    Py_XDECREF(calls);
    if (truth < 0) PyErr_Clear();
    set = truth != 0;
  }
  Py_DECREF(hook);
  return set;
}

// init(triton_runtime): load the driver's entry points.
PyObject* init(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  if (nargs != 1) {
    PyErr_SetString(PyExc_TypeError, "init(triton_runtime)");
    return nullptr;
  }
  void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
  if (lib == nullptr) lib = dlopen("libcuda.so.1", RTLD_NOW);
  if (lib == nullptr) {
    PyErr_SetString(PyExc_RuntimeError, "the native launch lane needs the CUDA driver (libcuda.so.1)");
    return nullptr;
  }
  cu_launch = reinterpret_cast<LaunchFn>(dlsym(lib, "cuLaunchKernel"));
  cu_ctx_get_current = reinterpret_cast<CtxFn>(dlsym(lib, "cuCtxGetCurrent"));
  cu_error_string = reinterpret_cast<ErrFn>(dlsym(lib, "cuGetErrorString"));
  if (!cu_launch || !cu_ctx_get_current || !cu_error_string) {
    PyErr_SetString(PyExc_RuntimeError, "libcuda.so.1 lacks cuLaunchKernel, cuCtxGetCurrent or cuGetErrorString");
    return nullptr;
  }
  calls_name = PyUnicode_InternFromString("calls");
  enter_name = PyUnicode_InternFromString("launch_enter_hook");
  exit_name = PyUnicode_InternFromString("launch_exit_hook");
  if (!calls_name || !enter_name || !exit_name) return nullptr;
  Py_XSETREF(triton_runtime, Py_NewRef(args[0]));
  Py_RETURN_NONE;
}

// register(x, weight, function, threads, shared_bytes, block_m, has_res): launch `function` for x's (device,
// hidden size, dtype), weight's dtype and a residual output (has_res) or none, grid = ceil(rows / block_m).
PyObject* register_kernel(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  if (nargs != 7 || !THPVariable_Check(args[0]) || !THPVariable_Check(args[1]) || !PyBool_Check(args[6])) {
    PyErr_SetString(PyExc_TypeError, "register(x, weight, function, threads, shared_bytes, block_m, has_res)");
    return nullptr;
  }
  HANDLE_TH_ERRORS
  const at::Tensor& x = THPVariable_Unpack(args[0]);
  const at::Tensor& w = THPVariable_Unpack(args[1]);
  const uint64_t function = PyLong_AsUnsignedLongLong(args[2]);
  if (PyErr_Occurred()) return nullptr;
  long numbers[3];
  for (int i = 0; i < 3; ++i) {
    numbers[i] = PyLong_AsLong(args[3 + i]);
    if (PyErr_Occurred()) return nullptr;
  }
  kernels[kernel_key(x.get_device(), x.size(-1), x.scalar_type(), w.scalar_type(), args[6] == Py_True)] =
      Kernel{reinterpret_cast<void*>(function), unsigned(numbers[0]), unsigned(numbers[1]), numbers[2]};
  Py_RETURN_NONE;
  END_HANDLE_TH_ERRORS
}

// forward(x, residual, weight, eps, return_residual, inplace_residual) -> what add_rmsnorm returns
// (y; (y, x + residual); (y, residual) with residual updated in place), or None: not a plain case.
PyObject* forward(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  // c10 errors (an out-of-memory included) become the Python exceptions torch raises for them.
  HANDLE_TH_ERRORS
  if (nargs != 6 || kernels.empty() || !PyFloat_CheckExact(args[3])) Py_RETURN_NONE;
  // Python bools, at most one set: anything else is for the Python path to report.
  if (!PyBool_Check(args[4]) || !PyBool_Check(args[5]) || (args[4] == Py_True && args[5] == Py_True))
    Py_RETURN_NONE;
  const bool new_res = args[4] == Py_True, inplace = args[5] == Py_True, has_res = new_res || inplace;
  // Under a torch function or dispatch mode the Python path's torch calls are seen by the mode: take it.
  if (c10::impl::TorchDispatchModeTLS::stack_len() > 0 || at::impl::PythonTorchFunctionTLS::stack_len() > 0)
    Py_RETURN_NONE;
  if (!plain_tensor(args[0]) || !plain_tensor(args[1]) || !plain_tensor(args[2])) Py_RETURN_NONE;
  const double eps = PyFloat_AS_DOUBLE(args[3]);
  if (!(eps >= kEpsMin && eps <= kEpsMax)) Py_RETURN_NONE;
  const at::Tensor& x = THPVariable_Unpack(args[0]);
  const at::Tensor& r = THPVariable_Unpack(args[1]);
  const at::Tensor& w = THPVariable_Unpack(args[2]);
  const auto x_dtype = x.scalar_type(), w_dtype = w.scalar_type();
  if (!(x_dtype == at::kBFloat16 || x_dtype == at::kHalf || x_dtype == at::kFloat) || r.scalar_type() != x_dtype ||
      !(w_dtype == x_dtype || w_dtype == at::kFloat))
    Py_RETURN_NONE;
  if (x.dim() < 1 || r.sizes() != x.sizes() || w.dim() != 1) Py_RETURN_NONE;
  const int64_t n = x.size(-1);
  // Hidden size and row strides divisible by 16: what the registered kernel was specialized for.
  if (n < 16 || n % 16 != 0 || w.size(0) != n || n >= (int64_t(1) << 31)) Py_RETURN_NONE;
  const int64_t rows = x.numel() / n;
  if (rows < 1 || rows >= (int64_t(1) << 31)) Py_RETURN_NONE;
  const c10::Device device = x.device();
  if (r.device() != device || w.device() != device) Py_RETURN_NONE;
  if (at::GradMode::is_enabled() && (x.requires_grad() || r.requires_grad() || w.requires_grad())) Py_RETURN_NONE;
  // The in-place update reads and writes each residual element in one thread: x may be residual itself, but
  // may not overlap it otherwise, nor may weight (the Python path raises for those). An inference tensor
  // cannot be updated outside inference mode (the Python path raises).
  if (inplace && ((x.data_ptr() != r.data_ptr() && overlap(x, r)) || overlap(w, r) ||
                  (r.is_inference() && !c10::InferenceMode::is_enabled())))
    Py_RETURN_NONE;
  const auto found = kernels.find(kernel_key(device.index(), n, x_dtype, w_dtype, has_res));
  if (found == kernels.end()) Py_RETURN_NONE;
  // A copy: the calls below can run Python (a hook check, an allocator's observers), which may change the table.
  const Kernel k = found->second;
  const c10::impl::DeviceGuardImplInterface* cuda = c10::impl::getDeviceGuardImpl(c10::DeviceType::CUDA);
  void* context = nullptr;
  // The kernel belongs to the current device's context: another current device takes the Python path.
  if (cuda->getDevice() != device || cu_ctx_get_current(&context) != 0 || context == nullptr) Py_RETURN_NONE;
  if (hooked(enter_name) || hooked(exit_name)) Py_RETURN_NONE;
  void* stream = cuda->getStream(device).native_handle();
  // The outputs straight from the CUDA allocator, as at::empty's CUDA kernel gets them, without the
  // dispatcher: at::empty cost the lane 2.0-2.3 us per call on the H200 (docs/performance.md, section 2).
  // at::empty takes c10::cuda::CUDACachingAllocator::get() (libc10_cuda, not linked here); this takes the
  // registry's CUDA allocator, and only when x's storage came from it: a tensor torch allocated came from
  // at::empty's allocator (which cannot change once used), so the two are then one. Under another allocator
  // backend or a pluggable allocator the registry may hold a different one: the Python path.
  // The current device is x's (checked above); the block belongs to the current stream, as always.
  c10::Allocator* const allocator = c10::GetAllocator(c10::DeviceType::CUDA);
  if (x.storage().allocator() != allocator) Py_RETURN_NONE;
  const c10::DispatchKeySet cuda_keys(c10::DispatchKey::CUDA);
  at::Tensor y = at::detail::empty_generic(x.sizes(), allocator, cuda_keys, x_dtype, std::nullopt);
  at::Tensor res;
  if (new_res) res = at::detail::empty_generic(x.sizes(), allocator, cuda_keys, x_dtype, std::nullopt);
  // The arguments of forward._rows_kernel that Triton 3.6 keeps for this specialization
  // (None pointers and constexprs dropped; native.py checks the signature before registering),
  // then its global and profile scratch pointers (null: the kernel uses neither).
  uint64_t x_ptr = uint64_t(x.data_ptr()), r_ptr = uint64_t(r.data_ptr()), w_ptr = uint64_t(w.data_ptr()),
           y_ptr = uint64_t(y.data_ptr()), res_ptr = new_res ? uint64_t(res.data_ptr()) : r_ptr,
           global_scratch = 0, profile_scratch = 0;
  int32_t n_rows = int32_t(rows), n_cols = int32_t(n), stride_x = n_cols, stride_r = n_cols, stride_y = n_cols,
          stride_res = has_res ? n_cols : 0, epoch = 0;
  float eps32 = float(eps);
  void* plain[] = {&x_ptr,    &r_ptr,    &w_ptr,      &y_ptr, &n_rows,         &n_cols,         &stride_x,
                   &stride_r, &stride_y, &stride_res, &eps32, &epoch, &global_scratch, &profile_scratch};
  void* with_res[] = {&x_ptr,    &r_ptr,    &w_ptr,    &y_ptr,      &res_ptr, &n_rows,         &n_cols,
                      &stride_x, &stride_r, &stride_y, &stride_res, &eps32,   &epoch, &global_scratch,
                      &profile_scratch};
  void** params = has_res ? with_res : plain;
  const unsigned grid = unsigned((rows + k.block_m - 1) / k.block_m);
  // The GIL stays held through the launch, as it does through torch's own ops' launches.
  const int rc = cu_launch(k.function, grid, 1, 1, k.threads, 1, 1, k.shared_bytes, stream, params, nullptr);
  if (rc != 0) {
    const char* text = nullptr;
    cu_error_string(rc, &text);
    PyErr_Format(PyExc_RuntimeError, "fusedkernel native launch: cuLaunchKernel failed: %s",
                 text ? text : "unknown CUDA error");
    return nullptr;
  }
  if (inplace) {
    // As the Python path (and PyTorch's own in-place ops): a backward that saved residual now raises.
    torch::autograd::impl::bump_version(r);
    return pair(THPVariable_Wrap(std::move(y)), Py_NewRef(args[1]));
  }
  if (new_res) return pair(THPVariable_Wrap(std::move(y)), THPVariable_Wrap(std::move(res)));
  return THPVariable_Wrap(std::move(y));
  END_HANDLE_TH_ERRORS
}

PyObject* clear(PyObject*, PyObject*) {
  kernels.clear();
  Py_RETURN_NONE;
}

PyMethodDef methods[] = {
    {"init", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(init)), METH_FASTCALL, nullptr},
    {"register", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(register_kernel)), METH_FASTCALL,
     nullptr},
    {"forward", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(forward)), METH_FASTCALL, nullptr},
    {"clear", clear, METH_NOARGS, nullptr},
    {nullptr, nullptr, 0, nullptr}};

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { PyModule_AddFunctions(m.ptr(), methods); }

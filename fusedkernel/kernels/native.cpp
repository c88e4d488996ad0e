// The native launch lane: add_rmsnorm's common eager case in one C++ call.
//
// A decode step's forward costs the host more than the GPU: Python's argument
// checks, the output's allocation and Triton's launcher take ~2x a torch.add
// (docs/performance.md, section 2). This lane does the checks, the allocation
// and the launch (cuLaunchKernel of the kernel the Python path compiled) in
// C++. It takes only the plain case: contiguous CUDA tensors, 16-byte aligned,
// hidden size a multiple of 16, no gradient wanted, a whole-row kernel
// registered for this (device, hidden size, dtypes), no Triton launch hooks.
// For anything else it returns None and the caller takes the Python path,
// which checks, reports errors and launches as always.
#include <torch/extension.h>
#include <torch/csrc/autograd/python_variable.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
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

PyObject* parameter_type = nullptr;  // torch.nn.Parameter: a weight usually is one
PyObject* triton_runtime = nullptr;  // triton.knobs.runtime, for its launch hooks

struct Kernel {
  void* function;
  unsigned threads, shared_bytes;
  int64_t block_m;
};
std::unordered_map<uint64_t, Kernel> kernels;

// The float32 normal range, as _validation.check_eps.
constexpr double kEpsMin = 1.1754943508222875e-38, kEpsMax = 3.4028234663852886e+38;

uint64_t kernel_key(int64_t device, int64_t n_cols, c10::ScalarType x_dtype, c10::ScalarType w_dtype) {
  return (uint64_t(device) << 56) | (uint64_t(uint8_t(x_dtype)) << 48) | (uint64_t(uint8_t(w_dtype)) << 40) |
         uint64_t(n_cols);
}

bool plain_tensor(PyObject* obj, bool weight) {
  return THPVariable_CheckExact(obj) || (weight && Py_TYPE(obj) == reinterpret_cast<PyTypeObject*>(parameter_type));
}

// The kernel reads raw, aligned memory: dense, contiguous, with storage (no functorch wrapper), no lazy negation.
bool plain_layout(const at::Tensor& t) {
  return t.is_cuda() && t.layout() == c10::kStrided && !t.is_nested() && t.has_storage() && !t.is_neg() &&
         t.is_contiguous() && (reinterpret_cast<uintptr_t>(t.data_ptr()) & 15) == 0;
}

bool hooked(const char* name) {
  // Triton 3.6's hooks are HookChains: set when their list of calls is not empty.
  PyObject* hook = PyObject_GetAttrString(triton_runtime, name);
  if (hook == nullptr) {
    PyErr_Clear();
    return true;
  }
  bool set = hook != Py_None;
  if (set) {
    PyObject* calls = PyObject_GetAttrString(hook, "calls");
    if (calls == nullptr) {
      PyErr_Clear();
    } else {
      set = PyObject_IsTrue(calls) != 0;
      Py_DECREF(calls);
    }
  }
  Py_DECREF(hook);
  return set;
}

// init(parameter_type, triton_runtime): load the driver's entry points.
PyObject* init(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  if (nargs != 2) {
    PyErr_SetString(PyExc_TypeError, "init(parameter_type, triton_runtime)");
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
  Py_XSETREF(parameter_type, Py_NewRef(args[0]));
  Py_XSETREF(triton_runtime, Py_NewRef(args[1]));
  Py_RETURN_NONE;
}

// register(x, weight, function, threads, shared_bytes, block_m): launch `function` for x's (device, hidden
// size, dtype) and weight's dtype, grid = ceil(rows / block_m).
PyObject* register_kernel(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  if (nargs != 6 || !THPVariable_Check(args[0]) || !THPVariable_Check(args[1])) {
    PyErr_SetString(PyExc_TypeError, "register(x, weight, function, threads, shared_bytes, block_m)");
    return nullptr;
  }
  const at::Tensor& x = THPVariable_Unpack(args[0]);
  const at::Tensor& w = THPVariable_Unpack(args[1]);
  const uint64_t function = PyLong_AsUnsignedLongLong(args[2]);
  const long threads = PyLong_AsLong(args[3]), shared = PyLong_AsLong(args[4]), block_m = PyLong_AsLong(args[5]);
  if (PyErr_Occurred()) return nullptr;
  kernels[kernel_key(x.get_device(), x.size(-1), x.scalar_type(), w.scalar_type())] =
      Kernel{reinterpret_cast<void*>(function), unsigned(threads), unsigned(shared), block_m};
  Py_RETURN_NONE;
}

// forward(x, residual, weight, eps) -> y, or None: not the plain case.
PyObject* forward(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  if (nargs != 4 || kernels.empty() || !plain_tensor(args[0], false) || !plain_tensor(args[1], false) ||
      !plain_tensor(args[2], true) || !PyFloat_CheckExact(args[3]))
    Py_RETURN_NONE;
  const double eps = PyFloat_AS_DOUBLE(args[3]);
  if (!(eps >= kEpsMin && eps <= kEpsMax)) Py_RETURN_NONE;
  const at::Tensor& x = THPVariable_Unpack(args[0]);
  const at::Tensor& r = THPVariable_Unpack(args[1]);
  const at::Tensor& w = THPVariable_Unpack(args[2]);
  if (!plain_layout(x) || !plain_layout(r) || !plain_layout(w)) Py_RETURN_NONE;
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
  const auto found = kernels.find(kernel_key(device.index(), n, x_dtype, w_dtype));
  if (found == kernels.end()) Py_RETURN_NONE;
  const c10::impl::DeviceGuardImplInterface* cuda = c10::impl::getDeviceGuardImpl(c10::DeviceType::CUDA);
  void* context = nullptr;
  // The kernel belongs to the current device's context: another current device takes the Python path.
  if (cuda->getDevice() != device || cu_ctx_get_current(&context) != 0 || context == nullptr) Py_RETURN_NONE;
  if (hooked("launch_enter_hook") || hooked("launch_exit_hook")) Py_RETURN_NONE;
  void* stream = cuda->getStream(device).native_handle();
  at::Tensor y;
  try {
    y = at::empty(x.sizes(), x.options());
  } catch (const std::exception& e) {
    PyErr_SetString(PyExc_RuntimeError, e.what());
    return nullptr;
  }
  // The arguments of forward._rows_kernel that Triton 3.6 keeps for this specialization
  // (None pointers and constexprs dropped; native.py checks the signature before registering),
  // then its global and profile scratch pointers (null: the kernel uses neither).
  uint64_t x_ptr = uint64_t(x.data_ptr()), r_ptr = uint64_t(r.data_ptr()), w_ptr = uint64_t(w.data_ptr()),
           y_ptr = uint64_t(y.data_ptr()), global_scratch = 0, profile_scratch = 0;
  int32_t n_rows = int32_t(rows), n_cols = int32_t(n), stride_x = n_cols, stride_r = n_cols, stride_y = n_cols,
          stride_res = 0, epoch = 0;
  float eps32 = float(eps);
  void* params[] = {&x_ptr,    &r_ptr,    &w_ptr,      &y_ptr, &n_rows,         &n_cols,         &stride_x,
                    &stride_r, &stride_y, &stride_res, &eps32, &epoch, &global_scratch, &profile_scratch};
  const Kernel& k = found->second;
  const unsigned grid = unsigned((rows + k.block_m - 1) / k.block_m);
  const int rc = cu_launch(k.function, grid, 1, 1, k.threads, 1, 1, k.shared_bytes, stream, params, nullptr);
  if (rc != 0) {
    const char* text = nullptr;
    cu_error_string(rc, &text);
    PyErr_Format(PyExc_RuntimeError, "fusedkernel native launch: cuLaunchKernel failed: %s",
                 text ? text : "unknown CUDA error");
    return nullptr;
  }
  return THPVariable_Wrap(std::move(y));
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

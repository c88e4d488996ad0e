"""The native launch lane (opt-in): add_rmsnorm's common eager cases checked, allocated and launched in C++.

Enable it with ``FUSEDKERNEL_NATIVE_LAUNCH=1`` in the environment (read when
fusedkernel is imported; a lane that cannot be built there is reported with a
warning and left off) or :func:`enable`. The first use builds ``native.cpp``
with ``torch.utils.cpp_extension`` (a C++ compiler and ``ninja`` must be
installed; ~25 s, then cached by torch).

The lane serves a call when it needs no gradient (and no forward-mode AD),
runs outside torch.compile's tracing and outside torch function and dispatch
modes (with or without ``return_residual`` or ``inplace_residual``; in place
only when x is residual itself or does not overlap it, weight does not
overlap it, and an inference-mode residual is updated inside inference
mode); x, residual and weight are exact tensors (or Parameters) on the
current CUDA device, contiguous, 16-byte aligned; eps is
a Python float; the hidden size is a multiple of 16 and rows are held whole
by one program (up to 32768 wide in bf16/fp16, 16384 in fp32); no Triton
launch hook is set; and the Python path has launched the same (device,
hidden size, dtypes, residual output or not) since the lane was enabled
(that launch compiles the kernel and registers it). Everything else takes
the Python path. Host time per synchronized decode call on the H200:
docs/performance.md, section 2.
"""

from __future__ import annotations

import os
import pathlib
import sysconfig

import torch
import triton

from . import launch

# The lane's forward(x, residual, weight, eps, return_residual, inplace_residual) -> what
# add_rmsnorm returns, or None (not a case it takes); None while the lane is off.
forward = None
_module = None
# forward._rows_kernel's launch arguments left after Triton 3.6 drops the constexprs and the
# None outputs: the order native.cpp passes them in (res_ptr after y_ptr when the kernel stores
# the residual sum).
_PARAMS = [("x_ptr", "*"), ("r_ptr", "*"), ("w_ptr", "*"), ("y_ptr", "*"), ("n_rows", "i32"), ("n_cols", "i32"),
           ("stride_x", "i32"), ("stride_r", "i32"), ("stride_y", "i32"), ("stride_res", "i32"),
           ("eps", "fp32"), ("epoch", "i32")]
_TRITON_TYPES = {torch.bfloat16: "bf16", torch.float16: "fp16", torch.float32: "fp32"}


def enable() -> None:
    """Build (once; torch caches the build) and switch on the native launch lane.

    Raises:
        RuntimeError: not a CUDA build of torch with Triton 3.6 outside the
            interpreter (the lane launches Triton 3.6's compiled kernels), or
            the CUDA driver (libcuda.so.1) cannot be loaded.
        Whatever torch.utils.cpp_extension raises when the build fails (no
        C++ compiler, no ninja).
    """
    global forward, _module
    if not launch._FAST:
        problems = [why for why, ok in (("torch is not a CUDA build", launch._raw_stream is not None),
                                        (f"Triton is {triton.__version__}", triton.__version__.startswith("3.6")),
                                        ("TRITON_INTERPRET=1 is set", not launch.INTERPRET)) if not ok]
        raise RuntimeError("the native launch lane needs a CUDA build of torch and Triton 3.6, outside "
                           f"TRITON_INTERPRET; here {', '.join(problems)}")
    if _module is None:
        module = build()
        module.init(triton.knobs.runtime)
        _module = module
    # Kernels compiled before now were never registered: the next launches compile (from
    # Triton's cache) and register them.
    launch._compiled.clear()
    forward = _module.forward


def build(build_directory: str | None = None):
    """Compile native.cpp (or load torch's cached build) and return the extension module.

    ``build_directory``: where to build (default: torch's extension cache).
    Builds on any torch, CPU builds included (the lane itself needs CUDA).
    """
    from torch.utils.cpp_extension import load

    # torch runs `ninja` from PATH; pip puts it next to this interpreter, which a
    # virtualenv used without activating (.venv/bin/python) leaves off PATH, or,
    # for an environment that borrows another's packages (asv's), next to that one.
    path = os.environ.get("PATH", "")
    dirs = [sysconfig.get_path("scripts")]
    try:
        import ninja

        dirs.append(ninja.BIN_DIR)
    except (ImportError, AttributeError):
        pass
    os.environ["PATH"] = os.pathsep.join(dirs + ([path] if path else []))
    try:
        return load("fusedkernel_native", [str(pathlib.Path(__file__).with_name("native.cpp"))],
                    extra_ldflags=["-ldl"], build_directory=build_directory)
    finally:
        os.environ["PATH"] = path


def disable() -> None:
    """Switch the lane off and forget its kernels (they are registered again after :func:`enable`)."""
    global forward
    forward = None
    if _module is not None:
        _module.clear()


def register(compiled, x: torch.Tensor, weight: torch.Tensor, block_m: int, has_res: bool) -> bool:
    """Let the lane launch ``compiled`` (forward._rows_kernel, whole rows, no rstd output).

    For x's device, hidden size and dtype, weight's dtype, and a residual
    output in x's dtype (``has_res``) or none. Returns False, registering
    nothing, when the compiled kernel's arguments are not the ones
    native.cpp passes (another Triton version's specialization rules) or it
    needs what the lane does not set up (scratch memory, clusters,
    cooperative or PDL launches).
    """
    if _module is None or forward is None:
        return False
    kept = [(name, ty) for name, ty in compiled.src.signature.items() if ty != "constexpr"]
    # Pointer types too: native.cpp allocates y (and a new residual output) in x's dtype.
    pointers = {"x_ptr": x.dtype, "r_ptr": x.dtype, "w_ptr": weight.dtype, "y_ptr": x.dtype, "res_ptr": x.dtype}
    params = _PARAMS[:4] + [("res_ptr", "*")] + _PARAMS[4:] if has_res else _PARAMS
    expected = [(name, f"*{_TRITON_TYPES[pointers[name]]}" if ty == "*" else ty) for name, ty in params]
    run, meta = compiled.run, compiled.metadata
    if (kept != expected or run.global_scratch_size or run.profile_scratch_size or run.launch_cooperative_grid
            or run.launch_pdl or meta.num_ctas != 1):
        return False
    _module.register(x, weight, compiled.function, 32 * meta.num_warps, meta.shared, block_m, has_res)
    return True

"""The public fused op: ``y = rmsnorm(x + residual) * weight`` in one Triton kernel.

Eager calls that need no gradient launch the kernel directly (the shortest host
path, for decode). Calls that need autograd, and calls inside torch.compile or
under a tracer that sees only dispatched ops (make_fx, FakeTensorMode,
torch.jit.trace, any TorchDispatchMode), go through the custom ops registered
here (``torch.ops.fusedkernel.*``), which carry fake implementations for
tracing and the fused backward.
"""

from __future__ import annotations

import torch
import torch.autograd.forward_ad as _fwad
from torch import Tensor

from ._validation import (check_backward, check_distinct_rows, check_inplace, check_inputs, row_stride, rows_view,
                          type_name)
from .kernels.launch import INTERPRET, backward_rows, forward_rows


def _forward(x: Tensor, residual: Tensor, weight: Tensor, eps: float, res_mode: str | None,
             want_rstd: bool) -> tuple[Tensor, Tensor | None, Tensor | None]:
    """Launch the forward; res_mode None, "new" or "inplace". Returns (y, res, rstd).

    Runs on real tensors (also inside compiled graphs, as the custom ops'
    implementation), so the checks that read memory addresses or flags that
    tracing cannot see live here.
    """
    _check_not_neg(x, residual, weight)
    if res_mode == "inplace":
        check_inplace(x, residual, weight)
    # Outputs are contiguous whatever x's row stride (empty_like alone would copy it).
    y = torch.empty_like(x, memory_format=torch.contiguous_format)
    res = None
    if res_mode == "new":
        res = torch.empty_like(x, memory_format=torch.contiguous_format)
    elif res_mode == "inplace":
        res = residual
    rstd = None
    if want_rstd:
        rstd = torch.empty(x.numel() // x.shape[-1], dtype=torch.float32, device=x.device)
    if x.numel() > 0:
        forward_rows(x, residual, weight, eps, y, res, rstd)
    return y, (None if res_mode == "inplace" else res), rstd


def _check_not_neg(x: Tensor, residual: Tensor, weight: Tensor) -> None:
    # A lazy negation view: the kernel reads raw memory and would miss the sign. add_rmsnorm refuses one before
    # the custom ops too, whose negation fallback would copy it (and fails on the mutated residual).
    if x.is_neg() or residual.is_neg() or weight.is_neg():
        name = "x" if x.is_neg() else "residual" if residual.is_neg() else "weight"
        raise ValueError(f"{name} is a lazy negation view; pass {name}.resolve_neg()")


# Is a tracer on that sees only dispatched ops (a TorchDispatchMode: make_fx, FakeTensorMode, also FlopCounterMode
# or DebugMode; torch.jit.trace)? A direct launch would be missing from its graph (make_fx on real tensors) or fail
# on tensors without memory. Bound once: the decode path asks on every call.
_dispatch_modes = torch._C._len_torch_dispatch_stack
_jit_tracing = torch._C._get_tracing_state
_functorch_active = torch._C._are_functorch_transforms_active


def _check_device(x: Tensor) -> None:
    if not (x.is_cuda or (INTERPRET and x.device.type == "cpu")):
        raise ValueError(f"x must be a CUDA tensor, got device {x.device} "
                         "(CPU tensors run only under TRITON_INTERPRET=1)")


def _on_meta(x: Tensor) -> bool:
    """Is x a meta tensor (shapes only: the custom ops' fake implementations answer)? Else as _check_device."""
    if x.is_cuda:  # the common case first: one check on the decode path
        return False
    if x.is_meta:
        return True
    _check_device(x)
    return False


# The custom ops check their arguments again: torch.ops.fusedkernel.* can be called without add_rmsnorm, and
# the kernel would read past a short weight. The eager decode path (add_rmsnorm's own) checks once.
@torch.library.custom_op("fusedkernel::add_rmsnorm_fwd", mutates_args=())
def _fwd_op(x: Tensor, residual: Tensor, weight: Tensor, eps: float,
            return_residual: bool) -> tuple[Tensor, Tensor, Tensor]:
    eps = check_inputs(x, residual, weight, eps)
    _check_device(x)
    y, res, rstd = _forward(x, residual, weight, eps, "new" if return_residual else None, True)
    return y, (res if return_residual else x.new_empty(0)), rstd


def _check_layouts(x: Tensor, residual: Tensor, inplace: bool) -> None:
    """The real implementation's checks that read no memory, for fake and meta calls: a dry run refuses what the
    real call would (an overlap of memory aside: that needs addresses)."""
    row_stride(x, "x")
    if inplace:
        check_distinct_rows(residual)
        _check_inference(residual)
    else:
        row_stride(residual, "residual")


# The fake implementations check too (the backward's as well): a meta tensor in any argument sends a
# direct call here, whose outputs on x's device would be uninitialized memory.
@_fwd_op.register_fake
def _(x, residual, weight, eps, return_residual):
    check_inputs(x, residual, weight, eps)
    _check_layouts(x, residual, False)
    rows = x.numel() // x.shape[-1]
    return (torch.empty(x.shape, dtype=x.dtype, device=x.device),
            torch.empty(x.shape, dtype=x.dtype, device=x.device) if return_residual else x.new_empty(0),
            torch.empty(rows, dtype=torch.float32, device=x.device))


@torch.library.custom_op("fusedkernel::add_rmsnorm_inplace", mutates_args=("residual",))
def _fwd_inplace_op(x: Tensor, residual: Tensor, weight: Tensor, eps: float) -> Tensor:
    eps = check_inputs(x, residual, weight, eps)
    _check_device(x)
    _check_inference(residual)
    return _forward(x, residual, weight, eps, "inplace", False)[0]


@_fwd_inplace_op.register_fake
def _(x, residual, weight, eps):
    check_inputs(x, residual, weight, eps)
    _check_layouts(x, residual, True)
    return torch.empty(x.shape, dtype=x.dtype, device=x.device)


def _check_inference(residual: Tensor) -> None:
    # PyTorch's own in-place ops refuse it: outside inference mode an inference tensor is read-only.
    if residual.is_inference() and not torch.is_inference_mode_enabled():
        raise ValueError("residual is an inference tensor: it can be updated in place only "
                         "inside torch.inference_mode()")


@torch.library.custom_op("fusedkernel::add_rmsnorm_bwd", mutates_args=())
def _bwd_op(dy: Tensor, dres: Tensor | None, x: Tensor, residual: Tensor, weight: Tensor,
            rstd: Tensor) -> tuple[Tensor, Tensor]:
    check_backward(dy, dres, x, residual, weight, rstd)
    n = x.shape[-1]
    dx = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    if x.numel() == 0:
        return dx, torch.zeros_like(weight)
    # Incoming gradients can have any layout (expanded, transposed): the kernel
    # needs unit column stride and one row stride.
    # resolve_neg: a lazily negated gradient would be read without its sign.
    dy2 = dy.resolve_neg().contiguous().view(-1, n)
    dres2 = None if dres is None else dres.resolve_neg().contiguous().view(-1, n)
    dw = backward_rows(dy2, dres2, rows_view(x, "x"), rows_view(residual, "residual"), weight, rstd,
                       dx.view(-1, n))
    return dx, dw


@_bwd_op.register_fake
def _(dy, dres, x, residual, weight, rstd):
    check_backward(dy, dres, x, residual, weight, rstd)
    return torch.empty(x.shape, dtype=x.dtype, device=x.device), torch.empty_like(weight)


def _setup_context(ctx, inputs, output):
    x, residual, weight, _eps, return_residual = inputs
    ctx.save_for_backward(x, residual, weight, output[2])
    ctx.return_residual = return_residual
    # Outputs without a gradient (rstd always, y or the residual output often)
    # come to _backward as None, not as zeros that autograd would fill with a
    # kernel launch each.
    ctx.set_materialize_grads(False)


def _backward(ctx, dy, dres, _drstd):
    x, residual, weight, rstd = ctx.saved_tensors
    if dy is None:
        dy = torch.zeros_like(x)
    dx, dw = _bwd_op(dy, dres if ctx.return_residual else None, x, residual, weight, rstd)
    return dx, dx, dw, None, None


_fwd_op.register_autograd(_backward, setup_context=_setup_context)


def _no_double_backward(ctx, ddx, ddw):
    raise NotImplementedError("add_rmsnorm has no double backward: a second backward through a graph "
                              "built with create_graph=True is not supported")


# Without it the second backward fails with PyTorch's "no autograd formula was registered".
_bwd_op.register_autograd(_no_double_backward, setup_context=lambda ctx, inputs, output: None)


def add_rmsnorm(x: Tensor, residual: Tensor, weight: Tensor, eps: float = 1e-6, *,
                return_residual: bool = False, inplace_residual: bool = False):
    """Fused residual add + RMSNorm: ``y = rmsnorm(x + residual) * weight``, one Triton kernel.

    Per row (the last dimension, hidden size N): ``t = fp32(x) + fp32(residual)``,
    ``rstd = 1 / sqrt(mean(t * t) + eps)``, ``y = t * rstd * weight`` in fp32,
    rounded once to x's dtype (HF Llama rounds before the weight multiply).

    Args:
        x: (..., N) CUDA tensor (meta: outputs of shape only), float32,
            float16 or bfloat16; rows may be strided if the last dimension
            is contiguous.
        residual: x's shape, dtype and layout rules.
        weight: (N,), x's dtype or float32, contiguous.
        eps: finite, a normal float32 number (1.18e-38 to 3.4e38).
        return_residual: also return ``x + residual`` (rounded to x's dtype).
        inplace_residual: write ``x + residual`` into ``residual`` and return
            it (inference: refused when a gradient is needed).

    Returns:
        y (contiguous, x's shape and dtype), or ``(y, residual_out)``.

    Raises:
        TypeError: a non-tensor, an unsupported dtype or dtype mix, non-bool flags.
        ValueError: shapes, devices, layouts, eps, both residual outputs, or an
            in-place update that cannot be done safely (the message says which).
        NotImplementedError: forward-mode AD, torch.func transforms.

    Autograd, torch.compile (a custom op) and CUDA-graph capture work. Edge
    cases (overflow, lazy negation views, in-place aliasing, zero rows,
    64-bit offsets): docs/op.md.
    """
    eps = check_inputs(x, residual, weight, eps)
    if type(return_residual) is not bool or type(inplace_residual) is not bool:
        raise TypeError(f"return_residual and inplace_residual must be Python bools, got "
                        f"{type_name(return_residual)} and {type_name(inplace_residual)}")
    if return_residual and inplace_residual:
        raise ValueError("return_residual and inplace_residual are exclusive: pick one")
    meta = _on_meta(x)
    # A forward-AD dual tensor looks like a plain one to the kernel: its
    # tangent would be dropped without a word (the level is -1 outside
    # forward_ad.dual_level(), so calls outside it check one int).
    if _fwad._current_level >= 0 and any(_fwad.unpack_dual(t).tangent is not None for t in (x, residual, weight)):
        raise NotImplementedError("add_rmsnorm has no forward-mode AD (forward_ad dual tensors, torch.func.jvp); "
                                  "use reverse mode (backward / autograd.grad)")
    compiling = torch.compiler.is_compiling()
    # Under vmap, grad or functionalize the kernel would get wrapper tensors: PyTorch's internal errors, or none.
    if not compiling and _functorch_active():
        raise NotImplementedError("add_rmsnorm does not support torch.func transforms (vmap, grad, jvp, jacrev, "
                                  "functionalize); call it outside them (autograd: backward / autograd.grad)")
    needs_grad = torch.is_grad_enabled() and (x.requires_grad or residual.requires_grad
                                              or weight.requires_grad)
    if inplace_residual and needs_grad:
        raise ValueError("inplace_residual=True overwrites residual, which the backward needs; "
                         "use return_residual=True when gradients are required")
    # Through the custom ops: torch.compile, meta tensors, a tracer (short-circuit: dynamo sees `compiling` alone).
    via_op = compiling or meta or _dispatch_modes() or _jit_tracing()
    if (via_op or needs_grad) and not compiling:
        _check_not_neg(x, residual, weight)  # as the direct launch does: the same answer on both paths
    if inplace_residual:
        if via_op:
            return torch.ops.fusedkernel.add_rmsnorm_inplace(x, residual, weight, eps), residual
        _check_inference(residual)
        y = _forward(x, residual, weight, eps, "inplace", False)[0]
        # As PyTorch's own in-place ops do: a backward that saved residual
        # before this update now raises instead of using the new values.
        torch.autograd.graph.increment_version(residual)
        return y, residual
    if via_op or needs_grad:
        y, res, _ = torch.ops.fusedkernel.add_rmsnorm_fwd(x, residual, weight, eps, return_residual)
        return (y, res) if return_residual else y
    y, res, _ = _forward(x, residual, weight, eps, "new" if return_residual else None, False)
    return (y, res) if return_residual else y

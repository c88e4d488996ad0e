"""Argument checks shared by the fused op and its baselines.

Every failure names the argument and what was expected, so bad input never
reaches a kernel as a Triton compile error or silent garbage.
"""

from __future__ import annotations

import math
import numbers

import torch

FLOAT_DTYPES = (torch.float32, torch.float16, torch.bfloat16)


def check_eps(eps: object) -> float:
    """Return eps as a float; TypeError unless a real number, ValueError unless finite and > 0."""
    if isinstance(eps, bool) or not isinstance(eps, numbers.Real):
        raise TypeError(f"eps must be a real number, got {type(eps).__name__}")
    eps = float(eps)
    if not math.isfinite(eps) or eps <= 0.0:
        raise ValueError(f"eps must be finite and > 0, got {eps}")
    return eps


def check_inputs(x: object, residual: object, weight: object, eps: object) -> float:
    """Check the op's arguments; return eps as a float.

    Expected: x and residual floating tensors (float32, float16 or bfloat16) of
    the same dtype, shape (..., N) with N >= 1; weight shape (N,) in x's dtype
    or float32; all on one device; eps finite and > 0.

    Raises:
        TypeError: a non-tensor, a non-floating or mismatched dtype, a non-real eps.
        ValueError: mismatched shapes or devices, N == 0, eps <= 0 or not finite.
    """
    for name, t in (("x", x), ("residual", residual), ("weight", weight)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    if x.dtype not in FLOAT_DTYPES:
        raise TypeError(f"x must be float32, float16 or bfloat16, got {x.dtype}")
    if residual.dtype != x.dtype:
        raise TypeError(f"residual must have x's dtype {x.dtype}, got {residual.dtype}")
    if weight.dtype != x.dtype and weight.dtype != torch.float32:
        raise TypeError(f"weight must be {x.dtype} (x's dtype) or float32, got {weight.dtype}")
    if x.dim() == 0:
        raise ValueError("x must have at least one dimension (..., N), got a 0-d tensor")
    if residual.shape != x.shape:
        raise ValueError(f"residual must have x's shape {tuple(x.shape)}, got {tuple(residual.shape)}")
    n = x.shape[-1]
    if n == 0:
        raise ValueError("x's last dimension (hidden size N) must be >= 1, got 0")
    if weight.dim() != 1 or weight.shape[0] != n:
        raise ValueError(f"weight must have shape ({n},) (x's hidden size), got {tuple(weight.shape)}")
    if n > 1 and weight.stride(0) != 1:
        raise ValueError(f"weight must be contiguous, got stride {weight.stride(0)}; pass weight.contiguous()")
    if residual.device != x.device or weight.device != x.device:
        raise ValueError(f"x, residual and weight must be on one device, got {x.device}, "
                         f"{residual.device} and {weight.device}")
    return check_eps(eps)


def rows_view(t: torch.Tensor, name: str) -> torch.Tensor:
    """View ``t`` (..., N) as (rows, N) without copying.

    Rows may be strided (a row stride larger than N, e.g. a slice of a fused
    QKV projection), but the last dimension must be contiguous and the leading
    dimensions must collapse into one row stride. Otherwise ValueError: the op
    does not copy silently, since a hidden copy doubles the memory traffic and
    an in-place residual update would be lost on the copy.
    """
    n = t.shape[-1]
    if n > 1 and t.stride(-1) != 1:
        raise ValueError(f"{name} must have a contiguous last dimension (stride 1), got "
                         f"stride {t.stride(-1)}; pass {name}.contiguous()")
    try:
        return t.view(-1, n)
    except RuntimeError:
        raise ValueError(f"{name}'s leading dimensions must collapse into one row stride, got "
                         f"shape {tuple(t.shape)} with strides {t.stride()}; pass "
                         f"{name}.contiguous()") from None

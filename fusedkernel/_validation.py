"""Argument checks of the fused op.

Every failure names the argument and what was expected, so bad input never
reaches a kernel as a Triton compile error or silent garbage.
"""

from __future__ import annotations

import math
import numbers

import torch

FLOAT_DTYPES = (torch.float32, torch.float16, torch.bfloat16)
_Tensor, _STRIDED = torch.Tensor, torch.strided
_F32, _F16, _BF16 = FLOAT_DTYPES


# The kernels take eps as float32: it must survive that conversion as a normal
# number (a subnormal may be flushed to zero on the GPU, giving 0/0 = NaN for an
# all-zero row; above the float32 maximum it becomes inf).
EPS_MIN = torch.finfo(torch.float32).tiny
EPS_MAX = torch.finfo(torch.float32).max


def type_name(value: object) -> str:
    """The type's name for messages, qualified outside builtins: numpy.bool_ calls itself "bool" too."""
    t = type(value)
    return t.__qualname__ if t.__module__ == "builtins" else f"{t.__module__}.{t.__qualname__}"


def check_eps(eps: object) -> float:
    """Return eps as a float.

    Raises:
        TypeError: eps is not a real number (bools and tensors included).
        ValueError: eps is not finite and > 0, or is outside float32's normal
            range [1.18e-38, 3.4e38].
    """
    # The common case first, cheaply (a decode step pays for every check);
    # NaN fails the comparison and takes the full path below.
    if type(eps) is float and EPS_MIN <= eps <= EPS_MAX:
        return eps
    if isinstance(eps, bool) or not isinstance(eps, numbers.Real):
        raise TypeError(f"eps must be a real number, got {type_name(eps)}")
    try:
        eps = float(eps)
    except OverflowError:
        # Only ints and rationals overflow float(); a Fraction's digits would mislead.
        what = (f"an int of {len(str(abs(eps)))} digits" if isinstance(eps, int)
                else f"a {type(eps).__name__} beyond float's range")
        raise ValueError(f"eps must be finite and > 0, got {what}") from None
    if not math.isfinite(eps) or eps <= 0.0:
        raise ValueError(f"eps must be finite and > 0, got {eps}")
    if not EPS_MIN <= eps <= EPS_MAX:
        # repr: the shortest digits that tell eps from the bound it misses.
        raise ValueError(f"eps must be a normal float32 number, {EPS_MIN!r} <= eps <= {EPS_MAX!r}, "
                         f"got {eps!r}")
    return eps


def check_inputs(x: object, residual: object, weight: object, eps: object) -> float:
    """Check the op's arguments; return eps as a float.

    Expected: x and residual floating tensors (float32, float16 or bfloat16) of
    the same dtype, shape (..., N) with N >= 1; weight shape (N,) in x's dtype
    or float32; all on one device; eps finite and > 0.

    Raises:
        TypeError: a non-tensor, a non-floating or mismatched dtype, a non-real eps.
        ValueError: a sparse or nested tensor, mismatched shapes or devices,
            N == 0, eps out of range (see check_eps).
    """
    # The common case in one expression, each fact read once (a decode step
    # pays for every check); anything else is checked one by one, which also
    # finds the message.
    if (isinstance(x, _Tensor) and isinstance(residual, _Tensor) and isinstance(weight, _Tensor)
            and x.layout is _STRIDED and residual.layout is _STRIDED and weight.layout is _STRIDED
            and not (x.is_nested or residual.is_nested or weight.is_nested)):
        dtype, shape, index = x.dtype, x.shape, x.get_device()
        if ((dtype is _BF16 or dtype is _F16 or dtype is _F32) and residual.dtype is dtype
                and (weight.dtype is dtype or weight.dtype is _F32) and residual.shape == shape
                and shape and shape[-1] and weight.shape == shape[-1:]
                and (weight.stride(0) == 1 or shape[-1] == 1)
                and residual.get_device() == index and weight.get_device() == index
                and (index is not None and index >= 0 or x.device == residual.device == weight.device)):
            return check_eps(eps)
    return _check_one_by_one(x, residual, weight, eps)


def _check_dense(name: str, t: object) -> None:
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type_name(t)}")
    if t.layout != torch.strided or t.is_nested:
        raise ValueError(f"{name} must be a dense strided tensor, got layout {t.layout}"
                         f"{' (nested)' if t.is_nested else ''}")


def _check_one_by_one(x: object, residual: object, weight: object, eps: object) -> float:
    # check_inputs's checks in order, each with its message.
    for name, t in (("x", x), ("residual", residual), ("weight", weight)):
        _check_dense(name, t)
    if x.dtype not in FLOAT_DTYPES:
        raise TypeError(f"x must be float32, float16 or bfloat16, got {x.dtype}")
    if residual.dtype != x.dtype:
        raise TypeError(f"residual must have x's dtype {x.dtype}, got {residual.dtype}")
    if weight.dtype != x.dtype and weight.dtype != torch.float32:
        allowed = f"{x.dtype} (x's dtype)" + ("" if x.dtype == torch.float32 else " or torch.float32")
        raise TypeError(f"weight must be {allowed}, got {weight.dtype}")
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
    # get_device() (an int, -1 off CUDA) is cheaper than comparing devices;
    # off CUDA (CPU, meta) the devices are compared in full.
    index = x.get_device()
    if (residual.get_device() != index or weight.get_device() != index
            or (index < 0 and not x.device == residual.device == weight.device)):
        raise ValueError(f"x, residual and weight must be on one device, got {x.device}, "
                         f"{residual.device} and {weight.device}")
    return check_eps(eps)


def check_backward(dy: object, dres: object, x: object, residual: object, weight: object, rstd: object) -> None:
    """Check the backward op's arguments (``torch.ops.fusedkernel.add_rmsnorm_bwd`` is callable directly).

    Expected: x, residual and weight as for :func:`check_inputs`; dy, and dres
    unless None, dense tensors of x's shape and dtype on x's device; rstd a
    contiguous float32 tensor of one value per row, shape (rows,).

    Raises:
        TypeError: a non-tensor or a wrong dtype.
        ValueError: a wrong shape, device or layout.
    """
    check_inputs(x, residual, weight, 1.0)
    for name, t in (("dy", dy), ("dres", dres)) if dres is not None else (("dy", dy),):
        _check_dense(name, t)
        if t.dtype != x.dtype:
            raise TypeError(f"{name} must have x's dtype {x.dtype}, got {t.dtype}")
        if t.shape != x.shape or t.device != x.device:
            raise ValueError(f"{name} must have x's shape {tuple(x.shape)} on {x.device}, got "
                             f"{tuple(t.shape)} on {t.device}")
    rows = x.numel() // x.shape[-1]
    if not isinstance(rstd, torch.Tensor):
        raise TypeError(f"rstd must be a torch.Tensor, got {type_name(rstd)}")
    if rstd.dtype != torch.float32:
        raise TypeError(f"rstd must be float32 (the forward's), got {rstd.dtype}")
    if rstd.layout != torch.strided or rstd.is_nested:
        raise ValueError(f"rstd must be a dense strided tensor, got layout {rstd.layout}")
    if rstd.shape != (rows,) or rstd.device != x.device or (rows > 1 and rstd.stride(0) != 1):
        raise ValueError(f"rstd must be a contiguous ({rows},) tensor (one per row of x) on {x.device}, got "
                         f"shape {tuple(rstd.shape)}, stride {rstd.stride()} on {rstd.device}")


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


def row_stride(t: torch.Tensor, name: str) -> int:
    """The stride between rows of ``t`` (..., N) viewed as (rows, N); see :func:`rows_view`.

    Contiguous and 2-D tensors (decode's usual inputs) are read off without
    making a view (a view costs the host a microsecond or two per call).
    Raises ValueError as rows_view does.
    """
    if t.is_contiguous():
        return t.shape[-1]
    if t.dim() == 2 and (t.shape[1] == 1 or t.stride(1) == 1):
        return t.stride(0)
    return rows_view(t, name).stride(0)


def _rows_overlap(a: tuple[int, int, int, int], b: tuple[int, int, int, int]) -> bool:
    """Whether two sets of rows share a byte.

    Each set is (first byte's address, rows, row stride, row width), in
    bytes, of rows each ``width`` contiguous bytes long. Exact when the row
    strides are equal or one side is a single row; otherwise (rare) it
    answers whether the address ranges meet, erring towards "overlap".
    """
    (pa, ra, sa, wa), (pb, rb, sb, wb) = a, b
    if ra == 1:
        sa = sb
    if rb == 1:
        sb = sa
    if sa != sb or sa <= 0:
        ends = [p + (r - 1) * max(st, 0) + w for p, r, st, w in (a, b)]
        return pa < ends[1] and pb < ends[0]
    # Row i of a, [pa + i*s, pa + i*s + wa), meets row k of b when (i - k)*s
    # lies in (d - wa, d + wb), d = pb - pa, for some i - k in [-(rb-1), ra-1].
    d = pb - pa
    lo = max(-(rb - 1), -((wa - 1 - d) // sa))  # ceil((d - wa + 1) / s)
    hi = min(ra - 1, (d + wb - 1) // sa)
    return lo <= hi


def check_distinct_rows(residual: torch.Tensor) -> int:
    """Refuse a residual whose rows share memory (an expanded view), which an in-place update cannot write;
    return its row stride. Reads strides only (fake and meta tensors too). Raises ValueError, as rows_view."""
    n = residual.shape[-1]
    sr = row_stride(residual, "residual")
    if residual.numel() // n > 1 and sr < n:
        raise ValueError(f"residual has rows that share memory (row stride {sr} < hidden size {n}, "
                         "e.g. an expanded view); the in-place update needs one element per "
                         "location: pass residual.clone()")
    return sr


def check_inplace(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor) -> None:
    """Refuse an in-place residual update whose result would depend on the order of reads and writes.

    Raises:
        ValueError: residual has elements that share memory (e.g. an expanded
            tensor); x overlaps residual without being the very same elements
            (x is residual is fine); weight overlaps residual.
    """
    # Decode's usual call, contiguous x and residual in separate memory from each other and the weight,
    # in one comparison of address ranges (the exact row-by-row check costs the host microseconds).
    if x.is_contiguous() and residual.is_contiguous():
        xp, rp, wp, size = x.data_ptr(), residual.data_ptr(), weight.data_ptr(), x.numel() * x.element_size()
        if (xp + size <= rp or rp + size <= xp) and (wp + weight.numel() * weight.element_size() <= rp
                                                   or rp + size <= wp):
            return
    n = x.shape[-1]
    rows = residual.numel() // n
    if rows == 0:
        return
    sr = check_distinct_rows(residual)
    sx = row_stride(x, "x")
    r = (residual.data_ptr(), rows, sr * residual.element_size(), n * residual.element_size())
    for name, t, rows_t, st in (("x", x, rows, sx), ("weight", weight, 1, n)):
        meets = _rows_overlap((t.data_ptr(), rows_t, st * t.element_size(), n * t.element_size()), r)
        if meets and not (name == "x" and t.data_ptr() == residual.data_ptr() and sx == sr):
            raise ValueError(f"{name} overlaps residual's memory, which the in-place update "
                             f"overwrites; pass {name}.clone() (or use return_residual=True)")

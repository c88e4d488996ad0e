"""Copy bounds: the forward's grid moving the op's bytes without the row sum.

A copy kernel of a launch takes that launch's grid, tile, warps and weight
load, loads x, the residual and the weight, and stores x + residual (where
the op stores it) and (x + residual) * weight as y: the op's bytes and
memory order, no row sum, no exchange between a split row's programs, no
rstd (so y is wrong by design). What a launch's copy reads against the floor
is a reference for what that launch of the op can read, within a few
hundredths, not a strict bound (docs/tuning.md#copy-bounds).
``head_to_head.py`` times them as ``copy:<setting>``.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from fusedkernel.kernels import launch
from fusedkernel.kernels.config import ForwardConfig
from fusedkernel.kernels.forward import _aligned, _fwd_tile, _persistent_kernel


@triton.jit(do_not_specialize=["n_rows"])
def _rows_copy(x_ptr, r_ptr, w_ptr, y_ptr, res_ptr, n_rows, n_cols, stride_x, stride_r, stride_y, stride_res,
               BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, SPLITS: tl.constexpr, WEIGHT_FIRST: tl.constexpr,
               STORE_RES: tl.constexpr, VEC: tl.constexpr):
    # forward._rows_kernel's loads and stores, in its order, without the row sum and the exchange.
    n_cols, stride_x, stride_r, stride_y, stride_res = _aligned(n_cols, stride_x, stride_r, stride_y, stride_res, VEC)
    group = tl.program_id(0) // SPLITS
    part = tl.program_id(0) % SPLITS
    rows = group.to(tl.int64) * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = part * BLOCK_N + tl.arange(0, BLOCK_N)
    mask = (rows < n_rows)[:, None] & (cols < n_cols)[None, :]
    if WEIGHT_FIRST:
        w = tl.load(w_ptr + cols, mask=cols < n_cols, other=0.0)
    x = tl.load(x_ptr + rows[:, None] * stride_x + cols[None, :], mask=mask, other=0.0)
    r = tl.load(r_ptr + rows[:, None] * stride_r + cols[None, :], mask=mask, other=0.0)
    t = x.to(tl.float32) + r.to(tl.float32)
    if STORE_RES:
        tl.store(res_ptr + rows[:, None] * stride_res + cols[None, :], t.to(res_ptr.dtype.element_ty), mask=mask)
    if not WEIGHT_FIRST:
        w = tl.load(w_ptr + cols, mask=cols < n_cols, other=0.0)
    tl.store(y_ptr + rows[:, None] * stride_y + cols[None, :], (t * w.to(tl.float32)[None, :]).to(
        y_ptr.dtype.element_ty), mask=mask)


@triton.jit(do_not_specialize=["n_rows"])
def _persistent_copy(x_ptr, r_ptr, w_ptr, y_ptr, res_ptr, n_rows, n_cols, stride_x, stride_r, stride_y, stride_res,
                     BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, STORE_RES: tl.constexpr, VEC: tl.constexpr):
    # forward._persistent_kernel's walk (the next row block loaded ahead), without the row sum.
    n_cols, stride_x, stride_r, stride_y, stride_res = _aligned(n_cols, stride_x, stride_r, stride_y, stride_res, VEC)
    cols = tl.arange(0, BLOCK_N)
    col_ok = cols < n_cols
    w = tl.load(w_ptr + cols, mask=col_ok, other=0.0)
    n_blocks = tl.cdiv(n_rows, BLOCK_M)
    step = tl.num_programs(0)
    x, r = _fwd_tile(x_ptr, r_ptr, tl.program_id(0), n_blocks, n_rows, cols, col_ok, stride_x, stride_r, BLOCK_M)
    for block in tl.range(tl.program_id(0), n_blocks, step):
        rows = tl.cast(block, tl.int64) * BLOCK_M + tl.arange(0, BLOCK_M)
        mask = (rows < n_rows)[:, None] & col_ok[None, :]
        t = x.to(tl.float32) + r.to(tl.float32)
        x, r = _fwd_tile(x_ptr, r_ptr, block + step, n_blocks, n_rows, cols, col_ok, stride_x, stride_r, BLOCK_M)
        if STORE_RES:
            tl.store(res_ptr + rows[:, None] * stride_res + cols[None, :], t.to(res_ptr.dtype.element_ty), mask=mask)
        tl.store(y_ptr + rows[:, None] * stride_y + cols[None, :], (t * w.to(tl.float32)[None, :]).to(
            y_ptr.dtype.element_ty), mask=mask)


COPY_OF = "copy of "  # how the sweeps name a copy's launch: "copy of ForwardConfig(...)"
_fits: dict[tuple, int] = {}  # programs an SM holds, by launch, tensors' dtypes and vector width


def check(x: torch.Tensor, r: torch.Tensor, w: torch.Tensor, y: torch.Tensor, res: torch.Tensor | None,
          cfg: ForwardConfig) -> None:
    """:func:`copy_rows`'s argument checks: TypeError or ValueError naming the argument."""
    if type(cfg) is not ForwardConfig:
        raise TypeError(f"cfg must be a ForwardConfig, got {type(cfg).__name__}")
    for name, t in (("x", x), ("residual", r), ("weight", w), ("y", y)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    if res is not None and not isinstance(res, torch.Tensor):
        raise TypeError(f"residual output must be a torch.Tensor or None, got {type(res).__name__}")
    if x.dim() != 2:
        raise ValueError(f"x must be 2-D (rows, hidden size), got shape {tuple(x.shape)}")
    for name, t in (("x", x), ("residual", r), ("y", y), ("residual output", res)):
        if t is not None and (t.shape != x.shape or t.dtype != x.dtype or not t.is_contiguous()):
            raise ValueError(f"{name} must be contiguous, of x's shape {tuple(x.shape)} and dtype {x.dtype}, "
                             f"got {tuple(t.shape)}, {t.dtype}, contiguous={t.is_contiguous()}")
    if w.shape != x.shape[1:] or not w.is_contiguous():
        raise ValueError(f"weight must be contiguous, of shape ({x.shape[1]},), got {tuple(w.shape)}")
    n_cols = x.shape[1]
    if cfg.path == "looped" or cfg.block_n * (cfg.splits if cfg.path == "rows" else 1) < n_cols:
        raise ValueError(f"cfg: a copy takes a rows or persistent launch covering the hidden size {n_cols}, got {cfg}")


def copy_rows(x: torch.Tensor, r: torch.Tensor, w: torch.Tensor, y: torch.Tensor, res: torch.Tensor | None,
              cfg: ForwardConfig) -> None:
    """Launch ``cfg``'s copy on contiguous (rows, N) tensors: y = (x + r) * w, res = x + r where given.

    r, y and res: x's shape and dtype; w: (N,). ``cfg``: a rows or persistent launch covering the row, the
    persistent grid sized as the op's launch of it (at most ``cfg.programs_per_sm`` programs an SM, and no
    more than the op's kernel or the copy lets an SM hold; 4 programs in the interpreter, as the op).
    TypeError or ValueError (:func:`check`) for other arguments or a looped launch.
    """
    check(x, r, w, y, res, cfg)
    n_rows, n_cols = x.shape
    vec = launch._vector_width(x.element_size(), n_cols)
    ptrs, ints = (x, r, w, y, res), (n_rows, n_cols, n_cols, n_cols, n_cols, n_cols)
    store = res is not None
    if cfg.path == "rows":
        _rows_copy[(-(-n_rows // cfg.block_m) * cfg.splits,)](
            *ptrs, *ints, cfg.block_m, cfg.block_n, cfg.splits, cfg.weight_load == "first", store, vec,
            num_warps=cfg.num_warps)
        return
    meta = dict(BLOCK_M=cfg.block_m, BLOCK_N=cfg.block_n, STORE_RES=store, VEC=vec, num_warps=cfg.num_warps)
    programs = 4
    if not launch.INTERPRET:
        device = x.get_device()
        key = (cfg, x.dtype, w.dtype, store, vec, device)
        if key not in _fits:
            op = launch._fit(_persistent_kernel, (*ptrs[:5], None, *ints, 0.0), {**meta, "STORE_RSTD": False}, device)
            _fits[key] = min(op, launch._fit(_persistent_copy, (*ptrs, *ints), meta, device))
        programs = max(1, min(cfg.programs_per_sm, _fits[key])) * launch._sm_count(device)
    _persistent_copy[(max(1, min(-(-n_rows // cfg.block_m), programs)),)](*ptrs, *ints, **meta)

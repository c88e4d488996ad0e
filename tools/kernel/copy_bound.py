"""Copy bounds: the forward's grid moving the op's bytes without the row sum.

A copy kernel of a launch takes that launch's grid, tile, warps and weight
load, loads x, the residual and the weight, and stores x + residual (where
the op stores it) and (x + residual) * weight as y: the op's bytes and
memory order, no row sum, no exchange between a split row's programs, no
rstd (so y is wrong by design). What a launch's copy reads against the floor
bounds what that launch of the op can read (docs/tuning.md#copy-bounds).
``head_to_head.py`` times them as ``copy:<setting>``.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from fusedkernel.kernels import launch
from fusedkernel.kernels.config import ForwardConfig
from fusedkernel.kernels.forward import _aligned, _fwd_tile


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


def copy_rows(x: torch.Tensor, r: torch.Tensor, w: torch.Tensor, y: torch.Tensor, res: torch.Tensor | None,
              cfg: ForwardConfig) -> None:
    """Launch ``cfg``'s copy on contiguous (rows, N) tensors: y = (x + r) * w, res = x + r where given.

    ``cfg``: a rows or persistent launch covering the row (the persistent grid as the op sizes it: at most
    ``cfg.programs_per_sm`` programs an SM, and no more than its compiled copy lets an SM hold). ValueError
    for a looped launch or a tile that does not cover the row.
    """
    n_rows, n_cols = x.shape
    if cfg.path == "looped" or cfg.block_n * (cfg.splits if cfg.path == "rows" else 1) < n_cols:
        raise ValueError(f"cfg: a copy takes a rows or persistent launch covering the hidden size {n_cols}, got {cfg}")
    vec = launch._vector_width(x.element_size(), n_cols)
    ptrs, ints = (x, r, w, y, res), (n_rows, n_cols, n_cols, n_cols, n_cols, n_cols)
    store = res is not None
    if cfg.path == "rows":
        _rows_copy[(-(-n_rows // cfg.block_m) * cfg.splits,)](
            *ptrs, *ints, cfg.block_m, cfg.block_n, cfg.splits, cfg.weight_load == "first", store, vec,
            num_warps=cfg.num_warps)
        return
    meta = dict(BLOCK_M=cfg.block_m, BLOCK_N=cfg.block_n, STORE_RES=store, VEC=vec, num_warps=cfg.num_warps)
    per_sm = cfg.programs_per_sm
    if not launch.INTERPRET:
        per_sm = max(1, min(per_sm, launch._fit(_persistent_copy, (*ptrs, *ints), meta, x.get_device())))
    programs = min(-(-n_rows // cfg.block_m), per_sm * launch._max_splits(x.get_device()))
    _persistent_copy[(max(1, programs),)](*ptrs, *ints, **meta)

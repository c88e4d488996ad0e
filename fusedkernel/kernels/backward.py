"""Triton kernels for the backward pass of y = t * rstd * w, t = x + residual.

With t_hat = t * rstd and g = dy * w (all fp32, per row of N):

    dt = rstd * (g - t_hat * mean(g * t_hat))   (+ d_res when the residual output has a gradient)
    dx = d_residual = dt
    dw = sum over rows of dy * t_hat

t is recomputed from x and residual in fp32 (the exact sum the forward
normalized); rstd is the forward's fp32 rstd. Programs are persistent: each
walks row blocks pid, pid + G, ... and accumulates its share of dw in fp32 in
``dw_part[pid, :]``, summed over programs by the caller (the whole-row
kernel holds its share in registers and writes it once; the looped kernel
adds each column chunk's share in place, once per block of rows).
"""

import triton
import triton.language as tl


@triton.jit(do_not_specialize=["n_rows"])
def _bwd_rows_kernel(
    dy_ptr, dres_ptr, x_ptr, r_ptr, w_ptr, rstd_ptr, dx_ptr, dw_part_ptr,
    n_rows, n_cols, stride_dy, stride_dres, stride_x, stride_r, stride_dx,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, HAS_DRES: tl.constexpr,
):
    # Whole rows in registers (BLOCK_N >= n_cols), BLOCK_M rows per step.
    pid = tl.program_id(0)
    n_progs = tl.num_programs(0)
    cols = tl.arange(0, BLOCK_N)
    col_ok = cols < n_cols
    w = tl.load(w_ptr + cols, mask=col_ok, other=0.0).to(tl.float32)
    dw = tl.zeros([BLOCK_N], dtype=tl.float32)
    for start in tl.range(pid * BLOCK_M, n_rows, n_progs * BLOCK_M):
        rows = start + tl.arange(0, BLOCK_M).to(tl.int64)
        row_ok = rows < n_rows
        mask = row_ok[:, None] & col_ok[None, :]
        t = (tl.load(x_ptr + rows[:, None] * stride_x + cols[None, :], mask=mask, other=0.0).to(tl.float32)
             + tl.load(r_ptr + rows[:, None] * stride_r + cols[None, :], mask=mask, other=0.0).to(tl.float32))
        dy = tl.load(dy_ptr + rows[:, None] * stride_dy + cols[None, :], mask=mask, other=0.0).to(tl.float32)
        rstd = tl.load(rstd_ptr + rows, mask=row_ok, other=0.0)
        t_hat = t * rstd[:, None]
        g = dy * w[None, :]
        c = tl.sum(g * t_hat, axis=1) / n_cols
        dt = rstd[:, None] * (g - t_hat * c[:, None])
        if HAS_DRES:
            dt += tl.load(dres_ptr + rows[:, None] * stride_dres + cols[None, :],
                          mask=mask, other=0.0).to(tl.float32)
        tl.store(dx_ptr + rows[:, None] * stride_dx + cols[None, :], dt.to(dx_ptr.dtype.element_ty), mask=mask)
        dw += tl.sum(dy * t_hat, axis=0)
    tl.store(dw_part_ptr + pid.to(tl.int64) * n_cols + cols, dw, mask=col_ok)


@triton.jit(do_not_specialize=["n_rows"])
def _bwd_looped_kernel(
    dy_ptr, dres_ptr, x_ptr, r_ptr, w_ptr, rstd_ptr, dx_ptr, dw_part_ptr,
    n_rows, n_cols, stride_dy, stride_dres, stride_x, stride_r, stride_dx,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, HAS_DRES: tl.constexpr,
):
    # Rows of any width, BLOCK_M rows at a time: pass 1 forms mean(g * t_hat)
    # per row, pass 2 writes dx. The program's dw share lives in its own row
    # of dw_part (zeroed by the caller), updated chunk by chunk with the sum
    # over the BLOCK_M rows: no other program touches it, and its fp32
    # read-modify-write is paid once per BLOCK_M rows.
    pid = tl.program_id(0)
    part = dw_part_ptr + pid.to(tl.int64) * n_cols
    for start in tl.range(pid * BLOCK_M, n_rows, tl.num_programs(0) * BLOCK_M):
        rows = start + tl.arange(0, BLOCK_M).to(tl.int64)
        row_ok = rows < n_rows
        rstd = tl.load(rstd_ptr + rows, mask=row_ok, other=0.0)
        acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
        for c0 in tl.range(0, n_cols, BLOCK_N):
            cols = c0 + tl.arange(0, BLOCK_N)
            m = row_ok[:, None] & (cols < n_cols)[None, :]
            t = (tl.load(x_ptr + rows[:, None] * stride_x + cols[None, :], mask=m, other=0.0).to(tl.float32)
                 + tl.load(r_ptr + rows[:, None] * stride_r + cols[None, :], mask=m, other=0.0).to(tl.float32))
            dy = tl.load(dy_ptr + rows[:, None] * stride_dy + cols[None, :], mask=m, other=0.0).to(tl.float32)
            w = tl.load(w_ptr + cols, mask=cols < n_cols, other=0.0).to(tl.float32)
            acc += dy * w[None, :] * t * rstd[:, None]
        c = tl.sum(acc, axis=1) / n_cols
        for c0 in tl.range(0, n_cols, BLOCK_N):
            cols = c0 + tl.arange(0, BLOCK_N)
            col_ok = cols < n_cols
            m = row_ok[:, None] & col_ok[None, :]
            t_hat = (tl.load(x_ptr + rows[:, None] * stride_x + cols[None, :], mask=m, other=0.0).to(tl.float32)
                     + tl.load(r_ptr + rows[:, None] * stride_r + cols[None, :], mask=m, other=0.0).to(tl.float32)
                     ) * rstd[:, None]
            dy = tl.load(dy_ptr + rows[:, None] * stride_dy + cols[None, :], mask=m, other=0.0).to(tl.float32)
            w = tl.load(w_ptr + cols, mask=col_ok, other=0.0).to(tl.float32)
            dt = rstd[:, None] * (dy * w[None, :] - t_hat * c[:, None])
            if HAS_DRES:
                dt += tl.load(dres_ptr + rows[:, None] * stride_dres + cols[None, :],
                              mask=m, other=0.0).to(tl.float32)
            tl.store(dx_ptr + rows[:, None] * stride_dx + cols[None, :], dt.to(dx_ptr.dtype.element_ty), mask=m)
            tl.store(part + cols, tl.load(part + cols, mask=col_ok, other=0.0) + tl.sum(dy * t_hat, axis=0),
                     mask=col_ok)

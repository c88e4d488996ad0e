"""Triton kernels for the forward op: t = x + residual (fp32), y = t * rstd * weight.

All kernels take 2-D row views: element (i, j) of a tensor lives at
``ptr + i * row_stride + j``; row offsets are computed in int64 so tensors of
more than 2**31 elements address correctly. ``rstd = 1 / sqrt(mean(t*t) + eps)``
is formed in fp32 from the fp32 sum; ``y`` is rounded once, at the store.
Optional outputs: ``res`` (t rounded to res's dtype) and ``rstd`` (fp32 per row,
for the backward pass).
"""

import triton
import triton.language as tl


@triton.jit
def _tile_kernel(
    x_ptr, r_ptr, w_ptr, y_ptr, res_ptr, rstd_ptr,
    n_rows, n_cols, stride_x, stride_r, stride_y, stride_res, eps: tl.float32,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
    STORE_RES: tl.constexpr, STORE_RSTD: tl.constexpr,
):
    # BLOCK_M whole rows per program, each held in registers (BLOCK_N >= n_cols).
    rows = tl.program_id(0).to(tl.int64) * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tl.arange(0, BLOCK_N)
    row_ok = rows < n_rows
    mask = row_ok[:, None] & (cols < n_cols)[None, :]
    x = tl.load(x_ptr + rows[:, None] * stride_x + cols[None, :], mask=mask, other=0.0)
    r = tl.load(r_ptr + rows[:, None] * stride_r + cols[None, :], mask=mask, other=0.0)
    t = x.to(tl.float32) + r.to(tl.float32)
    if STORE_RES:
        tl.store(res_ptr + rows[:, None] * stride_res + cols[None, :],
                 t.to(res_ptr.dtype.element_ty), mask=mask)
    rstd = tl.rsqrt(tl.sum(t * t, axis=1) / n_cols + eps)
    if STORE_RSTD:
        tl.store(rstd_ptr + rows, rstd, mask=row_ok)
    w = tl.load(w_ptr + cols, mask=cols < n_cols, other=0.0).to(tl.float32)
    y = t * rstd[:, None] * w[None, :]
    tl.store(y_ptr + rows[:, None] * stride_y + cols[None, :],
             y.to(y_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _looped_kernel(
    x_ptr, r_ptr, w_ptr, y_ptr, res_ptr, rstd_ptr,
    n_rows, n_cols, stride_x, stride_r, stride_y, stride_res, eps: tl.float32,
    BLOCK_N: tl.constexpr, STORE_RES: tl.constexpr, STORE_RSTD: tl.constexpr,
):
    # One row per program, any width: pass 1 sums squares, pass 2 re-reads.
    row = tl.program_id(0).to(tl.int64)
    x_row = x_ptr + row * stride_x
    r_row = r_ptr + row * stride_r
    acc = tl.zeros([BLOCK_N], dtype=tl.float32)
    for start in tl.range(0, n_cols, BLOCK_N):
        cols = start + tl.arange(0, BLOCK_N)
        m = cols < n_cols
        t = (tl.load(x_row + cols, mask=m, other=0.0).to(tl.float32)
             + tl.load(r_row + cols, mask=m, other=0.0).to(tl.float32))
        if STORE_RES:
            tl.store(res_ptr + row * stride_res + cols, t.to(res_ptr.dtype.element_ty), mask=m)
        acc += t * t
    rstd = tl.rsqrt(tl.sum(acc, axis=0) / n_cols + eps)
    if STORE_RSTD:
        tl.store(rstd_ptr + row, rstd)
    # Second pass runs backwards: the row's tail was read last and is the
    # part most likely still in L2.
    n_blocks = tl.cdiv(n_cols, BLOCK_N)
    for i in tl.range(0, n_blocks):
        cols = (n_blocks - 1 - i) * BLOCK_N + tl.arange(0, BLOCK_N)
        m = cols < n_cols
        t = (tl.load(x_row + cols, mask=m, other=0.0).to(tl.float32)
             + tl.load(r_row + cols, mask=m, other=0.0).to(tl.float32))
        w = tl.load(w_ptr + cols, mask=m, other=0.0).to(tl.float32)
        tl.store(y_ptr + row * stride_y + cols, (t * rstd * w).to(y_ptr.dtype.element_ty), mask=m)


@triton.jit
def _split_kernel(
    x_ptr, r_ptr, w_ptr, y_ptr, res_ptr, rstd_ptr, part_ptr, sync_ptr,
    n_rows, n_cols, stride_x, stride_r, stride_y, stride_res, eps: tl.float32,
    BLOCK_N: tl.constexpr, SPLITS: tl.constexpr, SPLITS_POW2: tl.constexpr,
    STORE_RES: tl.constexpr, STORE_RSTD: tl.constexpr,
):
    # SPLITS programs share a row; each keeps BLOCK_N columns in registers.
    # They exchange partial sums of squares through part_ptr[row, SPLITS] and
    # wait on an arrival counter. Programs of a row are adjacent in launch
    # order, and the GPU dispatches programs in order, so every program a row
    # waits for is resident or will become resident (the same assumption as
    # CUTLASS's serial split-K semaphore). sync_ptr holds (arrived, departed)
    # per row; the last program to leave resets both, so the buffer is all
    # zeros between launches and needs no memset.
    pid = tl.program_id(0)
    row = (pid // SPLITS).to(tl.int64)
    part = pid % SPLITS
    cols = part * BLOCK_N + tl.arange(0, BLOCK_N)
    m = cols < n_cols
    t = (tl.load(x_ptr + row * stride_x + cols, mask=m, other=0.0).to(tl.float32)
         + tl.load(r_ptr + row * stride_r + cols, mask=m, other=0.0).to(tl.float32))
    if STORE_RES:
        tl.store(res_ptr + row * stride_res + cols, t.to(res_ptr.dtype.element_ty), mask=m)
    # Partial sums are published and read with atomics: the scalar atomics
    # of a program run on one thread, so the release below orders them.
    tl.atomic_xchg(part_ptr + row * SPLITS + part, tl.sum(t * t, axis=0), sem="release")
    arrived = sync_ptr + 2 * row
    departed = arrived + 1
    count = tl.atomic_add(arrived, 1, sem="acq_rel") + 1
    while count < SPLITS:
        count = tl.atomic_add(arrived, 0, sem="acquire")
    # Summed in a fixed order, so every program of the row (and every run)
    # gets the same rstd bit for bit.
    idx = tl.arange(0, SPLITS_POW2)
    parts = tl.atomic_add(part_ptr + row * SPLITS + idx, 0.0, mask=idx < SPLITS, sem="acquire")
    parts = tl.where(idx < SPLITS, parts, 0.0)
    rstd = tl.rsqrt(tl.sum(parts, axis=0) / n_cols + eps)
    if STORE_RSTD:
        if part == 0:
            tl.store(rstd_ptr + row, rstd)
    w = tl.load(w_ptr + cols, mask=m, other=0.0).to(tl.float32)
    tl.store(y_ptr + row * stride_y + cols, (t * rstd * w).to(y_ptr.dtype.element_ty), mask=m)
    if tl.atomic_add(departed, 1, sem="acq_rel") == SPLITS - 1:
        tl.atomic_xchg(arrived, 0, sem="relaxed")
        tl.atomic_xchg(departed, 0, sem="relaxed")

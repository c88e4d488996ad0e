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


# n_rows changes with every batch: not specialized, so it never recompiles.
@triton.jit(do_not_specialize=["n_rows"])
def _rows_kernel(
    x_ptr, r_ptr, w_ptr, y_ptr, res_ptr, rstd_ptr, part_ptr, count_ptr,
    n_rows, n_cols, stride_x, stride_r, stride_y, stride_res, eps: tl.float32,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, SPLITS: tl.constexpr, SPLITS_POW2: tl.constexpr,
    STORE_RES: tl.constexpr, STORE_RSTD: tl.constexpr,
):
    # A program holds a [BLOCK_M rows, BLOCK_N columns] tile of t in registers.
    # SPLITS == 1: the tile spans whole rows. SPLITS > 1: a row group is split
    # over SPLITS adjacent programs, which exchange partial sums of squares.
    group = tl.program_id(0) // SPLITS
    part = tl.program_id(0) % SPLITS
    rows = group.to(tl.int64) * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = part * BLOCK_N + tl.arange(0, BLOCK_N)
    row_ok = rows < n_rows
    mask = row_ok[:, None] & (cols < n_cols)[None, :]
    x = tl.load(x_ptr + rows[:, None] * stride_x + cols[None, :], mask=mask, other=0.0)
    r = tl.load(r_ptr + rows[:, None] * stride_r + cols[None, :], mask=mask, other=0.0)
    t = x.to(tl.float32) + r.to(tl.float32)
    if STORE_RES:
        tl.store(res_ptr + rows[:, None] * stride_res + cols[None, :],
                 t.to(res_ptr.dtype.element_ty), mask=mask)
    sumsq = tl.sum(t * t, axis=1)
    if SPLITS > 1:
        sumsq = _exchange(sumsq, part_ptr, count_ptr, group, part, BLOCK_M, SPLITS, SPLITS_POW2)
    rstd = tl.rsqrt(sumsq / n_cols + eps)
    if STORE_RSTD:
        tl.store(rstd_ptr + rows, rstd, mask=row_ok & (part == 0))
    w = tl.load(w_ptr + cols, mask=cols < n_cols, other=0.0).to(tl.float32)
    y = t * rstd[:, None] * w[None, :]
    tl.store(y_ptr + rows[:, None] * stride_y + cols[None, :],
             y.to(y_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _exchange(sumsq, part_ptr, count_ptr, group, part,
              BLOCK_M: tl.constexpr, SPLITS: tl.constexpr, SPLITS_POW2: tl.constexpr):
    # Publish this program's partial sums, wait for the row group's other
    # SPLITS - 1 programs, return the full sums (added in a fixed order, so
    # every program and every run gets the same rstd bit for bit).
    #
    # Why waiting cannot deadlock: a group's programs are adjacent in launch
    # order and the GPU dispatches programs in order, so every program a group
    # waits for is resident or becomes resident as earlier groups finish (the
    # assumption of CUTLASS's serial split-K semaphore).
    #
    # count_ptr[group] only ever grows (int64): after k launches it is
    # k * SPLITS, so a program's target is the next multiple of SPLITS and
    # nothing needs resetting between launches. Callers keep one counter
    # buffer per SPLITS value so this holds.
    ms = tl.arange(0, BLOCK_M)
    base = part_ptr + group.to(tl.int64) * (SPLITS * BLOCK_M)
    tl.store(base + part * BLOCK_M + ms, sumsq)
    # Barrier, then a release by one thread: orders every thread's store above
    # before the count (the CUTLASS semaphore pattern).
    tl.debug_barrier()
    counter = count_ptr + group
    seen = tl.atomic_add(counter, 1, sem="release") + 1
    target = (seen + SPLITS - 1) // SPLITS * SPLITS
    while seen < target:
        seen = tl.atomic_add(counter, 0, sem="acquire")
    tl.debug_barrier()
    ps = tl.arange(0, SPLITS_POW2)
    # .cg: read from L2; L1 is not coherent across SMs and may hold a stale line.
    parts = tl.load(base + ps[:, None] * BLOCK_M + ms[None, :],
                    mask=(ps < SPLITS)[:, None], other=0.0, cache_modifier=".cg")
    return tl.sum(parts, axis=0)


@triton.jit(do_not_specialize=["n_rows"])
def _looped_kernel(
    x_ptr, r_ptr, w_ptr, y_ptr, res_ptr, rstd_ptr,
    n_rows, n_cols, stride_x, stride_r, stride_y, stride_res, eps: tl.float32,
    BLOCK_N: tl.constexpr, STORE_RES: tl.constexpr, STORE_RSTD: tl.constexpr,
):
    # One row per program, any width: pass 1 sums squares, pass 2 re-reads,
    # then writes y and the residual output. Writing the residual output only
    # in pass 2, right after reading the same chunk, keeps an in-place update
    # (res aliasing residual) from feeding pass 2 the overwritten values.
    row = tl.program_id(0).to(tl.int64)
    x_row = x_ptr + row * stride_x
    r_row = r_ptr + row * stride_r
    acc = tl.zeros([BLOCK_N], dtype=tl.float32)
    for start in tl.range(0, n_cols, BLOCK_N):
        cols = start + tl.arange(0, BLOCK_N)
        m = cols < n_cols
        t = (tl.load(x_row + cols, mask=m, other=0.0).to(tl.float32)
             + tl.load(r_row + cols, mask=m, other=0.0).to(tl.float32))
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
        if STORE_RES:
            tl.store(res_ptr + row * stride_res + cols, t.to(res_ptr.dtype.element_ty), mask=m)
        w = tl.load(w_ptr + cols, mask=m, other=0.0).to(tl.float32)
        tl.store(y_ptr + row * stride_y + cols, (t * rstd * w).to(y_ptr.dtype.element_ty), mask=m)

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


# n_rows changes with every batch and epoch with every launch: not
# specialized, so they never recompile.
@triton.jit(do_not_specialize=["n_rows", "epoch"])
def _rows_kernel(
    x_ptr, r_ptr, w_ptr, y_ptr, res_ptr, rstd_ptr, slot_ptr,
    n_rows, n_cols, stride_x, stride_r, stride_y, stride_res, eps: tl.float32, epoch,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, SPLITS: tl.constexpr, SPLITS_POW2: tl.constexpr,
    WEIGHT_AT: tl.constexpr, STORE_RES: tl.constexpr, STORE_RSTD: tl.constexpr, VEC: tl.constexpr,
):
    n_cols, stride_x, stride_r, stride_y, stride_res = _aligned(n_cols, stride_x, stride_r, stride_y, stride_res, VEC)
    # A program holds a [BLOCK_M rows, BLOCK_N columns] tile of t in registers.
    # SPLITS == 1: the tile spans whole rows. SPLITS > 1: a row group is split
    # over SPLITS adjacent programs, which exchange partial sums of squares.
    group = tl.program_id(0) // SPLITS
    part = tl.program_id(0) % SPLITS
    rows = group.to(tl.int64) * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = part * BLOCK_N + tl.arange(0, BLOCK_N)
    row_ok = rows < n_rows
    mask = row_ok[:, None] & (cols < n_cols)[None, :]
    # WEIGHT_AT (ForwardConfig.weight_load): 0 ("first") overlaps the weight's
    # load with the rows' (one DRAM latency less, what a decode step waits
    # for), at the price of its registers while the tile is held; 1
    # ("before_sum") issues it once the rows are in, so it lands during the
    # row sum (and a split row's exchange); 2 ("after_sum") waits for rstd.
    if WEIGHT_AT == 0:
        w = tl.load(w_ptr + cols, mask=cols < n_cols, other=0.0)
    x = tl.load(x_ptr + rows[:, None] * stride_x + cols[None, :], mask=mask, other=0.0)
    r = tl.load(r_ptr + rows[:, None] * stride_r + cols[None, :], mask=mask, other=0.0)
    t = x.to(tl.float32) + r.to(tl.float32)
    if STORE_RES:
        tl.store(res_ptr + rows[:, None] * stride_res + cols[None, :],
                 t.to(res_ptr.dtype.element_ty), mask=mask)
    if WEIGHT_AT == 1:
        w = tl.load(w_ptr + cols, mask=cols < n_cols, other=0.0)
    sumsq = tl.sum(t * t, axis=1)
    if SPLITS > 1:
        sumsq = _exchange(sumsq, slot_ptr, epoch, group, part, BLOCK_M, SPLITS, SPLITS_POW2)
    rstd = tl.rsqrt(sumsq / n_cols + eps)
    if STORE_RSTD:
        tl.store(rstd_ptr + rows, rstd, mask=row_ok & (part == 0))
    if WEIGHT_AT == 2:
        w = tl.load(w_ptr + cols, mask=cols < n_cols, other=0.0)
    y = t * rstd[:, None] * w.to(tl.float32)[None, :]
    tl.store(y_ptr + rows[:, None] * stride_y + cols[None, :],
             y.to(y_ptr.dtype.element_ty), mask=mask)


@triton.jit(do_not_specialize=["n_rows"])
def _persistent_kernel(
    x_ptr, r_ptr, w_ptr, y_ptr, res_ptr, rstd_ptr,
    n_rows, n_cols, stride_x, stride_r, stride_y, stride_res, eps: tl.float32,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, STORE_RES: tl.constexpr, STORE_RSTD: tl.constexpr,
    VEC: tl.constexpr,
):
    n_cols, stride_x, stride_r, stride_y, stride_res = _aligned(n_cols, stride_x, stride_r, stride_y, stride_res, VEC)
    # Whole rows on a grid of a few programs per SM: program p walks row
    # blocks p, p + G, ... and loads block k + G before block k's sums, so
    # an SM holding one program still has loads in flight while it reduces
    # and stores. The weight is loaded once. With the residual updated in
    # place, the load ahead reads other rows than the store.
    cols = tl.arange(0, BLOCK_N)
    col_ok = cols < n_cols
    w = tl.load(w_ptr + cols, mask=col_ok, other=0.0)
    n_blocks = tl.cdiv(n_rows, BLOCK_M)
    step = tl.num_programs(0)
    x, r = _fwd_tile(x_ptr, r_ptr, tl.program_id(0), n_blocks, n_rows, cols, col_ok, stride_x, stride_r, BLOCK_M)
    for block in tl.range(tl.program_id(0), n_blocks, step):
        rows = tl.cast(block, tl.int64) * BLOCK_M + tl.arange(0, BLOCK_M)
        row_ok = rows < n_rows
        mask = row_ok[:, None] & col_ok[None, :]
        t = x.to(tl.float32) + r.to(tl.float32)
        x, r = _fwd_tile(x_ptr, r_ptr, block + step, n_blocks, n_rows, cols, col_ok, stride_x, stride_r, BLOCK_M)
        if STORE_RES:
            tl.store(res_ptr + rows[:, None] * stride_res + cols[None, :], t.to(res_ptr.dtype.element_ty), mask=mask)
        rstd = tl.rsqrt(tl.sum(t * t, axis=1) / n_cols + eps)
        if STORE_RSTD:
            tl.store(rstd_ptr + rows, rstd, mask=row_ok)
        tl.store(y_ptr + rows[:, None] * stride_y + cols[None, :], (t * rstd[:, None] * w.to(tl.float32)[None, :]).to(
            y_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _fwd_tile(x_ptr, r_ptr, block, n_blocks, n_rows, cols, col_ok, stride_x, stride_r, BLOCK_M: tl.constexpr):
    # x and residual of one row block, in their own dtypes (zeros past the last block).
    rows = tl.cast(block, tl.int64) * BLOCK_M + tl.arange(0, BLOCK_M)
    m = ((rows < n_rows) & (block < n_blocks))[:, None] & col_ok[None, :]
    return (tl.load(x_ptr + rows[:, None] * stride_x + cols[None, :], mask=m, other=0.0),
            tl.load(r_ptr + rows[:, None] * stride_r + cols[None, :], mask=m, other=0.0))


@triton.jit
def _aligned(n_cols, stride_x, stride_r, stride_y, stride_res, VEC: tl.constexpr):
    # The host found the hidden size and every row stride divisible by VEC
    # elements (16 bytes at most); Triton itself only knows divisibility by
    # 16 elements, so rows of a width = 8 (mod 16) loaded one element at a
    # time (bf16 8192x1032: 0.68 of the floor; docs/tuning.md#alignment).
    return (_multiple(n_cols, VEC), _multiple(stride_x, VEC), _multiple(stride_r, VEC), _multiple(stride_y, VEC),
            _multiple(stride_res, VEC))


@triton.jit
def _multiple(v, VEC: tl.constexpr):
    # The same value, for a v the host knows is a multiple of VEC, written so
    # that Triton's alignment analysis reads it as one (tl.multiple_of on a
    # kernel argument had no effect in Triton 3.6).
    return v // VEC * VEC


@triton.jit
def _exchange(sumsq, slot_ptr, epoch, group, part,
              BLOCK_M: tl.constexpr, SPLITS: tl.constexpr, SPLITS_POW2: tl.constexpr):
    # Publish this program's partial sums, wait for the row group's other
    # SPLITS - 1 programs, return the full sums (added in a fixed order, so
    # every program and every run gets the same rstd bit for bit).
    #
    # Each partial sum travels with the launch's epoch in one 64-bit word,
    # (epoch << 32) | float32 bits, written by one relaxed atomic exchange:
    # a reader that sees this launch's epoch in a slot sees its sum too, so
    # no fence, counter or second round trip is needed (the fence and
    # counter version reached 0.78-0.84 of the floor at 65536-262144 wide in
    # bf16, this one 0.86-0.94: docs/tuning.md). Slots keep older epochs
    # between launches, never this one's: callers pass epochs that grow by
    # one per launch on a slot buffer (see launch._slot_buffer).
    #
    # Why waiting cannot deadlock: a group's programs are adjacent in launch
    # order and the GPU dispatches programs in order, so every program a group
    # waits for is resident or becomes resident as earlier groups finish (the
    # assumption of CUTLASS's serial split-K semaphore).
    _publish(sumsq, slot_ptr, epoch, group, part, True, BLOCK_M, SPLITS)
    return _gather(_poll(slot_ptr, epoch, group, BLOCK_M, SPLITS, SPLITS_POW2), slot_ptr, epoch, group,
                   BLOCK_M, SPLITS, SPLITS_POW2)


@triton.jit
def _publish(sums, slot_ptr, epoch, group, part, valid, BLOCK_M: tl.constexpr, SPLITS: tl.constexpr):
    # This program's partial sums for row group ``group`` (none where not valid).
    ms = tl.arange(0, BLOCK_M)
    base = slot_ptr + tl.cast(group, tl.int64) * (SPLITS * BLOCK_M)
    tag = epoch.to(tl.int64) << 32
    tl.atomic_xchg(base + part * BLOCK_M + ms, tag | (sums.to(tl.int32, bitcast=True).to(tl.int64) & 0xFFFFFFFF),
                   mask=(ms >= 0) & valid, sem="relaxed")


@triton.jit
def _poll(slot_ptr, epoch, group, BLOCK_M: tl.constexpr, SPLITS: tl.constexpr, SPLITS_POW2: tl.constexpr):
    # One read of row group ``group``'s slots. volatile: a fresh read from L2
    # each time round (L1 is not coherent across SMs and a loop must not hoist it).
    ms = tl.arange(0, BLOCK_M)
    base = slot_ptr + tl.cast(group, tl.int64) * (SPLITS * BLOCK_M)
    ps = tl.arange(0, SPLITS_POW2)
    used = (ps < SPLITS)[:, None] & (ms >= 0)[None, :]
    return tl.load(base + ps[:, None] * BLOCK_M + ms[None, :], mask=used, other=epoch.to(tl.int64) << 32,
                   volatile=True)


@triton.jit
def _gather(words, slot_ptr, epoch, group, BLOCK_M: tl.constexpr, SPLITS: tl.constexpr, SPLITS_POW2: tl.constexpr):
    # The full sums, from a first read ``words`` of the slots, read again until every slot holds this epoch.
    while tl.min(((words >> 32) == epoch).to(tl.int32)) == 0:
        words = _poll(slot_ptr, epoch, group, BLOCK_M, SPLITS, SPLITS_POW2)
    return tl.sum((words & 0xFFFFFFFF).to(tl.int32).to(tl.float32, bitcast=True), axis=0)


@triton.jit(do_not_specialize=["n_rows"])
def _looped_kernel(
    x_ptr, r_ptr, w_ptr, y_ptr, res_ptr, rstd_ptr,
    n_rows, n_cols, stride_x, stride_r, stride_y, stride_res, eps: tl.float32,
    BLOCK_N: tl.constexpr, STORE_RES: tl.constexpr, STORE_RSTD: tl.constexpr, VEC: tl.constexpr,
):
    n_cols, stride_x, stride_r, stride_y, stride_res = _aligned(n_cols, stride_x, stride_r, stride_y, stride_res, VEC)
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

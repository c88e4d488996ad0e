"""Triton kernels for the backward pass of y = t * rstd * w, t = x + residual.

With t_hat = t * rstd and g = dy * w (all fp32, per row of N):

    dt = rstd * (g - t_hat * mean(g * t_hat))   (+ d_res when the residual output has a gradient)
    dx = d_residual = dt
    dw = sum over rows of dy * t_hat

t is recomputed from x and residual in fp32 (the exact sum the forward
normalized); rstd is the forward's fp32 rstd. Three paths (chosen in
backward_rule.py):

* rows: persistent programs each hold whole rows (one power-of-two tile,
  or two pieces where one tile would leave many lanes masked), walk row blocks pid,
  pid + G, ... (loading the next block and its rstd before this one's sums) and keep
  their share of dw in registers, written once to ``dw_part[pid, :]``.
  Reads x, residual, dy and writes dx once: 4 row-trips.
* split (GPU: tiles over 24 KiB, e.g. bf16 rows over 12288): each row is split over adjacent programs
  that exchange their partial dot products (the forward's epoch-tagged
  exchange) and hold their tiles through it: 4 row-trips, persistent over
  row blocks, each program's dw share for its columns kept in registers.
  Its exchange waits in each row block, or (BEHIND) one row block behind.
* columns (rows too wide for one program's registers, in the interpreter
  or too wide to split over a GPU's SMs): pass 1 forms each row's dot
  product in column chunks; pass 2, a grid of column chunks by row groups,
  writes dx and each group's dw share. x, residual and dy are read
  twice: 7 row-trips, but every SM is busy however few the rows, and dw_part
  holds one row of N per row group, not per program.

Where more than one program holds rows, dw_part is summed over its first
axis in a fixed order (deterministic) and rounded to weight's dtype: by
``_dw_sum_kernel``, one small launch where torch's sum and cast were two (on
Hopper a programmatic dependent launch, started during the backward's tail); or,
where the rows kernel's grid is at most one program per SM (decode), by the
rows kernel itself after a grid-wide wait (GPU only: the interpreter runs
programs one by one).
"""

import triton
import triton.language as tl
from triton.language.extra.cuda import gdc_wait

from .forward import _aligned, _exchange, _fwd_tile, _gather, _multiple, _poll, _publish


@triton.jit(do_not_specialize=["n_rows"])
def _bwd_rows_kernel(
    dy_ptr, dres_ptr, x_ptr, r_ptr, w_ptr, rstd_ptr, dx_ptr, dw_part_ptr, dw_ptr, count_ptr,
    n_rows, n_cols, stride_dy, stride_dres, stride_x, stride_r, stride_dx,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, TAIL_N: tl.constexpr, HAS_DRES: tl.constexpr,
    SUM_P: tl.constexpr, SUM_N: tl.constexpr, VEC: tl.constexpr,
):
    n_cols, stride_dy, stride_dres, stride_x, stride_r = _aligned(n_cols, stride_dy, stride_dres, stride_x,
                                                                  stride_r, VEC)
    stride_dx = _multiple(stride_dx, VEC)
    # Whole rows in registers, BLOCK_M rows per step: columns [0, BLOCK_N),
    # then (TAIL_N > 0) [BLOCK_N, BLOCK_N + TAIL_N). Two pieces leave fewer
    # lanes masked than one padded tile (docs/tuning.md#backward-whole-rows).
    pid = tl.program_id(0)
    n_progs = tl.num_programs(0)
    n_blocks = tl.cdiv(n_rows, BLOCK_M)
    cols = tl.arange(0, BLOCK_N)
    col_ok = cols < n_cols
    w = tl.load(w_ptr + cols, mask=col_ok, other=0.0).to(tl.float32)
    # Per-row dw shares, reduced over the tile's rows once at the end: a
    # reduction across rows each step would cross warps (shared memory and a
    # barrier per step).
    dw = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
    # The next row block's loads are issued before this block's sums, so
    # their DRAM latency overlaps this block's math.
    x, r, dy = _bwd_tile(x_ptr, r_ptr, dy_ptr, pid, n_blocks, n_rows, cols, col_ok, stride_x, stride_r, stride_dy,
                         BLOCK_M)
    rstd_next = _bwd_rstd(rstd_ptr, pid, n_blocks, n_rows, BLOCK_M)
    if TAIL_N > 0:
        cols2 = BLOCK_N + tl.arange(0, TAIL_N)
        col_ok2 = cols2 < n_cols
        w2 = tl.load(w_ptr + cols2, mask=col_ok2, other=0.0).to(tl.float32)
        dw2 = tl.zeros([BLOCK_M, TAIL_N], dtype=tl.float32)
        x2, r2, dy2 = _bwd_tile(x_ptr, r_ptr, dy_ptr, pid, n_blocks, n_rows, cols2, col_ok2, stride_x, stride_r,
                                stride_dy, BLOCK_M)
    for block in tl.range(pid, n_blocks, n_progs):
        rows = tl.cast(block, tl.int64) * BLOCK_M + tl.arange(0, BLOCK_M)
        row_ok = rows < n_rows
        rstd = rstd_next
        t_hat = (x.to(tl.float32) + r.to(tl.float32)) * rstd[:, None]
        dy32 = dy.to(tl.float32)
        if TAIL_N > 0:
            t_hat2 = (x2.to(tl.float32) + r2.to(tl.float32)) * rstd[:, None]
            dy32_2 = dy2.to(tl.float32)
        # Both pieces' next loads go out together, before the row sums' barriers.
        x, r, dy = _bwd_tile(x_ptr, r_ptr, dy_ptr, block + n_progs, n_blocks, n_rows, cols, col_ok, stride_x,
                             stride_r, stride_dy, BLOCK_M)
        rstd_next = _bwd_rstd(rstd_ptr, block + n_progs, n_blocks, n_rows, BLOCK_M)
        if TAIL_N > 0:
            x2, r2, dy2 = _bwd_tile(x_ptr, r_ptr, dy_ptr, block + n_progs, n_blocks, n_rows, cols2, col_ok2,
                                    stride_x, stride_r, stride_dy, BLOCK_M)
        g = dy32 * w[None, :]
        dot = tl.sum(g * t_hat, axis=1)
        if TAIL_N > 0:
            g2 = dy32_2 * w2[None, :]
            dot += tl.sum(g2 * t_hat2, axis=1)
        c = dot / n_cols
        _bwd_store(dx_ptr, dres_ptr, rows, row_ok, cols, col_ok, rstd, g, t_hat, c, stride_dx, stride_dres, HAS_DRES)
        if TAIL_N > 0:
            _bwd_store(dx_ptr, dres_ptr, rows, row_ok, cols2, col_ok2, rstd, g2, t_hat2, c, stride_dx, stride_dres,
                       HAS_DRES)
        dw += dy32 * t_hat
        if TAIL_N > 0:
            dw2 += dy32_2 * t_hat2
    tl.store(dw_part_ptr + pid.to(tl.int64) * n_cols + cols, tl.sum(dw, axis=0), mask=col_ok)
    if TAIL_N > 0:
        tl.store(dw_part_ptr + pid.to(tl.int64) * n_cols + cols2, tl.sum(dw2, axis=0), mask=col_ok2)
    if SUM_N > 0:
        _sum_after_barrier(dw_part_ptr, dw_ptr, count_ptr, pid, n_progs, n_cols, SUM_P, SUM_N)


@triton.jit
def _bwd_store(dx_ptr, dres_ptr, rows, row_ok, cols, col_ok, rstd, g, t_hat, c, stride_dx, stride_dres,
               HAS_DRES: tl.constexpr):
    # dx = rstd * (g - t_hat * c) (+ d_res) for one piece of a row block.
    mask = row_ok[:, None] & col_ok[None, :]
    dt = rstd[:, None] * (g - t_hat * c[:, None])
    if HAS_DRES:
        dt += tl.load(dres_ptr + rows[:, None] * stride_dres + cols[None, :], mask=mask, other=0.0).to(tl.float32)
    tl.store(dx_ptr + rows[:, None] * stride_dx + cols[None, :], dt.to(dx_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _sum_after_barrier(dw_part_ptr, dw_ptr, count_ptr, pid, n_progs, n_cols,
                       SUM_P: tl.constexpr, SUM_N: tl.constexpr):
    # Every program waits for all the grid's shares, then sums its SUM_N
    # columns of them (in share order: deterministic) into dw, rounded to
    # dw's dtype: no reduction kernel after the backward (a decode step's
    # shares are in L2, the launch would cost more than the sum).
    #
    # Waiting on the whole grid cannot deadlock when every program is
    # resident at once: the caller launches at most one program per SM.
    # count_ptr[0] only grows: after k launches it is k * n_progs (the
    # forward's split exchange uses the same scheme); callers keep one
    # counter per grid size.
    tl.debug_barrier()
    seen = tl.atomic_add(count_ptr, 1, sem="release") + 1
    target = (seen + n_progs - 1) // n_progs * n_progs
    while seen < target:
        seen = tl.atomic_add(count_ptr, 0, sem="acquire")
    tl.debug_barrier()
    # .cg: read from L2; L1 is not coherent across SMs and may hold a stale line.
    _sum_columns(dw_part_ptr, dw_ptr, n_progs, n_cols, pid, SUM_P, SUM_N, ".cg")


@triton.jit
def _sum_columns(part_ptr, dw_ptr, n_parts, n_cols, block,
                 BLOCK_P: tl.constexpr, BLOCK_N: tl.constexpr, CACHE: tl.constexpr):
    # dw[cols] = sum over the n_parts fp32 rows of part for column block
    # ``block``, BLOCK_P rows per step in a fixed order, rounded once to dw's dtype.
    cols = block * BLOCK_N + tl.arange(0, BLOCK_N)
    col_ok = cols < n_cols
    acc = tl.zeros([BLOCK_P, BLOCK_N], dtype=tl.float32)
    for start in tl.range(0, n_parts, BLOCK_P):
        rows = start + tl.arange(0, BLOCK_P).to(tl.int64)
        acc += tl.load(part_ptr + rows[:, None] * n_cols + cols[None, :],
                       mask=(rows < n_parts)[:, None] & col_ok[None, :], other=0.0, cache_modifier=CACHE)
    tl.store(dw_ptr + cols, tl.sum(acc, axis=0).to(dw_ptr.dtype.element_ty), mask=col_ok)


@triton.jit(do_not_specialize=["n_rows"])
def _bwd_dot_kernel(
    dy_ptr, x_ptr, r_ptr, w_ptr, rstd_ptr, dot_ptr, n_rows, n_cols, stride_dy, stride_x, stride_r,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, VEC: tl.constexpr,
):
    n_cols, stride_dy, stride_x, stride_r = (_multiple(n_cols, VEC), _multiple(stride_dy, VEC),
                                             _multiple(stride_x, VEC), _multiple(stride_r, VEC))
    # Columns path, pass 1: dot[chunk, row] = sum over the chunk's columns of
    # g * t_hat, one program per (BLOCK_M rows, BLOCK_N columns) tile: every
    # SM busy however few the rows are. Each term is scaled by rstd before the
    # sum, as in the rows kernel: a sum of dy * w * t could overflow fp32 where
    # the row's gradient is finite.
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M).to(tl.int64)
    chunk = tl.program_id(1)
    cols = chunk * BLOCK_N + tl.arange(0, BLOCK_N)
    row_ok = rows < n_rows
    col_ok = cols < n_cols
    m = row_ok[:, None] & col_ok[None, :]
    t = (tl.load(x_ptr + rows[:, None] * stride_x + cols[None, :], mask=m, other=0.0).to(tl.float32)
         + tl.load(r_ptr + rows[:, None] * stride_r + cols[None, :], mask=m, other=0.0).to(tl.float32))
    dy = tl.load(dy_ptr + rows[:, None] * stride_dy + cols[None, :], mask=m, other=0.0).to(tl.float32)
    w = tl.load(w_ptr + cols, mask=col_ok, other=0.0).to(tl.float32)
    rstd = tl.load(rstd_ptr + rows, mask=row_ok, other=0.0)
    t_hat = t * rstd[:, None]
    tl.store(dot_ptr + chunk.to(tl.int64) * n_rows + rows, tl.sum(dy * w[None, :] * t_hat, axis=1), mask=row_ok)


@triton.jit(do_not_specialize=["n_rows"])
def _bwd_columns_kernel(
    dy_ptr, dres_ptr, x_ptr, r_ptr, w_ptr, rstd_ptr, dot_ptr, dx_ptr, dw_part_ptr,
    n_rows, n_cols, n_chunks, stride_dy, stride_dres, stride_x, stride_r, stride_dx,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, CHUNKS: tl.constexpr, HAS_DRES: tl.constexpr, VEC: tl.constexpr,
):
    n_cols, stride_dy, stride_dres, stride_x, stride_r = _aligned(n_cols, stride_dy, stride_dres, stride_x,
                                                                  stride_r, VEC)
    stride_dx = _multiple(stride_dx, VEC)
    # Columns path, pass 2: program (chunk, group) owns BLOCK_N columns and
    # walks row blocks group, group + G, ...; it finishes each row's
    # mean(g * t_hat) = sum over chunks of dot / N, writes dx, and
    # keeps its columns' dw share in registers, written once to
    # dw_part[group, :]: G x N floats in all, not one row of N per program.
    chunk = tl.program_id(0)
    group = tl.program_id(1)
    cols = chunk * BLOCK_N + tl.arange(0, BLOCK_N)
    col_ok = cols < n_cols
    ks = tl.arange(0, CHUNKS)
    w = tl.load(w_ptr + cols, mask=col_ok, other=0.0).to(tl.float32)
    dw = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
    for start in tl.range(group * BLOCK_M, n_rows, tl.num_programs(1) * BLOCK_M):
        rows = start + tl.arange(0, BLOCK_M).to(tl.int64)
        row_ok = rows < n_rows
        m = row_ok[:, None] & col_ok[None, :]
        rstd = tl.load(rstd_ptr + rows, mask=row_ok, other=0.0)
        t_hat = (tl.load(x_ptr + rows[:, None] * stride_x + cols[None, :], mask=m, other=0.0).to(tl.float32)
                 + tl.load(r_ptr + rows[:, None] * stride_r + cols[None, :], mask=m, other=0.0).to(tl.float32)
                 ) * rstd[:, None]
        dy = tl.load(dy_ptr + rows[:, None] * stride_dy + cols[None, :], mask=m, other=0.0).to(tl.float32)
        # The row's dot products after the tile's loads: written before them,
        # fp32 256 x 131072 took 266 µs instead of 233 on the H200 (the
        # compiler waited on the small gather before issuing the big loads).
        dot = tl.sum(tl.load(dot_ptr + ks[:, None].to(tl.int64) * n_rows + rows[None, :],
                             mask=(ks < n_chunks)[:, None] & row_ok[None, :], other=0.0), axis=0)
        c = dot / n_cols
        dt = rstd[:, None] * (dy * w[None, :] - t_hat * c[:, None])
        if HAS_DRES:
            dt += tl.load(dres_ptr + rows[:, None] * stride_dres + cols[None, :], mask=m, other=0.0).to(tl.float32)
        tl.store(dx_ptr + rows[:, None] * stride_dx + cols[None, :], dt.to(dx_ptr.dtype.element_ty), mask=m)
        dw += dy * t_hat
    tl.store(dw_part_ptr + group.to(tl.int64) * n_cols + cols, tl.sum(dw, axis=0), mask=col_ok)


@triton.jit(do_not_specialize=["n_rows", "epoch"])
def _bwd_split_kernel(
    dy_ptr, dres_ptr, x_ptr, r_ptr, w_ptr, rstd_ptr, dx_ptr, dw_part_ptr, slot_ptr,
    n_rows, n_cols, stride_dy, stride_dres, stride_x, stride_r, stride_dx, epoch,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, SPLITS: tl.constexpr, SPLITS_POW2: tl.constexpr,
    HAS_DRES: tl.constexpr, VEC: tl.constexpr, BEHIND: tl.constexpr,
):
    n_cols, stride_dy, stride_dres, stride_x, stride_r = _aligned(n_cols, stride_dy, stride_dres, stride_x,
                                                                  stride_r, VEC)
    stride_dx = _multiple(stride_dx, VEC)
    # Split path: program (lane, part) owns BLOCK_N columns of the row
    # blocks lane, lane + L, ... (L lanes of SPLITS programs). For each row
    # block the lane's SPLITS programs exchange their partial dot products
    # (the forward's epoch-tagged exchange, one slot row per row block), so
    # x, residual and dy are read once and dx written once: 4 row-trips,
    # where the columns path reads the inputs twice. The columns' dw share
    # stays in registers and is written once to dw_part[lane, :].
    lane, part, n_lanes, n_blocks, cols, col_ok, w = _split_program(w_ptr, n_rows, n_cols, BLOCK_M, BLOCK_N, SPLITS)
    dw = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
    x, r, dy = _bwd_tile(x_ptr, r_ptr, dy_ptr, lane, n_blocks, n_rows, cols, col_ok, stride_x, stride_r, stride_dy,
                         BLOCK_M)
    rstd = _bwd_rstd(rstd_ptr, lane, n_blocks, n_rows, BLOCK_M)
    if not BEHIND:
        # The next row block's loads are issued before this block's exchange,
        # so they are in flight while the program waits for its lane.
        for block in tl.range(lane, n_blocks, n_lanes):
            rows = tl.cast(block, tl.int64) * BLOCK_M + tl.arange(0, BLOCK_M)
            t_hat = (x.to(tl.float32) + r.to(tl.float32)) * rstd[:, None]
            dy32 = dy.to(tl.float32)
            x, r, dy = _bwd_tile(x_ptr, r_ptr, dy_ptr, block + n_lanes, n_blocks, n_rows, cols, col_ok, stride_x,
                                 stride_r, stride_dy, BLOCK_M)
            rstd_next = _bwd_rstd(rstd_ptr, block + n_lanes, n_blocks, n_rows, BLOCK_M)
            g = dy32 * w[None, :]
            dot = _exchange(tl.sum(g * t_hat, axis=1), slot_ptr, epoch, block, part, BLOCK_M, SPLITS, SPLITS_POW2)
            _bwd_store(dx_ptr, dres_ptr, rows, rows < n_rows, cols, col_ok, rstd, g, t_hat, dot / n_cols, stride_dx,
                       stride_dres, HAS_DRES)
            dw += dy32 * t_hat
            rstd = rstd_next
    else:
        # The exchange one row block behind: a program publishes block k + L's
        # partial dot products before it waits for block k's, so the lane's
        # other programs have long published k and the wait is one read of the
        # slots, issued before k + L's math. It holds three row blocks: k
        # (waiting), k + L (its sums) and k + 2L (loading), so it is for
        # settings where three fit in registers without spilling or fewer
        # programs per SM (docs/tuning.md#backward-split-path).
        x1, r1, dy1 = _bwd_tile(x_ptr, r_ptr, dy_ptr, lane + n_lanes, n_blocks, n_rows, cols, col_ok, stride_x,
                                stride_r, stride_dy, BLOCK_M)
        rstd1 = _bwd_rstd(rstd_ptr, lane + n_lanes, n_blocks, n_rows, BLOCK_M)
        t_hat = (x.to(tl.float32) + r.to(tl.float32)) * rstd[:, None]
        _publish(tl.sum(dy.to(tl.float32) * w[None, :] * t_hat, axis=1), slot_ptr, epoch, lane, part,
                 lane < n_blocks, BLOCK_M, SPLITS)
        for block in tl.range(lane, n_blocks, n_lanes):
            ahead = block + n_lanes
            words = _poll(slot_ptr, epoch, block, BLOCK_M, SPLITS, SPLITS_POW2)
            x2, r2, dy2 = _bwd_tile(x_ptr, r_ptr, dy_ptr, ahead + n_lanes, n_blocks, n_rows, cols, col_ok,
                                    stride_x, stride_r, stride_dy, BLOCK_M)
            rstd2 = _bwd_rstd(rstd_ptr, ahead + n_lanes, n_blocks, n_rows, BLOCK_M)
            t_hat1 = (x1.to(tl.float32) + r1.to(tl.float32)) * rstd1[:, None]
            _publish(tl.sum(dy1.to(tl.float32) * w[None, :] * t_hat1, axis=1), slot_ptr, epoch, ahead, part,
                     ahead < n_blocks, BLOCK_M, SPLITS)
            dot = _gather(words, slot_ptr, epoch, block, BLOCK_M, SPLITS, SPLITS_POW2)
            # Block k's math again from its inputs: three blocks of fp32
            # t_hat and g would not fit in registers.
            rows = tl.cast(block, tl.int64) * BLOCK_M + tl.arange(0, BLOCK_M)
            t_hat = (x.to(tl.float32) + r.to(tl.float32)) * rstd[:, None]
            dy32 = dy.to(tl.float32)
            _bwd_store(dx_ptr, dres_ptr, rows, rows < n_rows, cols, col_ok, rstd, dy32 * w[None, :], t_hat,
                       dot / n_cols, stride_dx, stride_dres, HAS_DRES)
            dw += dy32 * t_hat
            x, r, dy, rstd = x1, r1, dy1, rstd1
            x1, r1, dy1, rstd1 = x2, r2, dy2, rstd2
    tl.store(dw_part_ptr + lane.to(tl.int64) * n_cols + cols, tl.sum(dw, axis=0), mask=col_ok)

@triton.jit
def _split_program(w_ptr, n_rows, n_cols, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, SPLITS: tl.constexpr):
    # A split program's lane, its part of the lane, the lanes, the row blocks, its columns and their weight (fp32).
    part = tl.program_id(0) % SPLITS
    cols = part * BLOCK_N + tl.arange(0, BLOCK_N)
    col_ok = cols < n_cols
    return (tl.program_id(0) // SPLITS, part, tl.num_programs(0) // SPLITS, tl.cdiv(n_rows, BLOCK_M), cols, col_ok,
            tl.load(w_ptr + cols, mask=col_ok, other=0.0).to(tl.float32))


@triton.jit
def _bwd_tile(x_ptr, r_ptr, dy_ptr, block, n_blocks, n_rows, cols, col_ok, stride_x, stride_r, stride_dy,
              BLOCK_M: tl.constexpr):
    # x, residual and dy of one row block, in their own dtypes (zeros past the last block).
    x, r = _fwd_tile(x_ptr, r_ptr, block, n_blocks, n_rows, cols, col_ok, stride_x, stride_r, BLOCK_M)
    rows = tl.cast(block, tl.int64) * BLOCK_M + tl.arange(0, BLOCK_M)
    m = ((rows < n_rows) & (block < n_blocks))[:, None] & col_ok[None, :]
    return x, r, tl.load(dy_ptr + rows[:, None] * stride_dy + cols[None, :], mask=m, other=0.0)


@triton.jit
def _bwd_rstd(rstd_ptr, block, n_blocks, n_rows, BLOCK_M: tl.constexpr):
    # The forward's rstd of one row block (zeros past the last block). Loaded
    # with the block's tile, not before its math: a load there stalls the
    # program for a DRAM round trip each block (docs/tuning.md#backward-rstd-ahead).
    rows = tl.cast(block, tl.int64) * BLOCK_M + tl.arange(0, BLOCK_M)
    return tl.load(rstd_ptr + rows, mask=(rows < n_rows) & (block < n_blocks), other=0.0)


@triton.jit
def _dw_sum_kernel(part_ptr, dw_ptr, n_parts, n_cols, BLOCK_P: tl.constexpr, BLOCK_N: tl.constexpr,
                   PDL: tl.constexpr):
    # One program per BLOCK_N columns of dw. PDL: launched as a programmatic
    # dependent of the backward, so its programs start while the backward's
    # last ones run and wait here for all of its stores
    # (docs/tuning.md#dweight-sum).
    if PDL:
        gdc_wait()
    _sum_columns(part_ptr, dw_ptr, n_parts, n_cols, tl.program_id(0), BLOCK_P, BLOCK_N, "")

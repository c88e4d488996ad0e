"""Launch settings per hidden size: the one place where they are chosen.

Two paths, picked by hidden size N (elements per row):

* ``rows`` -- a program holds a [block_m, block_n] tile of rows in registers.
  While a row holds at most MAX_TILE_BYTES the tile spans whole rows (splits = 1); wider rows are
  split over ``splits`` adjacent programs that exchange partial sums of
  squares and wait for each other (GPU only: the Triton interpreter runs
  programs one after another, so a program that waits would wait forever).
  Either way x and residual are read once and y written once: the 3 row-trips
  of the floor.
* ``looped`` -- one program per row loops over the row twice (sum of squares,
  then re-read and write). Correct for every N; used for wide rows in the
  interpreter, and on a GPU for rows that would split over more programs
  than there are SMs (over 270336 wide on the H200).

The numbers were chosen by measurement on the H200 (bf16, 128 MiB per tensor,
fraction of the floor ``torch.add(x, r, out=y)``): ``tools/tune_forward.py``
sweeps them and ``docs/tuning.md`` keeps its tables.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import triton

# Widest row kept whole in one program, in bytes of x per row: 32768 wide in
# bf16/fp16 (whole-row tile 0.965 of the floor, best split 0.89), 16384 in fp32
# (at 32768 fp32 the tile fell to 0.83 and the split reached 0.94). Wider, the
# row's fp32 sum no longer fits one SM's registers (0.63 at 65536 in
# shared/reference).
MAX_TILE_BYTES = 65536
# Elements per program for narrow rows: 2048 (e.g. 8 rows of 256, 4 of 512)
# was the best or within 0.01 of it for every N <= 2048.
NARROW_TILE_ELEMS = 2048
# Whole-row tiles up to this width load the weight with the rows (decode,
# device µs, bf16 / fp32: 1x4096 5.58 -> 5.47 / 5.82 -> 5.60, 32x4096
# 5.57 -> 5.50 / 5.82 -> 5.71; 65536x512 bf16 0.979 -> 0.995 of the floor);
# at 16384 wide its registers cost more than the latency saved (bf16
# 8192x16384 0.985 -> 0.944).
WEIGHT_FIRST_MAX_N = 4096
# Split path: rows and columns per program, warps (every dtype). With the
# epoch-tagged exchange, 2 x 2048 with 4 warps was the best or within 0.01
# of the best of 6 tiles at 65536-262144 wide in bf16 and fp32, except bf16
# 262144 (2 x 4096: 0.866 vs 0.855).
SPLIT_BLOCK_M = 2
SPLIT_BLOCK_N = 2048
SPLIT_WARPS = 4
# Looped path (interpreter): columns per loop step.
LOOP_BLOCK_N = 4096


@dataclass(frozen=True)
class ForwardConfig:
    """How one forward launch is shaped.

    path: "rows" or "looped". block_m: rows per program. block_n: columns a
    program holds at once. splits: programs per row group (1: whole rows).
    num_warps: warps per program. weight_first: the rows path loads the
    weight before the rows, not after the row sums.
    """

    path: str
    block_m: int
    block_n: int
    splits: int
    num_warps: int
    weight_first: bool = False

    def __post_init__(self) -> None:
        _check_settings(self, ("rows", "looped"), ("block_m", "block_n", "num_warps"), ("splits",))
        if type(self.weight_first) is not bool:
            raise TypeError(f"ForwardConfig.weight_first must be a bool, got {self.weight_first!r}")


# Triton's limits: a tensor of at most 2**20 elements, a program of at most 32 warps.
MAX_TILE_ELEMS = 2**20
MAX_WARPS = 32


def _check_settings(cfg, paths: tuple[str, ...], powers_of_two: tuple[str, ...], positive: tuple[str, ...]) -> None:
    # Settings come from tests and the tuning tools too: a bad one must fail
    # here, not launch a kernel that skips columns or fails inside Triton.
    name = type(cfg).__name__
    if cfg.path not in paths:
        raise ValueError(f"{name}.path must be one of {paths}, got {cfg.path!r}")
    for field in powers_of_two + positive:
        value = getattr(cfg, field)
        # Python ints only: a float, bool or numpy int reaches Triton as something else.
        if type(value) is not int:
            raise TypeError(f"{name}.{field} must be an int, got {type(value).__name__} {value!r}")
    for field in powers_of_two:
        value = getattr(cfg, field)
        if value < 1 or value & (value - 1):
            raise ValueError(f"{name}.{field} must be a power of two >= 1, got {value}")
    for field in positive:
        if getattr(cfg, field) < 1:
            raise ValueError(f"{name}.{field} must be >= 1, got {getattr(cfg, field)}")
    if cfg.num_warps > MAX_WARPS:
        raise ValueError(f"{name}.num_warps must be at most {MAX_WARPS}, got {cfg.num_warps}")
    if cfg.block_m * cfg.block_n > MAX_TILE_ELEMS:
        raise ValueError(f"{name}: block_m * block_n must be at most {MAX_TILE_ELEMS} (Triton's largest tensor), "
                         f"got {cfg.block_m} * {cfg.block_n}")


def _check_table_args(n_cols: object, elem_bytes: object, max_splits: object) -> None:
    for name, value in (("n_cols", n_cols), ("max_splits", max_splits)):
        if type(value) is not int or value < 1:
            raise ValueError(f"{name} must be an int >= 1, got {value!r}")
    if elem_bytes not in (2, 4) or type(elem_bytes) is not int:
        raise ValueError(f"elem_bytes must be 2 or 4, got {elem_bytes!r}")


# typed: 16384.0 must not hit 16384's entry and skip the argument checks.
@functools.lru_cache(maxsize=1024, typed=True)
def forward_config(n_cols: int, elem_bytes: int, max_splits: int) -> ForwardConfig:
    """Launch settings for rows of ``n_cols`` elements (n_cols >= 1) of ``elem_bytes`` bytes (2 or 4).

    ``max_splits``: the most programs a row may be split over, which all
    wait for each other: 1 under TRITON_INTERPRET=1 (it runs programs one
    by one, so a waiting one would wait forever), the SM count on a GPU
    (every SM holds at least one program, so a row group of at most that
    many is resident at once once the groups before it are done). Wider
    rows take the looped path. ValueError for any other arguments.
    """
    _check_table_args(n_cols, elem_bytes, max_splits)
    if n_cols * elem_bytes <= MAX_TILE_BYTES:
        block_n = triton.next_power_of_2(n_cols)
        block_m = max(1, NARROW_TILE_ELEMS // block_n)
        # 8 warps up to 2048 wide, then one warp per 256 columns, at most 32
        # (measured: 4096 -> 16, 16384 and 32768 -> 32).
        return ForwardConfig("rows", block_m, block_n, 1, max(8, min(32, block_n // 256)),
                             block_n <= WEIGHT_FIRST_MAX_N)
    splits = triton.cdiv(n_cols, SPLIT_BLOCK_N)
    if splits > max_splits:
        return ForwardConfig("looped", 1, LOOP_BLOCK_N, 1, 8)
    return ForwardConfig("rows", SPLIT_BLOCK_M, SPLIT_BLOCK_N, splits, SPLIT_WARPS)


# Backward (tools/tune_backward.py on the H200, bf16, 128 MiB per tensor,
# fraction of the floor torch.addcmul(x, r, dy, out=dx); docs/tuning.md):
# whole rows up to 16384 wide (0.617 there against 0.551 for the columns
# path), the columns path beyond (0.52-0.54 at 65536 and 262144). On a GPU
# the split path (below) takes over from 16384 wide.
BWD_MAX_TILE_N = 16384
# Narrow rows are latency-bound: about 8192 elements in flight per SM, as
# 4-warp programs of 1024 (512 wide: 2 rows, 4 warps, 8 per SM gave 0.870; the
# untuned 4 rows, 8 warps, 4 per SM 0.619). From 4096 wide one row per
# program, one warp per 512 columns (4096: 8 warps 0.852; 8192: 16 warps
# 0.763, 32 0.769; 16384: 16 warps 0.617) and 2 programs per SM (0.852 vs
# 0.789 with 4 at 4096).
BWD_NARROW_TILE_ELEMS = 1024
BWD_ELEMS_PER_SM = 8192
# Columns path: 2048 columns, 1 row at a time, 4 warps, 4 programs per SM
# (best at both 65536 and 262144 among 1-8 rows, 1024-4096 columns, 4-8 warps).
BWD_COLUMNS = (1, 2048, 4, 4)
# Split path (GPU, rows whose whole-row tile would be BWD_SPLIT_MIN_N or
# wider): rows, columns, warps and
# programs per SM by element size, 8192 elements per SM as for whole rows.
# Backward alone, H200, fraction of the 4-trip floor (the columns path in
# brackets): bf16 2 x 1024, 4 warps, 4 per SM: 0.726 (0.529) at 1024x65536,
# 0.615 (0.537) at 256x131072, 0.748 (0.550) at 2048x32768, 0.820 (rows
# path: 0.647) at 4096x16384; fp32 2 x 2048, 4 warps, 2 per SM: 0.857
# (0.555), 0.782 (0.551), 0.723 (0.548) at 1024x65536, 256x131072,
# 128x262144. Where a row would need more programs than there are SMs the
# columns, warps double and programs per SM halve (bf16 262144: 2 x 2048,
# 8 warps, 2 per SM, 0.592 against 0.527).
BWD_SPLIT_MIN_N = 16384
BWD_SPLIT = {2: (2, 1024, 4, 4), 4: (2, 2048, 4, 2)}
# Grids that wait for themselves (at most one program per SM: decode) run
# one warp per 1024 columns, at least 4, at most the table's: half the
# table's warps at 4096 and 8192 wide (bf16 / fp32 backward, 32 rows, µs:
# 4096 8.90 vs 9.47 / 8.83 vs 9.63; 8192 10.59 vs 11.90 / 10.75 vs 12.32),
# the table's at 16384 (8 warps spill in fp32: 57 vs 15 µs at 8 rows).
BWD_WAIT_COLS_PER_WARP = 1024


@dataclass(frozen=True)
class BackwardConfig:
    """How one backward launch is shaped.

    path: "rows" (block_m whole rows per step, a persistent grid over row
    blocks), "split" (rows split over programs that exchange their partial
    dot products, persistent over row blocks) or "columns" (block_m rows by
    block_n columns per step: a pass over the rows for each row's dot
    product, then a grid of column chunks by row groups writing dx).
    num_warps: warps per program.
    programs_per_sm: the grid's size, per SM. wait_warps: warps per program
    when the rows grid has at most one program per SM and waits for itself
    to sum dweight in the same launch (0: num_warps).
    """

    path: str
    block_m: int
    block_n: int
    num_warps: int
    programs_per_sm: int
    wait_warps: int = 0

    def __post_init__(self) -> None:
        _check_settings(self, ("rows", "columns", "split"), ("block_m", "block_n", "num_warps"), ("programs_per_sm",))
        if type(self.wait_warps) is not int:
            raise TypeError(f"BackwardConfig.wait_warps must be an int, got {type(self.wait_warps).__name__} "
                            f"{self.wait_warps!r}")
        if self.wait_warps < 0 or self.wait_warps & (self.wait_warps - 1) or self.wait_warps > MAX_WARPS:
            raise ValueError(f"BackwardConfig.wait_warps must be 0 or a power of two <= {MAX_WARPS}, "
                             f"got {self.wait_warps}")


@functools.lru_cache(maxsize=1024, typed=True)
def backward_config(n_cols: int, elem_bytes: int, max_splits: int) -> BackwardConfig:
    """Backward launch settings for rows of ``n_cols`` elements (n_cols >= 1) of ``elem_bytes`` bytes (2 or 4).

    ``max_splits`` as for :func:`forward_config`: 1 in the interpreter,
    which therefore never takes the split path. ValueError for any other
    arguments.
    """
    _check_table_args(n_cols, elem_bytes, max_splits)
    block_n = triton.next_power_of_2(n_cols)
    if block_n >= BWD_SPLIT_MIN_N and max_splits > 1:
        block_m, cols, warps, per_sm = BWD_SPLIT[elem_bytes]
        while triton.cdiv(n_cols, cols) > max_splits and warps < MAX_WARPS:
            cols, warps, per_sm = 2 * cols, 2 * warps, max(1, per_sm // 2)
        if triton.cdiv(n_cols, cols) <= max_splits:
            return BackwardConfig("split", block_m, cols, warps, per_sm)
    if block_n > BWD_MAX_TILE_N:
        return BackwardConfig("columns", *BWD_COLUMNS)
    block_m = max(1, BWD_NARROW_TILE_ELEMS // block_n)
    warps = max(4, min(16, block_n // 512))
    return BackwardConfig("rows", block_m, block_n, warps, max(2, BWD_ELEMS_PER_SM // (block_m * block_n)),
                          max(4, min(warps, block_n // BWD_WAIT_COLS_PER_WARP)))


# Sum of the backward's per-program dweight shares (_dw_sum_kernel): tiles of
# DW_SUM_TILE_ELEMS, as many shares per step as there are (at most 64) by
# columns filling the rest (at least 16), 4 warps. H200 (docs/tuning.md,
# "dweight sum"): 64 shares x 16 columns was the best fixed setting, 0.68 of
# torch's sum + cast on average over 8 (shares, N) cases (the untuned
# 8 x 256: 2.5x), but in whole backwards with 5-9 shares of wide rows up to
# 5% slower than torch's; tiles sized by the share count were within 1.5%
# of torch's there and 3-6% faster than it at 512-16384 wide.
DW_SUM_TILE_ELEMS = 1024
DW_SUM_MAX_P = 64
DW_SUM_WARPS = 4


def dw_sum_config(n_parts: int) -> tuple[int, int]:
    """(shares per step, columns per program) for summing ``n_parts`` >= 1 dweight shares; else ValueError."""
    if n_parts < 1:
        raise ValueError(f"n_parts must be >= 1, got {n_parts}")
    block_p = min(DW_SUM_MAX_P, 1 << (n_parts - 1).bit_length())
    return block_p, max(16, DW_SUM_TILE_ELEMS // block_p)


# The rows kernel's own sum after its grid-wide wait (grids of at most one
# program per SM): shares x columns per step.
BWD_SUM_TILE_ELEMS = 4096

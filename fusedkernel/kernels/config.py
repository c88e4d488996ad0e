"""Launch settings per hidden size: the one place where they are chosen.

Three paths, picked by hidden size N (elements per row):

* ``tile``  -- a program owns BLOCK_M whole rows and keeps them in registers
  (BLOCK_N = next power of two >= N). One read of x and residual, one write of y:
  the 3 row-trips of the floor.
* ``split`` -- N too wide for one program's registers: a row is split over
  SPLITS programs that each keep CHUNK columns in registers, publish a partial
  sum of squares and wait for the row's other programs (GPU only: the Triton
  interpreter runs programs one after another, so a program that waits would
  wait forever).
* ``looped`` -- one program per row loops over the row twice (sum of squares,
  then re-read and write). Correct for every N; used for wide rows in the
  interpreter and as the reference for the split path.

The numbers below were chosen by measurement on the H200; the sweep that
justifies them is ``tools/tune_forward.py`` and its table is in
``docs/tuning.md``.
"""

from __future__ import annotations

from dataclasses import dataclass

import triton

# Widest row kept whole in one program's registers. Beyond it the row's fp32
# sum no longer fits in the register file of one SM without spilling
# (shared/reference/h200-baseline.md: 0.63 of the floor at 65536 wide).
MAX_TILE_N = 16384
# Columns per program on the split and looped paths.
CHUNK_N = 4096
# Elements one program of the tile path aims to hold (rows * padded width):
# enough bytes in flight per SM for narrow rows without spilling.
TILE_ELEMS = 8192


@dataclass(frozen=True)
class ForwardConfig:
    """How one forward launch is shaped.

    path: "tile", "split" or "looped". block_m: rows per program (tile path).
    block_n: columns a program holds at once. splits: programs per row (split
    path, else 1). num_warps: warps per program.
    """

    path: str
    block_m: int
    block_n: int
    splits: int
    num_warps: int


def _warps_for(elems: int) -> int:
    # About 16 fp32 values per thread: wide enough for 16-byte loads, few
    # enough to stay in registers.
    return max(4, min(16, elems // 512))


def forward_config(n_cols: int, interpret: bool) -> ForwardConfig:
    """Launch settings for rows of ``n_cols`` elements (n_cols >= 1).

    ``interpret`` is True under TRITON_INTERPRET=1, where the split path cannot
    run (its programs wait for each other) and the looped path is used instead.
    """
    if n_cols <= MAX_TILE_N:
        block_n = triton.next_power_of_2(n_cols)
        block_m = max(1, TILE_ELEMS // block_n)
        return ForwardConfig("tile", block_m, block_n, 1, _warps_for(block_m * block_n))
    if interpret:
        return ForwardConfig("looped", 1, CHUNK_N, 1, _warps_for(CHUNK_N))
    splits = triton.cdiv(n_cols, CHUNK_N)
    return ForwardConfig("split", 1, CHUNK_N, splits, _warps_for(CHUNK_N))

"""The forward rule covers every width with a legal launch, chosen as docs/tuning.md says."""

import dataclasses
import itertools

import pytest
import triton
from hypothesis import given, settings
from hypothesis import strategies as st

from fusedkernel.kernels.config import HOPPER, ForwardConfig
from fusedkernel.kernels.forward_rule import band_wave_config, forward_candidates, forward_config

F = HOPPER.forward
MAX_TILE_BYTES, SPLIT_BLOCK_N, WEIGHT_FIRST_MAX_N = F.max_tile_bytes, F.split.block_n, F.weight_first_max_n

# Every power of two up to 2**20 and its neighbours, plus odd and prime widths.
WIDTHS = sorted({(1 << k) + d for k in range(21) for d in (-1, 0, 1) if (1 << k) + d >= 1}
                | {3, 7, 13, 4097, 100003})


@pytest.mark.parametrize("elem_bytes", [2, 4])
@pytest.mark.parametrize("max_splits", [1, 132])  # the interpreter; the H200's SMs
@pytest.mark.parametrize("n", WIDTHS)
def test_every_column_is_covered(n, max_splits, elem_bytes):
    cfg = forward_config(n, elem_bytes, max_splits)
    assert cfg.block_n == triton.next_power_of_2(cfg.block_n) and cfg.block_m >= 1
    assert cfg.num_warps in (1, 2, 4, 8, 16, 32)
    if cfg.path == "rows":
        # A block narrower than the row must be split; never a silently dropped column.
        assert cfg.block_n * cfg.splits >= n
        assert cfg.block_n * (cfg.splits - 1) < n
        # Whole narrow rows load the weight first; elsewhere its registers cost more.
        assert (cfg.weight_load == "first") == (cfg.splits == 1 and cfg.block_n <= WEIGHT_FIRST_MAX_N)
        few = forward_config(n, elem_bytes, max_splits, n_rows=max_splits)
        # A dense decode launch: tiles of few_rows_max_tile at most, and fp32's up to few_rows_thread_max_tile.
        dense = max_splits * n * elem_bytes > (F.few_rows_narrow_dense_bytes if n <= F.few_rows_max_tile
                                               else F.few_rows_dense_bytes)
        dense_first = dense and (few.block_n <= F.few_rows_max_tile
                                 or (elem_bytes == 4 and few.block_n <= F.few_rows_thread_max_tile))
        first = few.block_n * elem_bytes <= F.few_rows_weight_first_max_bytes or dense_first
        assert (few.weight_load == "first") == (few.splits == 1 and first)
        # A sparse decode row (one on 132 SMs) past few_rows_thread_max_tile loads it first.
        lone = forward_config(n, elem_bytes, max_splits, n_rows=1)
        if max_splits == 132 and lone.splits == 1:
            wide = lone.block_n > F.few_rows_thread_max_tile
            narrow = lone.block_n * elem_bytes <= F.few_rows_weight_first_max_bytes
            assert (lone.weight_load == "first") == (narrow or wide)
    else:
        assert cfg.path == "looped" and n * elem_bytes > MAX_TILE_BYTES


@pytest.mark.parametrize("elem_bytes", [2, 4])
@pytest.mark.parametrize("max_splits", [1, 132])
@pytest.mark.parametrize("n", WIDTHS)
def test_programs_that_wait_for_each_other_fit_at_once(n, max_splits, elem_bytes):
    # More than max_splits waiting programs per row would hang (the interpreter
    # runs programs one by one; a GPU holds at least one per SM): the row loops.
    cfg = forward_config(n, elem_bytes, max_splits)
    assert cfg.splits <= max_splits
    if max_splits == 132 and n > 132 * SPLIT_BLOCK_N:
        assert cfg.path == "looped"


def test_the_rule_refuses_bad_arguments_by_name():
    import numpy as np

    with pytest.raises(ValueError, match="n_cols must be an int >= 1"):
        forward_config([8], 2, 1)
    # numpy's "truth value of an array is ambiguous", naming no argument.
    with pytest.raises(ValueError, match="elem_bytes must be 2 or 4"):
        forward_config(64, np.array([2, 2]), 1)


def test_a_settings_instance_changes_the_rule():
    wider = dataclasses.replace(HOPPER, forward=dataclasses.replace(F, max_tile_bytes=2 * F.max_tile_bytes))
    n = F.max_tile_bytes  # 2-byte rows of this width are split by Hopper's rule, whole by the wider one
    assert forward_config(n, 2, 132).splits > 1
    assert forward_config(n, 2, 132, wider).splits == 1
    # Settings hash by their arch alone (host time); the rules' caches still tell them apart by ==.
    assert hash(wider) == hash(HOPPER) and wider != HOPPER


@pytest.mark.parametrize("n", [512, 4096, 5120, 20000, 65536])
def test_the_tuner_sweeps_the_rule_first_and_only_legal_settings(n):
    fwd = forward_candidates(n, 2, 132)
    assert fwd[0] == forward_config(n, 2, 132) and len(fwd) == len(set(fwd)) > 1
    for cfg in fwd:
        assert isinstance(cfg, ForwardConfig) and cfg.splits <= 132
        if cfg.path in ("rows", "persistent"):
            assert cfg.block_n * cfg.splits >= n


# (n, elem_bytes) -> warps of whole rows: many rows (prefill) and few rows (decode), by the rule of
# docs/tuning.md#forward-warps: one warp per 1280 bytes rounded down to a power of two; with the residual
# stored, 8 KiB tiles of many rows take the warps that hold 16 elements a thread (2-byte 2049-4096 wide: 8);
# doubled for decode tiles of at most 4096 elements where the residual is stored, 8192 where y only; wider
# decode tiles: 32, except 8192-element tiles with the residual stored, which take only the warps that hold 32
# tile elements a thread, 16 in 2-byte rows over 12 KiB and in fp32 launches of more than 1.5 MiB of rows
# (docs/tuning.md#forward-decode-weight-before-the-sums); never more than 32 tile
# elements a thread, 4 to 32; decode tiles over 16 KiB writing y only take 8 in fp32, and 4 in bf16 rows
# over 10240 wide (the weight before the sums) (docs/tuning.md#forward-sparse-decode-warps). Values: many
# rows with the residual stored, many writing y only, decode with the residual stored, decode writing y only.
WARPS = {(1024, 2): (4, 4, 4, 4), (2880, 2): (8, 4, 8, 8), (4096, 2): (8, 4, 8, 8), (5120, 2): (8, 8, 8, 16),
         (7168, 2): (8, 8, 16, 16), (8192, 2): (8, 8, 16, 16), (10240, 2): (16, 16, 32, 32),
         (16384, 2): (16, 16, 32, 4), (18432, 2): (32, 32, 32, 32), (32768, 2): (32, 32, 32, 32),
         (2048, 4): (4, 4, 8, 8), (4096, 4): (8, 8, 16, 16), (5120, 4): (16, 16, 16, 8), (8192, 4): (16, 16, 16, 8),
         (16384, 4): (32, 32, 32, 8)}


@pytest.mark.parametrize("n, elem_bytes", WARPS)
def test_whole_row_warps_follow_the_row_bytes_and_the_row_count(n, elem_bytes):
    many, many_y, few, few_y = (forward_config(n, elem_bytes, 132, n_rows=rows, stores_residual=s)
                                for rows, s in ((None, True), (None, False), (132, True), (132, False)))
    assert tuple(c.num_warps for c in (many, many_y, few, few_y)) == WARPS[n, elem_bytes]
    # Prefill rows are many, as None is.
    assert forward_config(n, elem_bytes, 132, n_rows=8192) == many
    # Few rows: a program per row, so each SM holds at most one and the rows spread over SMs.
    assert few.block_m == 1 and many.block_m == max(1, F.narrow_tile_elems // many.block_n)
    assert few.block_n == many.block_n
    assert few_y.weight_load == ("before_sum" if few_y.num_warps == 4 and n > 10240 else "first")
    # Decode tiles of at most 8 KiB load the weight first, as do fp32 rows of 2049-4096 (more than 1 MiB) and
    # 4097-8192 (more than 1.5 MiB) at 132 rows.
    dense_fp32 = elem_bytes == 4 and few.block_n in (4096, 8192)
    assert (few.weight_load == "first") == (few.block_n * elem_bytes <= 8192 or dense_fp32)


# (n, elem_bytes) -> (warps, weight load) of a sparse decode row (1-16 rows on 132 SMs), with the residual
# stored and y only (docs/tuning.md#forward-sparse-decode-warps): with the residual stored, tiles past 8192
# elements take a warp per 8 KiB of tile, the weight first; y only, tiles over 16 KiB take 8 warps, first (in
# fp32 and bf16 rows over 10240 wide at any decode row count, the bf16 ones 4, the weight before the sums);
# other tiles as at 17-132 rows.
SPARSE = {(4096, 2): ((8, "first"), (8, "first")), (8192, 2): ((16, "before_sum"), (16, "first")),
          (8200, 2): ((4, "first"), (8, "first")), (12288, 2): ((4, "first"), (4, "before_sum")),
          (16384, 2): ((4, "first"), (4, "before_sum")), (4096, 4): ((16, "before_sum"), (16, "first")),
          (4104, 4): ((8, "before_sum"), (8, "first")), (5120, 4): ((8, "before_sum"), (8, "first")),
          (8200, 4): ((8, "first"), (8, "first"))}


def _not_dense(n: int, elem_bytes: int, sms: int) -> int:
    # The most decode rows of n elements whose bytes stay within few_rows_dense_bytes
    # (few_rows_narrow_dense_bytes in tiles up to few_rows_max_tile).
    dense = F.few_rows_narrow_dense_bytes if n <= F.few_rows_max_tile else F.few_rows_dense_bytes
    return min(sms, dense // (n * elem_bytes))


@pytest.mark.parametrize("n, elem_bytes", SPARSE)
def test_sparse_decode_rows_take_their_own_warps_and_the_weight_first(n, elem_bytes):
    for stores, want in zip((True, False), SPARSE[n, elem_bytes]):
        # One row too, but a lone bf16 row over 14336 wide with the residual stored splits (its own test).
        lone = stores and n > F.few_rows_split_lone_min_cols
        sparse = [forward_config(n, elem_bytes, 132, n_rows=rows, stores_residual=stores)
                  for rows in ((2, 16) if lone else (1, 16))]
        assert {(c.path, c.block_m, c.splits, c.num_warps, c.weight_load) for c in sparse} == {("rows", 1, 1, *want)}
        # Past a row for 8 SMs, the decode rule's warps and weight load (up to the rows whose bytes make an
        # fp32 launch dense).
        dense = forward_config(n, elem_bytes, 132, n_rows=17, stores_residual=stores)
        assert dense == forward_config(n, elem_bytes, 132, n_rows=_not_dense(n, elem_bytes, 132),
                                       stores_residual=stores)
        if not stores and n * elem_bytes > 16384 and (elem_bytes == 4 or n > 10240):  # at every decode row count
            assert dense in sparse
    # The edge follows the SM count: 32 rows on 256 SMs are sparse, 33 are not; 16 rows on 64 SMs are not.
    if n * elem_bytes <= 32768:  # wider rows split at some of these counts
        sparse = forward_config(n, elem_bytes, 256, n_rows=32)
        dense = forward_config(n, elem_bytes, 256, n_rows=_not_dense(n, elem_bytes, 256))
        assert (sparse.num_warps, sparse.weight_load) == SPARSE[n, elem_bytes][0]
        assert forward_config(n, elem_bytes, 256, n_rows=33) == dense
        assert forward_config(n, elem_bytes, 64, n_rows=16) == forward_config(n, elem_bytes, 64, n_rows=64)


@pytest.mark.parametrize("limits, split_warps, looped_warps", [({"max_warps": 4}, 4, 4), ({"min_warps": 8}, 8, 8),
                                                               ({}, 4, 8)])
def test_split_and_looped_warps_stay_within_the_settings_limits(limits, split_warps, looped_warps):
    # Hopper's split tile takes 4 warps and the looped path 8: a max_warps of 4 or a min_warps of 8 holds them too.
    custom = dataclasses.replace(HOPPER, forward=dataclasses.replace(HOPPER.forward, **limits))
    split = forward_config(40000, 2, 132, custom)
    looped = forward_config(40000, 2, 4, custom)
    assert (split.path, split.splits, split.num_warps) == ("rows", 20, split_warps)
    assert (looped.path, looped.num_warps) == ("looped", looped_warps)


def test_sparse_decode_warps_under_other_settings_stay_a_power_of_two_within_the_limits():
    # A byte count per warp that is not a power of two rounds down; both counts keep min_warps..max_warps.
    odd = dataclasses.replace(HOPPER, forward=dataclasses.replace(
        HOPPER.forward, few_rows_sparse_bytes_per_warp=12288, few_rows_y_only_wide_warps=8, max_warps=4))
    assert forward_config(8200, 4, 132, odd, n_rows=1).num_warps == 4  # 64 KiB / 12 KiB = 5 -> 4, at most 4
    assert forward_config(8200, 2, 132, odd, n_rows=1, stores_residual=False).num_warps == 4
    wide = dataclasses.replace(HOPPER, forward=dataclasses.replace(HOPPER.forward, few_rows_sparse_bytes_per_warp=12288))
    assert forward_config(8200, 4, 132, wide, n_rows=1).num_warps == 4
    assert forward_config(8200, 2, 132, wide, n_rows=1).num_warps == 4  # 32 KiB / 12 KiB = 2 -> min_warps


@pytest.mark.parametrize("n_rows", [True, -1, 512.0, "512"])
def test_n_rows_must_be_none_or_a_count(n_rows):
    with pytest.raises(ValueError, match="n_rows must be None or an int >= 0"):
        forward_config(4096, 2, 132, HOPPER, n_rows)


@pytest.mark.parametrize("stores", [None, 1, []])
def test_stores_residual_must_be_a_bool(stores):
    # A list once reached the rule's cache and failed there, unhashable, naming no argument.
    with pytest.raises(ValueError, match="stores_residual must be a bool"):
        forward_config(4096, 2, 132, HOPPER, None, stores)


@pytest.mark.parametrize("elem_bytes", [2, 4])
@pytest.mark.parametrize("n_rows", [None, 1])
@pytest.mark.parametrize("n", WIDTHS)
def test_without_a_residual_store_whole_rows_load_the_weight_first(n, n_rows, elem_bytes):
    # docs/tuning.md#forward-weight-first: the forward (y only) gained at every bf16 width swept (3072-16384).
    stored, plain = (forward_config(n, elem_bytes, 132, HOPPER, n_rows, s) for s in (True, False))
    # But bf16 decode tiles of 16384 load it before the sums (docs/tuning.md#forward-sparse-decode-warps).
    bf16_wide = n_rows == 1 and elem_bytes == 2 and plain.block_n == 16384 and n > 10240
    assert (plain.weight_load == "first") == (plain.splits == 1 and plain.path == "rows" and not bf16_wide)
    if n_rows == 1 and n > F.few_rows_split_lone_min_cols and n * elem_bytes <= F.few_rows_split_min_bytes:
        # docs/tuning.md#forward-decode-split-rows: with the residual stored such a lone row splits.
        assert (stored.splits, plain.splits) == (triton.cdiv(n, 2048), 1)
    elif plain.splits == stored.splits:
        assert dataclasses.replace(plain, weight_load=stored.weight_load, num_warps=stored.num_warps) == stored


# (n, elem_bytes) -> weight first: many rows with the residual stored, decode (132 rows) with it stored, a
# sparse decode (1 row) with it stored, y only (docs/tuning.md#forward-weight-first; decode tiles over 8 KiB
# with the residual stored, fp32 2049-4096 too, load it before the sums, but fp32 4096-element decode tiles
# of 132 rows, over 1 MiB, and 8192-element ones, over 1.5 MiB, load it first:
# docs/tuning.md#forward-decode-weight-before-the-sums;
# docs/tuning.md#forward-sparse-decode-warps: bf16 decode rows over 10240 wide writing y only load it before
# the sums; a lone bf16 16384 row with the residual stored splits and loads it before the sums,
# docs/tuning.md#forward-decode-split-rows).
WEIGHT_FIRST = {(2880, 2): (True, True, True, True), (4096, 2): (True, True, True, True),
                (5120, 2): (True, False, False, True), (8192, 2): (True, False, False, True),
                (8200, 2): (False, False, True, True), (16384, 2): (False, False, False, False),
                (2048, 4): (True, True, True, True), (2056, 4): (True, True, False, True),
                (4096, 4): (True, True, False, True),
                (8192, 4): (True, True, False, True)}


@pytest.mark.parametrize("n, elem_bytes", WEIGHT_FIRST)
def test_weight_first_follows_the_tile_and_the_residual_store(n, elem_bytes):
    got = tuple(forward_config(n, elem_bytes, 132, n_rows=rows, stores_residual=r).weight_load == "first"
                for rows, r in ((None, True), (132, True), (1, True), (1, False)))
    assert got == WEIGHT_FIRST[n, elem_bytes]


def test_decode_weight_first_edge_follows_its_setting():
    # The edge is few_rows_weight_first_max_bytes of tile, not a width: at 16 KiB fp32 4096-element decode
    # tiles load the weight first again, at 4 KiB bf16 4096-element ones no longer do.
    def load(n, elem_bytes, max_bytes):
        custom = dataclasses.replace(HOPPER, forward=dataclasses.replace(
            HOPPER.forward, few_rows_weight_first_max_bytes=max_bytes))
        return forward_config(n, elem_bytes, 132, custom, n_rows=64).weight_load

    assert (load(4096, 4, 8192), load(4096, 4, 16384)) == ("before_sum", "first")
    assert (load(4096, 2, 8192), load(4096, 2, 4096)) == ("first", "before_sum")


@pytest.mark.parametrize("elem_bytes", [2, 4])
@pytest.mark.parametrize("n", WIDTHS)
def test_wider_decode_tiles_load_the_weight_before_the_row_sums(n, elem_bytes):
    # docs/tuning.md#forward-decode-weight-before-the-sums: with the residual stored, a decode tile
    # of more than few_rows_weight_first_max_bytes loads the weight between the rows and their sums; many rows
    # wait for rstd.
    few, many = (forward_config(n, elem_bytes, 132, n_rows=rows) for rows in (132, None))
    if few.splits == 1 and few.path == "rows":
        # fp32 rows of 2049-8192 at 132 rows are dense (over few_rows_narrow_dense_bytes, few_rows_dense_bytes):
        # the weight first.
        dense = elem_bytes == 4 and few.block_n in (F.few_rows_max_tile, F.few_rows_thread_max_tile)
        wide = few.block_n * elem_bytes > F.few_rows_weight_first_max_bytes
        assert few.weight_load == ("before_sum" if wide and not dense else "first")
    if many.splits == 1 and many.path == "rows":
        # docs/tuning.md#forward-whole-row-tiles: a 64 KiB tile holds its SM alone and loads it before the sums.
        late = "before_sum" if many.block_n * elem_bytes == 65536 else "after_sum"
        assert many.weight_load == (late if many.block_n > WEIGHT_FIRST_MAX_N else "first")


@pytest.mark.parametrize("elem_bytes", [2, 4])
@pytest.mark.parametrize("n", WIDTHS + [16392, 18432, 20480, 24576, 28672, 29696, 30720, 9216, 12288, 14336, 14848])
def test_decode_rows_over_32_kib_split_while_a_row_has_enough_bytes_for_each_row(n, elem_bytes):
    # docs/tuning.md#forward-decode-split-rows: a whole row streams through one SM, up to 34% behind the split
    # at 1-32 tokens, 18432-32768 wide; the split grid's time grows with the rows, and the whole row leads
    # from 36-40 rows of 40 KiB, 44 of 48 KiB and 64 or more of 64 KiB (bf16).
    # A split program holds 8 KiB of x: 2 rows of 2048 in bf16, 1 in fp32; past 2 programs an SM (264 on
    # 132 SMs), 1 row of 8 KiB (bf16 4096 columns). A lone row: pieces of 4 KiB, two rows a tile (the second
    # empty), while at most 14 of them (bf16 28672 wide, fp32 14336), else one row of 8 KiB.
    # A thread holds 32 elements: 4 warps in bf16, 2 in fp32, but at least 4 while the grid has a program
    # for 2 SMs or fewer (at most 66 programs).
    # The edges: rows x 1280 bytes at most the row's bytes: rows of 40 KiB split up to 32 rows, 48 KiB up
    # to 38, 64 KiB up to 51. An fp32 whole row's threads hold 16 elements, not 32, and cost less: also rows x
    # 384 bytes at most its bytes past 32 KiB (fp32 rows of 36 KiB split up to 10 rows, 40 KiB up to 21), and
    # writing y only rows x 1280 at most its bytes past 52 KiB (60 KiB: up to 6 rows, 64 KiB: 9).
    # A lone bf16 row over 14336 wide, within 32 KiB, with the residual stored: 4 KiB pieces, one row a tile.
    for rows in (1, 2, 3, 4, 6, 7, 8, 9, 10, 11, 16, 17, 21, 22, 26, 27, 32, 33, 35, 36, 38, 39, 48, 51, 52, 64, 132):
        two_rows = {2: 2, 4: 1}[elem_bytes]
        programs = -(-rows // two_rows) * triton.cdiv(n, 2048)
        block_m, block_n = (1, 8192 // elem_bytes) if programs > 264 else (two_rows, 2048)
        if rows == 1:  # a lone row: 4 KiB pieces in a two-row tile while at most 14, else 8 KiB ones
            pieces = triton.cdiv(n * elem_bytes, 4096)
            block_m, block_n = (2, 4096 // elem_bytes) if pieces <= 14 else (1, 8192 // elem_bytes)
        warps = max(4 if programs <= 66 else 1, block_m * block_n // 1024)
        for stores in (True, False):
            light_edge = 384 * rows <= n * elem_bytes - 32768 if stores else 1280 * rows <= n * elem_bytes - 53248
            edge = 1280 * rows <= n * elem_bytes and (elem_bytes == 2 or light_edge)
            cfg = forward_config(n, elem_bytes, 132, n_rows=rows, stores_residual=stores)
            whole_row = n * elem_bytes <= MAX_TILE_BYTES
            if whole_row and n * elem_bytes > 32768 and edge:
                assert cfg == ForwardConfig("rows", block_m, block_n, triton.cdiv(n, block_n), warps,
                                            "before_sum"), (rows, stores)
            elif rows == 1 and stores and 14336 < n and n * elem_bytes <= 32768:
                assert cfg == ForwardConfig("rows", 1, 2048, triton.cdiv(n, 2048), 4, "before_sum"), stores
                # fp16's whole row holds on: it keeps it.
                assert forward_config(n, elem_bytes, 132, n_rows=1, fp16=True).splits == 1
            elif whole_row:
                assert cfg.splits == 1, (rows, stores)
            # The interpreter (one program at a time) never splits a row.
            assert forward_config(n, elem_bytes, 1, n_rows=rows, stores_residual=stores).splits == 1


def test_the_decode_split_edge_follows_the_row_bytes():
    # The measured edges (docs/tuning.md#forward-decode-split-rows): the last split row count per width.
    last = {}
    for n, elem_bytes in ((20480, 2), (24576, 2), (12288, 4), (32768, 2), (16384, 4), (10240, 4), (9216, 4)):
        last[n, elem_bytes] = max(r for r in range(1, 133)
                                  if forward_config(n, elem_bytes, 132, n_rows=r).splits > 1)
    assert last == {(20480, 2): 32, (24576, 2): 38, (12288, 4): 38, (32768, 2): 51, (16384, 4): 51, (10240, 4): 21,
                    (9216, 4): 10}
    # No rows, no split grid.
    assert forward_config(32768, 2, 132, n_rows=0).splits == 1
    # Writing y only, an fp32 row splits while rows x 1280 bytes are at most its bytes past 52 KiB.
    last_y = {n: max((r for r in range(1, 133)
                      if forward_config(n, 4, 132, n_rows=r, stores_residual=False).splits > 1), default=0)
              for n in (13312, 13824, 14336, 15360, 16384)}
    assert last_y == {13312: 0, 13824: 1, 14336: 3, 15360: 6, 16384: 9}


# docs/tuning.md#forward-decode-weight-before-the-sums: decode tiles of 4097-8192 elements with the residual
# stored take 8 warps and the weight before the sums, but 2-byte rows over 12 KiB (6145-8192 wide) take 16 at
# every decode row count.
@pytest.mark.parametrize("fp16", [False, True])
@pytest.mark.parametrize("rows", [1, 8, 16, 17, 64, 132])
def test_wide_2_byte_decode_rows_take_16_warps(rows, fp16):
    got = {n: forward_config(n, 2, 132, n_rows=rows, fp16=fp16) for n in (4104, 6144, 6152, 7168, 8192)}
    assert {n: (c.path, c.splits, c.num_warps, c.weight_load) for n, c in got.items()} == {
        4104: ("rows", 1, 8, "before_sum"), 6144: ("rows", 1, 8, "before_sum"), 6152: ("rows", 1, 16, "before_sum"),
        7168: ("rows", 1, 16, "before_sum"), 8192: ("rows", 1, 16, "before_sum")}
    # Writing y only, and many rows, keep their own warps.
    assert forward_config(7168, 2, 132, n_rows=rows, stores_residual=False, fp16=fp16).weight_load == "first"
    assert forward_config(7168, 2, 132, n_rows=512, fp16=fp16).num_warps == 8


# n -> the most rows of an fp32 decode launch (132 SMs) whose rows hold at most 1.5 MiB: one more takes 16 warps
# and the weight first, with the residual stored (docs/tuning.md#forward-decode-weight-before-the-sums).
FP32_DENSE_EDGE = {4352: 90, 5120: 76, 6656: 59, 8192: 48}


@pytest.mark.parametrize("n", FP32_DENSE_EDGE)
def test_fp32_decode_launches_of_many_bytes_take_16_warps_and_the_weight_first(n):
    last = FP32_DENSE_EDGE[n]
    below, above = (forward_config(n, 4, 132, n_rows=rows) for rows in (last, last + 1))
    assert (below.num_warps, below.weight_load) == (8, "before_sum")
    assert (above.num_warps, above.weight_load) == (16, "first")
    assert forward_config(n, 4, 132, n_rows=132) == above
    # The edge is the launch's bytes, not its share of the SMs; writing y only is not moved by it.
    assert forward_config(n, 4, 256, n_rows=last + 1) == above
    assert forward_config(n, 4, 256, n_rows=last) == below
    y_only = [forward_config(n, 4, 132, n_rows=rows, stores_residual=False) for rows in (last, last + 1)]
    assert y_only[0] == y_only[1]


def test_the_new_warp_counts_keep_the_thread_floor_under_other_settings():
    # No thread holds more than max_thread_elems tile elements, whatever the 16-warp settings say: fp32 8192
    # tiles need 8 warps, bf16 16384 ones 16 (a review found 4 warps taken as set).
    few = dataclasses.replace(HOPPER, forward=dataclasses.replace(HOPPER.forward, few_rows_thread_wide_warps=4,
                                                                      persistent_narrow_warps=4))
    assert forward_config(8192, 4, 132, few, n_rows=132).num_warps == 8
    assert forward_config(8192, 2, 132, few, n_rows=132).num_warps == 8
    assert forward_config(10240, 2, 132, few, n_rows=265).num_warps == 16


# (n, rows) -> warps of an fp16 decode row with the residual stored, and y only
# (docs/tuning.md#forward-sparse-decode-warps): with the residual stored, sparse rows past 8192 elements take a
# warp per 2 KiB of tile, the weight first, and a lone row stays whole; y only, the decode rule's 32 warps.
# bf16 takes 4 with the residual stored (the lone 16384 row splits) and 4 or 8 y only. At 17-132 rows
# fp16 tiles past 8192 elements load the weight first where bf16's load it before the row sums
# (docs/tuning.md#forward-decode-weight-before-the-sums).
FP16 = {(8200, 1): (16, 32), (12288, 16): (16, 32), (16384, 1): (16, 32), (16384, 8): (16, 32),
        (8192, 1): (16, 16), (16384, 17): (32, 32), (8200, 132): (32, 32), (8192, 64): (16, 16)}


@pytest.mark.parametrize("n, rows", FP16)
def test_fp16_decode_rows_keep_more_warps(n, rows):
    got = [forward_config(n, 2, 132, n_rows=rows, stores_residual=s, fp16=True) for s in (True, False)]
    assert tuple(c.num_warps for c in got) == FP16[n, rows] and all(c.splits == 1 for c in got)
    assert got[0].weight_load == ("first" if n > 8192 else "before_sum")
    bf16 = [forward_config(n, 2, 132, n_rows=rows, stores_residual=s) for s in (True, False)]
    if n == 8192:  # tiles the fp16 exceptions do not reach: one launch
        assert got == bf16
    elif rows > 16:
        assert bf16[0] == dataclasses.replace(got[0], weight_load="before_sum")
    else:
        assert bf16[1].num_warps == (4 if n > 10240 else 8) and bf16[0].num_warps == 4


@pytest.mark.parametrize("sms", [8, 16, 66, 132, 256])
def test_the_launchers_key_determines_the_tables_launch(sms):
    # launch.forward_rows keys its compiled kernels on (N, few rows?, path, splits, warps, weight load,
    # dtypes, residual stored?): two row counts with one key must take one launch (a miss reuses another
    # tile's kernel; a review found fp16 rows over 16384 on 8 SMs sharing a key across weight loads).
    seen = {}
    for n in range(1024, 32769, 40):
        for elem_bytes, fp16 in ((2, False), (2, True), (4, False)):
            for stores in (True, False):
                for rows in (1, 2, 3, 4, 8, 12, 16, 17, 24, 32, 40, 48, 64, 100, 132, 133, 257, 512, None):
                    cfg = forward_config(n, elem_bytes, sms, n_rows=rows, stores_residual=stores, fp16=fp16)
                    few = rows is not None and rows <= sms
                    key = (n, few, cfg.path, cfg.splits, cfg.num_warps, cfg.weight_load, elem_bytes, fp16, stores)
                    assert seen.setdefault(key, cfg) == cfg, (key, rows)


@pytest.mark.parametrize("fp16, elem_bytes", [(None, 2), (1, 2), ([], 2), (True, 4)])
def test_fp16_must_be_a_bool_of_2_byte_elements(fp16, elem_bytes):
    with pytest.raises(ValueError, match="fp16"):
        forward_config(4096, elem_bytes, 132, n_rows=1, fp16=fp16)


@settings(max_examples=400, deadline=None)
@given(n=st.integers(128, 4096).map(lambda k: 8 * k), elem_bytes=st.sampled_from([2, 4]),
       n_rows=st.integers(1, 140), max_splits=st.sampled_from([1, 2, 3, 4, 7, 8, 16, 66, 132, 256]),
       stores=st.booleans(), fp16=st.booleans())
def test_any_decode_launch_covers_its_row_within_the_sms(n, elem_bytes, n_rows, max_splits, stores, fp16):
    # Any multiple of 8 from 1024 to 32768 (the widths of the targets), any decode row count and SM count: a
    # legal launch that covers each row once, never more waiting programs than SMs.
    fp16 = fp16 and elem_bytes == 2
    cfg = forward_config(n, elem_bytes, max_splits, n_rows=n_rows, stores_residual=stores, fp16=fp16)
    assert cfg.splits <= max_splits and cfg.num_warps in (1, 2, 4, 8, 16, 32)
    if cfg.path == "rows":
        assert cfg.block_n * cfg.splits >= n > cfg.block_n * (cfg.splits - 1)
        # Decode splits of rows that fit a whole-row tile load the weight before their exchange.
        assert cfg.splits == 1 or n * elem_bytes > MAX_TILE_BYTES or cfg.weight_load == "before_sum"
    if max_splits == 1:
        assert cfg.splits == 1


def test_a_one_row_split_tile_never_outnumbers_the_sms():
    # Settings whose one-row tile is narrower than split's columns split a row over more programs: where
    # those would outnumber the SMs, the crowded grid keeps split's columns (a review found the check on
    # split's columns alone).
    narrow = dataclasses.replace(HOPPER, forward=dataclasses.replace(HOPPER.forward, few_rows_split_tile_bytes=4096))
    cfg = forward_config(16384, 4, 10, narrow, n_rows=3)
    assert (cfg.block_m, cfg.block_n, cfg.splits) == (1, 2048, 8)
    assert forward_config(16384, 4, 16, narrow, n_rows=5).splits == 16  # crowded, and 1 x 1024 fits 16 SMs
    # A lone row: 32 pieces of 2 KiB are too many; one row of 1024 columns where 16 fit the SMs, else 2048.
    lone = {sms: forward_config(16384, 4, sms, narrow, n_rows=1) for sms in (10, 16)}
    assert {sms: (c.block_m, c.block_n, c.splits) for sms, c in lone.items()} == {10: (1, 2048, 8), 16: (1, 1024, 16)}


def test_crowded_decode_splits_hold_one_row_a_program():
    # bf16 32768: 2-row programs, 16 a row, while at most 2 an SM; past that, 1 row of 4096 columns, 8 a row.
    # Fewer SMs crowd sooner: the tile follows the SM count, not a row count.
    tiles = {(rows, sms): (c.block_m, c.block_n, c.splits) for rows in (32, 33, 34, 51) for sms in (132, 66)
             for c in [forward_config(32768, 2, sms, n_rows=rows)]}
    assert tiles == {(32, 132): (2, 2048, 16), (33, 132): (1, 4096, 8), (34, 132): (1, 4096, 8),
                     (51, 132): (1, 4096, 8), (32, 66): (1, 4096, 8), (33, 66): (1, 4096, 8),
                     (34, 66): (1, 4096, 8), (51, 66): (1, 4096, 8)}


@pytest.mark.parametrize("n", [2880, 4096, 5120, 16384, 20000])
def test_persistent_candidates_hold_the_rules_whole_rows_at_prefill_only(n):
    rule = forward_config(n, 2, 132)
    got = [c for c in forward_candidates(n, 2, 132) if c.path == "persistent"]
    if rule.path != "rows" or rule.splits > 1 or rule.block_n < 4096:
        assert got == []
    else:
        assert {(c.num_warps, c.programs_per_sm) for c in got} == {
            (w, p) for w in (rule.num_warps, 2 * rule.num_warps, 32) for p in (1, 2) if w <= 32}
        assert all((c.block_m, c.block_n, c.splits, c.weight_load) == (rule.block_m, rule.block_n, 1, "first")
                   for c in got)
    # A decode step has a program per row already: nothing to walk.
    assert not any(c.path == "persistent" for c in forward_candidates(n, 2, 132, n_rows=132))


# (n, elem_bytes) -> the rule's path at 264 and 265 rows (2 per SM and just over), 1056 (8 per SM)
# and 1057 on 132 SMs, and its persistent warps: docs/tuning.md#forward-persistent-grid. Whole-row
# tiles of 32 KiB (bf16 8193-16384 wide, fp32 4097-8192) walk rows on a grid of one program per SM,
# 16 warps for rows of at most 22 KiB, else 32; wider tiles do not (2-byte ones split there:
# docs/tuning.md#forward-band-split).
PERSISTENT = {(8192, 2): ("rrrr", None), (8200, 2): ("rppr", 16), (10248, 2): ("rppr", 16),
              (11264, 2): ("rppr", 16), (11272, 2): ("rppr", 32), (16384, 2): ("rppr", 32), (32768, 2): ("rssr", None),
              (32776, 2): ("ssss", None), (4104, 4): ("rppr", 16),
              (5128, 4): ("rppr", 16), (5632, 4): ("rppr", 16), (5640, 4): ("rppr", 32), (8192, 4): ("rppr", 32),
              (16384, 4): ("rrrr", None)}


@pytest.mark.parametrize("n, elem_bytes", PERSISTENT)
def test_the_persistent_grid_takes_wide_whole_rows_a_few_per_sm(n, elem_bytes):
    paths, warps = PERSISTENT[n, elem_bytes]
    for stores, fp16 in itertools.product((True, False), (False, elem_bytes == 2)):
        got = [forward_config(n, elem_bytes, 132, n_rows=rows, stores_residual=stores, fp16=fp16)
               for rows in (264, 265, 1056, 1057)]
        assert "".join("s" if c.splits > 1 else c.path[0] for c in got) == paths
        for c in got:
            if c.path == "persistent":
                assert (c.num_warps, c.programs_per_sm, c.weight_load) == (warps, 1, "first")
                assert c.block_n == forward_config(n, elem_bytes, 132).block_n >= n
        # The rule's choice leads its candidates; the whole-row tiles of many rows follow it.
        cands = forward_candidates(n, elem_bytes, 132, n_rows=512, stores_residual=stores, fp16=fp16)
        assert cands[0] == got[1]
        assert forward_config(n, elem_bytes, 132, stores_residual=stores, fp16=fp16) in cands


@pytest.mark.parametrize("edge", [18432, 20480, 30720])
def test_the_persistent_grid_takes_16_warps_up_to_its_setting(edge):
    # The edge is the setting's, not a number of the rule: rows of 32 KiB tiles to either side of it at 512 rows.
    s = dataclasses.replace(HOPPER, forward=dataclasses.replace(HOPPER.forward, persistent_narrow_row_bytes=edge))
    for elem_bytes in (2, 4):
        n = edge // elem_bytes
        got = [forward_config(w, elem_bytes, 132, s, n_rows=512) for w in (n, n + 8)]
        assert [c.path for c in got] == ["persistent", "persistent"]
        assert [c.num_warps for c in got] == [16, 32]


# (n, elem_bytes) -> warps at 264, 265, 1056 and 1057 rows on 132 SMs: at 2-8 rows an SM, whole-row
# tiles of 8 KiB (bf16 2049-4096 wide, fp32 1025-2048) take 8 warps, as do fp32 tiles of 16 KiB (2049-2559
# wide had 4: docs/tuning.md#forward-band-waves), and past it, with the residual stored, the warps that hold
# 16 elements a thread (2-byte: 8, fp32: 4) (docs/tuning.md#forward-warps); other tiles (2-byte 16 KiB ones
# too) and row counts keep the rule's warps per row byte.
BAND_WARPS = {(2880, 2): (4, 8, 8, 8), (4096, 2): (4, 8, 8, 8), (2304, 2): (4, 8, 8, 8),
              (1536, 4): (4, 8, 8, 4), (2048, 4): (4, 8, 8, 4), (2048, 2): (4, 4, 4, 4),
              (2056, 4): (4, 8, 8, 4), (2552, 4): (4, 8, 8, 4), (2560, 4): (8, 8, 8, 8),
              (5120, 2): (8, 8, 8, 8), (1024, 4): (4, 4, 4, 4)}


@pytest.mark.parametrize("n, elem_bytes", BAND_WARPS)
def test_band_rows_of_8_kib_tiles_take_more_warps(n, elem_bytes):
    for stores, fp16 in itertools.product((True, False), (False, elem_bytes == 2)):
        got = [forward_config(n, elem_bytes, 132, n_rows=rows, stores_residual=stores, fp16=fp16)
               for rows in (264, 265, 1056, 1057, 100000)]
        want = BAND_WARPS[n, elem_bytes]
        # Writing y only, past the band is as below it.
        assert tuple(c.num_warps for c in got) == ((*want, want[3]) if stores else (*want[:3], want[0], want[0]))
        assert all(c.path == "rows" and c.weight_load == "first" for c in got)
    # 8 SMs: the band is 17-64 rows.
    assert forward_config(n, elem_bytes, 8, n_rows=64).num_warps == BAND_WARPS[n, elem_bytes][2]
    assert forward_config(n, elem_bytes, 8, n_rows=65).num_warps == BAND_WARPS[n, elem_bytes][3]


@pytest.mark.parametrize("n", [16392, 18272, 24576, 32768])
def test_band_rows_of_2_byte_rows_past_16384_split_over_the_decode_splits_tiles(n):
    # A whole 2-byte row of 16385-32768 holds 32 elements a thread at 32 warps: at 2-8 rows an SM it takes
    # the decode split's tile, 2 rows x 2048 on 4 warps, the weight before the sums, each op and dtype
    # (docs/tuning.md#forward-band-split); outside the band, and where its pieces outnumber the SMs, whole rows.
    split = ForwardConfig("rows", 2, 2048, -(-n // 2048), 4, "before_sum")
    for stores, fp16 in itertools.product((True, False), (True, False)):
        got = [forward_config(n, 2, 132, n_rows=rows, stores_residual=stores, fp16=fp16)
               for rows in (264, 265, 1056, 1057)]
        assert got[1] == got[2] == split
        assert got[0].splits == got[3].splits == 1 and got[0].block_n == got[3].block_n == 32768
    assert forward_config(n, 2, -(-n // 2048) - 1, n_rows=4 * (-(-n // 2048) - 1)).splits == 1
    # fp32's widest whole rows (16384 elements) hold 16-32 a thread: whole in the band.
    assert forward_config(n // 2, 4, 132, n_rows=512).splits == 1
    # Within the settings' warps, as every launch of many rows.
    eight = dataclasses.replace(HOPPER, forward=dataclasses.replace(F, min_warps=8))
    assert forward_config(n, 2, 132, eight, 512) == dataclasses.replace(split, num_warps=8)


# Programs an SM holds, as the H200 compiles whole-row tiles with the residual stored
# (tools/kernel/registers.py --forward): bf16 rows of 2880 at 8 warps with the weight first 40 registers
# a thread, at 4 before the sums 64; fp16 rows of 5120 74 and 126.
FITS = {(2880, 8, "first"): 6, (2880, 4, "before_sum"): 8, (5120, 8, "first"): 3, (5120, 4, "before_sum"): 4}


@pytest.mark.parametrize("n, rows, fewer", [(2880, 265, False), (2880, 792, False), (2880, 793, True),
                                            (2880, 1056, True), (5120, 396, False), (5120, 397, True),
                                            (5120, 528, True), (5120, 529, False)])
def test_band_rows_past_a_wave_take_half_the_warps_where_one_wave_of_them_holds_every_row(n, rows, fewer):
    asked = []

    def resident(c):
        asked.append(c)
        return FITS[n, c.num_warps, c.weight_load]

    fp16 = n == 5120
    cfg = forward_config(n, 2, 132, n_rows=rows, fp16=fp16)
    assert (cfg.num_warps, cfg.weight_load) == (8, "first")
    got = band_wave_config(cfg, rows, 132, HOPPER, resident)
    assert got == (dataclasses.replace(cfg, num_warps=4, weight_load="before_sum") if fewer else cfg)
    # The fewer warps are compiled for only where the rule's launch needs a second wave.
    assert asked[0] == cfg and len(asked) == (1 if rows <= FITS[n, 8, "first"] * 132 else 2)


@pytest.mark.parametrize("n, elem_bytes, rows, stores", [
    (2880, 2, 264, True),  # below the band
    (2880, 2, 1057, True),  # past it
    (2880, 2, 132, True),  # decode
    (2048, 2, 860, False),  # 4 warps: none fewer
    (16384, 2, 860, True),  # the persistent grid
])
def test_launches_outside_the_band_or_at_the_fewest_warps_keep_the_rules_and_ask_no_registers(n, elem_bytes, rows,
                                                                                            stores):
    cfg = forward_config(n, elem_bytes, 132, n_rows=rows, stores_residual=stores)
    assert band_wave_config(cfg, rows, 132, HOPPER, lambda c: pytest.fail("asked for registers")) is cfg


def test_the_rule_is_cached_per_row_class_not_per_row_count():
    # The launch asks on every call: a prefill of a new length must hit the
    # cache (a miss took ~15 us of host time against ~3 for a hit on a CPU).
    from fusedkernel.kernels import forward_rule

    lengths = range(1, 3000, 7)  # few, many, and the persistent band of 132 SMs
    for n_rows in lengths:
        forward_config(16384, 2, 132, HOPPER, n_rows)
    before = forward_rule._forward_config.cache_info()
    for n_rows in lengths:
        forward_config(16384, 2, 132, HOPPER, n_rows + 1)
    after = forward_rule._forward_config.cache_info()
    assert after.misses == before.misses and after.hits - before.hits == len(lengths)
    assert {forward_config(16384, 2, 132, HOPPER, n).path for n in lengths} == {"rows", "persistent"}


def test_a_cached_rule_asks_triton_nothing_past_decode(monkeypatch):
    # Host time: triton.next_power_of_2 costs microseconds a call (a ConstexprFunction), more than a cache
    # hit; once a class is cached, rows past decode (under, in and past the band, the band's split) and the
    # common decode widths choose in plain ints.
    from fusedkernel.kernels import forward_rule

    cases = [(n, rows) for n in (2880, 4096, 16384, 18272, 32768) for rows in (1, 64, 200, 512, 1056, 8192)]
    for n, rows in cases:
        forward_config(n, 2, 132, HOPPER, rows)
    # fp32 band rows, warm (16 KiB tiles over 32 KiB an SM) and not, either op.
    fp32 = [(n, rows, stores) for n in (2440, 3576) for rows in (300, 400, 700) for stores in (True, False)]
    for n, rows, stores in fp32:
        forward_config(n, 4, 132, HOPPER, rows, stores)

    def refuse(*args):
        raise AssertionError("triton.next_power_of_2 was called")

    monkeypatch.setattr(forward_rule.triton, "next_power_of_2", refuse)
    for n, rows in cases:
        if rows > 132 or n <= 16384:
            forward_config(n, 2, 132, HOPPER, rows + 1)
    for n, rows, stores in fp32:
        forward_config(n, 4, 132, HOPPER, rows + 1, stores)


def test_decode_split_warps_stay_within_max_warps_under_other_settings():
    # max_thread_elems=1 asks 64 warps of an 8 KiB split tile: capped at max_warps, not a ForwardConfig error.
    tiny = dataclasses.replace(HOPPER, forward=dataclasses.replace(HOPPER.forward, max_thread_elems=1))
    cfg = forward_config(8232, 4, 8, tiny, n_rows=1)
    assert cfg.splits > 1 and cfg.num_warps == 32


# fp32 rows of 2049-4096 (16 KiB tiles) in band launches of at most 512 rows (decode steps, x in L2) and 4 an SM
# whose rows hold more than 32 KiB an SM (rows x row bytes > 32768 x 132 on 132 SMs): 16 warps, the weight first;
# writing y only, rows over 2816 wide (11/16 of the tile) on the persistent grid, 16 warps, 2 an SM
# (docs/tuning.md#forward-band-waves).
@pytest.mark.parametrize("n, rows, want", [
    (2816, 384, None),  # 32 KiB an SM exactly: the band's 8 warps
    (2816, 385, "W"), (2800, 441, "W"), (2816, 512, "W"), (2824, 512, "P"), (3576, 371, "P"), (4096, 265, "P"),
    (2800, 371, None),  # 30.7 KiB an SM
    (4096, 264, None),  # below the band
    (4096, 1056, None),  # 8 an SM (the 16 KiB tile is not the persistent grid's 32 KiB)
    (3576, 513, None),  # more than warm_max_rows
    (2048, 512, None),  # an 8 KiB tile
])
def test_warm_band_rows_of_fp32_16_kib_tiles_over_32_kib_an_sm_take_16_warps_or_the_persistent_grid(n, rows, want):
    cold = dataclasses.replace(HOPPER, forward=dataclasses.replace(F, warm_max_rows=1))
    sixteen = ForwardConfig("rows", 1, 4096, 1, 16, "first")
    for stores in (True, False):
        got = forward_config(n, 4, 132, n_rows=rows, stores_residual=stores)
        if want == "W" or want == "P" and stores:
            assert got == sixteen
        elif want == "P":
            assert got == ForwardConfig("persistent", 1, 4096, 1, 16, "first", 2)
        else:
            assert got == forward_config(n, 4, 132, cold, rows, stores) and got.num_warps <= 8
        # 2-byte rows of the same width keep their launch; the tuner's candidates lead with the rule's.
        assert forward_config(n, 2, 132, n_rows=rows) == forward_config(n, 2, 132, cold, rows)
        assert forward_candidates(n, 4, 132, n_rows=rows, stores_residual=stores)[0] == got
    # The settings' numbers, not the rule's: a smaller byte edge takes the rows below it, but neither 8 KiB
    # tiles nor rows below the band (at HOPPER's 32 KiB an SM those hold too few bytes to be warm).
    low = dataclasses.replace(HOPPER, forward=dataclasses.replace(F, band_warm_bytes_per_sm=16384))
    assert forward_config(2800, 4, 132, low, 371) == sixteen
    assert forward_config(2048, 4, 132, low, 512) == forward_config(2048, 4, 132, cold, 512)
    assert forward_config(4096, 4, 132, low, 264) == forward_config(4096, 4, 132, cold, 264)
    other = dataclasses.replace(HOPPER, forward=dataclasses.replace(
        F, band_warm_warps=32, band_warm_programs_per_sm=1, band_warm_narrow_row_bytes=14336,
        band_warm_max_rows_per_sm=3))
    assert forward_config(3576, 4, 132, other, 396, False) == ForwardConfig("rows", 1, 4096, 1, 32, "first")
    assert forward_config(4096, 4, 132, other, 396, False) == ForwardConfig("persistent", 1, 4096, 1, 32, "first", 1)
    assert forward_config(3576, 4, 132, other, 397) == forward_config(3576, 4, 132, cold, 397)
    # 8 SMs: at most 4 rows an SM (one wave of 16-warp programs).
    assert forward_config(3576, 4, 8, n_rows=32, stores_residual=False).path == "persistent"
    assert forward_config(3576, 4, 8, n_rows=33) == forward_config(3576, 4, 8, cold, 33)

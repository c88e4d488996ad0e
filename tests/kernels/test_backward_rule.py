"""The backward rule covers every width with a legal launch, chosen as docs/tuning.md says."""

import pytest
import triton

from fusedkernel.kernels.backward_rule import (backward_candidates, backward_config, backward_neighbours, dw_sum_config,
                                               row_pieces)
from fusedkernel.kernels.config import HOPPER, BackwardConfig

B = HOPPER.backward
BWD_MAX_TILE_N = B.max_tile_n


def bwd_splits(n: int, elem_bytes: int) -> bool:
    # docs/tuning.md#backward-whole-rows: on a GPU, rows wider than narrow whose tile (one or two
    # pieces) holds more than max_tile_bytes.
    return n * elem_bytes > B.narrow_row_bytes and sum(row_pieces(n)) * elem_bytes > B.max_tile_bytes
DW_SUM_MAX_P, DW_SUM_TILE_ELEMS = B.dw_sum_max_p, B.dw_sum_tile_elems

# Every power of two up to 2**20 and its neighbours, plus odd and prime widths.
WIDTHS = sorted({(1 << k) + d for k in range(21) for d in (-1, 0, 1) if (1 << k) + d >= 1}
                | {3, 7, 13, 4097, 100003})


@pytest.mark.parametrize("elem_bytes", [2, 4])
@pytest.mark.parametrize("max_splits", [1, 132])
@pytest.mark.parametrize("n", WIDTHS)
def test_backward_table_covers_every_width(n, max_splits, elem_bytes):
    cfg = backward_config(n, elem_bytes, max_splits)
    assert cfg.block_n == triton.next_power_of_2(cfg.block_n) and cfg.block_m >= 1
    assert cfg.num_warps in (1, 2, 4, 8, 16, 32) and cfg.programs_per_sm >= 1
    if cfg.path == "rows":
        assert cfg.block_n + cfg.tail_n >= n  # whole rows
        # A second piece only where it holds columns, and no more than one tile would.
        assert cfg.tail_n == 0 or cfg.block_n < n <= cfg.block_n + cfg.tail_n <= triton.next_power_of_2(n)
        assert not bwd_splits(n, elem_bytes) or max_splits == 1
        # A grid waiting for itself never runs more warps than the table's; a warp per 1024 columns of
        # the tile (both pieces) otherwise, 4 at least (docs/tuning.md#backward-decode-waits).
        assert cfg.wait_warps in (4, 8, 16) and min(4, cfg.num_warps) <= cfg.wait_warps <= cfg.num_warps
        per_1024 = triton.next_power_of_2(cfg.block_n + cfg.tail_n) // 1024
        assert cfg.wait_warps == max(4, min(cfg.num_warps, per_1024))
    elif cfg.path == "split":
        # Programs that wait for each other must fit at once: at most one per SM per row.
        assert max_splits > 1 and bwd_splits(n, elem_bytes) and -(-n // cfg.block_n) <= max_splits
    else:
        assert cfg.path == "columns" and n > BWD_MAX_TILE_N


# (n, elem_bytes) -> the backward's path on the H200 (132 SMs): whole rows while their tile holds at
# most 24 KiB (bf16 to 12288 wide, two pieces included: 8200 = 8192 + 8, 12288 = 8192 + 4096; fp32 to
# 6144); split beyond (bf16 12289 needs a 16384 tile; fp32 7168 an 8192 one).
BWD_PATHS = {(1536, 2): "rows", (2048, 2): "rows", (2880, 2): "rows", (3584, 2): "rows", (5120, 2): "rows",
             (7168, 2): "rows", (8192, 2): "rows", (8200, 2): "rows", (12288, 2): "rows", (12289, 2): "split",
             (16384, 2): "split", (2880, 4): "rows", (5120, 4): "rows", (6144, 4): "rows", (7168, 4): "split",
             (8192, 4): "split", (16384, 4): "split"}


@pytest.mark.parametrize("n, elem_bytes", BWD_PATHS)
def test_backward_paths(n, elem_bytes):
    assert backward_config(n, elem_bytes, 132).path == BWD_PATHS[n, elem_bytes]
    assert backward_config(n, elem_bytes, 1).path == "rows"  # the interpreter never splits


# (n, elem_bytes) -> the split setting (rows, columns, warps, programs per SM, exchange behind) on the
# H200 (132 SMs): 2-byte rows of at most 16 programs of 1024 columns, 4 per SM; wider 2-byte rows 2048
# columns, 2 per SM, the exchange one row block behind, or 4096 columns, 8 warps, 1 per SM where that
# makes at most 16 programs (32769-65536); 4-byte rows 2048 columns, 2 per SM; columns and warps double
# where a row would need more programs than SMs (270337 > 132 x 2048).
SPLIT_SETTINGS = {(12289, 2): (2, 1024, 4, 4, False), (16384, 2): (2, 1024, 4, 4, False),
                  (16385, 2): (2, 2048, 4, 2, True), (32768, 2): (2, 2048, 4, 2, True),
                  (32769, 2): (2, 4096, 8, 1, True), (65536, 2): (2, 4096, 8, 1, True),
                  (65537, 2): (2, 2048, 4, 2, True), (262144, 2): (2, 2048, 4, 2, True),
                  (270337, 2): (2, 4096, 8, 1, True), (7168, 4): (2, 2048, 4, 2, False),
                  (65536, 4): (2, 2048, 4, 2, False), (270337, 4): (2, 4096, 8, 1, False)}


@pytest.mark.parametrize("n, elem_bytes", SPLIT_SETTINGS)
def test_backward_split_settings(n, elem_bytes):
    cfg = backward_config(n, elem_bytes, 132)
    assert cfg.path == "split"
    assert (cfg.block_m, cfg.block_n, cfg.num_warps, cfg.programs_per_sm,
            cfg.exchange_behind) == SPLIT_SETTINGS[n, elem_bytes]


# (bf16 n, max_splits) -> (columns, warps, programs per SM): the wider tile of 4096 columns where it fits a
# row in 16 programs, then doubled again where a row would need more programs than may wait at once.
WIDER_TILE = {(32769, 16): (4096, 8, 1), (65536, 16): (4096, 8, 1), (65536, 20): (4096, 8, 1),
              (65536, 8): (8192, 16, 1), (32769, 8): (8192, 16, 1), (65537, 20): (4096, 8, 1),
              (65537, 66): (2048, 4, 2)}


@pytest.mark.parametrize("n, max_splits", WIDER_TILE)
def test_the_wider_split_tile_under_fewer_programs(n, max_splits):
    cfg = backward_config(n, 2, max_splits)
    assert cfg.path == "split" and cfg.exchange_behind
    assert (cfg.block_n, cfg.num_warps, cfg.programs_per_sm) == WIDER_TILE[n, max_splits]


# n -> (first piece, second piece): two where one tile would be a quarter or more masked.
PIECES = {1: (1, 0), 3: (2, 1), 5: (4, 1), 6: (4, 2), 7: (8, 0), 1280: (1024, 256), 2880: (2048, 1024),
          3072: (2048, 1024), 3584: (4096, 0), 4096: (4096, 0), 4097: (4096, 1), 5120: (4096, 1024),
          6144: (4096, 2048), 6145: (8192, 0), 7168: (8192, 0), 12288: (8192, 4096)}


@pytest.mark.parametrize("n", PIECES)
def test_row_pieces(n):
    assert row_pieces(n) == PIECES[n]


# (n, elem_bytes) -> (rows, warps, programs per SM, second piece) of the backward's whole rows, by
# the rule of docs/tuning.md#backward-whole-rows. Rows of at most 2 KiB: as many a program as fit in
# 8 KiB, 4 warps, 2 programs per SM. Wider: rows per SM = the power of two of 20 KiB / row bytes
# (1 to 4), held by 512 threads per SM where their tiles hold at most 16 KiB, else 256, in as many
# programs of at least 4 warps as there are rows.
BWD_ROWS = {(512, 2): (8, 4, 2, 0), (1024, 2): (4, 4, 2, 0), (2048, 2): (1, 4, 4, 0), (2304, 2): (2, 4, 2, 256),
            (2880, 2): (1, 8, 2, 1024), (4096, 2): (1, 8, 2, 0), (5120, 2): (1, 4, 2, 1024),
            (6144, 2): (1, 16, 1, 2048), (7168, 2): (1, 16, 1, 0), (8192, 2): (1, 16, 1, 0),
            (12288, 2): (1, 8, 1, 4096), (512, 4): (4, 4, 2, 0), (1024, 4): (1, 4, 4, 0), (2048, 4): (1, 8, 2, 0),
            (4096, 4): (1, 16, 1, 0), (5120, 4): (1, 8, 1, 1024), (6144, 4): (1, 8, 1, 2048)}


@pytest.mark.parametrize("n, elem_bytes", BWD_ROWS)
def test_backward_whole_row_settings(n, elem_bytes):
    cfg = backward_config(n, elem_bytes, 132)
    assert (cfg.block_m, cfg.num_warps, cfg.programs_per_sm, cfg.tail_n) == BWD_ROWS[n, elem_bytes]


@pytest.mark.parametrize("n_parts", list(range(1, 130)) + [264, 528, 1056, 4096])
def test_dweight_sum_tiles(n_parts):
    # All the shares in one step while they fit, never more than the tile.
    block_p, block_n = dw_sum_config(n_parts)
    for v in (block_p, block_n):
        assert v == triton.next_power_of_2(v)
    assert block_p >= min(n_parts, DW_SUM_MAX_P) and block_p < 2 * n_parts
    assert block_n >= 16 and block_p * block_n <= max(DW_SUM_TILE_ELEMS, 16 * block_p)


@pytest.mark.parametrize("call, match", [
    (lambda: backward_config([8], 2, 1), "n_cols must be an int >= 1"),
    (lambda: backward_config(8, 2, [1]), "max_splits must be an int >= 1"),
    # row_pieces(-1) gave (1, 0), row_pieces(3.0) a shift count error, dw_sum_config(1.5) a TypeError.
    (lambda: row_pieces(0), "n_cols must be an int >= 1"), (lambda: row_pieces(-1), "n_cols"),
    (lambda: row_pieces(3.0), "n_cols"), (lambda: dw_sum_config(1.5), "n_parts must be an int >= 1")])
def test_the_rule_refuses_bad_arguments_by_name(call, match):
    with pytest.raises(ValueError, match=match):
        call()


def test_the_dweight_sum_refuses_settings_that_are_not_a_settings():
    with pytest.raises(TypeError, match="settings must be a Settings"):  # an AttributeError on None
        dw_sum_config(4, None)


@pytest.mark.parametrize("n", [512, 4096, 5120, 20000, 65536])
def test_the_tuner_sweeps_the_rule_first_and_only_legal_settings(n):
    bwd = backward_candidates(n, 2, 132)
    assert bwd[0] == backward_config(n, 2, 132) and len(bwd) == len(set(bwd)) > 1
    assert all(isinstance(cfg, BackwardConfig) for cfg in bwd)


def test_split_candidates_split():
    # A split of one program a row is the rows path; more than max_splits would hang.
    for n in (2049, 2880, 4096, 5120, 20000):
        for max_splits in (1, 4, 132):
            for cfg in backward_candidates(n, 2, max_splits)[1:]:
                if cfg.path == "split":
                    assert 2 <= -(-n // cfg.block_n) <= max_splits, (n, max_splits, cfg)
    assert any(c.path == "split" for c in backward_candidates(2880, 2, 132))  # from 2048 wide
    assert not any(c.path in ("split", "columns") for c in backward_candidates(2048, 2, 132))


@pytest.mark.parametrize("n, elem_bytes", [(1024, 2), (2880, 2), (12288, 2), (2880, 4), (6144, 4)])
def test_backward_neighbours_vary_rows_and_threads_per_sm_around_the_rule(n, elem_bytes):
    # docs/tuning.md#backward-whole-rows' table: the rule's tile at 1, 2 or 4 rows per SM held by 256,
    # 512 or 1024 threads per SM, every arrangement of 4-, 8- or 16-warp programs.
    rule, *rest = cfgs = backward_neighbours(n, elem_bytes, 132)
    assert rule == backward_config(n, elem_bytes, 132) and len(set(cfgs)) == len(cfgs)
    assert all((c.path, c.block_n, c.tail_n, c.wait_warps) == (rule.path, rule.block_n, rule.tail_n, rule.wait_warps)
               for c in rest)
    # (rows, warps, programs per SM): 14 settings; 1 row on 1024 threads would need 32 warps.
    want = {(1, 8, 1), (1, 16, 1), (2, 8, 1), (1, 4, 2), (2, 16, 1), (1, 8, 2), (1, 16, 2), (4, 8, 1), (2, 4, 2),
            (4, 16, 1), (2, 8, 2), (1, 4, 4), (2, 16, 2), (1, 8, 4)}
    got = {(c.block_m, c.num_warps, c.programs_per_sm) for c in cfgs}
    assert want <= got and got - want <= {(rule.block_m, rule.num_warps, rule.programs_per_sm)}


def test_backward_neighbours_are_the_rule_alone_off_the_rows_path():
    assert backward_neighbours(16384, 2, 132) == [backward_config(16384, 2, 132)]  # split

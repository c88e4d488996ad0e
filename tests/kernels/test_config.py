"""The launch table covers every width with a legal launch."""

import pytest
import triton

from fusedkernel.kernels.config import (BWD_MAX_TILE_N, BWD_SPLIT_MIN_N, DW_SUM_MAX_P, DW_SUM_TILE_ELEMS, MAX_TILE_BYTES,
                                       SPLIT_BLOCK_N, WEIGHT_FIRST_MAX_N, backward_config, dw_sum_config,
                                       forward_config)

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
        assert cfg.weight_first == (cfg.splits == 1 and cfg.block_n <= WEIGHT_FIRST_MAX_N)
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


@pytest.mark.parametrize("elem_bytes", [2, 4])
@pytest.mark.parametrize("max_splits", [1, 132])
@pytest.mark.parametrize("n", WIDTHS)
def test_backward_table_covers_every_width(n, max_splits, elem_bytes):
    cfg = backward_config(n, elem_bytes, max_splits)
    assert cfg.block_n == triton.next_power_of_2(cfg.block_n) and cfg.block_m >= 1
    assert cfg.num_warps in (1, 2, 4, 8, 16, 32) and cfg.programs_per_sm >= 1
    if cfg.path == "rows":
        assert cfg.block_n >= n  # whole rows
        assert cfg.block_n < BWD_SPLIT_MIN_N or max_splits == 1
        # A grid waiting for itself never runs more warps than the table's.
        assert cfg.wait_warps in (4, 8, 16) and min(4, cfg.num_warps) <= cfg.wait_warps <= cfg.num_warps
    elif cfg.path == "split":
        # Programs that wait for each other must fit at once: at most one per SM per row.
        assert max_splits > 1 and triton.next_power_of_2(n) >= BWD_SPLIT_MIN_N and -(-n // cfg.block_n) <= max_splits
    else:
        assert cfg.path == "columns" and n > BWD_MAX_TILE_N


@pytest.mark.parametrize("n_parts", list(range(1, 130)) + [264, 528, 1056, 4096])
def test_dweight_sum_tiles(n_parts):
    # All the shares in one step while they fit, never more than the tile.
    block_p, block_n = dw_sum_config(n_parts)
    for v in (block_p, block_n):
        assert v == triton.next_power_of_2(v)
    assert block_p >= min(n_parts, DW_SUM_MAX_P) and block_p < 2 * n_parts
    assert block_n >= 16 and block_p * block_n <= max(DW_SUM_TILE_ELEMS, 16 * block_p)

"""The launch table covers every width with a legal launch."""

import pytest
import triton

from fusedkernel.kernels.config import (BWD_MAX_TILE_N, DW_SUM_MAX_P, DW_SUM_TILE_ELEMS, MAX_TILE_BYTES,
                                       WEIGHT_FIRST_MAX_N, backward_config, dw_sum_config, forward_config)

# Every power of two up to 2**20 and its neighbours, plus odd and prime widths.
WIDTHS = sorted({(1 << k) + d for k in range(21) for d in (-1, 0, 1) if (1 << k) + d >= 1}
                | {3, 7, 13, 4097, 100003})


@pytest.mark.parametrize("elem_bytes", [2, 4])
@pytest.mark.parametrize("interpret", [False, True])
@pytest.mark.parametrize("n", WIDTHS)
def test_every_column_is_covered(n, interpret, elem_bytes):
    cfg = forward_config(n, elem_bytes, interpret)
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


@pytest.mark.parametrize("n", WIDTHS)
def test_interpreter_never_waits_between_programs(n):
    assert forward_config(n, 2, interpret=True).splits == 1
    assert forward_config(n, 4, interpret=True).splits == 1


@pytest.mark.parametrize("n", WIDTHS)
def test_backward_table_covers_every_width(n):
    cfg = backward_config(n)
    assert cfg.block_n == triton.next_power_of_2(cfg.block_n) and cfg.block_m >= 1
    assert cfg.num_warps in (1, 2, 4, 8, 16, 32) and cfg.programs_per_sm >= 1
    if cfg.path == "rows":
        assert cfg.block_n >= n  # whole rows
        # A grid waiting for itself never runs more warps than the table's.
        assert cfg.wait_warps in (4, 8, 16) and min(4, cfg.num_warps) <= cfg.wait_warps <= cfg.num_warps
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

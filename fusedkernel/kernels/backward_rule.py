"""The backward rule: a launch for rows of hidden size N from the architecture's settings.

Backward paths: ``rows`` (whole rows, persistent grid), ``split`` (rows split
over programs that exchange partial dot products) and ``columns`` (a pass for
each row's dot product, then column chunks).

The search space ``tools/kernel/tune_backward.py`` sweeps sits beside the
rule (:func:`backward_candidates`, :func:`backward_neighbours`).
"""

from __future__ import annotations

import dataclasses
import functools
import itertools

import triton

from .config import HOPPER, MAX_WARPS, BackwardConfig, Settings, check_rule_args, check_settings_arg, pow2_at_most


def row_pieces(n_cols: int) -> tuple[int, int]:
    """(block_n, tail_n): a whole row of ``n_cols`` >= 1 as one power-of-two tile or two pieces.

    Two pieces (the largest power of two in the row, then the rest padded to
    a power of two) where the rest pads to at most half the first piece: a
    single tile would leave a quarter or more of its lanes masked. ValueError
    for anything but an int >= 1.
    """
    if type(n_cols) is not int or n_cols < 1:
        raise ValueError(f"n_cols must be an int >= 1, got {n_cols!r}")
    first = 1 << (n_cols.bit_length() - 1)
    rest = n_cols - first
    if rest == 0:
        return first, 0
    tail = triton.next_power_of_2(rest)
    return (first, tail) if 2 * tail <= first else (2 * first, 0)


def _wider_split(cfg: BackwardConfig) -> BackwardConfig:
    # Twice the columns and warps, half the programs per SM (at least 1): a row over half the programs.
    return dataclasses.replace(cfg, block_n=2 * cfg.block_n, num_warps=2 * cfg.num_warps,
                               programs_per_sm=max(1, cfg.programs_per_sm // 2))


def backward_config(n_cols: int, elem_bytes: int, max_splits: int, settings: Settings = HOPPER) -> BackwardConfig:
    """Backward launch settings for rows of ``n_cols`` elements (n_cols >= 1) of ``elem_bytes`` bytes (2 or 4).

    ``max_splits`` as for :func:`forward_config`: 1 in the interpreter,
    which therefore never takes the split path. ValueError for any other
    arguments.
    """
    try:
        return _backward_config(n_cols, elem_bytes, max_splits, settings)
    except TypeError:  # an unhashable argument: the cache refuses it before the checks can name it
        check_rule_args(n_cols, elem_bytes, max_splits)
        check_settings_arg(settings)
        raise


@functools.lru_cache(maxsize=1024, typed=True)
def _backward_config(n_cols: int, elem_bytes: int, max_splits: int, settings: Settings) -> BackwardConfig:
    check_rule_args(n_cols, elem_bytes, max_splits)
    check_settings_arg(settings)
    b = settings.backward
    row_bytes = n_cols * elem_bytes
    if row_bytes <= b.narrow_row_bytes:
        block_n = triton.next_power_of_2(n_cols)
        return BackwardConfig("rows", max(1, b.narrow_tile_bytes // (block_n * elem_bytes)), block_n, b.min_warps,
                              b.narrow_programs_per_sm, b.min_warps)
    block_n, tail_n = row_pieces(n_cols)
    tile_bytes = (block_n + tail_n) * elem_bytes
    if tile_bytes > b.max_tile_bytes and max_splits > 1:
        cfg = b.split_2byte if elem_bytes == 2 else b.split_4byte
        # More programs a row widen the exchange's slot tile: past 16 the
        # 2-byte setting's 4 programs per SM no longer fit in registers, and
        # wider tiles with the exchange behind do better
        # (docs/tuning.md#backward-split-path).
        if elem_bytes == 2 and triton.cdiv(n_cols, cfg.block_n) > b.split_2byte_max_programs:
            cfg = b.split_2byte_wide
            # Twice its columns and warps (half the programs per SM) where
            # that brings a row back within split_2byte_max_programs; rows
            # that would still need more keep it (docs/tuning.md#the-wider-tile).
            if triton.cdiv(n_cols, cfg.block_n) > b.split_2byte_max_programs >= triton.cdiv(n_cols, 2 * cfg.block_n):
                cfg = _wider_split(cfg)
        # Where a row would need more programs than may wait at once, the
        # columns and warps double and the programs per SM halve.
        while triton.cdiv(n_cols, cfg.block_n) > max_splits and cfg.num_warps < MAX_WARPS:
            cfg = _wider_split(cfg)
        if triton.cdiv(n_cols, cfg.block_n) <= max_splits:
            return cfg
    if block_n + tail_n > b.max_tile_n:
        return b.columns
    # Rows in flight per SM by their bytes; as many threads as the registers
    # hold with those rows without spilling (docs/tuning.md#backward-whole-rows).
    rows_per_sm = min(b.max_rows_per_sm, pow2_at_most(b.row_bytes_per_sm // row_bytes))
    threads = b.threads_per_sm if rows_per_sm * tile_bytes <= b.resident_tile_bytes else b.wide_threads_per_sm
    per_sm = min(rows_per_sm, threads // (32 * b.min_warps))
    warps = threads // (32 * per_sm)
    wait_warps = triton.next_power_of_2(block_n + tail_n) // b.wait_cols_per_warp
    return BackwardConfig("rows", rows_per_sm // per_sm, block_n, warps, per_sm,
                          max(b.min_warps, min(warps, wait_warps)), tail_n)


def backward_candidates(n_cols: int, elem_bytes: int, max_splits: int,
                        settings: Settings = HOPPER) -> list[BackwardConfig]:
    """What ``tools/kernel/tune_backward.py`` sweeps: the rule's choice first, then a grid around it.

    Whole rows up to 16384 wide, as one tile and (where :func:`row_pieces`
    splits it) as two pieces: 1-16 rows, 4-32 warps, 1-4 or 8 programs per
    SM (tiles of at most 16384 elements, at least two per thread). Wider
    than 2048: the columns and split paths with 1-8 rows of 1024-4096
    columns (at most 8192 elements), 4 or 8 warps, 2 or 4 programs per SM;
    the split path's with its exchange in each row block and behind.
    """
    rule = backward_config(n_cols, elem_bytes, max_splits, settings)
    out = [rule]
    pow2 = triton.next_power_of_2(n_cols)
    for block_n, tail_n in dict.fromkeys([(pow2, 0), row_pieces(n_cols)]):
        tile = block_n + tail_n
        if tile > 16384:
            continue
        for bm, w, per_sm in itertools.product([1, 2, 4, 8, 16], [4, 8, 16, 32], [1, 2, 3, 4, 8]):
            if bm * tile <= 16384 and 32 * w <= bm * tile // 2 and (w < 32 or tile >= 8192):
                out.append(BackwardConfig("rows", bm, block_n, w, per_sm, tail_n=tail_n))
    if n_cols > 2048:
        for bm, bn, w, per_sm in itertools.product([1, 2, 4, 8], [1024, 2048, 4096], [4, 8], [2, 4]):
            if bm * bn <= 8192:
                out.append(BackwardConfig("columns", bm, bn, w, per_sm))
                if 2 <= triton.cdiv(n_cols, bn) <= max_splits:  # one program a row is the rows path
                    out += [BackwardConfig("split", bm, bn, w, per_sm, exchange_behind=b) for b in (False, True)]
    return list(dict.fromkeys(out))


def backward_neighbours(n_cols: int, elem_bytes: int, max_splits: int,
                        settings: Settings = HOPPER) -> list[BackwardConfig]:
    """What ``tune_backward.py --around-rule`` sweeps: the rule's choice first, then its tile at 1, 2 or 4 rows
    per SM held by 256, 512 or 1024 threads per SM, in every arrangement of 4-, 8- or 16-warp programs.

    The grid of docs/tuning.md#backward-whole-rows' table. Only the rule's
    choice where it is not the rows path. Arguments and ValueError as for :func:`backward_config`.
    """
    rule = backward_config(n_cols, elem_bytes, max_splits, settings)
    out = [rule]
    if rule.path == "rows":
        for rows_per_sm, threads, per_sm in itertools.product([1, 2, 4], [256, 512, 1024], [1, 2, 4]):
            warps = threads // (32 * per_sm)
            if rows_per_sm % per_sm == 0 and warps in (4, 8, 16):
                out.append(dataclasses.replace(rule, block_m=rows_per_sm // per_sm, num_warps=warps,
                                               programs_per_sm=per_sm))
    return list(dict.fromkeys(out))


def dw_sum_config(n_parts: int, settings: Settings = HOPPER) -> tuple[int, int]:
    """(shares per step, columns per program) for summing ``n_parts`` >= 1 dweight shares.

    ValueError for another ``n_parts``, TypeError for ``settings`` that are not a :class:`Settings`.
    """
    if type(n_parts) is not int or n_parts < 1:
        raise ValueError(f"n_parts must be an int >= 1, got {n_parts!r}")
    check_settings_arg(settings)
    b = settings.backward
    block_p = min(b.dw_sum_max_p, 1 << (n_parts - 1).bit_length())
    return block_p, max(b.dw_sum_min_cols, b.dw_sum_tile_elems // block_p)

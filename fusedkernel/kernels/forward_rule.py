"""The forward rule: a launch for rows of hidden size N from the architecture's settings.

Forward paths:

* ``rows`` -- a program holds a [block_m, block_n] tile of rows in registers.
  While a row holds at most ``max_tile_bytes`` the tile spans whole rows
  (splits = 1); wider rows, decode rows over ``few_rows_split_min_bytes``
  with enough bytes for each row of the launch (``few_rows_split_bytes_per_row``
  and, in fp32, ``few_rows_split_light_bytes_per_row`` past that minimum, or
  writing y only past ``few_rows_split_y_only_light_min_bytes``), a lone
  bf16 row over ``few_rows_split_lone_min_cols`` with the residual stored, and
  2-byte rows of 16385-32768 at 2-8 rows an SM (the decode split's tiles), are
  split over ``splits`` adjacent programs that exchange partial sums
  of squares and wait for each other (GPU only: the interpreter runs programs
  one after another, so a waiting program would wait forever). Either way x
  and residual are read once and y written once.
* ``looped`` -- one program per row loops over the row twice. Correct for
  every N; for wide rows in the interpreter, and on a GPU for rows that would
  split over more programs than there are SMs.
* ``persistent`` -- whole rows, ``programs_per_sm`` programs per SM each
  walking row blocks and loading the next block before this one's sums. The
  rule takes it for 32 KiB whole-row tiles (one holds an SM alone: bf16 and
  fp16 rows 8193-16384 wide, fp32 4097-8192) at more than 2 and at most 8
  rows per SM (265-1056 rows on 132 SMs), 16 warps a program for rows of at
  most 22 KiB, else 32; and, 2 programs an SM of 16 warps, for fp32 rows of
  2817-4096 written as y only in band launches of at most 512 rows and at
  most 4 an SM that hold more than 32 KiB an SM (the same launches with the
  residual stored, and rows of 2049-2816, take the rows path on 16 warps).

The search space ``tools/kernel/tune_forward.py`` sweeps sits beside the
rule (:func:`forward_candidates`).
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
from collections.abc import Callable

import triton

from .config import (HOPPER, MAX_WARPS, WEIGHT_LOADS, ForwardConfig, ForwardSettings, Settings, check_rule_args,
                     check_settings_arg, pow2_at_most)


def forward_config(n_cols: int, elem_bytes: int, max_splits: int, settings: Settings = HOPPER,
                   n_rows: int | None = None, stores_residual: bool = True, fp16: bool = False) -> ForwardConfig:
    """Launch settings for rows of ``n_cols`` elements (n_cols >= 1) of ``elem_bytes`` bytes (2 or 4).

    ``max_splits``: the most programs a row may be split over, which all
    wait for each other: 1 under TRITON_INTERPRET=1 (it runs programs one
    by one), the SM count on a GPU (a row group of at most that many is
    resident at once once the groups before it are done). Wider rows take
    the looped path. ``n_rows``: rows of the launch (None: many). At most
    ``max_splits`` rows are few (a decode step: one program per row, each
    alone on its SM). ``stores_residual``: the launch also writes x +
    residual (the inference call, forward+residual), not only y. ``fp16``:
    the elements are float16 (elem_bytes 2), whose decode rows take warps of
    their own. ValueError for any other arguments.
    """
    # Checked before the cache, which would refuse an unhashable one with a TypeError naming no argument.
    if type(stores_residual) is not bool or type(fp16) is not bool or type(settings) is not Settings:
        check_settings_arg(settings)
        name, value = ("stores_residual", stores_residual) if type(stores_residual) is not bool else ("fp16", fp16)
        raise ValueError(f"{name} must be a bool, got {value!r}")
    # The choice depends on the row count only through its class: cached on
    # that, every prefill length after the first hits the cache.
    rows = _row_class(n_rows, n_cols, elem_bytes, max_splits, settings, stores_residual, fp16)
    try:
        return _forward_config(n_cols, elem_bytes, max_splits, settings, rows, stores_residual, fp16)
    except TypeError:  # an unhashable argument: the cache refuses it before the checks can name it
        check_rule_args(n_cols, elem_bytes, max_splits)
        raise


def _row_class(n_rows: int | None, n_cols: int, elem_bytes: int, max_splits: int, settings: Settings,
               stores_residual: bool = True, fp16: bool = False) -> str:
    # "few" (at most max_splits rows), "few_split" (few rows, each at least few_rows_split_bytes_per_row bytes
    # for each row of the launch, and in a light row few_rows_split_light_bytes_per_row past
    # few_rows_split_min_bytes, y only its few_rows_split_bytes_per_row past
    # few_rows_split_y_only_light_min_bytes: _decode_split's),
    # "few_split_sparse" (as few_split, with at least
    # few_rows_split_sms_per_program SMs for each program), "few_split_row" (as few_split, with more than
    # few_rows_split_programs_per_sm programs an SM: one row a program, the same tile where one row
    # fills it), "few_split_lone" (as few_split, one row, and a lone row over few_rows_split_lone_min_cols with
    # the residual stored, not fp16: _lone_split's pieces), "few_sparse" (few, with at
    # least few_rows_sparse_sms_per_row SMs a row), "few_dense" (few, rows of more than few_rows_dense_bytes
    # in all, few_rows_narrow_dense_bytes in tiles up to few_rows_max_tile), "under_band" (more than few,
    # at most persistent_min_rows_per_sm an SM), "band_warm" (band rows of fp32 tiles of twice band_tile_bytes, at
    # most warm_max_rows and band_warm_max_rows_per_sm an SM, holding more than band_warm_bytes_per_sm an SM),
    # "band" (the persistent grid's row counts) or "many" (more, or None).
    if n_rows is None:
        return "many"
    if type(n_rows) is not int or n_rows < 0:
        raise ValueError(f"n_rows must be None or an int >= 0, got {n_rows!r}")
    if type(max_splits) is not int:  # _forward_config refuses it
        return "many"
    f = settings.forward
    if n_rows <= max_splits:
        # Only rows past few_rows_split_lone_min_cols or few_rows_split_min_bytes may split: the common
        # widths skip the call (host time: the launch asks on every decode call).
        ints = type(n_cols) is int and type(elem_bytes) is int  # else _forward_config refuses them
        if (ints and elem_bytes in (2, 4)
                and (n_cols > f.few_rows_split_lone_min_cols or n_cols * elem_bytes > f.few_rows_split_min_bytes)):
            split = _decode_split_class(n_rows, n_cols, elem_bytes, max_splits, f, stores_residual, fp16)
            if split:
                return split
        if n_rows * f.few_rows_sparse_sms_per_row <= max_splits:
            return "few_sparse"
        # Tiles up to few_rows_max_tile are dense from fewer bytes
        # (docs/tuning.md#forward-decode-weight-before-the-sums).
        dense = f.few_rows_narrow_dense_bytes if ints and n_cols <= f.few_rows_max_tile else f.few_rows_dense_bytes
        return "few_dense" if ints and n_rows * n_cols * elem_bytes > dense else "few"
    if n_rows <= f.persistent_min_rows_per_sm * max_splits:
        return "under_band"
    if not _in_band(n_rows, max_splits, f):
        return "many"
    # Plain ints, the dtype first: the launch asks on every call (host time).
    if (elem_bytes == 4 and type(n_cols) is int and f.band_tile_bytes < n_cols * 4 <= 2 * f.band_tile_bytes
            and n_rows <= min(f.warm_max_rows, f.band_warm_max_rows_per_sm * max_splits)
            and n_rows * n_cols * 4 > f.band_warm_bytes_per_sm * max_splits):
        return "band_warm"
    return "band"


def _in_band(n_rows: int, max_splits: int, f: ForwardSettings) -> bool:
    # The persistent grid's row counts: more than persistent_min_rows_per_sm and at most
    # persistent_max_rows_per_sm an SM (never decode rows: those are at most one an SM).
    return f.persistent_min_rows_per_sm * max_splits < n_rows <= f.persistent_max_rows_per_sm * max_splits


def band_wave_config(cfg: ForwardConfig, n_rows: int, max_splits: int, settings: Settings,
                     resident: Callable[[ForwardConfig], int]) -> ForwardConfig:
    """``cfg`` (:func:`forward_config`'s for ``n_rows`` rows), or a launch of fewer programs' waves.

    At 2-8 rows an SM, past one wave of ``cfg``'s whole-row programs
    (``resident(cfg)`` an SM on ``max_splits`` SMs), the same tile on half
    the warps (at least ``min_warps``) with the weight loaded before the
    sums, which holds fewer registers a thread, reads faster where one wave
    of it holds every row (docs/tuning.md#forward-band-waves).
    ``resident(c)``: programs of launch ``c`` that one SM holds, by its
    compiled kernel's registers (the GPU's driver knows them; the
    interpreter has none, so it keeps ``cfg``).
    """
    f = settings.forward
    if (cfg.path != "rows" or cfg.splits != 1 or cfg.num_warps // 2 < f.min_warps
            or not _in_band(n_rows, max_splits, f) or n_rows <= resident(cfg) * max_splits):
        return cfg
    fewer = dataclasses.replace(cfg, num_warps=cfg.num_warps // 2, weight_load="before_sum")
    return fewer if n_rows <= resident(fewer) * max_splits else cfg


def _decode_split_class(n_rows: int, n_cols: int, elem_bytes: int, max_splits: int, f: ForwardSettings,
                        stores_residual: bool, fp16: bool) -> str | None:
    # _row_class's split classes of a decode launch (1 <= n_rows <= max_splits), None where rows stay whole.
    row_bytes = n_cols * elem_bytes
    if row_bytes <= f.few_rows_split_min_bytes:
        # A lone row held whole waits on its threads' chains of elements, not only on its bytes: with the
        # residual stored, long ones split; fp16's whole row takes more warps and holds its own
        # (docs/tuning.md#forward-decode-split-rows).
        lone = n_rows == 1 and stores_residual and not fp16 and n_cols > f.few_rows_split_lone_min_cols
        pieces = _lone_split(n_cols, elem_bytes, max_splits, f)[2] if lone else 1
        return "few_split_lone" if 1 < pieces <= max_splits else None
    # A whole row streams through one SM (time grows with its bytes); the split grid's time grows with
    # the rows (docs/tuning.md#forward-decode-split-rows).
    block_m, _, splits = _decode_split(n_cols, elem_bytes, f, "rows")
    fits = 0 < n_rows * f.few_rows_split_bytes_per_row <= row_bytes
    if _light(triton.next_power_of_2(n_cols), f):
        # A whole row whose threads hold fewer elements costs less: the split's exchange is paid for by
        # the row's bytes past few_rows_split_min_bytes only, and without the residual's store (a lighter
        # row still) past few_rows_split_y_only_light_min_bytes.
        if stores_residual:
            fits = fits and n_rows * f.few_rows_split_light_bytes_per_row <= row_bytes - f.few_rows_split_min_bytes
        else:
            past = row_bytes - f.few_rows_split_y_only_light_min_bytes
            fits = fits and n_rows * f.few_rows_split_bytes_per_row <= past
    if splits > max_splits or not fits:
        return None
    if n_rows == 1:
        return "few_split_lone"
    # Past a few programs an SM, groups of rows over many programs wait the longest; a sparse grid leaves
    # each program its SM, and more warps keep more loads in flight.
    programs = -(-n_rows // block_m) * splits
    if (programs > f.few_rows_split_programs_per_sm * max_splits
            and _decode_split(n_cols, elem_bytes, f, "row")[2] <= max_splits):
        return "few_split_row"
    return "few_split_sparse" if programs * f.few_rows_split_sms_per_program <= max_splits else "few_split"


_SPLIT = ("few_split", "few_split_sparse", "few_split_row", "few_split_lone")  # _row_class's decode split classes
_FEW = ("few", "few_sparse", "few_dense", *_SPLIT)


# typed: 16384.0 must not hit 16384's entry and skip the argument checks.
@functools.lru_cache(maxsize=1024, typed=True)
def _forward_config(n_cols: int, elem_bytes: int, max_splits: int, settings: Settings, rows: str,
                    stores_residual: bool, fp16: bool = False) -> ForwardConfig:
    # rows: _row_class's.
    check_rule_args(n_cols, elem_bytes, max_splits)
    if fp16 and elem_bytes != 2:
        raise ValueError(f"fp16 elements are 2 bytes, got elem_bytes={elem_bytes}")
    f = settings.forward
    few_rows = rows in _FEW
    if n_cols * elem_bytes <= f.max_tile_bytes:
        # A whole row that needs max_thread_elems a thread at max_warps (not _light: 2-byte rows of 16385-32768)
        # is one long program an SM; split over the decode split's tiles where they fit the SMs, the band's
        # rows keep more programs in flight (docs/tuning.md#forward-band-split).
        whole_n = triton.next_power_of_2(n_cols)
        band_split = (rows == "band" and not _light(whole_n, f)
                      and _decode_split(n_cols, elem_bytes, f, "rows")[2] <= max_splits)
        if rows in _SPLIT or band_split:
            if rows == "few_split_lone":
                block_m, block_n, splits = _lone_split(n_cols, elem_bytes, max_splits, f)
            else:
                tile = "row" if rows == "few_split_row" else "rows"
                block_m, block_n, splits = _decode_split(n_cols, elem_bytes, f, tile)
            fewest = f.min_warps if rows in ("few_split_sparse", "few_split_lone") or band_split else 1
            warps = min(f.max_warps, max(fewest, block_m * block_n // (32 * f.max_thread_elems)))
            return ForwardConfig("rows", block_m, block_n, splits, warps, "before_sum")
        block_n = whole_n
        block_m = 1 if few_rows else max(1, f.narrow_tile_elems // block_n)
        if rows == "band_warm":
            # Decode-sized launches whose rows are in L2 (an engine replays them in CUDA graphs) read faster on
            # more warps; writing y only, rows that fill most of the tile on the persistent grid, which loads
            # the next rows before this one's sums (docs/tuning.md#forward-band-waves).
            warps = _clamp_warps(f.band_warm_warps, f)
            if stores_residual or n_cols * elem_bytes <= f.band_warm_narrow_row_bytes:
                return ForwardConfig("rows", block_m, block_n, 1, warps, "first")
            return ForwardConfig("persistent", block_m, block_n, 1, warps, "first", f.band_warm_programs_per_sm)
        if block_n * elem_bytes == f.persistent_tile_bytes and rows == "band":
            # A row filling at most 11/16 of the tile reads within 3% of the best on half the warps, often
            # ahead (docs/tuning.md#forward-persistent-grid).
            warps = f.max_warps
            if n_cols * elem_bytes <= f.persistent_narrow_row_bytes:
                warps = _tile_warps(block_n, f.persistent_narrow_warps, f)
            return ForwardConfig("persistent", block_m, block_n, 1, warps, "first", 1)
        if (few_rows and not stores_residual and not fp16 and _light(block_n, f)
                and block_n * elem_bytes > f.few_rows_y_only_wide_min_bytes):
            # A decode row is a chain of latencies: fewer warps meet at a cheaper reduction, and each keeps
            # more loads in flight. fp16's conversions cost a thread instructions for each element: it keeps
            # the decode rule's warps (docs/tuning.md#forward-sparse-decode-warps).
            if elem_bytes == 2 and n_cols > f.few_rows_y_only_bf16_min_cols:
                warps = _clamp_warps(f.few_rows_y_only_bf16_warps, f)
                return ForwardConfig("rows", 1, block_n, 1, warps, "before_sum")
            if elem_bytes == 4 or rows == "few_sparse":
                return ForwardConfig("rows", 1, block_n, 1, _clamp_warps(f.few_rows_y_only_wide_warps, f), "first")
        if rows == "few_sparse" and stores_residual and block_n > f.few_rows_thread_max_tile:
            # A row alone on its SM likewise, with the residual stored; fp16 with more warps.
            per_warp = f.few_rows_sparse_fp16_bytes_per_warp if fp16 else f.few_rows_sparse_bytes_per_warp
            warps = pow2_at_most(block_n * elem_bytes // per_warp)
            return ForwardConfig("rows", 1, block_n, 1, _clamp_warps(warps, f), "first")
        warps = pow2_at_most(n_cols * elem_bytes // f.bytes_per_warp)
        if few_rows:
            boosted = f.few_rows_max_tile if stores_residual else f.few_rows_y_only_max_tile
            if block_n <= boosted:
                warps *= f.few_rows_warps
            elif stores_residual and block_n <= f.few_rows_thread_max_tile:
                warps = f.min_warps  # raised to max_thread_elems' floor below
                # Wide 2-byte rows, and fp32 rows of a launch of many bytes, read faster on more warps
                # (docs/tuning.md#forward-decode-weight-before-the-sums); fp32 with the weight first.
                if elem_bytes == 2 and n_cols * elem_bytes > f.few_rows_thread_wide_row_bytes:
                    warps = f.few_rows_thread_wide_warps
                elif elem_bytes == 4 and rows == "few_dense":
                    warps = _tile_warps(block_n, f.few_rows_thread_wide_warps, f)
                    return ForwardConfig("rows", block_m, block_n, 1, warps, "first")
            else:
                warps = f.max_warps
        elif rows == "band" and (block_n * elem_bytes == f.band_tile_bytes
                                 or elem_bytes == 4 and block_n * elem_bytes == 2 * f.band_tile_bytes):
            # 2-8 rows an SM: more warps a row keep more of its loads in flight (docs/tuning.md#forward-warps),
            # fp32's wider tiles as many (docs/tuning.md#forward-band-waves).
            warps = max(warps, f.band_warps)
        elif rows == "many" and stores_residual and block_n * elem_bytes == f.band_tile_bytes:
            # Past the band likewise while a thread holds many_rows_thread_elems: 2-byte rows on 8 warps, fp32
            # on 4; y alone reads as fast on the bytes' warps (docs/tuning.md#forward-warps).
            warps = max(warps, block_n // (32 * f.many_rows_thread_elems))
        warps = _tile_warps(block_n, warps, f)
        # fp16's light decode tiles past few_rows_thread_max_tile read faster with the weight first
        # (docs/tuning.md#forward-decode-weight-before-the-sums).
        fp16_first = fp16 and few_rows and block_n > f.few_rows_thread_max_tile and _light(block_n, f)
        # Dense decode launches of tiles up to few_rows_max_tile load it first too
        # (docs/tuning.md#forward-decode-weight-before-the-sums).
        first = (block_n * elem_bytes <= f.few_rows_weight_first_max_bytes
                 or (rows == "few_dense" and block_n <= f.few_rows_max_tile) if few_rows
                 else block_n <= f.weight_first_max_n)
        if first or not stores_residual or fp16_first:
            return ForwardConfig("rows", block_m, block_n, 1, warps, "first")
        # Wider decode tiles, and tiles that hold an SM alone, load the weight once their rows are in;
        # other many-row tiles wait for rstd.
        late = few_rows or block_n * elem_bytes > f.after_sum_max_tile_bytes
        return ForwardConfig("rows", block_m, block_n, 1, warps, "before_sum" if late else "after_sum")
    # Their own warps, within the settings' limits as every other launch's.
    splits = triton.cdiv(n_cols, f.split.block_n)
    if splits > max_splits:
        return dataclasses.replace(f.looped, num_warps=_clamp_warps(f.looped.num_warps, f))
    return dataclasses.replace(f.split, splits=splits, num_warps=_clamp_warps(f.split.num_warps, f))


def _clamp_warps(warps: int, f: ForwardSettings) -> int:
    return min(f.max_warps, max(f.min_warps, warps))


def _tile_warps(block_n: int, warps: int, f: ForwardSettings) -> int:
    # warps, raised so that no thread holds more than max_thread_elems of a whole-row tile, within the limits.
    return _clamp_warps(max(block_n // (32 * f.max_thread_elems), warps), f)


def _light(block_n: int, f: ForwardSettings) -> bool:
    # A whole-row tile whose threads hold fewer than max_thread_elems at max_warps (at most 16384 elements).
    return block_n < 32 * f.max_warps * f.max_thread_elems


def _decode_split(n_cols: int, elem_bytes: int, f: ForwardSettings, tile: str) -> tuple[int, int, int]:
    # (block_m, block_n, splits) of a decode row over programs (one program a row would leave its bytes to
    # one SM): tile "rows", split's columns and as many rows as the tile's bytes hold; "row", one row of
    # them; "half", two rows of half of them. Plain ints: the launch asks on every decode call (host time).
    elems = f.few_rows_split_tile_bytes // elem_bytes
    if tile == "rows":
        block_m, block_n = max(1, elems // f.split.block_n), f.split.block_n
    else:
        block_m, block_n = (1, elems) if tile == "row" else (2, max(1, elems // 2))
    return block_m, block_n, -(-n_cols // block_n)


def _lone_split(n_cols: int, elem_bytes: int, max_splits: int, f: ForwardSettings) -> tuple[int, int, int]:
    # A lone row's pieces: half the tile's bytes each, in a two-row tile (its second row empty), while the
    # row has at most few_rows_split_lone_max_pieces of them; past that, the tile's bytes each, unless a
    # tile narrower than split's columns (other settings) would outnumber the SMs: then split's columns.
    half = _decode_split(n_cols, elem_bytes, f, "half")
    if half[2] <= min(f.few_rows_split_lone_max_pieces, max_splits):
        # A row within few_rows_split_min_bytes reads faster in one-row pieces
        # (docs/tuning.md#forward-decode-split-rows).
        return (1, *half[1:]) if n_cols * elem_bytes <= f.few_rows_split_min_bytes else half
    row = _decode_split(n_cols, elem_bytes, f, "row")
    return row if row[2] <= max_splits else _decode_split(n_cols, elem_bytes, f, "rows")


def forward_candidates(n_cols: int, elem_bytes: int, max_splits: int, settings: Settings = HOPPER,
                       n_rows: int | None = None, stores_residual: bool = True,
                       fp16: bool = False) -> list[ForwardConfig]:
    """What ``tools/kernel/tune_forward.py`` sweeps: the rule's choice first, then a grid around it.

    Whole rows: the many-rows rule's tile (where the rule is persistent)
    with each weight load, then 1, 2 or 4 rows per program (tiles of at
    most 16384 elements) x 4-32 warps x each weight load.
    Rows 16384 or wider, or over 32 KiB: every split of 1-4 rows by
    1024-4096 columns with 2-8 warps that keeps a program's tile at most
    8192 elements and at least 128 columns per warp, the weight loaded
    before or after the sums. Whole-row tiles of 4096 or more (rows over
    2048 wide), not few: the persistent path with the many-rows tile at its
    warps, twice them and 32, 1 or 2 programs per SM
    (docs/tuning.md#forward-persistent-grid).
    """
    rule = forward_config(n_cols, elem_bytes, max_splits, settings, n_rows, stores_residual, fp16)
    few_rows = _row_class(n_rows, n_cols, elem_bytes, max_splits, settings, stores_residual, fp16) in _FEW
    # The whole-row tiles around the rule, which may be the persistent path's.
    rows = _forward_config(n_cols, elem_bytes, max_splits, settings, "few" if few_rows else "many", stores_residual,
                           fp16)
    out = [rule]
    if rows.splits == 1 and rows.path == "rows":
        out += [dataclasses.replace(rows, weight_load=load) for load in WEIGHT_LOADS]
        for bm, w, load in itertools.product([1, 2, 4], [4, 8, 16, 32], WEIGHT_LOADS):
            if bm * rows.block_n <= 16384 and 32 * w <= bm * rows.block_n:
                out.append(ForwardConfig("rows", bm, rows.block_n, 1, w, load))
        if rows.block_n >= 4096 and not few_rows:
            for w, per_sm in itertools.product([rows.num_warps, 2 * rows.num_warps, MAX_WARPS], [1, 2]):
                if w <= MAX_WARPS:
                    out.append(ForwardConfig("persistent", rows.block_m, rows.block_n, 1, w, "first", per_sm))
    if n_cols >= 16384 or n_cols * elem_bytes > settings.forward.few_rows_split_min_bytes:
        for bm, bn, w, load in itertools.product([1, 2, 4], [1024, 2048, 4096], [2, 4, 8], WEIGHT_LOADS[1:]):
            splits = triton.cdiv(n_cols, bn)
            if bm * bn <= 8192 and bn >= 128 * w and splits <= max_splits:
                out.append(ForwardConfig("rows", bm, bn, splits, w, load))
    return list(dict.fromkeys(out))

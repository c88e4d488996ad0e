"""Launch settings: the one place they are chosen, as data per GPU architecture.

A rule of hidden size N and element size picks each launch; the numbers the
rules use are one frozen :class:`Settings` per architecture (``SETTINGS``),
each field with one line of why pointing at its section of
``docs/tuning.md``. They were measured on Hopper (the H200). Other GPUs, and
Triton's interpreter, use Hopper's settings: the stated fallback, unmeasured
there (:func:`settings_for`). The search space the tuners sweep sits beside
each rule (:func:`forward_candidates`, :func:`backward_candidates`).

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
  most 22 KiB, else 32.

Backward paths: ``rows`` (whole rows, persistent grid), ``split`` (rows split
over programs that exchange partial dot products) and ``columns`` (a pass for
each row's dot product, then column chunks).
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
from collections.abc import Callable
from dataclasses import dataclass

import triton

# Triton's limits: a tensor of at most 2**20 elements, a program of at most 32 warps.
MAX_TILE_ELEMS = 2**20
MAX_WARPS = 32
# ForwardConfig.weight_load's values, in the order the rows kernel's WEIGHT_AT numbers them.
WEIGHT_LOADS = ("first", "before_sum", "after_sum")


def _check_settings(cfg, paths: tuple[str, ...], powers_of_two: tuple[str, ...], positive: tuple[str, ...]) -> None:
    # Settings come from tests and the tuners too: a bad one must fail here,
    # not launch a kernel that skips columns or fails inside Triton.
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


@dataclass(frozen=True)
class ForwardConfig:
    """How one forward launch is shaped.

    path: "rows", "looped" or "persistent". block_m: rows per program (per
    step on the persistent path). block_n: columns a program holds at once.
    splits: programs per row group (1: whole rows). num_warps: warps per
    program. weight_load: when the rows path loads the weight ("first":
    with the rows; "before_sum": once the rows are loaded (and x + residual
    stored), before the row sums; "after_sum": once rstd is known).
    programs_per_sm: the persistent path's grid, per SM (0 on the other
    paths, whose grid is one program per row group).
    """

    path: str
    block_m: int
    block_n: int
    splits: int
    num_warps: int
    weight_load: str = "after_sum"
    programs_per_sm: int = 0

    @functools.cached_property
    def weight_at(self) -> int:
        """``weight_load`` as the rows kernel's WEIGHT_AT constexpr (its index in WEIGHT_LOADS)."""
        # Cached: launches read it on every call (host time).
        return WEIGHT_LOADS.index(self.weight_load)

    def __post_init__(self) -> None:
        _check_settings(self, ("rows", "looped", "persistent"), ("block_m", "block_n", "num_warps"), ("splits",))
        if type(self.weight_load) is not str:
            raise TypeError(f"ForwardConfig.weight_load must be a str, got {type(self.weight_load).__name__} "
                            f"{self.weight_load!r}")
        if self.weight_load not in WEIGHT_LOADS:
            raise ValueError(f"ForwardConfig.weight_load must be one of {WEIGHT_LOADS}, got {self.weight_load!r}")
        if type(self.programs_per_sm) is not int:
            raise TypeError(f"ForwardConfig.programs_per_sm must be an int, got "
                            f"{type(self.programs_per_sm).__name__} {self.programs_per_sm!r}")
        if self.path == "persistent" and (self.splits != 1 or self.programs_per_sm < 1 or self.weight_load != "first"):
            raise ValueError(f"ForwardConfig: the persistent path holds whole rows (splits=1) on programs_per_sm >= 1 "
                             f"programs per SM and loads the weight once, first (weight_load='first'), got "
                             f"splits={self.splits}, programs_per_sm={self.programs_per_sm}, "
                             f"weight_load={self.weight_load!r}")
        if self.path == "looped" and self.weight_load != "after_sum":
            raise ValueError(f"ForwardConfig: the looped path loads the weight in its second pass over the row "
                             f"(weight_load='after_sum'), got weight_load={self.weight_load!r}")
        if self.path != "persistent" and self.programs_per_sm:
            raise ValueError(f"ForwardConfig.programs_per_sm is for the persistent path (0 on the {self.path} path), "
                             f"got {self.programs_per_sm}")


@dataclass(frozen=True)
class BackwardConfig:
    """How one backward launch is shaped.

    path: "rows" (block_m whole rows per step, a persistent grid over row
    blocks), "split" (rows split over programs that exchange their partial
    dot products, persistent over row blocks) or "columns" (block_m rows by
    block_n columns per step: a pass over the rows for each row's dot
    product, then a grid of column chunks by row groups writing dx).
    num_warps: warps per program. programs_per_sm: the grid's size, per SM.
    exchange_behind: the split path waits for a row block's dot products one
    row block later (three row blocks in registers, not two). wait_warps:
    warps per program when the rows grid has at most one program
    per SM and waits for itself to sum dweight in the same launch (0:
    num_warps). tail_n: the rows path holds a row as two pieces, block_n
    columns and then tail_n more (0: one piece; else a power of two below
    block_n).
    """

    path: str
    block_m: int
    block_n: int
    num_warps: int
    programs_per_sm: int
    wait_warps: int = 0
    tail_n: int = 0
    exchange_behind: bool = False

    def __post_init__(self) -> None:
        _check_settings(self, ("rows", "columns", "split"), ("block_m", "block_n", "num_warps"), ("programs_per_sm",))
        if type(self.exchange_behind) is not bool:
            raise TypeError(f"BackwardConfig.exchange_behind must be a bool, got {self.exchange_behind!r}")
        if self.exchange_behind and self.path != "split":
            raise ValueError(f"BackwardConfig.exchange_behind is for the split path, got the {self.path} path")
        if type(self.tail_n) is not int:
            raise TypeError(f"BackwardConfig.tail_n must be an int, got {type(self.tail_n).__name__} {self.tail_n!r}")
        if self.tail_n and (self.path != "rows" or self.tail_n < 0 or self.tail_n & (self.tail_n - 1)
                            or self.tail_n >= self.block_n):
            raise ValueError(f"BackwardConfig.tail_n must be 0, or on the rows path a power of two below block_n "
                             f"({self.block_n}), got {self.tail_n} on the {self.path} path")
        if type(self.wait_warps) is not int:
            raise TypeError(f"BackwardConfig.wait_warps must be an int, got {type(self.wait_warps).__name__} "
                            f"{self.wait_warps!r}")
        if self.wait_warps < 0 or self.wait_warps & (self.wait_warps - 1) or self.wait_warps > MAX_WARPS:
            raise ValueError(f"BackwardConfig.wait_warps must be 0 or a power of two <= {MAX_WARPS}, "
                             f"got {self.wait_warps}")


def _check_rule_settings(settings, powers_of_two: tuple[str, ...]) -> None:
    # A rule's numbers: every count a positive int (0 would divide by zero on the first call), the
    # named ones powers of two, warps within Triton's, launch configs of their own type.
    name = type(settings).__name__
    for field in dataclasses.fields(settings):
        value = getattr(settings, field.name)
        if field.type != "int":
            if type(value).__name__ != field.type:
                raise TypeError(f"{name}.{field.name} must be a {field.type}, got {type(value).__name__} {value!r}")
            continue
        if type(value) is not int:
            raise TypeError(f"{name}.{field.name} must be an int, got {type(value).__name__} {value!r}")
        if value < 1 or (field.name in powers_of_two and value & (value - 1)):
            kind = "a power of two >= 1" if field.name in powers_of_two else ">= 1"
            raise ValueError(f"{name}.{field.name} must be {kind}, got {value}")
        if field.name.endswith("warps") and value > MAX_WARPS:
            raise ValueError(f"{name}.{field.name} must be at most {MAX_WARPS}, got {value}")


@dataclass(frozen=True)
class ForwardSettings:
    """The numbers of the forward rule (:func:`forward_config`).

    Raises TypeError or ValueError, naming the field, for a count that is not an int >= 1 (a power
    of two where tiles or warps need one), warps past 32, or a launch config of another type.
    """

    max_tile_bytes: int  # widest row one program holds whole: docs/tuning.md#forward-whole-row-tiles
    narrow_tile_elems: int  # elements per program for narrow rows: docs/tuning.md#forward-narrow-rows
    bytes_per_warp: int  # whole-row warps: one per this many row bytes, a power of two...: docs/tuning.md#forward-warps
    few_rows_warps: int  # ...times this where the grid has a program per SM at most (decode) and...
    few_rows_max_tile: int  # ...tiles of at most this many elements where the residual is stored...
    few_rows_y_only_max_tile: int  # ...or this many where y only; wider decode tiles take max_warps...
    few_rows_thread_max_tile: int  # ...except, with the residual stored, tiles up to this many: min_warps
    # (2-byte rows over...
    few_rows_thread_wide_row_bytes: int  # ...this many bytes, and fp32 rows of a launch of more than...
    few_rows_dense_bytes: int  # ...this many row bytes, the weight first: ...
    few_rows_thread_wide_warps: int  # ...this many: docs/tuning.md#forward-decode-weight-before-the-sums)...
    max_thread_elems: int  # ...and enough that no thread holds more tile elements than this...
    min_warps: int  # ...at least this many...
    max_warps: int  # ...at most this many...
    few_rows_sparse_sms_per_row: int  # ...but decode rows with at least this many SMs each take fewer (their
    # threads hold more): in tiles past few_rows_thread_max_tile with the residual stored, a warp per...
    few_rows_sparse_bytes_per_warp: int  # ...this many tile bytes, a power of two (fp16: one per...
    few_rows_sparse_fp16_bytes_per_warp: int  # ...this many), min_warps to max_warps, the weight first;
    # writing y only, decode tiles over...
    few_rows_y_only_wide_min_bytes: int  # ...this many bytes, light ones (threads holding fewer than
    # max_thread_elems at max_warps), take, in fp32 at any decode row count and bf16 at sparse ones...
    few_rows_y_only_wide_warps: int  # ...this many warps, the weight first, but bf16 rows wider than...
    few_rows_y_only_bf16_min_cols: int  # ...this many elements at any decode row count...
    few_rows_y_only_bf16_warps: int  # ...this many, the weight before the row sums (fp16: the decode rule's):
    # docs/tuning.md#forward-sparse-decode-warps
    weight_first_max_n: int  # whole rows up to this width load the weight first where the residual is stored
    # (decode: up to few_rows_max_tile, wider decode tiles before the row sums but sparse decode's and fp16's
    # light ones first);
    # without that store every whole row does but bf16 decode rows over few_rows_y_only_bf16_min_cols:
    # docs/tuning.md#forward-weight-first,
    # docs/tuning.md#forward-decode-weight-before-the-sums
    after_sum_max_tile_bytes: int  # wider many-row tiles load it after the row sums up to this many bytes;
    # wider ones (one program an SM) before them: docs/tuning.md#forward-whole-row-tiles
    few_rows_split_min_bytes: int  # decode rows wider than this many bytes split over programs of split's
    few_rows_split_tile_bytes: int  # ...columns and as many rows as hold this many bytes, the weight before
    few_rows_split_bytes_per_row: int  # ...the sums, while rows x this many bytes are at most a row's bytes
    few_rows_split_light_bytes_per_row: int  # ...and, where a whole row's threads hold fewer than
    # max_thread_elems at max_warps (fp32), rows x this many are at most its bytes past few_rows_split_min_bytes
    # (more rows hold whole rows), or writing y only, rows x few_rows_split_bytes_per_row its bytes past...
    few_rows_split_y_only_light_min_bytes: int  # ...this many; a thread holds max_thread_elems of the tile,
    # but a program has min_warps...
    few_rows_split_sms_per_program: int  # ...while the grid has at most a program for this many SMs...
    few_rows_split_programs_per_sm: int  # ...and past this many programs an SM a program holds one row of the
    # tile's bytes...
    few_rows_split_lone_max_pieces: int  # ...but a lone row splits into pieces of half the tile's bytes, two
    # rows a tile, while it has at most this many, at min_warps, as does (one row a tile) a lone row of more
    few_rows_split_lone_min_cols: int  # ...than this many elements short of few_rows_split_min_bytes with the
    # residual stored: docs/tuning.md#forward-decode-split-rows
    persistent_tile_bytes: int  # whole-row tiles of this many bytes (one program an SM) with more than...
    persistent_min_rows_per_sm: int  # ...this many rows per SM...
    persistent_max_rows_per_sm: int  # ...and at most this many: the persistent path at max_warps, one
    # program per SM, but rows of at most...
    persistent_narrow_row_bytes: int  # ...this many bytes (the tile partly masked) at...
    persistent_narrow_warps: int  # ...this many: docs/tuning.md#forward-persistent-grid
    band_tile_bytes: int  # at those row counts, whole-row tiles of this many bytes take at least...
    band_warps: int  # ...this many warps: docs/tuning.md#forward-warps (past a wave of a launch's programs at
    # those row counts, half its warps where they hold every row in one: band_wave_config); past them, with
    many_rows_thread_elems: int  # the residual stored, at least the warps that hold this many of such a tile's
    # elements a thread: docs/tuning.md#forward-warps
    split: ForwardConfig  # rows wider than a tile, split over programs: docs/tuning.md#forward-split-rows
    looped: ForwardConfig  # rows split over more programs than SMs: docs/tuning.md#forward-looped-path

    def __post_init__(self) -> None:
        # Tiles and warps meet next_power_of_2 widths and Triton's warp counts.
        _check_rule_settings(self, ("max_tile_bytes", "narrow_tile_elems", "few_rows_warps", "few_rows_max_tile",
                                    "few_rows_y_only_max_tile", "few_rows_thread_max_tile",
                                    "few_rows_thread_wide_warps", "max_thread_elems",
                                    "min_warps", "max_warps", "few_rows_y_only_wide_min_bytes",
                                    "few_rows_y_only_wide_warps", "few_rows_y_only_bf16_warps", "weight_first_max_n",
                                    "after_sum_max_tile_bytes", "few_rows_split_min_bytes", "few_rows_split_tile_bytes",
                                    "persistent_tile_bytes", "persistent_narrow_warps", "band_tile_bytes",
                                    "band_warps", "many_rows_thread_elems"))
        if self.min_warps > self.max_warps:
            raise ValueError(f"ForwardSettings.min_warps must be at most max_warps ({self.max_warps}), "
                             f"got {self.min_warps}")


@dataclass(frozen=True)
class BackwardSettings:
    """The numbers of the backward rule (:func:`backward_config`).

    Raises TypeError or ValueError, naming the field, for a count that is not an int >= 1 (a power
    of two where tiles or warps need one), warps past 32, or a launch config of another type.
    """

    max_tile_n: int  # widest whole-row tile in the interpreter (wider: the columns path)
    max_tile_bytes: int  # widest whole-row tile on a GPU (wider: the split path): docs/tuning.md#backward-whole-rows
    narrow_row_bytes: int  # rows this narrow or narrower: as many a program as fit in...
    narrow_tile_bytes: int  # ...this many bytes, min_warps warps...
    narrow_programs_per_sm: int  # ...and this many programs per SM: docs/tuning.md#backward-whole-rows
    min_warps: int  # the fewest warps of a whole-row program
    row_bytes_per_sm: int  # wider rows: as many rows per SM as fit in this many bytes (a power of two)...
    max_rows_per_sm: int  # ...at most this many...
    resident_tile_bytes: int  # ...held by threads_per_sm threads per SM while their tiles fit in this many bytes...
    threads_per_sm: int
    wide_threads_per_sm: int  # ...else by this many, a program per row while each has min_warps
    wait_cols_per_warp: int  # warps of a grid that waits for itself: docs/tuning.md#backward-decode-waits
    sum_tile_elems: int  # the waiting grid's own dweight sum, shares x columns: docs/tuning.md#backward-in-launch-sum
    columns: BackwardConfig  # rows too wide for a tile, in the interpreter: docs/tuning.md#backward-columns-path
    split_2byte: BackwardConfig  # the split path for bf16/fp16: docs/tuning.md#backward-split-path
    split_4byte: BackwardConfig  # the split path for fp32: docs/tuning.md#backward-split-path
    split_2byte_max_programs: int  # 2-byte rows split_2byte would split over more programs take...
    split_2byte_wide: BackwardConfig  # ...this, doubled where that fits a row in as many: docs/tuning.md#the-wider-tile
    dw_sum_tile_elems: int  # dweight shares summed in tiles of this many: docs/tuning.md#dweight-sum
    dw_sum_max_p: int  # at most this many shares per step: docs/tuning.md#dweight-sum
    dw_sum_min_cols: int  # at least this many columns per program: docs/tuning.md#dweight-sum
    dw_sum_warps: int  # warps of the sum's programs: docs/tuning.md#dweight-sum

    def __post_init__(self) -> None:
        _check_rule_settings(self, ("max_tile_n", "narrow_tile_bytes", "min_warps", "max_rows_per_sm",
                                    "threads_per_sm", "wide_threads_per_sm", "sum_tile_elems", "dw_sum_tile_elems",
                                    "dw_sum_max_p", "dw_sum_warps"))


@dataclass(frozen=True)
class Settings:
    """Every launch setting of one GPU architecture."""

    arch: str
    forward: ForwardSettings
    backward: BackwardSettings

    def __hash__(self) -> int:
        # The rules' caches hash their settings on every call: the generated hash walks every field
        # (~2 us of host time a decode call). Equal settings share an arch, so this agrees with ==.
        return hash(self.arch)


HOPPER = Settings(
    arch="hopper",
    forward=ForwardSettings(
        max_tile_bytes=65536, narrow_tile_elems=2048, bytes_per_warp=1280, few_rows_warps=2, few_rows_max_tile=4096,
        few_rows_y_only_max_tile=8192, few_rows_thread_max_tile=8192, few_rows_thread_wide_row_bytes=12288,
        few_rows_dense_bytes=1572864, few_rows_thread_wide_warps=16, max_thread_elems=32, min_warps=4, max_warps=32,
        few_rows_sparse_sms_per_row=8, few_rows_sparse_bytes_per_warp=8192,
        few_rows_sparse_fp16_bytes_per_warp=2048, few_rows_y_only_wide_min_bytes=16384, few_rows_y_only_wide_warps=8,
        few_rows_y_only_bf16_min_cols=10240, few_rows_y_only_bf16_warps=4,
        weight_first_max_n=8192, after_sum_max_tile_bytes=32768, few_rows_split_min_bytes=32768,
        few_rows_split_tile_bytes=8192, few_rows_split_bytes_per_row=1280, few_rows_split_light_bytes_per_row=384,
        few_rows_split_y_only_light_min_bytes=53248, few_rows_split_sms_per_program=2, few_rows_split_programs_per_sm=2,
        few_rows_split_lone_max_pieces=14, few_rows_split_lone_min_cols=14336, persistent_tile_bytes=32768,
        persistent_min_rows_per_sm=2, persistent_max_rows_per_sm=8, persistent_narrow_row_bytes=22528,
        persistent_narrow_warps=16, band_tile_bytes=8192, band_warps=8, many_rows_thread_elems=16,
        split=ForwardConfig("rows", 2, 2048, 1, 4),
        looped=ForwardConfig("looped", 1, 4096, 1, 8)),
    backward=BackwardSettings(
        max_tile_n=16384, max_tile_bytes=24576, narrow_row_bytes=2048, narrow_tile_bytes=8192,
        narrow_programs_per_sm=2, min_warps=4, row_bytes_per_sm=20480, max_rows_per_sm=4, resident_tile_bytes=16384,
        threads_per_sm=512, wide_threads_per_sm=256, wait_cols_per_warp=1024, sum_tile_elems=4096,
        columns=BackwardConfig("columns", 1, 2048, 4, 4),
        split_2byte=BackwardConfig("split", 2, 1024, 4, 4), split_4byte=BackwardConfig("split", 2, 2048, 4, 2),
        split_2byte_max_programs=16, split_2byte_wide=BackwardConfig("split", 2, 2048, 4, 2, exchange_behind=True),
        dw_sum_tile_elems=1024, dw_sum_max_p=64, dw_sum_min_cols=16, dw_sum_warps=4),
)
SETTINGS = {"hopper": HOPPER}
# Compute capability major -> architecture key; any other GPU (and the
# interpreter, which has none) gets FALLBACK: Hopper's settings, unmeasured there.
ARCH_OF_MAJOR = {9: "hopper"}
FALLBACK = HOPPER


def settings_for(capability: tuple[int, int] | None) -> Settings:
    """The settings of a GPU of compute ``capability`` (major, minor); FALLBACK for unknown ones and None.

    ValueError for anything else (torch.cuda.get_device_capability gives the pair).
    """
    if capability is None:
        return FALLBACK
    if type(capability) is not tuple or len(capability) != 2 or any(type(v) is not int for v in capability):
        raise ValueError(f"capability must be None or a (major, minor) tuple of ints, got {capability!r}")
    return SETTINGS.get(ARCH_OF_MAJOR.get(capability[0]), FALLBACK)


def _check_settings_arg(settings: object) -> None:
    if type(settings) is not Settings:
        raise TypeError(f"settings must be a Settings (a value of SETTINGS), got {type(settings).__name__}")


def _check_table_args(n_cols: object, elem_bytes: object, max_splits: object) -> None:
    for name, value in (("n_cols", n_cols), ("max_splits", max_splits)):
        if type(value) is not int or value < 1:
            raise ValueError(f"{name} must be an int >= 1, got {value!r}")
    if elem_bytes not in (2, 4) or type(elem_bytes) is not int:
        raise ValueError(f"elem_bytes must be 2 or 4, got {elem_bytes!r}")


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
        _check_settings_arg(settings)
        name, value = ("stores_residual", stores_residual) if type(stores_residual) is not bool else ("fp16", fp16)
        raise ValueError(f"{name} must be a bool, got {value!r}")
    # The choice depends on the row count only through its class: cached on
    # that, every prefill length after the first hits the cache.
    rows = _row_class(n_rows, n_cols, elem_bytes, max_splits, settings, stores_residual, fp16)
    try:
        return _forward_config(n_cols, elem_bytes, max_splits, settings, rows, stores_residual, fp16)
    except TypeError:  # an unhashable argument: the cache refuses it before the checks can name it
        _check_table_args(n_cols, elem_bytes, max_splits)
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
    # in all), "under_band" (more than few, at most persistent_min_rows_per_sm an SM), "band" (the
    # persistent grid's row counts) or "many" (more, or None).
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
        return "few_dense" if ints and n_rows * n_cols * elem_bytes > f.few_rows_dense_bytes else "few"
    if n_rows <= f.persistent_min_rows_per_sm * max_splits:
        return "under_band"
    return "band" if _in_band(n_rows, max_splits, f) else "many"


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
    _check_table_args(n_cols, elem_bytes, max_splits)
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
            warps = _pow2_at_most(block_n * elem_bytes // per_warp)
            return ForwardConfig("rows", 1, block_n, 1, _clamp_warps(warps, f), "first")
        warps = _pow2_at_most(n_cols * elem_bytes // f.bytes_per_warp)
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
        elif rows == "band" and block_n * elem_bytes == f.band_tile_bytes:
            # 2-8 rows an SM: more warps a row keep more of its loads in flight (docs/tuning.md#forward-warps).
            warps = max(warps, f.band_warps)
        elif rows == "many" and stores_residual and block_n * elem_bytes == f.band_tile_bytes:
            # Past the band likewise while a thread holds many_rows_thread_elems: 2-byte rows on 8 warps, fp32
            # on 4; y alone reads as fast on the bytes' warps (docs/tuning.md#forward-warps).
            warps = max(warps, block_n // (32 * f.many_rows_thread_elems))
        warps = _tile_warps(block_n, warps, f)
        # fp16's light decode tiles past few_rows_thread_max_tile read faster with the weight first
        # (docs/tuning.md#forward-decode-weight-before-the-sums).
        fp16_first = fp16 and few_rows and block_n > f.few_rows_thread_max_tile and _light(block_n, f)
        if (block_n <= (f.few_rows_max_tile if few_rows else f.weight_first_max_n) or not stores_residual
                or fp16_first):
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


def _pow2_at_most(count: int) -> int:
    # The largest power of two <= count, at least 1: warp and row counts taken per so many bytes.
    return 1 << (max(1, count).bit_length() - 1)


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
        _check_table_args(n_cols, elem_bytes, max_splits)
        _check_settings_arg(settings)
        raise


@functools.lru_cache(maxsize=1024, typed=True)
def _backward_config(n_cols: int, elem_bytes: int, max_splits: int, settings: Settings) -> BackwardConfig:
    _check_table_args(n_cols, elem_bytes, max_splits)
    _check_settings_arg(settings)
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
    rows_per_sm = min(b.max_rows_per_sm, _pow2_at_most(b.row_bytes_per_sm // row_bytes))
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
    """(shares per step, columns per program) for summing ``n_parts`` >= 1 dweight shares; else ValueError."""
    if type(n_parts) is not int or n_parts < 1:
        raise ValueError(f"n_parts must be an int >= 1, got {n_parts!r}")
    b = settings.backward
    block_p = min(b.dw_sum_max_p, 1 << (n_parts - 1).bit_length())
    return block_p, max(b.dw_sum_min_cols, b.dw_sum_tile_elems // block_p)

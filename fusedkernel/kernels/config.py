"""Launch settings as data, per GPU architecture.

The launch configs (:class:`ForwardConfig`, :class:`BackwardConfig`) and the
numbers the rules use (``forward_rule``, ``backward_rule``): one frozen
:class:`Settings` per architecture (``SETTINGS``), each field with one line
of why pointing at its section of ``docs/tuning.md``. They were measured on
Hopper (the H200). Other GPUs, and Triton's interpreter, use Hopper's
settings: the stated fallback, unmeasured there (:func:`settings_for`).
"""

from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass

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
    """The numbers of the forward rule (``forward_rule.forward_config``).

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
    few_rows_dense_bytes: int  # ...this many row bytes, the weight first (as every decode launch of more than
    few_rows_narrow_dense_bytes: int  # ...this many bytes of rows in tiles up to few_rows_max_tile): ...
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
    weight_first_max_n: int  # whole rows up to this width load the weight first where the residual is stored...
    few_rows_weight_first_max_bytes: int  # ...and decode tiles up to this many bytes (wider decode tiles before
    # the row sums but sparse decode's and fp16's light ones first);
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
    band_tile_bytes: int  # at those row counts, whole-row tiles of this many bytes (fp32: up to twice it)
    # take at least...
    band_warps: int  # ...this many warps: docs/tuning.md#forward-warps (past a wave of a launch's programs at
    # those row counts, half its warps where they hold every row in one: band_wave_config); past them, with
    many_rows_thread_elems: int  # the residual stored, at least the warps that hold this many of such a tile's
    # elements a thread: docs/tuning.md#forward-warps
    warm_max_rows: int  # launches of at most this many rows (decode steps, replayed with x in L2) and...
    band_warm_max_rows_per_sm: int  # ...this many an SM (one wave of band_warm_warps' programs) of those...
    band_warm_bytes_per_sm: int  # ...fp32 tiles of twice band_tile_bytes, whose rows hold more than this an SM,
    band_warm_warps: int  # ...take this many warps, the weight first, on the rows path but, writing y only, rows of...
    band_warm_narrow_row_bytes: int  # ...more than this many bytes on the persistent grid at...
    band_warm_programs_per_sm: int  # ...this many programs an SM: docs/tuning.md#forward-band-waves
    split: ForwardConfig  # rows wider than a tile, split over programs: docs/tuning.md#forward-split-rows
    looped: ForwardConfig  # rows split over more programs than SMs: docs/tuning.md#forward-looped-path

    def __post_init__(self) -> None:
        # Tiles and warps meet next_power_of_2 widths and Triton's warp counts.
        _check_rule_settings(self, ("max_tile_bytes", "narrow_tile_elems", "few_rows_warps", "few_rows_max_tile",
                                    "few_rows_y_only_max_tile", "few_rows_thread_max_tile",
                                    "few_rows_thread_wide_warps", "max_thread_elems",
                                    "min_warps", "max_warps", "few_rows_y_only_wide_min_bytes",
                                    "few_rows_y_only_wide_warps", "few_rows_y_only_bf16_warps", "weight_first_max_n",
                                    "few_rows_weight_first_max_bytes",
                                    "after_sum_max_tile_bytes", "few_rows_split_min_bytes", "few_rows_split_tile_bytes",
                                    "persistent_tile_bytes", "persistent_narrow_warps", "band_tile_bytes",
                                    "band_warps", "many_rows_thread_elems", "band_warm_warps"))
        if self.min_warps > self.max_warps:
            raise ValueError(f"ForwardSettings.min_warps must be at most max_warps ({self.max_warps}), "
                             f"got {self.min_warps}")


@dataclass(frozen=True)
class BackwardSettings:
    """The numbers of the backward rule (``backward_rule.backward_config``).

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
        few_rows_dense_bytes=1572864, few_rows_narrow_dense_bytes=1048576,
        few_rows_thread_wide_warps=16, max_thread_elems=32, min_warps=4, max_warps=32,
        few_rows_sparse_sms_per_row=8, few_rows_sparse_bytes_per_warp=8192,
        few_rows_sparse_fp16_bytes_per_warp=2048, few_rows_y_only_wide_min_bytes=16384, few_rows_y_only_wide_warps=8,
        few_rows_y_only_bf16_min_cols=10240, few_rows_y_only_bf16_warps=4,
        weight_first_max_n=8192, few_rows_weight_first_max_bytes=8192, after_sum_max_tile_bytes=32768,
        few_rows_split_min_bytes=32768, few_rows_split_tile_bytes=8192, few_rows_split_bytes_per_row=1280,
        few_rows_split_light_bytes_per_row=384,
        few_rows_split_y_only_light_min_bytes=53248, few_rows_split_sms_per_program=2, few_rows_split_programs_per_sm=2,
        few_rows_split_lone_max_pieces=14, few_rows_split_lone_min_cols=14336, persistent_tile_bytes=32768,
        persistent_min_rows_per_sm=2, persistent_max_rows_per_sm=8, persistent_narrow_row_bytes=22528,
        persistent_narrow_warps=16, band_tile_bytes=8192, band_warps=8, many_rows_thread_elems=16,
        warm_max_rows=512, band_warm_max_rows_per_sm=4, band_warm_bytes_per_sm=32768, band_warm_warps=16,
        band_warm_narrow_row_bytes=11264, band_warm_programs_per_sm=2,
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
    if type(capability) is not tuple or len(capability) != 2 or any(type(v) is not int or v < 0 for v in capability):
        raise ValueError(f"capability must be None or a (major, minor) tuple of ints >= 0, got {capability!r}")
    return SETTINGS.get(ARCH_OF_MAJOR.get(capability[0]), FALLBACK)


def check_settings_arg(settings: object) -> None:
    """TypeError unless ``settings`` is a :class:`Settings` (the rules' argument)."""
    if type(settings) is not Settings:
        raise TypeError(f"settings must be a Settings (a value of SETTINGS), got {type(settings).__name__}")


def check_rule_args(n_cols: object, elem_bytes: object, max_splits: object) -> None:
    """ValueError, naming the argument, unless n_cols and max_splits are ints >= 1 and elem_bytes 2 or 4."""
    for name, value in (("n_cols", n_cols), ("max_splits", max_splits)):
        if type(value) is not int or value < 1:
            raise ValueError(f"{name} must be an int >= 1, got {value!r}")
    if type(elem_bytes) is not int or elem_bytes not in (2, 4):  # the type first: an array has no truth value
        raise ValueError(f"elem_bytes must be 2 or 4, got {elem_bytes!r}")


def pow2_at_most(count: int) -> int:
    """The largest power of two <= ``count``, at least 1: the rules' warp and row counts per so many bytes."""
    return 1 << (max(1, count).bit_length() - 1)

"""Host side of the kernels: picks the path and launches."""

from __future__ import annotations

import functools
import operator
from contextlib import nullcontext

import torch
import triton

from .._validation import row_stride
from .backward_rule import backward_config, dw_sum_config
from .config import BackwardConfig, ForwardConfig, Settings, settings_for
from .forward_rule import band_wave_config, forward_config
from .backward import _bwd_columns_kernel, _bwd_dot_kernel, _bwd_rows_kernel, _bwd_split_kernel, _dw_sum_kernel
from .forward import _looped_kernel, _persistent_kernel, _rows_kernel

# Triton picks the interpreter when a kernel is decorated, so read the same
# switch (parsed as Triton parses it: 1, true, on, ...) once, at import.
INTERPRET = bool(triton.knobs.runtime.interpret)

_counters: dict[tuple[int, int, int], torch.Tensor] = {}
_slots: dict[tuple[int, int], list] = {}
_resident: dict[tuple, int] = {}


def _counter_buffer(device: torch.device, n: int, period: int) -> torch.Tensor:
    """int64 arrival counters, at least ``n`` of them, for the backward's grid-wide wait.

    Every launch that uses a counter adds exactly ``period`` (its grid size)
    to it and never resets it, so counters stay at multiples of ``period``
    and one zero-initialised buffer per (device, stream, period) is reused
    without a memset. During CUDA-graph capture a fresh buffer is allocated
    instead: its memset is captured and replays with the graph.
    """
    if torch.cuda.is_current_stream_capturing():
        return torch.zeros(n, dtype=torch.int64, device=device)
    key = (device.index, torch.cuda.current_stream(device).cuda_stream, period)
    buf = _counters.get(key)
    if buf is None or buf.numel() < n:
        buf = torch.zeros(max(n, 2 * (0 if buf is None else buf.numel())), dtype=torch.int64, device=device)
        _counters[key] = buf
    return buf


def _slot_buffer(device: torch.device, n: int) -> tuple[torch.Tensor, int]:
    """Exchange slots of the split paths (int64, at least ``n``) and this launch's epoch.

    A slot holds (epoch << 32) | a partial sum (see forward._exchange; the
    forward and the backward split paths share the buffer), so a
    slot must never already hold the epoch a launch waits for: one
    zero-initialised buffer per (device, stream) takes epochs 1, 2, ...,
    one per launch, and is replaced (zeros, epoch 1 again) when it is too
    small or the epoch would leave int32 (Triton would retype the argument).
    During CUDA-graph capture, and for CPU tensors, a fresh zeroed buffer and
    epoch 1 are used: a captured memset runs before every replay.
    """
    # CPU tensors (the interpreter, one program per row) have no stream to key on.
    if device.type != "cuda" or torch.cuda.is_current_stream_capturing():
        return torch.zeros(n, dtype=torch.int64, device=device), 1
    key = (device.index, torch.cuda.current_stream(device).cuda_stream)
    entry = _slots.get(key)
    if entry is None or entry[0].numel() < n or entry[1] >= 2**31 - 1:
        size = max(n, 2 * (0 if entry is None else entry[0].numel()))
        entry = _slots[key] = [torch.zeros(size, dtype=torch.int64, device=device), 0]
    entry[1] += 1
    return entry[0], entry[1]


# Compiled kernels for launches whose arguments are all "aligned": every
# pointer 16-byte aligned, every int argument divisible by 16 and < 2**31.
# Triton specializes a kernel on exactly these facts besides dtypes, None
# arguments and constexprs, which the key fixes with the device (the
# constexprs through the config, or through the hidden size that picks it),
# so one compiled kernel serves every such launch. Its C launcher is then called
# directly, with the pointers as ints: that skips JITFunction.run's argument
# binding and cache key, CompiledKernel's Python wrappers, and the launcher's
# per-pointer data_ptr() call and cuPointerGetAttribute check (the tensors
# were validated on the caller's side): 22 -> 11 µs of host time per decode
# call on the H200 (docs/performance.md, "Decode host time").
_compiled: dict[tuple, tuple] = {}
_raw_stream = getattr(torch._C, "_cuda_getCurrentRawStream", None)  # absent from CPU builds
_FAST = triton.__version__.startswith("3.6") and not INTERPRET and _raw_stream is not None
# torch.cuda.current_device() without its lazy-init check (the tensors are
# already on the GPU): a tenth of the host time.
_current_device = getattr(torch._C, "_cuda_getDevice", torch.cuda.current_device)
_knobs = triton.knobs.runtime


def _hooked(hook) -> bool:
    # Triton 3.6's hooks are HookChains, never None: a hook is set when the chain has calls.
    return hook is not None and bool(getattr(hook, "calls", True))


def _launch(kernel, grid: int, key: tuple, ptrs: tuple, args: tuple, num_warps: int, device: int):
    """Launch ``kernel`` on ``grid`` programs of ``num_warps`` warps.

    ``ptrs`` are its tensor arguments (None where unused), ``args`` the rest
    in signature order: n_rows, the int arguments Triton specializes (n_cols
    and the 4 row strides), then eps, any other runtime arguments and the
    constexprs. ``key`` must determine everything Triton specializes on
    besides alignment. Launches on the current device, which must be
    ``device``, and its current stream.
    """
    if _FAST:
        p = [t if t is None else t.data_ptr() for t in ptrs]
        n_rows, n_cols, s0, s1, s2, s3 = args[:6]
        bits = n_cols | s0 | s1 | s2 | s3
        for v in p:
            if v is not None:
                bits |= v
        if not bits & 15 and max(n_rows, n_cols, s0, s1, s2, s3) < 2**31:
            entry = _compiled.get(key)
            # A profiler's launch hooks want launch metadata: the JIT path gives it.
            if entry is not None and not (_hooked(_knobs.launch_enter_hook) or _hooked(_knobs.launch_exit_hook)):
                launch, function, metadata, cooperative, pdl = entry
                launch(grid, 1, 1, _raw_stream(device), function, cooperative, pdl, None, None, metadata,
                       None, None, None, *p, *args)
                return
            if entry is None:
                compiled = kernel[(grid,)](*ptrs, *args, num_warps=num_warps)
                run = compiled.run
                # Kernels that need scratch memory get it from CudaLauncher.__call__.
                if not (run.global_scratch_size or run.profile_scratch_size):
                    _compiled[key] = (run.launch, compiled.function, compiled.packed_metadata,
                                      run.launch_cooperative_grid, run.launch_pdl)
                return
    kernel[(grid,)](*ptrs, *args, num_warps=num_warps)


def _vector_width(elem_bytes: int, bits: int) -> int:
    """Elements of 16 bytes' worth, or fewer, dividing ``bits``: the hidden size and every row stride OR-ed.

    The kernels may then load and store that many at once (forward._aligned).
    """
    vec = 16 // elem_bytes
    while bits & (vec - 1):
        vec //= 2
    return vec


@functools.lru_cache(maxsize=16)
def _dependent_launch(device: torch.device) -> bool:
    # Programmatic dependent launch needs Hopper or later (griddepcontrol); the interpreter has none.
    return device.type == "cuda" and not INTERPRET and torch.cuda.get_device_capability(device)[0] >= 9


@functools.lru_cache(maxsize=16)
def _sm_count(index: int) -> int:
    return torch.cuda.get_device_properties(index).multi_processor_count


def _max_splits(index: int) -> int:
    # Programs that wait for each other: at most one per SM on a GPU, none in the interpreter.
    return 1 if INTERPRET else _sm_count(index)


@functools.lru_cache(maxsize=16)
def _sm_limits(index: int) -> tuple[int, int, int]:
    p = torch.cuda.get_device_properties(index)
    return p.regs_per_multiprocessor, p.max_threads_per_multi_processor, p.shared_memory_per_multiprocessor


def resident_per_sm(n_regs: int, num_warps: int, shared: int, limits: tuple[int, int, int]) -> int:
    """Programs of a compiled kernel that one SM holds at once (0 if none).

    ``n_regs`` registers a thread (allocated to a warp 256 at a time), ``num_warps``
    warps and ``shared`` bytes of shared memory a program (the driver reserves
    1 KiB more per program), against ``limits``: registers, threads and bytes
    of shared memory per SM.
    """
    regs, threads, smem = limits
    warp_regs = -(-n_regs * 32 // 256) * 256
    return min(regs // (num_warps * warp_regs), threads // (32 * num_warps), smem // (shared + 1024))


def _fit(kernel, args: tuple, meta: dict, device: int) -> int:
    # Programs of ``kernel``, compiled for these arguments, that one SM holds:
    # the cap of a persistent grid, which would otherwise run in two waves.
    compiled = kernel.warmup(*args, grid=(1,), **meta)
    compiled._init_handles()  # loads the binary: its register count comes from the driver
    return resident_per_sm(compiled.n_regs, meta["num_warps"], compiled.metadata.shared, _sm_limits(device))


@functools.lru_cache(maxsize=16)
def _settings(index: int) -> Settings:
    # The device's architecture picks the launch settings (the interpreter has none: the fallback).
    return settings_for(None if INTERPRET or index < 0 else torch.cuda.get_device_capability(index))


def forward_rows(x: torch.Tensor, r: torch.Tensor, weight: torch.Tensor, eps: float,
                 y: torch.Tensor, res: torch.Tensor | None = None,
                 rstd: torch.Tensor | None = None, cfg: ForwardConfig | None = None) -> None:
    """Launch the forward op on tensors of shape (..., N) read as (rows, N).

    x, r, y and res must each have a unit column stride and leading dimensions
    that collapse into one row stride (see ``_validation.rows_view``); inputs
    must already be validated. Writes y, and res / rstd (float32, one per row)
    when given. Launches on x's device and that device's current stream.
    ``cfg`` overrides the launch table (tests and tuning); TypeError if it
    is not a ForwardConfig, ValueError if its rows or persistent path would
    not cover a whole row, or would split rows in the interpreter (split
    programs wait for each other there, forever) or over more programs than
    the GPU has SMs.
    """
    _forward_rows(x, r, weight, eps, y, res, rstd, cfg, True)


def table_config(x: torch.Tensor, r: torch.Tensor, weight: torch.Tensor, y: torch.Tensor,
                 res: torch.Tensor | None = None, rstd: torch.Tensor | None = None) -> ForwardConfig:
    """The launch settings :func:`forward_rows` takes for these tensors without ``cfg``: the rule's launch.

    Tensors as forward_rows's; launches nothing (on a GPU it may compile the
    kernel to read its registers: ``forward_rule.band_wave_config``).
    """
    return _forward_rows(x, r, weight, 0.0, y, res, rstd, None, False)


def _forward_rows(x: torch.Tensor, r: torch.Tensor, weight: torch.Tensor, eps: float, y: torch.Tensor,
                  res: torch.Tensor | None, rstd: torch.Tensor | None, cfg: ForwardConfig | None,
                  run: bool) -> ForwardConfig | None:
    # forward_rows; with run False, table_config: the launch's settings, launching nothing.
    n_cols = x.shape[-1]
    n_rows = x.numel() // n_cols
    device = x.get_device()
    flags = (device, x.dtype, weight.dtype, y.dtype, res is not None, rstd is not None)
    table = cfg is None
    if table:
        max_splits = _max_splits(device)
        cfg = forward_config(n_cols, x.element_size(), max_splits, _settings(device), n_rows, res is not None,
                             x.dtype == torch.float16)
    else:
        key = (cfg, *flags)
        if type(cfg) is not ForwardConfig:
            raise TypeError(f"cfg must be a ForwardConfig, got {type(cfg).__name__}")
        max_splits = _max_splits(device)
        if cfg.path == "persistent" and cfg.block_n < n_cols:
            raise ValueError(f"cfg: the persistent path holds whole rows, so block_n must be >= the hidden size "
                             f"{n_cols}, got {cfg.block_n}")
        if cfg.path == "rows":
            if cfg.block_n * cfg.splits < n_cols:
                raise ValueError(f"cfg: block_n * splits must cover the hidden size {n_cols}, "
                                 f"got {cfg.block_n} * {cfg.splits}")
            if cfg.splits > 1 and INTERPRET:
                raise ValueError("cfg: splits > 1 needs a GPU (the interpreter runs programs one by one)")
            if cfg.splits > max_splits:
                raise ValueError(f"cfg: splits must be at most the SM count {max_splits} (a row group's "
                                 f"programs wait for each other, so they must fit at once), got {cfg.splits}")
    # Inputs first, so a bad layout is reported under the argument's name.
    # Contiguous tensors (decode's, and every output the op allocates) skip
    # row_stride's call.
    stride_x = n_cols if x.is_contiguous() else row_stride(x, "x")
    stride_r = n_cols if r.is_contiguous() else row_stride(r, "residual")
    stride_res = 0 if res is None else n_cols if res.is_contiguous() else row_stride(res, "residual output")
    stride_y = n_cols if y.is_contiguous() else row_stride(y, "y")
    common = (n_rows, n_cols, stride_x, stride_r, stride_y, stride_res, eps)
    vec = _vector_width(x.element_size(), n_cols | stride_x | stride_r | stride_y | stride_res)
    # Triton launches on the current device: switch only when it differs.
    if device >= 0 and device != _current_device():
        with torch.cuda.device(device):
            return _forward_rows(x, r, weight, eps, y, res, rstd, None if table else cfg, run)
    if table and n_rows > max_splits and not INTERPRET:
        # The band's warps depend on how many programs an SM holds: the compiled kernels' registers.
        def resident(c: ForwardConfig) -> int:
            fit_key = ("rows", c.block_m, c.block_n, c.num_warps, c.weight_at, *flags, vec)
            fit = _resident.get(fit_key)
            if fit is None:
                meta = dict(BLOCK_M=c.block_m, BLOCK_N=c.block_n, SPLITS=1, SPLITS_POW2=1, WEIGHT_AT=c.weight_at,
                            STORE_RES=res is not None, STORE_RSTD=rstd is not None, VEC=vec, num_warps=c.num_warps)
                fit = _resident[fit_key] = _fit(_rows_kernel, (x, r, weight, y, res, rstd, None, *common, 0), meta,
                                                device)
            return fit

        cfg = band_wave_config(cfg, n_rows, max_splits, _settings(device), resident)
    if not run:
        return cfg
    if table:
        # The table's choice follows from n_cols, few rows or not, its path, splits, warps and weight
        # load (a decode row's tile follows its row count; the tiles' splits differ), the dtype and
        # the device: keying on them spares hashing the config (a dataclass) per call.
        key = (n_cols, n_rows <= max_splits, cfg.path, cfg.splits, cfg.num_warps, cfg.weight_load, *flags)
    if cfg.path == "looped":
        _launch(_looped_kernel, n_rows, key, (x, r, weight, y, res, rstd),
                (*common, cfg.block_n, res is not None, rstd is not None, vec), cfg.num_warps, device)
        return
    if cfg.path == "persistent":
        # programs_per_sm per SM, or as many as fit (4 programs in the interpreter, which runs them one by one).
        args = (*common, cfg.block_m, cfg.block_n, res is not None, rstd is not None, vec)
        per_device = 4
        if not INTERPRET:
            fit = _resident.get((*key, vec))
            if fit is None:
                meta = dict(BLOCK_M=cfg.block_m, BLOCK_N=cfg.block_n, STORE_RES=res is not None,
                            STORE_RSTD=rstd is not None, VEC=vec, num_warps=cfg.num_warps)
                fit = _resident[(*key, vec)] = _fit(_persistent_kernel, (x, r, weight, y, res, rstd, *common), meta,
                                                    device)
            per_device = max(1, min(cfg.programs_per_sm, fit)) * _sm_count(device)
        _launch(_persistent_kernel, max(1, min(-(-n_rows // cfg.block_m), per_device)), key,
                (x, r, weight, y, res, rstd), args, cfg.num_warps, device)
        return
    # Plain integer arithmetic: triton.cdiv and triton.next_power_of_2 are
    # ConstexprFunctions in Triton 3.6, ~2 us of host time per call each.
    groups = -(-n_rows // cfg.block_m)
    slots, epoch = None, 0  # SPLITS == 1: no exchange
    if cfg.splits > 1:
        slots, epoch = _slot_buffer(x.device, groups * cfg.splits * cfg.block_m)
    _launch(_rows_kernel, groups * cfg.splits, key, (x, r, weight, y, res, rstd, slots),
                       (*common, epoch, cfg.block_m, cfg.block_n, cfg.splits, 1 << (cfg.splits - 1).bit_length(),
                        cfg.weight_at, res is not None, rstd is not None, vec), cfg.num_warps, device)


def backward_rows(dy2: torch.Tensor, dres2: torch.Tensor | None, x2: torch.Tensor, r2: torch.Tensor,
                  weight: torch.Tensor, rstd: torch.Tensor, dx2: torch.Tensor,
                  cfg: BackwardConfig | None = None) -> torch.Tensor:
    """Write dx2 (= d residual) for 2-D row views and return dweight (N,).

    dweight is in weight's dtype: the programs' fp32 shares summed in fp32
    and rounded once. Where one program holds every row (a decode step) its
    share is final and the backward kernel stores it rounded: no reduction
    kernel follows.

    ``rstd`` is the forward's float32 rstd per row; ``dres2`` the gradient of
    the residual output, if any. Launches on x2's device and current stream.
    ``cfg`` overrides the launch table (tests and tuning); TypeError if it
    is not a BackwardConfig, ValueError if its rows path would not hold a
    whole row or its split path would split a row over more programs than
    may wait for each other (see ``forward_config``).
    """
    n_rows, n_cols = x2.shape
    device = x2.get_device()
    max_splits = _max_splits(device)
    if cfg is None:
        cfg = backward_config(n_cols, x2.element_size(), max_splits, _settings(device))
    elif type(cfg) is not BackwardConfig:
        raise TypeError(f"cfg must be a BackwardConfig, got {type(cfg).__name__}")
    if cfg.path == "rows" and cfg.block_n + cfg.tail_n < n_cols:
        raise ValueError(f"cfg: the rows path holds whole rows, so block_n + tail_n must be >= the hidden size "
                         f"{n_cols}, got {cfg.block_n} + {cfg.tail_n}")
    row_blocks = -(-n_rows // cfg.block_m)
    switch = x2.is_cuda and x2.device.index != torch.cuda.current_device()
    with torch.cuda.device(x2.device) if switch else nullcontext():
        # Persistent grid (4 programs in the interpreter, which runs them one by one).
        index = torch.cuda.current_device() if x2.is_cuda else -1
        sms = 0 if INTERPRET else _sm_count(index)
        per_device = 4 if INTERPRET else cfg.programs_per_sm * sms
        has_dres = dres2 is not None
        dres_arg = dres2 if has_dres else dy2
        strides = (dy2.stride(0), dres_arg.stride(0), x2.stride(0), r2.stride(0), dx2.stride(0))
        vec = _vector_width(x2.element_size(), n_cols | functools.reduce(operator.or_, strides))
        meta = dict(BLOCK_M=cfg.block_m, BLOCK_N=cfg.block_n, HAS_DRES=has_dres, VEC=vec, num_warps=cfg.num_warps)
        if cfg.path == "split":
            splits = -(-n_cols // cfg.block_n)
            if splits > max_splits:
                raise ValueError(f"cfg: the split path's programs per row, {splits}, must be at most "
                                 f"{max_splits} (they wait for each other, so they must fit "
                                 "at once: one per SM on a GPU, one in the interpreter)")
            meta.update(SPLITS=splits, SPLITS_POW2=1 << (splits - 1).bit_length(), BEHIND=cfg.exchange_behind)
            resident = per_device
            if not INTERPRET:
                # A split lane's programs wait for each other every row block: where the
                # SMs hold fewer programs than the grid, lanes not wholly resident spin
                # until other lanes finish (docs/tuning.md#backward-split-path). So the
                # grid is what the compiled kernel lets every SM hold, measured once per setting.
                key = (index, cfg, splits, vec, has_dres, *(t.dtype for t in (dy2, dres_arg, x2, r2, weight, dx2)))
                fit = _resident.get(key)
                if fit is None:
                    fit = _resident[key] = _fit(_bwd_split_kernel, (dy2, dres_arg, x2, r2, weight, rstd, dx2,
                                                                    torch.float32, torch.int64, n_rows, n_cols,
                                                                    *strides, 1), meta, index)
                resident = max(1, min(cfg.programs_per_sm, fit)) * sms
            lanes = max(1, min(row_blocks, resident // splits))
            dw_part = _dw_parts(lanes, weight)
            slots, epoch = _slot_buffer(x2.device, row_blocks * splits * cfg.block_m)
            _bwd_split_kernel[(lanes * splits,)](dy2, dres_arg, x2, r2, weight, rstd, dx2, dw_part, slots, n_rows,
                                                 n_cols, *strides, epoch, **meta)
        elif cfg.path == "columns":
            chunks = -(-n_cols // cfg.block_n)
            groups = max(1, min(row_blocks, -(-per_device // chunks)))
            dot = torch.empty(chunks, n_rows, dtype=torch.float32, device=x2.device)
            _bwd_dot_kernel[(row_blocks, chunks)](dy2, x2, r2, weight, rstd, dot, n_rows, n_cols, dy2.stride(0),
                                                  x2.stride(0), r2.stride(0), BLOCK_M=cfg.block_m,
                                                  BLOCK_N=cfg.block_n, VEC=vec, num_warps=cfg.num_warps)
            dw_part = _dw_parts(groups, weight)
            _bwd_columns_kernel[(chunks, groups)](dy2, dres_arg, x2, r2, weight, rstd, dot, dx2, dw_part, n_rows,
                                                  n_cols, chunks, *strides,
                                                  CHUNKS=1 << (chunks - 1).bit_length(), **meta)
        else:
            # At most one program per row block: each writes its whole dw_part row.
            n_progs = max(1, min(row_blocks, per_device))
            dw_part = _dw_parts(n_progs, weight)
            dw = count = None
            sum_p = sum_n = 0
            # A grid of at most one program per SM, each holding one row block
            # (decode), is resident at once, so it waits for itself and sums
            # dw_part in the same launch; a prefill grid of one program per SM
            # keeps its warps and the sum launch (docs/tuning.md#backward-decode-waits).
            if 1 < row_blocks <= sms:
                meta["num_warps"] = cfg.wait_warps or cfg.num_warps
                dw = torch.empty_like(weight)
                count = _counter_buffer(x2.device, 1, n_progs)
                sum_n = 1 << (-(-n_cols // n_progs) - 1).bit_length()
                sum_p = min(1 << (n_progs - 1).bit_length(), max(1, _settings(device).backward.sum_tile_elems // sum_n))
            _bwd_rows_kernel[(n_progs,)](dy2, dres_arg, x2, r2, weight, rstd, dx2, dw_part, dw, count, n_rows,
                                         n_cols, *strides, TAIL_N=cfg.tail_n, SUM_P=sum_p, SUM_N=sum_n, **meta)
            if dw is not None:
                return dw
        return dw_part[0] if len(dw_part) == 1 else sum_shares(dw_part, weight.dtype)


def sum_shares(dw_part: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """Sum the backward's fp32 dweight shares (P, N) over P, in a fixed order; return (N,) in ``dtype``.

    One launch on the current device and stream, summing in fp32 and rounding
    once (torch's ``dw_part.sum(0).to(dtype)`` is two); on Hopper and later a
    programmatic dependent launch that waits for the previous kernel's stores. dw_part must be a
    contiguous float32 tensor of at least one row; otherwise ValueError.
    """
    if dw_part.dim() != 2 or dw_part.shape[0] < 1 or dw_part.dtype != torch.float32 or not dw_part.is_contiguous():
        raise ValueError(f"dw_part must be a contiguous float32 (P, N) tensor with P >= 1, got "
                         f"{dw_part.dtype} of shape {tuple(dw_part.shape)} and strides {dw_part.stride()}")
    n_parts, n_cols = dw_part.shape
    settings = _settings(dw_part.get_device())
    block_p, block_n = dw_sum_config(n_parts, settings)
    dw = torch.empty(n_cols, dtype=dtype, device=dw_part.device)
    pdl = _dependent_launch(dw_part.device)
    _dw_sum_kernel[(-(-n_cols // block_n),)](dw_part, dw, n_parts, n_cols, BLOCK_P=block_p, BLOCK_N=block_n,
                                             PDL=pdl, num_warps=settings.backward.dw_sum_warps, launch_pdl=pdl)
    return dw


def _dw_parts(parts: int, weight: torch.Tensor) -> torch.Tensor:
    # One fp32 row per program, summed by the caller; a single program's row
    # is final, so the kernel's store rounds it to weight's dtype directly.
    dtype = torch.float32 if parts > 1 else weight.dtype
    return torch.empty(parts, weight.shape[0], dtype=dtype, device=weight.device)

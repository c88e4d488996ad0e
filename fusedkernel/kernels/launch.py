"""Host side of the kernels: picks the path and launches."""

from __future__ import annotations

import functools
from contextlib import nullcontext

import torch
import triton

from .._validation import row_stride
from .config import BackwardConfig, ForwardConfig, backward_config, forward_config
from .backward import _bwd_columns_kernel, _bwd_dot_kernel, _bwd_rows_kernel
from .forward import _looped_kernel, _rows_kernel

# Triton picks the interpreter when a kernel is decorated, so read the same
# switch (parsed as Triton parses it: 1, true, on, ...) once, at import.
INTERPRET = bool(triton.knobs.runtime.interpret)

_counters: dict[tuple[int, int, int], torch.Tensor] = {}


def _counter_buffer(device: torch.device, n: int, splits: int) -> torch.Tensor:
    """int64 arrival counters for the split path, at least ``n`` of them.

    The kernel leaves every counter at a multiple of ``splits`` (it never
    resets them), so one zero-initialised buffer per (device, stream, splits)
    is reused without a memset. During CUDA-graph capture a fresh buffer is
    allocated instead: its memset is captured and replays with the graph.
    """
    if torch.cuda.is_current_stream_capturing():
        return torch.zeros(n, dtype=torch.int64, device=device)
    key = (device.index, torch.cuda.current_stream(device).cuda_stream, splits)
    buf = _counters.get(key)
    if buf is None or buf.numel() < n:
        buf = torch.zeros(max(n, 2 * (0 if buf is None else buf.numel())), dtype=torch.int64, device=device)
        _counters[key] = buf
    return buf


# Compiled kernels for launches whose arguments are all "aligned": every
# pointer 16-byte aligned, every int argument divisible by 16 and < 2**31.
# Triton specializes a kernel on exactly these facts (besides dtypes, None
# arguments and constexprs, which are in the key with the device), so one
# compiled kernel serves every such launch. Calling its launcher directly
# skips JITFunction.run's per-call argument binding and cache-key
# construction, and CompiledKernel.__getitem__'s closure: most of the host
# time of a small call.
_compiled: dict[tuple, tuple] = {}
_FAST = triton.__version__.startswith("3.6") and not INTERPRET
_knobs = triton.knobs.runtime


def _aligned(tensors: tuple, ints: tuple, n_rows: int) -> bool:
    # n_rows is not specialized (only its int32/int64 type is). None pointers
    # are constexprs, part of the key.
    return (n_rows < 2**31 and not any(t is not None and t.data_ptr() & 15 for t in tensors)
            and not any(i & 15 or i >= 2**31 for i in ints))


def _launch(kernel, grid: int, key: tuple, args: tuple, num_warps: int, n_ptrs: int, device: int) -> None:
    """Launch ``kernel`` on ``grid`` programs with all its arguments in signature order.

    The first ``n_ptrs`` arguments are tensors (or None where unused),
    followed by n_rows, then the int arguments Triton specializes (n_cols and
    the row strides), then eps and the constexprs. Launches on the current
    device, which must be ``device``, and its current stream.
    """
    if _FAST and _aligned(args[:n_ptrs], args[n_ptrs + 1:n_ptrs + 6], args[n_ptrs]):
        entry = _compiled.get(key)
        if entry is None:
            compiled = kernel[(grid,)](*args, num_warps=num_warps)
            _compiled[key] = (compiled.run, compiled.function, compiled.packed_metadata, compiled)
            return
        run, function, metadata, compiled = entry
        if _knobs.launch_enter_hook is None:
            run(grid, 1, 1, torch._C._cuda_getCurrentRawStream(device), function, metadata, None,
                None, _knobs.launch_exit_hook, *args)
        else:  # a profiler's hook wants the launch metadata
            compiled[(grid, 1, 1)](*args)
        return
    kernel[(grid,)](*args, num_warps=num_warps)


def forward_rows(x: torch.Tensor, r: torch.Tensor, weight: torch.Tensor, eps: float,
                 y: torch.Tensor, res: torch.Tensor | None = None,
                 rstd: torch.Tensor | None = None, cfg: ForwardConfig | None = None) -> None:
    """Launch the forward op on tensors of shape (..., N) read as (rows, N).

    x, r, y and res must each have a unit column stride and leading dimensions
    that collapse into one row stride (see ``_validation.rows_view``); inputs
    must already be validated. Writes y, and res / rstd (float32, one per row)
    when given. Launches on x's device and that device's current stream.
    ``cfg`` overrides the launch table (tests and tuning); ValueError if its
    rows path would not cover a whole row, or would split rows in the
    interpreter (split programs wait for each other there, forever).
    """
    n_cols = x.shape[-1]
    n_rows = x.numel() // n_cols
    if cfg is None:
        cfg = forward_config(n_cols, x.element_size(), INTERPRET)
    elif cfg.path == "rows":
        if cfg.block_n * cfg.splits < n_cols:
            raise ValueError(f"cfg: block_n * splits must cover the hidden size {n_cols}, "
                             f"got {cfg.block_n} * {cfg.splits}")
        if cfg.splits > 1 and INTERPRET:
            raise ValueError("cfg: splits > 1 needs a GPU (the interpreter runs programs one by one)")
    # Inputs first, so a bad layout is reported under the argument's name.
    stride_x, stride_r = row_stride(x, "x"), row_stride(r, "residual")
    stride_res = row_stride(res, "residual output") if res is not None else 0
    common = (n_rows, n_cols, stride_x, stride_r, row_stride(y, "y"), stride_res, eps)
    device = x.get_device()
    key = (cfg, device, x.dtype, weight.dtype, y.dtype, res is not None, rstd is not None)
    # Triton launches on the current device: switch only when it differs.
    switch = device >= 0 and device != torch.cuda.current_device()
    with torch.cuda.device(device) if switch else nullcontext():
        if cfg.path == "looped":
            _launch(_looped_kernel, n_rows, key, (x, r, weight, y, res, rstd, *common, cfg.block_n,
                                                  res is not None, rstd is not None), cfg.num_warps, 6, device)
            return
        # Plain integer arithmetic: triton.cdiv and triton.next_power_of_2 are
        # ConstexprFunctions in Triton 3.6, ~2 us of host time per call each.
        groups = -(-n_rows // cfg.block_m)
        parts = counts = None  # SPLITS == 1: no exchange
        if cfg.splits > 1:
            parts = torch.empty(groups * cfg.splits * cfg.block_m, dtype=torch.float32, device=x.device)
            counts = _counter_buffer(x.device, groups, cfg.splits)
        _launch(_rows_kernel, groups * cfg.splits, key,
                (x, r, weight, y, res, rstd, parts, counts, *common, cfg.block_m, cfg.block_n,
                 cfg.splits, 1 << (cfg.splits - 1).bit_length(), res is not None, rstd is not None),
                cfg.num_warps, 8, device)


@functools.lru_cache(maxsize=16)
def _sm_count(index: int) -> int:
    return torch.cuda.get_device_properties(index).multi_processor_count


def backward_rows(dy2: torch.Tensor, dres2: torch.Tensor | None, x2: torch.Tensor, r2: torch.Tensor,
                  weight: torch.Tensor, rstd: torch.Tensor, dx2: torch.Tensor,
                  cfg: BackwardConfig | None = None) -> torch.Tensor:
    """Write dx2 (= d residual) for 2-D row views and return dweight (N,).

    dweight is float32, summed over the programs' fp32 shares; where one
    program holds every row (a decode step) it is its one share, written in
    weight's dtype by the kernel: no reduction or cast kernel follows.

    ``rstd`` is the forward's float32 rstd per row; ``dres2`` the gradient of
    the residual output, if any. Launches on x2's device and current stream.
    ``cfg`` overrides the launch table (tests and tuning); ValueError if
    its rows path would not hold a whole row.
    """
    n_rows, n_cols = x2.shape
    cfg = cfg or backward_config(n_cols)
    if cfg.path == "rows" and cfg.block_n < n_cols:
        raise ValueError(f"cfg: the rows path holds whole rows, so block_n must be >= the hidden size "
                         f"{n_cols}, got {cfg.block_n}")
    row_blocks = -(-n_rows // cfg.block_m)
    switch = x2.is_cuda and x2.device.index != torch.cuda.current_device()
    with torch.cuda.device(x2.device) if switch else nullcontext():
        # Persistent grid (4 programs in the interpreter, which runs them one by one).
        per_device = 4 if INTERPRET else cfg.programs_per_sm * _sm_count(torch.cuda.current_device())
        has_dres = dres2 is not None
        dres_arg = dres2 if has_dres else dy2
        strides = (dy2.stride(0), dres_arg.stride(0), x2.stride(0), r2.stride(0), dx2.stride(0))
        meta = dict(BLOCK_M=cfg.block_m, BLOCK_N=cfg.block_n, HAS_DRES=has_dres, num_warps=cfg.num_warps)
        if cfg.path == "columns":
            chunks = -(-n_cols // cfg.block_n)
            groups = max(1, min(row_blocks, -(-per_device // chunks)))
            dot = torch.empty(chunks, n_rows, dtype=torch.float32, device=x2.device)
            _bwd_dot_kernel[(row_blocks, chunks)](dy2, x2, r2, weight, rstd, dot, n_rows, n_cols, dy2.stride(0),
                                                  x2.stride(0), r2.stride(0), BLOCK_M=cfg.block_m,
                                                  BLOCK_N=cfg.block_n, num_warps=cfg.num_warps)
            dw_part = _dw_parts(groups, weight)
            _bwd_columns_kernel[(chunks, groups)](dy2, dres_arg, x2, r2, weight, rstd, dot, dx2, dw_part, n_rows,
                                                  n_cols, chunks, *strides,
                                                  CHUNKS=1 << (chunks - 1).bit_length(), **meta)
        else:
            # At most one program per row block: each writes its whole dw_part row.
            n_progs = max(1, min(row_blocks, per_device))
            dw_part = _dw_parts(n_progs, weight)
            _bwd_rows_kernel[(n_progs,)](dy2, dres_arg, x2, r2, weight, rstd, dx2, dw_part, n_rows, n_cols,
                                         *strides, **meta)
    return dw_part[0] if len(dw_part) == 1 else dw_part.sum(0)


def _dw_parts(parts: int, weight: torch.Tensor) -> torch.Tensor:
    # One fp32 row per program, summed by the caller; a single program's row
    # is final, so the kernel's store rounds it to weight's dtype directly.
    dtype = torch.float32 if parts > 1 else weight.dtype
    return torch.empty(parts, weight.shape[0], dtype=dtype, device=weight.device)

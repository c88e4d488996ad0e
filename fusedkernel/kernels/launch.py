"""Host side of the forward kernels: picks the path and launches on 2-D row views."""

from __future__ import annotations

import os
from contextlib import nullcontext

import torch
import triton

from .config import ForwardConfig, forward_config
from .forward import _looped_kernel, _rows_kernel

# Triton picks the interpreter when a kernel is decorated, so read the same
# switch once, at import.
INTERPRET = os.environ.get("TRITON_INTERPRET", "0") == "1"

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


def forward_rows(x2: torch.Tensor, r2: torch.Tensor, weight: torch.Tensor, eps: float,
                 y2: torch.Tensor, res2: torch.Tensor | None = None,
                 rstd: torch.Tensor | None = None, cfg: ForwardConfig | None = None) -> None:
    """Launch the forward op on 2-D views (rows, N) with unit column stride.

    Writes y2, and res2 / rstd when given. Inputs must already be validated;
    the launch happens on x2's device and that device's current stream.
    ``cfg`` overrides the launch table (tests and tuning).
    """
    n_rows, n_cols = x2.shape
    cfg = cfg or forward_config(n_cols, INTERPRET)
    store_res, store_rstd = res2 is not None, rstd is not None
    # Unused optional outputs get a valid pointer that is never written.
    res_arg = res2 if store_res else y2
    rstd_arg = rstd if store_rstd else y2
    stride_res = res2.stride(0) if store_res else 0
    common = (n_rows, n_cols, x2.stride(0), r2.stride(0), y2.stride(0), stride_res, eps)
    with torch.cuda.device(x2.device) if x2.is_cuda else nullcontext():
        if cfg.path == "looped":
            _looped_kernel[(n_rows,)](x2, r2, weight, y2, res_arg, rstd_arg, *common,
                                      BLOCK_N=cfg.block_n, STORE_RES=store_res,
                                      STORE_RSTD=store_rstd, num_warps=cfg.num_warps)
            return
        groups = triton.cdiv(n_rows, cfg.block_m)
        if cfg.splits > 1:
            parts = torch.empty(groups * cfg.splits * cfg.block_m, dtype=torch.float32, device=x2.device)
            counts = _counter_buffer(x2.device, groups, cfg.splits)
        else:
            parts = counts = y2  # never touched when SPLITS == 1
        _rows_kernel[(groups * cfg.splits,)](
            x2, r2, weight, y2, res_arg, rstd_arg, parts, counts, *common,
            BLOCK_M=cfg.block_m, BLOCK_N=cfg.block_n, SPLITS=cfg.splits,
            SPLITS_POW2=triton.next_power_of_2(cfg.splits),
            STORE_RES=store_res, STORE_RSTD=store_rstd, num_warps=cfg.num_warps)

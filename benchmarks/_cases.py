"""What the suite measures: shapes, implementations, inputs, floors and bytes.

Shapes are "rows x hidden" strings. GPU shapes run on a GPU host only;
interpreter shapes (small, so the Triton interpreter finishes in seconds) run
under TRITON_INTERPRET=1 only. Both lists are in every benchmark's params, so
the suite's definition is the same on every machine and each machine skips
the other's shapes (cheaply: before any tensor is made).

Traffic model (bytes used for GB/s), per implementation: every kernel reads
each of its inputs once and writes each of its outputs once; re-reads inside a
kernel (from L2 or HBM) are not counted. With E bytes per element of x and
W per element of weight, for rows x N:

* fused / compiled (one kernel): read x, residual, write y = 3 row-trips,
  3*rows*N*E + N*W.
* eager (add, F.rms_norm, mul): add 3 trips + rms_norm 2 + mul 2 = 7 row-trips,
  7*rows*N*E + N*W.

The floor is ``torch.add(x, residual, out=y)``: the same 3 row-trips as the
fused op with no reduction, timed in the same process.
"""

from __future__ import annotations

import functools

import torch

from ._measure import DEVICE, INTERPRET

# Nine shapes: a full GPU run (3 implementations x 3 dtypes x 9 shapes, four
# metrics) is about 270 benchmark processes of ~1.8 s each on the H200.
GPU_SHAPES = [
    "1x4096", "32x4096",                          # decode
    "65536x512",                                  # narrow rows, many tokens
    "16384x4096", "32768x8192", "8192x16384",     # prefill
    "1024x65536", "256x131072", "128x262144",     # wide rows
]
INTERPRETER_SHAPES = ["4x64", "3x1000", "2x20000"]
DECODE_SHAPES = ["1x4096", "32x4096"]

DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}
ROW_TRIPS = {"fused": 3, "compiled": 3, "eager": 7}


def parse_shape(shape: str) -> tuple[int, int]:
    rows, n = shape.split("x")
    return int(rows), int(n)


def check_runs_here(shape: str) -> None:
    """Raise NotImplementedError (asv: skipped) for the other mode's shapes."""
    if (shape in INTERPRETER_SHAPES) != INTERPRET:
        raise NotImplementedError(f"{shape} is for {'GPU' if INTERPRET else 'interpreter'} runs")


def op_for(impl: str):
    import fusedkernel

    return {"fused": fusedkernel.add_rmsnorm, "eager": fusedkernel.add_rmsnorm_eager,
            "compiled": fusedkernel.add_rmsnorm_compiled}[impl]


@functools.cache
def inputs(dtype: str, shape: str) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Random x, residual (rows, N) and weight (N,) on the run's device, made once per process."""
    rows, n = parse_shape(shape)
    g = torch.Generator(device=DEVICE).manual_seed(0)
    dt = DTYPES[dtype]
    x = torch.randn(rows, n, generator=g, device=DEVICE, dtype=dt)
    r = torch.randn(rows, n, generator=g, device=DEVICE, dtype=dt)
    w = torch.randn(n, generator=g, device=DEVICE, dtype=dt)
    return x, r, w


def call(impl: str, dtype: str, shape: str):
    """A no-argument callable running ``impl`` once on this case's inputs."""
    op, (x, r, w) = op_for(impl), inputs(dtype, shape)
    return lambda: op(x, r, w, 1e-6)


def floor(dtype: str, shape: str):
    """The same-bytes memory-bound reference: ``torch.add(x, residual, out=y)``."""
    x, r, _ = inputs(dtype, shape)
    y = torch.empty_like(x)
    return lambda: torch.add(x, r, out=y)


def bytes_moved(impl: str, dtype: str, shape: str) -> int:
    """Bytes one call of ``impl`` moves under the traffic model above."""
    rows, n = parse_shape(shape)
    e = DTYPES[dtype].itemsize
    return ROW_TRIPS[impl] * rows * n * e + n * e

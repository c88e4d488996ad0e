"""What the suite measures: shapes, ops, implementations, inputs, floors and bytes.

Shapes are "rows x hidden" strings. GPU shapes run on a GPU host only;
interpreter shapes (small, so the Triton interpreter finishes in seconds) run
under TRITON_INTERPRET=1 only. Both lists are in every benchmark's params, so
the suite's definition is the same on every machine and each machine skips
the other's shapes (cheaply: before any tensor is made).

Ops, with their row-trips (one trip = rows x N elements of x's dtype read or
written once; every implementation is charged the op's minimum, so GB/s is
comparable across implementations and proportional to speed):

* ``forward``: y = rmsnorm(x + residual) * weight. Read x, residual, write y:
  3 trips. Floor: ``torch.add(x, residual, out=y)``, 3 trips.
* ``forward+residual``: also return x + residual (the next layer's residual).
  4 trips. Floor: ``torch.addcmul(x, residual, z, out=y)``, 4 trips.
* ``forward+backward``: the forward, then dx, dresidual, dweight from dy.
  Forward 3 trips; backward reads dy, x, residual and writes dx (= dresidual):
  4 trips; 7 in all. Floor: the two floors above, back to back, 7 trips.

Weight traffic (N elements per weight read or written) is added to the bytes.
Liger has one form, which always writes the residual sum; it is charged the
op's trips like every implementation.
"""

from __future__ import annotations

import functools

import torch

from ._measure import DEVICE, INTERPRET

GPU_SHAPES = [
    "1x4096", "32x4096",                          # decode
    "65536x512",                                  # narrow rows, many tokens
    "16384x4096", "32768x8192", "8192x16384",     # prefill
    "1024x65536", "256x131072", "128x262144",     # wide rows
]
INTERPRETER_SHAPES = ["4x64", "3x1000", "2x20000"]
SHAPES = GPU_SHAPES + INTERPRETER_SHAPES
DECODE_SHAPES = ["1x4096", "32x4096"]

DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}
OPS = ["forward", "forward+residual", "forward+backward"]
ROW_TRIPS = {"forward": 3, "forward+residual": 4, "forward+backward": 7}
WEIGHT_TRIPS = {"forward": 1, "forward+residual": 1, "forward+backward": 3}
IMPLS = ["fused", "compiled", "liger", "eager"]
EPS = 1e-6


def parse_shape(shape: str) -> tuple[int, int]:
    rows, n = shape.split("x")
    return int(rows), int(n)


def check_runs_here(shape: str) -> None:
    """Raise NotImplementedError (asv: skipped) for the other mode's shapes."""
    if (shape in INTERPRETER_SHAPES) != INTERPRET:
        raise NotImplementedError(f"{shape} is for {'GPU' if INTERPRET else 'interpreter'} runs")


def cases() -> list[tuple[str, str]]:
    """(dtype, shape) pairs this host runs."""
    return [(d, s) for s in (INTERPRETER_SHAPES if INTERPRET else GPU_SHAPES) for d in DTYPES]


@functools.cache
def inputs(dtype: str, shape: str) -> dict[str, torch.Tensor]:
    """Random x, residual, z, dy (rows, N) and weight (N,) on the run's device, made once."""
    rows, n = parse_shape(shape)
    g = torch.Generator(device=DEVICE).manual_seed(0)
    dt = DTYPES[dtype]
    t = {k: torch.randn(rows, n, generator=g, device=DEVICE, dtype=dt) for k in ("x", "r", "z", "dy")}
    t["w"] = torch.randn(n, generator=g, device=DEVICE, dtype=dt)
    return t


def _impl(impl: str, op: str, n: int):
    """f(x, residual, weight) -> y or (y, residual sum), per the op; NotImplementedError if unsupported."""
    import fusedkernel

    if impl == "liger":
        if INTERPRET:
            raise NotImplementedError("Liger's kernels do not run in Triton's interpreter")
        if n > fusedkernel.baselines.LIGER_MAX_N:
            raise NotImplementedError(f"Liger supports hidden size <= {fusedkernel.baselines.LIGER_MAX_N}")
        try:
            import liger_kernel  # noqa: F401
        except ImportError:
            raise NotImplementedError("liger-kernel is not installed") from None
        return lambda x, r, w: fusedkernel.add_rmsnorm_liger(x, r, w, EPS)
    fn = {"fused": fusedkernel.add_rmsnorm, "compiled": fusedkernel.add_rmsnorm_compiled,
          "eager": fusedkernel.add_rmsnorm_eager}[impl]
    residual = op == "forward+residual"
    return lambda x, r, w: fn(x, r, w, EPS, return_residual=residual)


def runner(op: str, impl: str, dtype: str, shape: str):
    """A no-argument callable running ``op`` with ``impl`` once on this case's inputs.

    Raises NotImplementedError (asv: skipped) where the implementation does
    not support the case.
    """
    t = inputs(dtype, shape)
    fn = _impl(impl, op, parse_shape(shape)[1])
    if op != "forward+backward":
        return lambda: fn(t["x"], t["r"], t["w"])
    x, r, w = (t[k].detach().requires_grad_() for k in ("x", "r", "w"))
    dy = t["dy"]

    def step():
        y = fn(x, r, w)
        y = y[0] if isinstance(y, tuple) else y
        # autograd.grad, not backward(): no accumulation into .grad (an extra add).
        return torch.autograd.grad(y, (x, r, w), dy)

    return step


def floor(op: str, dtype: str, shape: str):
    """The same-bytes memory-bound reference of ``op`` (see the module docstring)."""
    t = inputs(dtype, shape)
    x, r, z = t["x"], t["r"], t["z"]
    y = torch.empty_like(x)
    if op == "forward":
        return lambda: torch.add(x, r, out=y)
    if op == "forward+residual":
        return lambda: torch.addcmul(x, r, z, out=y)
    return lambda: (torch.add(x, r, out=y), torch.addcmul(x, r, z, out=y))


def bytes_moved(op: str, dtype: str, shape: str) -> int:
    """Bytes one call of ``op`` must move (the traffic model above)."""
    rows, n = parse_shape(shape)
    e = DTYPES[dtype].itemsize
    return ROW_TRIPS[op] * rows * n * e + WEIGHT_TRIPS[op] * n * e

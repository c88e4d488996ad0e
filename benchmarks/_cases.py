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

from . import _peers
from ._measure import DEVICE, INTERPRET, synchronize

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
IMPLS = _peers.IMPLS
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


def runner(op: str, impl: str, dtype: str, shape: str):
    """A no-argument callable running ``op`` with ``impl`` once on this case's inputs.

    Raises NotImplementedError (asv: skipped) where the implementation does
    not support the case.
    """
    t = inputs(dtype, shape)
    fn = _peers.implementation(impl, op == "forward+residual", parse_shape(shape)[1], EPS, INTERPRET)
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


def _compile_one(job) -> None:
    torch._dynamo.reset()  # one graph per shape: stay under dynamo's recompile limit
    runner(*job)()
    synchronize()


def prewarm(jobs: list[tuple], workers: int) -> None:
    """Run each job ``(op, impl, dtype, shape)`` once, in ``workers`` fresh processes.

    For torch.compile peers: a cold compile takes seconds per shape (and the
    backward as much again); compiled in parallel, the graphs land in
    inductor's on-disk caches, and the measuring process then only loads them.
    """
    import concurrent.futures
    import multiprocessing
    import pathlib
    import sys

    # Spawned workers import this suite by name, as asv does, from the folder
    # holding benchmarks/; appended, so the fusedkernel under test (installed
    # in asv's environment) still comes first.
    root = str(pathlib.Path(__file__).resolve().parent.parent)
    added = root not in sys.path
    if added:
        sys.path.append(root)
    try:
        ctx = multiprocessing.get_context("spawn")  # a forked child cannot use CUDA
        with concurrent.futures.ProcessPoolExecutor(workers, mp_context=ctx) as pool:
            list(pool.map(_compile_one, jobs))
    finally:
        if added:
            sys.path.remove(root)

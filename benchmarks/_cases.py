"""What the suite measures: the grid of cases, the ops, their inputs, floors and bytes.

A case is ``"<dtype> <tokens>x<hidden>"`` (e.g. ``"bf16 1x4096"``): rows
(tokens) by hidden size. The GPU grid follows real models:

* hidden sizes of widely used open models (``WIDTHS``): 2048 (Llama 3.2 1B),
  2880 (gpt-oss), 4096 (Llama 3.1 8B), 5120 (Qwen2.5/Qwen3 14B and 32B,
  Phi-4, Mistral Nemo), 7168 (DeepSeek-V3), 8192 (Llama 3.1 70B), 16384
  (Llama 3.1 405B);
* decode token counts 1, 8, 64, 512 and prefill 8192;
* bf16 everywhere, fp16 and fp32 at two widths (a power of two and 5120);
* one wide row per op (1024 x 65536) to catch cliffs.

forward+backward (training) runs at prefill only. Without a GPU
(``TRITON_INTERPRET=1``) the kernels run in Triton's interpreter on a few
small cases; each mode keeps its own results, so the two never share a graph.

Ops, with their row-trips (one trip = tokens x hidden elements of x's dtype
read or written once; every implementation is charged the op's minimum, so
GB/s is comparable across implementations and proportional to speed):

* ``forward``: y = rmsnorm(x + residual) * weight. Read x, residual, write y:
  3 trips. Floor: ``torch.add(x, residual, out=y)``, 3 trips.
* ``forward+residual``: also return x + residual as a new tensor: 4 trips.
  Floor: ``torch.addcmul(x, residual, z, out=y)``, 4 trips.
* ``inference``: the call inference engines make: the residual buffer is
  updated in place (``inplace_residual=True``): 4 trips, same floor. Liger has
  no in-place form and writes a new residual (the same bytes).
* ``forward+backward``: the forward, then dx, dresidual, dweight from dy:
  3 + 4 = 7 trips. Floor: the two floors above, back to back.

Weight traffic (hidden elements per weight read or written) is added.
"""

from __future__ import annotations

import functools
import itertools
import re

import torch

from . import _peers
from ._measure import DECODE_MAX_TOKENS, DEVICE, INTERPRET, synchronize

WIDTHS = [2048, 2880, 4096, 5120, 7168, 8192, 16384]
DECODE_TOKENS = [1, 8, 64, 512]
PREFILL_TOKENS = [8192]
WIDE = (1024, 65536)
SUBSET_DTYPES, SUBSET_WIDTHS, SUBSET_TOKENS = ["fp16", "fp32"], [4096, 5120], [1, 64, 8192]
INTERPRETER_CASES = ["bf16 1x64", "fp32 8x1000", "fp32 2x20000"]

DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}
OPS = ["forward", "forward+residual", "inference", "forward+backward"]
ROW_TRIPS = {"forward": 3, "forward+residual": 4, "inference": 4, "forward+backward": 7}
WEIGHT_TRIPS = {"forward": 1, "forward+residual": 1, "inference": 1, "forward+backward": 3}
# torch.compile of every case costs minutes of CPU time in the interpreter, where
# the numbers are not performance history: the interpreter runs the fused op and eager.
IMPLS = ["fused", "eager"] if INTERPRET else _peers.IMPLS
EPS = 1e-6
# Graph-timed (decode) cases rotate over up to ROTATE copies of their inputs while they fit L2_SHARE bytes.
ROTATE, L2_SHARE = 8, 24 << 20


def name(dtype: str, tokens: int, hidden: int) -> str:
    return f"{dtype} {tokens}x{hidden}"


_CASE = re.compile(r"(\w+) ([1-9][0-9]*)x([1-9][0-9]*)")


def parse(case: str) -> tuple[str, int, int]:
    """(dtype, tokens, hidden) of ``"<dtype> <tokens>x<hidden>"``; ValueError naming the case otherwise."""
    m = _CASE.fullmatch(case) if isinstance(case, str) else None
    if m is None:
        raise ValueError(f"a case is '<dtype> <tokens>x<hidden>', tokens and hidden whole numbers >= 1 written "
                         f"without leading zeros (e.g. 'bf16 1x4096'), got {case!r}")
    if m[1] not in DTYPES:
        raise ValueError(f"a case is '<dtype> <tokens>x<hidden>' with dtype in {list(DTYPES)}, got {case!r}")
    return m[1], int(m[2]), int(m[3])


def gpu_cases(op: str) -> list[str]:
    """The GPU grid of ``op`` (see the module docstring)."""
    tokens = PREFILL_TOKENS if op == "forward+backward" else DECODE_TOKENS + PREFILL_TOKENS
    out = [name("bf16", t, w) for w in WIDTHS for t in tokens] + [name("bf16", *WIDE)]
    sub_tokens = [t for t in SUBSET_TOKENS if t in tokens]
    return out + [name(d, t, w) for d in SUBSET_DTYPES for w in SUBSET_WIDTHS for t in sub_tokens]


def cases(op: str) -> list[str]:
    """The cases of ``op`` this host runs: the GPU grid, or the interpreter's small cases."""
    return list(INTERPRETER_CASES) if INTERPRET else gpu_cases(op)


@functools.cache
def inputs(dtype: str, tokens: int, hidden: int, copy: int = 0) -> dict[str, torch.Tensor]:
    """Random x, residual, z, dy (tokens, hidden) and weight (hidden,) on the run's device, made once per copy."""
    g = torch.Generator(device=DEVICE).manual_seed(copy)
    dt = DTYPES[dtype]
    t = {k: torch.randn(tokens, hidden, generator=g, device=DEVICE, dtype=dt) for k in ("x", "r", "z", "dy")}
    t["w"] = torch.randn(hidden, generator=g, device=DEVICE, dtype=dt)
    return t


def copies(case: str) -> int:
    """Input copies a call rotates over: up to ROTATE at graph-timed (decode) cases while they fit L2_SHARE.

    A decode call's latency depends on where its tensors sit (which L2 slices
    serve them): one placement per process made the same commit's ratio to
    the floor read 1.49 in some processes and 1.55-1.58 in others on the
    H200. Rotating over copies at different addresses, as a model's layers
    do, averages the placements; the copies still fit in L2, which stays warm.
    """
    dtype, tokens, hidden = parse(case)
    if INTERPRET or tokens > DECODE_MAX_TOKENS:
        return 1
    per_copy = 5 * tokens * hidden * DTYPES[dtype].itemsize  # x, residual, z or dy, and the outputs
    return max(1, min(ROTATE, L2_SHARE // per_copy))


def _rotating(fns: list):
    if len(fns) == 1:
        return fns[0]
    turn = itertools.cycle(fns)
    return lambda: next(turn)()


def runner(op: str, impl: str, case: str):
    """A no-argument callable running ``op`` with ``impl`` once on this case's inputs (rotating over ``copies``).

    Raises NotImplementedError (asv: skipped) where the implementation does
    not run the case. ``inference`` updates a residual buffer of its own in
    place, from x scaled by 1e-3 so that thousands of calls stay far from
    float16's range.
    """
    dtype, tokens, hidden = parse(case)
    fn = _peers.implementation(impl, op, hidden, EPS, INTERPRET)
    return _rotating([_one(op, fn, inputs(dtype, tokens, hidden, k)) for k in range(copies(case))])


def _one(op: str, fn, t: dict):
    if op == "inference":
        x, r = t["x"] * 1e-3, t["r"].clone()
        return lambda: fn(x, r, t["w"])
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


def floor(op: str, case: str):
    """The same-bytes memory-bound reference of ``op`` (see the module docstring), rotating like the op."""
    dtype, tokens, hidden = parse(case)
    return _rotating([_floor(op, inputs(dtype, tokens, hidden, k)) for k in range(copies(case))])


def _floor(op: str, t: dict):
    x, r, z = t["x"], t["r"], t["z"]
    y = torch.empty_like(x)
    if op == "forward":
        return lambda: torch.add(x, r, out=y)
    if op in ("forward+residual", "inference"):
        return lambda: torch.addcmul(x, r, z, out=y)
    return lambda: (torch.add(x, r, out=y), torch.addcmul(x, r, z, out=y))


def bytes_moved(op: str, case: str) -> int:
    """Bytes one call of ``op`` must move (the traffic model above)."""
    dtype, tokens, hidden = parse(case)
    e = DTYPES[dtype].itemsize
    return ROW_TRIPS[op] * tokens * hidden * e + WEIGHT_TRIPS[op] * hidden * e


def _compile_one(job) -> None:
    torch._dynamo.reset()  # one graph per case: stay under dynamo's recompile limit
    runner(*job)()
    synchronize()


def prewarm(jobs: list[tuple], workers: int) -> None:
    """Run each job ``(op, impl, case)`` once, in ``workers`` fresh processes.

    For torch.compile peers: a cold compile takes seconds per case (and the
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

"""asv benchmarks of ``fusedkernel.add_rmsnorm`` and its peers.

Each metric is its own benchmark, so each has its own history on the site.
Ops and their floors are defined in ``_cases``.

* ``Forward.time_device``, ``ForwardResidual.time_device``,
  ``Training.time_device``: device time (s) of one call of the fused op
  (forward; forward returning the residual sum; forward + backward): CUDA
  events, L2 flushed before each call, one asv sample per call, so asv's
  statistics (median, IQR, significance in ``asv continuous``) apply. These
  are the benchmarks that get regression flags and gate pull requests.
* ``Throughput.track_gbps`` and ``Throughput.track_floor_fraction`` for every
  op and implementation (fused and the peers: torch.compile, Liger, eager):
  GB/s under the op's traffic model, and floor time / op time with the two
  measured interleaved (1.0 = as fast as the same-bytes floor). All of them
  are measured in one process (``setup_cache``): warm clocks, no per-case
  process start, and torch.compile's graphs compiled in parallel first.
* ``Host.time_wall``: host wall time of one synchronized call (s) at decode
  shapes, next to the floor's, which is what a decode step pays.
  ``HostRatio.track_ratio``: the fused op's host time over the floor's,
  measured side by side in one process (host times cluster per process, so
  the ratio of two ``Host.time_wall`` results mixes two processes' CPUs);
  ``HostRatioInplace.track_ratio``: the same with ``inplace_residual=True``.

asv runs every parameter combination of every benchmark in its own process
(a fork of one server that has imported torch), so selecting benchmarks with
``-b 'Forward.time_device[(].fused.,..bf16'`` costs only what it selects
(except Throughput, whose one measuring process covers all its cases).
"""

import os

import torch

from . import _cases as cases
from ._cases import prewarm
from ._measure import DeviceClock, interleaved_case_medians, interleaved_wall_medians, synchronize, warm_up

WARMUP_S = 0.2
CLOCK = DeviceClock()


class _DeviceTime:
    """Device time of one call of the fused op; ``op`` is set by each subclass."""

    op = "forward"
    # Explicit versions keep a benchmark's history across edits of its code
    # (asv otherwise versions it by a hash of the code); bump one only when what
    # it measures changes.
    version = "1"
    # impl is a parameter (with one value) so the history keeps its v0 name.
    params = [["fused"], list(cases.DTYPES), cases.SHAPES]
    param_names = ["impl", "dtype", "shape"]
    # asv_runner >= 0.3 re-runs setup before every timed call: setup builds only
    # what is missing (inputs are cached per process) and warms up once.
    number = 1
    repeat = (20, 200, 2.0)
    warmup_time = 0.0
    rounds = 1
    timeout = 120

    def setup(self, impl, dtype, shape):
        cases.check_runs_here(shape)
        if getattr(self, "_case", None) != (impl, dtype, shape):
            self.fn = cases.runner(self.op, impl, dtype, shape)
            warm_up(self.fn, WARMUP_S)
            CLOCK.cover(self.fn)
            self._case = (impl, dtype, shape)

    def time_device(self, impl, dtype, shape):
        CLOCK.call(self.fn)

    time_device.timer = CLOCK


class Forward(_DeviceTime):
    op = "forward"


class ForwardResidual(_DeviceTime):
    op = "forward+residual"


class Training(_DeviceTime):
    op = "forward+backward"
    # 2: the spin before each call covers the host's enqueue time; results of
    # version 1 (a fixed 0.1 ms spin) included autograd's host gaps.
    version = "2"
    # Each sample waits out a spin of twice autograd's host time (~1 ms): at
    # most 1 s of samples keeps this benchmark from being half the suite's time.
    repeat = (20, 100, 1.0)


def measure_all() -> dict:
    """{(op, impl, dtype, shape): (op seconds, floor seconds)} for every case this host runs."""
    jobs = [(op, impl, d, s) for d, s in cases.cases() for op in cases.OPS for impl in cases.IMPLS]
    workers = min(12, (os.cpu_count() or 1) - 1)
    if workers >= 2:
        prewarm([j for j in jobs if j[1] == "compiled"], workers)
    out, first = {}, True
    for dtype, shape in cases.cases():
        for op in cases.OPS:
            floor = cases.floor(op, dtype, shape)
            torch._dynamo.reset()  # one graph per case: stay under dynamo's recompile limit
            fns = {}
            for impl in cases.IMPLS:
                try:
                    fns[impl] = cases.runner(op, impl, dtype, shape)
                except NotImplementedError:
                    continue
                warm_up(fns[impl], 1.0 if first else 0.05)
                first = False
            warm_up(floor, 0.02)
            for impl, times in interleaved_case_medians(fns, floor).items():
                out[op, impl, dtype, shape] = times
        cases.inputs.cache_clear()  # free this case's tensors before the next
    return out


class Throughput:
    params = [cases.OPS, cases.IMPLS, list(cases.DTYPES), cases.SHAPES]
    param_names = ["op", "impl", "dtype", "shape"]
    timeout = 1800  # setup_cache: every case, and cold torch.compile graphs
    # 2: single-call device times (DeviceClock) instead of do_bench's back-to-back
    # calls, which timed host-bound cases (decode, forward+backward) at host speed.
    # 3: the implementations of a case measured in interleaved rounds, not one
    # after another (the first, fused, read slow at decode shapes: _measure.interleaved_case_medians).
    version = "3"

    def setup_cache(self):
        return measure_all()

    def setup(self, times, op, impl, dtype, shape):
        cases.check_runs_here(shape)
        if (op, impl, dtype, shape) not in times:
            raise NotImplementedError(f"{impl} does not run {op} at {dtype} {shape} here")

    def track_gbps(self, times, op, impl, dtype, shape):
        return cases.bytes_moved(op, dtype, shape) / times[op, impl, dtype, shape][0] / 1e9

    track_gbps.unit = "GB/s"

    def track_floor_fraction(self, times, op, impl, dtype, shape):
        op_s, floor_s = times[op, impl, dtype, shape]
        return floor_s / op_s

    track_floor_fraction.unit = "fraction of floor"


class Host:
    """Host wall time per synchronized call: what a decode step pays."""

    version = "1"
    params = [["fused", "floor"], list(cases.DTYPES), cases.DECODE_SHAPES + cases.INTERPRETER_SHAPES[:1]]
    param_names = ["impl", "dtype", "shape"]
    number = 1
    repeat = (50, 500, 1.0)
    warmup_time = 0.0
    rounds = 1
    timeout = 120

    def setup(self, impl, dtype, shape):
        cases.check_runs_here(shape)
        if getattr(self, "_case", None) != (impl, dtype, shape):
            fn = (cases.floor("forward", dtype, shape) if impl == "floor"
                  else cases.runner("forward", impl, dtype, shape))
            self.fn = lambda: (fn(), synchronize())
            warm_up(self.fn, WARMUP_S)
            self._case = (impl, dtype, shape)

    def time_wall(self, impl, dtype, shape):
        self.fn()


class HostRatio:
    """Host wall time per synchronized call of the fused op over the floor's, side by side in one process."""

    version = "1"
    params = [["fused"], list(cases.DTYPES), cases.DECODE_SHAPES + cases.INTERPRETER_SHAPES[:1]]
    param_names = ["impl", "dtype", "shape"]
    timeout = 180

    def setup(self, impl, dtype, shape):
        cases.check_runs_here(shape)

    def fused(self, dtype, shape):
        return cases.runner("forward", "fused", dtype, shape)

    def track_ratio(self, impl, dtype, shape):
        fused, floor = self.fused(dtype, shape), cases.floor("forward", dtype, shape)
        warm_up(fused, WARMUP_S)
        warm_up(floor, WARMUP_S)
        op_s, floor_s = interleaved_wall_medians(fused, floor)
        return op_s / floor_s

    track_ratio.unit = "x floor"


class HostRatioInplace(HostRatio):
    """:class:`HostRatio` of the decode call inference engines make: ``inplace_residual=True``.

    The residual buffer is updated in place by every call (x scaled by 1e-3,
    so thousands of calls stay far from float16's range). Same floor,
    ``torch.add(x, r, out=y)``: the host's cost of one launch on these tensors.
    """

    version = "1"

    def fused(self, dtype, shape):
        import fusedkernel

        t = cases.inputs(dtype, shape)
        x, r, w = t["x"] * 1e-3, t["r"].clone(), t["w"]
        return lambda: fusedkernel.add_rmsnorm(x, r, w, cases.EPS, inplace_residual=True)

"""asv benchmarks of ``fusedkernel.add_rmsnorm`` and its peers (forward).

Each metric is its own benchmark, so each has its own history on the site:

* ``Forward.time_device``: device time of one call (s): CUDA events, L2
  flushed before each call, one asv sample per call, so asv's statistics
  (median, IQR, confidence interval) apply to it.
* ``Throughput.track_gbps``: GB/s under the traffic model of ``_cases``.
* ``Throughput.track_floor_fraction``: floor time / op time, the two measured
  interleaved in one process (1.0 = as fast as ``torch.add`` of the same bytes).
* ``Host.time_wall``: host wall time of one synchronized call (s), decode
  shapes, next to the floor's, which is what a decode step pays.

asv runs every parameter combination of every benchmark in its own process
(a fork of one server that has imported torch), so selecting benchmarks with
``-b 'Forward.time_device\\('fused', 'bf16''`` costs only what it selects.
"""

from . import _cases as cases
from ._measure import DeviceClock, interleaved_medians, synchronize, warm_up

IMPLS = ["fused", "eager", "compiled"]
WARMUP_S = 0.2
CLOCK = DeviceClock()
FORWARD_PARAMS = [IMPLS, list(cases.DTYPES), cases.GPU_SHAPES + cases.INTERPRETER_SHAPES]


class Forward:
    params = FORWARD_PARAMS
    param_names = ["impl", "dtype", "shape"]
    timeout = 300  # the first torch.compile of a shape takes a while
    # asv_runner >= 0.3 re-runs setup before every timed call: setup builds only
    # what is missing (inputs are cached per process) and warms up once.
    number = 1
    repeat = (20, 200, 2.0)
    warmup_time = 0.0
    rounds = 1

    def setup(self, impl, dtype, shape):
        cases.check_runs_here(shape)
        if getattr(self, "_case", None) != (impl, dtype, shape):
            self.fn = cases.call(impl, dtype, shape)
            warm_up(self.fn, WARMUP_S)
            self._case = (impl, dtype, shape)

    def time_device(self, impl, dtype, shape):
        CLOCK.call(self.fn)

    time_device.timer = CLOCK


class Throughput:
    params = FORWARD_PARAMS
    param_names = ["impl", "dtype", "shape"]
    timeout = 300

    def setup(self, impl, dtype, shape):
        cases.check_runs_here(shape)
        self.fn, self.floor = cases.call(impl, dtype, shape), cases.floor(dtype, shape)
        warm_up(self.fn, WARMUP_S)
        warm_up(self.floor, 0.02)

    def track_gbps(self, impl, dtype, shape):
        op_s, _ = interleaved_medians(self.fn, self.floor)
        return cases.bytes_moved(impl, dtype, shape) / op_s / 1e9

    track_gbps.unit = "GB/s"

    def track_floor_fraction(self, impl, dtype, shape):
        op_s, floor_s = interleaved_medians(self.fn, self.floor)
        return floor_s / op_s

    track_floor_fraction.unit = "fraction of floor"


class Host:
    """Host wall time per synchronized call: what a decode step pays."""

    params = [IMPLS + ["floor"], list(cases.DTYPES), cases.DECODE_SHAPES + cases.INTERPRETER_SHAPES[:1]]
    param_names = ["impl", "dtype", "shape"]
    number = 1
    repeat = (50, 500, 1.0)
    warmup_time = 0.0
    rounds = 1
    timeout = 300

    def setup(self, impl, dtype, shape):
        cases.check_runs_here(shape)
        if getattr(self, "_case", None) != (impl, dtype, shape):
            fn = cases.floor(dtype, shape) if impl == "floor" else cases.call(impl, dtype, shape)
            self.fn = lambda: (fn(), synchronize())
            warm_up(self.fn, WARMUP_S)
            self._case = (impl, dtype, shape)

    def time_wall(self, impl, dtype, shape):
        self.fn()

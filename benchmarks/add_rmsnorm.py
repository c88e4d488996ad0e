"""asv benchmarks of ``fusedkernel.add_rmsnorm`` and its peers (forward).

Each metric is its own benchmark, so each has its own history on the site:

* ``time_device``: device time of one call (s), CUDA events, L2 flushed
  before each call; one asv sample per call, so asv's statistics apply.
* ``track_gbps``: GB/s under the traffic model of ``_cases``.
* ``track_floor_fraction``: floor time / op time, interleaved in one process.
* ``Host.time_wall``: host wall time of one synchronized call (s), decode shapes.
"""

from . import _cases as cases
from ._measure import DeviceClock, floor_fraction, median_device_time, synchronize, warm_up

IMPLS = ["fused", "eager", "compiled"]
WARMUP_S = 0.2
CLOCK = DeviceClock()


class Forward:
    params = [IMPLS, list(cases.DTYPES), cases.GPU_SHAPES + cases.INTERPRETER_SHAPES]
    param_names = ["impl", "dtype", "shape"]
    timeout = 300  # the first compile of a shape by torch.compile takes a while
    # asv_runner >= 0.3 re-runs setup before every timed call, so setup only
    # builds what is missing (cases.inputs is cached per process) and warms up once.
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

    def track_gbps(self, impl, dtype, shape):
        return cases.bytes_moved(impl, dtype, shape) / median_device_time(self.fn) / 1e9

    track_gbps.unit = "GB/s"

    def track_floor_fraction(self, impl, dtype, shape):
        floor = cases.floor(dtype, shape)
        warm_up(floor, 0.05)
        return floor_fraction(self.fn, floor)

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

"""Measurement support for the asv suite: device clock, warm-up, floor, GB/s.

Kept with the benchmarks, not in the package, so every commit in the history
is measured by the same method (asv imports this suite once, from the working
tree, and the package from each benchmarked commit).

Mode: on a GPU host times are CUDA-event device times of single calls, with the
L2 flushed before every call (Triton's own flush buffer, as
``triton.testing.do_bench`` does) and the GPU kept ahead of the host (see
DeviceClock). Under TRITON_INTERPRET=1 (no GPU) the "device" is the CPU running the
interpreter and times are host wall times. The mode is read from the
environment, not from torch.cuda, so importing this module (which asv's
forkserver does before forking) never initializes CUDA.
"""

from __future__ import annotations

import statistics
import time

import torch
import triton

INTERPRET = bool(triton.knobs.runtime.interpret)
DEVICE = "cpu" if INTERPRET else "cuda"


def synchronize() -> None:
    if not INTERPRET:
        torch.cuda.synchronize()


# The spin before each timed call runs at the SM clock: ~2e9 cycles/s on the
# H200 (1980 MHz under load; slower clocks only make the spin longer).
SPIN_HZ = 2.0e9
MIN_SPIN_S = 100e-6


class DeviceClock:
    """An asv ``timer``: seconds of device time spent inside :meth:`call`.

    asv reads the timer before and after each timed call; each read waits for
    the GPU, then adds the CUDA-event time of the calls made since the last
    read. So an asv sample is the device time of the call alone (L2 flushed
    before it, the flush not counted), and asv's statistics apply to it.

    Before each call the GPU spins for longer than the host takes to enqueue
    the call (see :meth:`cover`), so the events time the GPU's work, not the
    host's launch gaps. Without it, a call the host launches more slowly than
    the GPU runs it (decode shapes; forward + backward, with autograd's host
    work between the kernels) is timed at host speed.
    """

    def __init__(self) -> None:
        self.total = 0.0
        self.spin_s = MIN_SPIN_S
        # CUDA event pairs on a GPU; wall times (s) in the interpreter.
        self._pending: list = []
        self._flush_buffer = None

    def __call__(self) -> float:
        self.total += sum(self.drain())
        return self.total

    def drain(self) -> list[float]:
        """Device times (s) of the calls since the last drain, in order."""
        if INTERPRET or not self._pending:
            times = list(self._pending)
        else:
            torch.cuda.synchronize()
            times = [s.elapsed_time(e) / 1e3 for s, e in self._pending]
        self._pending.clear()
        return times

    def cover(self, fn) -> None:
        """Set the spin to twice the host time of enqueuing ``fn`` (median of 5), plus 50 µs."""
        if INTERPRET:
            return
        host = []
        for _ in range(5):
            torch.cuda.synchronize()
            start = time.perf_counter()
            fn()
            host.append(time.perf_counter() - start)
        torch.cuda.synchronize()
        self.spin_s = max(MIN_SPIN_S, 2 * statistics.median(host) + 50e-6)

    def call(self, fn) -> None:
        if INTERPRET:
            start = time.perf_counter()
            fn()
            self._pending.append(time.perf_counter() - start)
            return
        driver = triton.runtime.driver.active
        if self._flush_buffer is None:
            self._flush_buffer = driver.get_empty_cache_for_benchmark()
        driver.clear_cache(self._flush_buffer)
        torch.cuda._sleep(int(self.spin_s * SPIN_HZ))
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        self._pending.append((start, end))


def warm_up(fn, seconds: float) -> None:
    """Run ``fn`` back to back for ``seconds`` of wall time (at least 3 calls).

    The SM clock idles at 345 MHz on the H200 and ramps up under load; the
    first calls of a fresh process also pay for kernel loading.
    """
    deadline = time.perf_counter() + seconds
    calls = 0
    while calls < 3 or time.perf_counter() < deadline:
        fn()
        calls += 1
        if calls % 8 == 0:
            synchronize()
    synchronize()


def median_device_time(fn, samples: int = 25) -> float:
    """Median device time of one call of ``fn``, in seconds (L2 flushed per call).

    :class:`DeviceClock` samples, enqueued back to back and read once; in the
    interpreter, wall times of 5 calls.
    """
    clock = DeviceClock()
    clock.cover(fn)
    for _ in range(5 if INTERPRET else samples):
        clock.call(fn)
    return statistics.median(clock.drain())


def interleaved_medians(op, floor, rounds: int = 3) -> tuple[float, float]:
    """Median device times (s) of ``op`` and ``floor``, measured in alternating short runs.

    Alternating cancels most of the clock drift of an unlocked GPU: both see
    the same clocks, so their ratio moves less than either time does. In the
    interpreter one round (of 5 calls each) is enough: its times are CPU times.
    """
    return interleaved_case_medians({"op": op}, floor, rounds)["op"]


def interleaved_case_medians(ops: dict, floor, rounds: int = 3) -> dict:
    """{name: (median device time of ``ops[name]``, of ``floor`` beside it)}, in seconds.

    Every round measures each op right after a run of the floor, all ops of
    the case in one round, the round's first op moving by one each round.
    Measured one op after another instead, the first one took the GPU's state
    after the host's set-up alone: on the H200 at decode shapes the floor
    beside the first (the fused op) read 4-13% slower than beside the peers
    in two whole-suite runs (``docs/performance.md``, section 1), while at
    prefill shapes the floors agreed within 0.5%. One round in the
    interpreter (CPU times).
    """
    rounds = 1 if INTERPRET else rounds
    names = list(ops)
    op_t = {name: [] for name in names}
    floor_t = {name: [] for name in names}
    for i in range(rounds):
        k = i % len(names)
        for name in names[k:] + names[:k]:
            floor_t[name].append(median_device_time(floor))
            op_t[name].append(median_device_time(ops[name]))
    return {name: (statistics.median(op_t[name]), statistics.median(floor_t[name])) for name in names}


def interleaved_wall_medians(op, floor, rounds: int = 9, calls: int = 50) -> tuple[float, float]:
    """Median host wall times (s) of one synchronized call of ``op`` and of ``floor``, side by side.

    Alternating runs of ``calls`` single calls each, in one process: host
    times cluster per process (the CPU it lands on and its neighbours;
    docs/performance.md, section 3), so only a ratio measured in one process
    tells the two apart. In the interpreter, 1 round of 5 calls each.
    """
    if INTERPRET:
        rounds, calls = 1, 5
    op_t, floor_t = [], []
    for _ in range(rounds):
        for fn, out in ((floor, floor_t), (op, op_t)):
            for _ in range(calls):
                synchronize()
                t0 = time.perf_counter()
                fn()
                synchronize()
                out.append(time.perf_counter() - t0)
    return statistics.median(op_t), statistics.median(floor_t)

"""How the suite measures: one timing method per regime, interleaved with the floor.

Kept with the benchmarks, not in the package, so every commit in the history
is measured by the same method (asv imports this suite once, from the working
tree, and the package from each benchmarked commit).

Methods (``METHODS``; the one a case gets follows from its token count):

* ``cuda-graph`` (GPU, decode: <= 512 tokens): ``triton.testing.do_bench_cudagraph``
  captures many calls in one CUDA graph and replays it (per-call time = graph
  time / calls, median of its 10 replays), with a warm L2: how inference
  engines run a decode step, whose tensors are L2-resident. The calls rotate
  over copies of the inputs at different addresses (``_cases.copies``).
* ``l2-flushed`` (GPU, prefill): single calls timed with CUDA events, the L2
  flushed before each and the GPU kept ahead of the host (:class:`DeviceClock`);
  median of a few calls.
* ``interpreter-wall`` (no GPU, ``TRITON_INTERPRET=1``): wall time of calls
  running in Triton's interpreter on the CPU, torch on one thread (:func:`one_thread`).
  Not performance history: it only shows the suite runs.

Every implementation of a case is measured in rounds, each right after the
floor (the same-bytes memory-bound reference), the round's first
implementation moving by one each round (:func:`interleaved_rounds`). The
flagged metric is op time / floor time per round: both see the same clocks
and the same runner, so their ratio survives what moves both.

The mode is read from the environment, not from torch.cuda, so importing this
module (which asv's forkserver does before forking) never initializes CUDA.
"""

from __future__ import annotations

import contextlib
import statistics
import time

import torch
import triton
import triton.testing

INTERPRET = bool(triton.knobs.runtime.interpret)
DEVICE = "cpu" if INTERPRET else "cuda"
DECODE_MAX_TOKENS = 512
METHODS = {
    "cuda-graph": ("CUDA graph of many calls replayed, warm L2, calls rotating over up to 8 input copies "
                   "(triton.testing.do_bench_cudagraph, median)"),
    "l2-flushed": "single calls, CUDA events, L2 flushed before each, GPU kept ahead of the host (median)",
    "interpreter-wall": ("wall time of calls in Triton's interpreter on the CPU, torch on one thread (median; not "
                         "performance history)"),
}
# Rounds of (floor, op) per implementation: the samples of each result. At least 7: with n samples a
# side, asv's Mann-Whitney test (p < 0.002) needs n >= 7 to call even two fully separated sets different
# (n = 6: p = 0.0022), and the gate and the bisect flag only what it calls different.
ROUNDS = 8 if INTERPRET else 12
# Graph length: ~2 ms of calls per graph (do_bench_cudagraph sizes it from a host-bound estimate).
GRAPH_REP_MS = 2
FLUSHED_CALLS = 5
WALL_CALLS = 3


def synchronize() -> None:
    if not INTERPRET:
        torch.cuda.synchronize()


def method(tokens: int) -> str:
    """The timing method of a case of ``tokens`` rows on this host (see ``METHODS``)."""
    if INTERPRET:
        return "interpreter-wall"
    return "cuda-graph" if tokens <= DECODE_MAX_TOKENS else "l2-flushed"


# The spin before each timed call runs at the SM clock: ~2e9 cycles/s on the
# H200 (1980 MHz under load; slower clocks only make the spin longer).
SPIN_HZ = 2.0e9
MIN_SPIN_S = 100e-6


class DeviceClock:
    """Device time of single calls, L2 flushed before each (the ``l2-flushed`` method).

    Before each call the GPU spins for longer than the host takes to enqueue
    the call (see :meth:`cover`), so the events time the GPU's work, not the
    host's launch gaps (forward + backward, with autograd's host work between
    its kernels, is host-bound otherwise).
    """

    def __init__(self) -> None:
        self.spin_s = MIN_SPIN_S
        self._pending: list = []
        self._flush_buffer = None

    def drain(self) -> list[float]:
        """Device times (s) of the calls since the last drain, in order."""
        torch.cuda.synchronize()
        times = [s.elapsed_time(e) / 1e3 for s, e in self._pending]
        self._pending.clear()
        return times

    def cover(self, fn) -> None:
        """Set the spin to twice the host time of enqueuing ``fn`` (median of 5), plus 50 µs."""
        host = []
        for _ in range(5):
            torch.cuda.synchronize()
            start = time.perf_counter()
            fn()
            host.append(time.perf_counter() - start)
        torch.cuda.synchronize()
        self.spin_s = max(MIN_SPIN_S, 2 * statistics.median(host) + 50e-6)

    def call(self, fn) -> None:
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


def flushed_time(fn, calls: int = FLUSHED_CALLS) -> float:
    """Median device time (s) of single calls of ``fn``, L2 flushed before each."""
    clock = DeviceClock()
    clock.cover(fn)
    for _ in range(calls):
        clock.call(fn)
    return statistics.median(clock.drain())


def graph_time(fn) -> float:
    """Device time (s) per call of ``fn`` replayed in a CUDA graph of many calls, warm L2."""
    return triton.testing.do_bench_cudagraph(fn, rep=GRAPH_REP_MS, return_mode="median") / 1e3


@contextlib.contextmanager
def one_thread():
    """torch on one CPU thread inside (the interpreter's timing): a floor above ATen's parallel grain otherwise
    waits for a core other jobs hold, where the interpreted op runs on one (docs/suite.md)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


def wall_time(fn, calls: int = WALL_CALLS) -> float:
    """Median wall time (s) of ``calls`` calls of ``fn`` (the interpreter's method; torch on one thread)."""
    out = []
    with one_thread():
        for _ in range(calls):
            start = time.perf_counter()
            fn()
            out.append(time.perf_counter() - start)
    return statistics.median(out)


TIMERS = {"cuda-graph": graph_time, "l2-flushed": flushed_time, "interpreter-wall": wall_time}


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


def interleaved_rounds(ops: dict, floor, timer, rounds: int = ROUNDS) -> dict:
    """{name: ([op seconds per round], [floor seconds per round])}, each op timed right after the floor.

    All ops of a case in every round, the round's first op moving by one each
    round: measured one op after another instead, the first one took the
    GPU's state after the host's set-up alone (on the H200 the floor beside
    the first read 4-13% slower at decode shapes in two whole-suite runs).
    """
    names = list(ops)
    out = {name: ([], []) for name in names}
    for i in range(rounds):
        k = i % len(names)
        for name in names[k:] + names[:k]:
            out[name][1].append(timer(floor))
            out[name][0].append(timer(ops[name]))
    return out


def interleaved_medians(op, floor, rounds: int = 3, timer=None) -> tuple[float, float]:
    """Median times (s) of ``op`` and of ``floor`` beside it (the tuners' timing; L2 flushed on a GPU)."""
    timer = timer or (wall_time if INTERPRET else flushed_time)
    op_s, floor_s = interleaved_rounds({"op": op}, floor, timer, rounds)["op"]
    return statistics.median(op_s), statistics.median(floor_s)


def interleaved_wall_medians(op, floor, rounds: int = 9, calls: int = 50) -> tuple[float, float]:
    """Median host wall times (s) of one synchronized call of ``op`` and of ``floor``, side by side.

    Alternating runs of ``calls`` single calls each, in one process: host
    times cluster per process (the CPU it lands on and its neighbours), so
    only a ratio measured in one process tells the two apart. In the
    interpreter, 1 round of 5 calls each.
    """
    if INTERPRET:
        rounds, calls = 1, 5
    op_t, floor_t = [], []
    with one_thread() if INTERPRET else contextlib.nullcontext():
        for _ in range(rounds):
            for fn, out in ((floor, floor_t), (op, op_t)):
                for _ in range(calls):
                    synchronize()
                    t0 = time.perf_counter()
                    fn()
                    synchronize()
                    out.append(time.perf_counter() - t0)
    return statistics.median(op_t), statistics.median(floor_t)

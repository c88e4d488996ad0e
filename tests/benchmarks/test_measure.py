"""benchmarks/_measure.py: methods, interleaving and clocks."""

import time

import pytest
import torch

from benchmarks import _measure as measure


def test_each_regime_gets_its_method():
    if measure.INTERPRET:
        assert {measure.method(t) for t in (1, 512, 8192)} == {"interpreter-wall"}
    else:
        assert measure.method(1) == measure.method(512) == "cuda-graph"
        assert measure.method(513) == measure.method(8192) == "l2-flushed"
    assert set(measure.TIMERS) == set(measure.METHODS)


def test_interleaved_rounds_rotate_the_ops_and_pair_each_with_its_own_floor():
    # Every round measures each op right after the floor, the first op moving
    # by one per round, so no op always takes the case's first slot.
    calls, clock = [], iter(range(1, 100))

    def timer(fn):
        calls.append(fn.__name__)
        return float(next(clock))

    def floor(): ...
    def a(): ...
    def b(): ...
    def c(): ...

    out = measure.interleaved_rounds({"a": a, "b": b, "c": c}, floor, timer, rounds=3)
    assert calls == ["floor", "a", "floor", "b", "floor", "c",
                     "floor", "b", "floor", "c", "floor", "a",
                     "floor", "c", "floor", "a", "floor", "b"]
    # Op times and the floor times measured right before each, round by round.
    assert out == {"a": ([2.0, 12.0, 16.0], [1.0, 11.0, 15.0]), "b": ([4.0, 8.0, 18.0], [3.0, 7.0, 17.0]),
                   "c": ([6.0, 10.0, 14.0], [5.0, 9.0, 13.0])}


def test_interleaved_medians_give_the_op_beside_the_floor():
    times = iter([1.0, 10.0, 2.0, 20.0, 3.0, 30.0])  # floor, op, round after round
    assert measure.interleaved_medians(lambda: None, lambda: None, rounds=3, timer=lambda fn: next(times)) \
        == (20.0, 2.0)


def test_interleaved_wall_medians_alternate_and_time_each_call():
    order = []

    def op():
        order.append("op")
        time.sleep(0.002)

    def floor():
        order.append("floor")

    op_s, floor_s = measure.interleaved_wall_medians(op, floor, rounds=3, calls=4)
    rounds, calls = (1, 5) if measure.INTERPRET else (3, 4)
    assert order == (["floor"] * calls + ["op"] * calls) * rounds  # floor first in each round
    assert op_s >= 0.002 and 0 < floor_s


def test_interpreter_timing_runs_torch_on_one_thread(monkeypatch):
    # A review's find: fp32 2x20000's floor (above ATen's grain) ran on 2 threads and waited for a second core
    # other jobs held, 16 ms against 0.014 ms: the interpreter's ratios swung 1000x between runs.
    threads = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        seen = []
        fn = lambda: seen.append(torch.get_num_threads())  # noqa: E731
        measure.wall_time(fn, calls=2)
        assert seen == [1, 1] and torch.get_num_threads() == 2
        monkeypatch.setattr(measure, "INTERPRET", True)
        measure.interleaved_wall_medians(fn, fn)
        assert set(seen) == {1} and torch.get_num_threads() == 2
        with pytest.raises(ZeroDivisionError), measure.one_thread():
            1 / 0
        assert torch.get_num_threads() == 2  # restored on an error too
    finally:
        torch.set_num_threads(threads)


def test_wall_time_is_the_median_call():
    sleeps = iter([0.03, 0.001, 0.002])
    assert 0.0015 < measure.wall_time(lambda: time.sleep(next(sleeps)), calls=3) < 0.02


@pytest.mark.cuda
def test_gpu_timers_time_device_work():
    x = torch.ones(1 << 24, device="cuda")
    small = measure.graph_time(lambda: x[:1 << 10].mul_(1.0))
    big = measure.graph_time(lambda: x.mul_(1.0))
    assert 0 < small < big
    assert measure.flushed_time(lambda: x.mul_(1.0)) > 0

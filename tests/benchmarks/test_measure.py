"""benchmarks/_measure.py: the suite's clocks."""

import time

import torch

from benchmarks import _measure as measure


def test_interleaved_wall_medians_alternate_and_time_each_call():
    order = []

    def op():
        order.append("op")
        time.sleep(0.002)

    def floor():
        order.append("floor")

    op_s, floor_s = measure.interleaved_wall_medians(op, floor, rounds=3, calls=4)
    rounds, calls = (1, 5) if measure.INTERPRET else (3, 4)
    assert order == (["floor"] * calls + ["op"] * calls) * rounds  # floor first in each round, side by side
    assert op_s >= 0.002 and 0 < floor_s


def test_device_clock_gives_one_time_per_call_and_a_running_total():
    clock = measure.DeviceClock()
    x = torch.ones(1 << 16, device=measure.DEVICE)

    def fn():
        x.mul_(1.0)

    clock.cover(fn)
    for _ in range(3):
        clock.call(fn)
    times = clock.drain()
    assert len(times) == 3 and all(t > 0 for t in times)
    assert clock.drain() == []
    clock.call(fn)
    total = clock()
    assert total > 0 and clock() == total  # read twice: nothing new was timed


def test_interleaved_case_medians_rotate_the_ops_and_pair_each_with_its_own_floor(monkeypatch):
    # On a GPU: every round measures each op beside the floor, the first op
    # moving by one per round, so no op always takes the case's first slot.
    calls = []
    fake_times = {"floor": iter([1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0]),
                  "a": iter([10.0, 11.0, 12.0]), "b": iter([20.0, 21.0, 22.0]), "c": iter([30.0, 31.0, 32.0])}

    def fake_median_device_time(fn):
        calls.append(fn.__name__)
        return next(fake_times[fn.__name__])

    def floor(): ...
    def a(): ...
    def b(): ...
    def c(): ...

    monkeypatch.setattr(measure, "INTERPRET", False)
    monkeypatch.setattr(measure, "median_device_time", fake_median_device_time)
    out = measure.interleaved_case_medians({"a": a, "b": b, "c": c}, floor, rounds=3)
    assert calls == ["floor", "a", "floor", "b", "floor", "c",
                     "floor", "b", "floor", "c", "floor", "a",
                     "floor", "c", "floor", "a", "floor", "b"]
    # Floors beside a: rounds 1, 2, 3 -> 1.0, 6.0, 8.0; beside b: 2.0, 4.0, 9.0; beside c: 3.0, 5.0, 7.0.
    assert out == {"a": (11.0, 6.0), "b": (21.0, 4.0), "c": (31.0, 5.0)}


def test_interleaved_case_medians_run_one_round_in_the_interpreter(monkeypatch):
    calls = []
    monkeypatch.setattr(measure, "INTERPRET", True)
    monkeypatch.setattr(measure, "median_device_time", lambda fn: calls.append(fn) or 1.0)
    ops = {"a": lambda: None, "b": lambda: None}
    assert measure.interleaved_case_medians(ops, lambda: None, rounds=3) == {"a": (1.0, 1.0), "b": (1.0, 1.0)}
    assert len(calls) == 4


def test_interleaved_medians_time_the_op_beside_the_floor(monkeypatch):
    monkeypatch.setattr(measure, "INTERPRET", False)
    times = iter([1.0, 10.0, 2.0, 20.0, 3.0, 30.0])  # floor, op, round after round
    monkeypatch.setattr(measure, "median_device_time", lambda fn: next(times))
    assert measure.interleaved_medians(lambda: None, lambda: None, rounds=3) == (20.0, 2.0)

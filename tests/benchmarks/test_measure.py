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

"""benchmarks/add_rmsnorm.py: what the host-time benchmarks call."""

import torch

from benchmarks import _cases as cases
from benchmarks import add_rmsnorm as suite

SHAPE = cases.INTERPRETER_SHAPES[0] if cases.INTERPRET else cases.DECODE_SHAPES[1]


def test_host_ratio_inplace_updates_one_residual_buffer_call_after_call():
    fused = suite.HostRatioInplace().fused("fp32", SHAPE)
    y, buf = fused()
    before = buf.clone()
    y2, buf2 = fused()
    assert buf2 is buf and y2.shape == y.shape
    x = cases.inputs("fp32", SHAPE)["x"] * 1e-3
    torch.testing.assert_close(buf, before + x)
    assert not torch.equal(cases.inputs("fp32", SHAPE)["r"], buf)  # the suite's shared inputs stay as made


def test_measure_all_times_each_implementation_of_a_case_together(monkeypatch):
    # One case, three implementations (one unsupported): each supported one is
    # warmed up and handed to one interleaved measurement with the case's floor.
    runners = {}

    def runner(op, impl, dtype, shape):
        if impl == "liger":
            raise NotImplementedError
        runners[impl] = lambda: None
        return runners[impl]

    floor = lambda: None  # noqa: E731
    measured, warmed = [], []

    def case_medians(fns, fl):
        measured.append((dict(fns), fl))
        return {impl: (len(impl), 1.0) for impl in fns}

    monkeypatch.setattr(cases, "cases", lambda: [("bf16", "4x64")])
    monkeypatch.setattr(cases, "OPS", ["forward"])
    monkeypatch.setattr(cases, "IMPLS", ["fused", "liger", "eager"])
    monkeypatch.setattr(cases, "runner", runner)
    monkeypatch.setattr(cases, "floor", lambda op, dtype, shape: floor)
    monkeypatch.setattr(suite, "prewarm", lambda jobs, workers: None)
    monkeypatch.setattr(suite, "warm_up", lambda fn, seconds: warmed.append(fn))
    monkeypatch.setattr(suite, "interleaved_case_medians", case_medians)
    out = suite.measure_all()
    assert measured == [({"fused": runners["fused"], "eager": runners["eager"]}, floor)]
    assert set(warmed) == {runners["fused"], runners["eager"], floor}
    assert out == {("forward", "fused", "bf16", "4x64"): (5, 1.0), ("forward", "eager", "bf16", "4x64"): (5, 1.0)}

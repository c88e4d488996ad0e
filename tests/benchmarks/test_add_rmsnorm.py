"""benchmarks/add_rmsnorm.py: what one class's measurement holds and what its benchmarks return."""

import json
import re

import pytest

from benchmarks import _cases as cases
from benchmarks import add_rmsnorm as suite

CASE = cases.INTERPRETER_CASES[0] if cases.INTERPRET else "bf16 1x4096"


def names(cls):
    """asv's "name(params)" of every benchmark of ``cls``."""
    out = [f"add_rmsnorm.{cls.__name__}.track_ratio('{i}', '{c}')" for i in cls.params[0] for c in cls.params[1]]
    return out + [f"add_rmsnorm.{cls.__name__}.{m}('{c}')" for m in ("track_time", "track_gbps")
                  for c in getattr(cls, m).params[0]]


def test_each_op_has_its_own_setup_cache_and_params():
    classes = [suite.Forward, suite.ForwardResidual, suite.Inference, suite.Training]
    assert [c.op for c in classes] == cases.OPS
    # asv keys a setup_cache by its source line: one line per class, or they would share a measurement.
    lines = {c.setup_cache.__code__.co_firstlineno for c in classes}
    assert len(lines) == 4
    for c in classes:
        assert c.params == [cases.IMPLS, cases.cases(c.op)]
        assert c.track_time.params == c.track_gbps.params == [cases.cases(c.op)]
    assert suite.Forward.version.startswith(suite.VERSION) and "interpreter-wall" in suite.Forward.version \
        or not cases.INTERPRET


def test_a_selection_measures_only_what_some_selected_benchmark_needs(monkeypatch):
    want = f"add_rmsnorm.Inference.track_ratio('fused', '{CASE}')"
    monkeypatch.setenv("FUSEDKERNEL_BENCH_REGEX", json.dumps([re.escape(want)]))
    regexes = suite._selection()
    chosen = {(i, c) for i in cases.IMPLS for c in cases.cases("inference") if suite._wanted(suite.Inference, i, c,
                                                                                              regexes)}
    assert chosen == {("fused", CASE)}
    # The fused op's time needs the fused op too; nothing selected means everything.
    monkeypatch.setenv("FUSEDKERNEL_BENCH_REGEX", json.dumps([r"Inference\.track_time"]))
    assert all(suite._wanted(suite.Inference, "fused", c, suite._selection()) for c in cases.cases("inference"))
    assert not suite._wanted(suite.Inference, "eager", CASE, suite._selection())
    monkeypatch.setenv("FUSEDKERNEL_BENCH_REGEX", "[]")
    assert suite._wanted(suite.Inference, "eager", CASE, suite._selection())


def test_measure_returns_rounds_per_implementation_and_records_a_failing_case(monkeypatch):
    monkeypatch.setenv("FUSEDKERNEL_BENCH_REGEX", "[]")
    monkeypatch.setattr(cases, "cases", lambda op: ["bf16 1x64", "fp32 8x1000"])
    monkeypatch.setattr(cases, "IMPLS", ["fused", "liger", "eager"])
    real_runner = cases.runner

    def runner(op, impl, case):
        if impl == "liger":
            raise NotImplementedError("liger: planted")
        if case == "fp32 8x1000":
            raise RuntimeError("planted")
        return real_runner(op, impl, case)

    monkeypatch.setattr(cases, "runner", runner)
    monkeypatch.setattr(suite, "warm_up", lambda fn, seconds: None)
    data = suite.measure(suite.Forward)
    assert set(data) == {("fused", "bf16 1x64"), ("eager", "bf16 1x64"), ("failed", "fp32 8x1000"),
                         ("skipped", "liger", "bf16 1x64")}
    op_s, floor_s = data["fused", "bf16 1x64"]
    from benchmarks._measure import ROUNDS
    assert len(op_s) == len(floor_s) == ROUNDS and min(op_s + floor_s) > 0
    assert "RuntimeError: planted" in data["failed", "fp32 8x1000"]

    bench = suite.Forward()
    bench.setup(data, "fused", "bf16 1x64")
    out = bench.track_ratio(data, "fused", "bf16 1x64")
    assert out["number"] == 1 and out["samples"] == [o / f for o, f in zip(op_s, floor_s)]
    assert bench.track_time(data, "bf16 1x64")["samples"] == [o * 1e6 for o in op_s]
    assert bench.track_gbps(data, "bf16 1x64") > 0
    with pytest.raises(NotImplementedError, match="liger: planted"):  # asv: skipped, with the reason
        bench.setup(data, "liger", "bf16 1x64")
    with pytest.raises(RuntimeError, match="planted"):  # asv: failed, this case only
        bench.setup(data, "fused", "fp32 8x1000")


def test_a_case_no_implementation_runs_is_skipped_not_failed(monkeypatch):
    def runner(op, impl, case):
        raise NotImplementedError(f"{impl} needs a GPU")

    monkeypatch.setattr(cases, "runner", runner)
    data = suite.measure_plan("forward", {"bf16 1x64": ["fused", "eager"]})
    assert data == {("skipped", "fused", "bf16 1x64"): "fused needs a GPU",
                    ("skipped", "eager", "bf16 1x64"): "eager needs a GPU"}


@pytest.mark.parametrize("where", ["runner", "warm_up", "rounds"])
def test_a_failing_peer_costs_itself_not_the_fused_value(monkeypatch, where):
    # A review's find: any error but NotImplementedError from a peer (a broken install's OSError) failed the
    # whole case, the flagged fused value with it; so did one failing only when timed (a later review's find:
    # on a GPU, under CUDA-graph capture), with a message that named no implementation.
    real_runner, real_warm_up = cases.runner, suite.warm_up
    calls = []

    def broken():
        calls.append(1)
        if where != "rounds" or len(calls) > 3:  # "rounds": past warm_up's 3 calls
            raise OSError("libcute_dsl.so: cannot open shared object file")

    def runner(op, impl, case):
        if impl == "eager" and where == "runner":
            broken()
        fn = real_runner(op, impl, case)
        return broken if impl == "eager" else fn

    monkeypatch.setattr(cases, "runner", runner)
    monkeypatch.setattr(suite, "warm_up", lambda fn, seconds: real_warm_up(fn, 0.0))
    data = suite.measure_plan("forward", {"bf16 1x64": ["fused", "eager", "compiled"]}, rounds=2)
    assert set(data) == {("fused", "bf16 1x64"), ("compiled", "bf16 1x64"), ("failed", "eager", "bf16 1x64")}
    assert data["failed", "eager", "bf16 1x64"] == ("OSError: libcute_dsl.so: cannot open shared object file"
                                                     + (" (when timed)" if where == "rounds" else ""))
    bench = suite.Forward()
    bench.setup(data, "fused", "bf16 1x64")
    with pytest.raises(RuntimeError, match="eager forward bf16 1x64 failed: OSError: libcute_dsl"):  # asv: failed
        bench.setup(data, "eager", "bf16 1x64")


@pytest.mark.parametrize("selected", [["fused", "eager", "compiled"], ["eager"]])
def test_a_failure_every_call_shares_blames_no_peer(monkeypatch, selected):
    # A review's find: after the fused op broke the device (every later call failing), each peer's probe failed
    # and took the blame; with the peer alone selected, its removal left nothing to time (ZeroDivisionError).
    state = {"broken": False, "calls": 0}

    def call():
        state["calls"] += 1
        if state["calls"] > 12:
            state["broken"] = True
        if state["broken"]:
            raise RuntimeError("CUDA error: an illegal memory access was encountered")

    monkeypatch.setattr(cases, "runner", lambda op, impl, case: call)
    monkeypatch.setattr(cases, "floor", lambda op, case: lambda: None if "fused" not in selected else call())
    monkeypatch.setattr(suite, "warm_up", lambda fn, seconds: None)
    data = suite.measure_plan("forward", {"bf16 1x64": selected}, rounds=8)
    if "fused" in selected:
        assert data == {("failed", "bf16 1x64"): "RuntimeError: CUDA error: an illegal memory access was encountered"}
    else:
        assert data == {("failed", "eager", "bf16 1x64"):
                        "RuntimeError: CUDA error: an illegal memory access was encountered (when timed)"}


def test_a_failing_pre_compile_costs_nothing_but_its_peer(monkeypatch):
    # A review's find: with 3+ cores (every GPU host) torch.compile's graphs are compiled first in workers,
    # outside the per-case guard: a compile error there failed every case of the class, fused values included.
    def prewarm(jobs, workers):
        raise RuntimeError("InductorError: InvalidCxxCompiler")

    monkeypatch.setattr(suite.os, "cpu_count", lambda: 3)
    monkeypatch.setattr(cases, "prewarm", prewarm)
    monkeypatch.setattr(suite, "warm_up", lambda fn, seconds: None)
    monkeypatch.setattr(cases, "runner", lambda op, impl, case: lambda: None)
    data = suite.measure_plan("forward", {"bf16 1x64": ["fused", "compiled"]}, rounds=2)
    assert set(data) == {("fused", "bf16 1x64"), ("compiled", "bf16 1x64")}


def test_the_fused_op_failing_fails_its_case(monkeypatch):
    def runner(op, impl, case):
        if impl == "fused":
            raise OSError("planted")
        return lambda: None

    monkeypatch.setattr(cases, "runner", runner)
    monkeypatch.setattr(suite, "warm_up", lambda fn, seconds: None)
    data = suite.measure_plan("forward", {"bf16 1x64": ["fused", "eager"]}, rounds=2)
    assert data == {("failed", "bf16 1x64"): "OSError: planted"}

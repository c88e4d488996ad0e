"""asv benchmarks of ``fusedkernel.add_rmsnorm``, its peers and its floor.

One class per op (``Forward``, ``ForwardResidual``, ``Inference``,
``Training``; ``_cases`` has the ops, the grid and the floors). Each class
measures all its cases in one process (``setup_cache``: warm clocks, no
process start per case, torch.compile graphs compiled in parallel first),
every implementation interleaved with the floor in rounds (``_measure``).
Its benchmarks read that measurement:

* ``track_ratio(impl, case)``: op time / floor time, one sample per round
  (asv keeps the samples: its statistics and the gate's Mann-Whitney test
  run on them). For ``fused`` this is the flagged metric: a rise is a
  regression, and it survives what moves op and floor together (clocks,
  another runner). For the peers it is shown (their code is pinned).
* ``track_time(case)``: the fused op's device time per call, µs (samples:
  rounds). Shown, not flagged: it moves with the runner.
* ``track_gbps(case)``: the fused op's bytes (the traffic model) / its median
  time. Shown, not flagged.

``HostRatio.track_ratio(op, case)``: the fused op's host wall time per
synchronized call over the floor's, side by side in one process, at decode
shapes. Shown, not flagged: no detection curve has been measured for it.

``-b`` selects what asv runs; ``tools/bench.py`` also hands the same
regexes to the suite (``FUSEDKERNEL_BENCH_REGEX``), so a class measures only
the cases some selected benchmark needs.
"""

import json
import os
import re
import statistics

import torch

from . import _cases as cases
from ._measure import (DECODE_MAX_TOKENS, INTERPRET, METHODS, ROUNDS, TIMERS, interleaved_rounds,
                       interleaved_wall_medians, method, synchronize, warm_up)

# The method goes into every benchmark's version, which asv stores with each
# result; a new method is a new version, so a history never mixes two.
VERSION = "7"
# Fresh processes whose rounds are pooled for the fused op at decode (_pooled).
DECODE_PROCESSES = 3
POOLED_TIMEOUT_S = 1200
MODE_METHODS = (["interpreter-wall"] if INTERPRET else ["cuda-graph", "l2-flushed"])
METHOD_NOTE = (f"{ROUNDS} rounds beside the floor (the fused op at <= {DECODE_MAX_TOKENS} tokens: "
               f"{DECODE_PROCESSES} fresh processes x {-(-ROUNDS // DECODE_PROCESSES)} rounds); "
               + ("" if INTERPRET else f"<= {DECODE_MAX_TOKENS} tokens: ")
               + "; else: ".join(f"{m} ({METHODS[m]})" for m in MODE_METHODS))
WARMUP_S = 0.2


def _selection() -> list:
    """The ``-b`` regexes of this run (tools/bench.py sets FUSEDKERNEL_BENCH_REGEX); [] selects everything."""
    return [re.compile(r) for r in json.loads(os.environ.get("FUSEDKERNEL_BENCH_REGEX") or "[]")]


def _wanted(cls, impl: str, case: str, regexes: list) -> bool:
    """Does a selected benchmark of ``cls`` need ``impl`` at ``case``? (asv's own matching rule)."""
    if not regexes:
        return True
    names = [f"add_rmsnorm.{cls.__name__}.track_ratio('{impl}', '{case}')"]
    if impl == "fused":
        names += [f"add_rmsnorm.{cls.__name__}.{m}('{case}')" for m in ("track_time", "track_gbps")]
    return any(r.search(n) for r in regexes for n in names)


def measure(cls) -> dict:
    """{(impl, case): ([op s per round], [floor s per round])}; {("failed", case): message} where a case
    failed; {("skipped", impl, case): reason} where an implementation does not run a case."""
    regexes = _selection()
    plan = {case: [i for i in cases.IMPLS if _wanted(cls, i, case, regexes)] for case in cases.cases(cls.op)}
    return measure_plan(cls.op, {case: impls for case, impls in plan.items() if impls})


def measure_plan(op: str, plan: dict, rounds: int = ROUNDS) -> dict:
    """:func:`measure` of ``op`` for ``plan`` = {case: [impl, ...]}, any cases (the grid's or not).

    The fused op at decode (<= DECODE_MAX_TOKENS tokens) is measured in
    ``DECODE_PROCESSES`` fresh processes, its rounds pooled (:func:`_pooled`);
    everything else in this one. RuntimeError if this process has already
    initialized CUDA (the pooled processes are forked from it).
    """
    from ._cases import prewarm

    workers = min(12, (os.cpu_count() or 1) - 1)
    compiled = [(op, "compiled", case) for case, impls in plan.items() if "compiled" in impls]
    if compiled and workers >= 2:
        prewarm(compiled, workers)
    pooled = [case for case, impls in plan.items() if "fused" in impls and cases.parse(case)[1] <= DECODE_MAX_TOKENS]
    out = _pooled(op, pooled, rounds) if pooled else {}
    here = {case: [i for i in impls if i != "fused" or case not in pooled] for case, impls in plan.items()}
    out.update(_measure_here(op, {case: impls for case, impls in here.items() if impls}, rounds))
    return out


def _measure_here(op: str, plan: dict, rounds: int) -> dict:
    """:func:`measure_plan` of ``plan`` in this process."""
    out, first = {}, True
    for case, impls in plan.items():
        try:
            if "compiled" in impls:  # (importing torch._dynamo costs a pooled process seconds)
                torch._dynamo.reset()  # one graph per case: stay under dynamo's recompile limit
            fns = {}
            for impl in impls:
                try:
                    fns[impl] = cases.runner(op, impl, case)
                except NotImplementedError as e:
                    out["skipped", impl, case] = str(e)
                    continue
                warm_up(fns[impl], 1.0 if first else 0.05)
                first = False
            if not fns:
                continue
            floor = cases.floor(op, case)
            warm_up(floor, 0.02)
            out.update(((impl, case), times) for impl, times in
                       interleaved_rounds(fns, floor, TIMERS[method(cases.parse(case)[1])], rounds).items())
        except Exception as e:  # noqa: BLE001 - one failing case must not cost the others
            out["failed", case] = f"{type(e).__name__}: {e}"
        finally:
            cases.inputs.cache_clear()  # free this case's tensors before the next
    return out


def _pooled(op: str, pooled: list, rounds: int) -> dict:
    """The fused op at ``pooled`` cases, ceil(rounds / DECODE_PROCESSES) rounds in each of
    DECODE_PROCESSES forked processes, one after another, their rounds concatenated.

    Why: a decode call's device time depends on where its kernel's code was
    loaded, once per process (the same binary loaded twice in one process
    differed by up to 6% at 1x2048 on the H200, docs/performance.md), and no
    reference kernel moves with it; averaging processes does. A case failing
    in any process fails (a partial pool would be another method).
    """
    import multiprocessing

    if not INTERPRET and torch.cuda.is_initialized():
        raise RuntimeError("measure_plan: this process has initialized CUDA already; the fused op's decode "
                           "cases are measured in processes forked from it, which could not use CUDA")
    per = -(-rounds // DECODE_PROCESSES)
    ctx = multiprocessing.get_context("fork")  # inherits this process's fusedkernel, patched or not
    out: dict = {}
    for k in range(DECODE_PROCESSES):
        recv, send = ctx.Pipe(duplex=False)
        child = ctx.Process(target=_pooled_child, args=(op, pooled, per, send), daemon=True)
        child.start()
        send.close()
        try:
            got = recv.recv() if recv.poll(POOLED_TIMEOUT_S) else None
        except EOFError:
            got = None
        finally:
            child.join(5)
            if child.is_alive():  # stopped or stuck: it must not go on loading the GPU
                child.kill()
                child.join()
        if got is None:
            got = {("failed", case): f"process {k + 1} of {DECODE_PROCESSES} died (exit code {child.exitcode})"
                   for case in pooled}
        for key, value in got.items():
            if key[0] == "fused":
                op_s, floor_s = out.setdefault(key, ([], []))
                op_s += value[0]
                floor_s += value[1]
            elif key not in out:
                out[key] = value if key[0] == "skipped" else f"process {k + 1} of {DECODE_PROCESSES}: {value}"
    for key in [key for key in out if key[0] != "fused"]:
        out.pop(("fused", key[-1]), None)
    return out


def _pooled_child(op: str, pooled: list, rounds: int, send) -> None:
    try:
        send.send(_measure_here(op, {case: ["fused"] for case in pooled}, rounds))
    finally:
        send.close()


def _samples(values: list) -> dict:
    # asv's result format for sampled values: its median, statistics and, with
    # --record-samples, the samples themselves are stored.
    return {"samples": values, "number": 1}


class _Op:
    """The benchmarks of one op; each subclass sets ``op`` and a ``setup_cache`` of its own."""

    op = ""
    version = f"{VERSION}: {METHOD_NOTE}"
    param_names = ["impl", "case"]
    timeout = 1800  # setup_cache: every case, and cold torch.compile graphs

    def __init_subclass__(cls) -> None:
        # track_time and track_gbps are the fused op's alone: their own params
        # (the op's cases), set on per-class copies of the methods.
        cls.params = [cases.IMPLS, cases.cases(cls.op)]
        for name in ("track_time", "track_gbps"):
            setattr(cls, name, _fused_only(getattr(_Op, name), cases.cases(cls.op)))

    def setup(self, data, *params):
        impl, case = params if len(params) == 2 else ("fused", params[0])
        if ("failed", case) in data:
            raise RuntimeError(f"{self.op} {case} failed: {data['failed', case]}")
        if (impl, case) not in data:
            why = data.get(("skipped", impl, case), "not measured in this run")
            raise NotImplementedError(f"{impl} does not run {self.op} at {case} here: {why}")

    def track_ratio(self, data, impl, case):
        op_s, floor_s = data[impl, case]
        return _samples([o / f for o, f in zip(op_s, floor_s)])

    track_ratio.unit = "x floor time"

    def track_time(self, data, case):
        return _samples([o * 1e6 for o in data["fused", case][0]])

    track_time.unit = "us"

    def track_gbps(self, data, case):
        return cases.bytes_moved(self.op, case) / statistics.median(data["fused", case][0]) / 1e9

    track_gbps.unit = "GB/s"


def _fused_only(fn, op_cases: list):
    def bench(self, data, case):
        return fn(self, data, case)

    bench.__name__, bench.__doc__, bench.unit = fn.__name__, fn.__doc__, fn.unit
    bench.params, bench.param_names = [op_cases], ["case"]
    return bench


# asv keys a setup_cache by its function's source line: each op needs one of
# its own, or all four would share one measurement.
class Forward(_Op):
    op = "forward"

    def setup_cache(self):
        return measure(type(self))


class ForwardResidual(_Op):
    op = "forward+residual"

    def setup_cache(self):
        return measure(type(self))


class Inference(_Op):
    op = "inference"

    def setup_cache(self):
        return measure(type(self))


class Training(_Op):
    op = "forward+backward"

    def setup_cache(self):
        return measure(type(self))


class HostRatio:
    """Host wall time per synchronized call of the fused op over the floor's, side by side in one process.

    Not flagged: no detection curve has been measured for it, and host times
    moved 1.5-2.4x between runs of the same host path on the H200.
    """

    version = "2"
    params = [["forward", "inference"], ["bf16 1x64"] if INTERPRET else ["bf16 1x4096", "bf16 64x5120"]]
    param_names = ["op", "case"]
    timeout = 180

    def track_ratio(self, op, case):
        fused, floor = cases.runner(op, "fused", case), cases.floor(op, case)
        host = lambda: (fused(), synchronize())  # noqa: E731
        warm_up(host, WARMUP_S)
        warm_up(floor, WARMUP_S)
        op_s, floor_s = interleaved_wall_medians(fused, floor)
        return op_s / floor_s

    track_ratio.unit = "x floor host time"

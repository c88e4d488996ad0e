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
import sys

import torch

from . import _cases as cases
from ._measure import (DECODE_MAX_TOKENS, INTERPRET, METHODS, ROUNDS, TIMERS, interleaved_rounds,
                       interleaved_wall_medians, method, synchronize, warm_up)

# The method goes into every benchmark's version, which asv stores with each
# result; a new method is a new version, so a history never mixes two.
VERSION = "6"
MODE_METHODS = (["interpreter-wall"] if INTERPRET else ["cuda-graph", "l2-flushed"])
METHOD_NOTE = (f"{ROUNDS} rounds beside the floor; " + ("" if INTERPRET else f"<= {DECODE_MAX_TOKENS} tokens: ")
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
    failed; {("failed", impl, case): message} where a peer failed (the others still run);
    {("skipped", impl, case): reason} where an implementation does not run a case."""
    regexes = _selection()
    plan = {case: [i for i in cases.IMPLS if _wanted(cls, i, case, regexes)] for case in cases.cases(cls.op)}
    return measure_plan(cls.op, {case: impls for case, impls in plan.items() if impls})


def measure_plan(op: str, plan: dict, rounds: int = ROUNDS) -> dict:
    """:func:`measure` of ``op`` for ``plan`` = {case: [impl, ...]}, any cases (the grid's or not)."""
    from ._cases import prewarm

    workers = min(12, (os.cpu_count() or 1) - 1)
    compiled = [(op, "compiled", case) for case, impls in plan.items() if "compiled" in impls]
    if compiled and workers >= 2:
        try:
            prewarm(compiled, workers)
        except Exception as e:  # noqa: BLE001 - only a cache warm-up: each case compiles below, a failure costs its peer
            print(f"warning: torch.compile's pre-compile failed ({type(e).__name__}: {e}); each case compiles "
                  "its own", file=sys.stderr)
    out, first = {}, True
    for case, impls in plan.items():
        try:
            torch._dynamo.reset()  # one graph per case: stay under dynamo's recompile limit
            fns = {}
            for impl in impls:
                try:
                    fns[impl] = cases.runner(op, impl, case)
                    warm_up(fns[impl], 1.0 if first else 0.05)
                except NotImplementedError as e:
                    out["skipped", impl, case] = str(e)
                    fns.pop(impl, None)
                    continue
                except Exception as e:  # noqa: BLE001 - a broken peer (its install, its compile) costs itself
                    if impl == "fused":
                        raise
                    out["failed", impl, case] = f"{type(e).__name__}: {e}"
                    fns.pop(impl, None)
                    continue
                first = False
            if not fns:
                continue
            floor = cases.floor(op, case)
            warm_up(floor, 0.02)
            timer = TIMERS[method(cases.parse(case)[1])]
            timed = {}
            while fns:
                try:
                    timed = interleaved_rounds(fns, floor, timer, rounds)
                    break
                except Exception:  # noqa: BLE001 - a peer that fails only when timed (CUDA-graph capture) costs itself
                    impl, error = _failing_peer(fns, floor, timer)
                    if impl is None:
                        raise
                    out["failed", impl, case] = f"{type(error).__name__}: {error} (when timed)"
                    del fns[impl]
            out.update(((impl, case), times) for impl, times in timed.items())
        except Exception as e:  # noqa: BLE001 - one failing case must not cost the others
            out["failed", case] = f"{type(e).__name__}: {e}"
        finally:
            cases.inputs.cache_clear()  # free this case's tensors before the next
    return out


def _failing_peer(fns: dict, floor, timer) -> tuple:
    """(impl, its error) of the first peer in ``fns`` whose one timed call raises; (None, None) if none does,
    or if the floor or the fused op fails too (a broken device fails every call: no peer is to blame)."""
    try:
        timer(floor)
        if "fused" in fns:
            timer(fns["fused"])
    except Exception:  # noqa: BLE001 - the case fails, as it would have
        return None, None
    for impl, fn in fns.items():
        if impl != "fused":
            try:
                timer(fn)
            except Exception as e:  # noqa: BLE001 - the culprit, named
                return impl, e
    return None, None


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
        if ("failed", impl, case) in data:
            raise RuntimeError(f"{impl} {self.op} {case} failed: {data['failed', impl, case]}")
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

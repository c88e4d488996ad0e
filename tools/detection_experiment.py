"""The detection curve: which slowdowns the flags catch, and how often they cry wolf.

    python tools/detection_experiment.py measure [--aa 36] [--per-level 12] [--raw FILE]   (on the GPU)
    python tools/detection_experiment.py analyze [--raw FILE] [--pool K] [--record DIR]   (anywhere)

``measure`` (resumable: every finished process is appended to ``--raw``,
default ``docs/detection/<machine>/raw.json``):

1. **Injection.** A slow commit adds a chain of dependent float multiplies to
   the forward kernel's row sums and to the backward's dot products (whole rows
   and the split rows of the wide row; ``detection_inject.patched_source``; the backward's is what
   slows ``Training``): GPU work on every program's critical path, captured by
   CUDA graphs and timed by events like the kernel itself. Its length is set per
   case through the tile widths its launches compile (``detection_inject.chain_keys``: decode
   ``bf16 1x4096`` has 4096-wide tiles, prefill ``bf16 8192x8192`` 8192-wide),
   so one patch slows each case by its own calibrated amount. The wide row
   (``bf16 1024x65536``, GPU only: ``--regimes wide``) splits its rows into
   2048- and 4096-wide tiles, which decode's overlap: it is measured in a raw
   file of its own.
2. **Calibration.** Fresh processes measure one class's fused ratio to the
   floor (``Inference`` where measured, else the first of ``--classes``)
   with chains of ``DELAYS`` multiplies, interleaved in rounds; the chain for
   each target slowdown (``LEVELS``) is read off that curve. The other
   classes get the same chains: their realized slowdown is measured, not set.
3. **Measurement.** Each commit's measurement is one fresh process per
   class, forked from one that imported torch without touching CUDA (as
   asv's forkserver does), measuring the flagged benchmarks (``track_ratio``
   of the fused op of ``--classes``, at the cases of ``--regimes``; the
   ``Training`` grid has prefill only) with the suite's own code
   (``benchmarks/add_rmsnorm.measure``);
   unchanged commits (A/A) and each slowdown level interleaved. ``--start
   spawn`` starts each in a fresh interpreter instead: processes that share
   no start, for ``analyze --pool`` (a commit made of several of them).

``analyze`` turns the processes into histories and asks the tracker's own
decision code about them: asv's step detection and ``detect_regressions`` as
``asv publish`` runs them (weights from each result's 99% interval as stored), the
gate's ``verdict.compare`` (asv's Mann-Whitney test and the factor), and
``bisection.bisect``, each at the threshold ``asv.conf.json`` gives the
family. A trial's commits are drawn from the measured processes of their
level (without replacement within a trial), so a process serves several
trials. It writes ``curve.json`` (rows as the issue defines them) and
``record/``: a scratch git history of real commits (the slow one carries the
patch) with asv results files made from measured processes, which the site
test publishes.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import pathlib
import signal
import statistics
import sys
import tempfile

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))
sys.path.insert(1, str(ROOT))
sys.path.insert(2, str(ROOT / "tools" / "kernel"))
import asvrun  # noqa: E402
from _sweep import json_path, names  # noqa: E402
from detection_history import make_history, record_history  # noqa: E402
from detection_inject import device_keys, install_variant  # noqa: E402
from detection_trials import aa_row, markdown, pooled, trials  # noqa: E402

LEVELS = [0.02, 0.03, 0.05, 0.10]
# Long chains too: at prefill the memory traffic hides hundreds of multiplies, in the training call most
# (docs/performance.md, "Detection").
DELAYS = [0, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096]
TRIALS = 40  # histories per family, level and placement
CLASSES = ["Forward", "Inference", "ForwardResidual", "Training"]


def experiment_cases(interpret: bool) -> dict[str, str]:
    """{regime: case}: the experiment's decode, prefill and wide-row case (small ones in the interpreter, which
    has no wide row: its rows are not split over programs)."""
    return {"decode": "bf16 1x64", "prefill": "fp32 8x1000"} if interpret else \
        {"decode": "bf16 1x4096", "prefill": "bf16 8192x8192", "wide": "bf16 1024x65536"}










def selection(cases: dict) -> str:
    return (r"^add_rmsnorm\.(" + "|".join(CLASSES) + r")\.track_ratio\('fused', '("
            + "|".join(cases.values()) + r")'\)$")


def measure_once(delays: dict[int, int], cases: dict, tmp: pathlib.Path, cls: str) -> dict:
    """{case: [op/floor ratio per round]} of ``cls``'s fused op with ``delays`` injected (this process)."""
    os.environ["FUSEDKERNEL_BENCH_REGEX"] = json.dumps([selection(cases)])
    from benchmarks import add_rmsnorm as suite

    if any(delays.values()):
        install_variant(delays, tmp)
    data = suite.measure(getattr(suite, cls))
    failed = {k: v for k, v in data.items() if k[0] == "failed"}
    if failed:
        raise RuntimeError(f"{cls}: {failed}")
    return {case: [o / f for o, f in zip(*data["fused", case])] for case in cases.values()}


def measure_classes(delays: dict[int, int], cases: dict, tmp: pathlib.Path, classes, start: str = "fork") -> dict:
    """{class: :func:`measure_once`}, each class in a fresh child of its own (one commit's measurement),
    as asv measures each class's setup_cache in a process of its own.

    ``start``: "fork" (from this process, as asv's forkserver does) or
    "spawn" (a fresh interpreter each: processes that share no start).
    """
    return {cls: in_child(measure_once, delays, cases, tmp, cls, start=start) for cls in classes}


def in_child(fn, *args, start: str = "fork"):
    """``fn(*args)`` in a child process; its result (a RuntimeError where it failed or died).

    ``start``: "fork" (a fresh CUDA context, like asv's forkserver) or "spawn"
    (a fresh interpreter). Stopped (Ctrl-C, or SIGTERM under :func:`cmd_measure`),
    it kills the child first.
    """
    import multiprocessing

    ctx = multiprocessing.get_context(start)
    recv, send = ctx.Pipe(duplex=False)
    child = ctx.Process(target=_child, args=(send, fn, args))
    child.start()
    send.close()
    try:
        out = recv.recv()
    except EOFError:
        child.join()
        out = {"error": f"the child died (exit code {child.exitcode})"}
    except BaseException:
        child.kill()  # a stopped experiment must not leave a child loading the GPU
        raise
    finally:
        child.join()
    if "error" in out:
        raise RuntimeError(out["error"])
    return out["ok"]


def _child(send, fn, args) -> None:
    try:
        send.send({"ok": fn(*args)})
    except BaseException as e:  # noqa: BLE001 - reported to the parent
        send.send({"error": f"{type(e).__name__}: {e}"})


class Stopped(Exception):
    """SIGTERM or SIGHUP during ``measure``."""


def _stop(signum, _frame):
    raise Stopped(signal.Signals(signum).name)


def read_json(path: pathlib.Path, what: str) -> dict:
    """A JSON object from ``path``; a one-line usage error naming ``what`` otherwise."""
    try:
        out = json.loads(path.read_text())
    except (OSError, ValueError, UnicodeDecodeError) as e:
        fail(f"{what} {path}: not readable JSON ({type(e).__name__}: {e})")
    if not isinstance(out, dict):
        fail(f"{what} {path}: not a raw file of this experiment (a JSON object)")
    return out


def raw_problem(raw: dict) -> str | None:
    """What keeps ``raw`` from being this experiment's raw file (its shape, down to each process's ratios), or
    None: a file that passes gives no traceback and no NaN in the analysis."""
    if not all(isinstance(raw.get(k), t) for k, t in (("cases", dict), ("classes", list), ("delays", dict),
                                                      ("processes", list))):
        return "not a raw file of this experiment (cases, classes, delays, processes)"
    if not all(isinstance(c, str) for c in raw["cases"].values()) or any(c not in CLASSES for c in raw["classes"]):
        return f"its cases ({raw['cases']}) or classes ({raw['classes']}) are not the suite's"
    for k, p in enumerate(raw["processes"], 1):
        if not isinstance(p, dict) or type(p.get("level")) not in (int, float) or not 0 <= p["level"] < 10:
            return f"process {k}: no slowdown level"
        ratios = p.get("ratios") if isinstance(p.get("ratios"), dict) else {}
        for cls in raw["classes"]:
            for case in raw["cases"].values():
                got = ratios[cls].get(case) if isinstance(ratios.get(cls), dict) else None
                if not (isinstance(got, list) and got and all(type(x) in (int, float) and 0 < x < 1e9 for x in got)):
                    return f"process {k}: its {cls} {case} ratios are no list of positive numbers ({got!r:.60})"
    return None


def comma_list(text: str, name: str, allowed: list) -> list:
    """The names of a comma-separated option, each in ``allowed`` and none twice; a usage error otherwise."""
    try:
        out = names(text, f"--{name}")
    except ValueError:
        fail(f"--{name} {text}: a name given twice")
    if any(v not in allowed for v in out):
        fail(f"--{name} {text}: each one of {', '.join(allowed)}")
    return out


def calibration_class(classes: list) -> str:
    """The class whose slowdown the chains are calibrated on: ``Inference`` where measured, else the first."""
    return "Inference" if "Inference" in classes else classes[0]


def missing_cases(classes: list, cases: dict, interpret: bool) -> list[str]:
    """``"<class> <regime>"`` for each class whose grid lacks the regime's case (e.g. ``Training`` at decode)."""
    from benchmarks import _cases
    from benchmarks import add_rmsnorm as suite

    def grid(cls: str) -> list[str]:
        return _cases.INTERPRETER_CASES if interpret else _cases.gpu_cases(getattr(suite, cls).op)

    return [f"{cls} {reg}" for cls in classes for reg, case in cases.items() if case not in grid(cls)]


def calibrate(cases: dict, keys: dict, tmp: pathlib.Path, rounds: int, cls: str = "Inference") -> dict:
    """{regime: [slowdown of ``cls``'s fused ratio per DELAYS entry]}, the chains interleaved in rounds
    (each measurement in fresh children); ``keys``: {regime: its tile widths}."""
    ratios = {reg: {d: [] for d in DELAYS} for reg in cases}
    for _ in range(rounds):
        for d in DELAYS:
            got = measure_classes({k: d for reg in cases for k in keys[reg]}, cases, tmp, [cls])[cls]
            for reg, case in cases.items():
                ratios[reg][d].append(statistics.median(got[case]))
    return {reg: [statistics.median(ratios[reg][d]) / statistics.median(ratios[reg][0]) - 1 for d in DELAYS]
            for reg in cases}


def chain_for(curve: list[float], target: float, delays: list[int] = DELAYS) -> int:
    """The chain whose slowdown, interpolated on the calibration ``curve`` (one per ``delays``), is ``target``."""
    for (d0, s0), (d1, s1) in zip(zip(delays, curve), zip(delays[1:], curve[1:])):
        if s0 <= target <= s1 and s1 > s0:
            return round(d0 + (d1 - d0) * (target - s0) / (s1 - s0))
    raise ValueError(f"a {target:.0%} slowdown is outside the calibrated range {curve}")


def cmd_measure(a) -> None:
    import benchmarks._measure as m
    import provenance

    # Asked in a child: this process must not touch CUDA before it forks.
    mode, machine = in_child(lambda: list(asvrun.detect()))
    if mode == "interpreter" and not m.INTERPRET:
        raise SystemExit("no GPU here: run with TRITON_INTERPRET=1 (the interpreter's small cases)")
    raw_path = pathlib.Path(a.raw or ROOT / "docs" / "detection" / machine / "raw.json")
    regimes = comma_list(a.regimes, "regimes", list(experiment_cases(False))) if a.regimes else ["decode", "prefill"]
    cases = {r: c for r, c in experiment_cases(m.INTERPRET).items() if r in regimes}
    if len(cases) < len(regimes):
        fail(f"--regimes {a.regimes}: the interpreter has no wide row (its rows are not split over programs)")
    classes = comma_list(a.classes, "classes", CLASSES)
    absent = missing_cases(classes, cases, m.INTERPRET)
    if absent:
        fail(f"--classes {a.classes}: no case for {', '.join(absent)} in the suite's grid (Training has no decode "
             "case: --regimes prefill or wide)")
    try:
        json_path(str(raw_path))
    except argparse.ArgumentTypeError:
        fail(f"--raw {raw_path}: not a file in a writable folder")
    raw = read_json(raw_path, "--raw") if raw_path.exists() else {}
    if raw:
        if problem := raw_problem(raw):
            fail(f"--raw {raw_path}: {problem}")
        for name, have, want in (("regimes", raw["cases"], cases), ("classes", raw["classes"], classes)):
            if set(have) != set(want):
                fail(f"--raw {raw_path} measures {name} {','.join(have)}: pass --{name} {','.join(have)}, "
                     "or another --raw")
    known = raw.get("delays") or {}
    widths = []
    if not raw:
        keys = in_child(device_keys, cases)
        widths = [k for r in cases for k in keys[r]]
        if len(set(widths)) < len(widths):
            # A chain is keyed by tile width: two regimes sharing one would get one chain.
            fail(f"--regimes {','.join(cases)}: their tile widths {keys} overlap; measure them in separate --raw "
                 "files")
    with tempfile.TemporaryDirectory(prefix="fk-detect-") as tmp:
        tmp = pathlib.Path(tmp)
        if not raw and a.seed:
            seed = read_json(pathlib.Path(a.seed), "--seed")  # another run's calibration
            if not all(isinstance(seed.get(k), dict) for k in ("cases", "calibration", "delays")):
                fail(f"--seed {a.seed}: not a raw file of this experiment (cases, calibration, delays)")
            if not set(cases) <= set(seed["cases"]):
                fail(f"--seed {a.seed} has a calibration for {', '.join(seed['cases'])} only")
            for level, chains in seed["delays"].items():
                # A process at a level whose chains miss a launched width would be recorded slow, unslowed.
                ok = isinstance(chains, dict) and all(k.isdigit() and type(v) is int and v >= 0
                                                      for k, v in chains.items())
                if not ok or not set(widths) <= {int(k) for k in chains}:
                    fail(f"--seed {a.seed}: its {level} chains ({chains}) do not give a chain length to each tile "
                         f"width this host launches ({', '.join(map(str, sorted(widths)))})")
            raw = {k: seed[k] for k in ("machine", "calibration", "delays")}
            raw["calibrated_on"] = seed.get("calibrated_on", "Inference")  # files before the key: Inference
            raw.update(cases=cases, classes=classes, processes=[], calibrated_in=str(a.seed))
            known = raw["delays"]
        elif not raw:
            known = {str(lv): None for lv in LEVELS}
        missing = [lv for lv in a.levels if lv and str(lv) not in known]
        if missing:
            fail(f"--levels: no calibrated chain for {', '.join(map(str, missing))} "
                 f"(calibrated: {', '.join(k for k in known)})")
        if not raw:
            on = calibration_class(classes)
            curve = calibrate(cases, keys, tmp, a.calibration_rounds, on)
            print(f"calibration on {on} (slowdown per chain length):",
                  {r: [f"{s:+.3f}" for s in c] for r, c in curve.items()})
            raw = {"machine": machine, "cases": cases, "classes": classes, "calibrated_on": on,
                   "calibration": {"delays": DELAYS, **curve},
                   "delays": {str(lv): {str(k): chain_for(curve[r], lv) for r in cases for k in keys[r]}
                              for lv in LEVELS}, "processes": []}
        import benchmarks.add_rmsnorm as suite

        raw["suite_version"] = suite.VERSION
        save(raw_path, raw)
        schedule = []
        for _ in range(a.per_level):
            for level in a.levels:
                schedule += [0.0, level]
        schedule += [0.0] * max(0, a.aa - schedule.count(0.0))
        done = len(raw["processes"])
        # Which GPU measured: the ratio moved 3.4% (decode) between H200 leases (docs/performance.md).
        gpu = provenance.gpu_id()
        gpu_uuid = provenance.gpu_facts(gpu).get("uuid") if gpu else None
        for k, level in enumerate(schedule[done:], done + 1):
            delays = {int(b): d for b, d in raw["delays"].get(str(level), {}).items()}
            got = measure_classes(delays, raw["cases"], tmp, raw["classes"], a.start)
            raw["processes"].append({"level": level, "delays": delays, "ratios": got, "gpu_uuid": gpu_uuid,
                                     "start": a.start,
                                     "at": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")})
            save(raw_path, raw)
            print(f"process {k}/{len(schedule)} level {level:.0%}: {medians(raw, got)}", flush=True)


def medians(raw: dict, got: dict) -> dict:
    """{"<class> <regime>": median ratio} of one commit's measurement ``got`` (for the progress line)."""
    return {f"{c} {reg}": f"{statistics.median(got[c][case]):.4f}" for c in raw["classes"]
            for reg, case in raw["cases"].items()}


def save(path: pathlib.Path, raw: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    asvrun.write_whole(path, json.dumps(raw, indent=1) + "\n")  # a fault mid-write leaves the previous file whole














def fail(message: str) -> None:
    """A usage error: one line, exit 2."""
    print(f"detection_experiment.py: {message}", file=sys.stderr)
    sys.exit(2)


def load_raw(path: pathlib.Path) -> dict:
    """A raw measurements file, checked: cases, classes, delays and processes with unchanged (A/A) ones."""
    raw = read_json(path, "--raw")
    if problem := raw_problem(raw):
        fail(f"{path}: {problem}")
    if not any(isinstance(p, dict) and p.get("level") == 0.0 for p in raw["processes"]):
        fail(f"{path}: no unchanged (A/A) process measured yet")
    return raw


def levels_arg(text: str) -> list[float]:
    try:
        out = [float(v) for v in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"levels are fractions separated by commas (e.g. 0.1,0.1), got {text!r}")
    if any(not 0 <= v < 10 for v in out):
        raise argparse.ArgumentTypeError(f"levels are fractions between 0 and 10, got {text!r}")
    return out


def positive(text: str) -> int:
    if not (text.isascii() and text.isdigit()) or int(text) < 1:
        raise argparse.ArgumentTypeError(f"must be an integer >= 1, got {text!r}")
    return int(text)


def cmd_analyze(a) -> None:
    conf = asvrun.load_conf()
    paths = [pathlib.Path(r) for r in a.raw] or [ROOT / "docs" / "detection" / asvrun.detect()[1] / "raw.json"]
    rows, curve = [], pathlib.Path(a.out) if a.out else paths[0].parent / "curve.json"
    if not a.out and curve.exists():
        # The committed curve is made of every raw file at the default trials: a partial analysis goes elsewhere.
        try:
            made = json.loads(curve.read_text()).get("raws")
        except (OSError, ValueError, AttributeError):  # unreadable, or no object: replaced only with --out too
            made = None
        if made != [p.name for p in paths] or a.regimes or a.pool > 1 or a.trials != TRIALS:
            of = f"the curve of {made}, unnarrowed, at {TRIALS} trials" if made else "no curve this analysis can read"
            fail(f"{curve} is {of}: this analysis would replace it; pass --out FILE")
    for path in paths:
        measured = load_raw(path)
        raw = pooled(measured, a.pool)
        levels_measured = {p["level"] for p in measured["processes"]}
        for what, levels in (("at levels this analysis does not know", levels_measured - {0.0, *LEVELS}),
                             (f"left out by --pool {a.pool} (fewer processes than that)",
                              levels_measured - {p["level"] for p in raw["processes"]})):
            if levels:
                print(f"warning: {path.name}: processes {what}: {', '.join(map(str, sorted(levels)))}",
                      file=sys.stderr)
        if sum(p["level"] == 0.0 for p in raw["processes"]) < 2:  # one commit: no A/A comparison, no false flag
            fail(f"{path}: fewer than 2 unchanged (A/A) commits" + (f" of {a.pool} processes" if a.pool > 1 else ""))
        regimes = a.regimes.split(",") if a.regimes else list(raw["cases"])
        if not set(regimes) <= set(raw["cases"]):
            fail(f"--regimes {a.regimes}: {path} has {', '.join(raw['cases'])}")
        for cls in raw["classes"]:
            for regime, case in raw["cases"].items():
                if regime not in regimes:
                    continue
                family = f"{cls}.track_ratio {regime}"
                tag = {"raw": path.name, "suite_version": raw.get("suite_version", "5"),
                       **({"pooled_processes": a.pool} if a.pool > 1 else {})}
                rows.append({**aa_row(raw, conf, family, cls, case), **tag})
                for level in LEVELS:
                    if any(p["level"] == level for p in raw["processes"]):
                        rows += [{**r, **tag} for r in trials(raw, conf, family, cls, case, level, a.trials)]
    if not rows:
        fail("nothing to analyze: no rows (the committed curve.json is left as it is)")
    curve.write_text(json.dumps({"raws": [p.name for p in paths], "rows": rows}, indent=1) + "\n")
    print(markdown(rows))
    print(f"curve: {curve}")
    if a.record:
        record_history(load_raw(paths[0]), pathlib.Path(a.record))


def cmd_history(a) -> None:
    """A scratch history of commits at the given levels after HEAD (for a bisect or gate by hand)."""
    raw, levels, out = load_raw(pathlib.Path(a.raw)), a.levels, pathlib.Path(a.out)
    if any(lv and str(lv) not in raw["delays"] for lv in levels):
        fail(f"--levels {levels}: {a.raw} has chains for {', '.join(raw['delays'])} only")
    if out.exists() and not (out.is_dir() and not any(out.iterdir())):
        fail(f"--out {a.out}: exists, and is no empty folder (the history is cloned there)")
    commits = make_history(out, "HEAD", levels, raw["delays"], keep_results=True)
    for c, lv in zip(commits, levels):
        print(f"{c} {lv:.0%}")
















def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    m = sub.add_parser("measure", help="calibrate and measure processes (GPU; resumable)")
    m.add_argument("--raw", help="raw measurements (default docs/detection/<machine>/raw.json)")
    m.add_argument("--aa", type=positive, default=30, help="unchanged (A/A) processes, at least")
    m.add_argument("--per-level", type=positive, default=10, help="processes per slowdown level")
    m.add_argument("--levels", type=levels_arg, default=LEVELS, help="slowdown levels to measure (calibrated ones)")
    m.add_argument("--classes", default="Forward,Inference",
                   help=f"classes to measure, of {', '.join(CLASSES)} (Training: prefill or wide, no decode case)")
    m.add_argument("--regimes", help="only these regimes (decode, prefill, wide) in a new raw file "
                   "(default decode,prefill)")
    m.add_argument("--start", choices=["fork", "spawn"], default="fork",
                   help="how each class's process starts: forked from this one (as asv does) or a fresh interpreter")
    m.add_argument("--seed", help="take the calibration (chains per level) from this earlier raw file")
    m.add_argument("--calibration-rounds", type=positive, default=3)
    n = sub.add_parser("analyze", help="the curve from the raw measurements")
    n.add_argument("--raw", action="append", default=[], help="raw file (repeatable; curve.json goes beside the first)")
    n.add_argument("--regimes", help="only these regimes (decode, prefill, wide)")
    n.add_argument("--trials", type=positive, default=TRIALS, help="histories per family, level and placement")
    n.add_argument("--out", type=json_path, help="the curve's file (default: curve.json beside the first --raw, "
                   "which only an analysis of the raw files it lists, unnarrowed, may replace)")
    n.add_argument("--pool", type=positive, default=1,
                   help="a commit = this many measured processes of its level, their rounds split among them")
    n.add_argument("--record", help="also write the recorded history (summary.json, results/) here")
    h = sub.add_parser("history", help="a scratch history with commits at these slowdown levels after HEAD")
    h.add_argument("--raw", required=True, help="the raw file whose chains make the slowdowns")
    h.add_argument("--levels", required=True, type=levels_arg,
                   help="e.g. 0.1,0.1,0.1: GOOD's child slower, two commits after")
    h.add_argument("--out", required=True)
    a = ap.parse_args()
    if a.cmd != "measure":
        {"analyze": cmd_analyze, "history": cmd_history}[a.cmd](a)
        return
    # Stopped, measure keeps every finished commit in --raw (saved after each) and kills its child.
    old = {s: signal.signal(s, _stop) for s in (signal.SIGTERM, signal.SIGHUP)}
    try:
        cmd_measure(a)
    except (KeyboardInterrupt, Stopped) as e:
        print(f"detection_experiment.py: stopped by {e if isinstance(e, Stopped) else 'Ctrl-C'}; "
              "the finished commits are in --raw", file=sys.stderr)
        sys.exit(130)
    finally:
        for sig, handler in old.items():
            signal.signal(sig, handler)


if __name__ == "__main__":
    main()

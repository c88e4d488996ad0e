"""The tracker's command line: benchmark commits, publish the site, gate, bisect, compare.

    python tools/bench.py run [REV ...]             benchmark commits into the history (default HEAD;
                                                    A..B backfills oldest first; NEW: every commit
                                                    after the newest one with results here, and
                                                    that one where a family is missing)
    python tools/bench.py publish                   the HTML site: history, now.html, provenance
    python tools/bench.py gate BASE HEAD            PR gate: HEAD against its merge-base with BASE
    python tools/bench.py bisect GOOD..BAD BENCH    the first commit where BENCH got slower
    python tools/bench.py compare [REF]             the working tree against REF (default HEAD)

One command at a time per checkout: they share its asv environment, and a
second is refused (exit 2) while one runs; run another from another clone.
Exit status: 0 done; 1 slower beyond the threshold (gate, compare), no step
(bisect) or failed cases (run); 2 a usage or configuration error (refused
before anything is measured or recorded); 3 a run error (gate, compare,
bisect; also a crash of bench.py itself, with its traceback); 130/143/129
interrupted by SIGINT/SIGTERM/SIGHUP (finished results kept; a SIGHUP that
nohup ignores stays ignored).
Mode: with a CUDA GPU the machine is named after it (``nvidia-h200``) and
``run`` writes the committed history (``results/``); without one the
kernels run in Triton's interpreter under ``cpu-triton-interpreter``, in
``.asv/interpreter/`` (not performance history). FUSEDKERNEL_MACHINE names
the machine yourself (one per runner: letters, digits, ``.``, ``_``, ``-``).
``--wheels DIR`` installs asv's environment needs from a folder of ``.whl``
files (hosts with no package registry). REGEX and BENCH are Python regexes,
as asv's ``-b`` takes them, matched anywhere in ``<module>.<Class>.<method>(<params>)``;
leading global flags such as ``(?i)`` apply to that regex alone.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import json
import math
import os
import pathlib
import re
import signal
import subprocess
import sys
import tempfile
import traceback

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
sys.path.insert(1, str(pathlib.Path(__file__).resolve().parent.parent))
import asvrun  # noqa: E402
import provenance  # noqa: E402
import revisions  # noqa: E402
import signals  # noqa: E402
import verdict  # noqa: E402
from asvrun import FAMILIES, ROOT  # noqa: E402
from revisions import UsageError, commit_of, git, range_commits  # noqa: E402
from signals import arm, asv, unarmed  # noqa: E402

FLAGGED = r"track_ratio\('fused'"  # the default selection of gate and compare
STATE = ROOT / ".asv" / "state"


class RunError(Exception):
    """The measurement itself failed (asv, a commit that does not run): one line, exit 3."""


def detect() -> tuple[str, str]:
    """asvrun.detect() (imports torch), then :func:`signals.arm`."""
    mode, machine = asvrun.detect()
    arm()
    return mode, machine


def warn_uncommitted(commits: list[str]) -> None:
    if commit_of("HEAD") in commits and git("status", "--porcelain", "--", "fusedkernel"):
        print("warning: fusedkernel/ has uncommitted changes, which `run` does not measure (it measures "
              "commits); `python tools/bench.py compare` measures the working tree against HEAD", flush=True)
    # asv runs the working tree's suite on every commit: the history would hold a measurement no commit describes.
    if git("status", "--porcelain", "--", "benchmarks", "asv.conf.json", "tools/asv_env_install.py"):
        print("warning: the suite (benchmarks/, asv.conf.json) has uncommitted changes, and asv measures every "
              "commit with the working tree's suite: these results, written to the history, come from a suite no "
              "commit holds; commit it first (`python tools/bench.py compare` writes nothing)", flush=True)


def measure(commit: str, mode: str, machine: str, conf: pathlib.Path, wheels: str | None, regexes: list[str],
            results: pathlib.Path, *, resume: bool = True, append: bool = False,
            prov: pathlib.Path | None = None) -> list[str]:
    """Benchmark ``commit`` one family at a time into ``results``; return its failed cases.

    ``resume``: skip the families this commit already finished with the
    same selection (after an interrupt), as the state in ``.asv/state`` says,
    or where it is gone or unreadable (a fresh checkout: CI) the newest provenance
    record. ``append``: add samples to the stored ones (alternating
    re-measurements). ``prov``: write a provenance record there, also when
    interrupted.
    """
    for path in asvrun.result_files(results, machine, commit):
        asvrun.readable(path)
    files = asvrun.result_files(results, machine, commit)
    before = json.loads(files[0].read_text()) if files else None
    state = STATE / machine / f"{commit}.json"
    history = results == asvrun.results_dir(mode)  # only runs into the history resume
    done = load_state(state) if resume and history else {}
    if resume and history and prov is not None and not done:  # no state here (CI), or an unreadable one
        done = finished_families(provenance.newest(prov / machine, commit))
    stored = revisions.stored_names(results, machine, commit)
    started_at, start, status, run, asv_failed = provenance.now(), provenance.gpu_snapshot(), "interrupted", [], []
    log = asvrun.LOGS / f"{commit[:8]}-{started_at.replace(':', '')}.log"
    shown = os.path.relpath(log, ROOT)
    tried = []  # the families asv was started for: without one, nothing was measured and nothing is recorded
    try:
        with provenance.ClockSampler() as clocks:
            for family in families(mode, regexes):
                regex = asvrun.family_regex(family, regexes)
                # The state says the family finished; its values must still be there (a results
                # file moved aside as unreadable takes them along).
                if done.get(family) == regex and any(n.startswith(f"add_rmsnorm.{family}.") for n in stored):
                    print(f"{commit[:8]} {family}: finished in an earlier run, kept", flush=True)
                    continue
                print(f"{commit[:8]} {family}: measuring (log: {shown})", flush=True)
                tried.append(family)
                args = ["run", f"{commit}^!", "--config", str(conf), "--machine", machine, "--record-samples",
                        "-b", regex] + (["--append-samples"] if append else [])
                rc = asv(args, asvrun.asv_env(mode, wheels, [regex]), log)
                run.append(regex)
                if rc and not any(n.startswith(f"add_rmsnorm.{family}.") for n in revisions.stored_names(results, machine, commit)):
                    asv_failed.append(f"{family} (asv exit status {rc}, nothing stored: see {shown})")
                    continue
                if history:
                    done[family] = regex
                    save_state(state, done)
        status = "complete"
    finally:
        # A signal here is raised once the record is written: a first Ctrl-C after the last family
        # (the state then says every family finished) must not lose it.
        with unarmed():
            # Failures are read before earlier values are put back: a case that fails now is
            # reported (and recorded) as failed even where its earlier value is kept.
            failed = asv_failed + [c for c in asvrun.failed_cases(results, machine, commit)
                                   if any(re.search(r, c) for r in run)]
            files = asvrun.result_files(results, machine, commit)
            if files and before:
                asvrun.keep_earlier_values(files[0], before)
            if status == "complete" and failed:
                status = "failed cases"
            if prov is not None and tried:
                from benchmarks._measure import METHODS

                provenance.record(prov / machine, machine, commit, mode, start, provenance.gpu_snapshot(), started_at,
                                  clocks.summary, status=status,
                                  extra={"failed_cases": failed, "timing_methods": METHODS,
                                         "log": log.name if log.exists() else None, "selection": regexes,
                                         "finished_families": done if history else {}})
            elif prov is not None and status == "complete":
                print(f"{commit[:8]}: every family finished in an earlier run: nothing measured, no provenance "
                      "record (--force measures again)", flush=True)
    return failed


def finished_families(rec: dict | None) -> dict:
    """{family: regex} a provenance record says its run finished; {} for None or an older record."""
    done = (rec or {}).get("finished_families")
    ok = isinstance(done, dict) and all(isinstance(k, str) and isinstance(v, str) for k, v in done.items())
    return done if ok else {}


def load_state(path: pathlib.Path) -> dict:
    """{family: regex} an earlier run of the commit finished; {} (with a warning) when unreadable."""
    try:
        done = json.loads(path.read_text())
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as e:
        print(f"warning: {path} is unreadable ({type(e).__name__}); measuring every family again", flush=True)
        return {}
    return done if isinstance(done, dict) else {}


def save_state(path: pathlib.Path, done: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    asvrun.write_whole(path, json.dumps(done))  # an interrupt mid-write leaves the previous state whole


def discovered(mode: str) -> list[str]:
    """Every "benchmark(params)" of the working tree's suite in ``mode``, named as asv names them for ``-b``."""
    import itertools

    if mode == "interpreter":
        os.environ.setdefault("TRITON_INTERPRET", "1")  # the suite's params follow the mode
    with unarmed():  # imports triton
        from benchmarks import add_rmsnorm as suite

    out = []
    for family in FAMILIES:
        cls = getattr(suite, family)
        for attr in (a for a in dir(cls) if a.startswith("track_")):
            params = getattr(getattr(cls, attr), "params", None) or cls.params
            out += [f"add_rmsnorm.{family}.{attr}({', '.join(map(repr, c))})" for c in itertools.product(*params)]
    return out


def families(mode: str, regexes: list[str]) -> list[str]:
    """The families a selection needs (all of them when nothing is selected)."""
    if not regexes:
        return FAMILIES
    known = discovered(mode)
    return [f for f in FAMILIES if any(re.search(asvrun.family_regex(f, regexes), e) for e in known)]


def cmd_run(a) -> int:
    # Revisions before the mode (detecting it imports torch: seconds), so a bad one is refused at once; NEW needs it.
    mode, machine = detect() if "NEW" in a.revs else (None, None)
    commits = revisions.resolve(a.revs, machine, asvrun.results_dir(mode) if mode else None,
                              asvrun.provenance_dir(mode) / machine if mode else None)
    if mode is None:
        mode, machine = detect()
    if a.bench and not families(mode, a.bench):
        raise UsageError(f"--bench {a.bench} matches no benchmark of the suite")
    if not commits:  # only NEW gives none
        last = revisions.newest_with_results(machine, asvrun.results_dir(mode), asvrun.provenance_dir(mode) / machine)
        print(f"bench.py run: nothing new on {machine} " + (f"since {last[:10]}" if last else "(no commits)"))
        return 0
    warn_uncommitted(commits)
    failed = {}
    with asvrun.config(mode) as conf:
        asv(["machine", "--machine", machine, "--yes", "--config", str(conf)], asvrun.asv_env(mode, a.wheels),
            asvrun.LOGS / "machine.log")
        for i, commit in enumerate(commits, 1):
            print(f"== {commit[:10]} ({i}/{len(commits)}) on {machine}", flush=True)
            cases = measure(commit, mode, machine, conf, a.wheels, a.bench or [], asvrun.results_dir(mode),
                            resume=not a.force, prov=asvrun.provenance_dir(mode))
            if cases:
                failed[commit] = cases
                print(f"{commit[:10]}: {len(cases)} failed cases: {', '.join(cases[:5])}"
                      + (" ..." if len(cases) > 5 else ""), flush=True)
    if not a.quiet:
        import report

        print(report.run_summary(asvrun.results_dir(mode), machine, commits[-1], mode == "interpreter") + "\n")
    # The last line: what a log's tail (CI) shows.
    n = sum(map(len, failed.values()))
    where = "; ".join(f"{c[:10]}: {len(v)}" for c, v in failed.items())
    print(f"bench.py run: {len(commits)} commits on {machine}, {n} failed cases" + (f" ({where})" if n else ""))
    return 1 if n else 0


def measure_pair(mode, machine, wheels, regexes, base, head, tmp: pathlib.Path, rounds: int = 1):
    """Measure ``base`` and ``head`` alternately ``rounds`` times into ``tmp``.

    Returns their asv Results (None where nothing was measured) and the failed cases, each named with the
    commit it failed at.
    """
    from asv.results import Results

    failed = []
    with asvrun.config(mode, results=tmp) as conf:
        asv(["machine", "--machine", machine, "--yes", "--config", str(conf)], asvrun.asv_env(mode, wheels),
            asvrun.LOGS / "machine.log")
        for k in range(rounds):
            for commit in (base, head):
                print(f"== {commit[:10]} (round {k + 1}/{rounds})", flush=True)
                failed += [f"{case} at {commit[:10]}" for case in
                           measure(commit, mode, machine, conf, wheels, regexes, tmp, resume=False, append=k > 0)]
    loaded = [Results.load(str(asvrun.result_files(tmp, machine, c)[0])) if asvrun.result_files(tmp, machine, c)
              else None for c in (base, head)]
    return loaded, failed


def selection_matches(mode: str, regexes: list[str]) -> bool:
    """Does any flagged benchmark of the suite match ``regexes``?"""
    conf, known = asvrun.load_conf(), discovered(mode)
    return any(verdict.flagged(conf, e) and any(re.search(r, e) for r in regexes) for e in known)


def unmatched(what: str, mode: str) -> UsageError:
    """The refusal of a selection that matches no flagged benchmark this host runs."""
    with unarmed():  # discovered() has imported the suite already; this is its module
        from benchmarks import _cases

    if mode == "interpreter":
        # The site's bisect commands name GPU-grid cases; a CPU host runs other, smaller ones.
        where = (f"a CPU-only host runs the interpreter's cases only ({', '.join(_cases.INTERPRETER_CASES)}); "
                 "the GPU grid's cases (benchmarks/_cases.py) are bisected and gated on a GPU host")
    else:
        where = "the suite's cases are benchmarks/_cases.py's GPU grid"
    return UsageError(f"{what} matches no flagged benchmark this host runs: {where}; which benchmarks are "
                      "flagged: asv.conf.json's regressions_thresholds")


def cmd_gate(a) -> int:
    head, tip = commit_of(a.head), commit_of(a.base)
    base = git("merge-base", tip, head)
    if tip == head:
        raise UsageError(f"BASE and HEAD are the same commit ({head[:10]}): run the gate on a branch ahead of BASE")
    if base == head:
        raise UsageError(f"HEAD {head[:10]} is an ancestor of BASE {tip[:10]}: nothing to gate (HEAD adds no commit)")
    mode, machine = detect()
    regexes = a.bench or [FLAGGED]
    if not selection_matches(mode, regexes):
        raise unmatched(f"--bench {regexes}", mode)
    if a.summary:  # before measuring: a summary that cannot be written is found out after minutes otherwise
        try:
            open(a.summary, "a").close()
        except OSError as e:
            raise UsageError(f"--summary {a.summary}: cannot append to it ({e.strerror or e})") from None
    print(f"gate: base {base[:10]} (merge-base), head {head[:10]}, on {machine}", flush=True)
    with tempfile.TemporaryDirectory(prefix="fk-gate-") as tmp:
        (b, h), failed = measure_pair(mode, machine, a.wheels, regexes, base, head, pathlib.Path(tmp))
    conf = asvrun.load_conf()
    if b is None or h is None or blocking(failed, conf):
        text = f"## Benchmark gate: ERROR\n\nthe run failed: {len(failed)} failed cases: {', '.join(failed[:10])}\n"
        rc = 3
    else:
        rows = verdict.judge(conf, b, h)
        if not rows:  # the selection names flagged benchmarks (checked above): they did not run
            raise RunError(f"--bench {regexes}: no flagged benchmark was measured at both commits")
        bad = [r for r in rows if r.regressed]
        broken = [r for r in rows if r.ratio is None]  # zero, infinite, or skipped at the head: no ratio
        head_line = (f"ERROR: {len(broken)} flagged values give no ratio (zero, infinite, or skipped at head)"
                     if broken else
                     f"FAILED: {len(bad)} slower beyond the threshold" if bad else "passed")
        text = (f"## Benchmark gate: {head_line}\n\nbase {base[:10]}, head {head[:10]}, {machine}; "
                f"{len(rows)} flagged values compared\n\n" + verdict.table(sorted(rows, key=lambda r: -(r.ratio or 0)),
                                                                "base", "head") + "\n")
        if failed:  # values shown only (a peer's, GB/s): no verdict rests on them
            text += f"\n{len(failed)} cases that are not flagged failed: {', '.join(failed[:10])}\n"
        rc = 3 if broken else 1 if bad else 0
    print(text, flush=True)
    if a.summary:
        try:
            with open(a.summary, "a") as f:
                f.write(text)
        except OSError as e:  # the verdict stands: a write error is no "slower"
            print(f"bench.py gate: warning: the summary was not written to {a.summary} ({e.strerror or e})",
                  file=sys.stderr)
    return rc


def cmd_bisect(a) -> int:
    import bisection

    good, after = range_commits(a.range)
    mode, machine = detect()
    regexes, bench = a.bench, a.bench[0]
    if not selection_matches(mode, regexes):
        raise unmatched(repr(bench), mode)
    conf_json = asvrun.load_conf()
    from asv.results import Results

    with tempfile.TemporaryDirectory(prefix="fk-bisect-") as tmp, asvrun.config(mode, pathlib.Path(tmp)) as conf:
        tmp = pathlib.Path(tmp)
        asv(["machine", "--machine", machine, "--yes", "--config", str(conf)], asvrun.asv_env(mode, a.wheels),
            asvrun.LOGS / "machine.log")
        chosen, failed = [], []  # failed: the cases of the latest measurement that failed

        def values(commit):
            files = asvrun.result_files(tmp, machine, commit)
            res = Results.load(str(files[0])) if files else None
            return {e: (v, ss) for e, v, ss in verdict.entries(res)} if res else {}

        def one(commit, append=False):
            failed.clear()
            failed.extend(measure(commit, mode, machine, conf, a.wheels, regexes, tmp, resume=False, append=append))
            vals = values(commit)
            if not chosen:  # the entry: the flagged one the selection names (the largest GOOD->BAD step if several)
                flagged = [e for e, (v, _) in vals.items() if verdict.flagged(conf_json, e) and re.search(bench, e)
                           and not (isinstance(v, float) and math.isnan(v))]  # NaN: not run here
                if not flagged:  # the selection names flagged benchmarks (checked above): asv failed
                    raise RunError(f"{bench!r} measured no flagged benchmark at {commit[:10]} (see the log above)")
                chosen.append(flagged)
            return vals

        good_vals = one(good)
        bad_vals = one(after[-1])
        candidates = chosen[0]

        def step(e):
            g, b = good_vals.get(e, (None,))[0], bad_vals.get(e, (None,))[0]
            return b / g if g and b else 0
        entry = max(candidates, key=step)
        factor = 1 + verdict.gate_threshold(conf_json, entry)
        print(f"bisect: {entry}, threshold x{factor:.3g}, {len(after)} commits after GOOD", flush=True)
        cache = {good: good_vals, after[-1]: bad_vals}

        def measure_one(commit):
            if commit not in cache:
                cache[commit] = one(commit)
            v, ss = cache[commit].get(entry, (None, None))
            return (v, ss) if verdict.usable(v) else (None, ss)  # NaN (not run), zero or infinity: a failure

        def remeasure(order):
            samples = {}
            for k, commit in enumerate(order):
                if commit not in samples:  # the search's values go: a failure would keep them (keep_earlier_values)
                    for path in asvrun.result_files(tmp, machine, commit):
                        path.unlink()
                v, ss = one(commit, append=commit in samples).get(entry, (None, None))  # the second visit adds
                n = len(ss[1] or []) if ss else 0
                if entry in failed or not verdict.usable(v) or n <= samples.get(commit, 0):
                    raise RunError(f"{entry} failed to measure again at {commit[:10]} while confirming the step "
                                   "(see the log above)")
                samples[commit] = n
            return {c: values(c).get(entry, (None, None)) for c in order}

        out = bisection.bisect([good] + after, measure_one, remeasure, factor, entry)
    print(f"bisect: measured {len(out.steps)} commits: " + ", ".join(f"{c[:10]}={v and f'{v:.4g}'}" for c, v in out.steps))
    if out.confirmation is not None:
        c = out.confirmation
        print(f"bisect: re-measured, alternating: parent {c.before and f'{c.before:.4g}'}, named "
              f"{c.after and f'{c.after:.4g}'}, ratio {c.ratio and f'{c.ratio:.3f}'}, Mann-Whitney p {c.p}")
    if out.error:
        print(f"bisect: run error: {out.reason}")
        return 3
    if out.named is None:
        print(f"bisect: no commit named: {out.reason}")
        return 1
    subject = git("show", "-s", "--format=%h %s", out.named)
    print(f"bisect: first slow commit {out.named} ({subject}): {out.reason}")
    return 0


def cmd_compare(a) -> int:
    ref = commit_of(a.ref)
    mode, machine = detect()
    if a.bench and not families(mode, a.bench):
        raise UsageError(f"--bench {a.bench} matches no benchmark of the suite")
    tree, changed = working_tree_commit()
    if not changed:
        # Its own commit, not HEAD's: asv keys results by commit, so measuring
        # HEAD against HEAD would overwrite one side with the other (ratio 1.000).
        print(f"compare: the working tree has no changes against HEAD; measuring {a.ref} against a copy of HEAD",
              flush=True)
    regexes = a.bench or [COMPARE_DEFAULT]
    with tempfile.TemporaryDirectory(prefix="fk-compare-") as tmp:
        (b, h), failed = measure_pair(mode, machine, a.wheels, regexes, ref, tree, pathlib.Path(tmp), a.rounds)
    if b is None or h is None:
        print(f"compare: the run failed ({len(failed)} failed cases: {', '.join(failed[:10])})")
        return 3
    conf = asvrun.load_conf()
    vb, vh = ({e: (v, ss) for e, v, ss in verdict.entries(res)} for res in (b, h))
    rows = [verdict.compare(e, vb[e][0], vh[e][0], vb[e][1], vh[e][1], 1 + verdict.gate_threshold(conf, e))
            for e in sorted(vb.keys() & vh.keys())]
    # A failure (None) is in failed; NaN where the base ran nothing has no verdict, where only the head did, one.
    rows = [r for r in rows if r.before is not None and r.after is not None and verdict.comparable(r.before)]
    label = "working tree" if changed else "HEAD (a copy)"
    against = "the working tree" if changed else "an unchanged copy of HEAD"
    print(f"compare on {machine}: {a.ref} ({ref[:10]}) against {against}; nothing is written to the history\n")
    # Only flagged values are judged: the others include GB/s (higher is faster) and the peers' ratios.
    judged = [r for r in rows if verdict.flagged(conf, r.entry)]
    if judged:
        print(verdict.table(judged, a.ref, label))
    shown = [r for r in rows if not verdict.flagged(conf, r.entry)]
    if shown:
        print(("\n" if judged else "") + "Not flagged, so not judged (shown only):\n\n"
              + verdict.plain_table(shown, a.ref, label))
    if failed:  # a case that failed on either side is no verdict: the table lacks it
        print(f"\ncompare: {len(failed)} failed cases, not in the table: {', '.join(failed[:10])}")
    broken = [r.entry for r in judged if r.ratio is None]  # zero, infinite, or skipped on the tree's side
    if broken:
        print(f"\ncompare: {len(broken)} flagged values give no ratio (zero, infinite, or skipped by {label}): "
              f"{', '.join(broken[:10])}")
    if blocking(failed, conf) or broken:
        return 3
    return 1 if any(r.regressed for r in judged) else 0


def blocking(failed: list[str], conf: dict) -> list[str]:
    """The failures (``measure_pair``'s, "<case> at <commit>") that can leave a flagged value unmeasured: all but
    those of values shown only (a peer's ratio, time, GB/s)."""
    return [f for f in failed if not (f.startswith("add_rmsnorm.") and
                                      not verdict.flagged(conf, f.rsplit(" at ", 1)[0]))]


# compare's default: the flagged ratio at the widths and token counts a kernel change shows first.
COMPARE_DEFAULT = r"(Forward|Inference)\.track_ratio\('fused', '(bf16 (1x4096|64x5120|8192x5120)|bf16 1x64|fp32 8x1000)'\)"


def working_tree_commit() -> tuple[str, bool]:
    """(a commit object of the working tree on top of HEAD, whether the tree differs from HEAD).

    The tree holds tracked and untracked files, not ignored ones; a clean
    tree gives a commit of HEAD's content with a hash of its own. Made with
    a temporary index and a fixed identity (a host without git's user.name
    can compare too), never referenced by a branch: nothing is added to the
    history, and git's garbage collection drops it.
    """
    changed = bool(git("status", "--porcelain"))
    with tempfile.TemporaryDirectory(prefix="fk-index-") as tmp:
        env = {**os.environ, "GIT_INDEX_FILE": str(pathlib.Path(tmp) / "index"),
               **{f"GIT_{who}_{what}": v for who in ("AUTHOR", "COMMITTER")
                  for what, v in (("NAME", "bench.py compare"), ("EMAIL", "compare@localhost"))}}
        run = lambda *args: subprocess.run(["git", *args], cwd=ROOT, env=env, check=True,  # noqa: E731
                                           capture_output=True, text=True).stdout.strip()
        run("read-tree", "HEAD")
        if changed:
            run("add", "-A")
        tree = run("write-tree")
        message = "working tree (bench.py compare)" if changed else "HEAD, unchanged (bench.py compare)"
        return run("commit-tree", tree, "-p", "HEAD", "-m", message), changed


def cmd_publish(a) -> int:
    import publish

    arm()
    return publish.publish()


def at_least_one(text: str) -> int:
    if not text.strip().isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number of at least 1")
    return int(text)


def parser() -> tuple[argparse.ArgumentParser, dict[str, argparse.ArgumentParser]]:
    p = argparse.ArgumentParser(prog="bench.py", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run", help="benchmark commits into the history")
    r.add_argument("revs", nargs="*", help="commits, ranges A..B, or NEW (default HEAD; NEW skips the commits "
                   "that change only results/ and provenance/, and resumes the newest one with results "
                   "where a family is missing)")
    r.add_argument("--force", action="store_true", help="measure again what an earlier run finished")
    r.add_argument("--quiet", action="store_true", help="no summary table at the end")
    sub.add_parser("publish", help="build the HTML site")
    g = sub.add_parser("gate", help="PR gate: HEAD against its merge-base with BASE")
    g.add_argument("base")
    g.add_argument("head")
    g.add_argument("--summary", help="append the markdown report here (e.g. $GITHUB_STEP_SUMMARY)")
    b = sub.add_parser("bisect", help="the first commit where BENCH got slower")
    b.add_argument("range", help="GOOD..BAD")
    b.add_argument("bench_regex", metavar="BENCH", help=r"""a benchmark regex, e.g. "Inference.track_ratio\('fused', """
                   r"""'bf16 1x4096'\)" (leading flags such as (?i) apply to it)""")
    c = sub.add_parser("compare", help="the working tree against REF, on this machine")
    c.add_argument("ref", nargs="?", default="HEAD")
    c.add_argument("--rounds", type=at_least_one, default=1, help="alternate REF and the tree this many times (>= 1)")
    for s in (r, g, c):
        s.add_argument("--bench", action="append", metavar="REGEX",
                       help="only benchmarks matching this asv -b regex (repeatable; a Python regex: leading global "
                            "flags such as (?i) apply to it alone)")
    for s in (r, g, b, c):
        s.add_argument("--wheels", metavar="DIR", help="folder of .whl files for offline asv environments")
    return p, {"run": r, "publish": sub.choices["publish"], "gate": g, "bisect": b, "compare": c}


def parse(argv: list[str]) -> argparse.Namespace:
    """The arguments, checked: UsageError for what argparse would misreport, or what is found out too late."""
    p, subs = parser()
    cmd = next((t for t in argv if not t.startswith("-")), None)
    if cmd in subs:  # argparse takes '-x..HEAD' for an option and reports a missing argument instead
        known = {o for a in subs[cmd]._actions for o in a.option_strings}
        for t in argv[argv.index(cmd) + 1:]:
            if t == "--":
                break
            name = t.split("=", 1)[0]
            if (t.startswith("-") and t != "-" and not re.fullmatch(r"-\d+", t)
                    and not any(o == name or (name.startswith("--") and o.startswith(name)) for o in known)):
                raise UsageError(f"{t!r} looks like an option, not a revision or regex; it is no option of {cmd}")
    a = p.parse_args(argv)
    a.bench = [a.bench_regex] if a.cmd == "bisect" else getattr(a, "bench", None)
    try:
        verdict.check_conf(asvrun.load_conf())
    except ValueError as e:
        raise UsageError(str(e)) from None
    if a.cmd != "publish":
        check_machine(os.environ.get("FUSEDKERNEL_MACHINE"))
        check_regexes(a.bench or [], "BENCH" if a.cmd == "bisect" else "--bench")
        if a.wheels:
            check_wheels(a.wheels)
    return a


def check_machine(name: str | None) -> None:
    if name is not None and not asvrun.valid_machine(name):
        raise UsageError(f"FUSEDKERNEL_MACHINE={name!r} is no machine name (a folder under results/): letters, "
                         "digits, '.', '_' and '-', a letter or digit first, no '..'")


def check_regexes(regexes: list[str], what: str) -> None:
    """Each regex, and each family's combined regex (what asv gets), must compile."""
    for r in regexes:
        if not r:
            raise UsageError(f"{what} is empty: name a benchmark (an empty regex matches every one)")
        try:
            re.compile(r)
        except re.error as e:
            raise UsageError(f"{what} {r!r} is not a valid regex: {e}") from None
    for family in FAMILIES:
        try:
            re.compile(asvrun.family_regex(family, regexes))
        except re.error as e:
            raise UsageError(f"{what} {regexes}: the regexes do not combine into one: {e}") from None


def check_wheels(folder: str) -> None:
    path = pathlib.Path(folder)
    if not path.is_dir():
        raise UsageError(f"--wheels {folder}: no such folder")
    if not any(path.glob("*.whl")):
        raise UsageError(f"--wheels {folder}: no .whl file in it")


COMMANDS = {"run": cmd_run, "publish": cmd_publish, "gate": cmd_gate, "bisect": cmd_bisect, "compare": cmd_compare}


@contextlib.contextmanager
def checkout_lock(cmd: str):
    """Hold this checkout's asv state (.asv/: the one environment every command installs its commits into, the
    site) for one command at a time; UsageError while another holds it (two at once measured each other's commit).

    The lock file is in the checkout's git folder: a command refused later leaves the working tree as it was.
    """
    found = subprocess.run(["git", "rev-parse", "--absolute-git-dir"], cwd=ROOT, capture_output=True, text=True)
    if found.returncode:
        raise UsageError(f"{ROOT} is not a git checkout (the tracker measures its commits): "
                         f"{found.stderr.strip() or 'git rev-parse failed'}")
    path = pathlib.Path(found.stdout.strip()) / "fusedkernel-bench.lock"
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)  # not inherited by asv's processes: ours alone holds it
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 200, 0).decode(errors="replace").strip() or "another process"
            raise UsageError(f"this checkout's asv environment ({asvrun.LOGS.parent}) is in use by {holder}: wait "
                             "for it to end, or run from another clone") from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"bench.py {cmd} (pid {os.getpid()})".encode(), 0)
        yield
    finally:
        os.close(fd)  # the lock goes with it, also when the process dies


def main(argv=None) -> int:
    # First: a signal from here on stops the run (see signals.catch_signals and signals.arm).
    old = signals.catch_signals()
    argv = sys.argv[1:] if argv is None else list(argv)
    cmd = next((t for t in argv if t in COMMANDS), "")
    # Progress must reach a pipe (CI's log, tee) as it happens, not when the buffer fills.
    if hasattr(sys.stdout, "reconfigure"):
        sys.stdout.reconfigure(line_buffering=True)
    try:
        try:
            a = parse(argv)
            with checkout_lock(a.cmd):
                return COMMANDS[a.cmd](a)
        finally:
            signals.disarm()  # unwound: a late signal must not raise inside the reporting below
    except (KeyboardInterrupt, Exception) as e:
        return report_error(cmd, e)
    finally:
        for s, handler in old.items():
            signal.signal(s, handler)


def report_error(cmd: str, e: Exception) -> int:
    """One line on stderr (a crash: its traceback too) and the exit status."""
    first = signals.first_received()
    if first or isinstance(e, (asvrun.Interrupted, KeyboardInterrupt)):
        # An error after a signal is the signal's doing (Ctrl-C reaches git's and asv's processes too).
        sig = (signal.Signals[e.args[0]] if isinstance(e, asvrun.Interrupted) else first or signal.SIGINT)
        print(f"bench.py {cmd}: interrupted ({sig.name}); finished results are kept", file=sys.stderr)
        return signals.STOPS[sig]
    if isinstance(e, UsageError):
        print(f"bench.py {cmd}: {e}", file=sys.stderr)
        return 2
    if isinstance(e, RunError):
        print(f"bench.py {cmd}: run error: {e}", file=sys.stderr)
        return 3
    traceback.print_exc()  # a bug of bench.py: exit 3 (a run error), never 1 ("slower")
    print(f"bench.py {cmd}: crashed ({type(e).__name__}): see the traceback above", file=sys.stderr)
    return 3


if __name__ == "__main__":
    sys.exit(main())

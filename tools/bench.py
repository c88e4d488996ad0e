"""The tracker's command line: benchmark commits, publish the site, gate, bisect, compare.

    python tools/bench.py run [REV ...]             benchmark commits into the history (default HEAD;
                                                    A..B backfills oldest first; NEW: every commit
                                                    after the newest one with results here)
    python tools/bench.py publish                   the HTML site: history, now.html, provenance
    python tools/bench.py gate BASE HEAD            PR gate: HEAD against its merge-base with BASE
    python tools/bench.py bisect GOOD..BAD BENCH    the first commit where BENCH got slower
    python tools/bench.py compare [REF]             the working tree against REF (default HEAD)

Exit status: 0 done; 1 slower beyond the threshold (gate, compare), no step
(bisect) or failed cases (run); 2 a usage or configuration error; 3 a run
error (gate, compare, bisect); 130/143 interrupted (finished results kept).
Mode: with a CUDA GPU the machine is named after it (``nvidia-h200``) and
``run`` writes the committed history (``results/``); without one the
kernels run in Triton's interpreter under ``cpu-triton-interpreter``, in
``.asv/interpreter/`` (not performance history). FUSEDKERNEL_MACHINE names
the machine yourself (one per runner). ``--wheels DIR`` installs asv's
environment needs from a folder (hosts with no package registry).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import pathlib
import re
import signal
import subprocess
import sys
import tempfile
import threading

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
sys.path.insert(1, str(pathlib.Path(__file__).resolve().parent.parent))
import asvrun  # noqa: E402
import provenance  # noqa: E402
import verdict  # noqa: E402
from asvrun import FAMILIES, ROOT  # noqa: E402

FLAGGED = r"track_ratio\('fused'"  # the default selection of gate and compare
STATE = ROOT / ".asv" / "state"


class UsageError(Exception):
    """A bad argument, revision or range: one line for the user, exit 2."""


class RunError(Exception):
    """The measurement itself failed (asv, a commit that does not run): one line, exit 3."""


def git(*args: str) -> str:
    out = subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True)
    if out.returncode:
        raise UsageError(f"git {' '.join(args)}: {out.stderr.strip().splitlines()[-1] if out.stderr.strip() else 'failed'}")
    return out.stdout.strip()


def check_rev(rev: str) -> str:
    if rev.startswith("-"):
        raise UsageError(f"{rev!r} looks like an option, not a revision")
    return rev


def commit_of(rev: str) -> str:
    return git("rev-parse", "--verify", "--end-of-options", f"{check_rev(rev)}^{{commit}}")


def range_commits(spec: str) -> tuple[str, list[str]]:
    """(GOOD, commits after GOOD up to BAD, oldest first) of ``GOOD..BAD``; UsageError when it is no range."""
    if ".." not in spec or "..." in spec:
        raise UsageError(f"{spec!r} is not a range: give GOOD..BAD")
    good, bad = (commit_of(r) for r in spec.split("..", 1))
    if subprocess.run(["git", "merge-base", "--is-ancestor", good, bad], cwd=ROOT).returncode:
        raise UsageError(f"{spec}: {good[:10]} is not an ancestor of {bad[:10]}")
    if good == bad:
        raise UsageError(f"{spec} is empty: GOOD and BAD are the same commit")
    commits = git("rev-list", "--reverse", "--first-parent", "--ancestry-path", f"{good}..{bad}").split()
    if not commits:
        raise UsageError(f"{spec}: {good[:10]} is not on {bad[:10]}'s first-parent line (merged from a side branch?)")
    return good, commits


def newest_with_results(machine: str, results: pathlib.Path) -> str | None:
    """The newest first-parent ancestor of HEAD with results for ``machine`` in ``results``."""
    stored = set()
    for path in (results / machine).glob("*.json"):
        try:
            stored.add(json.loads(path.read_text())["commit_hash"])
        except (ValueError, KeyError, OSError):
            continue
    for commit in git("rev-list", "--first-parent", "HEAD").split():
        if commit in stored:
            return commit
    return None


def resolve(revs: list[str], machine: str | None, results: pathlib.Path | None) -> list[str]:
    """Full hashes to benchmark, oldest first (see the module docstring for REV; NEW looks in ``results``)."""
    out = []
    for rev in revs or ["HEAD"]:
        if rev == "NEW":
            last = newest_with_results(machine, results)
            spec = [f"{last}..HEAD"] if last else ["-1", "HEAD"]
            new = git("rev-list", "--reverse", "--first-parent", *spec).split()
            # The workflow's own "results: ..." commits hold only results and provenance.
            out += [c for c in new if not set(git("diff-tree", "--no-commit-id", "--name-only", "-r", c).split())
                    <= {*_under(c, "results/"), *_under(c, "provenance/")}]
        elif ".." in rev:
            out += range_commits(check_rev(rev))[1]
        else:
            out.append(commit_of(rev))
    return list(dict.fromkeys(out))


def _under(commit: str, prefix: str) -> list[str]:
    return [p for p in git("diff-tree", "--no-commit-id", "--name-only", "-r", commit).split() if p.startswith(prefix)]


def warn_uncommitted(commits: list[str]) -> None:
    if commit_of("HEAD") in commits and git("status", "--porcelain", "--", "fusedkernel"):
        print("warning: fusedkernel/ has uncommitted changes, which `run` does not measure (it measures "
              "commits); `python tools/bench.py compare` measures the working tree against HEAD", flush=True)


def measure(commit: str, mode: str, machine: str, conf: pathlib.Path, wheels: str | None, regexes: list[str],
            results: pathlib.Path, *, resume: bool = True, append: bool = False,
            prov: pathlib.Path | None = None) -> list[str]:
    """Benchmark ``commit`` one family at a time into ``results``; return its failed cases.

    ``resume``: skip the families this commit already finished with the
    same selection (after an interrupt). ``append``: add samples to the
    stored ones (alternating re-measurements). ``prov``: write a provenance
    record there, also when interrupted.
    """
    for path in asvrun.result_files(results, machine, commit):
        asvrun.readable(path)
    files = asvrun.result_files(results, machine, commit)
    before = json.loads(files[0].read_text()) if files else None
    state = STATE / machine / f"{commit}.json"
    history = results == asvrun.results_dir(mode)  # only runs into the history resume
    done = load_state(state) if resume and history else {}
    stored = stored_names(results, machine, commit)
    started_at, start, status, run, asv_failed = provenance.now(), provenance.gpu_snapshot(), "interrupted", [], []
    log = asvrun.LOGS / f"{commit[:8]}-{started_at.replace(':', '')}.log"
    try:
        with provenance.ClockSampler() as clocks:
            for family in families(mode, regexes):
                regex = asvrun.family_regex(family, regexes)
                # The state says the family finished; its values must still be there (a results
                # file moved aside as unreadable takes them along).
                if done.get(family) == regex and any(n.startswith(f"add_rmsnorm.{family}.") for n in stored):
                    print(f"{commit[:8]} {family}: finished in an earlier run, kept", flush=True)
                    continue
                print(f"{commit[:8]} {family}: measuring (log: {log.relative_to(ROOT)})", flush=True)
                args = ["run", f"{commit}^!", "--config", str(conf), "--machine", machine, "--record-samples",
                        "-b", regex] + (["--append-samples"] if append else [])
                rc = asvrun.asv(args, asvrun.asv_env(mode, wheels, [regex]), log)
                run.append(regex)
                if rc and not any(n.startswith(f"add_rmsnorm.{family}.") for n in stored_names(results, machine, commit)):
                    asv_failed.append(f"{family} (asv exit status {rc}, nothing stored: see {log.relative_to(ROOT)})")
                    continue
                if history:
                    done[family] = regex
                    save_state(state, done)
        status = "complete"
    finally:
        # Failures are read before earlier values are put back: a case that fails now is
        # reported (and recorded) as failed even where its earlier value is kept.
        failed = asv_failed + [c for c in asvrun.failed_cases(results, machine, commit)
                               if any(re.search(r, c) for r in run)]
        files = asvrun.result_files(results, machine, commit)
        if files and before:
            asvrun.keep_earlier_values(files[0], before)
        if status == "complete" and failed:
            status = "failed cases"
        if prov is not None:
            from benchmarks._measure import METHODS

            provenance.record(prov / machine, machine, commit, mode, start, provenance.gpu_snapshot(), started_at,
                              clocks.summary, status=status,
                              extra={"failed_cases": failed, "timing_methods": METHODS, "log": str(log.name)})
    return failed


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
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(done))
    tmp.replace(path)  # an interrupt mid-write leaves the previous state whole


def discovered(mode: str) -> list[str]:
    """Every "benchmark(params)" of the working tree's suite in ``mode``, named as asv names them for ``-b``."""
    import itertools

    if mode == "interpreter":
        os.environ.setdefault("TRITON_INTERPRET", "1")  # the suite's params follow the mode
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


def stored_names(results: pathlib.Path, machine: str, commit: str) -> set[str]:
    files = asvrun.result_files(results, machine, commit)
    return set(json.loads(files[0].read_text()).get("results", {})) if files else set()


def cmd_run(a) -> int:
    # Revisions before the mode (detecting it imports torch: seconds), so a bad one is refused at once; NEW needs it.
    mode, machine = asvrun.detect() if "NEW" in a.revs else (None, None)
    commits = resolve(a.revs, machine, asvrun.results_dir(mode) if mode else None)
    if mode is None:
        mode, machine = asvrun.detect()
    warn_uncommitted(commits)
    failed = {}
    with asvrun.config(mode) as conf:
        asvrun.asv(["machine", "--machine", machine, "--yes", "--config", str(conf)], asvrun.asv_env(mode, a.wheels),
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

        print(report.run_summary(asvrun.results_dir(mode), machine, commits[-1]) + "\n")
    # The last line: what a log's tail (CI) shows.
    n = sum(map(len, failed.values()))
    where = "; ".join(f"{c[:10]}: {len(v)}" for c, v in failed.items())
    print(f"bench.py run: {len(commits)} commits on {machine}, {n} failed cases" + (f" ({where})" if n else ""))
    return 1 if n else 0


def measure_pair(mode, machine, wheels, regexes, base, head, tmp: pathlib.Path, rounds: int = 1):
    """Measure ``base`` and ``head`` alternately ``rounds`` times into ``tmp``; their asv Results and failures."""
    from asv.results import Results

    failed = []
    with asvrun.config(mode, results=tmp) as conf:
        asvrun.asv(["machine", "--machine", machine, "--yes", "--config", str(conf)], asvrun.asv_env(mode, wheels),
                   asvrun.LOGS / "machine.log")
        for k in range(rounds):
            for commit in (base, head):
                print(f"== {commit[:10]} (round {k + 1}/{rounds})", flush=True)
                failed += measure(commit, mode, machine, conf, wheels, regexes, tmp, resume=False, append=k > 0)
    loaded = [Results.load(str(asvrun.result_files(tmp, machine, c)[0])) if asvrun.result_files(tmp, machine, c)
              else None for c in (base, head)]
    return loaded, failed


def selection_matches(mode: str, regexes: list[str]) -> bool:
    """Does any flagged benchmark of the suite match ``regexes``?"""
    conf, known = asvrun.load_conf(), discovered(mode)
    return any(verdict.flagged(conf, e) and any(re.search(r, e) for r in regexes) for e in known)


def cmd_gate(a) -> int:
    head = commit_of(a.head)
    base = git("merge-base", commit_of(a.base), head)
    if base == head:
        raise UsageError(f"base and head are the same commit ({head[:10]}): run the gate on a branch ahead of BASE")
    mode, machine = asvrun.detect()
    regexes = a.bench or [FLAGGED]
    if not selection_matches(mode, regexes):
        raise UsageError(f"--bench {regexes} matches no flagged benchmark (asv.conf.json, results/benchmarks.json)")
    print(f"gate: base {base[:10]} (merge-base), head {head[:10]}, on {machine}", flush=True)
    with tempfile.TemporaryDirectory(prefix="fk-gate-") as tmp:
        (b, h), failed = measure_pair(mode, machine, a.wheels, regexes, base, head, pathlib.Path(tmp))
    if b is None or h is None or failed:
        text = f"## Benchmark gate: ERROR\n\nthe run failed: {len(failed)} failed cases: {', '.join(failed[:10])}\n"
        rc = 3
    else:
        rows = verdict.judge(asvrun.load_conf(), b, h)
        if not rows:  # the selection names flagged benchmarks (checked above): they did not run
            raise RunError(f"--bench {regexes}: no flagged benchmark was measured at both commits")
        bad = [r for r in rows if r.regressed]
        head_line = f"FAILED: {len(bad)} slower beyond the threshold" if bad else "passed"
        text = (f"## Benchmark gate: {head_line}\n\nbase {base[:10]}, head {head[:10]}, {machine}; "
                f"{len(rows)} flagged values compared\n\n" + verdict.table(sorted(rows, key=lambda r: -(r.ratio or 0)),
                                                                         "base", "head") + "\n")
        rc = 1 if bad else 0
    print(text, flush=True)
    if a.summary:
        with open(a.summary, "a") as f:
            f.write(text)
    return rc


def cmd_bisect(a) -> int:
    import bisection

    good, after = range_commits(a.range)
    mode, machine = asvrun.detect()
    regexes = [a.bench]
    if not selection_matches(mode, regexes):
        raise UsageError(f"{a.bench!r} matches no flagged benchmark (asv.conf.json, results/benchmarks.json)")
    conf_json = asvrun.load_conf()
    from asv.results import Results

    with tempfile.TemporaryDirectory(prefix="fk-bisect-") as tmp, asvrun.config(mode, pathlib.Path(tmp)) as conf:
        tmp = pathlib.Path(tmp)
        asvrun.asv(["machine", "--machine", machine, "--yes", "--config", str(conf)], asvrun.asv_env(mode, a.wheels),
                   asvrun.LOGS / "machine.log")
        chosen = []

        def values(commit):
            files = asvrun.result_files(tmp, machine, commit)
            res = Results.load(str(files[0])) if files else None
            return {e: (v, ss) for e, v, ss in verdict.entries(res)} if res else {}

        def one(commit, append=False):
            measure(commit, mode, machine, conf, a.wheels, regexes, tmp, resume=False, append=append)
            vals = values(commit)
            if not chosen:  # the entry: the flagged one the selection names (the largest GOOD->BAD step if several)
                flagged = [e for e, (v, _) in vals.items() if verdict.flagged(conf_json, e) and re.search(a.bench, e)
                           and not (isinstance(v, float) and math.isnan(v))]  # NaN: not run here
                if not flagged:  # the selection names flagged benchmarks (checked above): asv failed
                    raise RunError(f"{a.bench!r} measured no flagged benchmark at {commit[:10]} (see the log above)")
                chosen.append(flagged)
            return vals

        good_vals = one(good)
        bad_vals = one(after[-1])
        candidates = chosen[0]

        def step(e):
            g, b = good_vals.get(e, (None,))[0], bad_vals.get(e, (None,))[0]
            return b / g if g and b else 0
        entry = max(candidates, key=step)
        factor = 1 + verdict.threshold(conf_json, entry)
        print(f"bisect: {entry}, threshold x{factor:.3g}, {len(after)} commits after GOOD", flush=True)
        cache = {good: good_vals, after[-1]: bad_vals}

        def measure_one(commit):
            if commit not in cache:
                cache[commit] = one(commit)
            return cache[commit].get(entry, (None, None))

        def remeasure(order):
            for k, commit in enumerate(order):
                one(commit, append=k >= 2)  # the first visit of each replaces; the second adds samples
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
    mode, machine = asvrun.detect()
    ref = commit_of(a.ref)
    tree = working_tree_commit()
    if tree is None:
        print("compare: the working tree has no changes against HEAD; measuring REF against HEAD", flush=True)
        tree = commit_of("HEAD")
    regexes = a.bench or [COMPARE_DEFAULT]
    with tempfile.TemporaryDirectory(prefix="fk-compare-") as tmp:
        (b, h), failed = measure_pair(mode, machine, a.wheels, regexes, ref, tree, pathlib.Path(tmp), a.rounds)
    if b is None or h is None:
        print(f"compare: the run failed ({len(failed)} failed cases: {', '.join(failed[:10])})")
        return 3
    conf = asvrun.load_conf()
    vb, vh = ({e: (v, ss) for e, v, ss in verdict.entries(res)} for res in (b, h))
    rows = [verdict.compare(e, vb[e][0], vh[e][0], vb[e][1], vh[e][1], 1 + verdict.threshold(conf, e))
            for e in sorted(vb.keys() & vh.keys())]
    rows = [r for r in rows if r.before is not None and r.after is not None
            and not (r.before != r.before or r.after != r.after)]  # NaN: not run here
    label = "working tree" if tree != commit_of("HEAD") else "HEAD"
    print(f"compare on {machine}: {a.ref} ({ref[:10]}) against the {label}; nothing is written to the history\n")
    print(verdict.table(rows, a.ref, label))
    return 1 if any(r.regressed for r in rows) else 0


# compare's default: the flagged ratio at the widths and token counts a kernel change shows first.
COMPARE_DEFAULT = r"(Forward|Inference)\.track_ratio\('fused', '(bf16 (1x4096|64x5120|8192x5120)|bf16 1x64|fp32 8x1000)'\)"


def working_tree_commit() -> str | None:
    """A commit object of the working tree (tracked and untracked, not ignored) on top of HEAD; None if clean.

    Made with a temporary index, never referenced by a branch: nothing is
    added to the history, and git's garbage collection drops it.
    """
    if not git("status", "--porcelain"):
        return None
    with tempfile.TemporaryDirectory(prefix="fk-index-") as tmp:
        env = {**os.environ, "GIT_INDEX_FILE": str(pathlib.Path(tmp) / "index")}
        run = lambda *args: subprocess.run(["git", *args], cwd=ROOT, env=env, check=True,  # noqa: E731
                                           capture_output=True, text=True).stdout.strip()
        run("read-tree", "HEAD")
        run("add", "-A")
        tree = run("write-tree")
        return run("commit-tree", tree, "-p", "HEAD", "-m", "working tree (bench.py compare)")


def cmd_publish(a) -> int:
    import publish

    return publish.publish()


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run", help="benchmark commits into the history")
    r.add_argument("revs", nargs="*", help="commits, ranges A..B, or NEW (default HEAD)")
    r.add_argument("--force", action="store_true", help="measure again what an earlier run finished")
    r.add_argument("--quiet", action="store_true", help="no summary table at the end")
    sub.add_parser("publish", help="build the HTML site")
    g = sub.add_parser("gate", help="PR gate: HEAD against its merge-base with BASE")
    g.add_argument("base")
    g.add_argument("head")
    g.add_argument("--summary", help="append the markdown report here (e.g. $GITHUB_STEP_SUMMARY)")
    b = sub.add_parser("bisect", help="the first commit where BENCH got slower")
    b.add_argument("range", help="GOOD..BAD")
    b.add_argument("bench_regex", metavar="BENCH", help=r"a benchmark regex, e.g. \"Inference.track_ratio\('fused', 'bf16 1x4096'\)\"")
    c = sub.add_parser("compare", help="the working tree against REF, on this machine")
    c.add_argument("ref", nargs="?", default="HEAD")
    c.add_argument("--rounds", type=int, default=1, help="alternate REF and the tree this many times")
    for s in (r, g, c):
        s.add_argument("--bench", action="append", metavar="REGEX",
                       help="only benchmarks matching this asv -b regex (repeatable)")
    for s in (r, g, b, c):
        s.add_argument("--wheels", help="folder of wheels for offline asv environments")
    a = p.parse_args(argv)
    if a.cmd == "bisect":
        a.bench = a.bench_regex
    # Progress must reach a pipe (CI's log, tee) as it happens, not when the buffer fills.
    if hasattr(sys.stdout, "reconfigure"):
        sys.stdout.reconfigure(line_buffering=True)
    # Outside asv too, SIGTERM unwinds like Ctrl-C: temporary configs and folders are removed,
    # the provenance of the commit in progress is written. (Only the main thread may set it.)
    main_thread = threading.current_thread() is threading.main_thread()
    old = signal.signal(signal.SIGTERM, _terminate) if main_thread else None
    try:
        return {"run": cmd_run, "publish": cmd_publish, "gate": cmd_gate, "bisect": cmd_bisect,
                "compare": cmd_compare}[a.cmd](a)
    except UsageError as e:
        print(f"bench.py {a.cmd}: {e}", file=sys.stderr)
        return 2
    except RunError as e:
        print(f"bench.py {a.cmd}: run error: {e}", file=sys.stderr)
        return 3
    except (asvrun.Interrupted, KeyboardInterrupt) as e:
        name = e.args[0] if isinstance(e, asvrun.Interrupted) else "SIGINT"
        print(f"bench.py {a.cmd}: interrupted ({name}); finished results are kept", file=sys.stderr)
        return 143 if name == "SIGTERM" else 130
    finally:
        if main_thread:
            signal.signal(signal.SIGTERM, old)


def _terminate(signum, _frame):
    raise asvrun.Interrupted(signal.Signals(signum).name)


if __name__ == "__main__":
    sys.exit(main())

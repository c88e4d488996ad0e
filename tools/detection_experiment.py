"""Detection-power experiment: does the tracker flag exactly the one slow commit?

    python tools/detection_experiment.py [--base REV] [--commits 10] [--slow 6] [--elems 64]
                                         [--bench REGEX] [--record DIR | --no-record]

Builds a scratch clone of this repo (in a temporary folder) with a history of
``--commits`` commits after ``--base`` (default HEAD, resolved to a full hash).
The history is deterministic: fixed author and committer, dates derived from
the base commit's committer date (+1 minute per commit), fixed messages, so
the same base gives the same commit hashes on any machine
(``make_history``, imported by ``tests/tools/test_site.py``). The first commit
also removes the committed ``results/`` and ``provenance/`` so the scratch
site holds only the experiment's own results. Every commit touches a text file
only; commit ``--slow`` also sets a deliberately worse launch setting (the tile
path's elements per program, NARROW_TILE_ELEMS, to ``--elems``; 2048 is the
tuned value). The size of the slowdown follows from ``--elems``; at 512-wide
rows the H200 sweep (docs/tuning.md, sweep 1, 131072x512 bf16, 8 warps)
measured 4 rows per program (2048, tuned) 0.994 of the floor, 8 rows (4096)
0.985 (~1% slower), 2 rows (1024) 0.867 (~13%); 1 row (64), which the
table launches with 8 warps, made the default benchmark 1.59x slower in the
H200 experiment (docs/detection/nvidia-h200/). Runs with 4096 probe the
smallest slowdown the tracker still catches. Then, on this machine:

1. ``tools/bench.py run`` benchmarks every commit (``--bench`` selects which);
2. ``tools/bench.py publish``: which commits does asv's regression view flag?
3. ``tools/bench.py gate`` for every commit against its parent: which fail?
4. ``tools/bench.py bisect`` over the whole range: which commit does it name?

Prints one line per check and a JSON summary; exit 0 only when the slow commit,
and only it, is flagged, fails the gate and is found by the bisect.

Record (``--record DIR``, default ``docs/detection/<machine>/``): the asv
results of step 1 as published in step 2 (``results/<machine>/*.json`` with
``machine.json``, and ``results/benchmarks.json``; taken before the gate and
the bisect add their own runs) and ``summary.json`` (base, arguments, commits,
slow commit, flags, gate failures, bisect, machine, date). The site test
rebuilds the history from the base, publishes the recorded results and checks
the site in a browser.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import pathlib
import re
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parent.parent
DEFAULT_BENCH = "Forward.time_device[(].fused.,..bf16.,..(4x64|65536x512)"

# Everything that goes into a commit object besides the tree and the parent.
IDENTITY = {
    "GIT_AUTHOR_NAME": "fusedkernel experiment",
    "GIT_AUTHOR_EMAIL": "experiment@localhost",
    "GIT_COMMITTER_NAME": "fusedkernel experiment",
    "GIT_COMMITTER_EMAIL": "experiment@localhost",
}
# Settings from the user's or system's git config that would change a commit's
# object (signatures, encoding header, hooks rewriting the message).
GIT_CONFIG = ["-c", "commit.gpgsign=false", "-c", "i18n.commitEncoding=UTF-8",
              "-c", "core.hooksPath=/dev/null", "-c", "core.autocrlf=false"]


def sh(*cmd, cwd, check=True, capture=True, env=None):
    out = subprocess.run(cmd, cwd=cwd, check=check, capture_output=capture, text=True, env=env)
    return out


def git(*args, cwd, check=True, env=None):
    return sh("git", *GIT_CONFIG, *args, cwd=cwd, check=check, env=env)


class BaseMissing(RuntimeError):
    """The base commit is not in the source repository (e.g. a shallow clone)."""


def resolve_base(rev: str = "HEAD", source: pathlib.Path = ROOT) -> str:
    """Full hash of ``rev`` in ``source``; BaseMissing when it is not there."""
    out = git("rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}", cwd=source, check=False)
    if out.returncode:
        shallow = git("rev-parse", "--is-shallow-repository", cwd=source, check=False).stdout.strip()
        hint = (" This checkout is shallow: fetch the full history (git fetch --unshallow, "
                "or actions/checkout with fetch-depth: 0).") if shallow == "true" else ""
        raise BaseMissing(f"base commit {rev} is not in {source}.{hint}")
    return out.stdout.strip()


def make_history(repo: pathlib.Path, n: int, slow: int, elems: int, base: str = "HEAD",
                 source: pathlib.Path = ROOT) -> list[str]:
    """Clone ``source`` into ``repo`` at ``base`` (branch main) and commit the experiment.

    Returns the ``n`` full commit hashes, oldest first. Deterministic: the same
    base gives the same hashes on any machine.
    """
    base = resolve_base(base, source)
    sh("git", "clone", "-q", "--no-checkout", str(source), str(repo), cwd=source)
    if git("cat-file", "-e", f"{base}^{{commit}}", cwd=repo, check=False).returncode:
        git("fetch", "-q", "origin", base, cwd=repo)  # base not reachable from a branch
    # asv.conf.json tracks the branch main.
    git("checkout", "-q", "-B", "main", base, cwd=repo)
    base_time = int(git("show", "-s", "--format=%ct", base, cwd=repo).stdout)
    commits = []
    for i in range(1, n + 1):
        paths = ["docs/experiment.txt"]
        if i == 1:
            # The experiment's site must show only the experiment's own results.
            git("rm", "-r", "-q", "--ignore-unmatch", "results", "provenance", cwd=repo)
        (repo / "docs" / "experiment.txt").write_text(f"commit {i}\n")
        if i == slow:
            cfg = repo / "fusedkernel" / "kernels" / "config.py"
            text, count = re.subn(r"^NARROW_TILE_ELEMS = \d+", f"NARROW_TILE_ELEMS = {elems}",
                                  cfg.read_text(), flags=re.MULTILINE)
            assert count == 1, "NARROW_TILE_ELEMS not found in config.py"
            cfg.write_text(text)
            paths.append("fusedkernel/kernels/config.py")
        git("add", "--", *paths, cwd=repo)
        date = f"@{base_time + 60 * i} +0000"
        env = {**os.environ, **IDENTITY, "GIT_AUTHOR_DATE": date, "GIT_COMMITTER_DATE": date}
        git("commit", "-q", "--no-verify", "-m", f"experiment commit {i}" + (" (slow)" if i == slow else ""),
            cwd=repo, env=env)
        commits.append(git("rev-parse", "HEAD", cwd=repo).stdout.strip())
    return commits


def snapshot_results(repo: pathlib.Path, machine: str, dest: pathlib.Path) -> list[str]:
    """Copy the asv results of ``machine`` (JSON only) and benchmarks.json to ``dest``."""
    src = repo / "results" / machine
    out = dest / "results" / machine
    out.mkdir(parents=True)
    names = []
    for p in sorted(src.glob("*.json")):
        shutil.copy2(p, out / p.name)
        names.append(p.name)
    shutil.copy2(repo / "results" / "benchmarks.json", dest / "results" / "benchmarks.json")
    return names


def write_record(record: pathlib.Path, snapshot: pathlib.Path, summary: dict) -> None:
    """Replace ``record`` with the results snapshot and summary.json."""
    if record.exists():
        shutil.rmtree(record)
    record.parent.mkdir(parents=True, exist_ok=True)
    shutil.copytree(snapshot, record)
    (record / "summary.json").write_text(json.dumps(summary, indent=1) + "\n")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--base", default="HEAD", help="commit of this repo the history starts from (default HEAD)")
    ap.add_argument("--commits", type=int, default=10)
    ap.add_argument("--slow", type=int, default=6, help="1-based index of the slow commit")
    ap.add_argument("--elems", type=int, default=64,
                    help="NARROW_TILE_ELEMS in the slow commit (64: one row per program, 1.59x slower "
                         "at 65536x512 bf16 on the H200)")
    ap.add_argument("--bench", default=DEFAULT_BENCH,
                    help="asv -b regex of the benchmarks to run (default: fused, bf16, a narrow shape)")
    ap.add_argument("--factor", type=float, default=1.05, help="the gate's threshold for --bench")
    ap.add_argument("--wheels", help="passed to tools/bench.py (offline hosts)")
    ap.add_argument("--keep", help="build the scratch repo here instead of a temporary folder")
    ap.add_argument("--record", help="write the results and summary.json here "
                                     "(default docs/detection/<machine>/ of this repo)")
    ap.add_argument("--no-record", action="store_true", help="do not write a record")
    a = ap.parse_args()
    started = time.monotonic()
    started_at = datetime.datetime.now(datetime.timezone.utc)
    base = resolve_base(a.base)
    tmp = pathlib.Path(a.keep or tempfile.mkdtemp(prefix="fk-experiment-"))
    repo = tmp / "repo"
    commits = make_history(repo, a.commits, a.slow, a.elems, base)
    slow = commits[a.slow - 1]
    wheels = ["--wheels", a.wheels] if a.wheels else []
    bench = [sys.executable, "tools/bench.py"]
    print(f"base {base}; commits {' '.join(c[:8] for c in commits)}; slow {slow[:8]}", flush=True)

    first_parent = sh("git", "rev-parse", f"{commits[0]}^", cwd=repo).stdout.strip()
    sh(*bench, "run", f"{first_parent}..{commits[-1]}", *wheels, "--asv-args", f"-b {a.bench}",
       cwd=repo, capture=False)
    sh(*bench, "publish", cwd=repo, capture=False)
    html = repo / ".asv" / "html"
    rev_to_hash = json.loads((html / "index.json").read_text())["revision_to_hash"]
    machine = json.loads(sh(sys.executable, "-c", "import sys; sys.path.insert(0, 'tools'); import bench, json; "
                            "print(json.dumps(bench.detect()[1]))", cwd=repo).stdout)
    # The results as published, before the gate and the bisect add runs of their own.
    snapshot = tmp / "record"
    result_files = snapshot_results(repo, machine, snapshot)
    flagged_commits, steps_seen = set(), []
    for entry in json.loads((html / "regressions.json").read_text())["regressions"]:
        # entry[1]: the graph's path, which names the machine (entry[2], the graph's
        # parameters, names it only when the site holds more than one machine).
        if f"/machine-{machine}/" not in entry[1]:
            continue  # only this machine's history is part of the experiment
        # entry[-1]: the steps, [revision before, revision after, value before, value after];
        # "before" is None when the step is pinned to exactly the "after" commit.
        for before, after, *_ in entry[-1]:
            flagged_commits.add(rev_to_hash[str(after)][:8])
            steps_seen.append((entry[0], before and rev_to_hash[str(before)][:8],
                               rev_to_hash[str(after)][:8]))
    flagged_commits = sorted(flagged_commits)
    print("flagged by asv publish:", flagged_commits, steps_seen)

    gate_failed = []
    for parent, commit in zip([first_parent] + commits[:-1], commits):
        rc = subprocess.run([*bench, "gate", parent, commit, *wheels, "--family", f"{a.bench}={a.factor}"],
                            cwd=repo, capture_output=True, text=True, check=False).returncode
        if rc:
            gate_failed.append(commit[:8])
    print("gate failed on:", gate_failed)

    # The bisect gets the same parameter-level regex: over the whole benchmark, asv find
    # takes the largest step of any parameter combination, and one outlier of an
    # unrelated combination (eager, another shape) outweighs the slow commit.
    out = sh(*bench, "bisect", f"{first_parent}..{commits[-1]}", a.bench, *wheels,
             cwd=repo, check=False)
    found = re.findall(r"Greatest regression found: ([0-9a-f]{8})", out.stdout + out.stderr)
    steps = len(re.findall(r"Installing [0-9a-f]{8}", out.stdout + out.stderr))
    print("bisect named:", found, f"after {steps} benchmarked commits")

    summary = {"slow_commit": slow[:8], "commits": [c[:8] for c in commits], "flagged": flagged_commits,
               "gate_failed": gate_failed, "bisect": found, "bisect_runs": steps, "scratch": str(tmp)}
    print(json.dumps(summary, indent=1))
    ok = flagged_commits == [slow[:8]] and gate_failed == [slow[:8]] and found == [slow[:8]]
    print("RESULT:", "the slow commit and only it was caught" if ok else "MISSED or FALSE FLAG")

    if not a.no_record:
        record = pathlib.Path(a.record) if a.record else ROOT / "docs" / "detection" / machine
        write_record(record, snapshot, {
            "base": base,
            "args": {"commits": a.commits, "slow": a.slow, "elems": a.elems, "bench": a.bench,
                     "factor": a.factor},
            "commits": commits,
            "slow_commit": slow,
            "flagged": flagged_commits,
            "flag_steps": steps_seen,
            "gate_failed": gate_failed,
            "bisect": found,
            "bisect_runs": steps,
            "caught": ok,
            "machine": machine,
            "result_files": result_files,
            "date": started_at.isoformat(timespec="seconds"),
            "duration_s": round(time.monotonic() - started),
        })
        print("record:", record)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())

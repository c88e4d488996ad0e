"""Detection-power experiment: does the tracker flag exactly the one slow commit?

    python tools/detection_experiment.py [--commits 10] [--slow 6] [--elems 256] [--bench REGEX]

Builds a scratch clone of this repo (in a temporary folder) with a history of
``--commits`` commits after HEAD. Every commit touches a text file only; commit
``--slow`` also sets a deliberately worse launch setting (the tile path's
elements per program, NARROW_TILE_ELEMS, to ``--elems``; 2048 is the tuned
value). Then, on this machine:

1. ``tools/bench.py run`` benchmarks every commit (``--bench`` selects which);
2. ``tools/bench.py publish``: which commits does asv's regression view flag?
3. ``tools/bench.py gate`` for every commit against its parent: which fail?
4. ``tools/bench.py bisect`` over the whole range: which commit does it name?

Prints one line per check and a JSON summary; exit 0 only when the slow commit,
and only it, is flagged, fails the gate and is found by the bisect.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import re
import subprocess
import sys
import tempfile

ROOT = pathlib.Path(__file__).resolve().parent.parent


def sh(*cmd, cwd, check=True, capture=True):
    out = subprocess.run(cmd, cwd=cwd, check=check, capture_output=capture, text=True)
    return out


def make_history(repo: pathlib.Path, n: int, slow: int, elems: int) -> list[str]:
    sh("git", "clone", "-q", str(ROOT), str(repo), cwd=ROOT)
    sh("git", "config", "user.email", "experiment@localhost", cwd=repo)
    sh("git", "config", "user.name", "experiment", cwd=repo)
    commits = []
    for i in range(1, n + 1):
        (repo / "docs" / "experiment.txt").write_text(f"commit {i}\n")
        if i == slow:
            cfg = repo / "fusedkernel" / "kernels" / "config.py"
            text, count = re.subn(r"^NARROW_TILE_ELEMS = \d+", f"NARROW_TILE_ELEMS = {elems}",
                                  cfg.read_text(), flags=re.M)
            assert count == 1, "NARROW_TILE_ELEMS not found in config.py"
            cfg.write_text(text)
        sh("git", "add", "-A", cwd=repo)
        sh("git", "commit", "-qm", f"experiment commit {i}" + (" (slow)" if i == slow else ""), cwd=repo)
        commits.append(sh("git", "rev-parse", "HEAD", cwd=repo).stdout.strip())
    return commits


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--commits", type=int, default=10)
    ap.add_argument("--slow", type=int, default=6, help="1-based index of the slow commit")
    ap.add_argument("--elems", type=int, default=64,
                    help="NARROW_TILE_ELEMS in the slow commit (64: one row per program; the H200 "
                         "sweep measured 0.916 against 0.994 of the floor at 131072x512)")
    ap.add_argument("--bench", default="Forward.time_device[(].fused.,..bf16.,..(4x64|65536x512)",
                    help="asv -b regex of the benchmarks to run (default: fused, bf16, a narrow shape)")
    ap.add_argument("--factor", type=float, default=1.05, help="the gate's threshold for --bench")
    ap.add_argument("--wheels", help="passed to tools/bench.py (offline hosts)")
    ap.add_argument("--keep", help="build the scratch repo here instead of a temporary folder")
    a = ap.parse_args()
    tmp = pathlib.Path(a.keep or tempfile.mkdtemp(prefix="fk-experiment-"))
    repo = tmp / "repo"
    commits = make_history(repo, a.commits, a.slow, a.elems)
    slow = commits[a.slow - 1]
    wheels = ["--wheels", a.wheels] if a.wheels else []
    bench = [sys.executable, "tools/bench.py"]

    first_parent = sh("git", "rev-parse", f"{commits[0]}^", cwd=repo).stdout.strip()
    sh(*bench, "run", f"{first_parent}..{commits[-1]}", *wheels, "--asv-args", f"-b {a.bench}",
       cwd=repo, capture=False)
    sh(*bench, "publish", cwd=repo, capture=False)
    html = repo / ".asv" / "html"
    rev_to_hash = json.loads((html / "index.json").read_text())["revision_to_hash"]
    machine = json.loads(sh(sys.executable, "-c", "import sys; sys.path.insert(0, 'tools'); import bench, json; "
                            "print(json.dumps(bench.detect()[1]))", cwd=repo).stdout)
    flagged_commits, steps_seen = set(), []
    for entry in json.loads((html / "regressions.json").read_text())["regressions"]:
        if entry[2].get("machine") != machine:
            continue  # the committed history of other machines is not part of the experiment
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
                            cwd=repo, capture_output=True, text=True).returncode
        if rc:
            gate_failed.append(commit[:8])
    print("gate failed on:", gate_failed)

    out = sh(*bench, "bisect", f"{first_parent}..{commits[-1]}", a.bench.split("[(]")[0], *wheels,
             cwd=repo, check=False)
    found = re.findall(r"Greatest regression found: ([0-9a-f]{8})", out.stdout + out.stderr)
    steps = len(re.findall(r"Installing [0-9a-f]{8}", out.stdout + out.stderr))
    print("bisect named:", found, f"after {steps} benchmarked commits")

    summary = {"slow_commit": slow[:8], "commits": [c[:8] for c in commits], "flagged": flagged_commits,
               "gate_failed": gate_failed, "bisect": found, "bisect_runs": steps, "scratch": str(tmp)}
    print(json.dumps(summary, indent=1))
    ok = flagged_commits == [slow[:8]] and gate_failed == [slow[:8]] and found == [slow[:8]]
    print("RESULT:", "the slow commit and only it was caught" if ok else "MISSED or FALSE FLAG")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())

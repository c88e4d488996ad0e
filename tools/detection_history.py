"""The detection experiment's recorded history: real commits (the slow one carries the patch) with asv results
made from measured processes, which the site test publishes (``tools/detection_experiment.py analyze --record``,
``history``)."""

from __future__ import annotations

import json
import os
import pathlib
import shutil
import subprocess
import tempfile

import asvrun
from asv.results import Results
from asv.runner import BenchmarkResult
from detection_inject import INJECTED, patched_source

ROOT = pathlib.Path(__file__).resolve().parent.parent

IDENTITY = {"GIT_AUTHOR_NAME": "fusedkernel experiment", "GIT_AUTHOR_EMAIL": "experiment@localhost",
            "GIT_COMMITTER_NAME": "fusedkernel experiment", "GIT_COMMITTER_EMAIL": "experiment@localhost"}


GIT_CONFIG = ["-c", "commit.gpgsign=false", "-c", "i18n.commitEncoding=UTF-8", "-c", "core.hooksPath=/dev/null",
              "-c", "core.autocrlf=false"]


HISTORY = [0.0] * 8 + [0.10] * 4  # the recorded history: 8 unchanged commits, then a 10% slowdown that stays



class BaseMissing(RuntimeError):
    """The base commit is not in the source repository (e.g. a shallow clone)."""


def git(*args, cwd, env=None, check=True):
    return subprocess.run(["git", *GIT_CONFIG, *args], cwd=cwd, env=env, check=check, capture_output=True, text=True)


def make_history(repo: pathlib.Path, base: str, levels: list[float], delays: dict,
                 keep_results: bool = False) -> list[str]:
    """Clone this repo at ``base`` into ``repo`` (branch main) and commit one commit per level; their hashes.

    Deterministic (fixed identity and dates): the same base gives the same
    hashes anywhere. A commit whose level differs from its parent's sets the
    patch of that level in forward.py and (where the base has its line)
    backward.py; every commit touches docs/experiment.txt.
    """
    out = git("rev-parse", "--verify", "--quiet", f"{base}^{{commit}}", cwd=ROOT, check=False)
    if out.returncode:
        raise BaseMissing(f"base commit {base} is not in {ROOT} (a shallow clone? git fetch --unshallow)")
    base = out.stdout.strip()
    subprocess.run(["git", "clone", "-q", "--no-checkout", str(ROOT), str(repo)], check=True)
    if git("cat-file", "-e", f"{base}^{{commit}}", cwd=repo, check=False).returncode:
        git("fetch", "-q", "origin", base, cwd=repo)
    git("checkout", "-q", "-B", "main", base, cwd=repo)
    base_time = int(git("show", "-s", "--format=%ct", base, cwd=repo).stdout)
    kernels = {k: repo / "fusedkernel" / "kernels" / k for k in INJECTED}
    original = {k: path.read_text() for k, path in kernels.items()}
    # A base older than the backward's chains (its loops had no such lines) gets the chains its lines allow, the
    # slow commit its raw files were measured with; the forward's line is always required.
    commits, level_before = [], 0.0
    for i, level in enumerate(levels, 1):
        if i == 1 and not keep_results:  # the experiment's site shows only the experiment's own results
            git("rm", "-r", "-q", "--ignore-unmatch", "results", "provenance", "docs/detection", cwd=repo)
        (repo / "docs").mkdir(exist_ok=True)
        (repo / "docs" / "experiment.txt").write_text(f"commit {i}\n")
        paths = ["docs/experiment.txt"]
        if level != level_before:
            chain = {int(b): d for b, d in delays.get(str(level), {}).items()}
            for k, path in kernels.items():
                path.write_text(patched_source(original[k], chain, k, lenient=k != "forward.py") if level
                                else original[k])
                paths.append(f"fusedkernel/kernels/{k}")
        git("add", "--", *paths, cwd=repo)
        date = f"@{base_time + 60 * i} +0000"
        env = {**os.environ, **IDENTITY, "GIT_AUTHOR_DATE": date, "GIT_COMMITTER_DATE": date}
        git("commit", "-q", "--no-verify", "-m", f"experiment commit {i}" + (f" ({level:.0%} slower)" if level else ""),
            cwd=repo, env=env)
        commits.append(git("rev-parse", "HEAD", cwd=repo).stdout.strip())
        level_before = level
    return commits


def write_results(raw: dict, commits: list[str], levels: list[float], results: pathlib.Path,
                  benchmarks: dict, machine_json: dict) -> None:
    """asv results files of ``commits``: each commit's flagged values from one measured process of its level."""
    machine = raw["machine"]
    (results / machine).mkdir(parents=True, exist_ok=True)
    (results / machine / "machine.json").write_text(json.dumps(machine_json))
    (results / "benchmarks.json").write_text(json.dumps(benchmarks))
    pools = {lv: [p for p in raw["processes"] if p["level"] == lv] for lv in set(levels)}
    for i, (commit, level) in enumerate(zip(commits, levels)):
        proc = pools[level][i % len(pools[level])]
        res = Results({"machine": machine, "python": "3.12"}, {}, commit, 1_700_000_000_000 + 60_000 * i, "3.12",
                      "virtualenv-py3.12", {})
        for cls in raw["classes"]:
            b = benchmarks[f"add_rmsnorm.{cls}.track_ratio"]
            combos = [(i_, c) for i_ in b["params"][0] for c in b["params"][1]]
            idx = [k for k, (i_, c) in enumerate(combos) if i_ == "'fused'" and c.strip("'") in proc["ratios"][cls]]
            samples = [proc["ratios"][cls].get(combos[k][1].strip("'")) if k in idx else None
                       for k in range(len(combos))]
            res.add_result(b, BenchmarkResult(result=[True if s else None for s in samples], samples=samples,
                                              number=[1 if s else None for s in samples], errcode=0, stderr="",
                                              profile=None),
                           selected_idx=idx, record_samples=True)
        res.save(str(results))


def record_history(raw: dict, record: pathlib.Path) -> None:
    """``record``: summary.json and asv results of the recorded history (HISTORY), for the site test."""
    base = git("rev-parse", "HEAD", cwd=ROOT).stdout.strip()
    with tempfile.TemporaryDirectory(prefix="fk-history-") as tmp:
        commits = make_history(pathlib.Path(tmp) / "repo", base, HISTORY, raw["delays"])
    bench_json = json.loads((asvrun.results_dir("gpu") / "benchmarks.json").read_text())
    machine_json = json.loads((asvrun.results_dir("gpu") / raw["machine"] / "machine.json").read_text())
    if (record / "results").exists():
        shutil.rmtree(record / "results")
    write_results(raw, commits, HISTORY, record / "results", bench_json, machine_json)
    slow = commits[HISTORY.index(0.10)]
    (record / "summary.json").write_text(json.dumps(
        {"base": base, "levels": HISTORY, "commits": commits, "slow_commit": slow, "machine": raw["machine"],
         "flagged_entries": [f"add_rmsnorm.{c}.track_ratio('fused', '{case}')" for c in raw["classes"]
                             for case in raw["cases"].values()]}, indent=1) + "\n")
    print(f"record: {record} (history of {len(commits)} commits from {base[:10]}, slow {slow[:10]})")



if __name__ == "__main__":
    raise SystemExit("tools/detection_history.py is a module of the detection experiment: "
                     "python tools/detection_experiment.py --help")

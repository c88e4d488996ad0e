"""The commits a tracker run measures: revisions, ranges and NEW (what the history lacks).

NEW starts after the newest first-parent commit with results, or whose
newest provenance record is of a full run that ended; at that commit instead
where a family is missing and its run was cut off (docs/suite.md).
"""

from __future__ import annotations

import json
import pathlib
import subprocess

import asvrun
import provenance
from asvrun import FAMILIES, ROOT


class UsageError(Exception):
    """A bad argument, revision or range: one line for the user, exit 2."""


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
    if ".." not in spec or "..." in spec or not all(spec.split("..", 1)):
        raise UsageError(f"{spec!r} is not a range: give GOOD..BAD, both named")
    good, bad = (commit_of(r) for r in spec.split("..", 1))
    if subprocess.run(["git", "merge-base", "--is-ancestor", good, bad], cwd=ROOT).returncode:
        raise UsageError(f"{spec}: {good[:10]} is not an ancestor of {bad[:10]}")
    if good == bad:
        raise UsageError(f"{spec} is empty: GOOD and BAD are the same commit")
    commits = git("rev-list", "--reverse", "--first-parent", "--ancestry-path", f"{good}..{bad}").split()
    # From a side branch's commit the list starts at the merge, whose first parent is not GOOD: a bisect would
    # measure the merge against GOOD and blame it for whatever the main line brought.
    if not commits or git("rev-parse", f"{commits[0]}^1") != good:
        raise UsageError(f"{spec}: {good[:10]} is not on {bad[:10]}'s first-parent line (merged from a side "
                         "branch?): give a GOOD on it, such as the merge's first parent")
    return good, commits


def newest_with_results(machine: str, results: pathlib.Path, prov: pathlib.Path | None = None) -> str | None:
    """The newest first-parent ancestor of HEAD with results for ``machine`` in ``results``, or whose newest
    record in ``prov`` (the machine's provenance folder) is of a full run that ended (every family may have
    failed and stored nothing: NEW would measure it again at every run)."""
    stored = set()
    if prov is not None:
        stored = {c for c, rec in provenance.newest_by_commit(prov).items() if ended_full_run(rec)}
    for path in (results / machine).glob("*.json"):
        try:
            data = json.loads(path.read_text())
        except (ValueError, OSError):
            continue
        if asvrun.is_result(data):  # JSON of another shape: skipped (measure moves it aside)
            stored.add(data["commit_hash"])
    for commit in git("rev-list", "--first-parent", "HEAD").split():
        if commit in stored:
            return commit
    return None


def resolve(revs: list[str], machine: str | None, results: pathlib.Path | None,
            prov: pathlib.Path | None = None) -> list[str]:
    """Full hashes to benchmark, oldest first (see the module docstring for REV; NEW looks in ``results``
    and in ``prov``, the machine's provenance folder)."""
    out = []
    for rev in revs or ["HEAD"]:
        if rev == "NEW":
            last = newest_with_results(machine, results, prov)
            if last and unfinished(results, machine, last, prov):
                out.append(last)  # a run cut off there: measure resumes it
            spec = [f"{last}..HEAD"] if last else ["-1", "HEAD"]
            new = git("rev-list", "--reverse", "--first-parent", *spec).split()
            out += [c for c in new if not results_only(c)]
        elif ".." in rev:
            out += range_commits(check_rev(rev))[1]
        else:
            out.append(commit_of(rev))
    return list(dict.fromkeys(out))


def unfinished(results: pathlib.Path, machine: str, commit: str, prov: pathlib.Path | None = None) -> bool:
    """Does ``commit`` have a results file that lacks a family (a run cut off, or one of a selection)?

    Not where its newest record in ``prov`` (the machine's provenance folder) is of a run of every
    family that ended: a family missing then failed, and NEW would measure it again at every run.
    Results files that are no asv result are moved aside first (:func:`asvrun.readable`).
    """
    if not [path for path in asvrun.result_files(results, machine, commit) if asvrun.readable(path)]:
        return False
    stored = stored_names(results, machine, commit)
    if all(any(n.startswith(f"add_rmsnorm.{f}.") for n in stored) for f in FAMILIES):
        return False
    return not (prov is not None and ended_full_run(provenance.newest(prov, commit)))


def ended_full_run(rec: dict | None) -> bool:
    """Is ``rec`` (a provenance record) of a run of every family that ended (not interrupted)?"""
    return bool(rec) and rec.get("status") != "interrupted" and rec.get("selection") == []


def results_only(commit: str) -> bool:
    """Does ``commit`` change files, all of them results or provenance (the workflow's "results: ..." commits)?

    An empty commit or a merge that changes nothing against its first parent
    is no such commit: NEW measures it.
    """
    parent = git("rev-list", "--parents", "-n", "1", commit).split()[1:2]
    diff = ["diff", "-z", "--name-only", parent[0], commit] if parent else \
        ["diff-tree", "-z", "--root", "--no-commit-id", "--name-only", "-r", commit]
    paths = [p for p in git(*diff).split("\0") if p]
    return bool(paths) and all(p.startswith(("results/", "provenance/")) for p in paths)


def stored_names(results: pathlib.Path, machine: str, commit: str) -> set[str]:
    """The benchmarks stored for ``commit`` in its first results file that is an asv result."""
    for path in asvrun.result_files(results, machine, commit):
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        if asvrun.is_result(data):
            return set(data["results"])
    return set()


if __name__ == "__main__":
    raise SystemExit("tools/revisions.py is a module of the tracker's command line: python tools/bench.py --help")

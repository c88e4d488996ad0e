"""Markdown tables of one commit's results: the fused op against its floor and peers.

    python tools/table.py [COMMIT ...] [--machine nvidia-h200] [--results results]

COMMIT: a hash (7 or more hex digits) or any git revision (default: the
newest commit with results for the machine). With several, the values of a
commit named later on the command line replace an earlier one's (e.g. a
whole-suite run, then a rerun of one family). One table per op, one line per case: the fused op's device time
(µs, median of its rounds), GB/s, fraction of the floor, and × each peer
(peer time / fused time, measured beside the same floor; > 1: fused is
faster). Results of another version of a benchmark than the suite's current
one are left out, as asv publish does. ``docs/performance.md`` is made of
these tables.
"""

from __future__ import annotations

import argparse
import pathlib
import re
import subprocess
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import report  # noqa: E402

ROOT = report.ROOT


def markdown(rows: list[report.Row], host: dict | None = None) -> str:
    """One table per op; then the host ratio ({(op, case): host time / the floor's}) if given."""
    lines = []
    for op in report.CLASSES.values():
        mine = [r for r in rows if r.op == op]
        if not mine:
            continue
        lines += [f"### {op}", "", "| case | fused µs | GB/s | fraction of floor | "
                  + " | ".join(f"× {p}" for p in report.PEERS) + " |", "|---|---|---|---|" + "---|" * len(report.PEERS)]
        for r in mine:
            us = "–" if r.us is None else f"{r.us:.2f}" if r.us < 100 else f"{r.us:.1f}"
            gbps = report.fmt(r.gbps, 0)  # 3 significant digits below 0.1: the interpreter's
            lines.append(f"| {r.case} | {us} | {gbps} | {report.fmt(r.fraction)} | "
                         + " | ".join(report.fmt(r.peers.get(p), 2) for p in report.PEERS) + " |")
        lines.append("")
    if host:
        lines += ["### host time per synchronized decode call (shown, not flagged)", "",
                  "| op | case | fused host time / floor's (torch.add or addcmul) |", "|---|---|---|"]
        lines += [f"| {op} | {case} | {v:.2f} |" for (op, case), v in sorted(host.items())] + [""]
    return "\n".join(lines) or "(no results of the suite's current version for these commits)"


def resolve(name: str, stored: dict) -> str:
    """The stored commit hash ``name`` names (a git revision here, or a hash prefix of 7+ hex digits)."""
    rev = subprocess.run(["git", "rev-parse", "--verify", "--quiet", f"{name}^{{commit}}"], capture_output=True,
                         text=True, cwd=ROOT).stdout.strip()
    commit = (rev or name).lower()
    if not re.fullmatch(r"[0-9a-f]{7,40}", commit):
        raise SystemExit(f"{name!r} is neither a git revision here nor a commit hash of 7 or more hex digits")
    found = sorted(c for c in stored if c.startswith(commit))
    if not found:
        raise SystemExit(f"no results for {name}")
    if len(found) > 1:
        raise SystemExit(f"{name} names {len(found)} commits with results ({', '.join(c[:12] for c in found)}): "
                         "give more digits")
    return found[0]


def merged_rows(runs: list, current: dict | None) -> list[report.Row]:
    """Rows of several runs, a later run's values replacing an earlier one's, value by value."""
    merged: dict[tuple, report.Row] = {}
    for res in runs:
        for row in report.rows(res, current):
            old = merged.get((row.op, row.case))
            if old is not None:
                row.us, row.gbps = row.us or old.us, row.gbps or old.gbps
                if row.ratio is None:
                    row.ratio, row.peers = old.ratio, old.peers
                else:
                    row.peers = {**old.peers, **row.peers}
            merged[row.op, row.case] = row
    return sorted(merged.values(), key=report.row_order)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("commits", nargs="*", metavar="commit")
    ap.add_argument("--machine", default="nvidia-h200")
    ap.add_argument("--results", default=str(ROOT / "results"))
    a = ap.parse_args()
    results = pathlib.Path(a.results)
    if not (results / "benchmarks.json").is_file():
        raise SystemExit(f"no {results / 'benchmarks.json'}: --results must be an asv results directory")
    stored = report.machine_results(results, a.machine)
    if not stored:
        raise SystemExit(f"no results for machine {a.machine} in {results}")
    names = a.commits or [report.commit_order(set(stored), {c: r.date for c, r in stored.items()})[-1]]
    runs = [stored[resolve(n, stored)] for n in names]
    current = report.current_benchmarks(results)
    host = {}
    for res in runs:
        # Without a readable benchmarks.json every stored version counts, as report.rows takes them.
        keys = res.get_all_result_keys() if current is None else res.get_result_keys(current)
        if "add_rmsnorm.HostRatio.track_ratio" in keys:
            host.update(report.values(res).get(("HostRatio", "track_ratio"), {}))
    print(markdown(merged_rows(runs, current), host))


if __name__ == "__main__":
    main()

"""Run-to-run spread of the suite: several asv result files of one commit on one machine.

    python tools/spread.py RUN.json RUN.json [...]

asv keeps one result file per commit and environment, so repeated runs of a
commit are collected by copying the file after each run. For every benchmark
and parameter combination measured in all runs, the spread is max/min of the
runs' values (1.00 = identical). Printed per benchmark family: the median
and the worst spread over the cases moving >= 64 MiB (by the suite's traffic
model) and over the smaller ones, and the worst case by name.
"""

from __future__ import annotations

import argparse
import math
import pathlib
import statistics
import sys

from asv.results import Results

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent))
from benchmarks import _cases as cases  # noqa: E402
from table import result_values  # noqa: E402

BIG = 64 << 20
OP_OF = {"Forward": "forward", "ForwardResidual": "forward+residual", "Training": "forward+backward",
         "Host": "forward"}


def case_values(res: Results) -> dict[tuple, float]:
    """{(benchmark, params): value} of every stored result."""
    return {(key.split(".", 1)[1], combo): v[0]
            for key in res.get_all_result_keys() for combo, v in result_values(res, key).items()}


def moved(bench: str, combo: tuple) -> int:
    op = combo[0] if bench.startswith("Throughput") else OP_OF[bench.split(".")[0]]
    dtype, shape = combo[-2], combo[-1]
    return cases.bytes_moved(op, dtype, shape)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("runs", nargs="+")
    a = ap.parse_args()
    loaded = [Results.load(f) for f in a.runs]
    commits = sorted({r.commit_hash[:8] for r in loaded})
    if len(commits) > 1:
        sys.exit(f"spread.py: the runs are of {len(commits)} commits ({', '.join(commits)}); "
                 "give runs of one commit (e.g. docs/noise/<machine>/<commit8>-run*.json)")
    runs = [case_values(r) for r in loaded]
    common = set.intersection(*(set(r) for r in runs))
    families: dict[str, dict[str, list]] = {}
    for bench, combo in sorted(common):
        vals = [r[bench, combo] for r in runs]
        spread = max(vals) / min(vals) if min(vals) > 0 else math.inf
        size = "big" if moved(bench, combo) >= BIG else "small"
        families.setdefault(bench, {"big": [], "small": []})[size].append((spread, combo))
    print(f"{len(a.runs)} runs\n")
    print("| benchmark | cases ≥ 64 MiB: median / max spread | worst | smaller cases: median / max | worst |")
    print("|---|---|---|---|---|")
    for bench, groups in families.items():
        cells = []
        for size in ("big", "small"):
            g = groups[size]
            if not g:
                cells += ["–", "–"]
                continue
            worst = max(g)
            cells += [f"{statistics.median(s for s, _ in g):.3f} / {worst[0]:.3f} ({len(g)} cases)",
                      " ".join(worst[1])]
        print(f"| {bench} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()

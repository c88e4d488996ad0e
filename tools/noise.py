"""Noise study: run the whole suite several times on one commit, keep every run, print the spread.

    python tools/noise.py [--runs 5] [--rev HEAD] [--wheels DIR] [--asv-args ARGS]

asv keeps one result file per commit and environment, overwritten by each run
of that commit; this copies it after every run to
``docs/noise/<machine>/<commit8>-run<k>.json`` (JSON only, small), then prints
``tools/spread.py``'s table over all runs of that commit kept there. The
spread (max/min per benchmark and parameter set) is what the regression
thresholds in asv.conf.json and the gate factors in tools/bench.py are set
from. Runs go one after another on an otherwise idle GPU; clocks stay
unlocked (each benchmark process warms up).
"""

from __future__ import annotations

import argparse
import pathlib
import shlex
import shutil
import subprocess
import sys

import bench

ROOT = pathlib.Path(__file__).resolve().parent.parent


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--rev", default="HEAD")
    ap.add_argument("--wheels", help="folder of wheels for offline asv environments")
    ap.add_argument("--asv-args", default="", help="extra arguments for asv run")
    a = ap.parse_args()
    if a.runs < 1:
        ap.error(f"--runs must be >= 1, got {a.runs}")
    commit = bench.commits([a.rev])[0]
    machine = bench.detect()[1]
    out = ROOT / "docs" / "noise" / machine
    out.mkdir(parents=True, exist_ok=True)
    first = len(list(out.glob(f"{commit[:8]}-run*.json"))) + 1
    for k in range(first, first + a.runs):
        bench.run([commit], a.wheels, shlex.split(a.asv_args))
        (result,) = (ROOT / "results" / machine).glob(f"{commit[:8]}-*.json")
        shutil.copy(result, out / f"{commit[:8]}-run{k}.json")
        print(f"run {k} kept: {out / f'{commit[:8]}-run{k}.json'}", flush=True)
    runs = sorted(out.glob(f"{commit[:8]}-run*.json"))
    subprocess.run([sys.executable, str(ROOT / "tools" / "spread.py"), *map(str, runs)], check=True)


if __name__ == "__main__":
    main()

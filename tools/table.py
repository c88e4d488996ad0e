"""Markdown tables of one commit's asv results: the fused op against its floor and peers.

    python tools/table.py COMMIT [COMMIT ...] [--machine nvidia-h200] [--results results]

COMMIT: a hash (7 or more characters) or any git revision (HEAD, a branch).
With several, each value comes from the last of them that stored it at the
suite's current version (e.g. a whole-suite run, then a later run of one
benchmark whose method changed, on the same kernels).

One table per op (forward, forward+residual, forward+backward), one line per
dtype and shape: the fused op's device time (µs, median of asv's samples of
``*.time_device``, with its interquartile range), GB/s and fraction of the
floor (``Throughput``), and its speedup over each peer (peer time / fused
time, both from ``Throughput``'s one measuring process). Then the decode host
times (``Host.time_wall``), their ratio to the floor's, and the same ratio
measured side by side in one process (``HostRatio.track_ratio``;
``HostRatioInplace.track_ratio`` for ``inplace_residual=True``). Results stored for
another version of a benchmark than the suite's current one (a changed
method) show as "–", as asv publish leaves them out.
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import pathlib
import re
import subprocess
import sys

from asv.results import Results

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent))
from benchmarks import _cases as cases  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parent.parent
TIME_BENCH = {"forward": "Forward", "forward+residual": "ForwardResidual", "forward+backward": "Training"}
PEERS = ["compiled", "liger", "eager"]
SHAPE_ORDER = {s: i for i, s in enumerate(cases.SHAPES)}


def values(runs: list[Results], name: str, current: dict) -> dict[tuple, tuple]:
    """:func:`result_values` of benchmark ``name`` over ``runs``, a later run's value replacing an earlier one's.

    Results of another version of the benchmark than the suite's current one
    (``current``: results/benchmarks.json) are left out, as asv publish does;
    so are values a run did not get (failed or skipped cases).
    """
    key = f"add_rmsnorm.{name}"
    out = {}
    for res in runs:
        if key in res.get_result_keys(current):
            out.update(result_values(res, key))
    return out


def result_values(res: Results, key: str) -> dict[tuple, tuple]:
    """{params: (value, q25, q75)} of one stored benchmark, NaN/missing dropped."""
    params = res.get_result_params(key)
    stats = res.get_result_stats(key, params)
    out = {}
    for combo, v, st in zip(itertools.product(*params), res.get_result_value(key, params), stats):
        if v is not None and not math.isnan(v):
            combo = tuple(p.strip("'") for p in combo)
            out[combo] = (v, (st or {}).get("q_25"), (st or {}).get("q_75"))
    return out


def tables(runs: list[Results], current: dict) -> str:
    gbps = values(runs, "Throughput.track_gbps", current)
    frac = values(runs, "Throughput.track_floor_fraction", current)
    lines = []
    for op, bench in TIME_BENCH.items():
        dev = values(runs, f"{bench}.time_device", current)
        if not dev and not any(k[0] == op for k in gbps):
            lines += [f"### {op}", "", f"(no {bench}.time_device or Throughput results of the suite's "
                                        "current version in these runs)", ""]
            continue
        lines += [f"### {op}", "",
                  "| dtype | shape | fused µs (IQR) | GB/s | floor fraction | " +
                  " | ".join(f"× vs {p}" for p in PEERS) + " |",
                  "|---|---|---|---|---|" + "---|" * len(PEERS)]
        cases = sorted({k[1:] for k in dev} | {k[2:] for k in gbps if k[:2] == (op, "fused")},
                       key=lambda c: (c[0], SHAPE_ORDER.get(c[1], 99)))
        for dtype, shape in cases:
            t = dev.get(("fused", dtype, shape))
            t_txt = f"{t[0] * 1e6:.1f} ({t[1] * 1e6:.1f}–{t[2] * 1e6:.1f})" if t and t[1] else "–"
            g = gbps.get((op, "fused", dtype, shape), (None,))[0]
            f = frac.get((op, "fused", dtype, shape), (None,))[0]
            speedups = [f"{g / gbps[k][0]:.2f}" if g and (k := (op, p, dtype, shape)) in gbps else "–"
                        for p in PEERS]
            lines.append(f"| {dtype} | {shape} | {t_txt} | {'–' if g is None else f'{g:.0f}'} | "
                         f"{'–' if f is None else f'{f:.3f}'} | " + " | ".join(speedups) + " |")
        lines.append("")
    host = values(runs, "Host.time_wall", current)
    side = values(runs, "HostRatio.track_ratio", current)
    inplace = values(runs, "HostRatioInplace.track_ratio", current)
    if host or side or inplace:
        lines += ["### decode host time per synchronized call", "",
                  "| dtype | shape | fused µs | floor (torch.add) µs | ratio | ratio side by side | "
                  "in place, side by side |",
                  "|---|---|---|---|---|---|---|"]
        for dtype, shape in sorted({k[1:] for k in host if k[0] == "fused"} | {k[1:] for k in side}
                                   | {k[1:] for k in inplace}, key=lambda c: (c[0], SHAPE_ORDER.get(c[1], 99))):
            v, f = host.get(("fused", dtype, shape), (None,))[0], host.get(("floor", dtype, shape), (None,))[0]
            ratios = [d.get(("fused", dtype, shape), (None,))[0] for d in (side, inplace)]
            lines.append(f"| {dtype} | {shape} | {'–' if v is None else f'{v * 1e6:.1f}'} | "
                         f"{'–' if f is None else f'{f * 1e6:.1f}'} | {f'{v / f:.2f}' if v and f else '–'} | "
                         + " | ".join("–" if r is None else f"{r:.2f}" for r in ratios) + " |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("commits", nargs="+", metavar="commit",
                    help="commit hash (its first 7 or more characters) or a git revision")
    ap.add_argument("--machine", default="nvidia-h200")
    ap.add_argument("--results", default=str(ROOT / "results"))
    a = ap.parse_args()
    bench_file = pathlib.Path(a.results) / "benchmarks.json"
    if not bench_file.is_file():
        raise SystemExit(f"no {bench_file}: --results must be an asv results directory")
    current = json.loads(bench_file.read_text())
    print(tables([load_run(name, pathlib.Path(a.results, a.machine), a.machine) for name in a.commits], current))


def load_run(name: str, folder: pathlib.Path, machine: str) -> Results:
    """The stored results of commit ``name`` (a git revision or a hash of 7+ hex digits) on ``machine``."""
    rev = subprocess.run(["git", "rev-parse", "--verify", "--quiet", f"{name}^{{commit}}"],
                         capture_output=True, text=True, cwd=ROOT).stdout.strip()
    # A revision this clone cannot resolve (results from elsewhere) must be a hash prefix.
    commit = (rev or name).lower()
    if not re.fullmatch(r"[0-9a-f]{7,40}", commit):
        raise SystemExit(f"{name!r} is neither a git revision here nor a commit hash of 7 or more hex digits")
    # asv names results files by the hash's first 8 digits: check the rest in the file.
    runs = [Results.load(str(f), machine) for f in sorted(folder.glob("*-*.json")) if f.name.startswith(commit[:8])]
    runs = [r for r in runs if r.commit_hash.startswith(commit)]
    if not runs:
        raise SystemExit(f"no results for {name} in {folder}")
    return runs[-1]


if __name__ == "__main__":
    main()

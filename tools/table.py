"""Markdown tables of one commit's asv results: the fused op against its floor and peers.

    python tools/table.py COMMIT [--machine nvidia-h200] [--results results]

One table per op (forward, forward+residual, forward+backward), one line per
dtype and shape: the fused op's device time (µs, median of asv's samples of
``*.time_device``, with its interquartile range), GB/s and fraction of the
floor (``Throughput``), and its speedup over each peer (peer time / fused
time, both from ``Throughput``'s one measuring process). Then the decode host
times (``Host.time_wall``) and their ratio to the floor's.
"""

from __future__ import annotations

import argparse
import itertools
import math
import pathlib

from asv.results import Results

ROOT = pathlib.Path(__file__).resolve().parent.parent
TIME_BENCH = {"forward": "Forward", "forward+residual": "ForwardResidual", "forward+backward": "Training"}
PEERS = ["compiled", "liger", "eager"]


def values(res: Results, name: str) -> dict[tuple, tuple]:
    """{params: (value, q25, q75)} of a benchmark, NaN/missing dropped."""
    key = f"add_rmsnorm.{name}"
    if key not in res.get_all_result_keys():
        return {}
    params = res.get_result_params(key)
    stats = res.get_result_stats(key, params)
    out = {}
    for combo, v, st in zip(itertools.product(*params), res.get_result_value(key, params), stats):
        if v is not None and not math.isnan(v):
            combo = tuple(p.strip("'") for p in combo)
            out[combo] = (v, (st or {}).get("q_25"), (st or {}).get("q_75"))
    return out


def tables(res: Results) -> str:
    gbps, frac = values(res, "Throughput.track_gbps"), values(res, "Throughput.track_floor_fraction")
    lines = []
    for op, bench in TIME_BENCH.items():
        dev = values(res, f"{bench}.time_device")
        lines += [f"### {op}", "",
                  "| dtype | shape | fused µs (IQR) | GB/s | floor fraction | " +
                  " | ".join(f"× vs {p}" for p in PEERS) + " |",
                  "|---|---|---|---|---|" + "---|" * len(PEERS)]
        for key, (g, _, _) in gbps.items():
            if len(key) != 4 or key[0] != op or key[1] != "fused":
                continue  # results from before the suite had an op axis
            o, impl, dtype, shape = key
            t = dev.get(("fused", dtype, shape))
            t_txt = f"{t[0] * 1e6:.1f} ({t[1] * 1e6:.1f}–{t[2] * 1e6:.1f})" if t and t[1] else "–"
            speedups = [f"{gbps[k][0] and g / gbps[k][0]:.2f}" if (k := (op, p, dtype, shape)) in gbps else "–"
                        for p in PEERS]
            lines.append(f"| {dtype} | {shape} | {t_txt} | {g:.0f} | {frac[o, impl, dtype, shape][0]:.3f} | "
                         + " | ".join(speedups) + " |")
        lines.append("")
    host = values(res, "Host.time_wall")
    if host:
        lines += ["### decode host time per synchronized call", "",
                  "| dtype | shape | fused µs | floor (torch.add) µs | ratio |", "|---|---|---|---|---|"]
        for (impl, dtype, shape), (v, _, _) in host.items():
            if impl == "fused" and ("floor", dtype, shape) in host:
                f = host["floor", dtype, shape][0]
                lines.append(f"| {dtype} | {shape} | {v * 1e6:.1f} | {f * 1e6:.1f} | {v / f:.2f} |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("commit", help="commit hash (a prefix of 8 or more characters)")
    ap.add_argument("--machine", default="nvidia-h200")
    ap.add_argument("--results", default=str(ROOT / "results"))
    a = ap.parse_args()
    files = sorted(pathlib.Path(a.results, a.machine).glob(f"{a.commit[:8]}*.json"))
    if not files:
        raise SystemExit(f"no results for {a.commit} in {a.results}/{a.machine}")
    print(tables(Results.load(str(files[-1]), a.machine)))


if __name__ == "__main__":
    main()

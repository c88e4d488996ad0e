"""Measure the suite's ops at any cases, on the grid or off it: µs and fraction of the floor.

    python tools/kernel/measure_cases.py --op forward+backward --cases "bf16 8192x1032,bf16 8192x1024"
                                         [--impls fused,liger] [--rounds 5] [--json FILE]

The suite's own measurement (``benchmarks/add_rmsnorm.measure_plan``): its
ops, floors, inputs and timing method per token count, every implementation
interleaved with the floor in ``--rounds`` rounds. Medians per case and
implementation; fraction = floor time / op time. Without a GPU it runs in
Triton's interpreter (wall times: checks the command, not performance).
"""

import argparse
import statistics
import sys

from _sweep import write_json  # also puts the repository on sys.path
from benchmarks import _cases as cases  # noqa: E402
from benchmarks.add_rmsnorm import measure_plan  # noqa: E402


def rows(op: str, data: dict) -> list[dict]:
    """One row per measured (impl, case) of ``measure_plan``'s result; failed cases carry their message."""
    out = []
    for key, value in data.items():
        if key[0] == "failed":
            out.append({"op": op, "case": key[1], "failed": value})
            continue
        op_s, floor_s = (statistics.median(v) for v in value)
        out.append({"op": op, "impl": key[0], "case": key[1], "us": op_s * 1e6, "floor_us": floor_s * 1e6,
                    "fraction": floor_s / op_s})
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--op", choices=cases.OPS, default="inference")
    ap.add_argument("--cases", required=True, help="comma-separated '<dtype> <tokens>x<hidden>'")
    ap.add_argument("--impls", default="fused", help=f"comma-separated, of {cases.IMPLS}")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--json", help="also write the rows to this file")
    a = ap.parse_args(argv)
    try:
        plan = {c.strip(): a.impls.split(",") for c in a.cases.split(",")}
        for case in plan:
            cases.parse(case)
        unknown = set(a.impls.split(",")) - set(cases.IMPLS)
        if unknown:
            raise ValueError(f"--impls: {sorted(unknown)} not in {cases.IMPLS}")
        if a.rounds < 1:
            raise ValueError(f"--rounds must be at least 1, got {a.rounds}")
    except ValueError as e:
        ap.error(str(e))
    out = rows(a.op, measure_plan(a.op, plan, a.rounds))
    print("| op | case | impl | µs | floor µs | fraction of floor |\n|---|---|---|---|---|---|")
    for r in out:
        if "failed" in r:
            print(f"| {r['op']} | {r['case']} | failed: {r['failed']} | | | |")
        else:
            print(f"| {r['op']} | {r['case']} | {r['impl']} | {r['us']:.2f} | {r['floor_us']:.2f} | "
                  f"{r['fraction']:.3f} |")
    if a.json:
        write_json(a.json, out)
    return 1 if any("failed" in r for r in out) else 0


if __name__ == "__main__":
    sys.exit(main())

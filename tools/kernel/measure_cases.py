"""Measure the suite's ops at any cases, on the grid or off it: µs and fraction of the floor.

    python tools/kernel/measure_cases.py --op forward+backward --cases "bf16 8192x1032,bf16 8192x1024"
                                         [--impls fused,liger] [--rounds 5] [--json FILE]

The suite's own measurement (``benchmarks/add_rmsnorm.measure_plan``): its
ops, floors, inputs and timing method per token count, every implementation
interleaved with the floor in ``--rounds`` rounds. Medians per case and
implementation; fraction = floor time / op time. One case at a time: each
row is printed, and ``--json`` rewritten, as soon as its case is done (Ctrl-C
keeps them). Exit status 1 when a case failed. Without a GPU set
TRITON_INTERPRET=1: wall times in Triton's interpreter (checks the command,
not performance).
"""

import argparse
import statistics
import sys

from _sweep import count_type, interrupted, names, need_device, new_json_path, write_json  # also puts the repository on sys.path
from benchmarks import _cases as cases  # noqa: E402
from benchmarks.add_rmsnorm import measure_plan  # noqa: E402


def rows(op: str, data: dict) -> list[dict]:
    """One row per (impl, case) of ``measure_plan``'s result: measured, skipped (with why) or failed."""
    out = []
    for key, value in data.items():
        if key[0] == "failed":  # the case, or one peer at it
            out.append({"op": op, **({"impl": key[1]} if len(key) == 3 else {}), "case": key[-1], "failed": value})
        elif key[0] == "skipped":
            out.append({"op": op, "impl": key[1], "case": key[2], "skipped": value})
        else:
            op_s, floor_s = (statistics.median(v) for v in value)
            out.append({"op": op, "impl": key[0], "case": key[1], "us": op_s * 1e6, "floor_us": floor_s * 1e6,
                        "fraction": floor_s / op_s})
    return out


def line(r: dict) -> str:
    if "failed" in r:
        return f"| {r['op']} | {r['case']} | {r.get('impl', '')} | failed: {r['failed']} | | |"
    if "skipped" in r:
        return f"| {r['op']} | {r['case']} | {r['impl']} | not run: {r['skipped']} | | |"
    return f"| {r['op']} | {r['case']} | {r['impl']} | {r['us']:.4g} | {r['floor_us']:.4g} | {r['fraction']:.3g} |"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--op", choices=cases.OPS, default="inference")
    ap.add_argument("--cases", required=True, help="comma-separated '<dtype> <tokens>x<hidden>'")
    ap.add_argument("--impls", default="fused", help=f"comma-separated, of {cases.IMPLS}")
    ap.add_argument("--rounds", type=count_type(), default=5)
    ap.add_argument("--json", type=new_json_path, help="also write the rows to this new file")
    a = ap.parse_args(argv)
    need_device(ap)
    try:
        case_list, impls = names(a.cases, "--cases"), names(a.impls, "--impls")
        for case in case_list:
            cases.parse(case)
        unknown = set(impls) - set(cases.IMPLS)
        if unknown:
            raise ValueError(f"--impls: {sorted(unknown)} not in {cases.IMPLS}")
    except ValueError as e:
        ap.error(str(e))
    print("| op | case | impl | µs | floor µs | fraction of floor |\n|---|---|---|---|---|---|", flush=True)
    out = []
    try:
        for case in case_list:
            done = rows(a.op, measure_plan(a.op, {case: impls}, a.rounds))
            print("\n".join(line(r) for r in done), flush=True)
            out += done
            if a.json:
                write_json(a.json, out)
    except KeyboardInterrupt:
        return interrupted(len({r["case"] for r in out}), a.json)
    return 1 if any("failed" in r for r in out) else 0


if __name__ == "__main__":
    sys.exit(main())

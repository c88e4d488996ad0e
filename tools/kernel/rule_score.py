"""The launch rules checked off every committed sweep: the rule's launch against the best one measured beside it.

    python tools/kernel/rule_score.py [--sweeps DIR] [--misses 30] [--json FILE] [--against FILE]

No GPU: the rules are computed for the H200 (132 SMs, Hopper settings), the forward's band waves with the
registers of kernels compiled for sm_90 (as ``registers.py``). For each case of the sweeps in ``--sweeps``
(default ``docs/sweeps/nvidia-h200``: the tuners' rows, a launch each, and ``head_to_head.py``'s, several
named launches each; the rows of kernel variants are left out) whose measured launches include today's rule
launch, the score is the rule launch's fraction of the floor over the best fraction measured in that file
(the median of a launch's repeats). A case in several files is scored in each. Cases are named as the sweeps
name them ("fp32 12x16384 forward": dtype, rows x hidden size, op; the backward's without an op); a case named
otherwise, or whose launches are of another kind, is counted as "another form of case". The sweeps measured the
kernels of their day, in one process, a launch's verdict at 3% moving by about that much between processes
(docs/tuning.md): a score is a pointer to a sweep, not a measurement of today's code.

``--json``: every scored case (file, case, the rule launch, its score). ``--against`` an earlier ``--json``:
the cases whose rule launch changed since (a rule edit), with both launches' scores where measured.
"""

import argparse
import collections
import json
import math
import pathlib
import re
import statistics
import sys

from _sweep import count_type, json_path, write_json  # also puts the repository on sys.path
from registers import ELEM, H200_LIMITS, H200_SMS, forward_usage  # noqa: E402
from copy_bound import COPY_OF  # noqa: E402 - after registers, which makes the kernels for sm_90
from fusedkernel.kernels import launch  # noqa: E402
from fusedkernel.kernels.backward_rule import backward_config  # noqa: E402
from fusedkernel.kernels.config import HOPPER  # noqa: E402
from fusedkernel.kernels.forward_rule import band_wave_config, forward_config  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parents[2]
CASE = re.compile(r"(bf16|fp16|fp32) ([1-9][0-9]*)x([1-9][0-9]*)(?: (inference|forward\+residual|forward))?")
WITHIN = 0.97  # the rule's target: within 3% of the best setting found


def measured(rows: list) -> dict[str, dict[str, list[float]]]:
    """{case: {launch repr: [fractions]}} of one sweep file's rows, in either format; other rows left out."""
    out: dict[str, dict[str, list[float]]] = collections.defaultdict(dict)
    for r in rows if isinstance(rows, list) else []:
        if not isinstance(r, dict) or not isinstance(r.get("case"), str) or "variant" in r:
            continue
        if isinstance(r.get("config"), str) and _number(r.get("fraction")):
            out[r["case"]].setdefault(r["config"], []).append(r["fraction"])
        elif isinstance(r.get("configs"), dict) and isinstance(r.get("fraction"), dict):
            for label, cfg in r["configs"].items():
                # head_to_head.py's copies ("copy of ForwardConfig(...)") bound a launch; they are not one.
                if isinstance(cfg, str) and not cfg.startswith(COPY_OF) and _number(r["fraction"].get(label)):
                    out[r["case"]].setdefault(cfg, []).append(r["fraction"][label])
    return out


def _number(v) -> bool:
    return type(v) in (int, float) and math.isfinite(v) and v > 0


class Rule:
    """Today's rule launch (its repr) for a sweep's case on the H200; None for a case of another form."""

    def __init__(self):
        self._resident: dict = {}

    def __call__(self, case: str, kind: str) -> str | None:
        m = CASE.fullmatch(case)
        if m is None:
            return None
        dtype, rows, n, op = m[1], int(m[2]), int(m[3]), m[4]
        if kind == "BackwardConfig" and op is None:
            return repr(backward_config(n, ELEM[dtype], H200_SMS, HOPPER))
        if kind != "ForwardConfig" or op is None:
            return None
        stores = op != "forward"
        cfg = forward_config(n, ELEM[dtype], H200_SMS, HOPPER, rows, stores, dtype == "fp16")
        if rows > H200_SMS:  # as the launch: the band's warps follow the compiled kernel's registers
            cfg = band_wave_config(cfg, rows, H200_SMS, HOPPER, lambda c: self.resident(c, dtype, n, stores))
        return repr(cfg)

    def resident(self, cfg, dtype: str, n: int, stores: bool) -> int:
        key = (cfg, dtype, n % 16 == 0, launch._vector_width(ELEM[dtype], n), stores)
        if key not in self._resident:
            regs, _stack, shared = forward_usage(cfg, dtype, n, stores)
            self._resident[key] = launch.resident_per_sm(regs, cfg.num_warps, shared, H200_LIMITS)
        return self._resident[key]


def score(folder: pathlib.Path) -> tuple[list[dict], collections.Counter]:
    """The scored cases of every sweep file in ``folder``, and counts of the cases left unscored and why."""
    rule, scored, left = Rule(), [], collections.Counter()
    for path in sorted(folder.glob("*.json")):
        try:
            rows = json.loads(path.read_text())
        except (OSError, ValueError) as e:
            raise SystemExit(f"rule_score.py: {path}: not readable JSON ({type(e).__name__}: {e})") from None
        for case, launches in measured(rows).items():
            kind = next(iter(launches)).split("(", 1)[0]
            ours = rule(case, kind)
            if ours is None:
                left["another form of case"] += 1
            elif ours not in launches:
                left["the rule's launch not measured"] += 1
            else:
                med = {c: statistics.median(v) for c, v in launches.items()}
                scored.append({"file": path.name, "case": case, "rule": ours, "score": med[ours] / max(med.values()),
                               "fractions": med})
    return scored, left


def report(scored: list[dict], left: collections.Counter, misses: int) -> str:
    within = sum(r["score"] >= WITHIN for r in scored)
    gm = math.exp(sum(math.log(r["score"]) for r in scored) / len(scored)) if scored else float("nan")
    out = [f"{len(scored)} cases scored: the rule within 3% of the best in {within} "
           f"({within / max(1, len(scored)):.1%}), geometric mean {gm:.4f}; unscored: "
           + (", ".join(f"{n} ({why})" for why, n in sorted(left.items())) or "none")]
    worst = sorted((r for r in scored if r["score"] < WITHIN), key=lambda r: r["score"])
    if worst:
        out += ["", f"The {min(misses, len(worst))} lowest of {len(worst)} below 0.97:", "", "| score | case | file |",
                "|---|---|---|"]
        out += [f"| {r['score']:.3f} | {r['case']} | {r['file']} |" for r in worst[:misses]]
    return "\n".join(out)


def _scored_row(e: object) -> bool:
    # A --json row: what changes() reads, of its types.
    return (isinstance(e, dict) and all(isinstance(e.get(k), str) for k in ("file", "case", "rule"))
            and _number(e.get("score")))


def changes(scored: list[dict], earlier: list[dict]) -> str:
    """The cases whose rule launch differs from ``earlier``'s (a ``--json``), with both launches' scores."""
    now = {(r["file"], r["case"]): r for r in scored}
    out = []
    for e in earlier:
        r = now.get((e.get("file"), e.get("case")))
        if r is None or r["rule"] == e.get("rule"):
            continue
        best = max(r["fractions"].values())
        was = r["fractions"].get(e.get("rule"))
        out.append((e["case"], e["file"], "not measured" if was is None else f"{was / best:.3f}", f"{r['score']:.3f}"))
    if not out:
        return "no scored case's rule launch changed"
    lines = [f"{len(out)} scored cases' rule launch changed:", "", "| case | file | before | now |",
             "|---|---|---|---|"]
    return "\n".join(lines + [f"| {c} | {f} | {b} | {a} |" for c, f, b, a in sorted(out)])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sweeps", type=pathlib.Path, default=ROOT / "docs" / "sweeps" / "nvidia-h200")
    ap.add_argument("--misses", type=count_type(0), default=30, help="how many of the lowest scores to list")
    ap.add_argument("--json", type=json_path, help="write every scored case here")
    ap.add_argument("--against", type=pathlib.Path, help="an earlier --json: list the cases whose launch changed")
    a = ap.parse_args()
    if not a.sweeps.is_dir():
        ap.error(f"--sweeps {a.sweeps}: not a folder")
    if not any(a.sweeps.glob("*.json")):
        ap.error(f"--sweeps {a.sweeps}: no sweep files (*.json) there")
    earlier = None
    if a.against:
        try:
            earlier = json.loads(a.against.read_text())
        except (OSError, ValueError) as e:
            ap.error(f"--against {a.against}: not readable JSON ({type(e).__name__})")
        if not (isinstance(earlier, list) and all(_scored_row(e) for e in earlier)):
            ap.error(f"--against {a.against}: not a --json of this tool (rows of file, case, rule and score)")
    scored, left = score(a.sweeps)
    print(report(scored, left, a.misses))
    if earlier is not None:
        print("\n" + changes(scored, earlier))
    if a.json:
        write_json(a.json, scored)
    return 0


if __name__ == "__main__":
    sys.exit(main())

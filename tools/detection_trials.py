"""The detection experiment's analysis: histories made of measured processes, judged by the tracker's own code.

asv's step detection as ``asv publish`` runs it, the gate's ``verdict.compare`` and ``bisection.bisect``, each
at the threshold ``asv.conf.json`` gives the family (``tools/detection_experiment.py analyze``).
"""

from __future__ import annotations

import random
import statistics
import zlib

import bisection
import verdict
from asv import _stats, util
from asv.step_detect import detect_regressions, detect_steps
from asv_runner.statistics import compute_stats


def stored(stats: dict | None) -> dict | None:
    """asv's statistics of a result as its results file holds them: ``Results.save`` rounds them to 5 significant
    digits (``asv.util.truncate_float_list``); the result's value is kept whole."""
    return None if stats is None else {k: util.truncate_float_list(v) for k, v in stats.items()}


def stats_of(samples: list[float]):
    """asv's (value, (stats, samples)) of one result, as stored with --record-samples."""
    value, stats = compute_stats(samples, 1)
    return value, (stats, samples)


def publish_flags(history: list, threshold: float) -> list[int]:
    """Indexes of the commits asv publish flags in a history of (value, (stats, samples)), oldest first.

    As asv publish reads them from the results files: the value at full precision, the statistics that weigh it
    (ci_99) to 5 significant digits (``Results.save``). Near a tie of weights the stored ones move a level."""
    y = [v for v, _ in history]
    w = [_stats.get_weight(stored(ss[0])) for _, ss in history]
    steps = detect_steps(y, w)
    _, _, jumps = detect_regressions(steps, threshold)
    # asv's jumps: (revision before, revision after, ...); here revisions are list indexes.
    return sorted({after for _, after, *_ in jumps or []})


class Pools:
    """Measured processes per level, drawn without replacement (reshuffled when used up)."""

    def __init__(self, raw: dict, cls: str, case: str, seed: int):
        self.rng = random.Random(seed)
        self.pools, self.left = {}, {}
        for p in raw["processes"]:
            self.pools.setdefault(p["level"], []).append(stats_of(p["ratios"][cls][case]))

    def draw(self, level: float):
        if not self.left.get(level):
            self.left[level] = self.rng.sample(self.pools[level], len(self.pools[level]))
        return self.left[level].pop()


def trials(raw: dict, conf: dict, family: str, cls: str, case: str, level: float, n: int) -> list[dict]:
    """The curve rows of one family and slowdown level: publish, gate and bisect, two placements."""
    entry = f"add_rmsnorm.{cls}.track_ratio('fused', '{case}')"
    thr, gate_thr = verdict.threshold(conf, entry), verdict.gate_threshold(conf, entry)
    aa = [p for p in raw["processes"] if p["level"] == 0.0]
    slow = [p for p in raw["processes"] if p["level"] == level]
    realized = (statistics.median(statistics.median(p["ratios"][cls][case]) for p in slow)
                / statistics.median(statistics.median(p["ratios"][cls][case]) for p in aa) - 1)
    rows, pairs = [], every_pair(aa, slow, entry, cls, case, gate_thr)
    for placement, culprit in (("middle", 4), ("first", 1)):
        flagged = failed = named = 0
        for t in range(n):
            pools = Pools(raw, cls, case, seed=zlib.crc32(f"{family} {level} {placement} {t}".encode()))
            commits = [pools.draw(0.0) for _ in range(culprit if placement == "first" else 20)]
            commits += [pools.draw(level) for _ in range(4)]
            at = len(commits) - 4
            flagged += at in publish_flags(commits, thr)
            failed += verdict.compare(entry, *commits[at - 1][:1], *commits[at][:1], commits[at - 1][1],
                                      commits[at][1], 1 + gate_thr).regressed
            levels = [0.0] * culprit + [level] * (9 - culprit)  # GOOD + 8 commits, the culprit at `culprit`
            names = [f"c{i}" for i in range(9)]

            def measure(commit, _levels=levels, _names=names, _pools=pools):
                return _pools.draw(_levels[_names.index(commit)])

            def remeasure(order, _measure=measure):
                got = {}
                for c in order:
                    v = _measure(c)
                    got.setdefault(c, []).extend(v[1][1])
                return {c: stats_of(s) for c, s in got.items()}

            out = bisection.bisect(names, measure, remeasure, 1 + gate_thr, entry, echo=lambda *_: None)
            named += out.named == names[culprit]
        rows.append({"family": family, "case": case, "slowdown": round(realized, 4), "target": level,
                     "placement": placement, "trials": n, "flagged_by_publish": flagged, "failed_gate": failed,
                     "bisect_named": named, "threshold": thr, "gate_threshold": gate_thr,
                     "processes": [len(aa), len(slow)], "gate_every_pair": pairs})
    return rows


def every_pair(base: list, head: list, entry: str, cls: str, case: str, gate_thr: float) -> list[int]:
    """[failed, pairs]: the gate over every pair of a ``base`` and another ``head`` process. The trials draw
    their commits from these few processes: this count is the evidence they resample, without the draws."""
    stats = {id(p): stats_of(p["ratios"][cls][case]) for p in base + head}
    pairs = [(a, b) for a in base for b in head if a is not b]
    failed = sum(verdict.compare(entry, stats[id(a)][0], stats[id(b)][0], stats[id(a)][1], stats[id(b)][1],
                                 1 + gate_thr).regressed for a, b in pairs)
    return [failed, len(pairs)]


def pooled(raw: dict, k: int) -> dict:
    """``raw`` with each commit made of ``k`` measured processes of one level, in measured order,
    each giving its first ceil(rounds / k) rounds (the suite pooling k processes of as many rounds
    in all); a level's last processes short of ``k`` are left out."""
    if k == 1:
        return raw
    by_level: dict[float, list] = {}
    for p in raw["processes"]:
        by_level.setdefault(p["level"], []).append(p)
    commits = []
    for level, procs in by_level.items():
        for i in range(0, len(procs) - k + 1, k):
            group = procs[i:i + k]
            ratios = {cls: {case: [x for p in group for x in p["ratios"][cls][case][:-(-len(v) // k)]]
                            for case, v in group[0]["ratios"][cls].items()} for cls in group[0]["ratios"]}
            commits.append({**group[0], "ratios": ratios, "pooled": k})
    return {**raw, "processes": commits}


def aa_row(raw: dict, conf: dict, family: str, cls: str, case: str) -> dict:
    entry = f"add_rmsnorm.{cls}.track_ratio('fused', '{case}')"
    thr, gate_thr = verdict.threshold(conf, entry), verdict.gate_threshold(conf, entry)
    aa = [p for p in raw["processes"] if p["level"] == 0.0]
    history = [stats_of(p["ratios"][cls][case]) for p in aa]
    fails = sum(verdict.compare(entry, a[0], b[0], a[1], b[1], 1 + gate_thr).regressed
                for a, b in zip(history, history[1:]))
    meds = [v for v, _ in history]
    by_gpu: dict[str, list[float]] = {}  # processes before GPUs were recorded: "unrecorded"
    for p, m in zip(aa, meds):
        by_gpu.setdefault(p.get("gpu_uuid") or "unrecorded", []).append(m)
    return {"family": family, "case": case, "aa_commits": len(history),
            "false_flags_publish": len(publish_flags(history, thr)), "false_fails_gate": fails,
            "gate_every_pair": every_pair(aa, aa, entry, cls, case, gate_thr),
            "spread": round(max(meds) / min(meds) - 1, 4), "threshold": thr, "gate_threshold": gate_thr,
            "aa_median_by_gpu": {g: [len(v), round(statistics.median(v), 4)] for g, v in by_gpu.items()}}


def markdown(rows: list[dict]) -> str:
    out = ["| family | case | slowdown (measured) | placement | trials | publish | gate | bisect | gate, every pair "
           "| thresholds (publish / gate, bisect) |", "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        thr = f"{r['threshold']:.3g} / {r.get('gate_threshold', r['threshold']):.3g}"
        failed, pairs = r["gate_every_pair"]
        if "aa_commits" in r:
            out.append(f"| {r['family']} | {r['case']} | A/A ({r['aa_commits']} commits, spread {r['spread']:.2%}) | "
                       f"– | – | {r['false_flags_publish']} false flags | {r['false_fails_gate']} false fails | – | "
                       f"{failed} of {pairs} | {thr} |")
        else:
            aa, slow = r["processes"]
            out.append(f"| {r['family']} | {r['case']} | {r['slowdown']:+.2%} (target {r['target']:.0%}) | "
                       f"{r['placement']} | {r['trials']} | {r['flagged_by_publish']} | {r['failed_gate']} | "
                       f"{r['bisect_named']} | {failed} of {pairs} ({slow} slow × {aa} A/A) | {thr} |")
    return "\n".join(out)



if __name__ == "__main__":
    raise SystemExit("tools/detection_trials.py is a module of the detection experiment: "
                     "python tools/detection_experiment.py --help")

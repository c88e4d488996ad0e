"""Which benchmarks are flagged, at what threshold, and whether a change is a regression.

One source: ``asv.conf.json``. ``regressions_thresholds`` sets each flagged
family's threshold for asv publish, which compares the history across runs
and runners (asv's rule: the largest threshold whose regex matches
``benchmark(params)`` from the start; 0.05 where none does);
``gate_thresholds`` (same form; for a benchmark none of its regexes matches,
``regressions_thresholds``) sets it for the gate, compare and the bisect,
which measure both sides in one session. ``regressions_first_commits`` with
``null`` marks what is never flagged. asv publish flags a step when the latest level exceeds the best by
more than the threshold; the gate and the bisect use theirs as a factor
(1 + threshold), with asv's own significance test (Mann-Whitney on the
recorded samples, p < 0.002; confidence intervals where there are no samples).
"""

from __future__ import annotations

import dataclasses
import itertools
import math
import re

DEFAULT_THRESHOLD = 0.05  # asv's, where no regex matches
P_THRESHOLD = 0.002  # asv's significance level (asv._stats.is_different's default)


PUBLISH_KEY, GATE_KEY = "regressions_thresholds", "gate_thresholds"


def check_conf(conf: dict) -> None:
    """ValueError naming the asv.conf.json key of a threshold that is not a number >= 0, or of a regex that
    does not compile (asv would crash on it, or the gate divide by it, after measuring)."""
    for key in (PUBLISH_KEY, GATE_KEY, "regressions_first_commits"):
        table = conf.get(key, {})
        if not isinstance(table, dict):
            raise ValueError(f"asv.conf.json's {key} must be an object of regex: threshold, got {table!r}")
        for regex, v in table.items():
            try:
                re.compile(regex)
            except re.error as e:
                raise ValueError(f"asv.conf.json's {key}: {regex!r} is not a valid regex ({e})") from None
            if key != "regressions_first_commits" and not (type(v) in (int, float) and 0 <= v < math.inf):
                raise ValueError(f"asv.conf.json's {key}[{regex!r}] must be a number >= 0, got {v!r}")


def threshold(conf: dict, entry: str, key: str = PUBLISH_KEY) -> float:
    """asv publish's threshold for ``entry`` ("name(params)"), or ``key``'s: the largest matching one."""
    found = [float(v) for k, v in conf.get(key, {}).items() if re.match(k, entry)]
    return max(found) if found else DEFAULT_THRESHOLD


def gate_threshold(conf: dict, entry: str) -> float:
    """The gate's, compare's and the bisect's threshold for ``entry``: from ``gate_thresholds`` where one of
    its regexes matches, else publish's."""
    if any(re.match(k, entry) for k in conf.get(GATE_KEY, {})):
        return threshold(conf, entry, GATE_KEY)
    return threshold(conf, entry)


def flagged(conf: dict, entry: str) -> bool:
    """Does asv publish look for regressions in ``entry`` at all (no ``null`` first commit matches)?"""
    return not any(v is None and re.match(k, entry) for k, v in conf.get("regressions_first_commits", {}).items())


def entries(results, names=None):
    """(entry, value, (stats, samples)) of every stored value of an asv ``Results``."""
    for name in results.get_all_result_keys() if names is None else names:
        params = results.get_result_params(name)
        combos = list(itertools.product(*params)) if params else [()]
        values = results.get_result_value(name, params)
        stats = results.get_result_stats(name, params)
        samples = results.get_result_samples(name, params)
        for combo, v, st, sm in zip(combos, values, stats, samples):
            entry = f"{name}({', '.join(combo)})" if combo else name
            yield entry, v, (st, sm)


@dataclasses.dataclass
class Comparison:
    entry: str
    before: float | None
    after: float | None
    factor: float
    significant: bool
    p: float | None

    @property
    def ratio(self) -> float | None:
        """after / before; None unless both are finite and before > 0 (a value missing, NaN or broken)."""
        if usable(self.before) and _finite(self.after):
            return self.after / self.before
        return None

    @property
    def regressed(self) -> bool:
        return self.significant and self.ratio is not None and self.ratio > self.factor

    def why(self, ratio_name: str = "ratio") -> str:
        """The ratio and the condition that decides whether it is a regression, in words.

        E.g. "BAD/GOOD = 1.44, beyond x1.03 but not significant (p 0.0031, needs < 0.002)".
        """
        if self.ratio is None:
            return f"{ratio_name}: not compared (a value is missing, skipped, zero or infinite)"
        head = f"{ratio_name} = {self.ratio:.3g}"
        if self.ratio <= self.factor:
            return f"{head}, not beyond x{self.factor:.3g}"
        decided = "and significant" if self.significant else "but not significant"
        return f"{head}, beyond x{self.factor:.3g} {decided} ({self.significance()})"

    def significance(self) -> str:
        """What decided significance: Mann-Whitney's p, or asv's fallback (too few samples, or none)."""
        if self.p is not None and (self.p < P_THRESHOLD) == self.significant:
            return f"p {self.p:.2g}" + ("" if self.significant else f", needs < {P_THRESHOLD}")
        if self.p is not None:
            return f"too few samples for p < {P_THRESHOLD}: 99% confidence intervals " + \
                ("apart" if self.significant else "overlap")
        return "no samples: " + ("confidence intervals apart, or one value each" if self.significant
                                 else "99% confidence intervals overlap")


def p_value(ss_a, ss_b) -> float | None:
    """Mann-Whitney p of two sample lists (asv's test), None without samples."""
    from asv import _stats

    a, b = (ss[1] if ss else None for ss in (ss_a, ss_b))
    if not a or not b:
        return None
    return _stats.mann_whitney_u([x for x in a if not math.isnan(x)], [x for x in b if not math.isnan(x)])[1]


def compare(entry: str, before, after, ss_before, ss_after, factor: float) -> Comparison:
    """asv continuous's verdict for one value: worse by more than ``factor`` and significant."""
    from asv import _stats

    ok = before is not None and after is not None and not (math.isnan(before) or math.isnan(after))
    significant, p = False, p_value(ss_before, ss_after) if ok else None
    if ok:
        if ss_before and ss_after and ss_before[0] and ss_after[0]:
            significant = _stats.is_different(ss_before[1], ss_after[1], ss_before[0], ss_after[0])
        elif p is not None and min(len(ss_before[1]), len(ss_after[1])) > 1:
            significant = p < P_THRESHOLD  # samples without asv's statistics: the test alone
        else:
            significant = True  # one value each: asv compares by the factor alone
    return Comparison(entry, before, after, factor, significant, p)


def judge(conf: dict, base, head) -> list[Comparison]:
    """Every flagged value stored in both asv ``Results``, compared at its family's factor."""
    before = {e: (v, ss) for e, v, ss in entries(base)}
    return [compare(entry, before[entry][0], v, before[entry][1], ss, 1 + gate_threshold(conf, entry))
            for entry, v, ss in entries(head)
            if entry in before and flagged(conf, entry) and comparable(before[entry][0])]


def comparable(before) -> bool:
    """Is there a verdict to give on a value whose base reading is ``before``: not where it is NaN (asv: not run,
    outside the selection or skipped), but where only the head skipped it (no ratio: the head stopped running it)."""
    return not _nan(before)


def _nan(v) -> bool:
    return isinstance(v, float) and math.isnan(v)


def _finite(v) -> bool:
    return isinstance(v, (int, float)) and math.isfinite(v)


def usable(v) -> bool:
    """Can a ratio be taken of ``v``: a finite number > 0 (not a failure, NaN, zero or infinity)?"""
    return _finite(v) and v > 0


def label(r: Comparison) -> str:
    """The verdict column: what was decided and on which condition."""
    sig = f"p < {P_THRESHOLD}" if r.p is not None and r.p < P_THRESHOLD else "significant"
    if r.ratio is None:
        return "not compared"
    if r.regressed:
        return f"REGRESSED (> x{r.factor:.3g}, {sig})"
    if 1 / r.factor <= r.ratio <= r.factor:
        return f"within x{r.factor:.3g}"
    if r.significant:
        return f"faster (< x{1 / r.factor:.3g}, {sig})"
    return f"not significant (p ≥ {P_THRESHOLD})" if r.p is not None else "not significant (99% CIs overlap)"


def table(rows: list[Comparison], before: str = "before", after: str = "after") -> str:
    """A markdown table: benchmark, before, after, ratio, p, verdict; the rule under it."""
    lines = [f"| benchmark | {before} | {after} | ratio | p (Mann-Whitney) | verdict |", "|---|---|---|---|---|---|"]
    for r in rows:
        fmt = (lambda v: "failed" if v is None else "skipped" if _nan(v) else f"{v:.4g}")
        p = "–" if r.p is None else f"{r.p:.2g}"
        ratio = "–" if r.ratio is None else f"{r.ratio:.3f}"
        lines.append(f"| {r.entry} | {fmt(r.before)} | {fmt(r.after)} | {ratio} | {p} | {label(r)} |")
    lines.append(f"\nratio = {after} / {before}. A ratio beyond the benchmark's factor (x, 1 + its asv.conf.json "
                 "gate threshold) counts only when significant: asv's Mann-Whitney test on the samples, "
                 f"p < {P_THRESHOLD} (with too few samples, 99% confidence intervals that do not overlap).")
    return "\n".join(lines)


def plain_table(rows: list[Comparison], before: str = "before", after: str = "after") -> str:
    """A markdown table of values that are shown, not judged: benchmark, before, after, after / before."""
    lines = [f"| benchmark | {before} | {after} | ratio |", "|---|---|---|---|"]
    for r in rows:
        ratio = "–" if r.ratio is None else f"{r.ratio:.3f}"
        lines.append(f"| {r.entry} | {r.before:.4g} | {r.after:.4g} | {ratio} |")
    return "\n".join(lines)


if __name__ == "__main__":
    raise SystemExit("tools/verdict.py is a module of the tracker's command line: python tools/bench.py --help")

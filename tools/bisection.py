"""Bisect a step to its commit, modelled on Chromium's Pinpoint.

:func:`bisect` measures GOOD and BAD, then binary-searches the first commit
after GOOD whose value is beyond the family's threshold relative to GOOD
(worse by more than the factor and significantly so, asv's test), and before
naming it measures the named commit and its parent again, alternating, and
reports both values, their ratio and the Mann-Whitney p. It never assumes
what it has not measured: GOOD and BAD are measured first, and a range whose
BAD is not beyond the threshold names nothing. GOOD or BAD failing to measure
is a run error (``Outcome.error``), not a range without a step; a commit between
them that fails is skipped (its neighbours are measured instead), and a step
that only failed commits could hold is a run error too.

``measure(commit)`` returns ``(value, (stats, samples))`` of the one bisected
benchmark entry (``None`` value when it failed there); ``remeasure(commits)``
measures several commits again in the given order and returns their
combined ``(value, (stats, samples))`` per commit.
"""

from __future__ import annotations

import dataclasses

from verdict import compare


@dataclasses.dataclass
class Outcome:
    named: str | None           # the first slow commit, or None
    reason: str                 # why (one line)
    steps: list                 # (commit, value) in the order measured
    confirmation: object = None  # verdict.Comparison of parent vs named, re-measured
    error: bool = False          # a failure to measure decided it: a run error, not "no step"


def bisect(commits: list[str], measure, remeasure, factor: float, entry: str, echo=print) -> Outcome:
    """``commits``: GOOD first, then every commit after it up to BAD, oldest first."""
    if len(commits) < 2:
        raise ValueError("a range needs GOOD and at least one commit after it")
    seen, steps = {}, []

    def value(i):
        if i not in seen:
            seen[i] = measure(commits[i])
            steps.append((commits[i], seen[i][0]))
            echo(f"bisect: {commits[i][:10]} ({i}/{len(commits) - 1}) = {_fmt(seen[i][0])}")
        return seen[i]

    good = value(0)
    if good[0] is None:
        return Outcome(None, f"GOOD {commits[0][:10]} failed to measure", steps, error=True)

    def against_good(i):
        v = value(i)
        return compare(entry, good[0], v[0], good[1], v[1], factor)

    last = len(commits) - 1
    if value(last)[0] is None:
        return Outcome(None, f"BAD {commits[last][:10]} failed to measure", steps, error=True)
    if not (check := against_good(last)).regressed:
        return Outcome(None, f"BAD {commits[last][:10]} is not a step from GOOD ({_fmt(good[0])} -> "
                             f"{_fmt(seen[last][0])}): {check.why('BAD/GOOD')}", steps)

    def probe(lo, hi):
        """A commit between ``lo`` and ``hi`` that measures, the middle first, then its nearest (as ``git bisect
        skip``: a failed commit is neither slow nor not slow); None when all of them fail."""
        mid = (lo + hi) // 2
        return next((i for i in sorted(range(lo + 1, hi), key=lambda i: (abs(i - mid), i))
                     if value(i)[0] is not None), None)

    lo, hi = 0, last  # lo is not slow, hi is
    while hi - lo > 1:
        mid = probe(lo, hi)
        if mid is None:
            between = "the commit" if hi - lo == 2 else f"the {hi - lo - 1} commits"
            return Outcome(None, f"the first slow commit is one of {commits[lo + 1][:10]}..{commits[hi][:10]}: "
                                 f"{between} after {commits[lo][:10]} (not slow) and before {commits[hi][:10]} "
                                 "(slow) failed to measure", steps, error=True)
        if against_good(mid).regressed:
            hi = mid
        else:
            lo = mid
    parent, named = commits[hi - 1], commits[hi]
    echo(f"bisect: confirming {named[:10]} against its parent {parent[:10]}, alternating")
    again = remeasure([parent, named, parent, named])
    check = compare(entry, again[parent][0], again[named][0], again[parent][1], again[named][1], factor)
    if not check.regressed:
        return Outcome(None, f"{named[:10]} was not confirmed: re-measured against its parent, "
                             f"{check.why('named/parent')}", steps, check)
    return Outcome(named, f"first commit beyond x{factor:.3g} of GOOD, confirmed against its parent "
                          f"({check.why('named/parent')})", steps, check)


def _fmt(v) -> str:
    return "failed" if v is None else f"{v:.4g}"


if __name__ == "__main__":
    raise SystemExit("tools/bisection.py is a module of the tracker's command line: python tools/bench.py --help")

"""Where the op stands, read from asv results: the rows of the tables, now.html and run summaries.

Per op and case, from one commit's results: the fused op's device time (µs,
median of its rounds), GB/s, fraction of the floor (floor time / op time =
1 / ``track_ratio``), and × each peer (peer time / fused time, both
measured beside the same floor in the same rounds: peer ratio / fused ratio;
> 1 means the fused op is faster).
"""

from __future__ import annotations

import dataclasses
import json
import math
import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
DTYPE_ORDER = ["bf16", "fp16", "fp32"]  # the suite's (benchmarks/_cases.py), without importing torch
CLASSES = {"Forward": "forward", "ForwardResidual": "forward+residual", "Inference": "inference",
           "Training": "forward+backward"}
PEERS = ["compiled", "liger", "quack", "eager"]


@dataclasses.dataclass
class Row:
    op: str
    case: str
    us: float | None = None
    gbps: float | None = None
    ratio: float | None = None  # fused time / floor time
    peers: dict = dataclasses.field(default_factory=dict)  # impl -> peer ratio / fused ratio

    @property
    def fraction(self) -> float | None:
        return 1 / self.ratio if self.ratio else None


def _num(v) -> float | None:
    """A finite number, or None (asv's NaN of a failure; a corrupt file's inf, bool or text)."""
    return v if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) else None


def values(results) -> dict[tuple[str, str], dict]:
    """{(asv class, method): {params tuple (quotes stripped): value}} of an asv ``Results``, NaN and failures dropped."""
    import itertools

    out = {}
    for name in results.get_all_result_keys():
        parts = name.split(".")
        if len(parts) != 3:
            continue
        params = results.get_result_params(name)
        combos = list(itertools.product(*params)) if params else [()]
        vals = results.get_result_value(name, params)
        stored = results._results.get(name)  # asv 0.6.6's values as stored: it pads or cuts them to the params
        count = len(stored) if isinstance(stored, list) else len(vals)
        if count != len(combos) or not all(isinstance(p, str) for c in combos for p in c):
            # Zipped as they are, values would pair with other cases (a corrupt or hand-edited file).
            _warn_once(f"warning: skipping {name} of {results.commit_hash[:10]}: {count} values stored for "
                       f"{len(combos)} parameter combinations, or parameters that are not text")
            continue
        out[parts[1], parts[2]] = {tuple(p.strip("'") for p in c): v for c, v in zip(combos, vals)
                                   if _num(v) is not None}
    return out


_warned: set[str] = set()


def _warn_once(message: str) -> None:
    if message not in _warned:
        _warned.add(message)
        print(message, file=sys.stderr)


def rows(results, current: dict | None = None) -> list[Row]:
    """One :class:`Row` per (op, case) the fused op has a value for, in the grid's order.

    ``current``: benchmarks.json; results of another version of a benchmark
    than the suite's current one are left out, as asv publish does.
    """
    vals = values(results)
    if current is not None:
        keep = set(results.get_result_keys(current))
        vals = {k: v for k, v in vals.items() if f"add_rmsnorm.{k[0]}.{k[1]}" in keep}
    out = []
    for cls, op in CLASSES.items():
        ratio = vals.get((cls, "track_ratio"), {})
        time, gbps = vals.get((cls, "track_time"), {}), vals.get((cls, "track_gbps"), {})
        cases = [c for (impl, c) in ratio if impl == "fused"] + [c for (c,) in time if ("fused", c) not in ratio]
        for case in sorted(set(cases), key=_order):
            r = ratio.get(("fused", case))
            peers = {p: ratio[p, case] / r for p in PEERS if r and (p, case) in ratio}
            out.append(Row(op, case, time.get((case,)), gbps.get((case,)), r, peers))
    return out


def _order(case: str):
    """Sort key of "<dtype> <tokens>x<hidden>": dtype, then hidden size, then tokens; other names last."""
    try:
        dtype, shape = case.split(" ")
        tokens, hidden = (int(v) for v in shape.split("x"))
    except ValueError:
        return (len(DTYPE_ORDER) + 1, 0, 0, case)
    return (DTYPE_ORDER.index(dtype) if dtype in DTYPE_ORDER else len(DTYPE_ORDER), hidden, tokens, "")


def row_order(row: Row):
    """Sort key of a :class:`Row`: the op's place in ``CLASSES``, then its case (:func:`_order`)."""
    return list(CLASSES.values()).index(row.op), _order(row.case)


def load(path: pathlib.Path):
    from asv.results import Results

    return Results.load(str(path))


def commit_order(hashes: set[str], dates: dict[str, int] | None = None) -> list[str]:
    """``hashes`` in the order of HEAD's history (oldest first).

    Where some are not in it (a shallow clone, another branch's results), all are ordered by ``dates`` (their
    commit dates, as asv stores them), the history's order breaking ties, with a warning: the newest is the one
    a table calls the latest. Without dates those go first, by hash (never as the latest).
    """
    try:
        history = subprocess.run(["git", "rev-list", "--reverse", "HEAD"], cwd=ROOT, capture_output=True,
                                 text=True, check=True).stdout.split()
    except (OSError, subprocess.CalledProcessError):
        history = []
    pos = {c: i for i, c in enumerate(history)}
    unknown = sorted(c for c in hashes if c not in pos)
    if not unknown:
        return sorted(hashes, key=pos.__getitem__)
    print(f"warning: {len(unknown)} of {len(hashes)} commits with results are not in HEAD's history (a shallow "
          f"clone? git fetch --unshallow; results of another branch?), e.g. {unknown[0][:10]}: ordered by "
          + ("commit date" if dates else "hash, before the others"), file=sys.stderr)
    if dates:
        return sorted(hashes, key=lambda c: (_num(dates.get(c)) or 0, pos.get(c, -1), c))
    return unknown + sorted((c for c in hashes if c in pos), key=pos.__getitem__)


def machine_results(results_dir: pathlib.Path, machine: str) -> dict[str, object]:
    """{commit hash: asv Results} of ``machine``, unreadable files skipped (asv warns of them).

    A commit with files of two environments (another Python, say) takes the one run last, with a warning.
    """
    out, paths = {}, {}
    for path in sorted((results_dir / machine).glob("*.json")):
        if path.name == "machine.json":
            continue
        try:
            res = load(path)
        except Exception as e:  # noqa: BLE001 - a corrupt file must not hide the others
            print(f"warning: skipping {path}: {type(e).__name__}: {e}", file=sys.stderr)
            continue
        old = out.get(res.commit_hash)
        if old is not None:
            res = old if _last_run(old) > _last_run(res) else res  # a tie (no start times): the later file name
            print(f"warning: two results files for {res.commit_hash[:10]} ({paths[old.commit_hash].name}, "
                  f"{path.name}): the one asv started last is shown, {res.env_name}", file=sys.stderr)
        out[res.commit_hash], paths[res.commit_hash] = res, path
    return out


def _last_run(res) -> float:
    return max((v for v in res.started_at.values() if _num(v) is not None), default=0)


def current_benchmarks(results_dir: pathlib.Path) -> dict | None:
    """benchmarks.json of ``results_dir`` (the suite's versions); None, with a warning, if unreadable."""
    path = results_dir / "benchmarks.json"
    if not path.exists():
        return None
    try:
        data = json.loads(path.read_text())
        # An object of benchmark objects (and asv's "version"): asv fails on any other entry.
        shape = isinstance(data, dict) and all(isinstance(v, dict) for k, v in data.items() if k != "version")
        why = None if shape else "not a JSON object of benchmarks"
    except (OSError, ValueError, UnicodeDecodeError) as e:
        why = type(e).__name__
    if why:
        print(f"warning: {path} is unreadable ({why}); a run of the suite writes it again", file=sys.stderr)
        return None
    return data


def fmt(v, digits=3) -> str:
    """``digits`` decimals; 3 significant digits below 0.1 (interpreter fractions); none from 100."""
    if v is None:
        return "–"
    if abs(v) >= 100:
        return f"{v:.0f}"
    return f"{v:.3g}" if abs(v) < 0.1 else f"{v:.{digits}f}"


def run_summary(results_dir: pathlib.Path, machine: str, commit: str, interpreter: bool = False) -> str:
    """A short table of ``commit``'s fused op per op: cases, fraction of the floor (worst, median, best);
    ``interpreter``: the results are the interpreter's (said so)."""
    import statistics

    res = machine_results(results_dir, machine).get(commit)
    found = rows(res, current_benchmarks(results_dir)) if res else []
    note = (" -- Triton's interpreter on the CPU: these show the suite ran, not performance"
            if interpreter else "")
    lines = [f"summary of {commit[:10]} on {machine} (fraction of the floor: 1.0 = as fast as the same-bytes "
             f"floor; every value: python tools/table.py, or the site){note}", "",
             "| op | cases | fused µs (median case) | fraction of floor: worst / median / best | worst case |",
             "|---|---|---|---|---|"]
    for op in CLASSES.values():
        mine = [r for r in found if r.op == op and r.fraction]
        if not mine:
            continue
        fr = sorted(mine, key=lambda r: r.fraction)
        us = [r.us for r in mine if r.us is not None]
        lines.append(f"| {op} | {len(mine)} | {fmt(statistics.median(us), 2) if us else '–'} | "
                     f"{fmt(fr[0].fraction)} / {fmt(statistics.median(r.fraction for r in fr))} / "
                     f"{fmt(fr[-1].fraction)} | {fr[0].case} |")
    return "\n".join(lines) if len(lines) > 4 else f"(no results of {commit[:10]} on {machine} to summarize)"


if __name__ == "__main__":
    raise SystemExit("tools/report.py is a module of the tracker's command line: python tools/bench.py --help")

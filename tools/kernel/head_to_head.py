"""Time named forward launch settings head to head on a GPU: all beside the floor in every round.

Without a GPU, TRITON_INTERPRET=1 runs it in Triton's interpreter: wall times
that check the command and the settings, not performance.

    python tools/kernel/head_to_head.py --settings rule,W/16b,W/8b [--op inference] [--dtypes bf16]
                                        [--widths 7168,8192] [--tokens 1,64,132] [--rounds 12] [--json FILE]

Where a sweep (``tune_forward.py``: every candidate, 3 rounds each) leaves two
settings within a few percent, this times the few that matter in one process,
in ``--rounds`` rounds, each setting right after the floor and the order
rotating every round (``benchmarks._measure.interleaved_rounds``); a setting's
fraction of the floor is the upper median over rounds of floor time / its time.
Ops, inputs, check and timing as ``tune_forward.py``'s (decode token counts
replayed in CUDA graphs, prefill L2-flushed single calls). The head-to-head
files in docs/sweeps have this format (those of 2026-12-04 replayed CUDA graphs
at every row count).

Settings (``--settings``, comma-separated): ``rule`` (the rule's launch),
``W/<warps><f|b|a>`` (one whole row a program, the weight loaded first, before
the row sums or after them), ``S<rows>x<columns>/<warps><f|b|a>`` (a tile of
rows by columns, rows split over as many programs as cover them) and
``P<warps>x<programs per SM>`` (the persistent path, the many-rows tile).
A setting that gives another's launch is timed once, under the first name.
``copy:<setting>`` (``copy:rule``, ``copy:W/8f``) times that launch's copy
kernel (``copy_bound.py``: the same grid and bytes without the row sum, not
checked, wrong by design): what the launch can reach at all. Its configs entry
reads ``copy of ForwardConfig(...)``, and "of the best" compares with the best
launch of the op: a case needs one launch of the op beside its copies.

``--json``: one row per case (case, configs, fraction, raw seconds, the
settings that failed as errors, and the run: settings, rounds, mode),
rewritten after each case. Cases already in the file are skipped, so a
cut-off run resumes where it stopped; a case there measured by another run
is refused. Exit status 1 where a case or a setting failed.
"""

import argparse
import dataclasses
import functools
import itertools
import json
import pathlib
import re
import statistics
import sys

import triton

from _sweep import (allocated, count_type, counts, dtype_names, exit_status, interrupted, json_path, names,
                    need_device, write_json)  # also puts the repository on sys.path
from copy_bound import COPY_OF, copy_rows  # noqa: E402
from benchmarks._measure import INTERPRET, interleaved_rounds, warm_up  # noqa: E402
from fusedkernel.kernels import launch  # noqa: E402
from fusedkernel.kernels.config import ForwardConfig, settings_for  # noqa: E402
from tune_forward import Case  # noqa: E402

LOADS = {"f": "first", "b": "before_sum", "a": "after_sum"}
COPY = "copy:"  # a setting's copy kernel (copy_bound.py)
# Counts in ASCII digits without a leading zero: "S2x0/4f" divided by zero, "W/08f" was W/8f a second time.
COUNT = "([1-9][0-9]*)"
SETTING = re.compile(rf"W/{COUNT}([fba])|S{COUNT}x{COUNT}/{COUNT}([fba])|P{COUNT}x{COUNT}")


def setting(label: str, n: int) -> ForwardConfig:
    """The launch ``label`` (not ``rule``: ``Case.rule``) names for rows of ``n`` elements; ValueError for an
    unknown or invalid one."""
    if label == "rule":
        raise ValueError("the rule's launch follows from the case's tensors: Case.rule")
    m = SETTING.fullmatch(label)
    if not m:
        raise ValueError(f"--settings: {label!r} is not rule, W/<warps><f|b|a>, S<rows>x<columns>/<warps><f|b|a> "
                         f"or P<warps>x<programs per SM>")
    whole = triton.next_power_of_2(n)
    if m[1]:
        return ForwardConfig("rows", 1, whole, 1, int(m[1]), LOADS[m[2]])
    if m[3]:
        cols = int(m[4])
        return ForwardConfig("rows", int(m[3]), cols, -(-n // cols), int(m[5]), LOADS[m[6]])
    rows = max(1, settings_for(None).forward.narrow_tile_elems // whole)
    return ForwardConfig("persistent", rows, whole, 1, int(m[7]), "first", int(m[8]))


def labels(text: str) -> list[str]:
    """argparse type of ``--settings``: known forms, none twice (checked again per case by ForwardConfig)."""
    try:
        out = names(text, "--settings")
        for label in out:
            label = label.removeprefix(COPY)
            if label != "rule":  # the rule's launch is the op's for the case's tensors: per case
                setting(label, 4096)
        if all(label.startswith(COPY) for label in out):
            raise ValueError("--settings: a copy is timed beside a launch of the op; name one (rule, W/8f, ...)")
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e))
    return out


def finished(path: str | None, run: dict, planned: set[str]) -> list[dict]:
    """The rows already in ``path`` (none if it does not exist); SystemExit for a file that is not a row list, or
    that holds a ``planned`` case measured by another ``run`` (settings, rounds and mode)."""
    if not path or not pathlib.Path(path).exists():
        return []
    try:
        rows = json.loads(pathlib.Path(path).read_text())
        if not isinstance(rows, list) or not all(
                isinstance(r, dict) and isinstance(r.get("case"), str)
                and all(isinstance(r.get(k), dict) for k in ("configs", "fraction", "raw")) for r in rows):
            raise ValueError("not a list of head-to-head rows: case, configs, fraction, raw")
    except ValueError as e:  # json.JSONDecodeError is one
        sys.exit(f"--json: {path} holds no head-to-head rows ({e}); move it away or name another file")
    for r in rows:
        if r["case"] in planned and r.get("run") != run:
            sys.exit(f"--json: {path} holds {r['case']} measured by another run ({r.get('run', 'not recorded')}; "
                     f"this one: {run}): repeat that run's options, or name another file")
    return rows


def measure(case: Case, chosen: list[str], rounds: int) -> dict | None:
    """Check each setting, then time those that pass, and the copies, head to head; the case's row (None if no
    launch of the op passed, or the timing failed). The settings that failed are in its ``errors``."""
    configs, ops, errors = {}, {}, {}
    for label in chosen:
        copy = label.startswith(COPY)
        name = label.removeprefix(COPY)
        try:
            cfg = case.rule() if name == "rule" else setting(name, case.n)
            if copy and cfg.path == "rows" and cfg.weight_load == "after_sum":  # no sums: one load with before
                cfg = dataclasses.replace(cfg, weight_load="before_sum")
            if (copy, cfg) in configs.values():
                continue
            if copy:  # wrong by design: run once, its launch and arguments checked, its result not
                op = functools.partial(copy_rows, case.x, case.r, case.w, case.y, case.res, cfg)
                op()
            else:
                case.check(cfg)
                op = functools.partial(case.run, cfg)
        except Exception as e:  # noqa: BLE001 - report the setting and go on
            errors[label] = f"{type(e).__name__}: {e}"
            print(f"| {case.label} | {label} | error: {errors[label]} | | | | |", flush=True)
            continue
        configs[label], ops[label] = (copy, cfg), op
    if not any(not copy for copy, _ in configs.values()):
        return None
    try:  # a launch can fail where its check did not (CUDA-graph capture): the case is not finished
        warm_up(case.floor, 1.0)
        for op in ops.values():
            warm_up(op, 0.05)
        raw = interleaved_rounds(ops, case.floor, case.timer(), rounds)
    except Exception as e:  # noqa: BLE001 - report the case and go on
        print(f"| {case.label} | (timing) | error: {type(e).__name__}: {e} | | | | |", flush=True)
        return None
    # The upper median: the statistic of the head-to-head files in docs/sweeps (12 rounds: the 7th of 12).
    fraction = {label: statistics.median_high(f / o for o, f in zip(*raw[label])) for label in raw}
    best = max(fraction[label] for label, (copy, _) in configs.items() if not copy)
    shown = {label: (COPY_OF if copy else "") + repr(cfg) for label, (copy, cfg) in configs.items()}
    for label, (op_s, floor_s) in raw.items():
        print(f"| {case.label} | {label} | {shown[label]} | {statistics.median(op_s) * 1e6:.2f} | "
              f"{statistics.median(floor_s) * 1e6:.2f} | {fraction[label]:.3f} | {fraction[label] / best:.3f} |",
              flush=True)
    return {"case": case.label, "configs": shown,
            "fraction": {k: float(f"{v:.5g}") for k, v in fraction.items()},
            "raw": {k: [[float(f"{t:.5g}") for t in times] for times in raw[k]] for k in raw},
            **({"errors": errors} if errors else {})}


class _Help(argparse.RawDescriptionHelpFormatter, argparse.ArgumentDefaultsHelpFormatter):
    pass


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=_Help)
    ap.add_argument("--settings", type=labels, required=True, help="comma-separated setting names (above)")
    ap.add_argument("--op", choices=["forward", "inference", "forward+residual"], default="inference",
                    help="the suite's op and its floor")
    ap.add_argument("--dtypes", default="bf16", help="comma-separated, of bf16, fp16, fp32")
    ap.add_argument("--widths", default="4096", help="comma-separated hidden sizes")
    ap.add_argument("--tokens", default="1", help="comma-separated row counts")
    ap.add_argument("--rounds", type=count_type(), default=12, help="rounds, each setting right after the floor")
    ap.add_argument("--json", type=json_path, help="write the rows to this file as well (and resume from it)")
    a = ap.parse_args(argv)
    need_device(ap)
    try:
        dtypes = dtype_names(a.dtypes)
        widths, tokens = counts(a.widths, "--widths"), counts(a.tokens, "--tokens")
    except ValueError as e:
        ap.error(str(e))
    if INTERPRET:
        print("TRITON_INTERPRET=1: wall times in Triton's interpreter, not performance", file=sys.stderr)
    plan = [(dname, n, count, f"{dname} {count}x{n} {a.op}")
            for dname, n, count in itertools.product(dtypes, widths, tokens)]
    # What a resumed file's rows must share with this run: a case measured otherwise is not this run's.
    run = {"settings": a.settings, "rounds": a.rounds, "mode": "interpreter" if INTERPRET else "gpu"}
    rows, failed = finished(a.json, run, {label for *_, label in plan}), []
    done = {r["case"] for r in rows}
    print("| case | setting | config | µs | floor µs | fraction of floor | of the best |\n|---|---|---|---|---|---|---|",
          flush=True)
    try:
        for dname, n, count, label in plan:
            if label in done:
                continue
            case = allocated(lambda: Case(a.op, dname, n, count), label, columns=7)
            row = measure(case, a.settings, a.rounds) if case else None
            failed += [label] if row is None else [f"{label} {setting}" for setting in row.get("errors", ())]
            if row:
                rows.append({**row, "run": run})
                if a.json:
                    write_json(a.json, rows)
    except KeyboardInterrupt:
        return interrupted(len(rows), a.json)
    return exit_status(failed)


if __name__ == "__main__":
    sys.exit(main())

"""What both tuners share: the GPU inputs, the timing (the suite's own) and the printed table.

Every candidate is checked against a float64 reference first; then it is
timed with ``benchmarks/_measure.interleaved_medians`` (by default single-call
device time, L2 flushed; interleaved with the floor in 3 rounds) and reported
as a fraction of the floor (floor time / op time; 1.0 = as fast as the floor).
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import sys

import torch

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2]))
from benchmarks._measure import interleaved_medians, warm_up  # noqa: E402

DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}


def rows_for(n: int, mib: int) -> int:
    """Rows so that one (rows, n) bf16 tensor holds ``mib`` MiB (at least 128)."""
    return max(128, (mib << 20) // (2 * n))


def sweep(label: str, candidates: list, run, check, floor, timer=None) -> list[dict]:
    """Check, time and print each candidate (the first is the rule's); then the best. Returns the rows.

    ``run(cfg)`` launches once with ``cfg``; ``check(cfg)`` raises when its
    result is wrong; ``floor()`` is the same-bytes reference; ``timer`` one of
    ``benchmarks._measure.TIMERS`` (default: L2 flushed).
    """
    best, first, rows = None, True, []
    for i, cfg in enumerate(candidates):
        try:
            check(cfg)
        except Exception as e:  # noqa: BLE001 - report the candidate and go on
            print(f"| {label} | {cfg} | error: {type(e).__name__}: {e} | | |", flush=True)
            continue
        op = lambda: run(cfg)  # noqa: E731
        warm_up(op, 1.0 if first else 0.05)
        first = False
        op_s, floor_s = interleaved_medians(op, floor, timer=timer)
        mark = " (rule)" if i == 0 else ""
        print(f"| {label} | {cfg}{mark} | {op_s * 1e6:.1f} | {floor_s * 1e6:.1f} | {floor_s / op_s:.3f} |",
              flush=True)
        rows.append({"case": label, "config": repr(cfg), "rule": i == 0, "us": op_s * 1e6, "floor_us": floor_s * 1e6,
                     "fraction": floor_s / op_s})
        if best is None or floor_s / op_s > best[0]:
            best = (floor_s / op_s, cfg, op_s)
    if best:
        print(f"BEST {label}: {best[1]} fraction {best[0]:.3f} ({best[2] * 1e6:.1f} µs)", flush=True)
    else:
        print(f"NONE {label}: every candidate failed its check", flush=True)
    return rows


def allocated(make, label: str):
    """``make()`` (a case's GPU tensors), or None, reported, where they do not fit in GPU memory.

    A width too wide for the GPU fails its own case; the cases after it still run.
    """
    try:
        return make()
    except torch.OutOfMemoryError as e:
        print(f"| {label} | out of GPU memory: {str(e).splitlines()[0]} | | |", flush=True)
        return None


def exit_status(failed: list[str]) -> int:
    """0, or 1 with the cases (labels) that measured nothing named on stderr."""
    if failed:
        print(f"nothing measured in {len(failed)} case{'s' * (len(failed) > 1)} (no candidate passed its check, or "
              f"out of GPU memory: the rows above): {', '.join(failed)}", file=sys.stderr)
    return 1 if failed else 0


def names(text: str, what: str) -> list[str]:
    """The comma-separated entries of the ``what`` option, stripped; ValueError for an empty one or one given
    twice."""
    out = [v.strip() for v in text.split(",")]
    if "" in out:
        raise ValueError(f"{what}: an empty entry in {text!r}")
    _once(out, what)
    return out


def _once(values: list, what: str) -> None:
    dup = sorted({v for v in values if values.count(v) > 1})
    if dup:
        raise ValueError(f"{what}: {dup} given more than once")


def counts(text: str, option: str) -> list[int]:
    """The positive integers of a comma-separated ``option``, each once; ValueError naming it otherwise."""
    entries = names(text, option)
    # ASCII digits only: int() also reads "+64", "٦٤" and "6_4".
    if not all(v.isascii() and v.isdigit() for v in entries):
        raise ValueError(f"{option} takes positive integers, got {text!r}")
    out = [int(v) for v in entries]
    _once(out, option)  # "64,064" is one width twice
    if min(out) < 1:
        raise ValueError(f"{option} takes positive integers, got {text!r}")
    return out


def dtype_names(text: str) -> list[str]:
    """The ``--dtypes`` entries, each a key of :data:`DTYPES`; ValueError naming the others."""
    out = names(text, "--dtypes")
    if set(out) - set(DTYPES):
        raise ValueError(f"--dtypes: {sorted(set(out) - set(DTYPES))} not among {', '.join(DTYPES)}")
    return out


def json_path(text: str) -> str:
    """argparse type of a ``--json`` FILE: checked before anything is measured."""
    path = pathlib.Path(text)
    if not text:
        raise argparse.ArgumentTypeError("an empty path")
    if path.is_dir():
        raise argparse.ArgumentTypeError(f"{text} is a directory, not a file")
    if not path.parent.is_dir():
        raise argparse.ArgumentTypeError(f"{path.parent} is not an existing directory")
    # Try it: os.access says yes to root, and /proc or a read-only mount would
    # only fail after the first case's sweep.
    probe = pathlib.Path(f"{path}.tmp")
    try:
        probe.write_text("")
        probe.unlink()
    except OSError as e:
        raise argparse.ArgumentTypeError(f"{path.parent} is not writable ({e.strerror})")
    return text


def write_json(path: str, rows) -> None:
    """Write ``rows`` to ``path`` atomically (a sweep stopped midway keeps what it measured)."""
    tmp = f"{path}.tmp"
    with open(tmp, "w") as f:
        json.dump(rows, f, indent=1)
    os.replace(tmp, path)


def header() -> None:
    print("| case | config | µs | floor µs | fraction of floor |\n|---|---|---|---|---|", flush=True)

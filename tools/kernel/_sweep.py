"""What the kernel tools share: options, the timing (the suite's own), the printed table and ``--json``.

Every candidate is checked against a float64 reference first; then it is
timed with ``benchmarks/_measure.interleaved_medians`` (by default single-call
device time, L2 flushed; interleaved with the floor in 3 rounds) and reported
as a fraction of the floor (floor time / op time; 1.0 = as fast as the floor).
A candidate that fails its check or its timing, and a case whose tensors
cannot be allocated, is a row of its own and the sweep goes on (exit status
1). ``--json`` is rewritten atomically after each case.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import secrets
import sys
import tempfile

import torch

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2]))
from benchmarks._measure import INTERPRET, interleaved_medians, warm_up  # noqa: E402

DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}
MAX_COUNT = 2**31 - 1  # rows, widths, rounds: the kernels take row and column counts as 32-bit ints


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
        op = lambda: run(cfg)  # noqa: E731
        try:
            check(cfg)
            # Timed inside the try too: a launch can fail where its check did not (CUDA-graph capture).
            warm_up(op, 1.0 if first else 0.05)
            first = False
            op_s, floor_s = interleaved_medians(op, floor, timer=timer)
        except Exception as e:  # noqa: BLE001 - report the candidate and go on
            print(f"| {label} | {cfg} | error: {type(e).__name__}: {e} | | |", flush=True)
            continue
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


def allocated(make, label: str, columns: int = 5):
    """``make()`` (a case's tensors), or None, reported as a row of ``columns`` cells, where they cannot be allocated.

    Out of GPU memory, or a size no allocator takes: that case fails alone and the cases after it still run.
    """
    try:
        return make()
    except (torch.OutOfMemoryError, RuntimeError) as e:  # RuntimeError: a CPU allocation or a size overflow
        why = "out of GPU memory" if isinstance(e, torch.OutOfMemoryError) else "tensors not allocated"
        print(f"| {label} | {why}: {str(e).splitlines()[0]} |" + " |" * (columns - 2), flush=True)
        return None


def need_device(ap: argparse.ArgumentParser) -> None:
    """A usage error where the tool can run nothing: no GPU and no ``TRITON_INTERPRET=1``."""
    if not INTERPRET and not torch.cuda.is_available():
        ap.error("no GPU here: run it on one, or set TRITON_INTERPRET=1 to check the command in Triton's interpreter")


def interrupted(finished: int, path: str | None) -> int:
    """Ctrl-C's report: how many finished cases were kept, and where; the exit status 130."""
    print(f"interrupted: {finished} finished cases kept" + (f" in {path}" if path else ""), file=sys.stderr)
    return 130


def exit_status(failed: list[str]) -> int:
    """0, or 1 with what failed (cases, or a case's settings; labels) named on stderr."""
    if failed:
        print(f"{len(failed)} failed (the rows above: no candidate passed its check, a setting failed, or the case's "
              f"tensors were not allocated): {', '.join(failed)}", file=sys.stderr)
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
    if min(out) < 1 or max(out) > MAX_COUNT:
        raise ValueError(f"{option} takes integers from 1 to {MAX_COUNT}, got {text!r}")
    return out


def count_type(least: int = 1):
    """argparse type of a one-count option: ASCII digits, ``least`` to MAX_COUNT."""
    def count(text: str) -> int:
        if not (text.isascii() and text.isdigit() and least <= int(text) <= MAX_COUNT):
            raise argparse.ArgumentTypeError(f"an integer from {least} to {MAX_COUNT}, got {text!r}")
        return int(text)

    return count


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
    if text.endswith(("/", os.sep)) or path.is_dir():
        raise argparse.ArgumentTypeError(f"{text} is a directory, not a file")
    if path.exists() and not path.is_file():
        raise argparse.ArgumentTypeError(f"{text} is not a regular file (a device, a FIFO, ...)")
    if not path.parent.is_dir():
        raise argparse.ArgumentTypeError(f"{path.parent} is not an existing directory")
    # Try it: os.access says yes to root, and /proc or a read-only mount would
    # only fail after the first case's sweep.
    try:
        with tempfile.NamedTemporaryFile(dir=path.resolve().parent, prefix=f".{path.name}."):
            pass
    except OSError as e:
        raise argparse.ArgumentTypeError(f"{path.parent} is not writable ({e.strerror})")
    return text


def new_json_path(text: str) -> str:
    """:func:`json_path` for a tool that writes its file whole, not resuming it: the file must not exist yet."""
    json_path(text)
    if pathlib.Path(text).exists():
        raise argparse.ArgumentTypeError(f"{text} exists: this tool does not resume a file (head_to_head.py "
                                         "does); name another, or move it away")
    return text


def write_json(path: str, rows) -> None:
    """Write ``rows`` to ``path`` atomically (a sweep stopped midway keeps what it measured).

    Through a symlink to its target; a temporary file of a name of its own, so no file is overwritten but ``path``.
    """
    target = os.path.realpath(path)
    # Created exclusively under a random name (the umask's permissions, unlike mkstemp's private file).
    tmp = os.path.join(os.path.dirname(target), f".{os.path.basename(target)}.{secrets.token_hex(6)}.tmp")
    f = open(tmp, "x")
    try:
        with f:
            json.dump(rows, f, indent=1)
        os.replace(tmp, target)
    except BaseException:
        os.unlink(tmp)
        raise


def header() -> None:
    print("| case | config | µs | floor µs | fraction of floor |\n|---|---|---|---|---|", flush=True)

"""How far the decode ratio drifts with the GPU's state, for each candidate reference.

    python tools/reference_drift.py [--cases 1x4096,8x7168] [--processes 6] [--repeats 4] [--json FILE]

The flagged decode metric is the fused op's time over a reference's, measured
interleaved in one process. On the H200 both times move with a state of the
GPU that changes between processes and within one over seconds (the op by up
to ~10%, ``torch.addcmul`` by ~4%), so their ratio moves too. This measures
which reference moves with the op. Each of ``--processes`` fresh processes
measures, per case (bf16, the inference call, inputs rotating over 8 copies
as in the suite), ``--repeats`` times 3 interleaved rounds (the suite's
``interleaved_rounds`` and decode timer) of the op and of each reference:

* ``addcmul``: the suite's floor, ``torch.addcmul(x, residual, z, out=y)``;
* ``copy``: a Triton kernel moving the same 4 row-trips with one program per
  row at the op's warps (reads x, residual and z, writes y);
* ``row``: ``copy`` whose store waits for a sum over the row: the dependency
  structure every row norm has, with nothing else;
* ``row_inplace``: ``row`` with the inference call's traffic: reads x and
  residual, writes the residual in place and y;
* ``twin``: the op itself on inputs of its own: what the best reference
  could cancel (the ratio of two identical calls);
* ``clone``: the op's kernel launched as the op launches it, but through a
  second JIT function of the same source (the same binary, loaded apart):
  does a state tied to the loaded kernel, not its code, move the op?
* ``pinned``: the op at decode written plainly (one program per row, the
  weight loaded first, the residual updated in place, rstd, y) at the op's
  warps: a reference the suite could keep frozen while the op changes.

``clone`` and ``pinned`` run only where the op holds a whole row in one
program (on the H200 up to 32768 wide); wider cases measure the others.

Each repeat also records the SM clock from a spin of known cycles. It prints,
per reference, the ratio's median per process and its spread (max / min - 1)
over process medians and over all repeats. ``--json`` keeps every repeat,
written after each process (a stopped run keeps the finished ones). Without a
GPU, wall times in Triton's interpreter (checks the tool, not the GPU).
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import re
import signal
import statistics
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(1, str(ROOT / "tools" / "kernel"))
from _sweep import json_path, names, write_json  # noqa: E402

REFERENCES = ["addcmul", "copy", "row", "row_inplace", "twin", "clone", "pinned"]
COPIES = 8
SPIN_CYCLES = 400_000
MAX_HIDDEN = 1 << 20  # the references hold a row in one Triton block, of at most 2**20 elements
_CASE = re.compile(r"([1-9][0-9]*)x([1-9][0-9]*)")


def parse_case(case: str) -> tuple[int, int]:
    """(tokens, hidden) of ``"<tokens>x<hidden>"``; ValueError naming the case otherwise."""
    m = _CASE.fullmatch(case)
    if m is None:
        raise ValueError(f"a case is '<tokens>x<hidden>', whole numbers >= 1 without leading zeros, got {case!r}")
    tokens, hidden = int(m[1]), int(m[2])
    if hidden > MAX_HIDDEN:
        raise ValueError(f"a case's hidden size is at most {MAX_HIDDEN} here (a reference holds a row in one "
                         f"block), got {case!r}")
    return tokens, hidden


def _kernel():
    import triton
    import triton.language as tl

    @triton.jit
    def reference(x, r, z, y, n, BLOCK: tl.constexpr, REDUCE: tl.constexpr, INPLACE: tl.constexpr):
        row = tl.program_id(0).to(tl.int64)
        cols = tl.arange(0, BLOCK)
        m = cols < n
        a = tl.load(x + row * n + cols, mask=m).to(tl.float32)
        b = tl.load(r + row * n + cols, mask=m).to(tl.float32)
        if INPLACE:
            t = a + b
            tl.store(r + row * n + cols, t.to(r.dtype.element_ty), mask=m)
        else:
            t = a + b * tl.load(z + row * n + cols, mask=m).to(tl.float32)
        if REDUCE:
            t = t * tl.sum(a * a, axis=0)
        tl.store(y + row * n + cols, t.to(y.dtype.element_ty), mask=m)

    @triton.jit
    def pinned(x, r, w, y, n, eps, BLOCK: tl.constexpr):
        row = tl.program_id(0).to(tl.int64)
        cols = tl.arange(0, BLOCK)
        m = cols < n
        wv = tl.load(w + cols, mask=m, other=0.0)
        t = tl.load(x + row * n + cols, mask=m, other=0.0).to(tl.float32) + \
            tl.load(r + row * n + cols, mask=m, other=0.0).to(tl.float32)
        tl.store(r + row * n + cols, t.to(r.dtype.element_ty), mask=m)
        rstd = tl.rsqrt(tl.sum(t * t, axis=0) / n + eps)
        tl.store(y + row * n + cols, (t * rstd * wv.to(tl.float32)).to(y.dtype.element_ty), mask=m)

    return reference, pinned


def _sm_mhz() -> float | None:
    import torch

    if not torch.cuda.is_available():
        return None
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    torch.cuda._sleep(SPIN_CYCLES)
    end.record()
    torch.cuda.synchronize()
    return SPIN_CYCLES / (start.elapsed_time(end) * 1e3)


def measure_process(cases: list[str], repeats: int) -> dict:
    """{"cases": {case: [repeat: {"mhz", "us": {impl: µs}, "ratio": {reference: op/reference}}]},
    "failed": {case: message}} of this process; a failing case costs only itself."""
    out = {"cases": {}, "failed": {}}
    for case in cases:
        try:
            out["cases"][case] = _measure_case(case, repeats)
        except Exception as e:  # noqa: BLE001 - one failing case must not cost the others
            out["failed"][case] = f"{type(e).__name__}: {e}"
    return out


def _measure_case(case: str, repeats: int) -> list[dict]:
    """The repeats of one case (see :func:`measure_process`)."""
    import torch
    import triton

    from benchmarks._cases import _rotating
    from benchmarks._measure import DEVICE, INTERPRET, TIMERS, interleaved_rounds, method, warm_up
    from fusedkernel import add_rmsnorm
    from fusedkernel.kernels import forward, launch
    from fusedkernel.kernels.forward_rule import forward_config

    kernel, pinned = _kernel()
    clone = triton.jit(do_not_specialize=["n_rows", "epoch"])(forward._rows_kernel.fn)
    index = torch.cuda.current_device() if DEVICE == "cuda" else -1
    tokens, hidden = parse_case(case)
    # The op's warps for this case, as its launch chooses them.
    splits = launch._max_splits(index)
    cfg = forward_config(hidden, 2, splits, launch._settings(index), tokens)
    # clone and pinned launch one whole row per program: only where the op does.
    refs = [r for r in REFERENCES if cfg.path == "rows" and cfg.splits == 1 or r not in ("clone", "pinned")]
    warps = cfg.num_warps
    block = triton.next_power_of_2(hidden)
    vec = launch._vector_width(2, hidden)
    fns = {k: [] for k in ["op", *refs]}
    def tensors():
        x, r, z, y = (torch.randn(tokens, hidden, device=DEVICE, dtype=torch.bfloat16) for _ in range(4))
        x.mul_(1e-3)  # thousands of in-place residual updates stay far from bf16's range
        return x, r, z, y, torch.randn(hidden, device=DEVICE, dtype=torch.bfloat16)

    for _ in range(COPIES):
        x, r, z, y, w = tensors()
        fns["op"].append(lambda x=x, r=r, w=w: add_rmsnorm(x, r, w, inplace_residual=True))
        fns["addcmul"].append(lambda x=x, r=r, z=z, y=y: torch.addcmul(x, r, z, out=y))
        for name, reduce, inplace in (("copy", False, False), ("row", True, False), ("row_inplace", True, True)):
            fns[name].append(lambda x=x, r=r, z=z, y=y, reduce=reduce, inplace=inplace: kernel[(tokens,)](
                x, r, z, y, hidden, BLOCK=block, REDUCE=reduce, INPLACE=inplace, num_warps=warps))
        x, r, _, _, w = tensors()
        fns["twin"].append(lambda x=x, r=r, w=w: add_rmsnorm(x, r, w, inplace_residual=True))
        if "clone" not in fns:
            continue
        x, r, _, y, w = tensors()
        fns["clone"].append(lambda x=x, r=r, w=w, y=y: clone[(-(-tokens // cfg.block_m),)](
            x, r, w, y, r, None, None, tokens, hidden, hidden, hidden, hidden, hidden, 1e-6, 0, cfg.block_m,
            cfg.block_n, 1, 1, cfg.weight_at, True, False, vec, num_warps=warps))
        x, r, _, y, w = tensors()
        fns["pinned"].append(lambda x=x, r=r, w=w, y=y: pinned[(tokens,)](x, r, w, y, hidden, 1e-6, BLOCK=block,
                                                                          num_warps=warps))
    fns = {k: _rotating(v) for k, v in fns.items()}
    for fn in fns.values():
        warm_up(fn, 0.01 if INTERPRET else 0.2)
    timer = TIMERS[method(tokens)]
    rows = []
    for _ in range(repeats):
        # Every reference and the op, each beside addcmul: op/ref per round = (op/add) / (ref/add).
        rounds = interleaved_rounds({k: v for k, v in fns.items() if k != "addcmul"}, fns["addcmul"], timer, 3)
        op, add_op = rounds["op"]
        per_round = {"addcmul": [o / a for o, a in zip(op, add_op)]}
        for name in refs[1:]:
            ref, add_ref = rounds[name]
            per_round[name] = [(o / a) / (f / b) for o, a, f, b in zip(op, add_op, ref, add_ref)]
        us = {k: statistics.median(v[0]) * 1e6 for k, v in rounds.items()}
        us["addcmul"] = statistics.median([t for v in rounds.values() for t in v[1]]) * 1e6
        rows.append({"mhz": _sm_mhz(), "us": us, "ratio": {k: statistics.median(v) for k, v in per_round.items()}})
    return rows


def spread(values: list[float]) -> float | None:
    """max / min - 1; None for fewer than two values."""
    return max(values) / min(values) - 1 if len(values) > 1 else None


def summary(processes: list[dict], cases: list[str]) -> list[dict]:
    """Per case and reference: the ratio's median per process and the spreads (see the module docstring)."""
    out = []
    for case in cases:
        per_process = [p["cases"][case] for p in processes if p["cases"].get(case)]
        for ref in per_process[0][0]["ratio"] if per_process else []:
            per = [[r["ratio"][ref] for r in rows] for rows in per_process]
            medians = [statistics.median(v) for v in per]
            out.append({"case": case, "reference": ref, "process_medians": medians,
                        "spread_processes": spread(medians), "spread_repeats": spread([x for v in per for x in v])})
    return out


def table(processes: list[dict], cases: list[str]) -> str:
    """The summary as markdown, and each failed case."""
    pct = lambda v: "n/a" if v is None else f"{v:.2%}"  # noqa: E731
    out = ["| case | reference | ratio per process | spread over processes | over repeats |", "|---|---|---|---|---|"]
    out += [f"| {s['case']} | {s['reference']} | {' '.join(f'{m:.3f}' for m in s['process_medians'])} | "
            f"{pct(s['spread_processes'])} | {pct(s['spread_repeats'])} |" for s in summary(processes, cases)]
    out += [f"process {k + 1}: {case} failed: {why}" for k, p in enumerate(processes)
            for case, why in p.get("failed", {}).items()]
    return "\n".join(out)


class _Stop(Exception):
    """SIGTERM or SIGHUP: stop the child, keep what finished."""


def _stop(signum, _frame):
    raise _Stop(signal.Signals(signum).name)


def _child(a) -> dict:
    """Run one measuring process; its result, or RuntimeError saying how it ended."""
    proc = subprocess.Popen([sys.executable, __file__, "--child", "--cases", a.cases, "--repeats", str(a.repeats)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        out, err = proc.communicate()
    finally:
        if proc.poll() is None:  # interrupted: the child must not go on loading the GPU
            proc.kill()
            proc.wait()
    if proc.returncode:
        how = (f"killed by {signal.Signals(-proc.returncode).name}" if proc.returncode < 0
               else f"exit status {proc.returncode}")
        raise RuntimeError(f"{how}{' (out of memory?)' if proc.returncode == -9 else ''}\n{err[-2000:]}")
    return json.loads(out.strip().splitlines()[-1])


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cases", default="1x4096,8x7168")
    ap.add_argument("--processes", type=int, default=6)
    ap.add_argument("--repeats", type=int, default=4)
    ap.add_argument("--json", type=json_path, help="write every process's repeats and the summary here")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    try:
        cases = names(a.cases, "--cases")
        for c in cases:
            parse_case(c)
        for name in ("processes", "repeats"):
            if getattr(a, name) < 1:
                raise ValueError(f"--{name} must be at least 1, got {getattr(a, name)}")
    except ValueError as e:
        ap.error(str(e))
    if a.child:
        print(json.dumps({"pid": os.getpid(), **measure_process(cases, a.repeats)}))
        return 0
    processes, status = [], 0
    old = {s: signal.signal(s, _stop) for s in (signal.SIGTERM, signal.SIGHUP)}
    try:
        for _ in range(a.processes):
            # A fresh process each: the state that moves the ratio is held per process (and drifts within one).
            processes.append(_child(a))
            if a.json:
                write_json(a.json, {"cases": cases, "processes": processes, "summary": summary(processes, cases)})
    except RuntimeError as e:
        print(f"process {len(processes) + 1} failed: {e}", file=sys.stderr)
        status = 1
    except (KeyboardInterrupt, _Stop) as e:
        print(f"stopped by {e if isinstance(e, _Stop) else 'Ctrl-C'} during process {len(processes) + 1}",
              file=sys.stderr)
        status = 130
    finally:
        for s, h in old.items():
            signal.signal(s, h)
    print(table(processes, cases))
    if processes and a.json:
        print(f"{len(processes)} processes in {a.json}", file=sys.stderr)
    return status or (1 if any(p.get("failed") for p in processes) else 0)


if __name__ == "__main__":
    sys.exit(main())

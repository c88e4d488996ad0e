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
  row at the op's warps;
* ``row``: ``copy`` whose store waits for a sum over the row: the dependency
  structure every row norm has, with nothing else.

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
import statistics
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
REFERENCES = ["addcmul", "copy", "row"]
COPIES = 8
SPIN_CYCLES = 400_000


def parse_case(case: str) -> tuple[int, int]:
    """(tokens, hidden) of ``"<tokens>x<hidden>"``; ValueError naming the case otherwise."""
    try:
        tokens, hidden = (int(v) for v in case.split("x"))
    except ValueError:
        raise ValueError(f"a case is '<tokens>x<hidden>', got {case!r}") from None
    if tokens < 1 or hidden < 1:
        raise ValueError(f"a case has at least 1 token and 1 column, got {case!r}")
    return tokens, hidden


def _kernel():
    import triton
    import triton.language as tl

    @triton.jit
    def reference(x, r, z, y, n, BLOCK: tl.constexpr, REDUCE: tl.constexpr):
        row = tl.program_id(0).to(tl.int64)
        cols = tl.arange(0, BLOCK)
        m = cols < n
        a = tl.load(x + row * n + cols, mask=m).to(tl.float32)
        b = tl.load(r + row * n + cols, mask=m).to(tl.float32)
        c = tl.load(z + row * n + cols, mask=m).to(tl.float32)
        t = a + b * c
        if REDUCE:
            t = t * tl.sum(a * a, axis=0)
        tl.store(y + row * n + cols, t.to(y.dtype.element_ty), mask=m)

    return reference


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
    """{case: [repeat: {"mhz", "us": {impl: µs}, "ratio": {reference: op/reference}}]} in this process."""
    import torch
    import triton

    from benchmarks._cases import _rotating
    from benchmarks._measure import DEVICE, INTERPRET, TIMERS, interleaved_rounds, method, warm_up
    from fusedkernel import add_rmsnorm
    from fusedkernel.kernels import launch
    from fusedkernel.kernels.config import forward_config

    kernel = _kernel()
    index = torch.cuda.current_device() if DEVICE == "cuda" else -1
    out = {}
    for case in cases:
        tokens, hidden = parse_case(case)
        # The op's warps for this case, as its launch chooses them.
        splits = launch._max_splits(index)
        warps = forward_config(hidden, 2, splits, launch._settings(index), tokens <= splits).num_warps
        block = triton.next_power_of_2(hidden)
        fns = {k: [] for k in ["op", *REFERENCES]}
        for _ in range(COPIES):
            x, r, z, y = (torch.randn(tokens, hidden, device=DEVICE, dtype=torch.bfloat16) for _ in range(4))
            w = torch.randn(hidden, device=DEVICE, dtype=torch.bfloat16)
            x.mul_(1e-3)  # thousands of in-place residual updates stay far from bf16's range
            fns["op"].append(lambda x=x, r=r, w=w: add_rmsnorm(x, r, w, inplace_residual=True))
            fns["addcmul"].append(lambda x=x, r=r, z=z, y=y: torch.addcmul(x, r, z, out=y))
            for name, reduce in (("copy", False), ("row", True)):
                fns[name].append(lambda x=x, r=r, z=z, y=y, reduce=reduce: kernel[(tokens,)](
                    x, r, z, y, hidden, BLOCK=block, REDUCE=reduce, num_warps=warps))
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
            for name in ("copy", "row"):
                ref, add_ref = rounds[name]
                per_round[name] = [(o / a) / (f / b) for o, a, f, b in zip(op, add_op, ref, add_ref)]
            us = {k: statistics.median(v[0]) * 1e6 for k, v in rounds.items()}
            us["addcmul"] = statistics.median([t for v in rounds.values() for t in v[1]]) * 1e6
            rows.append({"mhz": _sm_mhz(), "us": us, "ratio": {k: statistics.median(v) for k, v in per_round.items()}})
        out[case] = rows
    return out


def spread(values: list[float]) -> float:
    """max / min - 1."""
    return max(values) / min(values) - 1


def summary(processes: list[dict], cases: list[str]) -> list[dict]:
    """Per case and reference: the ratio's median per process and the spreads (see the module docstring)."""
    out = []
    for case in cases:
        rows = [r for p in processes for r in p["cases"].get(case, [])]
        for ref in [k for k in rows[0]["ratio"]] if rows else []:
            per = [[r["ratio"][ref] for r in p["cases"][case]] for p in processes if case in p["cases"]]
            if not per:
                continue
            medians = [statistics.median(v) for v in per]
            out.append({"case": case, "reference": ref, "process_medians": medians,
                        "spread_processes": spread(medians), "spread_repeats": spread([x for v in per for x in v])})
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cases", default="1x4096,8x7168")
    ap.add_argument("--processes", type=int, default=6)
    ap.add_argument("--repeats", type=int, default=4)
    ap.add_argument("--json", help="write every process's repeats and the summary here")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    try:
        cases = [c.strip() for c in a.cases.split(",")]
        for c in cases:
            parse_case(c)
        for name in ("processes", "repeats"):
            if getattr(a, name) < 1:
                raise ValueError(f"--{name} must be at least 1, got {getattr(a, name)}")
    except ValueError as e:
        ap.error(str(e))
    if a.child:
        print(json.dumps({"pid": os.getpid(), "cases": measure_process(cases, a.repeats)}))
        return 0
    processes = []
    for k in range(a.processes):
        # A fresh process each: the state that moves the ratio is held per process (and drifts within one).
        run = subprocess.run([sys.executable, __file__, "--child", "--cases", a.cases, "--repeats", str(a.repeats)],
                             capture_output=True, text=True)
        if run.returncode:
            print(f"process {k + 1} failed:\n{run.stderr[-2000:]}", file=sys.stderr)
            return 1
        processes.append(json.loads(run.stdout.strip().splitlines()[-1]))
        if a.json:
            _write(a.json, {"cases": cases, "processes": processes, "summary": summary(processes, cases)})
    print("| case | reference | ratio per process | spread over processes | over repeats |\n|---|---|---|---|---|")
    for s in summary(processes, cases):
        print(f"| {s['case']} | {s['reference']} | {' '.join(f'{m:.3f}' for m in s['process_medians'])} | "
              f"{s['spread_processes']:.2%} | {s['spread_repeats']:.2%} |")
    return 0


def _write(path: str, data: dict) -> None:
    tmp = pathlib.Path(path + ".tmp")
    tmp.write_text(json.dumps(data, indent=1))
    os.replace(tmp, path)


if __name__ == "__main__":
    sys.exit(main())

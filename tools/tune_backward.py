"""Sweep the backward launch settings on a GPU; print the fraction of the floor per config.

    python tools/tune_backward.py [--dtypes bf16,fp32] [--widths 512,4096,...]

For each hidden size N, rows are chosen so x holds 128 MiB in bf16 (at least
128 rows). Each config is checked against a float64 evaluation of the
backward formula (kernels/backward.py), then ``backward_rows`` alone is timed
with the suite's method (``benchmarks/_measure.py``: single-call device time,
L2 flushed, interleaved with the floor) against ``torch.addcmul(x, r, dy,
out=dx)``: the same 4 row-trips (read x, residual and dy, write dx). The
winners go into fusedkernel/kernels/config.py (``backward_config``) and
docs/tuning.md.
"""

import argparse
import itertools
import pathlib
import sys

import torch
import triton

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent))
from benchmarks._measure import interleaved_medians, warm_up  # noqa: E402
from fusedkernel.kernels.config import BackwardConfig, backward_config  # noqa: E402
from fusedkernel.kernels import launch  # noqa: E402
from fusedkernel.kernels.launch import backward_rows  # noqa: E402

DT = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}
WIDTHS = [512, 4096, 8192, 16384, 65536, 262144]


def configs(n: int, elem_bytes: int) -> list[BackwardConfig]:
    """The table's choice, then a sweep around it: whole rows up to 16384 wide; split and columns beyond 4096."""
    table = backward_config(n, elem_bytes, launch._max_splits(0))
    out = [table]
    block_n = triton.next_power_of_2(n)
    if block_n <= 16384:
        for bm, w, per_sm in itertools.product([1, 2, 4, 8, 16], [4, 8, 16, 32], [2, 4, 8]):
            if bm * block_n <= 16384 and 32 * w <= bm * block_n // 2 and (w < 32 or block_n >= 8192):
                out.append(BackwardConfig("rows", bm, block_n, w, per_sm))
    if n > 4096:
        for bm, bn, w, per_sm in itertools.product([1, 2, 4, 8], [1024, 2048, 4096], [4, 8], [2, 4]):
            if bm * bn <= 8192:
                out.append(BackwardConfig("columns", bm, bn, w, per_sm))
                if -(-n // bn) <= launch._max_splits(0):
                    out.append(BackwardConfig("split", bm, bn, w, per_sm))
    return list(dict.fromkeys(out))


def reference(dy, x, r, w, rstd):
    """dx and dw in float64 from the forward's float32 rstd (the formula of kernels/backward.py)."""
    t_hat = (x.double() + r.double()) * rstd.double()[:, None]
    g = dy.double() * w.double()
    dx = rstd.double()[:, None] * (g - t_hat * (g * t_hat).mean(-1, keepdim=True))
    return dx, (dy.double() * t_hat).sum(0)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dtypes", default="bf16")
    ap.add_argument("--widths", default=",".join(map(str, WIDTHS)))
    a = ap.parse_args()
    print("| dtype | rows x N | path | block_m | block_n | warps | programs/SM | µs | floor µs | fraction |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for dname, n in itertools.product(a.dtypes.split(","), map(int, a.widths.split(","))):
        dt = DT[dname]
        rows = max(128, (64 << 20) // n)
        x, r, dy = (torch.randn(rows, n, device="cuda", dtype=dt) for _ in range(3))
        w = torch.randn(n, device="cuda", dtype=dt)
        t = x.float() + r.float()
        rstd = torch.rsqrt(t.pow(2).mean(-1) + 1e-6)
        del t
        dx = torch.empty_like(x)
        want_dx, want_dw = reference(dy, x, r, w, rstd)
        floor = lambda: torch.addcmul(x, r, dy, out=dx)  # noqa: E731
        best, first = None, True
        table = backward_config(n, x.element_size(), launch._max_splits(0))
        for cfg in configs(n, x.element_size()):
            try:
                dw = backward_rows(dy, None, x, r, w, rstd, dx, cfg=cfg)
                err_dx = ((dx.double() - want_dx).abs().max() / want_dx.abs().max()).item()
                err_dw = ((dw.double() - want_dw).abs().max() / want_dw.abs().max()).item()
                if not (err_dx < 2 * 2.0 ** -7 and err_dw < 2.0 ** -8):  # dw rounded once to bf16
                    raise ValueError(f"wrong result: relative error dx {err_dx:.3g}, dw {err_dw:.3g}")
            except Exception as e:  # noqa: BLE001 - report and go on
                print(f"| {dname} | {rows}x{n} | {cfg.path} | {cfg.block_m} | {cfg.block_n} | {cfg.num_warps} | "
                      f"{cfg.programs_per_sm} | error: {type(e).__name__}: {e} | | |", flush=True)
                continue
            op = lambda: backward_rows(dy, None, x, r, w, rstd, dx, cfg=cfg)  # noqa: E731
            warm_up(op, 1.0 if first else 0.05)
            first = False
            op_s, floor_s = interleaved_medians(op, floor)
            mark = " (table)" if cfg == table else ""
            print(f"| {dname} | {rows}x{n} | {cfg.path}{mark} | {cfg.block_m} | {cfg.block_n} | {cfg.num_warps} | "
                  f"{cfg.programs_per_sm} | {op_s * 1e6:.1f} | {floor_s * 1e6:.1f} | {floor_s / op_s:.3f} |",
                  flush=True)
            if best is None or floor_s / op_s > best[0]:
                best = (floor_s / op_s, cfg, op_s)
        if best:
            print(f"BEST {dname} {rows}x{n}: {best[1]} fraction {best[0]:.3f} ({best[2] * 1e6:.1f} µs)", flush=True)


if __name__ == "__main__":
    main()

"""Sweep the forward launch settings on a GPU; print the fraction of the floor per config.

    python tools/tune_forward.py [--dtypes bf16,fp32] [--quick]

For each hidden size N, rows are chosen so x holds 128 MiB in bf16 (at least
128 rows); each config is checked against the fp32 reference, then timed with
triton.testing.do_bench (L2 flushed, median) interleaved with the floor
``torch.add(x, r, out=y)``. The winners go into fusedkernel/kernels/config.py
and docs/tuning.md.
"""

import argparse
import dataclasses
import itertools
import statistics

import torch
import torch.nn.functional as F
import triton
import triton.testing

from fusedkernel.kernels.config import ForwardConfig, forward_config
from fusedkernel.kernels import launch
from fusedkernel.kernels.launch import forward_rows

DT = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}
WIDTHS = [256, 512, 1024, 2048, 4096, 8192, 16384, 32768, 65536, 131072, 262144]


def configs(n, elem_bytes):
    """The table's choice and its neighbours; for wide rows, the split sweep."""
    table = forward_config(n, elem_bytes, launch._max_splits(0))
    out = [table]
    if table.splits == 1:
        out.append(dataclasses.replace(table, weight_first=not table.weight_first))
        for bm, w in [(table.block_m, table.num_warps // 2), (table.block_m, table.num_warps * 2),
                      (table.block_m * 2, table.num_warps), (table.block_m // 2, table.num_warps)]:
            if bm >= 1 and 4 <= w <= 32:
                out.append(ForwardConfig("rows", bm, table.block_n, 1, w, table.weight_first))
    if n >= 16384:
        for bm, bn, w in itertools.product([1, 2, 4], [1024, 2048, 4096], [2, 4, 8]):
            cfg = ForwardConfig("rows", bm, bn, triton.cdiv(n, bn), w)
            if bm * bn <= 8192 and bn >= 128 * w and cfg not in out:
                out.append(cfg)
    return out


def bench(fn, rep=15):
    return triton.testing.do_bench(fn, warmup=2, rep=rep, return_mode="median")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dtypes", default="bf16")
    ap.add_argument("--widths", default=",".join(map(str, WIDTHS)))
    a = ap.parse_args()
    x0 = torch.randn(1 << 26, device="cuda")
    for _ in range(200):  # clocks ramp up from idle
        x0.mul_(1.0)
    print("| dtype | rows x N | path | block_m | block_n | splits | warps | weight first | µs | floor µs | fraction | max err |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for dname, n in itertools.product(a.dtypes.split(","), map(int, a.widths.split(","))):
        dt = DT[dname]
        rows = max(128, (128 << 20) // (2 * n))
        x, r = torch.randn(rows, n, device="cuda", dtype=dt), torch.randn(rows, n, device="cuda", dtype=dt)
        w = torch.randn(n, device="cuda", dtype=dt)
        y = torch.empty_like(x)
        ref = F.rms_norm(x.float() + r.float(), (n,), eps=1e-6) * w.float()
        floor = lambda: torch.add(x, r, out=y)
        best = None
        out_table = forward_config(n, x.element_size(), launch._max_splits(0))
        for cfg in configs(n, x.element_size()):
            try:
                y.fill_(float("nan"))
                forward_rows(x, r, w, 1e-6, y, cfg=cfg)
                err = (y.float() - ref).abs().max().item()
                if not err <= 2 ** -7 * ref.abs().max().item() * 2:
                    raise ValueError(f"wrong result, max err {err:.3g}")
            except Exception as e:  # noqa: BLE001 - report and go on
                print(f"| {dname} | {rows}x{n} | {cfg.path} | {cfg.block_m} | {cfg.block_n} | {cfg.splits} | {cfg.num_warps} | {cfg.weight_first} | error {type(e).__name__} | | | |")
                continue
            op = lambda: forward_rows(x, r, w, 1e-6, y, cfg=cfg)
            ts, fs = [], []
            for _ in range(3):
                fs.append(bench(floor))
                ts.append(bench(op))
            t, f = statistics.median(ts), statistics.median(fs)
            mark = " (table)" if cfg == out_table else ""
            print(f"| {dname} | {rows}x{n} | {cfg.path}{mark} | {cfg.block_m} | {cfg.block_n} | {cfg.splits} | {cfg.num_warps} | {cfg.weight_first} | {t*1e3:.1f} | {f*1e3:.1f} | {f/t:.3f} | {err:.3g} |", flush=True)
            if best is None or f / t > best[0]:
                best = (f / t, cfg, t)
        print(f"BEST {dname} {rows}x{n}: {best[1]} fraction {best[0]:.3f} ({best[2]*1e3:.1f} µs)", flush=True)


if __name__ == "__main__":
    main()

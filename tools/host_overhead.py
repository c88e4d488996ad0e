"""Host time per call at decode shapes: the fused op next to one torch.add.

    python tools/host_overhead.py

Wall time of N back-to-back calls without synchronizing (launch-bound: the
host cost of a call) and with a synchronize after each (what one decode step
waits for), median of 7 repetitions, µs per call.
"""

import statistics
import time

import torch

import fusedkernel


def per_call_us(fn, n=2000, sync_each=False):
    reps = []
    for _ in range(7):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
            if sync_each:
                torch.cuda.synchronize()
        torch.cuda.synchronize()
        reps.append((time.perf_counter() - t0) / n * 1e6)
    return statistics.median(reps)


def main():
    print("| shape | dtype | impl | host µs/call (no sync) | µs/call (sync each) | ratio to torch.add (no sync) |")
    print("|---|---|---|---|---|---|")
    for rows, n in [(1, 4096), (32, 4096)]:
        for dt in [torch.bfloat16]:
            x, r = torch.randn(rows, n, device="cuda", dtype=dt), torch.randn(rows, n, device="cuda", dtype=dt)
            w = torch.randn(n, device="cuda", dtype=dt)
            y = torch.empty_like(x)
            impls = {"torch.add": lambda: torch.add(x, r, out=y),
                     "fused": lambda: fusedkernel.add_rmsnorm(x, r, w),
                     "eager": lambda: fusedkernel.add_rmsnorm_eager(x, r, w),
                     "compiled": lambda: fusedkernel.add_rmsnorm_compiled(x, r, w)}
            base = None
            for name, fn in impls.items():
                for _ in range(50):
                    fn()
                a, b = per_call_us(fn), per_call_us(fn, 500, True)
                base = base or a
                print(f"| {rows}x{n} | {dt} | {name} | {a:.2f} | {b:.2f} | {a / base:.2f} |", flush=True)


if __name__ == "__main__":
    main()

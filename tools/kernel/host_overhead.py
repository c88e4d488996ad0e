"""Host time per call at decode shapes: the fused op next to one torch.add, and where it goes.

    python tools/kernel/host_overhead.py

Wall time of N back-to-back calls without synchronizing (launch-bound: the
host cost of a call) and with a synchronize after each (what one decode step
waits for), median of 7 repetitions, µs per call. Then the fused op's host
path taken apart, step by step (no synchronize; the kernel is shorter than its
launch, so the GPU never backs the host up).
"""

import argparse
import pathlib
import statistics
import sys
import time

import torch

import fusedkernel
from fusedkernel import _validation, ops
from fusedkernel.kernels import forward_rule, launch

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2]))
from benchmarks._peers import implementation  # noqa: E402


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


def breakdown(x, r, w, y):
    """Each step of add_rmsnorm's eager no-grad path, timed alone."""
    fusedkernel.add_rmsnorm(x, r, w)  # fills the launcher's cache of compiled kernels
    # Keys of table launches: (n_cols, few rows?, path, splits, warps, weight load, device, x, weight and y
    # dtypes, residual output?, rstd?): read from the end, which the launcher's key keeps.
    (run, function, metadata, cooperative, pdl), = [
        v for k, v in launch._compiled.items() if k[0] == x.shape[-1] and k[-5] == x.dtype and not k[-2] and not k[-1]]
    n = x.shape[-1]
    # The forward's choice: no residual output, one row per program at decode.
    choice = (n, x.element_size(), launch._max_splits(0), launch._settings(0), x.numel() // n, False,
              x.dtype == torch.float16)
    cfg = forward_rule.forward_config(*choice)
    grid = -(-x.numel() // n // cfg.block_m) * cfg.splits
    # res, rstd, exchange slots; n_rows, n_cols, 4 row strides; eps, epoch; the constexprs.
    tail = (None, None, None, x.numel() // n, n, n, n, n, 0, 1e-6, 0,
            cfg.block_m, cfg.block_n, cfg.splits, 1 << (cfg.splits - 1).bit_length(), cfg.weight_at, False, False,
            launch._vector_width(x.element_size(), n))
    args = (x, r, w, y, *tail)
    stream = torch.cuda.current_stream().cuda_stream
    ptrs = (x.data_ptr(), r.data_ptr(), w.data_ptr(), y.data_ptr())
    steps = {
        "torch.add(x, r, out=y)": lambda: torch.add(x, r, out=y),
        "check_inputs": lambda: _validation.check_inputs(x, r, w, 1e-6),
        "torch.empty_like(x, contiguous)": lambda: torch.empty_like(x, memory_format=torch.contiguous_format),
        "forward_config": lambda: forward_rule.forward_config(*choice),
        "4 x data_ptr()": lambda: (x.data_ptr(), r.data_ptr(), w.data_ptr(), y.data_ptr()),
        "Triton's C launcher (pointers as ints)": lambda: run(
            grid, 1, 1, stream, function, cooperative, pdl, None, None, metadata, None, None, None, *ptrs, *tail),
        "Triton's C launcher (tensors)": lambda: run(
            grid, 1, 1, stream, function, cooperative, pdl, None, None, metadata, None, None, None, *args),
        "forward_rows (launch path)": lambda: launch.forward_rows(x, r, w, 1e-6, y),
        "ops._forward (+ empty)": lambda: ops._forward(x, r, w, 1e-6, None, False),
        "add_rmsnorm (all)": lambda: fusedkernel.add_rmsnorm(x, r, w),
    }
    print("| step | host µs/call |")
    print("|---|---|")
    for name, fn in steps.items():
        for _ in range(50):
            fn()
        print(f"| {name} | {per_call_us(fn):.2f} |", flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.parse_args()
    if not torch.cuda.is_available():  # a usage error, as in the other kernel tools (exit 2)
        ap.error("no GPU here: host time is a CUDA launch's, measured on one (TRITON_INTERPRET=1 cannot check it)")
    print("| shape | dtype | impl | host µs/call (no sync) | µs/call (sync each) | ratio to torch.add (no sync) |")
    print("|---|---|---|---|---|---|")
    for rows, n in [(1, 4096), (32, 4096)]:
        for dt in [torch.bfloat16, torch.float16, torch.float32]:
            x, r = torch.randn(rows, n, device="cuda", dtype=dt), torch.randn(rows, n, device="cuda", dtype=dt)
            w = torch.randn(n, device="cuda", dtype=dt)
            y = torch.empty_like(x)
            eager, compiled = (implementation(i, "forward", n, 1e-6, False) for i in ("eager", "compiled"))
            impls = {"torch.add": lambda: torch.add(x, r, out=y),
                     "fused": lambda: fusedkernel.add_rmsnorm(x, r, w),
                     "eager": lambda: eager(x, r, w),
                     "compiled": lambda: compiled(x, r, w)}
            base = None
            for name, fn in impls.items():
                for _ in range(50):
                    fn()
                a, b = per_call_us(fn), per_call_us(fn, 500, True)
                base = base or a
                print(f"| {rows}x{n} | {dt} | {name} | {a:.2f} | {b:.2f} | {a / base:.2f} |", flush=True)
    x, r = torch.randn(1, 4096, device="cuda", dtype=torch.bfloat16), torch.randn(1, 4096, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(4096, device="cuda", dtype=torch.bfloat16)
    print("\nThe fused op's host path, 1x4096 bf16:\n")
    breakdown(x, r, w, torch.empty_like(x))


if __name__ == "__main__":
    main()

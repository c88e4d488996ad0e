"""Registers and programs per SM of the split backward's launch settings, on Hopper, without a GPU.

    python tools/kernel/registers.py [--dtypes bf16,fp32] [--widths 16384,65536,...] [--candidates]

The split path's grid is what fits (docs/tuning.md#backward-split-path): on a
GPU the launch reads the compiled kernel's registers from the driver. Here each
setting is compiled for sm_90 the way Triton's AOT compiler
(``triton.tools.compile``) does it, pointers and integers divisible by 16
hinted as the JIT specializes them for contiguous rows, and the cubin's
registers and stack bytes (spills) are read with Triton's bundled cuobjdump.
Programs per SM: ``launch.resident_per_sm`` at the H200's limits. The rule's
setting per width, or with ``--candidates`` every split setting of
``backward_candidates``. Prints a markdown table; exits 1 where the rule's
setting fits fewer programs per SM than it asks for (its launch would cap the
grid below what the rule was measured at).
"""

import argparse
import os
import re
import subprocess
import sys
import tempfile

import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

from _sweep import names
from fusedkernel.kernels import launch
from fusedkernel.kernels.backward import _bwd_split_kernel
from fusedkernel.kernels.config import HOPPER, backward_candidates, backward_config

TARGET = GPUTarget("cuda", 90, 32)
H200_LIMITS = (65536, 2048, 233472)  # registers, threads and bytes of shared memory per SM (sm_90)
ELEM = {"bf16": 2, "fp16": 2, "fp32": 4}
POINTERS = ("dy_ptr", "dres_ptr", "x_ptr", "r_ptr", "w_ptr", "rstd_ptr", "dx_ptr", "dw_part_ptr", "slot_ptr")
STRIDES = ("n_cols", "stride_dy", "stride_dres", "stride_x", "stride_r", "stride_dx")


def usage(cfg, dtype: str, n_cols: int) -> tuple[int, int, int]:
    """(registers, stack bytes (spills) a thread, shared bytes) of the split kernel for contiguous rows of n_cols."""
    fn = _bwd_split_kernel
    splits = -(-n_cols // cfg.block_n)
    const = dict(BLOCK_M=cfg.block_m, BLOCK_N=cfg.block_n, SPLITS=splits, SPLITS_POW2=1 << (splits - 1).bit_length(),
                 HAS_DRES=False, VEC=launch._vector_width(ELEM[dtype], n_cols), BEHIND=cfg.exchange_behind)
    types = {"dw_part_ptr": "*fp32", "rstd_ptr": "*fp32", "slot_ptr": "*i64"}
    sig = {a: "constexpr" if a in const else types.get(a, f"*{dtype}" if a in POINTERS else "i32")
           for a in fn.arg_names}
    hinted = list(POINTERS) + (list(STRIDES) if n_cols % 16 == 0 else [])
    attrs = {(fn.arg_names.index(a),): [["tt.divisibility", 16]] for a in hinted}
    kernel = triton.compile(ASTSource(fn=fn, signature=sig, constexprs=const, attrs=attrs), target=TARGET,
                            options={"num_warps": cfg.num_warps})
    tool = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", "cuobjdump")
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "kernel.cubin")
        with open(path, "wb") as f:
            f.write(kernel.asm["cubin"])
        out = subprocess.run([tool, "--dump-resource-usage", path], capture_output=True, text=True, check=True).stdout
    found = re.search(r"REG:(\d+) STACK:(\d+)", out)
    if found is None:
        raise RuntimeError(f"cuobjdump gave no register count:\n{out}")
    return int(found[1]), int(found[2]), kernel.metadata.shared


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dtypes", default="bf16,fp32")
    ap.add_argument("--widths", default="16384,20480,32768,65536,131072")
    ap.add_argument("--candidates", action="store_true", help="every split setting of backward_candidates")
    a = ap.parse_args()
    try:
        dtypes, widths = names(a.dtypes, "--dtypes"), [int(w) for w in names(a.widths, "--widths")]
    except ValueError as e:
        ap.error(str(e))
    if not set(dtypes) <= set(ELEM):
        ap.error(f"--dtypes: {sorted(set(dtypes) - set(ELEM))} not among {sorted(ELEM)}")
    if any(w < 1 for w in widths):
        ap.error("--widths: positive hidden sizes")
    short = 0
    print("| case | config | registers | stack bytes | programs per SM: asked / fit |\n|---|---|---|---|---|")
    for dtype in dtypes:
        for n in widths:
            max_splits = 132  # the H200's SMs
            if a.candidates:
                cfgs = [c for c in backward_candidates(n, ELEM[dtype], max_splits, HOPPER) if c.path == "split"]
            else:
                cfgs = [backward_config(n, ELEM[dtype], max_splits, HOPPER)]
            for cfg in cfgs:
                if cfg.path != "split":
                    print(f"| {dtype} {n} | {cfg} | not the split path | | |")
                    continue
                regs, stack, shared = usage(cfg, dtype, n)
                fit = launch.resident_per_sm(regs, cfg.num_warps, shared, H200_LIMITS)
                short += not a.candidates and fit < cfg.programs_per_sm
                print(f"| {dtype} {n} | {cfg} | {regs} | {stack} | {cfg.programs_per_sm} / {fit} |", flush=True)
    return 1 if short else 0


if __name__ == "__main__":
    sys.exit(main())

"""Registers and programs per SM of the split backward's launch settings (``--forward``: the forward's), on
Hopper, without a GPU (compiled for sm_90 whether or not TRITON_INTERPRET is set).

    python tools/kernel/registers.py [--dtypes bf16,fp32] [--widths 16384,65536,...] [--dres] [--weight fp32]
                                     [--candidates]
    python tools/kernel/registers.py --forward --rows 512 [--y-only] [--dtypes bf16] [--widths 8496,16384]

The split path's grid is what fits (docs/tuning.md#backward-split-path): on a
GPU the launch reads the compiled kernel's registers from the driver. Here each
setting is compiled for sm_90 the way Triton's AOT compiler
(``triton.tools.compile``) does it, pointers and integers divisible by 16
hinted as the JIT specializes them for contiguous rows, and the cubin's
registers and stack bytes (spills) are read with Triton's cuobjdump. Programs
per SM: ``launch.resident_per_sm`` at the H200's limits. The kernel as the
suite's forward+backward launches it (weight in x's dtype, no residual
gradient), or with ``--dres`` (``return_residual=True`` whose residual output
has a gradient) and ``--weight fp32``. The rule's setting per width, or with
``--candidates`` every split setting of ``backward_candidates`` (the rule's
marked). Prints a markdown table; exits 3 where the rule's setting fits fewer
programs per SM than it asks for (its launch caps the grid below what the
rule was measured at), naming those cases on stderr.

``--forward``: the forward rule's launch at ``--rows`` rows instead (the rows
and persistent paths; the looped path is not compiled), with the residual
stored or, with ``--y-only``, y only: how many programs an SM holds
(docs/tuning.md#forward-persistent-grid, #forward-warps; "asked" is "–" on
the rows path, whose grid is a program per row group). Exits 3 where a
persistent launch asks more programs per SM than fit.
"""

import os

os.environ.pop("TRITON_INTERPRET", None)  # compiled for a GPU target: never the interpreter

import argparse  # noqa: E402
import re  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402

import triton  # noqa: E402
from triton.backends.compiler import GPUTarget  # noqa: E402
from triton.compiler import ASTSource  # noqa: E402

from _sweep import count_type, names  # noqa: E402
from fusedkernel.kernels import launch  # noqa: E402
from fusedkernel.kernels.backward import _bwd_split_kernel  # noqa: E402
from fusedkernel.kernels.backward_rule import backward_candidates, backward_config  # noqa: E402
from fusedkernel.kernels.config import HOPPER  # noqa: E402
from fusedkernel.kernels.forward_rule import forward_config  # noqa: E402
from fusedkernel.kernels.forward import _persistent_kernel, _rows_kernel  # noqa: E402

TARGET = GPUTarget("cuda", 90, 32)
H200_SMS = 132
H200_LIMITS = (65536, 2048, 233472)  # registers, threads and bytes of shared memory per SM (sm_90)
ELEM = {"bf16": 2, "fp16": 2, "fp32": 4}
POINTERS = ("dy_ptr", "dres_ptr", "x_ptr", "r_ptr", "w_ptr", "rstd_ptr", "dx_ptr", "dw_part_ptr", "slot_ptr")
STRIDES = ("n_cols", "stride_dy", "stride_dres", "stride_x", "stride_r", "stride_dx")
FWD_POINTERS = ("x_ptr", "r_ptr", "w_ptr", "y_ptr", "res_ptr", "rstd_ptr", "slot_ptr")
FWD_STRIDES = ("n_cols", "stride_x", "stride_r", "stride_y", "stride_res")


def usage(cfg, dtype: str, n_cols: int, dres: bool = False, weight: str | None = None) -> tuple[int, int, int]:
    """(registers, stack bytes (spills) a thread, shared bytes) of the split kernel for contiguous rows of n_cols.

    RuntimeError where cuobjdump fails or reports no register count.
    """
    splits = -(-n_cols // cfg.block_n)
    const = dict(BLOCK_M=cfg.block_m, BLOCK_N=cfg.block_n, SPLITS=splits, SPLITS_POW2=1 << (splits - 1).bit_length(),
                 HAS_DRES=dres, VEC=launch._vector_width(ELEM[dtype], n_cols), BEHIND=cfg.exchange_behind)
    types = {"dw_part_ptr": "*fp32", "rstd_ptr": "*fp32", "slot_ptr": "*i64", "w_ptr": f"*{weight or dtype}"}
    types |= {a: f"*{dtype}" for a in POINTERS if a not in types}
    return _compiled_usage(_bwd_split_kernel, const, types, POINTERS + (STRIDES if n_cols % 16 == 0 else ()),
                           cfg.num_warps)


def forward_usage(cfg, dtype: str, n_cols: int, stores_residual: bool) -> tuple[int, int, int]:
    """As :func:`usage`, for the forward's rows or persistent kernel at ``cfg`` (the launch's constants)."""
    const = dict(BLOCK_M=cfg.block_m, BLOCK_N=cfg.block_n, STORE_RES=stores_residual, STORE_RSTD=False,
                 VEC=launch._vector_width(ELEM[dtype], n_cols))
    fn = _persistent_kernel
    if cfg.path == "rows":
        fn = _rows_kernel
        const |= dict(SPLITS=cfg.splits, SPLITS_POW2=1 << (cfg.splits - 1).bit_length(), WEIGHT_AT=cfg.weight_at)
    types = {a: f"*{dtype}" for a in FWD_POINTERS} | {"rstd_ptr": "*fp32", "slot_ptr": "*i64", "eps": "fp32"}
    return _compiled_usage(fn, const, types, FWD_POINTERS + (FWD_STRIDES if n_cols % 16 == 0 else ()),
                           cfg.num_warps)


def _compiled_usage(fn, const: dict, types: dict, hinted: tuple, num_warps: int) -> tuple[int, int, int]:
    # Arguments not in const or types are 32-bit integers; those in hinted are divisible by 16.
    sig = {a: "constexpr" if a in const else types.get(a, "i32") for a in fn.arg_names}
    attrs = {(fn.arg_names.index(a),): [["tt.divisibility", 16]] for a in hinted if a in fn.arg_names}
    kernel = triton.compile(ASTSource(fn=fn, signature=sig, constexprs=const, attrs=attrs), target=TARGET,
                            options={"num_warps": num_warps})
    tool = triton.knobs.nvidia.cuobjdump.path
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "kernel.cubin")
        with open(path, "wb") as f:
            f.write(kernel.asm["cubin"])
        out = subprocess.run([tool, "--dump-resource-usage", path], capture_output=True, text=True)
    found = re.search(r"REG:(\d+) STACK:(\d+)", out.stdout)
    if out.returncode or found is None:
        raise RuntimeError(f"{tool} --dump-resource-usage gave no register count (exit {out.returncode}):\n"
                           f"{out.stdout}{out.stderr}")
    return int(found[1]), int(found[2]), kernel.metadata.shared


def widths_arg(text: str) -> list[int]:
    """argparse type of ``--widths``: distinct positive hidden sizes."""
    out = []
    for entry in text.split(","):
        try:
            n = int(entry)
        except ValueError:
            raise argparse.ArgumentTypeError(f"hidden sizes as integers, got {entry.strip()!r}") from None
        if n < 1:
            raise argparse.ArgumentTypeError(f"positive hidden sizes, got {n}")
        if n in out:
            raise argparse.ArgumentTypeError(f"{n} given more than once")
        out.append(n)
    return out


def forward_rows(dtypes: list[str], widths: list[int], rows: int, stores_residual: bool) -> int:
    # --forward's table; 3 where a persistent launch asks more programs per SM than fit.
    short = []
    print("| case | config | registers | stack bytes | programs per SM: asked / fit |\n|---|---|---|---|---|")
    for dtype in dtypes:
        for n in widths:
            cfg = forward_config(n, ELEM[dtype], H200_SMS, HOPPER, rows, stores_residual, dtype == "fp16")
            if cfg.path == "looped":
                print(f"| {dtype} {rows}x{n} | {cfg} | the looped path: not compiled | | |")
                continue
            regs, stack, shared = forward_usage(cfg, dtype, n, stores_residual)
            fit = launch.resident_per_sm(regs, cfg.num_warps, shared, H200_LIMITS)
            asked = cfg.programs_per_sm or "–"
            if cfg.path == "persistent" and fit < cfg.programs_per_sm:
                short.append(f"{dtype} {rows}x{n}: the rule asks {cfg.programs_per_sm} per SM, {fit} fit")
            print(f"| {dtype} {rows}x{n} | {cfg} | {regs} | {stack} | {asked} / {fit} |", flush=True)
    for line in short:
        print(line, file=sys.stderr)
    return 3 if short else 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dtypes", default="bf16,fp32")
    ap.add_argument("--widths", type=widths_arg, default="16384,20480,32768,65536,131072")
    ap.add_argument("--dres", action="store_true", help="the kernel with a residual gradient (return_residual=True)")
    ap.add_argument("--weight", choices=sorted(ELEM), help="the weight's dtype (default: x's)")
    ap.add_argument("--candidates", action="store_true", help="every split setting of backward_candidates")
    ap.add_argument("--forward", action="store_true", help="the forward rule's launch at --rows rows instead")
    ap.add_argument("--rows", type=count_type(), default=512, help="--forward: rows of the launch")
    ap.add_argument("--y-only", action="store_true", help="--forward: the launch writes y only")
    a = ap.parse_args()
    if a.forward and (a.dres or a.weight or a.candidates):
        ap.error("--dres, --weight and --candidates are the backward's; --forward takes --rows and --y-only")
    try:
        dtypes = names(a.dtypes, "--dtypes")
    except ValueError as e:
        ap.error(str(e))
    if not set(dtypes) <= set(ELEM):
        ap.error(f"--dtypes: {sorted(set(dtypes) - set(ELEM))} not among {sorted(ELEM)}")
    if a.forward:
        return forward_rows(dtypes, a.widths, a.rows, not a.y_only)
    short = []
    print("| case | config | registers | stack bytes | programs per SM: asked / fit |\n|---|---|---|---|---|")
    for dtype in dtypes:
        for n in a.widths:
            rule = backward_config(n, ELEM[dtype], H200_SMS, HOPPER)
            cfgs = [rule]
            if a.candidates:
                cfgs = [c for c in backward_candidates(n, ELEM[dtype], H200_SMS, HOPPER) if c.path == "split"]
            if rule.path != "split" and not (a.candidates and cfgs):
                print(f"| {dtype} {n} | {rule} (rule) | not the split path | | |")
                continue
            for cfg in cfgs:
                regs, stack, shared = usage(cfg, dtype, n, a.dres, a.weight)
                fit = launch.resident_per_sm(regs, cfg.num_warps, shared, H200_LIMITS)
                if cfg == rule and fit < cfg.programs_per_sm:
                    short.append(f"{dtype} {n}: the rule asks {cfg.programs_per_sm} per SM, {fit} fit")
                mark = " (rule)" if cfg == rule else ""
                print(f"| {dtype} {n} | {cfg}{mark} | {regs} | {stack} | {cfg.programs_per_sm} / {fit} |", flush=True)
    for line in short:
        print(line, file=sys.stderr)
    return 3 if short else 0


if __name__ == "__main__":
    sys.exit(main())

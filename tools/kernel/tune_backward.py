"""Sweep the backward launch settings on a GPU: fraction of the floor per candidate.

    python tools/kernel/tune_backward.py [--dtypes bf16,fp32] [--widths 512,4096,...] [--mib 64 | --rows 8192]
                                         [--paths rows,split,columns | --around-rule] [--json FILE]

Candidates: ``fusedkernel.kernels.backward_rule.backward_candidates`` (the rule's
choice first), or with ``--around-rule`` ``backward_neighbours``: the rule's
tile at 1-4 rows per SM held by 256-1024 threads per SM (14 settings).
``backward_rows`` alone is timed against ``torch.addcmul(x, r, dy, out=dx)``:
the same 4 row-trips (read x, residual and dy, write dx). Each candidate is
checked against a float64 evaluation of the backward formula
(kernels/backward.py). ``--paths``: only candidates of these paths
(the rule's choice is always timed first). Timing, table and ``--json``:
``_sweep.py``.
"""

import argparse
import itertools
import sys

import torch

from _sweep import (DTYPES, allocated, count_type, counts, dtype_names, exit_status, header, interrupted, names,
                    need_device, new_json_path, rows_for, sweep, write_json)
from benchmarks._measure import DEVICE
from fusedkernel.kernels import launch
from fusedkernel.kernels.backward_rule import backward_candidates, backward_neighbours

PATHS = ("rows", "split", "columns")
WIDTHS = [512, 2048, 4096, 5120, 8192, 16384, 65536, 262144]


def reference(dy, x, r, w, rstd):
    """dx and dw in float64 from the forward's float32 rstd."""
    t_hat = (x.double() + r.double()) * rstd.double()[:, None]
    g = dy.double() * w.double()
    dx = rstd.double()[:, None] * (g - t_hat * (g * t_hat).mean(-1, keepdim=True))
    return dx, (dy.double() * t_hat).sum(0)


def inputs(dtype: torch.dtype, rows: int, n: int) -> tuple:
    """x, residual, dy, weight, rstd, dx (empty), the float64 dx and dw they should give, and dx's scale.

    dx's error is measured against the largest rstd * |dy * weight|, the size of its terms: a narrow row's dx
    is their difference, near zero (one column: rstd * g * eps / (t * t + eps)), and only rounding remains.
    """
    x, r, dy = (torch.randn(rows, n, device=DEVICE, dtype=dtype) for _ in range(3))
    w = torch.randn(n, device=DEVICE, dtype=dtype)
    rstd = torch.rsqrt((x.float() + r.float()).pow(2).mean(-1) + 1e-6)
    want_dx, want_dw = reference(dy, x, r, w, rstd)
    scale = max(want_dx.abs().max().item(), (rstd.double()[:, None] * (dy.double() * w.double()).abs()).max().item())
    return x, r, dy, w, rstd, torch.empty_like(x), want_dx, want_dw, scale


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dtypes", default="bf16")
    ap.add_argument("--widths", default=",".join(map(str, WIDTHS)))
    ap.add_argument("--mib", type=count_type(), help="rows for this many MiB of bf16 x (default: 64)")
    ap.add_argument("--rows", type=count_type(), help="this many rows instead (docs/tuning.md's sweeps: 8192)")
    ap.add_argument("--paths", help="sweep only these paths (comma-separated; default: all)")
    ap.add_argument("--around-rule", action="store_true", help="sweep backward_neighbours, not the candidates")
    ap.add_argument("--json", type=new_json_path, help="write every measured candidate to this new file as well")
    a = ap.parse_args()
    need_device(ap)
    try:
        paths = names(",".join(PATHS) if a.paths is None else a.paths, "--paths")
        dtypes, widths = dtype_names(a.dtypes), counts(a.widths, "--widths")
    except ValueError as e:
        ap.error(str(e))
    if not set(paths) <= set(PATHS):
        ap.error(f"--paths: {sorted(set(paths) - set(PATHS))} not among {PATHS}")
    if a.around_rule and a.paths:
        ap.error("--around-rule sweeps the rule's own path: leave out --paths")
    if a.rows is not None and a.mib is not None:
        ap.error("give --mib or --rows, not both")
    header()
    rows_out, failed, done = [], [], 0
    try:
        for dname, n in itertools.product(dtypes, widths):
            rows = a.rows or rows_for(n, a.mib or 64)
            label = f"{dname} {rows}x{n}"
            got = allocated(lambda: inputs(DTYPES[dname], rows, n), label)
            out = [] if got is None else sweep_case(label, got, n, a.around_rule, paths)
            del got
            failed += [] if out else [label]
            rows_out += out
            if a.json:
                write_json(a.json, rows_out)
            done += bool(out)  # a case with rows in --json
    except KeyboardInterrupt:
        return interrupted(done, a.json)
    return exit_status(failed)


def sweep_case(label: str, tensors: tuple, n: int, around_rule: bool, paths: list[str]) -> list[dict]:
    """:func:`_sweep.sweep` of one case's candidates on ``tensors`` (:func:`inputs`'s)."""
    x, r, dy, w, rstd, dx, want_dx, want_dw, dx_scale = tensors
    tol = 2 * torch.finfo(x.dtype).eps
    # dw sums thousands of rows: in fp32 that is more than 2 ulp (5120 wide: 2.75e-7 of the largest).
    tol_dw = max(tol, 1e-5)

    def check(cfg):
        dw = launch.backward_rows(dy, None, x, r, w, rstd, dx, cfg=cfg)
        err_dx = ((dx.double() - want_dx).abs().max() / dx_scale).item()
        err_dw = ((dw.double() - want_dw).abs().max() / want_dw.abs().max()).item()
        if not (err_dx < tol and err_dw < tol_dw):
            raise ValueError(f"relative error dx {err_dx:.3g}, dw {err_dw:.3g}")

    if around_rule:
        cands = backward_neighbours(n, x.element_size(), launch._max_splits(0))
    else:
        cands = backward_candidates(n, x.element_size(), launch._max_splits(0))
        cands = cands[:1] + [c for c in cands[1:] if c.path in paths]
    return sweep(label, cands, lambda cfg: launch.backward_rows(dy, None, x, r, w, rstd, dx, cfg=cfg),
                 check, lambda: torch.addcmul(x, r, dy, out=dx))

if __name__ == "__main__":
    sys.exit(main())

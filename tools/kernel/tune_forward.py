"""Sweep the forward launch settings on a GPU: fraction of the floor per candidate.

    python tools/kernel/tune_forward.py [--dtypes bf16,fp32] [--widths 4096,5120,...] [--mib 128]

Candidates: ``fusedkernel.kernels.config.forward_candidates`` (the rule's
choice first). Rows are chosen so x holds ``--mib`` MiB in bf16. Floor:
``torch.add(x, r, out=y)``, the same 3 row-trips. Timing and table:
``_sweep.py``. How to turn a sweep into a setting: docs/tuning.md.
"""

import argparse
import itertools

import torch
import torch.nn.functional as F

from _sweep import DTYPES, header, rows_for, sweep
from fusedkernel.kernels import launch
from fusedkernel.kernels.config import forward_candidates

WIDTHS = [512, 2048, 2880, 4096, 5120, 7168, 8192, 16384, 32768, 65536, 131072, 262144]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dtypes", default="bf16")
    ap.add_argument("--widths", default=",".join(map(str, WIDTHS)))
    ap.add_argument("--mib", type=int, default=128)
    a = ap.parse_args()
    header()
    for dname, n in itertools.product(a.dtypes.split(","), map(int, a.widths.split(","))):
        rows = rows_for(n, a.mib)
        x, r = (torch.randn(rows, n, device="cuda", dtype=DTYPES[dname]) for _ in range(2))
        w = torch.randn(n, device="cuda", dtype=DTYPES[dname])
        y = torch.empty_like(x)
        ref = F.rms_norm(x.double() + r.double(), (n,), eps=1e-6) * w.double()
        tol = 2 * torch.finfo(x.dtype).eps * ref.abs().max().item()

        def check(cfg):
            y.fill_(float("nan"))
            launch.forward_rows(x, r, w, 1e-6, y, cfg=cfg)
            err = (y.double() - ref).abs().max().item()
            if not err <= tol:
                raise ValueError(f"wrong result, max error {err:.3g}")

        sweep(f"{dname} {rows}x{n}", forward_candidates(n, x.element_size(), launch._max_splits(0)),
              lambda cfg: launch.forward_rows(x, r, w, 1e-6, y, cfg=cfg), check,
              lambda: torch.add(x, r, out=y))


if __name__ == "__main__":
    main()

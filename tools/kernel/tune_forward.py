"""Sweep the forward launch settings on a GPU: fraction of the floor per candidate.

    python tools/kernel/tune_forward.py [--op inference|forward|forward+residual] [--dtypes bf16]
                                        [--widths 2880,5120,...]
                                        [--tokens 1,64,512,8192] [--json FILE]

Candidates: ``fusedkernel.kernels.forward_rule.forward_candidates``, the rule's
launch (``launch.table_config``) first. Ops and floors as the suite's (``benchmarks/_cases.py``):
``forward`` (floor ``torch.add``, 3 row-trips), ``inference`` (the
residual updated in place) or ``forward+residual`` (x + residual written to
a new tensor; both floor ``torch.addcmul``, 4 row-trips). Timing as
the suite's: decode token counts (<= 512) replayed in CUDA graphs, prefill
single calls with L2 flushed. Table and ``--json``: ``_sweep.py``. How to turn
a sweep into a setting: docs/tuning.md.
"""

import argparse
import itertools
import sys

import torch
import torch.nn.functional as F

from _sweep import (DTYPES, allocated, counts, dtype_names, exit_status, header, interrupted, need_device, new_json_path,
                    sweep, write_json)
from benchmarks._measure import DEVICE, INTERPRET, TIMERS, method
from fusedkernel.kernels import launch
from fusedkernel.kernels.forward_rule import forward_candidates

WIDTHS = [1024, 1536, 2048, 2880, 3584, 4096, 5120, 6144, 7168, 8192, 10240, 12288, 14336, 16384, 18432, 24576,
          32768, 65536, 131072, 262144]


def _rounded_sum(res, x, r) -> bool:
    """Is ``res`` float32(x) + float32(r) rounded to x's dtype (the op's contract)?

    Triton's interpreter casts float32 to bfloat16 by truncation (docs/op.md):
    there a bfloat16 element may be the sum truncated instead.
    """
    want = x.float() + r.float()
    ok = res == want.to(x.dtype)
    if INTERPRET and x.dtype == torch.bfloat16:
        ok |= res == (want.view(torch.int32) & -65536).view(torch.float32).to(torch.bfloat16)
    return bool(ok.all())


class Case:
    """One op's inputs on the GPU at ``tokens`` rows of ``n`` in dtype ``dname``: launch, check and floor.

    ``op`` as the suite's: "forward" (y only; floor ``torch.add``), "inference" (the residual updated
    in place) or "forward+residual" (x + residual to a new tensor; both floor ``torch.addcmul``).
    """

    def __init__(self, op: str, dname: str, n: int, tokens: int) -> None:
        g = torch.Generator(device=DEVICE).manual_seed(0)
        self.x, self.r, self.z = (torch.randn(tokens, n, device=DEVICE, dtype=DTYPES[dname], generator=g)
                                  for _ in range(3))
        self.x *= 1e-3  # in place, thousands of calls keep the residual far from float16's range
        self.w = torch.randn(n, device=DEVICE, dtype=DTYPES[dname], generator=g)
        self.y = torch.empty_like(self.x)
        self.res = {"inference": self.r, "forward+residual": torch.empty_like(self.x)}.get(op)
        self.op, self.label, self.n, self.tokens = op, f"{dname} {tokens}x{n} {op}", n, tokens

    def rule(self):
        """The rule's launch for this case, as the op takes it (``launch.table_config``)."""
        return launch.table_config(self.x, self.r, self.w, self.y, res=self.res)

    def candidates(self) -> list:
        """The tuner's candidates of this case, the rule's launch first (``forward_candidates``)."""
        grid = forward_candidates(self.n, self.x.element_size(), launch._max_splits(0), n_rows=self.tokens,
                                  stores_residual=self.res is not None, fp16=self.x.dtype == torch.float16)
        return list(dict.fromkeys([self.rule(), *grid[1:]]))

    def run(self, cfg) -> None:
        launch.forward_rows(self.x, self.r, self.w, 1e-6, self.y, res=self.res, cfg=cfg)

    def check(self, cfg) -> None:
        """ValueError where ``cfg``'s y, or x + residual where stored, is wrong; the residual is restored."""
        x, r, y = self.x, self.r, self.y
        r0 = r.clone()
        y.fill_(float("nan"))
        self.run(cfg)
        ref = F.rms_norm(x.double() + r0.double(), (self.n,), eps=1e-6) * self.w.double()
        summed = self.res is None or _rounded_sum(self.res, x, r0)
        r.copy_(r0)  # first: a wrong candidate must not leave its residual to the next
        if not summed:
            raise ValueError("wrong x + residual")
        err = (y.double() - ref).abs().max().item()
        if not err <= 2 * torch.finfo(x.dtype).eps * ref.abs().max().item():
            raise ValueError(f"wrong result, max error {err:.3g}")

    def floor(self) -> None:
        if self.op == "forward":
            torch.add(self.x, self.r, out=self.y)
        else:
            torch.addcmul(self.x, self.r, self.z, out=self.y)

    def timer(self):
        """The suite's timer at this token count (``benchmarks._measure.TIMERS``)."""
        return TIMERS[method(self.tokens)]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--op", choices=["forward", "inference", "forward+residual"], default="inference")
    ap.add_argument("--dtypes", default="bf16")
    ap.add_argument("--widths", default=",".join(map(str, WIDTHS)))
    ap.add_argument("--tokens", default="8192")
    ap.add_argument("--json", type=new_json_path, help="write every measured candidate to this new file as well")
    a = ap.parse_args()
    need_device(ap)
    try:
        dtypes, widths, tokens = dtype_names(a.dtypes), counts(a.widths, "--widths"), counts(a.tokens, "--tokens")
    except ValueError as e:
        ap.error(str(e))
    header()
    rows_out, failed, done = [], [], 0
    try:
        for dname, n, tokens in itertools.product(dtypes, widths, tokens):
            label = f"{dname} {tokens}x{n} {a.op}"
            case = allocated(lambda: Case(a.op, dname, n, tokens), label)
            rows = sweep(label, case.candidates(), case.run, case.check, case.floor, case.timer()) if case else []
            failed += [] if rows else [label]
            rows_out += rows
            del case
            if a.json:
                write_json(a.json, rows_out)
            done += bool(rows)  # a case with rows in --json
    except KeyboardInterrupt:
        return interrupted(done, a.json)
    return exit_status(failed)


if __name__ == "__main__":
    sys.exit(main())

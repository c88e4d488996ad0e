"""The implementations the suite compares: the fused op and its peers.

The peers live with the suite, not in the package: asv imports the package
from each benchmarked commit, and the peers must be the same code at every
commit (and exist at old ones). Each entry builds ``f(x, residual, weight)``
for one op; the inputs are the suite's own, so no argument checks here.

* ``fused``: ``fusedkernel.add_rmsnorm``.
* ``compiled``: ``torch.compile`` (inductor, ``dynamic=False``: one kernel
  specialized per shape, the fastest inductor does for a tracked shape) of
  the eager chain.
* ``liger``: Liger-Kernel's ``LigerFusedAddRMSNormFunction`` (optional,
  ``liger-kernel==0.8.5``); one program per row, so hidden size <= 65536. It
  always writes the residual sum.
* ``eager``: ``t = x + residual; F.rms_norm(t) * weight``: three kernels.

Rounding differs from the fused op's: the chain rounds ``t`` to x's dtype
before the norm and the norm before the weight multiply; Liger
(``casting_mode="llama"``) rounds the normalized row before the multiply.
"""

from __future__ import annotations

import functools

import torch
import torch.nn.functional as F

IMPLS = ["fused", "compiled", "liger", "eager"]
# Liger's kernel holds a whole row in one program (liger_kernel.ops.utils.calculate_settings).
LIGER_MAX_N = 65536


def _chain(x, residual, weight, eps):
    t = x + residual
    return F.rms_norm(t, (t.shape[-1],), eps=eps) * weight


def _chain_residual(x, residual, weight, eps):
    t = x + residual
    return F.rms_norm(t, (t.shape[-1],), eps=eps) * weight, t


@functools.cache
def _compiled(return_residual: bool):
    # Two graphs, so the y-only peer does not write t.
    return torch.compile(_chain_residual if return_residual else _chain, dynamic=False)


def _liger(n: int):
    if n > LIGER_MAX_N:
        raise NotImplementedError(f"Liger supports hidden size <= {LIGER_MAX_N}")
    try:
        from liger_kernel.ops.fused_add_rms_norm import LigerFusedAddRMSNormFunction
    except ImportError:
        raise NotImplementedError("liger-kernel is not installed (pip install liger-kernel==0.8.5)") from None
    return LigerFusedAddRMSNormFunction.apply


def implementation(impl: str, return_residual: bool, n: int, eps: float, interpret: bool):
    """``f(x, residual, weight)`` -> y, or (y, x + residual) with ``return_residual``.

    ``n``: the hidden size. NotImplementedError (asv: skipped) where ``impl``
    does not run the case (Liger: wider than 65536, not installed, or in
    Triton's interpreter); ValueError for an unknown ``impl``.
    """
    if impl == "fused":
        import fusedkernel

        return lambda x, r, w: fusedkernel.add_rmsnorm(x, r, w, eps, return_residual=return_residual)
    if impl == "compiled":
        fn = _compiled(return_residual)
        return lambda x, r, w: fn(x, r, w, eps)
    if impl == "eager":
        fn = _chain_residual if return_residual else _chain
        return lambda x, r, w: fn(x, r, w, eps)
    if impl == "liger":
        if interpret:
            raise NotImplementedError("Liger's kernels do not run in Triton's interpreter")
        apply = _liger(n)
        return lambda x, r, w: apply(x, r, w, eps)
    raise ValueError(f"impl must be one of {IMPLS}, got {impl!r}")

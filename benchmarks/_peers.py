"""The implementations the suite compares: the fused op and its peers.

The peers live with the suite, not in the package: asv imports the package
from each benchmarked commit, and the peers must be the same code at every
commit (and exist at old ones). Each entry builds ``f(x, residual, weight)``
for one op (``_cases.OPS``): ``forward`` and ``forward+backward`` return y,
``forward+residual`` (y, x + residual), ``inference`` y with the residual
buffer updated in place. The inputs are the suite's own: no argument checks.

* ``fused``: ``fusedkernel.add_rmsnorm``.
* ``compiled``: ``torch.compile`` (inductor, ``dynamic=False``: one kernel
  specialized per shape, the fastest inductor does for a tracked shape) of
  the eager chain.
* ``liger``: Liger-Kernel's ``LigerFusedAddRMSNormFunction`` (optional,
  ``liger-kernel==0.8.5``); one program per row, so hidden size <= 65536. It
  always writes the residual sum as a new tensor (also for ``inference``:
  the same bytes as an in-place update).
* ``quack``: quack's ``rmsnorm_fwd`` / ``rmsnorm`` (optional,
  ``quack-kernels==0.6.5``, CuTe DSL; Hopper and newer). Like Liger it writes
  the residual sum as a new tensor, also for ``inference``.
* ``eager``: ``t = x + residual; F.rms_norm(t) * weight``: three kernels.

Rounding differs from the fused op's: the chain rounds ``t`` to x's dtype
before the norm and the norm before the weight multiply; Liger
(``casting_mode="llama"``) rounds the normalized row before the multiply.
"""

from __future__ import annotations

import functools
from typing import NoReturn

import torch
import torch.nn.functional as F

IMPLS = ["fused", "compiled", "liger", "quack", "eager"]
# Liger's kernel holds a whole row in one program (liger_kernel.ops.utils.calculate_settings).
LIGER_MAX_N = 65536


def _chain(x, residual, weight, eps):
    t = x + residual
    return F.rms_norm(t, (t.shape[-1],), eps=eps) * weight


def _chain_residual(x, residual, weight, eps):
    t = x + residual
    return F.rms_norm(t, (t.shape[-1],), eps=eps) * weight, t


def _chain_inplace(x, residual, weight, eps):
    residual.add_(x)
    return F.rms_norm(residual, (residual.shape[-1],), eps=eps) * weight


CHAINS = {"forward": _chain, "forward+residual": _chain_residual, "inference": _chain_inplace,
          "forward+backward": _chain}


@functools.cache
def _compiled(chain):
    # One graph per op, so the y-only peer does not write t.
    return torch.compile(chain, dynamic=False)


def _liger(n: int):
    if n > LIGER_MAX_N:
        raise NotImplementedError(f"Liger supports hidden size <= {LIGER_MAX_N}")
    try:
        from liger_kernel.ops.fused_add_rms_norm import LigerFusedAddRMSNormFunction
    except ImportError as e:
        _not_installed(e, "liger_kernel", "liger-kernel is not installed (pip install liger-kernel==0.8.5)")
    return LigerFusedAddRMSNormFunction.apply


def _not_installed(e: ImportError, package: str, skip: str) -> NoReturn:
    """Skip (NotImplementedError) where ``package`` is absent; a broken or other-version install is the peer's
    failure (RuntimeError, shown as such), not a skip that reads "not installed"."""
    if isinstance(e, ModuleNotFoundError) and e.name == package:
        raise NotImplementedError(skip) from None
    raise RuntimeError(f"{package} is installed but does not import: {type(e).__name__}: {e}") from e


def _quack():
    try:
        from quack.rmsnorm import rmsnorm, rmsnorm_fwd
    except ImportError as e:
        _not_installed(e, "quack", "quack-kernels is not installed (pip install quack-kernels==0.6.5; docs/runner.md)")
    return rmsnorm, rmsnorm_fwd


def implementation(impl: str, op: str, n: int, eps: float, interpret: bool):
    """``f(x, residual, weight)`` running ``op`` with ``impl`` (see the module docstring).

    ``n``: the hidden size. NotImplementedError (asv: skipped) where ``impl``
    does not run the case (Liger: wider than 65536, not installed, or in
    Triton's interpreter; quack: not installed or no GPU); RuntimeError for
    an install that does not import; ValueError for an unknown ``impl`` or ``op``.
    """
    if op not in CHAINS:
        raise ValueError(f"op must be one of {list(CHAINS)}, got {op!r}")
    if impl == "fused":
        import fusedkernel

        if op == "inference":
            return lambda x, r, w: fusedkernel.add_rmsnorm(x, r, w, eps, inplace_residual=True)[0]
        residual = op == "forward+residual"
        return lambda x, r, w: fusedkernel.add_rmsnorm(x, r, w, eps, return_residual=residual)
    if impl in ("compiled", "eager"):
        fn = _compiled(CHAINS[op]) if impl == "compiled" else CHAINS[op]
        return lambda x, r, w: fn(x, r, w, eps)
    if impl == "liger":
        if interpret:
            raise NotImplementedError("Liger's kernels do not run in Triton's interpreter")
        apply = _liger(n)
        if op in ("forward", "forward+backward", "inference"):
            return lambda x, r, w: apply(x, r, w, eps)[0]
        return lambda x, r, w: apply(x, r, w, eps)
    if impl == "quack":
        if interpret:
            raise NotImplementedError("quack's kernels need a GPU (CuTe DSL), not Triton's interpreter")
        rmsnorm, rmsnorm_fwd = _quack()
        if op == "forward+backward":
            return lambda x, r, w: rmsnorm(x, w, residual=r, eps=eps)
        if op == "forward+residual":
            return lambda x, r, w: rmsnorm_fwd(x, w, residual=r, eps=eps)[:2]
        return lambda x, r, w: rmsnorm_fwd(x, w, residual=r, eps=eps)[0]
    raise ValueError(f"impl must be one of {IMPLS}, got {impl!r}")

"""The peers the suite compares against: the eager chain, its torch.compile, and Liger.

All take the fused op's arguments and run its checks, so a benchmark can swap
implementations freely. Their rounding differs from the fused op's: eager
rounds ``t = x + residual`` to x's dtype before the norm, and ``F.rms_norm``'s
output before the weight multiply; Liger (``casting_mode="llama"``) rounds
the normalized row before the weight multiply.
"""

from __future__ import annotations

import functools

import torch
import torch.nn.functional as F

from ._validation import check_inputs

# Liger's kernel holds a whole row in one program (liger_kernel.ops.utils.calculate_settings).
LIGER_MAX_N = 65536


def _chain(x, residual, weight, eps):
    t = x + residual
    return F.rms_norm(t, (t.shape[-1],), eps=eps) * weight


def _chain_residual(x, residual, weight, eps):
    t = x + residual
    return F.rms_norm(t, (t.shape[-1],), eps=eps) * weight, t


def add_rmsnorm_eager(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor,
                      eps: float = 1e-6, *, return_residual: bool = False):
    """Eager baseline: ``t = x + residual; y = F.rms_norm(t, (N,), eps=eps) * weight``.

    Three kernels (add, rms_norm, mul). Shapes and dtypes as for
    :func:`fusedkernel.add_rmsnorm`; a float32 weight promotes y to float32,
    as PyTorch's type promotion does. Returns y, or ``(y, t)`` with
    ``return_residual=True`` (t in x's dtype). Differentiable by autograd.
    Raises the same TypeError / ValueError for dtypes, shapes, devices and
    eps; unlike the fused op it accepts any layout (transposed, permuted), as
    PyTorch does.
    """
    eps = check_inputs(x, residual, weight, eps)
    return (_chain_residual if return_residual else _chain)(x, residual, weight, eps)


@functools.cache
def _compiled(return_residual: bool):
    # Built on first use so importing fusedkernel never starts a compiler.
    # dynamic=False: one kernel specialized per shape, the fastest inductor can
    # do for the shapes the suite tracks. Two graphs, so the y-only peer does
    # not write t.
    return torch.compile(_chain_residual if return_residual else _chain, dynamic=False)


def add_rmsnorm_compiled(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor,
                         eps: float = 1e-6, *, return_residual: bool = False):
    """``torch.compile`` of the eager chain (inductor, ``dynamic=False``).

    Same arguments, checks, outputs and rounding as :func:`add_rmsnorm_eager`;
    the backward is compiled too (AOTAutograd). The first call per shape,
    dtype and eps value compiles (seconds; eps is a Python float, which
    torch.compile specializes on); later calls reuse the kernel. Past
    torch.compile's recompile limit (``torch._dynamo.config.recompile_limit``,
    8 by default) further variants run the eager chain.

    Raises: as :func:`add_rmsnorm_eager`, and ValueError for a lazily negated
    input (``torch._neg_view``, ``.conj().imag``), whose sign torch.compile
    would drop.
    """
    eps = check_inputs(x, residual, weight, eps)
    # torch.compile drops the lazy negation bit of a graph input (torch 2.11,
    # 2.13): the compiled chain would compute with the unnegated values.
    for name, t in (("x", x), ("residual", residual), ("weight", weight)):
        if t.is_neg():
            raise ValueError(f"{name} is a lazy negation view; pass {name}.resolve_neg()")
    return _compiled(return_residual)(x, residual, weight, eps)


def add_rmsnorm_liger(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor,
                      eps: float = 1e-6) -> tuple[torch.Tensor, torch.Tensor]:
    """Liger-Kernel's fused add + RMSNorm (``LigerFusedAddRMSNormFunction``, liger-kernel 0.8.5).

    Returns ``(y, t)``: Liger always writes the residual sum (4 row-trips).
    Differentiable (Liger's own Triton backward). CUDA only: its kernel does
    not run in Triton's interpreter.

    Raises:
        ImportError: liger_kernel is not installed (an optional peer:
            ``pip install liger-kernel==0.8.5``).
        ValueError: hidden size N > 65536 (Liger holds a whole row in one
            program), or any input the fused op refuses.
        TypeError: as :func:`fusedkernel.add_rmsnorm`.
    """
    eps = check_inputs(x, residual, weight, eps)
    if x.shape[-1] > LIGER_MAX_N:
        raise ValueError(f"x's hidden size must be <= {LIGER_MAX_N} for Liger, got {x.shape[-1]}")
    try:
        from liger_kernel.ops.fused_add_rms_norm import LigerFusedAddRMSNormFunction
    except ImportError as e:
        raise ImportError("add_rmsnorm_liger needs liger-kernel: pip install liger-kernel==0.8.5") from e
    return LigerFusedAddRMSNormFunction.apply(x, residual, weight, eps)

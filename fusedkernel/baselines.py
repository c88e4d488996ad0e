"""The peers the suite tracks: the eager three-kernel chain and its torch.compile.

Both take the fused op's arguments and run its checks, so a benchmark can swap
implementations freely. Their rounding differs from the fused op's: eager
rounds ``t = x + residual`` to x's dtype before the norm, and ``F.rms_norm``'s
output before the weight multiply.
"""

from __future__ import annotations

import functools

import torch
import torch.nn.functional as F

from ._validation import check_inputs


def _chain(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    t = x + residual
    return F.rms_norm(t, (t.shape[-1],), eps=eps) * weight


def add_rmsnorm_eager(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor,
                      eps: float = 1e-6) -> torch.Tensor:
    """Eager baseline: ``t = x + residual; y = F.rms_norm(t, (N,), eps=eps) * weight``.

    Three kernels (add, rms_norm, mul). Shapes and dtypes as for
    :func:`fusedkernel.add_rmsnorm`; a float32 weight promotes y to float32,
    as PyTorch's type promotion does. Raises the same TypeError / ValueError
    for dtypes, shapes, devices and eps; unlike the fused op it accepts any
    layout (transposed, permuted), as PyTorch does.
    """
    return _chain(x, residual, weight, check_inputs(x, residual, weight, eps))


@functools.cache
def _compiled_chain():
    # Built on first use so importing fusedkernel never starts a compiler.
    # dynamic=False: one kernel specialized per shape, the fastest inductor can
    # do for the shapes the suite tracks.
    return torch.compile(_chain, dynamic=False)


def add_rmsnorm_compiled(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor,
                         eps: float = 1e-6) -> torch.Tensor:
    """``torch.compile`` of the eager chain (inductor, ``dynamic=False``).

    Same arguments, checks and rounding as :func:`add_rmsnorm_eager`. The first
    call per shape, dtype and eps value compiles (seconds; eps is a Python
    float, which torch.compile specializes on); later calls reuse the kernel.
    Past torch.compile's recompile limit (``torch._dynamo.config.recompile_limit``,
    8 by default) further variants run the eager chain.
    """
    return _compiled_chain()(x, residual, weight, check_inputs(x, residual, weight, eps))

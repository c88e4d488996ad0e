"""``FusedAddRMSNorm``: the fused op as a drop-in ``nn.Module`` for decoder layers."""

from __future__ import annotations

import numbers

import torch
from torch import nn

from ._validation import FLOAT_DTYPES, check_eps, type_name
from .ops import add_rmsnorm


class FusedAddRMSNorm(nn.Module):
    """Residual add + RMSNorm with a learned weight, for a decoder layer.

    ``y, residual = norm(x, residual)`` replaces ``residual = x + residual;
    y = rms_norm(residual) * weight``. Semantics, dtypes and errors are those
    of :func:`fusedkernel.add_rmsnorm`.

    Args:
        hidden_size: N, the last dimension of the inputs (>= 1).
        eps: added to the mean square; finite, a normal float32 number.
        device, dtype: of the weight (initialised to ones); dtype must be the
            inputs' dtype or float32.

    Raises:
        TypeError: hidden_size not an integer, dtype not float32/float16/
            bfloat16, eps not a real number.
        ValueError: hidden_size < 1 or >= 2**63, eps out of range (see add_rmsnorm).

    ``inplace_residual=True`` needs no gradient, and the weight is a
    Parameter: call it under ``torch.no_grad()`` or ``torch.inference_mode()``.
    """

    def __init__(self, hidden_size: int, eps: float = 1e-6, *, device=None, dtype=None):
        super().__init__()
        if isinstance(hidden_size, bool) or not isinstance(hidden_size, numbers.Integral):
            raise TypeError(f"hidden_size must be an int, got {type_name(hidden_size)}")
        if not 1 <= hidden_size < 2**63:
            raise ValueError(f"hidden_size must be >= 1 and < 2**63, got {hidden_size}")
        if dtype is not None and dtype not in FLOAT_DTYPES:
            raise TypeError(f"dtype must be float32, float16 or bfloat16, got {dtype}")
        self.eps = check_eps(eps)
        self.weight = nn.Parameter(torch.empty(int(hidden_size), device=device, dtype=dtype))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Set the weight to ones (as ``torch.nn.RMSNorm``; also after ``to_empty`` from the meta device)."""
        nn.init.ones_(self.weight)

    def forward(self, x: torch.Tensor, residual: torch.Tensor, *,
                inplace_residual: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
        """Return ``(y, x + residual)``; with ``inplace_residual`` the sum is written into ``residual``.

        Raises: as :func:`fusedkernel.add_rmsnorm`; TypeError if inplace_residual is not a bool.
        """
        if type(inplace_residual) is not bool:
            raise TypeError(f"inplace_residual must be a Python bool, got {type_name(inplace_residual)}")
        if inplace_residual:
            return add_rmsnorm(x, residual, self.weight, self.eps, inplace_residual=True)
        return add_rmsnorm(x, residual, self.weight, self.eps, return_residual=True)

    def extra_repr(self) -> str:
        return f"{self.weight.shape[0]}, eps={self.eps}"

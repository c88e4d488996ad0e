"""fusedkernel: fused residual add + RMSNorm in Triton."""

from .module import FusedAddRMSNorm
from .ops import add_rmsnorm

__all__ = ["FusedAddRMSNorm", "add_rmsnorm"]
__version__ = "0.1.0"

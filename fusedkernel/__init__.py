"""fusedkernel: fused residual add + RMSNorm in Triton, and its eager / compiled peers."""

from .baselines import add_rmsnorm_compiled, add_rmsnorm_eager
from .module import FusedAddRMSNorm
from .ops import add_rmsnorm

__all__ = ["FusedAddRMSNorm", "add_rmsnorm", "add_rmsnorm_compiled", "add_rmsnorm_eager"]
__version__ = "0.1.0"

"""fusedkernel: fused residual add + RMSNorm in Triton, and its peers (eager, torch.compile, Liger)."""

from .baselines import add_rmsnorm_compiled, add_rmsnorm_eager, add_rmsnorm_liger
from .module import FusedAddRMSNorm
from .ops import add_rmsnorm

__all__ = ["FusedAddRMSNorm", "add_rmsnorm", "add_rmsnorm_compiled", "add_rmsnorm_eager", "add_rmsnorm_liger"]
__version__ = "0.1.0"

"""The eager chain and its torch.compile compute the same function as the fused op."""

import pytest
import torch

from fusedkernel import add_rmsnorm_compiled, add_rmsnorm_eager
from helpers import rand, reference

# The chain rounds three times (the sum, the norm, the product): up to ~3 ulp.
RTOL = {torch.float32: 2e-5, torch.float16: 3 * 2.0**-10, torch.bfloat16: 3 * 2.0**-7}


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("op", [add_rmsnorm_eager, add_rmsnorm_compiled])
def test_baseline_matches_reference(op, dtype, device):
    x, r = rand((3, 5, 40), dtype, device, seed=1), rand((3, 5, 40), dtype, device, seed=2)
    w = rand((40,), dtype, device, seed=3)
    y = op(x, r, w, eps=1e-5)
    assert y.dtype == dtype and y.shape == x.shape
    torch.testing.assert_close(y.float(), reference(x, r, w, eps=1e-5), rtol=RTOL[dtype], atol=1e-4)

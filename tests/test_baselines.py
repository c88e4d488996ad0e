"""The peers (eager chain, its torch.compile, Liger) compute the same function as the fused op."""

import pytest
import torch

import importlib.util

from fusedkernel import add_rmsnorm_compiled, add_rmsnorm_eager, add_rmsnorm_liger
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


@pytest.mark.parametrize("op", [add_rmsnorm_eager, add_rmsnorm_compiled])
def test_baseline_returns_residual_sum_and_differentiates(op, device):
    x = rand((6, 48), torch.float32, device, seed=4).requires_grad_()
    r = rand((6, 48), torch.float32, device, seed=5).requires_grad_()
    w = rand((48,), torch.float32, device, seed=6).requires_grad_()
    y, t = op(x, r, w, eps=1e-5, return_residual=True)
    torch.testing.assert_close(t, x + r)
    torch.testing.assert_close(y, reference(x, r, w, eps=1e-5), rtol=RTOL[torch.float32], atol=1e-5)
    gx, gr, gw = torch.autograd.grad(y.sum(), (x, r, w))
    x64, r64, w64 = (a.detach().double().requires_grad_() for a in (x, r, w))
    ex, er, ew = torch.autograd.grad(reference(x64, r64, w64, eps=1e-5).sum(), (x64, r64, w64))
    for got, want in ((gx, ex), (gr, er), (gw, ew)):
        torch.testing.assert_close(got.double(), want, rtol=1e-4, atol=1e-5)


def test_liger_refuses_rows_wider_than_its_block(device):
    x = torch.zeros(1, 65537, device=device)
    with pytest.raises(ValueError, match="hidden size must be <= 65536 for Liger"):
        add_rmsnorm_liger(x, x, torch.ones(65537, device=device))


def test_liger_checks_arguments_like_the_fused_op(device):
    x = torch.zeros(2, 8, device=device)
    with pytest.raises(ValueError, match="weight must have shape"):
        add_rmsnorm_liger(x, x, torch.ones(9, device=device))


@pytest.mark.skipif(importlib.util.find_spec("liger_kernel") is not None, reason="liger-kernel is installed")
def test_liger_missing_is_a_clear_import_error(device):
    x = torch.zeros(2, 8, device=device)
    with pytest.raises(ImportError, match="pip install liger-kernel==0.8.5"):
        add_rmsnorm_liger(x, x, torch.ones(8, device=device))


@pytest.mark.cuda
@pytest.mark.skipif(importlib.util.find_spec("liger_kernel") is None, reason="liger-kernel not installed")
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_liger_matches_reference_on_gpu(dtype):
    x, r = rand((64, 4096), dtype, "cuda", seed=7), rand((64, 4096), dtype, "cuda", seed=8)
    w = rand((4096,), dtype, "cuda", seed=9)
    y, t = add_rmsnorm_liger(x, r, w, eps=1e-5)
    torch.testing.assert_close(t, x + r)
    torch.testing.assert_close(y.float(), reference(x, r, w, eps=1e-5), rtol=RTOL[dtype], atol=1e-3)

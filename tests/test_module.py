"""FusedAddRMSNorm drops into a decoder layer."""

import numpy as np
import pytest
import torch

from fusedkernel import FusedAddRMSNorm, add_rmsnorm
from helpers import rand


def test_forward_returns_output_and_residual_stream(device):
    norm = FusedAddRMSNorm(64, eps=1e-5, device=device, dtype=torch.bfloat16)
    x, r = rand((2, 3, 64), torch.bfloat16, device), rand((2, 3, 64), torch.bfloat16, device)
    y, res = norm(x, r)
    y_ref, res_ref = add_rmsnorm(x, r, norm.weight.detach(), 1e-5, return_residual=True)
    assert torch.equal(y, y_ref) and torch.equal(res, res_ref)


def test_inplace_residual_and_weight_gradient(device):
    norm = FusedAddRMSNorm(32, device=device)
    x, r = rand((4, 32), torch.float32, device), rand((4, 32), torch.float32, device)
    with torch.no_grad():
        _, res = norm(x, r, inplace_residual=True)
    assert res is r
    y, _ = norm(x, rand((4, 32), torch.float32, device))
    y.sum().backward()
    assert norm.weight.grad.shape == (32,) and torch.isfinite(norm.weight.grad).all()


@pytest.mark.parametrize("flag, shown", [(1, "int"), ("False", "str"), (np.bool_(False), "numpy.bool")])
def test_inplace_residual_flag_must_be_a_bool(flag, shown, device):
    # A truthy non-bool would update the residual in place without being asked to.
    norm = FusedAddRMSNorm(8, device=device)
    x, r = rand((2, 8), torch.float32, device), rand((2, 8), torch.float32, device)
    before = r.clone()
    # numpy.bool_ calls itself "bool": "must be a Python bool, got bool" read as a contradiction (a review's find).
    with torch.no_grad(), pytest.raises(TypeError, match=f"inplace_residual must be a Python bool, got {shown}$"):
        norm(x, r, inplace_residual=flag)
    assert torch.equal(r, before)


def test_reset_parameters_after_to_empty_from_meta(device):
    # The meta-device pattern (to_empty, then reset_parameters), as torch.nn.RMSNorm supports it.
    norm = FusedAddRMSNorm(16, device="meta").to_empty(device=device)
    norm.reset_parameters()
    assert torch.equal(norm.weight, torch.ones(16, device=device)) and isinstance(norm.weight, torch.nn.Parameter)


def test_save_load_deepcopy_and_dtype_casts(device, tmp_path):
    import copy

    norm = FusedAddRMSNorm(16, eps=1e-5, device=device)
    with torch.no_grad():
        norm.weight.copy_(rand((16,), torch.float32, device, seed=1))
    torch.save(norm.state_dict(), tmp_path / "norm.pt")
    loaded = FusedAddRMSNorm(16, eps=1e-5, device=device, dtype=torch.bfloat16)
    loaded.load_state_dict(torch.load(tmp_path / "norm.pt"))  # cast to the module's bf16, as nn.Module does
    assert loaded.weight.dtype == torch.bfloat16 and torch.equal(loaded.weight, norm.weight.bfloat16())
    twin = copy.deepcopy(norm).to(torch.bfloat16)
    x, r = rand((3, 16), torch.bfloat16, device, seed=2), rand((3, 16), torch.bfloat16, device, seed=3)
    torch.testing.assert_close(twin(x, r)[0], loaded(x, r)[0], rtol=0, atol=0)
    assert norm.weight.dtype == torch.float32 and twin.eps == norm.eps


def test_state_dict_and_repr(device):
    norm = FusedAddRMSNorm(16, device=device)
    assert list(norm.state_dict()) == ["weight"] and torch.equal(norm.weight, torch.ones(16, device=device))
    assert repr(norm) == "FusedAddRMSNorm(16, eps=1e-06)"


@pytest.mark.parametrize("hidden, exc, match", [
    (0, ValueError, "hidden_size must be >= 1"), (-3, ValueError, "hidden_size must be >= 1"),
    (10**30, ValueError, r"hidden_size must be >= 1 and < 2\*\*63, got 10+$"),
    (2.0, TypeError, "hidden_size must be an int, got float"),
    (True, TypeError, "hidden_size must be an int, got bool")])
def test_bad_hidden_size(hidden, exc, match):
    with pytest.raises(exc, match=match):
        FusedAddRMSNorm(hidden)


def test_numpy_integer_hidden_size_is_accepted():
    assert FusedAddRMSNorm(np.int64(16)).weight.shape == (16,)


@pytest.mark.parametrize("dtype", [torch.float64, torch.int32])
def test_bad_weight_dtype_is_refused_at_construction(dtype):
    with pytest.raises(TypeError, match="dtype must be float32, float16 or bfloat16"):
        FusedAddRMSNorm(16, dtype=dtype)


def test_bad_eps():
    with pytest.raises(ValueError, match="eps must be finite and > 0"):
        FusedAddRMSNorm(8, eps=0.0)

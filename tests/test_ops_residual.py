"""The residual stream: x + residual returned as a new tensor or written in place."""

import numpy as np
import pytest
import torch

from conftest import HAS_CUDA
from fusedkernel import add_rmsnorm
from helpers import assert_matches_reference, rand


def assert_rounded_sum(res, x, r):
    """res == float32(x) + float32(r) rounded to x's dtype (round to nearest even on the GPU).

    Triton 3.6's interpreter casts float32 to bfloat16 by truncation, so on
    CPU a bfloat16 element may sit one ulp below the correctly rounded value.
    """
    want = (x.float() + r.float()).to(x.dtype)
    if HAS_CUDA or x.dtype != torch.bfloat16:
        torch.testing.assert_close(res, want, rtol=0, atol=0)
    else:
        torch.testing.assert_close(res.float(), want.float(), rtol=2.0**-7, atol=0)

DTYPES = [torch.float32, torch.float16, torch.bfloat16]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("n", [1, 13, 4096, 40000])
def test_returned_residual_is_the_sum_rounded_once(dtype, n, device):
    x, r = rand((3, n), dtype, device), rand((3, n), dtype, device)
    w = rand((n,), dtype, device)
    y, res = add_rmsnorm(x, r, w, return_residual=True)
    assert res.dtype == dtype and res.shape == x.shape
    assert_rounded_sum(res, x, r)
    assert_matches_reference(y, x, r, w)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("n", [13, 4096, 40000])
def test_inplace_residual_updates_the_buffer(dtype, n, device):
    x, r = rand((4, n), dtype, device), rand((4, n), dtype, device)
    w = rand((n,), dtype, device)
    r_before = r.clone()
    y, res = add_rmsnorm(x, r, w, inplace_residual=True)
    assert res is r
    assert_rounded_sum(r, x, r_before)
    # The norm uses the float32 sum, not the rounded buffer.
    assert_matches_reference(y, x, r_before, w)


def test_inplace_residual_through_a_strided_view_leaves_other_columns(device):
    n = 48
    buf = rand((5, 2 * n), torch.bfloat16, device)
    before = buf.clone()
    x = rand((5, n), torch.bfloat16, device)
    add_rmsnorm(x, buf[:, :n], rand((n,), torch.bfloat16, device), inplace_residual=True)
    torch.testing.assert_close(buf[:, n:], before[:, n:], rtol=0, atol=0)
    assert_rounded_sum(buf[:, :n], x, before[:, :n])


def test_inplace_with_x_aliasing_residual(device):
    # x and residual are one buffer: every element is read before it is written.
    r = rand((3, 100), torch.float32, device)
    orig = r.clone()
    w = rand((100,), torch.float32, device)
    y, _ = add_rmsnorm(r, r, w, inplace_residual=True)
    torch.testing.assert_close(r, 2 * orig)
    assert_matches_reference(y, orig, orig, w)


def test_zero_rows_with_residual_outputs(device):
    x = torch.empty(0, 8, device=device)
    w = torch.ones(8, device=device)
    y, res = add_rmsnorm(x, x.clone(), w, return_residual=True)
    assert y.shape == res.shape == (0, 8)
    y, res = add_rmsnorm(x, x.clone(), w, inplace_residual=True)
    assert y.shape == res.shape == (0, 8)


def test_both_residual_outputs_is_an_error(device):
    x = rand((2, 8), torch.float32, device)
    with pytest.raises(ValueError, match="exclusive"):
        add_rmsnorm(x, x.clone(), torch.ones(8, device=device), return_residual=True, inplace_residual=True)


def test_inplace_residual_refused_when_a_gradient_is_needed(device):
    x = rand((2, 8), torch.float32, device).requires_grad_()
    with pytest.raises(ValueError, match="inplace_residual=True overwrites residual"):
        add_rmsnorm(x, rand((2, 8), torch.float32, device), torch.ones(8, device=device), inplace_residual=True)


# In-place updates whose result would depend on the order of reads and writes
# are refused (regressions: each of these used to return a wrong y or residual).
def test_inplace_refuses_weight_inside_residual(device):
    r = rand((4, 64), torch.float32, device)
    with pytest.raises(ValueError, match="weight overlaps residual's memory"):
        add_rmsnorm(rand((4, 64), torch.float32, device), r, r[0], inplace_residual=True)


def test_inplace_refuses_residual_rows_sharing_memory(device):
    r = torch.zeros(64, device=device).expand(4, 64)
    with pytest.raises(ValueError, match="residual has rows that share memory"):
        add_rmsnorm(rand((4, 64), torch.float32, device), r, torch.ones(64, device=device),
                    inplace_residual=True)


@pytest.mark.parametrize("shift", [1, 63, 64 + 5])
def test_inplace_refuses_x_partly_overlapping_residual(shift, device):
    buf = rand((4 * 64 + shift,), torch.float32, device)
    x, r = buf[shift:].view(4, 64), buf[:4 * 64].view(4, 64)
    with pytest.raises(ValueError, match="x overlaps residual's memory"):
        add_rmsnorm(x, r, torch.ones(64, device=device), inplace_residual=True)


def test_inplace_accepts_interleaved_rows_of_one_buffer(device):
    # x and residual as the two halves of each row of one buffer: no element shared.
    buf = rand((5, 128), torch.float32, device)
    before = buf.clone()
    w = rand((64,), torch.float32, device)
    y, r = add_rmsnorm(buf[:, 64:], buf[:, :64], w, inplace_residual=True)
    assert_matches_reference(y, before[:, 64:], before[:, :64], w)
    assert_rounded_sum(buf[:, :64], before[:, 64:], before[:, :64])


def test_inplace_bumps_the_version_counter(device):
    # A backward that saved residual before the update must raise, as with PyTorch's add_().
    x = rand((4, 64), torch.float32, device).requires_grad_()
    r, w = rand((4, 64), torch.float32, device), rand((64,), torch.float32, device)
    y = add_rmsnorm(x, r, w)
    version = r._version
    with torch.no_grad():
        add_rmsnorm(rand((4, 64), torch.float32, device), r, w, inplace_residual=True)
    assert r._version > version
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        y.sum().backward()


def test_inplace_refuses_inference_tensor_outside_inference_mode(device):
    with torch.inference_mode():
        r = rand((4, 64), torch.float32, device)
    x, w = rand((4, 64), torch.float32, device), rand((64,), torch.float32, device)
    with pytest.raises(ValueError, match="residual is an inference tensor"):
        add_rmsnorm(x, r, w, inplace_residual=True)
    with torch.inference_mode():
        add_rmsnorm(x, r, w, inplace_residual=True)


def test_inplace_bad_residual_layout_names_residual(device):
    r = rand((64, 4), torch.float32, device).t()
    with pytest.raises(ValueError, match="residual must have a contiguous last dimension"):
        add_rmsnorm(rand((4, 64), torch.float32, device), r, torch.ones(64, device=device),
                    inplace_residual=True)


@pytest.mark.parametrize("flags, got", [(dict(return_residual="no"), "got str and bool"),
                                        (dict(inplace_residual=1), "got bool and int"),
                                        (dict(return_residual=np.bool_(True)), "got numpy.bool")])
def test_residual_flags_must_be_bools(flags, got, device):
    x = rand((2, 8), torch.float32, device)
    with pytest.raises(TypeError, match=f"must be Python bools, {got}"):
        add_rmsnorm(x, x, torch.ones(8, device=device), **flags)


@pytest.mark.parametrize("form, stored", [({}, False), ({"return_residual": True}, True),
                                          ({"inplace_residual": True}, True)])
def test_the_launch_rule_is_told_whether_the_residual_is_stored(form, stored, device, monkeypatch):
    # The forward (y only) loads the weight first where a residual-storing launch does not
    # (docs/tuning.md#forward-weight-first: decode past 4096-wide tiles, and from 16384), so the
    # rule must be told which launch it is.
    from fusedkernel.kernels import launch

    asked, rule = [], launch.forward_config
    monkeypatch.setattr(launch, "forward_config", lambda *a: asked.append(a[5]) or rule(*a))
    x, r = rand((2, 5120), torch.bfloat16, device), rand((2, 5120), torch.bfloat16, device, seed=1)
    w = rand((5120,), torch.bfloat16, device, seed=2)
    x0, r0 = x.clone(), r.clone()
    out = add_rmsnorm(x, r, w, **form)
    assert asked == [stored]
    assert_matches_reference(out[0] if isinstance(out, tuple) else out, x0, r0, w)

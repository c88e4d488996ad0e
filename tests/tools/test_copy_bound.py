"""tools/kernel/copy_bound.py: a launch's copy moves the op's bytes (on the GPU, or in the interpreter without one)."""

import pathlib
import re
import sys

import pytest
import torch

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "tools" / "kernel"))
import copy_bound  # noqa: E402
from fusedkernel.kernels.config import ForwardConfig  # noqa: E402


@pytest.mark.parametrize("cfg", [
    ForwardConfig("rows", 1, 128, 1, 4, "first"),
    ForwardConfig("rows", 4, 128, 1, 4, "after_sum"),
    ForwardConfig("rows", 2, 32, 3, 2, "before_sum"),  # split: the last piece half masked
    ForwardConfig("persistent", 2, 128, 1, 4, "first", 2),
])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("stores", [True, False])
def test_a_copy_stores_the_sum_and_the_weighted_sum_of_every_element(cfg, dtype, stores, device):
    # 7 rows of 80: a partial last row block and masked columns; y and res start as NaN. On the test's device:
    # CPU tensors do not reach a GPU launch.
    g = torch.Generator().manual_seed(0)
    x, r = (torch.randn(7, 80, generator=g).to(dtype=dtype, device=device) for _ in range(2))
    w = torch.randn(80, generator=g).to(dtype=dtype, device=device)
    y = torch.full_like(x, float("nan"))
    res = torch.full_like(x, float("nan")) if stores else None
    copy_bound.copy_rows(x, r, w, y, res, cfg)
    t = x.float() + r.float()
    # bf16: the interpreter rounds float32 to bfloat16 by truncation (docs/op.md); so, within one bf16 step.
    tol = dict(rtol=2 ** -7, atol=0) if dtype == torch.bfloat16 else dict(rtol=0, atol=0)
    torch.testing.assert_close(y.float(), (t * w.float()).to(dtype).float(), **tol)
    if stores:
        torch.testing.assert_close(res.float(), t.to(dtype).float(), **tol)


@pytest.mark.parametrize("cfg", [ForwardConfig("looped", 1, 64, 1, 4, "after_sum"),
                                 ForwardConfig("rows", 1, 32, 2, 4, "first"),
                                 ForwardConfig("persistent", 1, 64, 1, 4, "first", 1)])
def test_a_launch_that_does_not_cover_the_row_is_refused(cfg):
    x = torch.zeros(2, 80)
    with pytest.raises(ValueError, match="a copy takes a rows or persistent launch covering the hidden size 80"):
        copy_bound.copy_rows(x, x, torch.zeros(80), x.clone(), None, cfg)


def _tensors(rows=4, n=80, dtype=torch.float32):
    x = torch.randn(rows, n).to(dtype)
    return x, torch.randn(rows, n).to(dtype), torch.randn(n).to(dtype), torch.empty(rows, n, dtype=dtype)


@pytest.mark.parametrize("bad, message", [
    # A review's finds: the kernel took every stride for the hidden size and read or wrote past the tensors.
    (lambda x, r, w, y: (x, r[:2], w, y), "residual must be contiguous, of x's shape (4, 80)"),
    (lambda x, r, w, y: (x, r, w, y[:2]), "y must be contiguous, of x's shape (4, 80)"),
    (lambda x, r, w, y: (torch.randn(4, 160)[:, :80], r, w, y), "x must be contiguous"),
    (lambda x, r, w, y: (x, r, w, y.to(torch.float16)), "y must be contiguous, of x's shape (4, 80) and dtype"),
    (lambda x, r, w, y: (x, r, w[:10], y), "weight must be contiguous, of shape (80,), got (10,)"),
    (lambda x, r, w, y: (x[0], r[0], w, y[0]), "x must be 2-D (rows, hidden size), got shape (80,)"),
])
def test_tensors_that_are_not_the_ops_layout_are_refused(bad, message):
    cfg = ForwardConfig("rows", 1, 128, 1, 4, "first")
    with pytest.raises(ValueError, match=re.escape(message)):
        copy_bound.copy_rows(*bad(*_tensors()), None, cfg)
    with pytest.raises(TypeError, match="cfg must be a ForwardConfig, got NoneType"):
        copy_bound.copy_rows(*_tensors(), None, None)


@pytest.mark.parametrize("bad, message", [
    # They reached Triton (an InterpreterError) or an AttributeError naming no argument.
    (lambda x, r, w, y: (x, None, w, y), "residual must be a torch.Tensor, got NoneType"),
    (lambda x, r, w, y: (x, r, w, None), "y must be a torch.Tensor, got NoneType"),
    (lambda x, r, w, y: (x.numpy(), r, w, y), "x must be a torch.Tensor, got ndarray"),
    (lambda x, r, w, y: (x, r, w.tolist(), y), "weight must be a torch.Tensor, got list"),
])
def test_arguments_that_are_not_tensors_are_refused(bad, message):
    cfg = ForwardConfig("rows", 1, 128, 1, 4, "first")
    with pytest.raises(TypeError, match=re.escape(message)):
        copy_bound.copy_rows(*bad(*_tensors()), None, cfg)
    with pytest.raises(TypeError, match=re.escape("residual output must be a torch.Tensor or None, got int")):
        copy_bound.copy_rows(*_tensors(), 0, cfg)

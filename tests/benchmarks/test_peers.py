"""The suite's peers (eager chain, its torch.compile, Liger) compute the same function as the fused op."""

import importlib.util
import sys

import pytest
import torch

from benchmarks import _peers
from benchmarks._measure import INTERPRET
from helpers import rand, reference

# The chain rounds three times (the sum, the norm, the product): up to ~3 ulp.
RTOL = {torch.float32: 2e-5, torch.float16: 3 * 2.0**-10, torch.bfloat16: 3 * 2.0**-7}


def impl(name, op="forward", n=40, eps=1e-5):
    return _peers.implementation(name, op, n, eps, INTERPRET)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("name", ["fused", "eager", "compiled"])
def test_peer_matches_reference(name, dtype, device):
    x, r = rand((3, 5, 40), dtype, device, seed=1), rand((3, 5, 40), dtype, device, seed=2)
    w = rand((40,), dtype, device, seed=3)
    y = impl(name)(x, r, w)
    assert y.dtype == dtype and y.shape == x.shape
    torch.testing.assert_close(y.float(), reference(x, r, w, eps=1e-5), rtol=RTOL[dtype], atol=1e-4)


@pytest.mark.parametrize("name", ["eager", "compiled"])
def test_peer_returns_residual_sum_and_differentiates(name, device):
    x = rand((6, 48), torch.float32, device, seed=4).requires_grad_()
    r = rand((6, 48), torch.float32, device, seed=5).requires_grad_()
    w = rand((48,), torch.float32, device, seed=6).requires_grad_()
    y, t = impl(name, "forward+residual", n=48)(x, r, w)
    torch.testing.assert_close(t, x + r)
    torch.testing.assert_close(y, reference(x, r, w, eps=1e-5), rtol=RTOL[torch.float32], atol=1e-5)
    gx, gr, gw = torch.autograd.grad(y.sum(), (x, r, w))
    x64, r64, w64 = (a.detach().double().requires_grad_() for a in (x, r, w))
    ex, er, ew = torch.autograd.grad(reference(x64, r64, w64, eps=1e-5).sum(), (x64, r64, w64))
    for got, want in ((gx, ex), (gr, er), (gw, ew)):
        torch.testing.assert_close(got.double(), want, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("name", ["fused", "eager", "compiled"])
def test_the_inference_call_writes_the_residual_sum_in_place(name, device):
    x, r = rand((4, 40), torch.float32, device, seed=10), rand((4, 40), torch.float32, device, seed=11)
    w = rand((40,), torch.float32, device, seed=12)
    want_r, want_y = x + r, reference(x, r, w, eps=1e-5)
    y = impl(name, "inference")(x, r, w)
    torch.testing.assert_close(r, want_r)
    torch.testing.assert_close(y, want_y, rtol=RTOL[torch.float32], atol=1e-5)


def test_unknown_implementation_or_op_is_refused():
    with pytest.raises(ValueError, match="impl must be one of"):
        impl("cublas")
    with pytest.raises(ValueError, match="op must be one of"):
        impl("eager", "backward")


# Optional peers: module to import, the install hint their skip names.
OPTIONAL = {"liger": ("liger_kernel", "pip install liger-kernel==0.8.5"),
            "quack": ("quack", "pip install quack-kernels==0.6.5")}


def test_liger_is_skipped_where_it_cannot_run():
    with pytest.raises(NotImplementedError, match="hidden size <= 65536"):
        _peers.implementation("liger", "forward", 65537, 1e-6, False)


@pytest.mark.parametrize("name", OPTIONAL)
def test_optional_peers_are_skipped_in_the_interpreter(name):
    with pytest.raises(NotImplementedError, match="interpreter"):
        _peers.implementation(name, "forward", 64, 1e-6, True)


@pytest.mark.parametrize("name", OPTIONAL)
def test_optional_peer_missing_is_a_skip_naming_the_package(name):
    module, hint = OPTIONAL[name]
    if importlib.util.find_spec(module) is not None:
        pytest.skip(f"{module} is installed")
    with pytest.raises(NotImplementedError, match=hint):
        _peers.implementation(name, "forward", 64, 1e-6, False)


# The module each optional peer imports its kernels from.
KERNEL_MODULES = {"liger": "liger_kernel/ops/fused_add_rms_norm.py", "quack": "quack/rmsnorm.py"}


@pytest.mark.parametrize("name", OPTIONAL)
def test_optional_peer_installed_but_broken_is_a_failure_not_a_skip(name, tmp_path, monkeypatch):
    # A review's find: any ImportError read "not installed" (a skip), a broken install or another version too.
    module = OPTIONAL[name][0]
    path = tmp_path / KERNEL_MODULES[name]
    path.parent.mkdir(parents=True)
    for folder in {path.parent, tmp_path / module}:
        (folder / "__init__.py").write_text("")
    path.write_text("from triton.language import no_such_name\n")  # an API that moved
    monkeypatch.syspath_prepend(str(tmp_path))
    for mod in [m for m in sys.modules if m == module or m.startswith(module + ".")]:
        monkeypatch.delitem(sys.modules, mod)
    with pytest.raises(RuntimeError, match=f"{module} is installed but does not import: ImportError"):
        _peers.implementation(name, "forward", 64, 1e-6, False)


@pytest.mark.cuda
@pytest.mark.parametrize("name", OPTIONAL)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_optional_peer_matches_reference_on_gpu(name, dtype):
    if importlib.util.find_spec(OPTIONAL[name][0]) is None:
        pytest.skip(f"{OPTIONAL[name][0]} is not installed")
    x, r = rand((64, 4096), dtype, "cuda", seed=7), rand((64, 4096), dtype, "cuda", seed=8)
    w = rand((4096,), dtype, "cuda", seed=9)
    y, t = impl(name, "forward+residual", n=4096)(x, r, w)
    torch.testing.assert_close(t, x + r)
    torch.testing.assert_close(y.float(), reference(x, r, w, eps=1e-5), rtol=RTOL[dtype], atol=1e-3)
    dx, = torch.autograd.grad(impl(name, "forward+backward", n=4096)(x.requires_grad_(), r, w).sum(), x)
    assert dx.shape == x.shape and torch.isfinite(dx).all()

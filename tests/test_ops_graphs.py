"""torch.compile tracing, CUDA-graph capture and device placement of the op."""

import pytest
import torch

from fusedkernel import FusedAddRMSNorm, add_rmsnorm
from helpers import assert_matches_reference, rand


def _layer(norm):
    def layer(x, r):
        y, r2 = norm(x * 2, r)
        return torch.sin(y), r2
    return layer


@pytest.mark.parametrize("grad", [False, True])
def test_compile_fullgraph_matches_eager(grad, device):
    torch._dynamo.reset()
    norm = FusedAddRMSNorm(48, device=device)
    layer = _layer(norm)
    x, r = rand((3, 48), torch.float32, device, seed=1), rand((3, 48), torch.float32, device, seed=2)
    xc, xe = x.clone().requires_grad_(grad), x.clone().requires_grad_(grad)
    yc, rc = torch.compile(layer, fullgraph=True)(xc, r)  # fullgraph: a graph break would raise
    ye, re_ = layer(xe, r)
    torch.testing.assert_close(yc, ye)
    torch.testing.assert_close(rc, re_)
    if grad:
        (yc.sum() + rc.sum()).backward()
        (ye.sum() + re_.sum()).backward()
        torch.testing.assert_close(xc.grad, xe.grad)


def test_compile_inplace_residual(device):
    torch._dynamo.reset()
    w = rand((40,), torch.float32, device)

    def step(x, r):
        return add_rmsnorm(x, r, w, inplace_residual=True)[0]

    x, r = rand((2, 40), torch.float32, device), rand((2, 40), torch.float32, device)
    r_eager = r.clone()
    y = torch.compile(step, fullgraph=True)(x, r)
    y_eager = step(x, r_eager)
    torch.testing.assert_close(y, y_eager)
    torch.testing.assert_close(r, r_eager)


@pytest.mark.cuda
# Decode (dweight summed in the backward's launch), a decode row split over
# programs (fp32 12288: 48 KiB); split rows and prefill rows (the sum launched
# as a programmatic dependent on Hopper).
@pytest.mark.parametrize("rows, n", [(64, 4096), (1, 12288), (64, 65536), (1024, 2880)])
def test_cuda_graph_capture_and_replay_forward_and_backward(rows, n):
    x = torch.randn(rows, n, device="cuda", requires_grad=True)
    r = torch.randn(rows, n, device="cuda")
    w = torch.randn(n, device="cuda", requires_grad=True)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm-up on a side stream, as torch's docs ask
        for _ in range(2):
            add_rmsnorm(x, r, w).sum().backward()
    torch.cuda.current_stream().wait_stream(side)
    x.grad = w.grad = None
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        y = add_rmsnorm(x, r, w)
        y.sum().backward()
    for _ in range(2):  # replay with new inputs copied into the captured buffers
        with torch.no_grad():
            x.copy_(torch.randn_like(x))
            r.copy_(torch.randn_like(r))
        graph.replay()
        torch.cuda.synchronize()
        assert_matches_reference(y, x.detach(), r, w.detach())
        xr = x.detach().clone().requires_grad_()
        wr = w.detach().clone().requires_grad_()
        t = xr + r
        (t * torch.rsqrt(t.pow(2).mean(-1, keepdim=True) + 1e-6) * wr).sum().backward()
        torch.testing.assert_close(x.grad, xr.grad, rtol=1e-4, atol=1e-4)
        torch.testing.assert_close(w.grad, wr.grad, rtol=1e-4, atol=1e-3)


@pytest.mark.cuda
@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two GPUs")
def test_launch_follows_the_tensors_device():
    torch.cuda.set_device(0)
    x = torch.randn(8, 70000, device="cuda:1", requires_grad=True)
    r = torch.randn(8, 70000, device="cuda:1")
    w = torch.randn(70000, device="cuda:1")
    y = add_rmsnorm(x, r, w)
    y.sum().backward()
    assert y.device == x.grad.device == torch.device("cuda:1")
    assert torch.cuda.current_device() == 0
    assert_matches_reference(y, x.detach(), r, w)


@pytest.mark.cuda
@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two GPUs")
@pytest.mark.parametrize("n", [4096, 65536])  # whole-row tile; split rows (slots per device)
def test_same_launch_alternating_between_devices(n):
    # One launch setting on both GPUs, in turn: the launcher's cache of compiled
    # kernels (whose handles belong to one device) must be kept per device.
    torch.cuda.set_device(0)
    for index in (0, 1, 0, 1):
        dev = f"cuda:{index}"
        x, r = torch.randn(64, n, device=dev), torch.randn(64, n, device=dev)
        w = torch.randn(n, device=dev)
        y, res = add_rmsnorm(x, r, w, return_residual=True)
        torch.cuda.synchronize(dev)
        assert y.device == res.device == x.device
        assert_matches_reference(y, x, r, w)
        torch.testing.assert_close(res, x + r)
    assert torch.cuda.current_device() == 0

"""The native launch lane: the Python path's results bit for bit, and the Python path for what it declines."""

import os
import subprocess
import sys

import pytest
import torch

import fusedkernel
from fusedkernel.kernels import launch, native

from helpers import assert_matches_reference, kernels_seen_by_launch_hook

DTYPES = [torch.bfloat16, torch.float16, torch.float32]


class _Lane:
    """native.forward (looked up per call: enable() sets it) with add_rmsnorm's defaults for the flags."""

    @staticmethod
    def forward(x, r, w, eps, return_residual=False, inplace_residual=False):
        return native.forward(x, r, w, eps, return_residual, inplace_residual)


@pytest.fixture
def lane():
    try:
        native.enable()
    except RuntimeError as e:
        if "Ninja is required" in str(e):  # the lane is optional: no build tools, nothing to test
            pytest.skip(f"the native lane cannot be built here: {e}")
        raise
    yield _Lane
    native.disable()


@pytest.mark.skipif(torch.cuda.is_available(), reason="the interpreter's refusal")
def test_enable_refuses_without_a_gpu():
    with pytest.raises(RuntimeError, match="needs a CUDA build of torch and Triton 3.6.*TRITON_INTERPRET=1 is set"):
        native.enable()
    assert native.forward is None


def test_the_lanes_source_builds_and_declines_what_it_cannot_launch(tmp_path):
    # Built on any torch (CI's is a CPU build): a C++ error shows up without a GPU run.
    module = native.build(str(tmp_path))
    x = torch.zeros(2, 16)
    assert module.forward(x, x, torch.zeros(16), 1e-6, False, False) is None  # no kernel registered, CPU tensors
    assert module.forward(x, x, torch.zeros(16), 1e-6) is None  # wrong arity: the Python path reports it
    with pytest.raises(TypeError, match=r"register\(x, weight"):
        module.register(x, x)
    with pytest.raises(TypeError, match=r"register\(x, weight.*has_res\)"):
        module.register(x, x, 0, 128, 0, 1, 1)  # has_res must be a bool


def test_the_environment_switch_warns_and_keeps_the_python_path_when_the_lane_cannot_start():
    code = ("import torch, fusedkernel; from fusedkernel.kernels import native; assert native.forward is None; "
            "x = torch.ones(2, 16); print(fusedkernel.add_rmsnorm(x, x, torch.ones(16)).shape)")
    env = {**os.environ, "FUSEDKERNEL_NATIVE_LAUNCH": "1", "TRITON_INTERPRET": "1", "CUDA_VISIBLE_DEVICES": ""}
    run = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    assert "RuntimeWarning: FUSEDKERNEL_NATIVE_LAUNCH=1 but the native launch lane is off" in run.stderr
    assert "torch.Size([2, 16])" in run.stdout


def _python_path(x, r, w, eps=1e-6):
    y = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    launch.forward_rows(x, r, w, eps, y)
    return y


def _python_path_with_residual(x, r, w, eps=1e-6):
    y, res = torch.empty(x.shape, dtype=x.dtype, device=x.device), torch.empty(x.shape, dtype=x.dtype, device=x.device)
    launch.forward_rows(x, r, w, eps, y, res)
    return y, res


@pytest.mark.cuda
@pytest.mark.parametrize("weight_fp32", [False, True])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(1, 4096), (32, 4096), (3, 1024), (7, 16), (2, 3, 4096), (5, 8192)])
def test_lane_gives_the_python_paths_bits(lane, shape, dtype, weight_fp32):
    x, r = torch.randn(shape, device="cuda", dtype=dtype), torch.randn(shape, device="cuda", dtype=dtype)
    w = torch.randn(shape[-1], device="cuda", dtype=torch.float32 if weight_fp32 else dtype)
    # The lane takes contiguous tensors only (every row stride is N), and x + residual is symmetric:
    # a swapped or mixed-up stride or x/residual pointer cannot show here, nor change a result.
    want = _python_path(x, r, w, 1e-5)  # compiles the kernel, which registers it with the lane
    y = lane.forward(x, r, w, 1e-5)
    assert y is not None, "the lane declined the plain case"
    assert y.shape == x.shape and y.dtype == dtype and y.is_contiguous()
    torch.testing.assert_close(y, want, rtol=0, atol=0)
    torch.testing.assert_close(fusedkernel.add_rmsnorm(x, r, w, 1e-5), want, rtol=0, atol=0)


def _declined_cases():
    def wide_rows(x, r, w):
        return torch.cat([x, x], -1)[:, :4096], r, w

    def misaligned(x, r, w):
        return torch.cat([x.new_zeros(1), x.flatten()])[1:].view(x.shape), r, w

    def strided_weight(x, r, w):
        return x, r, torch.stack([w, w], -1)[:, 0]

    def subclass(x, r, w):
        class Sub(torch.Tensor):
            pass
        return x.as_subclass(Sub), r, w

    def negated(x, r, w):
        return x, torch._neg_view(r), w

    return {"row stride": (wide_rows, 1e-6), "misaligned": (misaligned, 1e-6),
            "strided weight": (strided_weight, 1e-6), "subclass": (subclass, 1e-6), "negated": (negated, 1e-6),
            "int eps": (lambda x, r, w: (x, r, w), 1), "subnormal eps": (lambda x, r, w: (x, r, w), 1e-39)}


@pytest.mark.cuda
@pytest.mark.parametrize("case", list(_declined_cases()))
def test_lane_declines_what_is_not_the_plain_case(lane, case):
    change, eps = _declined_cases()[case]
    x, r = torch.randn(2, 4096, device="cuda"), torch.randn(2, 4096, device="cuda")
    w = torch.randn(4096, device="cuda")
    _python_path(x, r, w)
    assert lane.forward(x, r, w, 1e-6) is not None
    x, r, w = change(x, r, w)
    assert lane.forward(x, r, w, eps) is None
    if case == "subnormal eps":
        with pytest.raises(ValueError, match="eps must be a normal float32 number"):
            fusedkernel.add_rmsnorm(x, r, w, eps)
    elif case == "negated":
        with pytest.raises(ValueError, match="residual is a lazy negation view"):
            fusedkernel.add_rmsnorm(x, r, w, eps)
    elif case == "strided weight":
        with pytest.raises(ValueError, match="weight must be contiguous"):
            fusedkernel.add_rmsnorm(x, r, w, eps)
    else:
        assert_matches_reference(fusedkernel.add_rmsnorm(x, r, w, eps), x.as_subclass(torch.Tensor), r, w, eps)


@pytest.mark.cuda
def test_lane_leaves_gradients_hidden_sizes_and_bad_input_to_the_python_path(lane):
    x, r = torch.randn(4, 1000, device="cuda"), torch.randn(4, 1000, device="cuda")
    w = torch.randn(1000, device="cuda")
    _python_path(x, r, w)
    assert lane.forward(x, r, w, 1e-6) is None  # 1000: not a multiple of 16
    x, r = torch.randn(2, 4096, device="cuda"), torch.randn(2, 4096, device="cuda")
    w = torch.randn(4096, device="cuda")
    _python_path(x, r, w)
    wg = w.clone().requires_grad_()
    assert lane.forward(x, r, wg, 1e-6) is None
    with torch.no_grad():
        assert lane.forward(x, r, wg, 1e-6) is not None
    y = fusedkernel.add_rmsnorm(x, r, wg)
    assert y.requires_grad
    y.sum().backward()
    assert wg.grad is not None
    with pytest.raises(ValueError, match="weight must have shape"):
        fusedkernel.add_rmsnorm(x, r, w[:-16])
    with pytest.raises(TypeError, match="residual must have x's dtype"):
        fusedkernel.add_rmsnorm(x, r.half(), w)


@pytest.mark.cuda
@pytest.mark.parametrize("hook_name", ["launch_enter_hook", "launch_exit_hook"])
def test_lane_steps_aside_for_triton_launch_hooks(lane, hook_name):
    x, r = torch.randn(2, 4096, device="cuda"), torch.randn(2, 4096, device="cuda")
    w = torch.randn(4096, device="cuda")
    want = _python_path(x, r, w)
    (declined, y), seen = kernels_seen_by_launch_hook(
        lambda: (lane.forward(x, r, w, 1e-6), fusedkernel.add_rmsnorm(x, r, w)), hook_name)
    assert declined is None and seen == ["_rows_kernel"]
    torch.testing.assert_close(y, want, rtol=0, atol=0)


@pytest.mark.cuda
def test_lane_launches_on_the_current_stream_and_is_captured_by_cuda_graphs(lane):
    x, r = torch.randn(32, 4096, device="cuda"), torch.randn(32, 4096, device="cuda")
    w = torch.randn(4096, device="cuda")
    _python_path(x, r, w)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        y = fusedkernel.add_rmsnorm(x, r, w)
        assert lane.forward(x, r, w, 1e-6) is not None
    side.synchronize()
    assert_matches_reference(y, x, r, w)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):  # a launch on another stream than the capturing one is not replayed
        y = lane.forward(x, r, w, 1e-6)
    assert y is not None
    x.copy_(torch.randn_like(x))
    graph.replay()
    torch.cuda.synchronize()
    assert_matches_reference(y, x, r, w)


@pytest.mark.cuda
def test_lane_declines_under_modes_wrappers_and_tracing(lane):
    from torch.utils._python_dispatch import TorchDispatchMode

    x, r = torch.randn(2, 4096, device="cuda"), torch.randn(2, 4096, device="cuda")
    w = torch.randn(4096, device="cuda")
    want = _python_path(x, r, w)
    assert lane.forward(x, r, w, 1e-6) is not None

    class Passthrough(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            return func(*args, **(kwargs or {}))

    with Passthrough():
        assert lane.forward(x, r, w, 1e-6) is None
    seen = []
    torch.func.functionalize(lambda a: seen.append(lane.forward(a, r, w, 1e-6)) or a)(x)
    assert seen == [None]  # a functionalization wrapper's data pointer is not its data
    assert lane.forward(torch._efficientzerotensor(x.shape, device="cuda"), r, w, 1e-6) is None
    with torch.autograd.forward_ad.dual_level():
        dual = torch.autograd.forward_ad.make_dual(x, torch.ones_like(x))
        with pytest.raises(NotImplementedError, match="no forward-mode AD"):
            fusedkernel.add_rmsnorm(dual, r, w)
    compiled = torch.compile(lambda a, b, c: fusedkernel.add_rmsnorm(a, b, c), fullgraph=True)
    torch.testing.assert_close(compiled(x, r, w), want, rtol=0, atol=0)


@pytest.mark.cuda
@pytest.mark.parametrize("weight_fp32", [False, True])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(1, 4096), (32, 4096), (3, 1024), (2, 3, 4096)])
def test_lane_residual_outputs_give_the_python_paths_bits(lane, shape, dtype, weight_fp32, monkeypatch):
    x, r = torch.randn(shape, device="cuda", dtype=dtype), torch.randn(shape, device="cuda", dtype=dtype)
    w = torch.randn(shape[-1], device="cuda", dtype=torch.float32 if weight_fp32 else dtype)
    want_y, want_res = _python_path_with_residual(x, r, w, 1e-5)  # registers the kernel with a residual output
    out = lane.forward(x, r, w, 1e-5, True, False)
    assert out is not None, "the lane declined return_residual"
    y, res = out
    assert res.shape == x.shape and res.dtype == dtype and res.is_contiguous()
    torch.testing.assert_close(y, want_y, rtol=0, atol=0)
    torch.testing.assert_close(res, want_res, rtol=0, atol=0)
    buf = r.clone()
    version = buf._version
    out = lane.forward(x, buf, w, 1e-5, False, True)
    assert out is not None, "the lane declined inplace_residual"
    assert out[1] is buf and buf._version == version + 1
    torch.testing.assert_close(out[0], want_y, rtol=0, atol=0)
    torch.testing.assert_close(buf, want_res, rtol=0, atol=0)
    # x being residual itself: each element is read, then overwritten by the same thread.
    same = x.clone()
    want_same = _python_path_with_residual(x, x, w, 1e-5)
    y, res = lane.forward(same, same, w, 1e-5, False, True)
    assert res is same
    torch.testing.assert_close(y, want_same[0], rtol=0, atol=0)
    torch.testing.assert_close(same, want_same[1], rtol=0, atol=0)
    # Through the op, in its return shapes, served by the lane.
    served = []
    forward = native.forward
    monkeypatch.setattr(native, "forward", lambda *args: served.append(forward(*args)) or served[-1])
    y, res = fusedkernel.add_rmsnorm(x, r, w, 1e-5, return_residual=True)
    torch.testing.assert_close(y, want_y, rtol=0, atol=0)
    torch.testing.assert_close(res, want_res, rtol=0, atol=0)
    buf = r.clone()
    y, res = fusedkernel.add_rmsnorm(x, buf, w, 1e-5, inplace_residual=True)
    assert res is buf
    torch.testing.assert_close(y, want_y, rtol=0, atol=0)
    torch.testing.assert_close(buf, want_res, rtol=0, atol=0)
    assert len(served) == 2 and None not in served


@pytest.mark.cuda
def test_lane_allocates_where_at_empty_would_or_declines():
    # Under the cudaMallocAsync backend at::empty allocates from another allocator than the default
    # one: the lane must allocate y from that one too (torch counts it) or leave the call to the Python path.
    code = ("import torch, fusedkernel; from fusedkernel.kernels import native; native.enable(); "
            "x = torch.randn(2, 4096, device='cuda'); w = torch.randn(4096, device='cuda'); "
            "want = fusedkernel.add_rmsnorm(x, x, w); before = torch.cuda.memory_allocated(); "
            "y = native.forward(x, x, w, 1e-6, False, False); "
            "grown = torch.cuda.memory_allocated() - before; "
            "print('declined' if y is None else f'served {grown} {torch.equal(y, want)}')")
    env = {**os.environ, "PYTORCH_CUDA_ALLOC_CONF": "backend:cudaMallocAsync"}
    run = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    assert run.stdout.split()[0] == "declined" or run.stdout.split() == ["served", str(2 * 4096 * 4), "True"], \
        run.stdout


@pytest.mark.cuda
def test_lane_leaves_unsafe_in_place_updates_and_bad_flags_to_the_python_path(lane):
    n = 4096
    x, r = torch.randn(2, n, device="cuda"), torch.randn(2, n, device="cuda")
    w = torch.randn(n, device="cuda")
    _python_path_with_residual(x, r, w)
    assert lane.forward(x, r.clone(), w, 1e-6, False, True) is not None
    buf = torch.randn(3 * n, device="cuda")
    # x overlapping residual (without being residual), weight inside residual.
    for xx, rr, ww, name in ((buf[:2 * n].view(2, n), buf[n:].view(2, n), w, "x"),
                             (x, buf[:2 * n].view(2, n), buf[n:2 * n], "weight")):
        assert lane.forward(xx, rr, ww, 1e-6, False, True) is None
        with pytest.raises(ValueError, match=f"{name} overlaps residual's memory"):
            fusedkernel.add_rmsnorm(xx, rr, ww, inplace_residual=True)
        assert lane.forward(xx, rr, ww, 1e-6, True, False) is not None  # nothing is written in place
    with torch.inference_mode():
        frozen = torch.randn(2, n, device="cuda")
        y, res = lane.forward(x, frozen, w, 1e-6, False, True)
        assert res is frozen and y.is_inference()
    assert lane.forward(x, frozen, w, 1e-6, False, True) is None
    with pytest.raises(ValueError, match="residual is an inference tensor"):
        fusedkernel.add_rmsnorm(x, frozen, w, inplace_residual=True)
    leaf = r.clone().requires_grad_()
    assert lane.forward(x, leaf, w, 1e-6, False, True) is None
    with pytest.raises(ValueError, match="inplace_residual=True overwrites residual"):
        fusedkernel.add_rmsnorm(x, leaf, w, inplace_residual=True)
    assert lane.forward(x, r, w, 1e-6, 1, False) is None
    with pytest.raises(TypeError, match="must be Python bools"):
        fusedkernel.add_rmsnorm(x, r, w, return_residual=1)
    assert lane.forward(x, r, w, 1e-6, True, True) is None
    with pytest.raises(ValueError, match="exclusive"):
        fusedkernel.add_rmsnorm(x, r, w, return_residual=True, inplace_residual=True)


@pytest.mark.cuda
def test_lanes_in_place_update_invalidates_a_backward_that_saved_residual(lane):
    x, w = torch.randn(2, 4096, device="cuda"), torch.randn(4096, device="cuda")
    _python_path_with_residual(x, x, w)
    leaf = torch.randn(2, 4096, device="cuda", requires_grad=True)
    buf = leaf * 1.0
    loss = (buf * buf).sum()  # saves buf
    with torch.no_grad():
        assert lane.forward(x, buf, w, 1e-6, False, True) is not None
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        loss.backward()


@pytest.mark.cuda
def test_lane_registers_only_the_tables_whole_row_kernel_of_the_plain_case(lane):
    from fusedkernel.kernels.config import ForwardConfig

    for n, dtype in ((65536, torch.bfloat16), (32768, torch.float32)):  # split rows
        x, r = torch.randn(2, n, device="cuda", dtype=dtype), torch.randn(2, n, device="cuda", dtype=dtype)
        w = torch.randn(n, device="cuda", dtype=dtype)
        _python_path(x, r, w)
        assert lane.forward(x, r, w, 1e-6) is None
    x, r = torch.randn(3, 2048, device="cuda"), torch.randn(3, 2048, device="cuda")
    w = torch.randn(2048, device="cuda")
    y = torch.empty_like(x)
    launch.forward_rows(x, r, w, 1e-6, y, cfg=ForwardConfig("rows", 1, 2048, 1, 4))  # an explicit config
    launch.forward_rows(x, r, w, 1e-6, y, rstd=torch.empty(3, device="cuda"))  # an rstd output
    assert lane.forward(x, r, w, 1e-6) is None and lane.forward(x, r, w, 1e-6, True, False) is None
    launch.forward_rows(x, r, w, 1e-6, y, res=torch.empty_like(x))  # a residual output: its own kernel
    assert lane.forward(x, r, w, 1e-6) is None and lane.forward(x, r, w, 1e-6, True, False) is not None
    want = _python_path(x, r, w)  # the table's plain launch registers
    torch.testing.assert_close(lane.forward(x, r, w, 1e-6), want, rtol=0, atol=0)
    with torch.inference_mode():
        y = lane.forward(x, r, w, 1e-6)
    assert y is not None and y.is_inference()
    native.disable()
    assert native.forward is None and fusedkernel.add_rmsnorm(x, r, w) is not None
    native.enable()  # kernels are forgotten, then registered again by the next Python-path launch
    assert lane.forward(x, r, w, 1e-6) is None
    fusedkernel.add_rmsnorm(x, r, w)
    torch.testing.assert_close(lane.forward(x, r, w, 1e-6), want, rtol=0, atol=0)


@pytest.mark.cuda
@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two GPUs")
def test_lane_serves_each_device_with_its_kernel_and_declines_under_another_current_device(lane):
    for index in (0, 1):
        x, r = torch.randn(32, 4096, device=f"cuda:{index}"), torch.randn(32, 4096, device=f"cuda:{index}")
        w = torch.randn(4096, device=f"cuda:{index}")
        with torch.cuda.device(index):
            want = _python_path(x, r, w)  # registers this device's kernel
            y = lane.forward(x, r, w, 1e-6)
            assert y is not None and y.device == x.device
            torch.testing.assert_close(y, want, rtol=0, atol=0)
        with torch.cuda.device(1 - index):
            assert lane.forward(x, r, w, 1e-6) is None  # the kernel belongs to x's device's context
            y = fusedkernel.add_rmsnorm(x, r, w)
            assert y.device == x.device
            torch.testing.assert_close(y, want, rtol=0, atol=0)

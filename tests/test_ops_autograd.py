"""Gradients of the fused op against autograd of the float64 reference."""

import pytest
import torch
from torch.library import opcheck

from fusedkernel import add_rmsnorm
from fusedkernel.kernels.config import BackwardConfig
from fusedkernel.kernels.launch import backward_rows, resident_per_sm, sum_shares
from helpers import rand

# dx, dresidual: one rounding of an fp32 value; dweight sums over rows in fp32.
TOL = {torch.float32: (1e-4, 1e-5), torch.float16: (4e-3, 2e-3), torch.bfloat16: (3e-2, 2e-2)}


def ref64(x, r, w, eps):
    t = x + r
    return t * torch.rsqrt(t.pow(2).mean(-1, keepdim=True) + eps) * w, t


def backward64(dy, x, r, w):
    """rstd of t = x + r (eps 1e-6), and dx, dw from kernels/backward.py's formula, all float64."""
    t = x.double() + r.double()
    rstd = torch.rsqrt(t.pow(2).mean(-1) + 1e-6)
    t_hat, g = t * rstd[:, None], dy.double() * w.double()
    return rstd, rstd[:, None] * (g - t_hat * (g * t_hat).mean(-1, keepdim=True)), (dy.double() * t_hat).sum(0)


def grads(fn, x, r, w, dy, dres):
    x, r, w = (t.detach().clone().requires_grad_() for t in (x, r, w))
    y, res = fn(x, r, w)
    loss = (y.double() * dy.double()).sum()
    if dres is not None:
        loss = loss + (res.double() * dres.double()).sum()
    loss.backward()
    return x.grad, r.grad, w.grad


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
# 20000: wider than BWD_MAX_TILE_N, the columns path.
@pytest.mark.parametrize("n", [1, 7, 300, 1280, 9000, 20000])
@pytest.mark.parametrize("with_res_grad", [False, True])
def test_gradients_match_float64_reference(dtype, n, with_res_grad, device):
    x, r, w = rand((5, n), dtype, device), rand((5, n), dtype, device), rand((n,), dtype, device)
    dy = rand((5, n), dtype, device)
    dres = rand((5, n), dtype, device) if with_res_grad else None
    got = grads(lambda a, b, c: add_rmsnorm(a, b, c, 1e-5, return_residual=True), x, r, w, dy, dres)
    want = grads(lambda a, b, c: ref64(a.double(), b.double(), c.double(), 1e-5), x, r, w, dy, dres)
    rtol, atol = TOL[dtype]
    for g, ref in zip(got, want):
        assert g.dtype == dtype
        ref = ref.double()
        torch.testing.assert_close(g.double(), ref, rtol=rtol, atol=atol * max(1.0, ref.abs().max().item()))


@pytest.mark.parametrize("cfg", [BackwardConfig("rows", 1, 64, 4, 2), BackwardConfig("columns", 2, 16, 4, 1),
                                 BackwardConfig("split", 1, 64, 4, 2),
                                 BackwardConfig("split", 1, 64, 4, 2, exchange_behind=True),
                                 pytest.param(BackwardConfig("split", 2, 16, 4, 2), marks=pytest.mark.cuda),
                                 pytest.param(BackwardConfig("split", 2, 16, 4, 2, exchange_behind=True),
                                              marks=pytest.mark.cuda)])
def test_backward_paths_stay_finite_where_dy_w_t_overflows_float32(cfg, device):
    # dy * w * t ~ 1e38 per element: its row sum overflows float32, but each
    # term scaled by rstd (~1e-16) does not, nor does the gradient.
    n, rows = 64, 3
    x = rand((rows, n), torch.float32, device, seed=1, scale=1e16)
    r = torch.zeros_like(x)
    dy = rand((rows, n), torch.float32, device, seed=2, scale=1e11)
    w = torch.full((n,), 1e11, device=device)
    rstd, want_dx, want_dw = backward64(dy, x, r, w)
    dx = torch.empty_like(x)
    dw = backward_rows(dy, None, x, r, w, rstd.float(), dx, cfg=cfg)
    torch.testing.assert_close(dx.double(), want_dx, rtol=1e-4, atol=1e-5 * want_dx.abs().max().item())
    torch.testing.assert_close(dw.double(), want_dw, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("n", [300, 20000])
def test_one_program_writes_dweight_in_the_weight_dtype(n, device):
    # A decode step (one row): the kernel's one fp32 share is final, stored in
    # weight's dtype (rounded once), with no reduction or cast kernel after it.
    x, r, dy = (rand((1, n), torch.bfloat16, device, seed=s) for s in (1, 2, 3))
    w = rand((n,), torch.bfloat16, device, seed=4)
    rstd, _, want = backward64(dy, x, r, w)
    dw = backward_rows(dy, None, x, r, w, rstd.float(), torch.empty_like(x))
    assert dw.dtype == torch.bfloat16 and dw.shape == (n,)
    torch.testing.assert_close(dw.double(), want, rtol=2.0**-7, atol=1e-6)


@pytest.mark.parametrize("kwargs, match", [
    (dict(path="colums"), r"path must be one of \('rows', 'columns', 'split'\)"),
    (dict(block_m=3), "block_m must be a power of two"),
    (dict(block_n=0), "block_n must be a power of two"),
    (dict(num_warps=6), "num_warps must be a power of two"),
    (dict(programs_per_sm=0), "programs_per_sm must be >= 1"),
    (dict(wait_warps=3), "wait_warps must be 0 or a power of two <= 32, got 3"),
    (dict(wait_warps=64), "wait_warps must be 0 or a power of two <= 32, got 64"),
    (dict(tail_n=24), "tail_n must be 0, or on the rows path a power of two below block_n"),
    (dict(tail_n=64), r"power of two below block_n \(64\), got 64 on the rows path"),
    (dict(tail_n=-8), "got -8 on the rows path"),
    (dict(path="split", tail_n=16), "got 16 on the split path"),
    (dict(exchange_behind=True), "exchange_behind is for the split path, got the rows path"),
    (dict(path="columns", exchange_behind=True), "got the columns path"),
])
def test_bad_backward_settings_are_refused(kwargs, match):
    with pytest.raises(ValueError, match=match):
        BackwardConfig(**{**dict(path="rows", block_m=1, block_n=64, num_warps=4, programs_per_sm=2), **kwargs})


@pytest.mark.parametrize("kwargs, match", [
    (dict(wait_warps=2.0), "wait_warps must be an int, got float 2.0"),
    (dict(programs_per_sm=1.5), "programs_per_sm must be an int, got float 1.5"),
    (dict(block_m=True), "block_m must be an int, got bool True"),
    (dict(tail_n=16.0), "tail_n must be an int, got float 16.0"),
    (dict(path="split", exchange_behind=1), "exchange_behind must be a bool, got 1"),
])
def test_backward_settings_of_the_wrong_type_are_refused(kwargs, match):
    with pytest.raises(TypeError, match=match):
        BackwardConfig(**{**dict(path="rows", block_m=1, block_n=64, num_warps=4, programs_per_sm=2), **kwargs})


def test_rows_path_narrower_than_the_row_is_refused(device):
    # It would leave the columns past block_n unwritten (and dweight there uninitialized).
    x = rand((5, 37), torch.float32, device)
    with pytest.raises(ValueError, match=r"block_n \+ tail_n must be >= the hidden size 37, got 16 \+ 0"):
        backward_rows(x, None, x, x, x[0], torch.ones(5, device=device), torch.empty_like(x),
                      cfg=BackwardConfig("rows", 1, 16, 4, 1))
    with pytest.raises(ValueError, match=r"got 32 \+ 4"):
        backward_rows(x, None, x, x, x[0], torch.ones(5, device=device), torch.empty_like(x),
                      cfg=BackwardConfig("rows", 1, 32, 4, 1, tail_n=4))


@pytest.mark.cuda
@pytest.mark.parametrize("rows, n", [(300, 70000), (2, 262144), (65536, 512)])
def test_backward_at_scale_on_gpu(rows, n):
    # Many row groups and column chunks (columns path) or many row blocks per
    # program (rows path), against the float64 formula on the same fp32 rstd.
    x, r, dy = (torch.randn(rows, n, dtype=torch.bfloat16, device="cuda") for _ in range(3))
    w = torch.randn(n, dtype=torch.bfloat16, device="cuda")
    rstd, want_dx, want_dw = backward64(dy, x, r, w)
    dx = torch.empty_like(x)
    dw = backward_rows(dy, None, x, r, w, rstd.float(), dx)
    assert dw.dtype == w.dtype
    torch.testing.assert_close(dx.double(), want_dx, rtol=2.0**-7, atol=1e-3 * want_dx.abs().max().item())
    # Summed in fp32, rounded once to bf16 (relative step 2**-8).
    torch.testing.assert_close(dw.double(), want_dw, rtol=2.0**-8, atol=1e-4 * want_dw.abs().max().item())


def test_float32_weight_gets_a_float32_gradient(device):
    x, r = rand((4, 64), torch.bfloat16, device), rand((4, 64), torch.bfloat16, device)
    w = rand((64,), torch.float32, device).requires_grad_()
    add_rmsnorm(x, r, w).float().sum().backward()
    assert w.grad.dtype == torch.float32 and torch.isfinite(w.grad).all()


def test_only_weight_requires_grad(device):
    x, r = rand((3, 32), torch.float32, device), rand((3, 32), torch.float32, device)
    w = rand((32,), torch.float32, device).requires_grad_()
    add_rmsnorm(x, r, w).sum().backward()
    t = x + r
    want = (t * torch.rsqrt(t.pow(2).mean(-1, keepdim=True) + 1e-6)).sum(0)
    torch.testing.assert_close(w.grad, want, rtol=1e-5, atol=1e-5)


def test_expanded_upstream_gradient(device):
    # sum() hands the backward an expanded (stride 0) gradient.
    x = rand((4, 16), torch.float32, device).requires_grad_()
    add_rmsnorm(x, rand((4, 16), torch.float32, device), rand((16,), torch.float32, device)).sum().backward()
    assert torch.isfinite(x.grad).all()


def test_zero_rows_backward(device):
    x = torch.empty(0, 8, device=device, requires_grad=True)
    w = torch.ones(8, device=device, requires_grad=True)
    add_rmsnorm(x, torch.empty(0, 8, device=device), w).sum().backward()
    assert x.grad.shape == (0, 8) and torch.equal(w.grad, torch.zeros(8, device=device))


@pytest.mark.parametrize("return_residual", [False, True])
def test_custom_op_registration(return_residual, device):
    # Schema, fake (meta) implementation and autograd registration, as torch checks them.
    x, r = rand((3, 40), torch.float32, device), rand((3, 40), torch.float32, device)
    w = rand((40,), torch.float32, device)
    opcheck(torch.ops.fusedkernel.add_rmsnorm_fwd.default,
            (x.requires_grad_(), r, w.requires_grad_(), 1e-6, return_residual))
    opcheck(torch.ops.fusedkernel.add_rmsnorm_inplace.default, (x.detach(), r.clone(), w.detach(), 1e-6))


@pytest.mark.parametrize("cfg", [BackwardConfig("rows", 1, 64, 4, 2), BackwardConfig("rows", 8, 64, 8, 8),
                                 # A row as two pieces: 32 + 8 exactly, and 32 + 16 with 8 columns masked.
                                 BackwardConfig("rows", 1, 32, 4, 2, tail_n=8),
                                 BackwardConfig("rows", 4, 32, 4, 3, tail_n=16),
                                 BackwardConfig("columns", 1, 16, 4, 1), BackwardConfig("columns", 4, 16, 4, 2),
                                 BackwardConfig("columns", 8, 8, 4, 1), BackwardConfig("columns", 2, 64, 8, 4),
                                 # One program per row: the split kernels run in the interpreter too.
                                 BackwardConfig("split", 2, 64, 4, 2), BackwardConfig("split", 4, 64, 4, 1),
                                 BackwardConfig("split", 2, 64, 4, 2, exchange_behind=True),
                                 BackwardConfig("split", 4, 64, 4, 1, exchange_behind=True),
                                 # Rows split over 3 and 5 programs, fewer lanes than row blocks.
                                 pytest.param(BackwardConfig("split", 1, 16, 4, 1), marks=pytest.mark.cuda),
                                 pytest.param(BackwardConfig("split", 2, 8, 4, 4), marks=pytest.mark.cuda),
                                 pytest.param(BackwardConfig("split", 1, 16, 4, 1, exchange_behind=True),
                                              marks=pytest.mark.cuda),
                                 pytest.param(BackwardConfig("split", 2, 8, 4, 4, exchange_behind=True),
                                              marks=pytest.mark.cuda)])
@pytest.mark.parametrize("with_dres", [False, True])
def test_backward_settings_match_float64(cfg, with_dres, device):
    # Every setting the backward sweep (tools/tune_backward.py) may pick computes the same gradients.
    n, rows = 40, 37
    x, r, dy, dres = (rand((rows, n), torch.float32, device, seed=s) for s in (1, 2, 3, 5))
    w = rand((n,), torch.float32, device, seed=4)
    rstd, want_dx, want_dw = backward64(dy, x, r, w)
    dx = torch.empty_like(x)
    dw = backward_rows(dy, dres if with_dres else None, x, r, w, rstd.float(), dx, cfg=cfg)
    want_dx = want_dx + (dres.double() if with_dres else 0)
    torch.testing.assert_close(dx.double(), want_dx, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(dw.double(), want_dw, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("parts, n", [(1, 5), (37, 300), (264, 4096)])
def test_dweight_shares_sum_to_the_float64_sum(dtype, parts, n, device):
    # Row counts that are not a multiple of the rows summed per step, widths
    # that are not a multiple of the columns per program.
    shares = rand((parts, n), torch.float32, device)
    dw = sum_shares(shares, dtype)
    assert dw.dtype == dtype and dw.shape == (n,)
    torch.testing.assert_close(dw, shares.double().sum(0).to(dtype), **dict(zip(("rtol", "atol"), TOL[dtype])))


@pytest.mark.cuda
@pytest.mark.parametrize("rows, n, dtype, kernels", [
    (32, 8192, torch.bfloat16, ["_bwd_rows_kernel"]),  # decode: one row block per program, in-launch sum
    ("SMs", 4096, torch.float32, ["_bwd_rows_kernel"]),
    # One program per SM walking many row blocks (prefill): the table's warps and the sum launch.
    # Taking the decode wait there ran 4 warps at fp32 4096: forward+backward 0.950 -> 0.900 of the floor.
    (8192, 4096, torch.float32, ["_bwd_rows_kernel", "_dw_sum_kernel"]),
    (4096, 8192, torch.bfloat16, ["_bwd_rows_kernel", "_dw_sum_kernel"])])
def test_backward_waits_for_itself_only_at_decode_on_gpu(rows, n, dtype, kernels):
    from helpers import kernels_seen_by_launch_hook

    if rows == "SMs":
        rows = torch.cuda.get_device_properties(0).multi_processor_count
    x, r, dy = (rand((rows, n), dtype, "cuda", seed=k) for k in range(3))
    w = rand((n,), dtype, "cuda", seed=3)
    rstd, want_dx, want_dw = backward64(dy, x, r, w)
    dx = torch.empty_like(x)
    dw, seen = kernels_seen_by_launch_hook(lambda: backward_rows(dy, None, x, r, w, rstd.float(), dx))
    assert seen == kernels
    rtol, atol = TOL[dtype]
    torch.testing.assert_close(dw.double(), want_dw, rtol=rtol, atol=atol * want_dw.abs().max().item())


@pytest.mark.cuda
@pytest.mark.parametrize("rows, n", [(2, 4096), (37, 300), (132, 4096), (133, 4096), (32, 8192), (8, 16384)])
def test_backward_sums_dweight_in_its_own_launch_on_gpu(rows, n):
    # Up to one program per SM (132 on the H200), the rows kernel waits for
    # its whole grid and sums dweight itself; 133 rows of 4096 take the
    # separate sum; such grids run the table's wait_warps (4 at 4096, 8 at
    # 8192, 16 at 16384). Three launches: the arrival counter is reused.
    for seed in (1, 2, 3):
        x, r, dy = (torch.randn(rows, n, device="cuda", generator=torch.Generator("cuda").manual_seed(seed + k))
                    for k in range(3))
        w = torch.randn(n, device="cuda")
        rstd, want_dx, want_dw = backward64(dy, x, r, w)
        dx = torch.empty_like(x)
        dw = backward_rows(dy, None, x, r, w, rstd.float(), dx)
        torch.testing.assert_close(dx.double(), want_dx, rtol=1e-4, atol=1e-5)
        torch.testing.assert_close(dw.double(), want_dw, rtol=1e-4, atol=1e-4)


@pytest.mark.cuda
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("rows, n", [(1, 16384), (37, 16385), (300, 100003), (5, 262144), (2, 270337),
                                     (1100, 20480), (999, 32768), (64, 16392), (77, 40003), (33, 65536)])
def test_split_backward_on_gpu(dtype, rows, n):
    # The table's split path: one row (a single lane, dweight stored
    # directly), odd row counts, a prime width (the last program of each row
    # partly masked), columns widened to keep a row within the SMs (270337
    # on the H200), and bf16 over 16384 wide (16385-270337), the 2-byte rows
    # whose exchange runs one row block behind (2048 columns, 2 per SM; 40003
    # and 65536: 4096 columns, 8 warps, at most 16 programs, 65536 with
    # 16-byte vectors; 270337 widened to 4096, 8 warps, 1 per SM). Three
    # launches: the exchange slots are reused with growing epochs.
    check_table_backward_on_gpu(dtype, rows, n, "split", ((1, True), (2, True), (3, True)))


# H200 (sm_90): 65536 registers, 2048 threads and 233472 bytes of shared memory per SM.
@pytest.mark.parametrize("n_regs, warps, shared, fit", [
    (126, 4, 32, 4),  # 128 a thread: 4 programs of 16384 registers
    (135, 4, 32, 3),  # rounded to 136 a thread: 17408 a program, 3 fit (bf16 20480's split kernel)
    (141, 8, 32, 1),
    (255, 4, 32, 2),
    (32, 16, 0, 4),  # threads: 2048 / 512
    (32, 4, 100_000, 2),  # shared memory, 1 KiB reserved per program
    (255, 32, 0, 0),  # 256 x 1024 registers: more than an SM has
])
def test_resident_per_sm_counts_registers_by_the_warp_threads_and_shared_memory(n_regs, warps, shared, fit):
    assert resident_per_sm(n_regs, warps, shared, (65536, 2048, 233472)) == fit


@pytest.mark.cuda
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
@pytest.mark.parametrize("rows, n", [(1, 2880), (3, 2056), (300, 3584), (133, 4104), (37, 5120), (8191, 6144),
                                     (8192, 2048)])
def test_whole_row_backward_at_model_widths_on_gpu(dtype, rows, n):
    # The rows path's persistent grid, which loads each program's next row
    # block ahead: two pieces (2880, 5120; 2056 and 4104 with 8 columns in the second), one row,
    # fewer row blocks than programs, and row counts that leave the last
    # programs one block short.
    check_table_backward_on_gpu(dtype, rows, n, "rows", ((1, False), (2, True)))


@pytest.mark.cuda
@pytest.mark.parametrize("rows, n", [(1, 8200), (37, 10240), (8192, 12288), (300, 4608)])
def test_whole_rows_in_two_pieces_on_gpu(rows, n):
    # bf16 rows held as two pieces, up to the widest whole row (8192 + 4096); 8200's second piece has
    # 8 columns of 8.
    check_table_backward_on_gpu(torch.bfloat16, rows, n, "rows", ((1, False), (2, True)))


@pytest.mark.cuda
@pytest.mark.parametrize("rows, n", [(8191, 7168), (3, 8192)])
def test_fp32_tiles_over_24_kib_split_on_gpu(rows, n):
    check_table_backward_on_gpu(torch.float32, rows, n, "split", ((1, False), (2, True)))


def check_table_backward_on_gpu(dtype, rows, n, path, runs):
    """The table's backward for (rows, n) takes ``path`` on this GPU and matches float64 for each
    (seed, with dres) of ``runs``, one launch each (so buffers are reused across launches)."""
    from fusedkernel.kernels.backward_rule import backward_config

    assert backward_config(n, dtype.itemsize, torch.cuda.get_device_properties(0).multi_processor_count).path == path
    for seed, with_dres in runs:
        x, r, dy, dres = (rand((rows, n), dtype, "cuda", seed=seed + k) for k in range(4))
        w = rand((n,), dtype, "cuda", seed=seed + 4)
        rstd, want_dx, want_dw = backward64(dy, x, r, w)
        dx = torch.empty_like(x)
        dw = backward_rows(dy, dres if with_dres else None, x, r, w, rstd.float(), dx)
        rtol, atol = TOL[dtype]
        want_dx = want_dx + dres.double() if with_dres else want_dx
        torch.testing.assert_close(dx.double(), want_dx, rtol=rtol, atol=atol * want_dx.abs().max().item())
        torch.testing.assert_close(dw.double(), want_dw, rtol=rtol, atol=atol * want_dw.abs().max().item())


@pytest.mark.parametrize("change, error, match", [
    # Each read past its end before: a wrong dweight, no error.
    (dict(rstd=lambda t: t["rstd"][:3].clone()), ValueError, r"rstd must be a contiguous \(6,\) tensor"),
    (dict(dy=lambda t: t["dy"][:5].clone()), ValueError, r"dy must have x's shape \(6, 40\)"),
    (dict(rstd=lambda t: t["rstd"].double()), TypeError, "rstd must be float32"),
    (dict(rstd=lambda t: torch.stack([t["rstd"], t["rstd"]], 1)[:, 0]), ValueError, "rstd must be a contiguous"),
    (dict(dy=lambda t: t["dy"].bfloat16()), TypeError, "dy must have x's dtype torch.float32"),
    (dict(dres=lambda t: t["dy"][:, :20].clone()), ValueError, "dres must have x's shape"),
    (dict(weight=lambda t: t["weight"][:39]), ValueError, r"weight must have shape \(40,\)"),
    # A meta tensor in one argument sent the call to the fake implementation: uninitialized dx on x's device.
    (dict(weight=lambda t: t["weight"].to("meta")), ValueError, "must be on one device"),
    (dict(rstd=lambda t: t["rstd"].to("meta")), ValueError, "rstd must be a contiguous")])
def test_backward_op_refuses_mismatched_arguments(change, error, match, device):
    # torch.ops.fusedkernel.add_rmsnorm_bwd is public: a direct call gets the forward's checks and more.
    x, r, dy = (rand((6, 40), torch.float32, device, seed=k) for k in range(3))
    t = {"dy": dy, "dres": None, "x": x, "residual": r, "weight": rand((40,), torch.float32, device, seed=3),
         "rstd": backward64(dy, x, r, x[0])[0].float()}
    good = torch.ops.fusedkernel.add_rmsnorm_bwd(*t.values())
    assert good[0].shape == x.shape
    t.update({k: f(t) for k, f in change.items()})
    with pytest.raises(error, match=match):
        torch.ops.fusedkernel.add_rmsnorm_bwd(*t.values())


def test_backward_op_on_meta_tensors_checks_and_gives_meta_outputs():
    x, r, dy = (torch.empty(3, 8, device="meta") for _ in range(3))
    w, rstd = torch.empty(8, device="meta"), torch.empty(3, device="meta")
    dx, dw = torch.ops.fusedkernel.add_rmsnorm_bwd(dy, None, x, r, w, rstd)
    assert dx.device.type == dw.device.type == "meta" and dx.shape == x.shape and dw.shape == w.shape
    with pytest.raises(ValueError, match=r"rstd must be a contiguous \(3,\) tensor"):
        torch.ops.fusedkernel.add_rmsnorm_bwd(dy, None, x, r, w, torch.empty(5, device="meta"))


def test_double_backward_says_it_is_not_supported(device):
    x, r = (rand((3, 8), torch.float32, device, seed=k).requires_grad_() for k in range(2))
    w = rand((8,), torch.float32, device, seed=2).requires_grad_()
    (gx,) = torch.autograd.grad(add_rmsnorm(x, r, w).pow(2).sum(), x, create_graph=True)  # the first is fine
    with pytest.raises(NotImplementedError, match="no double backward"):
        torch.autograd.grad(gx.sum(), (x, r, w))


@pytest.mark.parametrize("dual", ["x", "residual", "weight"])
def test_forward_mode_ad_is_refused(dual, device):
    # The kernel would read the primal and drop the tangent without a word.
    import torch.autograd.forward_ad as fwad

    args = {"x": rand((3, 8), torch.float32, device), "residual": rand((3, 8), torch.float32, device, seed=1),
            "weight": rand((8,), torch.float32, device, seed=2)}
    with fwad.dual_level():
        args[dual] = fwad.make_dual(args[dual], torch.ones_like(args[dual]))
        with pytest.raises(NotImplementedError, match="no forward-mode AD"):
            add_rmsnorm(args["x"], args["residual"], args["weight"])
    add_rmsnorm(*(fwad.unpack_dual(t).primal for t in args.values()))  # outside the level: fine


def test_dweight_share_sum_refuses_what_it_cannot_sum(device):
    from fusedkernel.kernels.backward_rule import dw_sum_config

    for bad in (torch.ones(5, 4, device=device).t(), torch.ones(4, 10, device=device)[:, :5],
                torch.ones(5, device=device), torch.ones(0, 5, device=device),
                torch.ones(3, 5, dtype=torch.float16, device=device)):
        with pytest.raises(ValueError, match="dw_part must be a contiguous float32"):
            sum_shares(bad, torch.float32)
    with pytest.raises(ValueError, match="n_parts must be an int >= 1"):
        dw_sum_config(0)


@pytest.mark.parametrize("op", ["add_rmsnorm_fwd", "add_rmsnorm_inplace"])
@pytest.mark.parametrize("change, error, match", [
    # The helper's case: a weight of 4 for rows of 8 read past its end, no error.
    (dict(weight=lambda t: t["weight"][:4].clone()), ValueError, r"weight must have shape \(8,\)"),
    (dict(residual=lambda t: t["residual"][:, :6].clone()), ValueError, "residual must have x's shape"),
    (dict(x=lambda t: t["x"].int()), TypeError, "x must be float32, float16 or bfloat16"),
    (dict(eps=lambda t: -1.0), ValueError, "eps"),
    # A meta tensor in one argument sent the call to the fake implementation: uninitialized outputs on x's device.
    (dict(residual=lambda t: t["residual"].to("meta")), ValueError, "must be on one device"),
    (dict(weight=lambda t: t["weight"].to("meta")), ValueError, "must be on one device")])
def test_forward_ops_refuse_mismatched_arguments(op, change, error, match, device):
    # torch.ops.fusedkernel.* can be called without add_rmsnorm: they check as it does.
    t = {"x": rand((4, 8), torch.float32, device), "residual": rand((4, 8), torch.float32, device, seed=1),
         "weight": rand((8,), torch.float32, device, seed=2), "eps": 1e-6}
    extra = (False,) if op == "add_rmsnorm_fwd" else ()
    getattr(torch.ops.fusedkernel, op)(*t.values(), *extra)  # the good call works
    t.update({k: f(t) for k, f in change.items()})
    with pytest.raises(error, match=match):
        getattr(torch.ops.fusedkernel, op)(*t.values(), *extra)


def test_the_inplace_op_refuses_an_inference_tensor_outside_inference_mode(device):
    # Called directly it updated one in place (torch's own add_ refuses: an inference tensor is read-only there).
    with torch.inference_mode():
        residual = rand((4, 8), torch.float32, device)
    x, w = rand((4, 8), torch.float32, device, seed=1), rand((8,), torch.float32, device, seed=2)
    before = residual.clone()
    with pytest.raises(ValueError, match="residual is an inference tensor"):
        torch.ops.fusedkernel.add_rmsnorm_inplace(x, residual, w, 1e-6)
    assert torch.equal(residual, before)
    with torch.inference_mode():
        torch.ops.fusedkernel.add_rmsnorm_inplace(x, residual, w, 1e-6)
    assert not torch.equal(residual, before)


def test_a_backward_through_the_direct_inplace_op_raises(device):
    # docs/op.md: the op mutates residual, so PyTorch takes no autograd formula for it; a gradient through its
    # output must fail, not come back as zeros or a partial sum.
    x = rand((4, 8), torch.float32, device).requires_grad_()
    w = rand((8,), torch.float32, device, seed=2).requires_grad_()
    y = torch.ops.fusedkernel.add_rmsnorm_inplace(x, rand((4, 8), torch.float32, device, seed=1), w, 1e-6)
    with pytest.raises(RuntimeError, match="no autograd formula was registered"):
        y.sum().backward()
    assert x.grad is None and w.grad is None

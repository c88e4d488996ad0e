"""The fused op against the fp32 reference: dtypes, widths, layouts, edge cases."""

import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import fusedkernel
from fusedkernel import add_rmsnorm
from fusedkernel.kernels.launch import forward_rows
from helpers import assert_matches_reference, kernels_seen_by_launch_hook, rand, reference

DTYPES = [torch.float32, torch.float16, torch.bfloat16]

# Width 1, odd and prime widths, powers of two and one past them, widths past
# the single-tile limit (looped path in the interpreter, split path on a GPU).
WIDTHS = [1, 7, 13, 127, 1000, 4096, 4097, 16384, 16385, 65537, 262144]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("n", WIDTHS)
def test_matches_reference_across_widths(dtype, n, device):
    rows = 3 if n <= 16384 else 2
    x, r = rand((rows, n), dtype, device, seed=n), rand((rows, n), dtype, device, seed=n + 1)
    w = rand((n,), dtype, device, seed=n + 2)
    assert_matches_reference(add_rmsnorm(x, r, w), x, r, w)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_float32_weight(dtype, device):
    x, r = rand((5, 300), dtype, device), rand((5, 300), dtype, device)
    w = rand((300,), torch.float32, device)
    assert_matches_reference(add_rmsnorm(x, r, w), x, r, w)


def test_three_d_input_keeps_shape(device):
    x, r = rand((2, 3, 96), torch.bfloat16, device), rand((2, 3, 96), torch.bfloat16, device)
    w = rand((96,), torch.bfloat16, device)
    assert_matches_reference(add_rmsnorm(x, r, w, eps=1e-5), x, r, w, eps=1e-5)


@pytest.mark.parametrize("n", [64, 33, 20000])
def test_strided_row_views_of_a_fused_projection(n, device):
    # x is the middle third of a fused QKV output: row stride 3n, last dim contiguous.
    qkv = rand((2, 4, 3 * n), torch.float16, device)
    x = qkv[..., n:2 * n]
    r = rand((2, 4, 2 * n), torch.float16, device)[..., :n]
    w = rand((n,), torch.float16, device)
    assert x.stride(-2) == 3 * n and r.stride(-2) == 2 * n
    y = add_rmsnorm(x, r, w)
    assert y.is_contiguous()
    assert_matches_reference(y, x, r, w)


@pytest.mark.parametrize("n, x_stride, r_stride", [(1032, 1032, 1040), (1032, 1036, 1032), (3000, 3002, 3008),
                                                 (96, 100, 98)])
def test_vector_width_follows_the_hidden_size_and_every_stride(n, x_stride, r_stride, device):
    # The kernels load VEC elements at once where n and every row stride are multiples of VEC
    # (up to 16 bytes): one stride that is not must narrow VEC, never misread a row. float16: the
    # interpreter rounds it to nearest like the GPU (bfloat16 it truncates), so the residual compares exactly.
    x = rand((3, x_stride), torch.float16, device, seed=n)[:, :n]
    r = rand((3, r_stride), torch.float16, device, seed=n + 1)[:, :n]
    w = rand((n,), torch.float16, device, seed=n + 2)
    r_in = r.clone()
    y, res = add_rmsnorm(x, r, w, inplace_residual=True)
    assert_matches_reference(y, x, r_in, w)
    assert torch.equal(res, (x.float() + r_in.float()).to(torch.float16)) and res.data_ptr() == r.data_ptr()


@pytest.mark.parametrize("shape", [(0, 64), (2, 0, 64), (0, 20000)])
def test_zero_rows_return_empty_without_launch(shape, device, monkeypatch):
    def no_launch(*args, **kwargs):
        raise AssertionError("launched a kernel for zero rows")

    monkeypatch.setattr(fusedkernel.ops, "forward_rows", no_launch)
    x = torch.empty(shape, dtype=torch.bfloat16, device=device)
    y = add_rmsnorm(x, torch.empty_like(x), torch.ones(shape[-1], dtype=torch.bfloat16, device=device))
    assert y.shape == shape and y.dtype == torch.bfloat16


@pytest.mark.parametrize("n", [512, 20000])
def test_float16_squares_that_overflow_float16_stay_finite(n, device):
    # |t| ~ 600: t*t ~ 3.6e5 > 65504 (fp16 max); an fp16 accumulator would give inf.
    x = rand((4, n), torch.float16, device, scale=300.0)
    r = rand((4, n), torch.float16, device, scale=300.0)
    w = rand((n,), torch.float16, device)
    y = add_rmsnorm(x, r, w)
    assert torch.isfinite(y).all()
    assert_matches_reference(y, x, r, w)


# The interpreter sums squares with numpy, which warns of the overflow this test makes.
@pytest.mark.filterwarnings("ignore:overflow encountered in reduce:RuntimeWarning")
def test_rows_whose_float32_sum_of_squares_overflows_come_out_as_zeros(device):
    # The docstring's bound: sum(t*t) > 3.4e38, |t| > 1.8e19 / sqrt(N) (5.8e17 at N = 1024).
    x = torch.tensor([[1e18], [2e17]], device=device).expand(2, 1024).contiguous()
    w = torch.ones(1024, device=device)
    y = add_rmsnorm(x, torch.zeros_like(x), w)
    eager = torch.nn.functional.rms_norm(x, (1024,), eps=1e-6) * w  # what the float32 eager chain gives
    torch.testing.assert_close(y[0], torch.zeros(1024, device=device))
    torch.testing.assert_close(y[1], torch.ones(1024, device=device))
    torch.testing.assert_close(y, eager)


@pytest.mark.filterwarnings("ignore:overflow encountered in add:RuntimeWarning")  # the interpreter's numpy
def test_rows_whose_mean_square_plus_eps_overflows_come_out_as_zeros(device):
    # op.md's second overflow (a review found it untested): sum(t*t) = 1.6e38 and mean(t*t) = 1e37 are finite,
    # mean + eps = 3.5e38 is not.
    x = torch.tensor([[10**18.5], [1.0]], device=device).expand(2, 16).contiguous()
    w = torch.ones(16, device=device)
    y = add_rmsnorm(x, torch.zeros_like(x), w, eps=3.4e38)
    eager = torch.nn.functional.rms_norm(x, (16,), eps=3.4e38) * w
    torch.testing.assert_close(y[0], torch.zeros(16, device=device))
    assert (y[1] > 0).all()
    torch.testing.assert_close(y, eager)


@pytest.mark.parametrize("n", [100, 20000])
def test_nan_stays_in_its_row(n, device):
    x, r = rand((6, n), torch.float32, device), rand((6, n), torch.float32, device)
    x[2, n // 2] = math.nan
    w = rand((n,), torch.float32, device)
    y = add_rmsnorm(x, r, w)
    assert torch.isnan(y[2]).all()
    keep = [0, 1, 3, 4, 5]
    assert_matches_reference(y[keep], x[keep], r[keep], w)


@pytest.mark.parametrize("n", [5, 300, 20001, 70000])
def test_every_output_element_is_written(n, device):
    # Launch into a NaN-poisoned output: a masked-off or skipped element stays NaN.
    x, r = rand((7, n), torch.bfloat16, device), rand((7, n), torch.bfloat16, device)
    w = rand((n,), torch.bfloat16, device)
    y = torch.full_like(x, math.nan)
    forward_rows(x, r, w, 1e-6, y)
    assert_matches_reference(y, x, r, w)


@settings(max_examples=40, deadline=None)
@given(rows=st.integers(0, 9), n=st.integers(1, 300), dtype=st.sampled_from(DTYPES),
       eps=st.floats(1e-12, 1.0), weight_fp32=st.booleans(), seed=st.integers(0, 2**16))
def test_random_inputs_match_reference(rows, n, dtype, eps, weight_fp32, seed):
    from conftest import DEVICE

    x, r = rand((rows, n), dtype, DEVICE, seed=seed), rand((rows, n), dtype, DEVICE, seed=seed + 1)
    w = rand((n,), torch.float32 if weight_fp32 else dtype, DEVICE, seed=seed + 2)
    assert_matches_reference(add_rmsnorm(x, r, w, eps=eps), x, r, w, eps=eps)


@pytest.mark.cuda
def test_more_than_2_31_elements():
    # 2**31 + 4096 elements per tensor: offsets past int32 must address correctly.
    n = 4096
    rows = 2**31 // n + 1
    x = torch.randn(rows, n, dtype=torch.bfloat16, device="cuda")
    r = torch.randn(rows, n, dtype=torch.bfloat16, device="cuda")
    w = torch.randn(n, dtype=torch.bfloat16, device="cuda")
    y = add_rmsnorm(x, r, w)
    for sl in (slice(0, 4), slice(rows // 2, rows // 2 + 4), slice(rows - 4, rows)):
        assert_matches_reference(y[sl], x[sl], r[sl], w)
    del x, r, y


@pytest.mark.cuda
def test_repeat_calls_skip_tritons_python_launcher(monkeypatch):
    # After its first launch, a call goes straight to the compiled kernel's C
    # launcher: half of a decode step's host time. A check that could never
    # pass (Triton 3.6's launch hooks are HookChains, never None) once sent
    # every call through JITFunction.run unnoticed.
    from fusedkernel.kernels import forward, launch

    if not launch._FAST:
        pytest.skip(f"direct launches are for Triton 3.6, this is {launch.triton.__version__}")
    x, r = torch.randn(2, 4096, device="cuda"), torch.randn(2, 4096, device="cuda")
    w = torch.randn(4096, device="cuda")
    want = add_rmsnorm(x, r, w)

    def refuse(*args, **kwargs):
        raise AssertionError("the launch went through JITFunction.run")

    monkeypatch.setattr(forward._rows_kernel, "run", refuse)
    torch.testing.assert_close(add_rmsnorm(x, r, w), want, rtol=0, atol=0)


@pytest.mark.cuda
def test_triton_launch_hooks_see_every_launch():
    # Repeat calls skip Triton's Python launcher, which calls the launch
    # hooks (a profiler's); with a hook set, launches go through it again.
    x, r = torch.randn(2, 4096, device="cuda"), torch.randn(2, 4096, device="cuda")
    w = torch.randn(4096, device="cuda")
    want = add_rmsnorm(x, r, w)
    y, seen = kernels_seen_by_launch_hook(lambda: add_rmsnorm(x, r, w))
    assert seen == ["_rows_kernel"]
    torch.testing.assert_close(y, want, rtol=0, atol=0)


@pytest.mark.cuda
@pytest.mark.parametrize("rows, n", [(4096, 65536), (3, 262144), (1000, 100003)])
def test_wide_rows_many_programs_on_gpu(rows, n):
    # The split path with many more programs than fit on the GPU at once.
    x = torch.randn(rows, n, dtype=torch.bfloat16, device="cuda")
    r = torch.randn(rows, n, dtype=torch.bfloat16, device="cuda")
    w = torch.randn(n, dtype=torch.bfloat16, device="cuda")
    for _ in range(3):  # one slot buffer, epochs 1, 2, 3
        y = add_rmsnorm(x, r, w)
    torch.testing.assert_close(y.float(), reference(x, r, w), rtol=2.0**-7, atol=1e-4)


@pytest.mark.cuda
@pytest.mark.parametrize("weight_load", ["before_sum", "after_sum"])
@pytest.mark.parametrize("block_m, block_n, warps", [(1, 2048, 4), (2, 4096, 8), (4, 4096, 16), (1, 8192, 8)])
def test_split_path_settings_match_reference(block_m, block_n, warps, weight_load):
    from fusedkernel.kernels.config import ForwardConfig

    n = 100003  # prime: the last program of each row is partly masked
    x = torch.randn(37, n, dtype=torch.float16, device="cuda")
    r0 = torch.randn(37, 2 * n, dtype=torch.float16, device="cuda")[:, n:]  # strided rows
    w = torch.randn(n, dtype=torch.float32, device="cuda")
    cfg = ForwardConfig("rows", block_m, block_n, -(-n // block_n), warps, weight_load)
    for _ in range(2):  # the second launch finds the first one's sums, of the older epoch, in the slots
        r = r0.clone()
        y, rstd = torch.full_like(x, math.nan), torch.full((37,), math.nan, device="cuda")
        forward_rows(x, r, w, 1e-6, y, res=r, rstd=rstd, cfg=cfg)  # residual updated in place
        assert_matches_reference(y, x, r0, w)
        torch.testing.assert_close(r, (x.float() + r0.float()).half(), rtol=0, atol=0)
        t = x.float() + r0.float()
        torch.testing.assert_close(rstd, torch.rsqrt(t.pow(2).mean(-1) + 1e-6), rtol=1e-5, atol=0)


@pytest.mark.cuda
@pytest.mark.parametrize("dtype, n, row_counts, tiles", [(torch.bfloat16, 20480, (1, 64, 16, 64, 1), 2),
                                                         (torch.float32, 12288, (1, 64, 16, 64, 1), 3),
                                                         (torch.bfloat16, 32768, (1, 40, 16, 64, 16, 40, 1), 3)])
def test_decode_rows_split_or_not_by_the_row_count_at_one_width(dtype, n, row_counts, tiles):
    # docs/tuning.md#forward-decode-split-rows: few rows split over programs of 2 rows (bf16); a lone bf16 row
    # of 32768 (16 pieces of 4 KiB are too many) over programs of 1 row, as 40 rows are where they crowd 132
    # SMs; 64 rows are whole. fp32 takes 4 warps and 4 KiB pieces at 1 row, 2 warps at 16. The launch
    # caches a compiled kernel per choice: alternating row counts must not share one.
    from fusedkernel.kernels import launch
    from fusedkernel.kernels.forward_rule import forward_config
    from fusedkernel.kernels.launch import _sm_count

    sms = _sm_count(torch.cuda.current_device())
    if sms < 64:
        pytest.skip("16 rows of 16 programs are over 2 an SM")
    seen = set()
    for rows in row_counts:
        x, r, w = (rand(shape, dtype, "cuda", seed=rows + k) for k, shape in enumerate([(rows, n), (rows, n), (n,)]))
        seen.add(forward_config(n, dtype.itemsize, sms, n_rows=rows))
        y, res = add_rmsnorm(x, r, w, return_residual=True)
        assert_matches_reference(y, x, r, w)
        torch.testing.assert_close(res, (x.float() + r.float()).to(dtype), rtol=0, atol=0)
    assert len(seen) == tiles and sum(c.splits == 1 for c in seen) == 1
    if launch._FAST:  # each choice has its own compiled kernel, under its splits and warps
        cached = {(k[3], k[4]) for k in launch._compiled if k[:3] == (n, True, "rows")}
        assert cached >= {(c.splits, c.num_warps) for c in seen}


@pytest.mark.cuda
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_rows_too_wide_to_split_over_the_sms_loop_on_gpu(dtype):
    # One program per SM per row at most: a row group that could not be
    # resident at once would wait forever. One column more takes the looped path.
    from fusedkernel.kernels.config import HOPPER
    from fusedkernel.kernels.forward_rule import forward_config
    from fusedkernel.kernels.launch import _sm_count

    n = _sm_count(torch.cuda.current_device()) * HOPPER.forward.split.block_n + 1
    assert forward_config(n, dtype.itemsize, _sm_count(torch.cuda.current_device())).path == "looped"
    x, r, w = (rand(shape, dtype, "cuda", seed=k) for k, shape in enumerate([(3, n), (3, n), (n,)]))
    y, res = add_rmsnorm(x, r, w, return_residual=True)
    assert_matches_reference(y, x, r, w)


@pytest.mark.cuda
def test_split_exchange_restarts_its_epochs_before_they_leave_int32():
    # The epoch is a kernel argument: past 2**31 - 1 Triton would retype it
    # (a new compile, and the launcher's cached kernel would get the wrong
    # type). The slot buffer is replaced and the epochs start again at 1.
    from fusedkernel.kernels import launch

    x, r = torch.randn(4, 65536, device="cuda"), torch.randn(4, 65536, device="cuda")
    w = torch.randn(65536, device="cuda")
    add_rmsnorm(x, r, w)
    key = (torch.cuda.current_device(), torch.cuda.current_stream().cuda_stream)
    old = launch._slots[key][0]
    launch._slots[key][1] = 2**31 - 3
    for epoch in (2**31 - 2, 2**31 - 1, 1, 2):
        y = add_rmsnorm(x, r, w)
        assert launch._slots[key][1] == epoch
        assert_matches_reference(y, x, r, w)
    assert launch._slots[key][0] is not old


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("block_m, n", [(4, 500), (1, 4096)])
def test_each_weight_load_gives_the_same_bits(dtype, block_m, n, device):
    from fusedkernel.kernels.config import WEIGHT_LOADS, ForwardConfig

    x, r, w = rand((5, n), dtype, device), rand((5, n), dtype, device, seed=1), rand((n,), dtype, device, seed=2)
    outs = []
    for load in WEIGHT_LOADS:
        y, res, rstd = torch.empty_like(x), torch.empty_like(x), torch.empty(5, device=device)
        forward_rows(x, r, w, 1e-6, y, res, rstd, cfg=ForwardConfig("rows", block_m, 4096 if n > 500 else 512, 1, 4,
                                                                    load))
        outs.append((y, res, rstd))
    for out in outs[1:]:
        for a, b in zip(outs[0], out):
            assert torch.equal(a, b)
    assert_matches_reference(outs[0][0], x, r, w)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("block_m, n", [(4, 500), (1, 3000), (1, 4096)])
def test_persistent_path_gives_the_rows_paths_bits(dtype, block_m, n, device):
    # Programs walking more row blocks than the grid has, the residual updated in
    # place while the next block is loaded ahead: the rows path's sums and outputs.
    from fusedkernel.kernels.config import ForwardConfig

    rows = 37 if device == "cpu" else 300  # the grid: 4 programs in the interpreter, one per SM on a GPU
    x, r0, w = rand((rows, n), dtype, device), rand((rows, n), dtype, device, seed=1), rand((n,), dtype, device, seed=2)
    block_n = 1 << (n - 1).bit_length()
    outs = []
    for cfg in (ForwardConfig("rows", block_m, block_n, 1, 4, "first"),
                ForwardConfig("persistent", block_m, block_n, 1, 4, "first", 1)):
        r = r0.clone()
        y, rstd = torch.full_like(x, math.nan), torch.full((rows,), math.nan, device=device)
        forward_rows(x, r, w, 1e-6, y, res=r, rstd=rstd, cfg=cfg)
        outs.append((y, r, rstd))
    for a, b in zip(*outs):
        assert torch.equal(a, b)
    assert_matches_reference(outs[1][0], x, r0, w)


def _device_index(device: str) -> int:
    """The launch's device index for the test's device (-1: the interpreter's CPU)."""
    return -1 if device == "cpu" else torch.cuda.current_device()


@pytest.mark.parametrize("dtype, n", [(torch.bfloat16, 12288), (torch.float32, 8000)])
def test_the_tables_persistent_grid_walks_a_few_rows_per_sm(dtype, n, device):
    # 32 KiB whole-row tiles, 2-8 rows per SM (one SM in the interpreter): the
    # table takes the persistent path, and the inference call's bits are the rows
    # path's with the same tile and warps (other warps sum in another order on a GPU).
    from fusedkernel.kernels.config import ForwardConfig
    from fusedkernel.kernels.forward_rule import forward_config
    from fusedkernel.kernels.launch import _max_splits, _settings

    index = _device_index(device)
    rows = 5 * _max_splits(index)
    cfg = forward_config(n, dtype.itemsize, _max_splits(index), _settings(index), rows)
    assert (cfg.path, cfg.block_n * dtype.itemsize) == ("persistent", 32768)
    x, r0, w = rand((rows, n), dtype, device), rand((rows, n), dtype, device, seed=1), rand((n,), dtype, device, seed=2)
    r = r0.clone()
    y, _ = add_rmsnorm(x, r, w, inplace_residual=True)
    y2, r2 = torch.empty_like(x), r0.clone()
    same_tile = ForwardConfig("rows", cfg.block_m, cfg.block_n, 1, cfg.num_warps, "first")
    forward_rows(x, r2, w, 1e-6, y2, res=r2, cfg=same_tile)
    assert torch.equal(y, y2) and torch.equal(r, r2)
    assert_matches_reference(y, x, r0, w)


@pytest.mark.parametrize("dtype, n, fewer", [(torch.bfloat16, 2880, True), (torch.float16, 3000, True),
                                             (torch.float32, 1536, False)])
def test_band_rows_take_half_the_warps_only_past_a_wave_of_the_rules(dtype, n, fewer, device):
    # 8 KiB whole-row tiles at 2-8 rows an SM: table_config is the launch's choice and launches nothing;
    # it is the rule's, or past a wave of its programs the same tile on half the warps with the weight
    # before the sums (forward_rule.band_wave_config, by the compiled kernels' registers: none in the
    # interpreter). On Hopper, 2-byte rows with the residual stored fit 5-6 programs an SM at 8 warps and
    # 8 at 4; fp32's 8 warps fit 8 (tools/kernel/registers.py).
    import dataclasses

    from fusedkernel.kernels.forward_rule import forward_config
    from fusedkernel.kernels.launch import _max_splits, _settings, table_config

    index = _device_index(device)
    sms = _max_splits(index)
    hopper = device != "cpu" and torch.cuda.get_device_capability(index) == (9, 0)
    for rows in (2 * sms + 1, 7 * sms):
        x, r0, w = rand((rows, n), dtype, device), rand((rows, n), dtype, device, seed=1), rand((n,), dtype, device)
        r, y = r0.clone(), torch.full_like(x, float("nan"))
        rule = forward_config(n, dtype.itemsize, sms, _settings(index), rows)
        cfg = table_config(x, r, w, y, res=r)
        assert y.isnan().all() and torch.equal(r, r0)
        half = dataclasses.replace(rule, num_warps=rule.num_warps // 2, weight_load="before_sum")
        assert cfg == (half if hopper and fewer and rows == 7 * sms else rule)
        y, _ = add_rmsnorm(x, r, w, inplace_residual=True)
        assert_matches_reference(y, x, r0, w)


@pytest.mark.parametrize("n", [2800, 3576])
def test_warm_band_rows_of_fp32_16_kib_tiles_take_16_warps_or_the_persistent_grid(n, device):
    # fp32 rows of 2049-4096 at 3.5 rows an SM (at most 512 rows, over 32 KiB an SM): 16 warps, the weight
    # first; writing y only, rows over 2816 on the persistent grid, 2 programs an SM, whose bits are the rows
    # path's with the same tile and warps.
    from fusedkernel.kernels.config import ForwardConfig
    from fusedkernel.kernels.launch import _max_splits, table_config

    index = _device_index(device)
    rows = min(512, -(-7 * _max_splits(index) // 2))  # at most 512 rows: decode
    x, r0, w = (rand((rows, n), torch.float32, device), rand((rows, n), torch.float32, device, seed=1),
                rand((n,), torch.float32, device, seed=2))
    sixteen = ForwardConfig("rows", 1, 4096, 1, 16, "first")
    r = r0.clone()
    assert table_config(x, r, w, torch.empty_like(x), res=r) == sixteen
    y, _ = add_rmsnorm(x, r, w, inplace_residual=True)
    assert_matches_reference(y, x, r0, w)
    cfg = table_config(x, r0, w, torch.empty_like(x))
    assert cfg == (ForwardConfig("persistent", 1, 4096, 1, 16, "first", 2) if n > 2816 else sixteen)
    y1 = add_rmsnorm(x, r0, w)
    assert_matches_reference(y1, x, r0, w)
    y2 = torch.empty_like(x)
    forward_rows(x, r0, w, 1e-6, y2, cfg=sixteen)
    assert torch.equal(y1, y2) and torch.equal(y, y1)


@pytest.mark.parametrize("n, inplace", [(18272, True), (16392, False)])
def test_band_rows_of_2_byte_rows_past_16384_split_over_the_decode_splits_tiles(n, inplace, device):
    # 2-8 rows an SM of bf16 rows of 16385-32768 (a whole row: 32 elements a thread at 32 warps) take the
    # decode split's tile, 2 rows x 2048 on 4 warps, where its programs fit the SMs (never in the
    # interpreter: one SM); the rows exchange partial sums and match the reference.
    from fusedkernel.kernels.config import ForwardConfig
    from fusedkernel.kernels.launch import _max_splits, table_config

    index = _device_index(device)
    sms = _max_splits(index)
    rows = 4 * sms
    x, r0 = rand((rows, n), torch.bfloat16, device), rand((rows, n), torch.bfloat16, device, seed=1)
    w = rand((n,), torch.bfloat16, device, seed=2)
    r = r0.clone()
    cfg = table_config(x, r, w, torch.empty_like(x), res=r if inplace else torch.empty_like(x))
    splits = -(-n // 2048)
    split = ForwardConfig("rows", 2, 2048, splits, 4, "before_sum")
    assert (cfg == split) if splits <= sms else (cfg.splits == 1)
    y, new = add_rmsnorm(x, r, w, inplace_residual=inplace, return_residual=not inplace)
    assert_matches_reference(y, x, r0, w)
    # The interpreter truncates bf16 results: one unit in the last place there.
    tol = dict(rtol=0, atol=0) if device != "cpu" else dict(rtol=2**-7, atol=0)
    torch.testing.assert_close(r if inplace else new, (x.float() + r0.float()).bfloat16(), **tol)


def test_persistent_settings_that_miss_columns_are_refused(device):
    from fusedkernel.kernels.config import ForwardConfig

    x = rand((3, 100), torch.float32, device)
    with pytest.raises(ValueError, match="persistent path holds whole rows, so block_n must be >= the hidden size "
                                         "100, got 64"):
        forward_rows(x, x, x[0], 1e-6, torch.empty_like(x), cfg=ForwardConfig("persistent", 1, 64, 1, 4, "first", 1))


@pytest.mark.parametrize("kwargs, match", [
    (dict(path="split"), r"path must be one of \('rows', 'looped', 'persistent'\)"),
    (dict(path="persistent", weight_load="first"),
     "persistent path holds whole rows .* got splits=1, programs_per_sm=0"),
    (dict(path="persistent", splits=2, weight_load="first", programs_per_sm=1), "got splits=2, programs_per_sm=1"),
    (dict(path="persistent", programs_per_sm=1), r"weight_load='first'\), got .* weight_load='after_sum'"),
    (dict(path="looped", weight_load="first"), r"looped path loads the weight in its second pass .* got "
                                               r"weight_load='first'"),
    (dict(weight_load="mid"), r"weight_load must be one of \('first', 'before_sum', 'after_sum'\), got 'mid'"),
    (dict(programs_per_sm=2), r"programs_per_sm is for the persistent path \(0 on the rows path\), got 2"),
    (dict(block_n=96), "block_n must be a power of two"),
    (dict(num_warps=0), "num_warps must be a power of two"),
    (dict(splits=0), "splits must be >= 1"),
    (dict(num_warps=64), "num_warps must be at most 32, got 64"),
    (dict(block_m=16, block_n=2**17), r"block_m \* block_n must be at most 1048576 \(Triton's largest tensor\)"),
])
def test_bad_forward_settings_are_refused(kwargs, match):
    from fusedkernel.kernels.config import ForwardConfig

    with pytest.raises(ValueError, match=match):
        ForwardConfig(**{**dict(path="rows", block_m=1, block_n=64, splits=1, num_warps=4), **kwargs})


@pytest.mark.parametrize("kwargs, match", [
    (dict(weight_load=True), "weight_load must be a str, got bool True"),
    (dict(block_n=64.0), "block_n must be an int, got float 64.0"),
    (dict(splits=True), "splits must be an int, got bool True"),
    (dict(block_m=np.int64(2)), r"block_m must be an int, got int64 np.int64\(2\)"),
    (dict(programs_per_sm=1.0), "programs_per_sm must be an int, got float 1.0"),
])
def test_forward_settings_of_the_wrong_type_are_refused(kwargs, match):
    from fusedkernel.kernels.config import ForwardConfig

    with pytest.raises(TypeError, match=match):
        ForwardConfig(**{**dict(path="rows", block_m=1, block_n=64, splits=1, num_warps=4), **kwargs})


def test_launch_settings_of_the_other_pass_are_refused(device):
    # A BackwardConfig's fields would be read as a forward's (and the reverse): wrong columns, silently.
    from fusedkernel.kernels.config import BackwardConfig, ForwardConfig
    from fusedkernel.kernels.launch import backward_rows

    x = rand((3, 64), torch.float32, device)
    with pytest.raises(TypeError, match="cfg must be a ForwardConfig, got BackwardConfig"):
        forward_rows(x, x, x[0], 1e-6, torch.empty_like(x), cfg=BackwardConfig("rows", 1, 64, 4, 2))
    with pytest.raises(TypeError, match="cfg must be a BackwardConfig, got ForwardConfig"):
        backward_rows(x, None, x, x, x[0], torch.ones(3, device=device), torch.empty_like(x),
                      cfg=ForwardConfig("looped", 1, 16, 1, 4))


@pytest.mark.parametrize("args, match", [
    ((0, 2, 132), "n_cols must be an int >= 1, got 0"),
    ((16384.0, 2, 132), "n_cols must be an int >= 1, got 16384.0"),
    ((100000, 0, 132), "elem_bytes must be 2 or 4, got 0"),
    ((20000, 3, 132), "elem_bytes must be 2 or 4, got 3"),
    ((4096, 2, 0), "max_splits must be an int >= 1, got 0"),
])
def test_launch_tables_refuse_bad_arguments(args, match):
    from fusedkernel.kernels.backward_rule import backward_config
    from fusedkernel.kernels.forward_rule import forward_config

    for table in (forward_config, backward_config):
        with pytest.raises(ValueError, match=match):
            table(*args)


def test_forward_settings_that_miss_columns_are_refused(device):
    # A rows launch narrower than the row would leave y's last columns unwritten.
    from fusedkernel.kernels.config import ForwardConfig

    x = rand((3, 100), torch.float32, device)
    with pytest.raises(ValueError, match="must cover the hidden size 100, got 32 \\* 3"):
        forward_rows(x, x, x[0], 1e-6, torch.empty_like(x), cfg=ForwardConfig("rows", 1, 32, 3, 4))


@pytest.mark.skipif(torch.cuda.is_available(), reason="the interpreter's refusal")
def test_split_settings_are_refused_in_the_interpreter():
    # Split programs wait for each other; the interpreter runs them one by one (a hang).
    from fusedkernel.kernels.config import ForwardConfig

    x = rand((3, 100), torch.float32, "cpu")
    with pytest.raises(ValueError, match="splits > 1 needs a GPU"):
        forward_rows(x, x, x[0], 1e-6, torch.empty_like(x), cfg=ForwardConfig("rows", 1, 64, 2, 4))


def test_alternating_aligned_and_misaligned_views(device):
    # The launcher reuses a compiled kernel for 16-byte-aligned arguments only;
    # a view that starts one element in must take the general path.
    n = 64
    base = rand((9, n + 1), torch.float16, device)
    w = rand((n,), torch.float16, device)
    for start in (0, 1, 0, 1):
        x = base[:, start:start + n]
        r = base.flip(0)[:, start:start + n]
        assert_matches_reference(add_rmsnorm(x, r, w), x, r, w)

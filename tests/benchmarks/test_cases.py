"""benchmarks/_cases.py: the grid, inputs, runners, floors and traffic model."""

import pytest
import torch

from benchmarks import _cases as cases
from helpers import ATOL, assert_matches_reference, reference

CASE = cases.INTERPRETER_CASES[0] if cases.INTERPRET else "bf16 64x4096"


def test_the_gpu_grid_covers_real_model_widths_and_token_counts():
    for op in cases.OPS:
        grid = cases.gpu_cases(op)
        assert len(grid) == len(set(grid))
        widths = {cases.parse(c)[2] for c in grid if c.startswith("bf16")}
        assert {2048, 2880, 4096, 5120, 7168, 8192, 16384, 65536} <= widths
        tokens = {cases.parse(c)[1] for c in grid}
        assert tokens == ({8192, 1024} if op == "forward+backward" else {1, 8, 64, 512, 8192, 1024})
        # bf16 everywhere; fp16 and fp32 on a subset that has a non-power-of-two width.
        assert {c.split()[0] for c in grid} == {"bf16", "fp16", "fp32"}
        assert any(c.startswith("fp32") and c.endswith("x5120") for c in grid)


def test_each_mode_runs_its_own_cases():
    want = cases.INTERPRETER_CASES if cases.INTERPRET else cases.gpu_cases("forward")
    assert cases.cases("forward") == want


@pytest.mark.parametrize("bad", ["bf16 1x", "bf16", "int8 1x64", "bf16 0x64", "bf16 1x64 extra", "bf16 -1x64",
                                 "bf16 01x64", "bf16 1_0x64", "bf16  1x64", None])
def test_a_malformed_case_is_refused_by_name(bad):
    with pytest.raises(ValueError, match="a case is '<dtype> <tokens>x<hidden>'"):
        cases.parse(bad)


def test_inputs_are_seeded_made_once_and_each_copy_differs():
    d, t, n = cases.parse(CASE)
    first = cases.inputs(d, t, n)
    assert cases.inputs(d, t, n) is first
    kept = {k: v.clone() for k, v in first.items()}
    cases.inputs.cache_clear()
    again = cases.inputs(d, t, n)
    assert all(torch.equal(again[k], kept[k]) for k in kept)
    assert again["x"].shape == (t, n) and again["w"].shape == (n,)
    assert not torch.equal(cases.inputs(d, t, n, 1)["x"], again["x"])


def test_decode_cases_rotate_over_copies_that_fit_l2(monkeypatch):
    monkeypatch.setattr(cases, "INTERPRET", False)
    assert cases.copies("bf16 1x4096") == cases.ROTATE
    assert cases.copies("bf16 8192x4096") == 1  # prefill: L2 flushed, no rotation
    for case in ("bf16 64x5120", "bf16 512x16384", "fp32 64x5120"):
        d, t, n = cases.parse(case)
        k = cases.copies(case)
        assert 1 <= k <= cases.ROTATE and (k == 1 or k * 5 * t * n * cases.DTYPES[d].itemsize <= cases.L2_SHARE)
    monkeypatch.setattr(cases, "INTERPRET", True)
    assert cases.copies("bf16 1x4096") == 1


def test_a_rotating_runner_cycles_through_its_calls():
    seen = []
    fn = cases._rotating([lambda: seen.append(0), lambda: seen.append(1), lambda: seen.append(2)])
    for _ in range(7):
        fn()
    assert seen == [0, 1, 2, 0, 1, 2, 0]


def assert_is_the_op(impl, y, x):
    if impl == "fused":
        assert_matches_reference(y, x["x"], x["r"], x["w"], cases.EPS)
        return
    # eager rounds x + residual, the norm and the product to the dtype: up to
    # three units of roundoff (bf16 64x4096 on the H200: 0.0103, over one ulp).
    torch.testing.assert_close(y.float(), reference(x["x"], x["r"], x["w"], cases.EPS),
                               rtol=3 * torch.finfo(y.dtype).eps / 2, atol=ATOL[y.dtype])


@pytest.mark.parametrize("impl", ["fused", "eager"])
def test_runners_run_each_op(impl):
    d, t, n = cases.parse(CASE)
    x = cases.inputs(d, t, n)
    assert_is_the_op(impl, cases.runner("forward", impl, CASE)(), x)
    y, res = cases.runner("forward+residual", impl, CASE)()
    assert_is_the_op(impl, y, x)
    torch.testing.assert_close(res.float(), x["x"].float() + x["r"].float(), rtol=1e-2, atol=1e-2)
    dx, dr, dw = cases.runner("forward+backward", impl, CASE)()
    assert dx.shape == dr.shape == x["x"].shape and dw.shape == x["w"].shape
    torch.testing.assert_close(dx, dr)  # x + residual: the same gradient


@pytest.mark.parametrize("impl", ["fused", "eager"])
def test_the_inference_call_updates_its_own_residual_buffer_in_place(impl):
    d, t, n = cases.parse(CASE)
    x = cases.inputs(d, t, n)
    before = x["r"].clone()
    run = cases.runner("inference", impl, CASE)
    y1, y2 = run(), run()
    assert y1.shape == x["x"].shape and not torch.equal(y1, y2)  # the residual moved between the calls
    assert torch.equal(x["r"], before)  # the suite's shared inputs stay as made


def test_floors_are_the_same_bytes_torch_ops():
    d, t, n = cases.parse(CASE)
    x = cases.inputs(d, t, n)
    xx, r, z = x["x"], x["r"], x["z"]
    torch.testing.assert_close(cases.floor("forward", CASE)(), xx + r, rtol=0, atol=0)
    for op in ("forward+residual", "inference"):
        torch.testing.assert_close(cases.floor(op, CASE)(), torch.addcmul(xx, r, z), rtol=0, atol=0)
    _, addcmul = cases.floor("forward+backward", CASE)()
    torch.testing.assert_close(addcmul, torch.addcmul(xx, r, z), rtol=0, atol=0)


def test_bytes_moved_follow_the_traffic_model():
    # Module docstring: forward 3 row-trips and a weight read; forward+residual and inference 4;
    # forward+backward 7, the backward reading the weight again and writing dweight (3 weight trips).
    t, n = 8192, 5120
    for op, trips, weights in (("forward", 3, 1), ("forward+residual", 4, 1), ("inference", 4, 1),
                               ("forward+backward", 7, 3)):
        assert cases.bytes_moved(op, f"bf16 {t}x{n}") == (trips * t + weights) * n * 2
        assert cases.bytes_moved(op, f"fp32 {t}x{n}") == (trips * t + weights) * n * 4

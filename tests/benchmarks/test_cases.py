"""benchmarks/_cases.py: the suite's inputs, runners, floors and traffic model."""

import pytest
import torch

from benchmarks import _cases as cases

from helpers import assert_matches_reference

# A shape this host runs: the small interpreter shape, or decode on a GPU.
SHAPE = cases.INTERPRETER_SHAPES[0] if cases.INTERPRET else cases.DECODE_SHAPES[1]


def test_each_mode_runs_only_its_own_shapes():
    mine, theirs = (cases.INTERPRETER_SHAPES, cases.GPU_SHAPES) if cases.INTERPRET else \
        (cases.GPU_SHAPES, cases.INTERPRETER_SHAPES)
    for shape in mine:
        cases.check_runs_here(shape)
    for shape in theirs:
        with pytest.raises(NotImplementedError, match="is for"):
            cases.check_runs_here(shape)
    assert {s for _, s in cases.cases()} == set(mine)


def test_inputs_are_seeded_and_made_once():
    first = cases.inputs("fp32", SHAPE)
    assert cases.inputs("fp32", SHAPE) is first
    kept = {k: v.clone() for k, v in first.items()}
    cases.inputs.cache_clear()
    again = cases.inputs("fp32", SHAPE)
    assert all(torch.equal(again[k], kept[k]) for k in kept)
    rows, n = cases.parse_shape(SHAPE)
    assert again["x"].shape == (rows, n) and again["w"].shape == (n,)


@pytest.mark.parametrize("impl", ["fused", "eager"])
@pytest.mark.parametrize("dtype", list(cases.DTYPES))
def test_runners_run_each_op(impl, dtype):
    t = cases.inputs(dtype, SHAPE)
    assert_matches_reference(cases.runner("forward", impl, dtype, SHAPE)(), t["x"], t["r"], t["w"], cases.EPS)
    y, res = cases.runner("forward+residual", impl, dtype, SHAPE)()
    assert_matches_reference(y, t["x"], t["r"], t["w"], cases.EPS)
    torch.testing.assert_close(res.float(), t["x"].float() + t["r"].float(), rtol=1e-2, atol=1e-2)
    dx, dr, dw = cases.runner("forward+backward", impl, dtype, SHAPE)()
    assert dx.shape == dr.shape == t["x"].shape and dw.shape == t["w"].shape
    torch.testing.assert_close(dx, dr)  # x + residual: the same gradient


@pytest.mark.skipif(not cases.INTERPRET, reason="the interpreter's refusal")
def test_liger_is_skipped_in_the_interpreter():
    with pytest.raises(NotImplementedError, match="interpreter"):
        cases.runner("forward", "liger", "fp32", SHAPE)


def test_floors_are_the_same_bytes_torch_ops():
    t = cases.inputs("fp32", SHAPE)
    x, r, z = t["x"], t["r"], t["z"]
    torch.testing.assert_close(cases.floor("forward", "fp32", SHAPE)(), x + r, rtol=0, atol=0)
    torch.testing.assert_close(cases.floor("forward+residual", "fp32", SHAPE)(), torch.addcmul(x, r, z),
                               rtol=0, atol=0)
    add, addcmul = cases.floor("forward+backward", "fp32", SHAPE)()
    torch.testing.assert_close(addcmul, torch.addcmul(x, r, z), rtol=0, atol=0)


def test_bytes_moved_follow_the_traffic_model():
    # Module docstring: forward reads x and residual and writes y (3 row-trips) and reads the weight;
    # forward+residual also writes x + residual (4); forward+backward adds dy, x, residual read and dx
    # written (7), the backward reading the weight again and writing dweight (3 weight trips).
    rows, n = 16384, 4096
    for op, trips, weights in (("forward", 3, 1), ("forward+residual", 4, 1), ("forward+backward", 7, 3)):
        assert cases.bytes_moved(op, "bf16", f"{rows}x{n}") == (trips * rows + weights) * n * 2
        assert cases.bytes_moved(op, "fp32", f"{rows}x{n}") == (trips * rows + weights) * n * 4

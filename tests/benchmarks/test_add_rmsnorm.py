"""benchmarks/add_rmsnorm.py: what the host-time benchmarks call."""

import pytest
import torch

from benchmarks import _cases as cases
from benchmarks import add_rmsnorm as suite

SHAPE = cases.INTERPRETER_SHAPES[0] if cases.INTERPRET else cases.DECODE_SHAPES[1]


def test_host_ratio_inplace_updates_one_residual_buffer_call_after_call():
    fused = suite.HostRatioInplace().fused("fp32", SHAPE)
    y, buf = fused()
    before = buf.clone()
    y2, buf2 = fused()
    assert buf2 is buf and y2.shape == y.shape
    x = cases.inputs("fp32", SHAPE)["x"] * 1e-3
    torch.testing.assert_close(buf, before + x)
    assert not torch.equal(cases.inputs("fp32", SHAPE)["r"], buf)  # the suite's shared inputs stay as made


@pytest.mark.skipif(torch.cuda.is_available(), reason="the interpreter's refusal")
def test_host_ratio_skips_the_native_lane_where_it_cannot_run():
    with pytest.raises(NotImplementedError, match="native launch lane is not available"):
        suite.HostRatio().setup("fused-native", "fp32", SHAPE)
    suite.HostRatio().setup("fused", "fp32", SHAPE)  # the Python path runs everywhere

"""Settings are frozen data keyed by architecture, checked when made."""

import dataclasses

import pytest

from fusedkernel.kernels.backward_rule import backward_config
from fusedkernel.kernels.config import FALLBACK, HOPPER, SETTINGS, ForwardConfig, settings_for
from fusedkernel.kernels.forward_rule import forward_config


def test_settings_are_frozen_data_keyed_by_architecture():
    assert SETTINGS["hopper"] is HOPPER and HOPPER.arch == "hopper"
    with pytest.raises(dataclasses.FrozenInstanceError):
        HOPPER.forward.max_tile_bytes = 1
    assert settings_for((9, 0)) is HOPPER
    # Any other GPU, and the interpreter (no capability), take the stated fallback.
    assert settings_for((8, 0)) is FALLBACK and settings_for((10, 0)) is FALLBACK and settings_for(None) is FALLBACK


@pytest.mark.parametrize("capability", [9, "hopper", {9: 0}, (9,), (9.0, 0), (-1, -1), (9, -1)])
def test_settings_for_refuses_anything_but_a_capability_by_name(capability):
    # Each raised an error naming nothing (TypeError: not subscriptable, unhashable type, KeyError)
    # or returned something: "hopper", (8,) and (-1, -1) took the fallback.
    with pytest.raises(ValueError, match="capability must be None or a"):
        settings_for(capability)


# A rule's numbers are checked when settings are made: each bad one named, not a ZeroDivisionError or a
# ForwardConfig error on the first call that reaches it.
BAD_SETTINGS = [
    ("forward", {"few_rows_sparse_fp16_bytes_per_warp": 0}, ValueError,
     r"few_rows_sparse_fp16_bytes_per_warp must be >= 1, got 0"),
    ("forward", {"bytes_per_warp": -1280}, ValueError, r"bytes_per_warp must be >= 1"),
    ("forward", {"few_rows_split_tile_bytes": 3000}, ValueError,
     r"few_rows_split_tile_bytes must be a power of two >= 1, got 3000"),
    ("forward", {"band_warps": 64}, ValueError, r"band_warps must be at most 32, got 64"),
    ("forward", {"persistent_narrow_warps": 12}, ValueError,
     r"persistent_narrow_warps must be a power of two >= 1, got 12"),
    ("forward", {"few_rows_thread_wide_warps": 64}, ValueError,
     r"few_rows_thread_wide_warps must be at most 32, got 64"),
    ("forward", {"few_rows_dense_bytes": 0}, ValueError, r"few_rows_dense_bytes must be >= 1, got 0"),
    ("forward", {"band_warm_warps": 12}, ValueError, r"band_warm_warps must be a power of two >= 1, got 12"),
    ("forward", {"band_warm_programs_per_sm": 0}, ValueError, r"band_warm_programs_per_sm must be >= 1, got 0"),
    ("forward", {"warm_max_rows": 512.0}, TypeError, r"warm_max_rows must be an int, got float"),
    ("forward", {"persistent_narrow_row_bytes": 20480.0}, TypeError, r"persistent_narrow_row_bytes must be an int"),
    ("forward", {"min_warps": 8, "max_warps": 4}, ValueError, r"min_warps must be at most max_warps \(4\), got 8"),
    ("forward", {"max_warps": 4.0}, TypeError, r"max_warps must be an int, got float"),
    ("forward", {"band_tile_bytes": True}, TypeError, r"band_tile_bytes must be an int, got bool"),
    ("forward", {"split": None}, TypeError, r"ForwardSettings.split must be a ForwardConfig, got NoneType"),
    ("backward", {"dw_sum_warps": 0}, ValueError, r"BackwardSettings.dw_sum_warps must be a power of two >= 1, got 0"),
    ("backward", {"wait_cols_per_warp": 0}, ValueError, r"wait_cols_per_warp must be >= 1, got 0"),
    ("backward", {"threads_per_sm": 384}, ValueError, r"threads_per_sm must be a power of two >= 1, got 384"),
    ("backward", {"split_4byte": ForwardConfig("rows", 1, 1024, 1, 4)}, TypeError,
     r"BackwardSettings.split_4byte must be a BackwardConfig, got ForwardConfig"),
]


@pytest.mark.parametrize("settings", [None, HOPPER.forward, "hopper"])
def test_settings_that_are_not_a_settings_are_refused_by_name(settings):
    # A review found None reaching settings.forward: an AttributeError naming nothing.
    for call in (lambda: forward_config(8192, 4, 132, settings, 49), lambda: forward_config(8192, 4, 132, settings),
                 lambda: backward_config(8192, 4, 132, settings)):
        with pytest.raises(TypeError, match="settings must be a Settings"):
            call()


@pytest.mark.parametrize("part, change, error, match", BAD_SETTINGS)
def test_bad_rule_settings_are_refused_by_name(part, change, error, match):
    with pytest.raises(error, match=match):
        dataclasses.replace(getattr(HOPPER, part), **change)

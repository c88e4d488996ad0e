"""Test setup: without a GPU, kernels run in Triton's interpreter on CPU tensors.

TRITON_INTERPRET must be set before fusedkernel (and its @triton.jit kernels)
is imported, hence here, at collection time. The asv suite (tests/benchmarks)
is imported as the package ``benchmarks`` from the repository root, as asv does.
"""

import os
import pathlib
import sys

import pytest
import torch

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

HAS_CUDA = torch.cuda.is_available()
if not HAS_CUDA:
    os.environ.setdefault("TRITON_INTERPRET", "1")

DEVICE = "cuda" if HAS_CUDA else "cpu"


def pytest_collection_finish(session):
    # A test module that imports a tool compiling for sm_90 (tools/kernel/registers.py unsets TRITON_INTERPRET
    # as it is imported) would turn the interpreter off for every test after it: run such tools in a subprocess.
    if not HAS_CUDA and os.environ.get("TRITON_INTERPRET") != "1":
        raise pytest.UsageError("TRITON_INTERPRET was unset while the tests were collected: a test module imported "
                                "a tool that compiles for a GPU (tools/kernel/registers.py); run it in a subprocess")


def pytest_collection_modifyitems(config, items):
    skip = pytest.mark.skip(reason="needs a CUDA GPU")
    for item in items:
        if "cuda" in item.keywords and not HAS_CUDA:
            item.add_marker(skip)


@pytest.fixture
def device():
    return DEVICE

"""The kernels load and store 16 bytes at once wherever the hidden size and strides allow it.

Compiled for Hopper (sm_90) to PTX in a subprocess without the interpreter
(Triton compiles without a GPU); no kernel runs. Triton itself only assumes
divisibility by 16 elements, so before the host passed VEC, bf16 rows of a
width = 8 (mod 16) compiled to one-element loads (0.68 of the floor at 1032
wide on the H200).
"""

import json
import os
import subprocess
import sys

import pytest

SCRIPT = r"""
import inspect, json, re, sys
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
from fusedkernel.kernels import backward, forward

kernel = getattr(forward, sys.argv[1], None) or getattr(backward, sys.argv[1])
vec, block_n, tail_n = int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
names = list(inspect.signature(kernel.fn).parameters)
sig = {n: "*bf16" if n.endswith("_ptr") else "i32" for n in names}
sig.update({k: t for k, t in {"eps": "fp32", "rstd_ptr": "*fp32", "dw_part_ptr": "*fp32", "dot_ptr": "*fp32",
                              "count_ptr": "*i64"}.items() if k in names})
consts = {k: v for k, v in {"BLOCK_N": block_n, "VEC": vec, "BLOCK_M": 1, "STORE_RES": True, "STORE_RSTD": False,
                            "HAS_DRES": False, "SUM_P": 0, "SUM_N": 0, "dw_ptr": None, "SPLITS": 1,
                            "SPLITS_POW2": 1, "WEIGHT_AT": 0, "CHUNKS": 2,
                            "TAIL_N": tail_n}.items() if k in names}
if "STORE_RSTD" in names:
    consts["rstd_ptr"] = None
for k in consts:
    sig[k] = "constexpr"
# Triton's own specialization: tensors 16-byte aligned; the ints (hidden size, strides) not divisible by 16.
attrs = {(i,): [["tt.divisibility", 16]] for i, n in enumerate(names) if n.endswith("_ptr") and n not in consts}
ptx = triton.compile(ASTSource(fn=kernel, signature=sig, constexprs=consts, attrs=attrs),
                     target=GPUTarget("cuda", 90, 32), options={"num_warps": 4}).asm["ptx"]
print(json.dumps({op: len(re.findall(op + r"\.global[.\w]*\.v4", ptx)) for op in ("ld", "st")}))
"""


def vector_ops(kernel: str, vec: int, block_n: int = 2048, tail_n: int = 0) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    out = subprocess.run([sys.executable, "-c", SCRIPT, kernel, str(vec), str(block_n), str(tail_n)], env=env,
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    return json.loads(out.stdout.splitlines()[-1])


@pytest.mark.parametrize("kernel", ["_rows_kernel", "_looped_kernel", "_bwd_rows_kernel", "_bwd_dot_kernel",
                                    "_bwd_columns_kernel"])
def test_rows_of_a_multiple_of_8_elements_load_16_bytes_at_once(kernel):
    ops = vector_ops(kernel, 8)
    # The dot kernel stores one float per row, nothing row-wide.
    assert ops["ld"] > 0 and (ops["st"] > 0 or kernel == "_bwd_dot_kernel"), ops
    # What the hint buys: without it, Triton cannot prove 16-byte alignment of these rows.
    assert vector_ops(kernel, 1) == {"ld": 0, "st": 0}


def test_the_rows_backward_loads_its_second_piece_16_bytes_at_once():
    # A row held as 2048 + 1024 columns: the second piece adds its own vector loads and stores.
    one, two = vector_ops("_bwd_rows_kernel", 8), vector_ops("_bwd_rows_kernel", 8, tail_n=1024)
    assert two["ld"] > one["ld"] > 0 and two["st"] > one["st"] > 0, (one, two)
    assert vector_ops("_bwd_rows_kernel", 1, tail_n=1024) == {"ld": 0, "st": 0}

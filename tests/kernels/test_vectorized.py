"""The forward kernels load and store 16 bytes at once wherever the hidden size and strides allow it.

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
from fusedkernel.kernels import forward

kernel = getattr(forward, sys.argv[1])
vec, block_n = int(sys.argv[2]), int(sys.argv[3])
names = list(inspect.signature(kernel.fn).parameters)
sig = {n: "*bf16" if n.endswith("_ptr") else "i32" for n in names}
sig["eps"] = "fp32"
consts = {"BLOCK_N": block_n, "STORE_RES": True, "STORE_RSTD": False, "VEC": vec, "rstd_ptr": None}
if "SPLITS" in names:
    consts.update(BLOCK_M=1, SPLITS=1, SPLITS_POW2=1, WEIGHT_FIRST=True, slot_ptr=None)
for k in consts:
    sig[k] = "constexpr"
# Triton's own specialization: tensors 16-byte aligned; the ints (hidden size, strides) not divisible by 16.
attrs = {(i,): [["tt.divisibility", 16]] for i, n in enumerate(names) if n in ("x_ptr", "r_ptr", "w_ptr", "y_ptr", "res_ptr")}
ptx = triton.compile(ASTSource(fn=kernel, signature=sig, constexprs=consts, attrs=attrs),
                     target=GPUTarget("cuda", 90, 32), options={"num_warps": 4}).asm["ptx"]
print(json.dumps({op: len(re.findall(op + r"\.global[.\w]*\.v4", ptx)) for op in ("ld", "st")}))
"""


def vector_ops(kernel: str, vec: int, block_n: int = 2048) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    out = subprocess.run([sys.executable, "-c", SCRIPT, kernel, str(vec), str(block_n)], env=env,
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    return json.loads(out.stdout.splitlines()[-1])


@pytest.mark.parametrize("kernel", ["_rows_kernel", "_looped_kernel"])
def test_rows_of_a_multiple_of_8_elements_load_16_bytes_at_once(kernel):
    ops = vector_ops(kernel, 8)
    assert ops["ld"] > 0 and ops["st"] > 0, ops
    # What the hint buys: without it, Triton cannot prove 16-byte alignment of these rows.
    assert vector_ops(kernel, 1) == {"ld": 0, "st": 0}

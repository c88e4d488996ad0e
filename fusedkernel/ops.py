"""The public fused op: ``y = rmsnorm(x + residual) * weight`` in one Triton kernel."""

from __future__ import annotations

import torch

from ._validation import check_inputs, rows_view
from .kernels.launch import INTERPRET, forward_rows


def add_rmsnorm(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor,
                eps: float = 1e-6) -> torch.Tensor:
    """Fused residual add + RMSNorm: ``y = rmsnorm(x + residual) * weight``.

    Computes, per row (last dimension, hidden size N)::

        t    = float32(x) + float32(residual)
        rstd = 1 / sqrt(mean(t * t) + eps)          # float32
        y    = round_to_x_dtype(t * rstd * weight)  # product in float32, one rounding

    HF Llama's ``LlamaRMSNorm`` rounds ``t * rstd`` to the input dtype *before*
    the weight multiply; this op rounds only once, after it, so its bf16/fp16
    output can differ from Llama's by one rounding step.

    Args:
        x: (..., N) CUDA tensor, float32, float16 or bfloat16. Any number of
            leading dimensions. Rows may be strided (row stride > N, e.g. one
            slice of a fused QKV projection) if the last dimension is
            contiguous and the leading dimensions collapse into one row stride;
            otherwise ValueError (no hidden copy).
        residual: same shape and dtype as x, same layout rules.
        weight: (N,), x's dtype or float32, contiguous.
        eps: added to the mean square before the square root; finite, > 0.

    Returns:
        y: contiguous tensor of x's shape and dtype. Zero rows return an empty
        tensor without a launch.

    Raises:
        TypeError: non-tensor input, dtype not float32/float16/bfloat16,
            residual dtype != x dtype, weight dtype not x's or float32, eps not real.
        ValueError: shape mismatch, weight length != N, N == 0, tensors on
            different devices, tensors not on CUDA (outside the Triton
            interpreter), non-contiguous last dimension, eps <= 0 or not finite.

    Accumulation is float32 for every dtype, so float16 inputs whose squares
    overflow float16 (|t| > 256) give finite, correct output.
    """
    eps = check_inputs(x, residual, weight, eps)
    if not x.is_cuda and not INTERPRET:
        raise ValueError(f"x must be a CUDA tensor, got device {x.device} "
                         "(CPU tensors run only under TRITON_INTERPRET=1)")
    x2, r2 = rows_view(x, "x"), rows_view(residual, "residual")
    y = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    if x2.shape[0] > 0:
        forward_rows(x2, r2, weight, eps, y.view(-1, x.shape[-1]))
    return y

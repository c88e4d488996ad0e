"""Reference and tolerances shared by the tests."""

import torch
import torch.nn.functional as F

# One ulp of the output dtype, relative: the fused op rounds an fp32 result
# once, so it lands within half an ulp of the fp32 reference; the extra half
# ulp absorbs the reference's own fp32 rounding (for float32, summation
# order over up to 262144 terms).
RTOL = {torch.float32: 2e-5, torch.float16: 2.0**-10, torch.bfloat16: 2.0**-7}
ATOL = {torch.float32: 1e-5, torch.float16: 1e-5, torch.bfloat16: 1e-4}


def reference(x, residual, weight, eps=1e-6):
    """fp32 reference: F.rms_norm of the fp32 sum, times the fp32 weight."""
    t = x.float() + residual.float()
    return F.rms_norm(t, (t.shape[-1],), eps=eps) * weight.float()


def assert_matches_reference(y, x, residual, weight, eps=1e-6):
    assert y.dtype == x.dtype and y.shape == x.shape
    torch.testing.assert_close(y.float(), reference(x, residual, weight, eps),
                               rtol=RTOL[x.dtype], atol=ATOL[x.dtype])


def rand(shape, dtype, device, scale=1.0, seed=None):
    g = None
    if seed is not None:
        g = torch.Generator(device="cpu").manual_seed(seed)
    return (torch.randn(shape, generator=g) * scale).to(dtype=dtype, device=device)


def kernels_seen_by_launch_hook(fn, hook_name="launch_enter_hook"):
    """(fn(), names of the kernels Triton's launch hook ``hook_name`` saw while it ran)."""
    import triton

    seen = []

    def hook(metadata):
        seen.append(metadata.get()["name"])

    chain = getattr(triton.knobs.runtime, hook_name)
    chain.add(hook)
    try:
        return fn(), seen
    finally:
        chain.remove(hook)


def out_of_memory_at_width(monkeypatch, n: int) -> None:
    """Make torch.randn raise torch.OutOfMemoryError for tensors whose last dimension is ``n`` (a case too wide)."""
    real = torch.randn

    def randn(*size, **kw):
        if size[-1] == n:
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 20.00 GiB\nmore")
        return real(*size, **kw)

    monkeypatch.setattr(torch, "randn", randn)

"""Every bad input raises a TypeError / ValueError that names the argument."""

import contextlib
import fractions
import math

import pytest
import torch

from fusedkernel import add_rmsnorm
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fusedkernel import _validation
from fusedkernel._validation import _rows_overlap, check_eps


def good(device, n=8, dtype=torch.float16):
    return (torch.randn(2, n, device=device, dtype=dtype), torch.randn(2, n, device=device, dtype=dtype),
            torch.randn(n, device=device, dtype=dtype))


@pytest.mark.parametrize("case, exc, match", [
    ("x_not_tensor", TypeError, "x must be a torch.Tensor"),
    ("residual_not_tensor", TypeError, "residual must be a torch.Tensor"),
    ("weight_not_tensor", TypeError, "weight must be a torch.Tensor"),
    ("int_x", TypeError, "x must be float32, float16 or bfloat16"),
    ("float64_x", TypeError, "x must be float32, float16 or bfloat16"),
    ("residual_dtype", TypeError, "residual must have x's dtype"),
    ("weight_dtype", TypeError, "weight must be torch.float16"),
    ("shape_mismatch", ValueError, "residual must have x's shape"),
    ("weight_length", ValueError, r"weight must have shape \(8,\)"),
    ("weight_2d", ValueError, r"weight must have shape \(8,\)"),
    ("zero_width", ValueError, "hidden size N"),
    ("scalar_x", ValueError, "at least one dimension"),
    ("eps_zero", ValueError, "eps must be finite and > 0"),
    ("eps_negative", ValueError, "eps must be finite and > 0"),
    ("eps_nan", ValueError, "eps must be finite and > 0"),
    ("eps_inf", ValueError, "eps must be finite and > 0"),
    ("eps_str", TypeError, "eps must be a real number"),
    ("eps_bool", TypeError, "eps must be a real number"),
    ("eps_tensor", TypeError, "eps must be a real number"),
    ("eps_huge_int", ValueError, "eps must be finite and > 0"),
    ("eps_below_float32", ValueError, "eps must be a normal float32 number"),
    ("eps_subnormal_float32", ValueError, "eps must be a normal float32 number"),
    ("eps_above_float32", ValueError, "eps must be a normal float32 number"),
    ("sparse_residual", ValueError, "residual must be a dense strided tensor"),
])
def test_bad_input_names_the_argument(case, exc, match, device):
    x, r, w = good(device)
    eps = 1e-6
    if case == "x_not_tensor":
        x = x.tolist()
    elif case == "residual_not_tensor":
        r = 1.0
    elif case == "weight_not_tensor":
        w = None
    elif case == "int_x":
        x, r = x.to(torch.int32), r.to(torch.int32)
    elif case == "float64_x":
        x, r = x.double(), r.double()
    elif case == "residual_dtype":
        r = r.bfloat16()
    elif case == "weight_dtype":
        w = w.bfloat16()
    elif case == "shape_mismatch":
        r = r[:1]
    elif case == "weight_length":
        w = w[:7]
    elif case == "weight_2d":
        w = w.view(1, 8)
    elif case == "zero_width":
        x, r, w = x[:, :0], r[:, :0], w[:0]
    elif case == "scalar_x":
        x, r = x[0, 0], r[0, 0]
    elif case == "eps_str":
        eps = "1e-6"
    elif case == "eps_bool":
        eps = True
    elif case == "eps_tensor":
        eps = torch.tensor(1e-6)
    elif case == "neg_view":
        x = torch._neg_view(x)
    elif case == "sparse_residual":
        r = r.to_sparse()
    else:
        eps = {"eps_zero": 0.0, "eps_negative": -1e-6, "eps_nan": math.nan, "eps_inf": math.inf,
               "eps_huge_int": 10**400, "eps_below_float32": 1e-46, "eps_subnormal_float32": 1e-40,
               "eps_above_float32": 1e39}[case]
    with pytest.raises(exc, match=match):
        add_rmsnorm(x, r, w, eps)


@pytest.mark.parametrize("name", ["x", "residual"])
def test_non_contiguous_last_dim_is_refused_not_copied(name, device):
    x, r, w = good(device)
    bad = torch.randn(8, 2, device=device, dtype=torch.float16).t()  # (2, 8), stride (1, 2)
    args = {"x": (bad, r), "residual": (x, bad)}[name]
    with pytest.raises(ValueError, match=f"{name} must have a contiguous last dimension"):
        add_rmsnorm(*args, w)


def test_uncollapsible_leading_dims_are_refused(device):
    base = torch.randn(4, 6, 8, device=device, dtype=torch.float16)
    x = base[:, :3]  # (4, 3, 8), strides (48, 8, 1): rows are not evenly spaced
    with pytest.raises(ValueError, match="x's leading dimensions must collapse"):
        add_rmsnorm(x, torch.randn_like(x), torch.randn(8, device=device, dtype=torch.float16))


def test_non_contiguous_weight_is_refused(device):
    x, r, _ = good(device)
    w = torch.randn(16, device=device, dtype=torch.float16)[::2]
    with pytest.raises(ValueError, match="weight must be contiguous"):
        add_rmsnorm(x, r, w)


def test_tensors_on_different_devices():
    x, r, w = good("cpu")
    with pytest.raises(ValueError, match="must be on one device"):
        add_rmsnorm(x, r, w.to("meta"))


@pytest.mark.parametrize("flag, grad", [(None, False), (None, True), ("return_residual", False),
                                        ("return_residual", True), ("inplace_residual", False)])
def test_meta_tensors_give_meta_outputs(flag, grad):
    # Shapes without data (meta-device model set-up, FLOP counting): they were refused with a device error.
    x, r = torch.randn(2, 8, device="meta", requires_grad=grad), torch.randn(2, 8, device="meta")
    out = add_rmsnorm(x, r, torch.randn(8, device="meta"), **({flag: True} if flag else {}))
    outs = out if isinstance(out, tuple) else (out,)
    assert all(o.is_meta and o.shape == (2, 8) for o in outs) and (flag != "inplace_residual" or outs[1] is r)
    with pytest.raises(ValueError, match="eps must be finite"):  # still checked
        add_rmsnorm(x, r, torch.randn(8, device="meta"), 0.0)


@pytest.mark.parametrize("case, match", [
    ("transposed", "x must have a contiguous last dimension"),
    ("uncollapsible", "x's leading dimensions must collapse"),
    ("expanded residual", "residual has rows that share memory"),
    ("inference residual", "residual is an inference tensor")])
def test_a_meta_dry_run_refuses_what_the_real_call_would(case, match):
    # A review's find: meta (and fake) calls checked only shapes, dtypes and eps; a dry run said "fine" to
    # layouts the real call refuses. (Overlaps of memory need addresses: those only the real call sees.)
    m = lambda *s: torch.empty(*s, device="meta")  # noqa: E731
    x, r, inplace = m(2, 8), m(2, 8), case.endswith("residual")
    if case == "transposed":
        x = m(8, 2).t()
    elif case == "uncollapsible":
        x = m(3, 2, 8).transpose(0, 1)
    elif case == "expanded residual":
        r = m(1, 8).expand(2, 8)
    else:
        with torch.inference_mode():
            r = m(2, 8)
    with pytest.raises(ValueError, match=match):
        add_rmsnorm(x, r if case != "uncollapsible" else m(2, 3, 8), m(8), inplace_residual=inplace)


def test_meta_tensors_under_torch_compile():
    # A review's find: dynamo reads a meta tensor's get_device() as None, which the input check compared with 0.
    m = lambda *s: torch.empty(*s, device="meta")  # noqa: E731
    torch._dynamo.reset()
    y, r = torch.compile(lambda a, b, w: add_rmsnorm(a, b, w, return_residual=True), fullgraph=True,
                         backend="eager")(m(2, 8), m(2, 8), m(8))
    assert y.is_meta and r.is_meta and y.shape == r.shape == (2, 8)


def test_integer_eps_is_accepted_as_float():
    assert check_eps(1) == 1.0 and isinstance(check_eps(1), float)


@pytest.mark.parametrize("path", ["direct", "gradient", "dispatch mode", "dispatch mode, in place"])
@pytest.mark.parametrize("name", ["x", "residual", "weight"])
def test_lazy_negation_views_are_refused_by_the_fused_op(name, path, device):
    # The kernel reads raw memory: a lazily negated tensor would lose its sign. With a gradient, or under a
    # dispatch mode, the call goes through the custom ops, whose negation fallback copied the view and answered
    # (a review's find), or failed an internal assert on the mutated residual (a later one's): one answer.
    from torch.utils._python_dispatch import TorchDispatchMode

    class PassThrough(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            return func(*args, **(kwargs or {}))

    args = dict(zip(("x", "residual", "weight"), good(device)))
    args[name] = torch._neg_view(args[name].requires_grad_(path == "gradient"))
    mode = PassThrough() if path.startswith("dispatch") else contextlib.nullcontext()
    with mode, pytest.raises(ValueError, match=f"{name} is a lazy negation view"):
        add_rmsnorm(args["x"], args["residual"], args["weight"], inplace_residual=path.endswith("in place"))



@pytest.mark.parametrize("eps, shown", [(3.4028235e38, "got 3.4028235e+38"), (1.17549435e-39, "got 1.17549435e-39"),
                                        (10**400, "an int of 401 digits"),
                                        (fractions.Fraction(10**400), "a Fraction beyond float's range")])
def test_eps_messages_show_enough_digits(eps, shown):
    with pytest.raises(ValueError, match=shown.replace("+", r"\+")):
        check_eps(eps)


def test_float32_extremes_are_valid_eps():
    assert check_eps(float(torch.finfo(torch.float32).max)) > 0
    assert check_eps(float(torch.finfo(torch.float32).tiny)) > 0


@settings(max_examples=300, deadline=None)
@given(n=st.integers(1, 6), rows_a=st.integers(1, 4), rows_b=st.integers(1, 4),
       stride=st.integers(0, 6), pa=st.integers(0, 40), pb=st.integers(0, 40))
def test_row_overlap_matches_brute_force(n, rows_a, rows_b, stride, pa, pb):
    # Equal row strides (>= n: rows of one tensor never share memory): exact.
    s = n + stride
    a, b = (pa, rows_a, s, n), (pb, rows_b, s, n)
    elements = [{p + i * s + j for i in range(r) for j in range(n)} for p, r, _, _ in (a, b)]
    assert _rows_overlap(a, b) == bool(elements[0] & elements[1])


@settings(max_examples=400, deadline=None)
@given(rows=st.integers(1, 4), n=st.integers(1, 6), ox=st.integers(0, 30), orr=st.integers(0, 30),
       ow=st.integers(0, 30), x_stride=st.integers(0, 3), r_stride=st.integers(0, 3))
def test_check_inplace_refuses_exactly_the_overlaps(rows, n, ox, orr, ow, x_stride, r_stride):
    # Views of one buffer at any offsets, contiguous (a stride of 0 extra: the one-comparison path) or not:
    # refused where residual shares an element with the weight, or with x not being the very same elements
    # (brute force over element addresses); exactly there where x and residual have one row stride (with
    # two, _rows_overlap may refuse rows whose address ranges meet without sharing an element).
    buf = torch.zeros(128)
    x, r = (buf.as_strided((rows, n), (n + s, 1), o) for o, s in ((ox, x_stride), (orr, r_stride)))
    w = buf.as_strided((n,), (1,), ow)
    elements = [{o + i * (n + s) + j for i in range(k) for j in range(n)}
                for o, s, k in ((ox, x_stride, rows), (orr, r_stride, rows), (ow, 0, 1))]
    same = ox == orr and (x_stride == r_stride or rows == 1)  # the very same elements
    refused = (bool(elements[0] & elements[1]) and not same) or bool(elements[2] & elements[1])
    try:
        _validation.check_inplace(x, r, w)
    except ValueError:
        assert refused or (x_stride != r_stride and rows > 1), (x.stride(), r.stride(), ox, orr, ow)
    else:
        assert not refused, (x.stride(), r.stride(), ox, orr, ow)


def test_float32_x_names_one_weight_dtype(device):
    # x float32: weight must be float32 (the message offered float32 twice).
    x = torch.ones(2, 8, device=device)
    with pytest.raises(TypeError, match=r"weight must be torch.float32 \(x's dtype\), got torch.bfloat16$"):
        add_rmsnorm(x, x, torch.ones(8, dtype=torch.bfloat16, device=device))



_MUTATIONS = ["list", "strided", "sparse", "parameter", "meta", "cpu", "float64", "int32", "float32", "bfloat16",
              "shape", "scalar", "zero_width", "weight_2d", "weight_longer", "subclass", "nested"]


class _Subclass(torch.Tensor):
    pass


def _mutate(t, mutation):
    if mutation == "list":
        return [1.0]
    if mutation == "strided" and t.dim() >= 1:
        return torch.zeros(*t.shape[:-1], 2 * t.shape[-1], dtype=t.dtype, device=t.device)[..., ::2]
    if mutation == "sparse" and t.device.type == "cpu":
        return t.to_sparse()
    if mutation == "parameter":
        return torch.nn.Parameter(t, requires_grad=False)
    if mutation == "nested" and t.dim() >= 1 and t.numel():
        return torch.nested.nested_tensor([t.reshape(-1, t.shape[-1])])
    if mutation == "subclass":
        return t.as_subclass(_Subclass)
    if mutation in ("meta", "cpu"):
        return t.to(mutation)
    if mutation in ("float64", "int32", "float32", "bfloat16"):
        return t.to(getattr(torch, mutation))
    if mutation == "shape":
        return torch.zeros(*t.shape, 2, dtype=t.dtype, device=t.device)
    if mutation == "scalar":
        return torch.zeros((), dtype=t.dtype, device=t.device)
    if mutation == "zero_width":
        return torch.zeros(*t.shape[:-1], 0, dtype=t.dtype, device=t.device)
    if mutation == "weight_2d":
        return t.reshape(1, -1)
    if mutation == "weight_longer":
        return torch.zeros((t.shape[-1] if t.dim() else 0) + 1, dtype=t.dtype, device=t.device)
    return t


# The device fixture is a constant, so sharing it across examples is safe.
@pytest.mark.filterwarnings("ignore:The PyTorch API of nested tensors is in prototype stage")
@settings(max_examples=800, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(dtype=st.sampled_from([torch.float32, torch.float16, torch.bfloat16, torch.float64, torch.int32]),
       weight_dtype=st.sampled_from(["x's", torch.float32, torch.float16]),
       shape=st.lists(st.integers(1, 3), max_size=2).flatmap(lambda lead: st.integers(0, 3).map(
           lambda n: (*lead, n))),
       mutations=st.lists(st.tuples(st.integers(0, 2), st.sampled_from(_MUTATIONS)), max_size=2),
       eps=st.sampled_from([1e-6, 1e-6, 1e-6, 1, 0.0, -1.0, math.nan, math.inf, 1e-50, 1e39, True, "1e-6"]))
def test_check_inputs_common_case_agrees_with_the_checks_one_by_one(dtype, weight_dtype, shape, mutations, eps,
                                                                     device):
    # check_inputs takes a one-expression shortcut for valid inputs: it must
    # accept exactly what the one-by-one checks accept, with the same result.
    # Inputs of one dtype and shape (valid for float dtypes and N >= 1), then
    # up to two changes that may make them invalid.
    w_dtype = dtype if weight_dtype == "x's" else weight_dtype
    args = [torch.zeros(shape, dtype=dtype, device=device), torch.zeros(shape, dtype=dtype, device=device),
            torch.zeros(shape[-1], dtype=w_dtype, device=device)]
    for which, mutation in mutations:
        # Sparse, nested, meta and subclassed tensors stay as they are (torch cannot change all of them).
        t = args[which]
        if type(t) is torch.Tensor and t.layout == torch.strided and not (t.is_nested or t.is_meta):
            args[which] = _mutate(args[which], mutation)

    def outcome(check):
        try:
            return check(*args, eps)
        except (TypeError, ValueError) as e:
            return type(e), str(e)

    assert outcome(_validation.check_inputs) == outcome(_validation._check_one_by_one)

"""The Linux Metal runtime's CPU fallback kernels (runtime/native/fallbacks/): every one the Metal backend
declares is exported with the signature Inductor calls, and those for matrix products and top-k, called by
their C symbols with real AtenTensorHandles, match torch; how the library is built and numbers judged:
tests/fallback_helpers.py."""

from __future__ import annotations

import ctypes
import math

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from fallback_helpers import (EXAMPLES, H, LAYOUTS, METAL_DTYPES, SEEDS, SIGNATURES, U32, assert_fails,
                              assert_rounded_once, call, custom_prototypes, last_error, library, product_exact,
                              read_densely, steal, strided, values)
from shimkit.testing.kernels import AOTI_TORCH_SUCCESS, tensor_handles
from shimkit.testing.strategies import tensors


@pytest.fixture(scope="module", autouse=True)
def _built():
    library()  # built before any hypothesis example runs


# ---------------------------------------------------------------------------------------------- symbols


def test_every_fallback_the_metal_backend_declares_is_exported():
    from executorch.backends.apple.metal.metal_backend import MetalBackend

    declared = {name for name in MetalBackend.get_supported_fallback_kernels() if name.startswith("aoti_torch_")}
    assert declared == set(SIGNATURES)
    for name in declared:
        assert hasattr(library(), name)


def test_the_signatures_are_the_ones_inductor_calls():
    # The build force-includes c_shim_mps.h and the custom prototypes: a differing definition would not
    # have compiled. Here: the prototypes really name these symbols.
    names = {prototype.split("(")[0].split()[-1] for prototype in custom_prototypes()}
    assert names == {"aoti_torch_mps__linear_fp_act_4bit_weight", "aoti_torch_mps_gather_qmv",
                     "aoti_torch_mps_gated_delta_rule"}


# ---------------------------------------------------------------------------------------------- mm, bmm


@EXAMPLES
@given(data=st.data(), dtype=st.sampled_from(METAL_DTYPES), m=st.integers(0, 5), k=st.integers(0, 5),
       n=st.integers(0, 5), specials=st.booleans(), transposed=st.booleans())
def test_mm_matches_torch(data, dtype, m, k, n, specials, transposed):
    """The layouts op_mm.mm reads right: a dense self, and mat2 dense or densely transposed (x @ weight.t())."""
    self_ = data.draw(tensors((m, k), dtype, elements=lambda _: values(specials))).contiguous()
    mat2 = data.draw(tensors((k, n), dtype, elements=lambda _: values(specials))).contiguous()
    if transposed:
        mat2 = mat2.t().contiguous().t()
    out = data.draw(tensors((m, n), dtype)).contiguous()
    expected = torch.mm(self_, mat2)
    with tensor_handles(out, self_, mat2) as handles:
        assert call("aoti_torch_mps_mm_out", *handles) == AOTI_TORCH_SUCCESS, last_error()
    exact, magnitude = product_exact(self_, mat2)
    assert_rounded_once(out, exact, (k + 2) * U32 * magnitude, pattern=expected)


@EXAMPLES
@given(data=st.data(), dtype=st.sampled_from(METAL_DTYPES), m=st.integers(0, 4), k=st.integers(0, 4),
       n=st.integers(0, 4), layout_self=LAYOUTS, layout2=LAYOUTS, out_layout=LAYOUTS)
def test_mm_computes_what_op_mm_mm_computes(data, dtype, m, k, n, layout_self, layout2, out_layout):
    """self read densely through its sizes, mat2 densely or densely transposed (strides (1, not 1)), the [M, N]
    result written densely from out's data pointer (op_mm.mm at cff6f4d). Small integers keep every step exact,
    so the comparison is to the bit."""
    integers = lambda shape: torch.randint(-3, 4, shape, generator=torch.Generator().manual_seed(  # noqa: E731
        data.draw(SEEDS))).to(dtype)
    self_, mat2 = strided(integers((m, k)), layout_self), strided(integers((k, n)), layout2)
    out = strided(torch.full((m, n), math.nan, dtype=dtype), out_layout)
    with tensor_handles(out, self_, mat2) as handles:
        assert call("aoti_torch_mps_mm_out", *handles) == AOTI_TORCH_SUCCESS, last_error()
    transposed = mat2.stride(0) == 1 and mat2.stride(1) != 1
    read2 = read_densely(mat2, (n, k)).t() if transposed else read_densely(mat2, (k, n))
    expected = (read_densely(self_, (m, k)).float() @ read2.float()).to(dtype)
    torch.testing.assert_close(read_densely(out, (m, n)), expected, rtol=0, atol=0, equal_nan=True)


@pytest.mark.parametrize("case, words", [
    ("out_small", ("out float32[3, 1] strides [1, 1] holds fewer than the 6 elements op_mm.mm writes",)),
    ("out_dtype", ("out is bfloat16 but self is float32", "reinterpret")),
    ("mat2_dtype", ("mat2 is bfloat16 but self is float32",)),
    ("float16", ("Unsupported data type for matrix multiplication",)),
    ("float64", ("Unsupported data type for matrix multiplication",)),
    ("rank", ("tensors must be 2-D, got 1 and 2",)),
    ("shapes", ("incompatible matrix sizes for mm (2x4 and 3x3)",)),
    ("broadcast_out", ("out float32[2, 3] strides [0, 1] holds fewer than the 6 elements",)),
    ("expanded_self", ("self float32[2, 4] strides [0, 1] spans fewer elements than op_mm.mm reads",)),
])
def test_mm_refuses_as_op_mm_mm_does_and_never_reads_past_a_buffer(case, words):
    self_, mat2, out = torch.ones(2, 4), torch.ones(4, 3), torch.empty(2, 3)
    if case == "out_small":
        out = torch.empty(3, 1)
    elif case == "out_dtype":
        out = out.bfloat16()
    elif case == "mat2_dtype":
        mat2 = mat2.bfloat16()
    elif case in ("float16", "float64"):
        dtype = getattr(torch, case)
        self_, mat2, out = self_.to(dtype), mat2.to(dtype), out.to(dtype)
    elif case == "rank":
        self_ = torch.ones(8)
    elif case == "shapes":
        mat2 = torch.ones(3, 3)
    elif case == "broadcast_out":
        out = torch.empty(1, 3).expand(2, 3)
    elif case == "expanded_self":
        self_ = torch.ones(1, 4).expand(2, 4)
    with tensor_handles(out, self_, mat2) as handles:
        assert_fails(call("aoti_torch_mps_mm_out", *handles), "aoti_torch_mps_mm_out: ", *words)


@EXAMPLES
@given(data=st.data(), dtype=st.sampled_from(METAL_DTYPES), b=st.integers(0, 3), m=st.integers(0, 4),
       k=st.integers(0, 4), n=st.integers(0, 4), specials=st.booleans())
def test_bmm_matches_torch(data, dtype, b, m, k, n, specials):
    self_ = data.draw(tensors((b, m, k), dtype, elements=lambda _: values(specials), layouts=False))
    mat2 = data.draw(tensors((b, k, n), dtype, elements=lambda _: values(specials), layouts=False))
    out = torch.full((b, m, n), math.nan, dtype=dtype)
    expected = torch.bmm(self_, mat2)
    with tensor_handles(out, self_, mat2) as handles:
        assert call("aoti_torch_mps_bmm_out", *handles) == AOTI_TORCH_SUCCESS, last_error()
    exact, magnitude = product_exact(self_, mat2)
    assert_rounded_once(out, exact, (k + 2) * U32 * magnitude, pattern=expected)


@pytest.mark.parametrize("case, words", [
    ("transposed_mat2", ("mat2 must be contiguous", "dense")),
    ("sliced_self", ("self must be contiguous",)),
    ("strided_out", ("out must be contiguous",)),
    ("float16", ("self has dtype float16",)),
    ("batch", ("batch size mismatch", "mat2 has 3")),
    ("out_shape", ("out has shape [2, 2, 5]",)),
    ("rank", ("mat2 must be 3-D",)),
])
def test_bmm_refuses_what_upstream_refuses(case, words):
    self_, mat2, out = torch.ones(2, 2, 4), torch.ones(2, 4, 3), torch.empty(2, 2, 3)
    if case == "transposed_mat2":
        mat2 = torch.ones(2, 3, 4).mT
    elif case == "sliced_self":
        self_ = torch.ones(2, 2, 8)[..., ::2]
    elif case == "strided_out":
        out = torch.empty(2, 3, 2).mT
    elif case == "float16":
        self_, mat2, out = self_.half(), mat2.half(), out.half()
    elif case == "batch":
        mat2 = torch.ones(3, 4, 3)
    elif case == "out_shape":
        out = torch.empty(2, 2, 5)
    elif case == "rank":
        mat2 = torch.ones(4, 3)
    with tensor_handles(out, self_, mat2) as handles:
        assert_fails(call("aoti_torch_mps_bmm_out", *handles), "aoti_torch_mps_bmm_out: ", *words)


# ---------------------------------------------------------------------------------------------- addmm


def addmm_exact(self_, mat1, mat2, beta, alpha):
    """The plugin's rules in float64: beta == 0 ignores self, alpha == 0 ignores the product."""
    product, magnitude = product_exact(mat1, mat2)
    exact = torch.zeros_like(product)
    bound = torch.zeros_like(product)
    if alpha != 0 and mat1.shape[1] > 0:
        exact, bound = alpha * product, abs(alpha) * magnitude
    if beta != 0:
        exact = exact + beta * self_.double()
        bound = bound + abs(beta) * self_.double().abs()
    return exact, (mat1.shape[1] + 4) * U32 * bound


@EXAMPLES
@given(data=st.data(), dtype=st.sampled_from((torch.float32, torch.bfloat16, torch.float16)), m=st.integers(0, 4),
       k=st.integers(0, 4), n=st.integers(0, 4), specials=st.booleans(),
       beta=st.sampled_from((0.0, 1.0, 0.5, -2.0)), alpha=st.sampled_from((0.0, 1.0, 1.5)))
def test_addmm_is_the_plugins_adapter_over_the_aoti_api(data, dtype, m, k, n, specials, beta, alpha):
    self_shape = data.draw(st.sampled_from([(m, n), (n,), (1, n), (m, 1), ()]))
    self_ = data.draw(tensors(self_shape, dtype, elements=lambda _: values(specials)))
    mat1 = data.draw(tensors((m, k), dtype, elements=lambda _: values(specials)))
    mat2 = data.draw(tensors((k, n), dtype, elements=lambda _: values(specials)))
    out = data.draw(tensors((m, n), dtype))
    with tensor_handles(out, self_, mat1, mat2) as handles:
        assert call("aoti_torch_mps_addmm_out", *handles, beta, alpha) == AOTI_TORCH_SUCCESS, last_error()
    exact, bound = addmm_exact(self_.expand(m, n), mat1, mat2, beta, alpha)
    assert_rounded_once(out, exact, bound)


def test_addmm_errors_name_the_argument():
    self_, mat1, mat2 = torch.ones(3), torch.ones(2, 4), torch.ones(4, 3)
    with tensor_handles(torch.empty(3, 2), self_, mat1, mat2) as handles:
        assert_fails(call("aoti_torch_mps_addmm_out", *handles, 1.0, 1.0), "aoti_torch_mps_addmm_out: ", "out has shape")
    with tensor_handles(torch.empty(2, 3), self_, mat1, mat2.bfloat16()) as handles:
        assert_fails(call("aoti_torch_mps_addmm_out", *handles, 1.0, 1.0), "mat2 is bfloat16")


@EXAMPLES
@given(data=st.data(), dtype=st.sampled_from(METAL_DTYPES), m=st.integers(0, 4), k=st.integers(0, 4),
       n=st.integers(0, 4), beta=st.sampled_from((1.0, 0.5, 0.0, 2.0)), alpha=st.sampled_from((1.0, 0.5, 2.0)),
       layout1=LAYOUTS, layout2=LAYOUTS, layout_self=LAYOUTS)
def test_the_runtimes_own_addmm_computes_what_op_addmm_mm_computes(data, dtype, m, k, n, beta, alpha, layout1,
                                                                  layout2, layout_self):
    """Stock programs link it (shimkit's link the addmm plugin's): mat1 and self read densely through their sizes,
    mat2 densely or densely transposed, the product, alpha and beta each rounded to the dtype. Small integers keep
    every step exact, so the comparison is to the bit."""
    integers = lambda shape: torch.randint(-3, 4, shape, generator=torch.Generator().manual_seed(  # noqa: E731
        data.draw(SEEDS))).to(dtype)
    self_shape = data.draw(st.sampled_from([(m, n), (n,), (1, n), (m, 1), ()]))
    self_ = strided(integers(self_shape), layout_self)
    mat1, mat2 = strided(integers((m, k)), layout1), strided(integers((k, n)), layout2)
    out = torch.full((m, n), math.nan, dtype=dtype)
    with tensor_handles(out, self_, mat1, mat2) as handles:
        status = call("aoti_torch_mps_addmm_out", *handles, beta, alpha, upstream_addmm=True)
    assert status == AOTI_TORCH_SUCCESS, last_error(upstream_addmm=True)
    transposed = mat2.dim() == 2 and mat2.stride(0) == 1 and mat2.stride(1) != 1
    read2 = read_densely(mat2, (n, k)).t() if transposed else read_densely(mat2, (k, n))
    product = (read_densely(mat1, (m, k)).float() @ read2.float()).to(dtype)
    if alpha != 1.0:
        product = product * torch.tensor(alpha, dtype=dtype)
    bias = read_densely(self_, self_.shape)
    if beta != 1.0:
        bias = bias * torch.tensor(beta, dtype=dtype)
    torch.testing.assert_close(out, product + bias, rtol=0, atol=0, equal_nan=True)


@pytest.mark.parametrize("case, words", [
    ("rank", ("mat1/mat2 must be 2-D, got 1 and 2",)),
    ("sizes", ("incompatible matrix sizes (2x4 and 3x3)",)),
    ("dtype", ("dtype mismatch across operands (mat1=6, mat2=15, self=6, out=6)",)),
    ("float16", ("Unsupported data type for addmm",)),
    ("broadcast", ("self float32[2] strides [1] does not broadcast to the [2, 3] product",)),
    ("out_small", ("out float32[2, 2] strides [2, 1] holds fewer than the 6 elements",)),
    ("expanded", ("mat1 float32[2, 4] strides [0, 1] spans fewer elements than op_addmm.mm reads",)),
])
def test_the_runtimes_own_addmm_refuses_as_op_addmm_mm_does(case, words):
    self_, mat1, mat2, out = torch.ones(3), torch.ones(2, 4), torch.ones(4, 3), torch.empty(2, 3)
    if case == "rank":
        mat1 = torch.ones(4)
    elif case == "sizes":
        mat2 = torch.ones(3, 3)
    elif case == "dtype":
        mat2 = mat2.bfloat16()
    elif case == "float16":
        self_, mat1, mat2, out = self_.half(), mat1.half(), mat2.half(), out.half()
    elif case == "broadcast":
        self_ = torch.ones(2)
    elif case == "out_small":
        out = torch.empty(2, 2)
    elif case == "expanded":
        mat1 = torch.ones(1, 4).expand(2, 4)
    with tensor_handles(out, self_, mat1, mat2) as handles:
        status = call("aoti_torch_mps_addmm_out", *handles, 1.0, 1.0, upstream_addmm=True)
    assert_fails(status, "aoti_torch_mps_addmm_out: ", *words, upstream_addmm=True)


# ---------------------------------------------------------------------------------------------- topk


def topk_call(self_: torch.Tensor, k: int, dim: int, largest: bool, sorted_: bool = True):
    values_, indices = H(), H()
    with tensor_handles(self_) as (handle,):
        status = call("aoti_torch_mps_topk", handle, k, dim, int(largest), int(sorted_), ctypes.byref(values_),
                      ctypes.byref(indices))
    return status, values_, indices


@EXAMPLES
@given(data=st.data(), dtype=st.sampled_from(METAL_DTYPES), shape=st.lists(st.integers(0, 5), max_size=3),
       largest=st.booleans(), sorted_=st.booleans(), specials=st.booleans())
def test_topk_matches_torch(data, dtype, shape, largest, sorted_, specials):
    ties = st.integers(-2, 2).map(float)  # plenty of equal values
    elements = (ties | st.sampled_from((math.nan, math.inf, -math.inf, -0.0))) if specials else ties | values(False)
    self_ = data.draw(tensors(tuple(shape), dtype, elements=lambda _: elements))
    rank = max(len(shape), 1)
    dim = data.draw(st.integers(-rank, rank - 1))
    length = shape[dim] if shape else 1
    k = data.draw(st.integers(0, length))
    status, values_handle, indices_handle = topk_call(self_, k, dim, largest, sorted_)
    assert status == AOTI_TORCH_SUCCESS, last_error()
    values_, indices = steal(values_handle), steal(indices_handle)
    expected = torch.topk(self_, k, dim, largest=largest, sorted=True)
    assert values_.dtype == dtype and indices.dtype == torch.int64 and values_.is_contiguous() and indices.is_contiguous()
    assert values_.device.type == "cpu"
    # Values and their order are ATen's; indices point at them, each once (ties may be ordered differently).
    assert torch.equal(values_.isnan(), expected.values.isnan())
    assert torch.equal(values_.nan_to_num(), expected.values.nan_to_num())
    if self_.dim() and values_.numel():
        gathered = self_.gather(dim, indices)
        assert torch.equal(gathered.nan_to_num(), values_.nan_to_num()) and torch.equal(gathered.isnan(), values_.isnan())
        assert (indices.sort(dim).values.diff(dim=dim) > 0).all()  # each index once


def test_topk_ranks_nan_above_everything_as_aten():
    self_ = torch.tensor([1.0, math.nan, 3.0, math.inf, math.nan, -1.0])
    for largest in (True, False):
        status, values_handle, indices_handle = topk_call(self_, 4, 0, largest)
        assert status == AOTI_TORCH_SUCCESS, last_error()
        values_, indices = steal(values_handle), steal(indices_handle)
        expected = torch.topk(self_, 4, largest=largest)
        assert torch.equal(values_.nan_to_num(), expected.values.nan_to_num())
        assert torch.equal(indices, expected.indices)


@pytest.mark.parametrize("case, words", [
    ("k", ("k=5 is out of range", "4 elements along dim 1")),
    ("negative_k", ("k=-1 is out of range",)),
    ("dim", ("dim 2 is out of range",)),
    ("float16", ("self has dtype float16",)),
    ("int", ("self has dtype int64",)),
])
def test_topk_errors_name_the_argument(case, words):
    self_, k, dim = torch.ones(3, 4), 2, 1
    if case == "k":
        k = 5
    elif case == "negative_k":
        k = -1
    elif case == "dim":
        dim = 2
    elif case == "float16":
        self_ = self_.half()
    elif case == "int":
        self_ = self_.long()
    status, values_handle, indices_handle = topk_call(self_, k, dim, True)
    assert_fails(status, "aoti_torch_mps_topk: ", *words)
    assert values_handle.value is None and indices_handle.value is None

"""The Linux Metal runtime's CPU fallback kernels (runtime/native/fallbacks/): every one the Metal backend
declares is exported with the signature Inductor calls, and mm's and addmm's, called by their C symbols with real
AtenTensorHandles, compute what upstream's op_mm.mm and op_addmm.mm compute (bmm and top-k:
tests/test_metal_runtime_fallbacks_topk_bmm.py); how the library is built and numbers judged: tests/fallback_helpers.py."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from fallback_helpers import (EXAMPLES, LAYOUTS, METAL_DTYPES, SEEDS, SIGNATURES, U32, assert_fails,
                              assert_rounded_once, call, custom_prototypes, last_error, library, product_exact,
                              read_densely, strided, values)
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


# ---------------------------------------------------------------------------------------------- mm


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

"""addmm's reference kernel against torch.addmm, through both ways in: the pybind11 binding (DLPack
views of torch tensors) and the C shim ``shimkit_ref_addmm_out`` called with real AtenTensorHandles."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from shimkit.testing.kernels import AOTI_TORCH_SUCCESS, tensor_handles
from kernel_helpers import ADDMM, addmm_shims, last_error

DTYPES = (torch.float32, torch.bfloat16, torch.float16)
# Unit roundoff of each output dtype.
UNIT_ROUNDOFF = {torch.float32: 2.0**-24, torch.bfloat16: 2.0**-8, torch.float16: 2.0**-11}
# Layouts a matrix operand can arrive in, named by how it is made.
MATRIX_LAYOUTS = ("contiguous", "transposed", "sliced", "sliced_transposed", "stepped",
                  "expanded_rows", "expanded_cols", "expanded_all")
OUT_LAYOUTS = ("contiguous", "transposed", "sliced", "stepped")
SELF_SHAPES = ("n", "one", "scalar", "1n", "m1", "mn")
# Zero, or far from rounding to zero in any dtype: for a coefficient that is non-zero but rounds to
# zero in float32 or in the tensor dtype, torch.addmm's own paths disagree (its k == 0 path scales in
# the tensor dtype, its gemm path in float32), so no single answer exists to compare with.
SCALARS = st.one_of(st.sampled_from([0.0, -0.0, 1.0, -1.0, 0.5, 2.0]),
                    st.floats(-3, 3, allow_nan=False, allow_infinity=False).filter(
                        lambda x: x == 0 or abs(x) > 1e-3))


def make_matrix(rows: int, cols: int, layout: str, dtype: torch.dtype, gen: torch.Generator) -> torch.Tensor:
    """A rows x cols matrix in `layout`, values from `gen` (float32 normal, then rounded to dtype)."""
    def randn(*shape):
        return torch.randn(*shape, generator=gen).to(dtype)

    if layout == "contiguous":
        return randn(rows, cols)
    if layout == "transposed":
        return randn(cols, rows).t()
    if layout == "sliced":  # storage offset and a leading dimension larger than cols
        return randn(rows + 2, cols + 3)[1:1 + rows, 2:2 + cols]
    if layout == "sliced_transposed":
        return randn(cols + 1, rows + 2)[1:, 2:].t()
    if layout == "stepped":
        return randn(2 * rows, 2 * cols)[::2, ::2]
    if layout == "expanded_rows":
        return randn(1, cols).expand(rows, cols)
    if layout == "expanded_cols":
        return randn(rows, 1).expand(rows, cols)
    if layout == "expanded_all":
        return randn(1, 1).expand(rows, cols)
    raise AssertionError(layout)


def make_self(shape: str, layout: str, m: int, n: int, dtype, gen) -> torch.Tensor:
    if shape == "n":
        return torch.randn(n, generator=gen).to(dtype)
    if shape == "one":
        return torch.randn(1, generator=gen).to(dtype)
    if shape == "scalar":
        return torch.randn((), generator=gen).to(dtype)
    if shape == "1n":
        return make_matrix(1, n, "contiguous", dtype, gen)
    if shape == "m1":
        return make_matrix(m, 1, "contiguous", dtype, gen)
    return make_matrix(m, n, layout, dtype, gen)


@st.composite
def addmm_cases(draw, dtypes=DTYPES, max_dim=6):
    dims = st.integers(0, max_dim)
    m, k, n = draw(dims), draw(dims), draw(dims)
    dtype = draw(st.sampled_from(dtypes))
    gen = torch.Generator().manual_seed(draw(st.integers(0, 2**31 - 1)))
    self_ = make_self(draw(st.sampled_from(SELF_SHAPES)), draw(st.sampled_from(MATRIX_LAYOUTS)),
                      m, n, dtype, gen)
    special = draw(st.sampled_from([None, math.nan, math.inf, -math.inf]))
    if special is not None and self_.numel() > 0:
        if 0 in self_.stride():
            self_ = self_.clone()  # an expanded self cannot take a single-element write
        flat = torch.tensor(draw(st.integers(0, self_.numel() - 1)))
        self_[tuple(torch.unravel_index(flat, self_.shape))] = special
    mat1 = make_matrix(m, k, draw(st.sampled_from(MATRIX_LAYOUTS)), dtype, gen)
    mat2 = make_matrix(k, n, draw(st.sampled_from(MATRIX_LAYOUTS)), dtype, gen)
    # NaN-filled, so an element the kernel forgets to write cannot pass.
    out = make_matrix(m, n, draw(st.sampled_from(OUT_LAYOUTS)), dtype, gen).fill_(math.nan)
    return out, self_, mat1, mat2, draw(SCALARS), draw(SCALARS)


def assert_matches_torch(out, self_, mat1, mat2, beta, alpha):
    """out against torch.addmm: non-finite elements exactly, finite ones within a rounding bound.

    The bound is |beta * self| + |alpha| * (|mat1| @ |mat2|): each term of the result is rounded at
    most a few times in the output dtype (torch may round the product before adding self), plus float32
    accumulation over k terms.
    """
    expected = torch.addmm(self_, mat1, mat2, beta=beta, alpha=alpha)
    assert out.shape == expected.shape and out.dtype == expected.dtype
    got, want = out.double(), expected.double()
    finite = torch.isfinite(want)
    assert torch.equal(torch.isnan(got), torch.isnan(want)), (got, want)
    assert torch.equal(got[~finite & ~torch.isnan(want)], want[~finite & ~torch.isnan(want)])
    m, n, k = out.shape[0], out.shape[1], mat1.shape[1]
    bound = torch.zeros(m, n, dtype=torch.float64)
    if beta != 0:
        bound += (abs(beta) * self_.double().abs()).expand(m, n).nan_to_num(posinf=0.0)
    if alpha != 0:
        bound += abs(alpha) * (mat1.double().abs() @ mat2.double().abs())
    u = UNIT_ROUNDOFF[out.dtype]
    tolerance = (4 * u + (k + 2) * 2.0**-24) * bound + (2.0**-24 if out.dtype == torch.float16 else 1e-30)
    error = (got - want).abs()
    assert bool((error[finite] <= tolerance[finite]).all()), (
        f"max excess {(error - tolerance)[finite].max().item()} for {out.dtype} k={k}")


def run_binding(out, self_, mat1, mat2, beta, alpha):
    ADDMM.addmm_reference(out, self_, mat1, mat2, beta=beta, alpha=alpha)


def run_shim(out, self_, mat1, mat2, beta, alpha):
    library = addmm_shims()
    with tensor_handles(out, self_, mat1, mat2) as handles:
        status = library.shimkit_ref_addmm_out(*handles, beta, alpha)
    assert status == AOTI_TORCH_SUCCESS, last_error()


PATHS = pytest.mark.parametrize("run", [run_binding, run_shim], ids=["binding", "c_shim"])


@PATHS
@given(case=addmm_cases())
def test_matches_torch_addmm(run, case):
    out, self_, mat1, mat2, beta, alpha = case
    run(*case)
    assert_matches_torch(out, self_, mat1, mat2, beta, alpha)


@PATHS
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_beta_zero_ignores_nan_and_inf_in_self(run, dtype):
    self_ = torch.tensor([[math.nan, math.inf], [-math.inf, math.nan]], dtype=dtype)
    mat1 = torch.ones(2, 3, dtype=dtype)
    mat2 = torch.ones(3, 2, dtype=dtype)
    out = torch.empty(2, 2, dtype=dtype)
    run(out, self_, mat1, mat2, 0.0, 1.0)
    assert torch.equal(out, torch.full((2, 2), 3.0, dtype=dtype))


@PATHS
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_alpha_zero_ignores_the_product(run, dtype):
    self_ = torch.tensor([1.0, -2.0], dtype=dtype)
    mat1 = torch.full((2, 3), math.nan, dtype=dtype)
    mat2 = torch.full((3, 2), math.inf, dtype=dtype)
    out = torch.empty(2, 2, dtype=dtype)
    run(out, self_, mat1, mat2, 0.5, 0.0)
    assert torch.equal(out, torch.tensor([[0.5, -1.0], [0.5, -1.0]], dtype=dtype))


@PATHS
@pytest.mark.parametrize("m,k,n", [(0, 3, 2), (2, 0, 3), (2, 3, 0), (0, 0, 0), (1, 1, 1)])
def test_empty_and_unit_dimensions(run, m, k, n):
    self_ = torch.arange(n, dtype=torch.float32)
    mat1 = torch.ones(m, k)
    mat2 = torch.ones(k, n)
    out = torch.full((m, n), math.nan)
    run(out, self_, mat1, mat2, 2.0, 3.0)
    torch.testing.assert_close(out, torch.addmm(self_, mat1, mat2, beta=2.0, alpha=3.0))


@PATHS
def test_out_may_alias_self_and_mat1(run):
    """In-place use (addmm_ writes into self); every input is read before out is written."""
    square = torch.randn(4, 4, generator=torch.Generator().manual_seed(0))
    other = torch.randn(4, 4, generator=torch.Generator().manual_seed(1))
    expected = torch.addmm(square, square, other, beta=0.5, alpha=2.0)
    run(square, square, square, other, 0.5, 2.0)
    torch.testing.assert_close(square, expected)


def test_binding_borrows_without_copying():
    """out is written in place through DLPack: the kernel wrote torch's own memory."""
    out = torch.zeros(2, 2)
    pointer = out.data_ptr()
    ADDMM.addmm_reference(out, torch.ones(2), torch.eye(2), torch.eye(2), beta=1.0, alpha=1.0)
    assert out.data_ptr() == pointer
    assert torch.equal(out, torch.tensor([[2.0, 1.0], [1.0, 2.0]]))

"""The decompositions shimkit adds for zoo gaps (cumsum, baddbmm) against the eager ops."""

import math

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from shimkit.plugins.baddbmm import baddbmm_decomposition
from shimkit.plugins.cumsum import cumsum_decomposition

FLOAT_DTYPES = (torch.float32, torch.float64, torch.float16, torch.bfloat16)
INT_DTYPES = (torch.int8, torch.int32, torch.int64, torch.uint8, torch.bool)
TOLERANCE = {torch.float16: 1e-2, torch.bfloat16: 5e-2, torch.float32: 1e-5, torch.float64: 1e-12}


@st.composite
def tensors(draw, dtypes, max_dims=4, max_side=9):
    dtype = draw(st.sampled_from(dtypes))
    shape = draw(st.lists(st.integers(0, max_side), min_size=0, max_size=max_dims))
    seed = draw(st.integers(0, 2**31 - 1))
    generator = torch.Generator().manual_seed(seed)
    if dtype.is_floating_point:
        values = torch.randn(shape, generator=generator, dtype=torch.float64) * 10
    else:
        values = torch.randint(-100, 100, shape, generator=generator, dtype=torch.int64)
    return values.to(dtype)


def _assert_same(actual, expected):
    assert actual.dtype == expected.dtype
    assert actual.shape == expected.shape
    if expected.dtype.is_floating_point:
        scale = max(1.0, float(expected.abs().max()) if expected.numel() else 1.0)
        torch.testing.assert_close(actual, expected, rtol=0, atol=TOLERANCE[expected.dtype] * scale * 8,
                                   equal_nan=True)
    else:
        assert torch.equal(actual, expected)


@given(tensors(FLOAT_DTYPES + INT_DTYPES), st.data())
def test_cumsum_decomposition_matches_eager(values, data):
    dims = values.dim() or 1
    dim = data.draw(st.integers(-dims, dims - 1))
    dtype = data.draw(st.sampled_from((None, torch.float32, torch.int64, torch.float64)))
    if dtype is not None and not dtype.is_floating_point and values.is_floating_point():
        dtype = None  # a float-to-int cast before summing is exact in both; nothing new to learn
    _assert_same(cumsum_decomposition(values, dim, dtype=dtype), torch.cumsum(values, dim, dtype=dtype))


def test_cumsum_decomposition_keeps_aten_edge_cases():
    assert cumsum_decomposition(torch.tensor([True, False, True]), 0).dtype == torch.int64
    # ATen's running sum starts from +0.0, so an all-negative-zero prefix comes out as +0.0.
    leading = cumsum_decomposition(torch.tensor([-0.0, -0.0, -0.0]), 0)
    assert all(math.copysign(1.0, v) == 1.0 for v in leading.tolist())
    assert torch.equal(cumsum_decomposition(torch.tensor(3), -1), torch.cumsum(torch.tensor(3), -1))
    wrapped = torch.tensor([2**62, 2**62, 2**62], dtype=torch.int64)
    assert torch.equal(cumsum_decomposition(wrapped, 0), torch.cumsum(wrapped, 0))
    nan = torch.tensor([1.0, float("nan"), 2.0, float("inf")])
    torch.testing.assert_close(cumsum_decomposition(nan, 0), torch.cumsum(nan, 0), equal_nan=True)
    with pytest.raises(IndexError):
        cumsum_decomposition(torch.ones(2, 3), 2)
    with pytest.raises(IndexError):
        cumsum_decomposition(torch.tensor(1.0), 1)


@given(st.data())
def test_baddbmm_decomposition_matches_eager(data):
    dtype = data.draw(st.sampled_from((torch.float32, torch.float64, torch.int64)))
    b, n, m, p = (data.draw(st.integers(0, 5)) for _ in range(4))
    self_shape = data.draw(st.sampled_from(((b, n, p), (n, p), (1, 1, p), (p,), (b, 1, 1))))
    generator = torch.Generator().manual_seed(data.draw(st.integers(0, 2**31 - 1)))

    def make(*shape):
        if dtype.is_floating_point:
            return torch.randn(shape, generator=generator, dtype=dtype)
        return torch.randint(-9, 9, shape, generator=generator, dtype=dtype)

    scalars = st.integers(-3, 3) if not dtype.is_floating_point else st.sampled_from((0, 1, 0.5, -2.0))
    beta, alpha = data.draw(scalars), data.draw(scalars)
    args = (make(*self_shape), make(b, n, m), make(b, m, p))
    _assert_same(baddbmm_decomposition(*args, beta=beta, alpha=alpha),
                 torch.baddbmm(*args, beta=beta, alpha=alpha))


def test_baddbmm_beta_zero_ignores_nan_in_self_but_checks_its_shape():
    batch1, batch2 = torch.randn(2, 3, 4), torch.randn(2, 4, 5)
    nan_self = torch.full((2, 3, 5), float("nan"))
    result = baddbmm_decomposition(nan_self, batch1, batch2, beta=0)
    torch.testing.assert_close(result, torch.baddbmm(nan_self, batch1, batch2, beta=0))
    assert not result.isnan().any()
    with pytest.raises(RuntimeError):
        baddbmm_decomposition(torch.ones(7), batch1, batch2, beta=0)

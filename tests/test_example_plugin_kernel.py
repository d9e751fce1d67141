"""The example third-party package compiles its own kernel with shimkit's build helper."""

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from shimkit_example_plugin._kernels import logaddexp

FLOATS = st.floats(-1e4, 1e4, width=32) | st.sampled_from([np.inf, -np.inf, np.nan])


@st.composite
def strided_pairs(draw):
    shape = draw(hnp.array_shapes(min_dims=1, max_dims=3, min_side=0, max_side=5))
    a = draw(hnp.arrays(np.float32, shape, elements=FLOATS))
    b = draw(hnp.arrays(np.float32, shape[::-1], elements=FLOATS)).T  # same shape, reversed strides
    if draw(st.booleans()) and shape[0] > 1:
        a, b = a[::2], b[::2]  # every other row: strides that skip memory
    return a, b


@given(strided_pairs())
def test_kernel_matches_torch_for_any_strides(pair):
    a, b = pair
    expected = torch.logaddexp(torch.from_numpy(a.copy()), torch.from_numpy(b.copy())).numpy()
    np.testing.assert_allclose(logaddexp(a, b), expected, rtol=1e-6, atol=1e-6, equal_nan=True)


def test_shape_mismatch_names_the_argument():
    with pytest.raises(ValueError, match=r"logaddexp: b has shape \[2, 4\] but a has shape \[3, 4\]"):
        logaddexp(np.zeros((3, 4), np.float32), np.zeros((2, 4), np.float32))


def test_other_dtypes_are_refused_not_converted():
    with pytest.raises(TypeError):
        logaddexp(np.zeros(3, np.float64), np.zeros(3, np.float32))

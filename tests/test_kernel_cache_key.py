"""addmm's graph-cache key: two calls get the same key exactly when the graph they need is the same.

The oracle below describes the MPSGraph a call needs from first principles, using torch's own
contiguity rules rather than shimkit's layout code: the output shape and dtype; whether self and the
product are computed at all (beta or alpha zero, an empty output, k == 0); beta and alpha, as rounded
to float32, where used; and, for each operand used, the placeholder it is fed through (broadcast
dimensions dropped; read directly, read transposed, or packed first).
"""

from __future__ import annotations

import math
import struct

import torch
from hypothesis import given
from hypothesis import strategies as st

from kernel_helpers import ADDMM

SMALL_LAYOUTS = ("contiguous", "transposed", "sliced", "stepped", "expanded_rows", "expanded_all")


def matrix(rows, cols, layout, dtype):
    if layout == "contiguous":
        return torch.zeros(rows, cols, dtype=dtype)
    if layout == "transposed":
        return torch.zeros(cols, rows, dtype=dtype).t()
    if layout == "sliced":
        return torch.zeros(rows + 1, cols + 2, dtype=dtype)[1:, 1:1 + cols]
    if layout == "stepped":
        return torch.zeros(2 * rows, 2 * cols, dtype=dtype)[::2, ::2]
    if layout == "expanded_rows":
        return torch.zeros(1, cols, dtype=dtype).expand(rows, cols)
    if layout == "expanded_all":
        return torch.zeros(1, 1, dtype=dtype).expand(rows, cols)
    raise AssertionError(layout)


def feed(t: torch.Tensor, logical: tuple[int, int]):
    t = t.expand(logical)
    sizes = [1 if (stride == 0 and size > 1) else size for size, stride in zip(t.shape, t.stride())]
    reduced = t.as_strided(sizes, t.stride())
    if reduced.is_contiguous():
        return ("direct", tuple(sizes))
    if reduced.t().is_contiguous():
        return ("transposed", tuple(reversed(sizes)))
    return ("packed", tuple(sizes))


def scalar(value: float):
    rounded = struct.unpack("f", struct.pack("f", value))[0]
    return "nan" if math.isnan(rounded) else rounded + 0.0  # + 0.0 folds -0.0 into 0.0


def graph_needed(out, self_, mat1, mat2, beta, alpha):
    m, k = mat1.shape
    n = mat2.shape[1]
    empty = m == 0 or n == 0
    uses_self = not empty and beta != 0
    uses_product = not empty and alpha != 0 and k > 0
    graph = [out.dtype, m, n, uses_self, uses_product, feed(out, (m, n))]
    if uses_self:
        graph += [scalar(beta), feed(self_, (m, n))]
    if uses_product:
        graph += [scalar(alpha), k, feed(mat1, (m, k)), feed(mat2, (k, n))]
    return tuple(graph)


@st.composite
def calls(draw):
    # A deliberately small space, so that equal graphs are drawn often.
    dims = st.sampled_from([0, 1, 2])
    m, k, n = draw(dims), draw(dims), draw(dims)
    dtype = draw(st.sampled_from([torch.float32, torch.bfloat16]))
    self_kind = draw(st.sampled_from(["n", "one", "1n", "m1", "mn"]))
    self_ = {"n": lambda: torch.zeros(n, dtype=dtype), "one": lambda: torch.zeros(1, dtype=dtype),
             "1n": lambda: torch.zeros(1, n, dtype=dtype), "m1": lambda: torch.zeros(m, 1, dtype=dtype),
             "mn": lambda: matrix(m, n, draw(st.sampled_from(SMALL_LAYOUTS)), dtype)}[self_kind]()
    mat1 = matrix(m, k, draw(st.sampled_from(SMALL_LAYOUTS)), dtype)
    mat2 = matrix(k, n, draw(st.sampled_from(SMALL_LAYOUTS)), dtype)
    out = matrix(m, n, draw(st.sampled_from(["contiguous", "transposed", "stepped"])), dtype)
    values = st.sampled_from([0.0, -0.0, 1.0, 2.0, 1e-300, math.nan])
    return out, self_, mat1, mat2, draw(values), draw(values)


def key(out, self_, mat1, mat2, beta, alpha):
    return ADDMM.addmm_plan(out, self_, mat1, mat2, beta=beta, alpha=alpha).cache_key


@given(first=calls(), second=calls())
def test_same_key_exactly_when_same_graph(first, second):
    assert (key(*first) == key(*second)) == (graph_needed(*first) == graph_needed(*second)), (
        key(*first), key(*second), graph_needed(*first), graph_needed(*second))


def test_key_ignores_data_pointers_and_storage_offsets():
    a = torch.zeros(10, 10)
    calls_ = [(torch.zeros(3, 4), torch.zeros(4), base[o:o + 3, :5], torch.zeros(5, 4), 1.0, 1.0)
              for base in (a, torch.ones(10, 10)) for o in (0, 2)]
    assert len({key(*c) for c in calls_}) == 1


def test_bias_shape_is_in_the_key():
    """The seed PR's bug: biases of the same rank but different shapes shared one graph."""
    out, mat1, mat2 = torch.zeros(3, 4), torch.zeros(3, 2), torch.zeros(2, 4)
    keys = {key(out, bias, mat1, mat2, 1.0, 1.0)
            for bias in (torch.zeros(3, 4), torch.zeros(3, 1), torch.zeros(4), torch.zeros(1))}
    assert len(keys) == 4
    assert key(out, torch.zeros(4), mat1, mat2, 1.0, 1.0) == key(out, torch.zeros(1, 4), mat1, mat2, 1.0, 1.0)


def test_transposed_operands_change_the_key():
    """Upstream's op_mm.mm ignores the strides of self (mat1 here): a transposed one must not reuse a
    contiguous graph."""
    out, bias = torch.zeros(3, 3), torch.zeros(3)
    contiguous = key(out, bias, torch.zeros(3, 3), torch.zeros(3, 3), 1.0, 1.0)
    transposed = key(out, bias, torch.zeros(3, 3).t(), torch.zeros(3, 3), 1.0, 1.0)
    assert contiguous != transposed
    plan = ADDMM.addmm_plan(out, bias, torch.zeros(3, 3).t(), torch.zeros(3, 3))
    assert plan.layouts["mat1"] == "transposed" and plan.feeds["mat1"] == ("transposed", (3, 3))


def test_beta_and_alpha_values_are_in_the_key():
    args = (torch.zeros(2, 2), torch.zeros(2), torch.zeros(2, 2), torch.zeros(2, 2))
    assert key(*args, 1.0, 1.0) != key(*args, 1.0 + 2**-20, 1.0)
    assert key(*args, 1.0, 1.0) != key(*args, 1.0, -1.0)
    assert key(*args, 0.0, 1.0) == key(*args, -0.0, 1.0) != key(*args, 1e-300, 1.0)
    assert key(*args, 1e-300, 1.0) == key(*args, 1e-299, 1.0)  # both multiply self by float32 0


def test_plan_hash_agrees_with_key():
    plans = [ADDMM.addmm_plan(torch.zeros(2, 3), torch.zeros(3), torch.zeros(2, 4), torch.zeros(4, 3),
                          beta=b, alpha=1.0) for b in (0.5, 0.5, 2.0)]
    assert plans[0].cache_key_hash == plans[1].cache_key_hash
    assert plans[0].cache_key != plans[2].cache_key

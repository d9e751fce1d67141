"""The Linux Metal runtime's top-k and batched matrix product (runtime/native/fallbacks/topk.cpp, mm.cpp) compute what
upstream's op_topk.mm and op_bmm.mm (pytorch/executorch cff6f4d) compute, with their refusals and messages, called by
their C symbols with real AtenTensorHandles (tests/fallback_helpers.py); where upstream differs from ATen, each test
here fails if the stand-in computes ATen's result instead.

op_topk.mm reads self through its sizes alone, as a dense buffer from its data pointer, and ranks with MPSGraph's
topK, negating for largest=false. MPSGraph's order is not documented: topk.cpp assumes a NaN ranked by its sign bit
(above +inf with the bit clear, below -inf with it set), numbers as IEEE values, ties lower index first, and
:func:`upstream_topk` is that reading, written independently in Python."""

from __future__ import annotations

import ctypes
import math

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from fallback_helpers import (EXAMPLES, H, LAYOUTS, METAL_DTYPES, SIGNATURES, U32, assert_fails, assert_rounded_once,
                              call, last_error, library, product_exact, read_densely, steal, strided, values)
from shimkit.runtime import program
from shimkit.testing.kernels import AOTI_TORCH_SUCCESS, tensor_handles
from shimkit.testing.strategies import tensors


@pytest.fixture(scope="module", autouse=True)
def _built():
    library()  # built before any hypothesis example runs


# ---------------------------------------------------------------------------------------------- topk


def topk_call(self_: torch.Tensor, k: int, dim: int, largest: bool, sorted_: bool = True):
    values_, indices = H(), H()
    with tensor_handles(self_) as (handle,):
        status = call("aoti_torch_mps_topk", handle, k, dim, int(largest), int(sorted_), ctypes.byref(values_),
                      ctypes.byref(indices))
    return status, values_, indices


def bits(tensor: torch.Tensor) -> torch.Tensor:
    return tensor.view({torch.float32: torch.int32, torch.bfloat16: torch.int16}[tensor.dtype])


def with_nans(values_, dtype: torch.dtype, positive: list[int] = (), negative: list[int] = ()) -> torch.Tensor:
    """``values_`` in ``dtype`` with a NaN of the sign bit clear at ``positive``, set at ``negative`` (written as bits:
    a conversion may not keep a NaN's sign)."""
    tensor = torch.tensor(values_, dtype=dtype)
    int_view = bits(tensor)
    quiet = 0x7FC00000 if dtype == torch.float32 else 0x7FC0
    sign = -(2 ** 31) if dtype == torch.float32 else -(2 ** 15)
    for i in positive:
        int_view[i] = quiet
    for i in negative:
        int_view[i] = quiet + sign
    return tensor


def upstream_topk(self_: torch.Tensor, k: int, dim: int, largest: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """What op_topk.mm computes, read independently: self's memory as a dense tensor of its sizes; along ``dim``, the
    elements (negated for largest=false) ranked NaN with the sign bit clear, then numbers descending, then NaN with
    it set, ties lower index first; the picked elements' own bits, and their positions."""
    dense = read_densely(self_).movedim(dim, -1)
    rows = dense.reshape(-1, dense.shape[-1])
    picked_values, picked_indices = [], []
    for row in rows:
        numbers, sign_bits = row.double().tolist(), row.signbit().tolist()

        def rank(i: int):
            key = numbers[i] if largest else -numbers[i]
            if math.isnan(key):  # negation flips a NaN's sign bit too
                return (0 if sign_bits[i] != largest else 2, 0.0, i)
            return (1, -key, i)

        order = sorted(range(row.numel()), key=rank)[:k]
        picked_values.append(row[order])
        picked_indices.append(torch.tensor(order, dtype=torch.int64))
    shape = (*dense.shape[:-1], k)
    result_values = torch.stack(picked_values).reshape(shape).movedim(-1, dim).contiguous()
    result_indices = torch.stack(picked_indices).reshape(shape).movedim(-1, dim).contiguous()
    return result_values, result_indices


def elements_with_signed_nans(specials: bool):
    ties = st.integers(-2, 2).map(float)  # plenty of equal values
    specials_ = st.sampled_from((math.nan, -math.nan, math.inf, -math.inf, -0.0))
    return (ties | specials_) if specials else (ties | values(False))


@EXAMPLES
@given(data=st.data(), dtype=st.sampled_from(METAL_DTYPES), shape=st.lists(st.integers(1, 5), min_size=1, max_size=3),
       layout=LAYOUTS, largest=st.booleans(), sorted_=st.booleans(), specials=st.booleans())
def test_topk_computes_what_op_topk_mm_computes(data, dtype, shape, layout, largest, sorted_, specials):
    """Every layout, NaN of both signs, infinities, signed zeros and ties: values to the bit and indices as the
    Python reading of op_topk.mm and of the assumed MPSGraph order gives them."""
    elements = elements_with_signed_nans(specials)
    self_ = strided(data.draw(tensors(tuple(shape), dtype, elements=lambda _: elements, layouts=False)), layout)
    dim = data.draw(st.integers(-len(shape), len(shape) - 1))
    k = data.draw(st.integers(1, shape[dim]))
    status, values_handle, indices_handle = topk_call(self_, k, dim, largest, sorted_)
    assert status == AOTI_TORCH_SUCCESS, last_error()
    values_, indices = steal(values_handle), steal(indices_handle)
    expected_values, expected_indices = upstream_topk(self_, k, dim, largest)
    assert values_.dtype == dtype and indices.dtype == torch.int64
    assert values_.is_contiguous() and indices.is_contiguous() and values_.shape == expected_values.shape
    assert torch.equal(bits(values_), bits(expected_values)), (values_, expected_values)
    assert torch.equal(indices, expected_indices), (indices, expected_indices)


@pytest.mark.parametrize("dtype", METAL_DTYPES)
def test_topk_reads_a_strided_self_as_a_dense_buffer_of_its_sizes(dtype):
    """op_topk.mm hands MPSGraph self's buffer with self's sizes: a transposed self's rows are its memory's rows."""
    self_ = torch.tensor([[0.0, 5.0, 1.0], [4.0, 2.0, 3.0]], dtype=dtype).t()  # [3, 2] strides [1, 3]
    status, values_handle, indices_handle = topk_call(self_, 1, 1, True)
    assert status == AOTI_TORCH_SUCCESS, last_error()
    values_, indices = steal(values_handle), steal(indices_handle)
    # Memory 0, 5, 1, 4, 2, 3 read as [3, 2]: rows (0, 5), (1, 4), (2, 3).
    assert values_.flatten().tolist() == [5.0, 4.0, 3.0] and indices.flatten().tolist() == [1, 1, 1]
    assert values_.flatten().tolist() != torch.topk(self_, 1, 1).values.flatten().tolist()  # ATen's: 4, 5, 3


@pytest.mark.parametrize("dtype", METAL_DTYPES)
def test_topk_ranks_a_nan_by_its_sign_and_negates_for_the_smallest(dtype):
    """The assumed MPSGraph order, where ATen ranks every NaN above every number: largest=true puts a NaN with the
    sign bit set last; largest=false ranks the negated row, so a NaN with the sign bit set comes first and one with it
    clear last."""
    self_ = with_nans([1.0, 0.0, 3.0, 0.0, 2.0], dtype, positive=[3], negative=[1])
    status, values_handle, indices_handle = topk_call(self_, 5, 0, True)
    assert status == AOTI_TORCH_SUCCESS, last_error()
    values_, indices = steal(values_handle), steal(indices_handle)
    assert indices.tolist() == [3, 2, 4, 0, 1] and torch.equal(bits(values_), bits(self_)[[3, 2, 4, 0, 1]])
    assert torch.topk(self_, 5).values[:2].isnan().all()  # ATen: both NaN first

    status, values_handle, indices_handle = topk_call(self_, 5, 0, False)
    assert status == AOTI_TORCH_SUCCESS, last_error()
    values_, indices = steal(values_handle), steal(indices_handle)
    assert indices.tolist() == [1, 0, 4, 2, 3] and torch.equal(bits(values_), bits(self_)[[1, 0, 4, 2, 3]])
    assert values_[0].isnan() and not torch.topk(self_, 5, largest=False).values[0].isnan()  # ATen: NaN last


def test_topk_takes_ties_lower_index_first_in_both_directions():
    self_ = torch.tensor([2.0, 2.0, 1.0, 2.0, -0.0, 0.0])
    status, values_handle, indices_handle = topk_call(self_, 6, 0, True)
    assert status == AOTI_TORCH_SUCCESS, last_error()
    steal(values_handle)
    assert steal(indices_handle).tolist() == [0, 1, 3, 2, 4, 5]
    status, values_handle, indices_handle = topk_call(self_, 6, 0, False)
    assert status == AOTI_TORCH_SUCCESS, last_error()
    values_ = steal(values_handle)
    assert steal(indices_handle).tolist() == [4, 5, 2, 0, 1, 3]
    assert values_[0].signbit() and not values_[1].signbit()  # each zero its own bits, negated twice


@pytest.mark.parametrize("case, words", [
    ("zero_d", ("invalid dim 0 for self of rank 0",)),
    ("zero_d_minus_one", ("invalid dim -1 for self of rank 0",)),
    ("dim", ("invalid dim 2 for self of rank 2",)),
    ("k", ("k=5 > dim_size=4",)),
    ("k_before_dtype", ("k=5 > dim_size=4",)),
    ("float16", ("Unsupported dtype 5 (float16",)),
    ("int64", ("Unsupported dtype 4 (int64",)),
    ("k_zero", ("Failed to look up allocated Metal buffer", "[3, 0] is empty")),
    ("empty_self", ("Failed to look up allocated Metal buffer", "[0, 2] is empty")),
    ("negative_k", ("k=-1 is negative",)),
    ("expanded", ("self float32[3, 4] strides [0, 1] spans fewer elements than op_topk.mm reads",)),
])
def test_topk_refuses_what_upstream_refuses(case, words):
    self_, k, dim = torch.ones(3, 4), 2, 1
    if case == "zero_d":
        self_, k, dim = torch.tensor(1.0), 1, 0
    elif case == "zero_d_minus_one":
        self_, k, dim = torch.tensor(1.0), 1, -1
    elif case == "dim":
        dim = 2
    elif case == "k":
        k = 5
    elif case == "k_before_dtype":
        self_, k = self_.half(), 5
    elif case == "float16":
        self_ = self_.half()
    elif case == "int64":
        self_ = self_.long()
    elif case == "k_zero":
        k = 0
    elif case == "empty_self":
        self_ = torch.ones(0, 4)
    elif case == "negative_k":
        k = -1
    elif case == "expanded":
        self_ = torch.ones(1, 4).expand(3, 4)
    status, values_handle, indices_handle = topk_call(self_, k, dim, True)
    assert_fails(status, "aoti_torch_mps_topk: ", *words)
    assert values_handle.value is None and indices_handle.value is None


def test_topk_refuses_null_handles_as_upstream():
    values_, indices = H(), H()
    assert_fails(call("aoti_torch_mps_topk", None, 1, 0, 1, 1, ctypes.byref(values_), ctypes.byref(indices)),
                 "aoti_torch_mps_topk: null tensor handles")


@pytest.fixture(scope="module")
def runtime():
    """The stand-in runtime, which keeps the divergences its fallbacks note (the libtorch build keeps none)."""
    library_ = program.load_runtime(program.runtime_library(None))
    function = library_.aoti_torch_mps_topk
    function.argtypes, function.restype = SIGNATURES["aoti_torch_mps_topk"], ctypes.c_int32
    return library_


def runtime_topk(runtime, self_: torch.Tensor, k: int, largest: bool):
    program.take_divergences(runtime)
    handle = program.tensor_handle(runtime, self_)
    values_, indices = H(), H()
    try:
        status = runtime.aoti_torch_mps_topk(handle, k, -1, int(largest), 1, ctypes.byref(values_),
                                             ctypes.byref(indices))
        assert status == 0, program.take_failure(runtime)
        result = program.tensor_from_handle(runtime, values_.value), program.tensor_from_handle(runtime, indices.value)
    finally:
        for owned in (handle, values_.value, indices.value):
            if owned is not None:
                runtime.aoti_torch_delete_tensor_object(owned)
    return result, program.take_divergences(runtime)


def test_topk_notes_where_upstream_differs_from_aten(runtime):
    row = torch.tensor([[3.0, 1.0, 2.0, 0.5]])
    (values_, _), divergences = runtime_topk(runtime, row, 2, True)
    assert values_.tolist() == [[3.0, 2.0]] and divergences == []

    # Ranked as ATen ranks it: a NaN with the sign bit clear is first for largest=true, last for largest=false.
    for largest in (True, False):
        assert runtime_topk(runtime, with_nans([3.0, 1.0, 0.0, 0.5], torch.float32, positive=[2])[None], 4,
                            largest)[1] == []

    (values_, _), divergences = runtime_topk(runtime, with_nans([3.0, 1.0, 0.0, 0.5], torch.float32, negative=[2])[None],
                                             2, True)
    assert values_.tolist() == [[3.0, 1.0]]
    (divergence,) = divergences
    assert divergence[0] == "aoti_torch_mps_topk" and "ranks a NaN by its sign bit" in divergence[1]
    assert "largest=true" in divergence[2]

    transposed = torch.tensor([[0.0, 5.0, 1.0], [4.0, 2.0, 3.0]]).t()
    (values_, _), divergences = runtime_topk(runtime, transposed, 1, True)
    assert values_.flatten().tolist() == [5.0, 4.0, 3.0]
    (divergence,) = divergences
    assert "reads its strided self as a dense buffer of its sizes" in divergence[1]
    assert divergence[2] == "[3, 2] strides [1, 3]"


# ---------------------------------------------------------------------------------------------- bmm


@EXAMPLES
@given(data=st.data(), dtype=st.sampled_from(METAL_DTYPES), b=st.integers(1, 3), m=st.integers(1, 4),
       k=st.integers(1, 4), n=st.integers(1, 4), specials=st.booleans())
def test_bmm_matches_torch(data, dtype, b, m, k, n, specials):
    self_ = data.draw(tensors((b, m, k), dtype, elements=lambda _: values(specials), layouts=False))
    mat2 = data.draw(tensors((b, k, n), dtype, elements=lambda _: values(specials), layouts=False))
    out = torch.full((b, m, n), math.nan, dtype=dtype)
    expected = torch.bmm(self_, mat2)
    with tensor_handles(out, self_, mat2) as handles:
        assert call("aoti_torch_mps_bmm_out", *handles) == AOTI_TORCH_SUCCESS, last_error()
    exact, magnitude = product_exact(self_, mat2)
    assert_rounded_once(out, exact, (k + 2) * U32 * magnitude, pattern=expected)


def odd_size_one_strides(data, tensor: torch.Tensor) -> torch.Tensor:
    """``tensor`` (contiguous) with any strides drawn for its dims of size 1: the same elements, and still contiguous
    to ATen."""
    strides = [data.draw(st.integers(1, 30)) if size == 1 and data.draw(st.booleans()) else stride
               for size, stride in zip(tensor.shape, tensor.stride())]
    view = tensor.as_strided(tensor.shape, strides)
    assert view.is_contiguous() and torch.equal(bits(view), bits(tensor))
    return view


def strict(tensor: torch.Tensor) -> bool:
    """op_bmm.mm's test (:113-141): strides exactly [d1 * d2, d2, 1]."""
    _, rows, columns = tensor.shape
    return tensor.stride() == (rows * columns, columns, 1)


@EXAMPLES
@given(data=st.data(), b=st.integers(1, 2), m=st.integers(1, 2), k=st.integers(1, 2), n=st.integers(1, 2))
def test_bmm_refuses_size_one_dims_with_strides_aten_ignores(data, b, m, k, n):
    """Exactly what op_bmm.mm refuses: ATen calls every operand here contiguous, so a stand-in following ATen's
    is_contiguous would multiply them all."""
    self_ = odd_size_one_strides(data, torch.arange(b * m * k, dtype=torch.float32).reshape(b, m, k))
    mat2 = odd_size_one_strides(data, torch.arange(b * k * n, dtype=torch.float32).reshape(b, k, n))
    out = odd_size_one_strides(data, torch.full((b, m, n), math.nan))
    with tensor_handles(out, self_, mat2) as handles:
        status = call("aoti_torch_mps_bmm_out", *handles)
    refused = [(name, t) for name, t in (("self", self_), ("mat2", mat2), ("out", out)) if not strict(t)]
    if not refused:
        assert status == AOTI_TORCH_SUCCESS, last_error()
        torch.testing.assert_close(out, torch.bmm(self_, mat2), rtol=0, atol=0)
        return
    name, tensor = refused[0]
    _, rows, columns = tensor.shape
    assert_fails(status, f"aoti_torch_mps_bmm_out: {name} tensor must be contiguous. Only dense row-major layout "
                 f"supported; transposed/view tensors are unsupported. Expected strides=[{rows * columns},{columns},1]"
                 f" for shape=[{','.join(map(str, tensor.shape))}], got strides=[{','.join(map(str, tensor.stride()))}].",
                 "ATen's is_contiguous ignores them")
    assert out.isnan().all()


@pytest.mark.parametrize("case, words", [
    ("rank", ("tensors must be 3-D. Got self.dim=3, mat2.dim=2, out.dim=3",)),
    ("batch", ("batch size mismatch. Expected mat2[0]=3 to match self[0]=2. self.shape=[2,2,4], mat2.shape=[3,4,3]",)),
    ("inner", ("incompatible matrix dimensions for bmm. Expected mat2[1]=5 to match self[2]=4. "
               "Cannot multiply [2,2,4] @ [2,5,3]",)),
    ("out_shape", ("output shape mismatch. Expected out.shape=[2,2,3], got [2,2,5]",)),
    ("dtypes", ("dtype mismatch. All tensors must have same dtype. Got self.dtype=6, mat2.dtype=15, out.dtype=6",)),
    ("transposed_mat2", ("mat2 tensor must be contiguous. Only dense row-major layout supported; transposed/view "
                         "tensors are unsupported. Expected strides=[12,3,1] for shape=[2,4,3], got strides=[12,1,4].",)),
    ("sliced_self", ("self tensor must be contiguous.", "Expected strides=[8,4,1] for shape=[2,2,4], "
                     "got strides=[16,8,2].",)),
    ("strided_out", ("out tensor must be contiguous.", "got strides=[6,1,2].",)),
    ("float16", ("Unsupported data type: 5. Supported types: FLOAT32 (6), BFLOAT16 (15)",)),
    ("float16_strided", ("mat2 tensor must be contiguous.",)),  # op_bmm.mm tests strides before the dtype
    ("empty_m", ("self tensor not found in Metal buffer mapping: self float32[2, 0, 4] strides [0, 4, 1] is empty",)),
    ("empty_k", ("self tensor not found in Metal buffer mapping",)),  # ATen: zeros
    ("empty_batch_dims", ("self tensor must be contiguous.", "Expected strides=[0,4,1]")),
])
def test_bmm_refuses_what_upstream_refuses(case, words):
    self_, mat2, out = torch.ones(2, 2, 4), torch.ones(2, 4, 3), torch.full((2, 2, 3), math.nan)
    if case == "rank":
        mat2 = torch.ones(4, 3)
    elif case == "batch":
        mat2 = torch.ones(3, 4, 3)
    elif case == "inner":
        mat2 = torch.ones(2, 5, 3)
    elif case == "out_shape":
        out = torch.empty(2, 2, 5)
    elif case == "dtypes":
        mat2 = mat2.bfloat16()
    elif case == "transposed_mat2":
        mat2 = torch.ones(2, 3, 4).mT
    elif case == "sliced_self":
        self_ = torch.ones(2, 2, 8)[..., ::2]
    elif case == "strided_out":
        out = torch.full((2, 3, 2), math.nan).mT
    elif case == "float16":
        self_, mat2, out = self_.half(), mat2.half(), out.half()
    elif case == "float16_strided":
        self_, mat2, out = self_.half(), torch.ones(2, 3, 4).half().mT, out.half()
    elif case == "empty_m":
        self_, out = torch.empty_strided((2, 0, 4), (0, 4, 1)), torch.empty_strided((2, 0, 3), (0, 3, 1))
    elif case == "empty_k":
        self_, mat2 = torch.empty_strided((2, 2, 0), (0, 0, 1)), torch.empty_strided((2, 0, 3), (0, 3, 1))
    elif case == "empty_batch_dims":
        self_, out = torch.empty(2, 0, 4), torch.empty(2, 0, 3)  # ATen's strides [4, 4, 1]: not [0, 4, 1]
    with tensor_handles(out, self_, mat2) as handles:
        assert_fails(call("aoti_torch_mps_bmm_out", *handles), "aoti_torch_mps_bmm_out: ", *words)
    if out.dtype == torch.float32 and out.numel() and case != "out_shape":
        assert out.isnan().all()  # never written


def test_bmm_refuses_null_handles_as_upstream():
    with tensor_handles(torch.ones(1, 1, 1), torch.ones(1, 1, 1)) as (out, self_):
        assert_fails(call("aoti_torch_mps_bmm_out", out, self_, None), "aoti_torch_mps_bmm_out: null tensor handles")

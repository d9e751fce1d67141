"""The replacements for device-guarded Tensor methods on fake mps tensors do what the methods do.

They are written with ATen ops only, so on real cpu tensors they can be compared with the Python
methods they stand in for."""

import math

import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from shimkit.audit.fake_mps import (
    assign_by_ops,
    check_torch_version,
    contiguous_by_ops,
    index_by_ops,
    to_by_ops,
    AuditEnvironmentError,
)


def _index_entries(rank):
    entry = st.one_of(
        st.integers(-1, 1),
        st.builds(slice, st.none() | st.integers(-3, 3), st.none() | st.integers(-3, 3),
                  st.none() | st.integers(1, 2)),
        st.none(),
        st.lists(st.integers(0, 1), min_size=1, max_size=3).map(torch.tensor),
    )
    return st.lists(entry, max_size=rank + 1).flatmap(
        lambda entries: st.sampled_from(range(len(entries) + 1)).map(
            lambda at: tuple(entries[:at]) + (Ellipsis,) + tuple(entries[at:])) | st.just(tuple(entries)))


@st.composite
def indexed(draw):
    shape = draw(st.lists(st.integers(2, 4), min_size=1, max_size=4))
    return torch.arange(math.prod(shape)).reshape(shape), draw(_index_entries(len(shape)))


@settings(max_examples=200)
@given(indexed())
def test_index_by_ops_matches_python_indexing(case):
    tensor, index = case
    try:
        expected = tensor[index]
    except (IndexError, RuntimeError):
        return  # Python rejects it (too many indices, out of range); nothing to compare
    actual = index_by_ops(tensor, index)
    assert actual is not None, index
    assert torch.equal(actual, expected), index


@settings(max_examples=200)
@given(indexed(), st.booleans())
def test_assign_by_ops_matches_python_index_assignment(case, scalar):
    tensor, index = case
    expected = tensor.clone()
    try:
        target_shape = expected[index].shape
        value = -7 if scalar else -torch.arange(math.prod(target_shape)).reshape(target_shape)
        expected[index] = value
    except (IndexError, RuntimeError):
        return
    actual = tensor.clone()
    assert assign_by_ops(actual, index, value), index
    assert torch.equal(actual, expected), index


def test_masks_and_bool_scalars_are_left_to_python():
    tensor = torch.arange(6).reshape(2, 3)
    assert index_by_ops(tensor, torch.tensor([True, False])) is None
    assert index_by_ops(tensor, (True,)) is None
    assert index_by_ops(tensor, (Ellipsis, 0, Ellipsis)) is None
    assert not assign_by_ops(tensor, torch.tensor([True, False]), 0)


def test_contiguous_by_ops_returns_self_or_a_clone_in_the_layout():
    tensor = torch.randn(2, 3, 4, 5)
    assert contiguous_by_ops(tensor, torch.contiguous_format) is tensor
    transposed = tensor.transpose(1, 2)
    result = contiguous_by_ops(transposed, torch.contiguous_format)
    assert result.is_contiguous() and torch.equal(result, transposed.contiguous())
    channels_last = contiguous_by_ops(tensor, torch.channels_last)
    assert channels_last.stride() == tensor.contiguous(memory_format=torch.channels_last).stride()


def test_to_by_ops_aliases_exactly_when_tensor_to_does():
    tensor = torch.randn(2, 3)
    for args, kwargs in [((torch.float32,), {}), (("cpu",), {}), ((), {"dtype": torch.float32}),
                         ((tensor,), {}), ((torch.float16,), {}), (("cpu", torch.float64), {}),
                         ((torch.float32,), {"copy": True}), ((), {"memory_format": torch.contiguous_format})]:
        expected = tensor.to(*args, **kwargs)
        actual = to_by_ops(tensor, *args, **kwargs)
        assert (actual is tensor) == (expected is tensor), (args, kwargs)
        assert actual.dtype == expected.dtype and torch.equal(actual, expected)


def test_torch_releases_outside_the_tested_ones_are_refused():
    assert check_torch_version("2.13.0+cpu") == "2.13"
    assert check_torch_version("2.14.1") == "2.14"
    try:
        check_torch_version("2.12.1")
    except AuditEnvironmentError as error:
        assert "torch 2.12.1 is not supported" in str(error)
        assert "2.13.x and 2.14.x" in str(error)
    else:
        raise AssertionError("torch 2.12.1 was accepted")

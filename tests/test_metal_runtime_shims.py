"""The Linux Metal runtime's tensor shims (runtime/native/tensors.cpp) do what upstream's shims/memory.cpp does
(pytorch/executorch cff6f4d) where that is not what ATen does: empty_strided allocates numel elements and leaves
them unwritten, copy_ copies bytes between equal layouts only, and _reinterpret_tensor's copy of a view with holes is a
divergence (the copy itself is not reproduced: docs/metal.md)."""

from __future__ import annotations

import ctypes

import pytest
import torch

from shimkit.runtime import program

FLOAT32 = program.DTYPE_CODES[torch.float32]


@pytest.fixture(scope="module")
def runtime():
    return program.load_runtime(program.runtime_library(None))


def dims(values):
    return (ctypes.c_int64 * max(len(values), 1))(*values)


def empty_strided(runtime, sizes, strides, device_type=None):
    device = runtime.aoti_torch_device_type_mps() if device_type is None else device_type
    handle = ctypes.c_void_p()
    status = runtime.aoti_torch_empty_strided(len(sizes), dims(sizes), dims(strides), FLOAT32, device, 0,
                                              ctypes.byref(handle))
    return status, handle


def reinterpret(runtime, base_handle, sizes, strides, offset=0):
    handle = ctypes.c_void_p()
    status = runtime.aoti_torch__reinterpret_tensor(ctypes.c_void_p(base_handle), len(sizes), dims(sizes),
                                                    dims(strides), offset, ctypes.byref(handle))
    assert status == 0, program.take_failure(runtime)
    return handle.value


def delete(runtime, *handles):
    for handle in handles:
        assert runtime.aoti_torch_delete_tensor_object(ctypes.c_void_p(handle)) == 0, program.take_failure(runtime)


def test_empty_strided_leaves_its_memory_unwritten_as_upstream_does(runtime):
    status, handle = empty_strided(runtime, [2, 3], [3, 1])
    assert status == 0, program.take_failure(runtime)
    try:
        assert program.tensor_from_handle(runtime, handle.value).isnan().all()  # poison, so a read of it shows
    finally:
        delete(runtime, handle.value)


@pytest.mark.parametrize("sizes, strides, words", [
    ([0, 4], [4, 1], "Failed to allocate 0 bytes on Metal device"),
    ([2, 3], [4, 1], "span 7 elements, but memory.cpp allocates numel = 6"),
])
def test_empty_strided_refuses_what_upstreams_allocation_cannot_hold(runtime, sizes, strides, words):
    program.take_failure(runtime)
    status, handle = empty_strided(runtime, sizes, strides)
    assert status != 0 and handle.value is None
    message = program.take_failure(runtime)
    assert "aoti_torch_empty_strided" in message and words in message, message


def test_an_empty_cpu_tensor_is_allocated_as_posix_memalign_allows(runtime):
    status, handle = empty_strided(runtime, [0, 4], [4, 1], device_type=runtime.aoti_torch_device_type_cpu())
    assert status == 0, program.take_failure(runtime)
    delete(runtime, handle.value)


def copy(runtime, to: torch.Tensor, src: torch.Tensor) -> tuple[int, str]:
    program.take_failure(runtime)
    to_handle, src_handle = program.tensor_handle(runtime, to), program.tensor_handle(runtime, src)
    try:
        status = runtime.aoti_torch_copy_(ctypes.c_void_p(to_handle), ctypes.c_void_p(src_handle), 0)
        return status, program.take_failure(runtime)
    finally:
        delete(runtime, to_handle, src_handle)


def test_copy_between_equal_layouts_copies(runtime):
    src = torch.arange(12, dtype=torch.float32).reshape(3, 4).t()  # packed, not contiguous: a bijection either way
    to = torch.zeros(4, 3).t().contiguous().t()
    assert to.stride() == src.stride()
    status, failure = copy(runtime, to, src)
    assert status == 0, failure
    assert torch.equal(to, src) and program.take_divergences(runtime) == []


@pytest.mark.parametrize("to, src, words", [
    (torch.zeros(3, 4), torch.ones(4, 3).t(), "Layout conversion not supported"),
    (torch.zeros(3, 4), torch.ones(3, 4, dtype=torch.bfloat16), "dtype mismatch. self.dtype=6, src.dtype=15"),
    (torch.zeros(3, 4), torch.ones(2, 4), "numel mismatch. self.numel()=12, src.numel()=8"),
    (torch.zeros(0, 4), torch.ones(0, 4), "metal_copy_memory failed"),
])
def test_copy_refuses_what_upstream_refuses(runtime, to, src, words):
    before = to.clone()
    status, failure = copy(runtime, to, src)
    assert status != 0 and "aoti_torch_copy_" in failure and words in failure, failure
    assert torch.equal(to, before)


def test_copy_of_a_layout_with_holes_copies_numel_bytes_from_the_data_pointer(runtime):
    src_buffer, to_buffer = torch.arange(16, dtype=torch.float32).reshape(4, 4), torch.zeros(4, 4)
    src, to = src_buffer[:2, :2], to_buffer[:2, :2]  # strides (4, 1): 4 elements with holes between the rows
    status, failure = copy(runtime, to, src)
    assert status == 0, failure
    assert torch.equal(to_buffer.flatten()[:4], src_buffer.flatten()[:4])  # the first 4 bytes' worth, holes and all
    assert not torch.equal(to, src)  # ATen's copy_ would give src's rows
    (divergence,) = program.take_divergences(runtime)
    assert divergence[0] == "aoti_torch_copy_" and "holes" in divergence[1] and "[4, 1]" in divergence[2]


def test_reinterpret_of_a_packed_layout_is_a_view(runtime):
    base = torch.arange(12, dtype=torch.float32)
    base_handle = program.tensor_handle(runtime, base)
    view = reinterpret(runtime, base_handle, [4, 3], [1, 4])
    try:
        base[5] = -1.0
        assert torch.equal(program.tensor_from_handle(runtime, view), base.as_strided((4, 3), (1, 4)))
    finally:
        delete(runtime, view, base_handle)
    assert program.take_divergences(runtime) == []


@pytest.mark.parametrize("sizes, strides", [([2, 3, 5], [0, 0, 1]), ([4], [0])])
def test_reinterpret_of_a_broadcast_layout_is_a_view_whose_copy_would_read_the_same(runtime, sizes, strides):
    base = torch.arange(8, dtype=torch.float32)
    base_handle = program.tensor_handle(runtime, base)
    view = reinterpret(runtime, base_handle, sizes, strides)
    try:
        assert torch.equal(program.tensor_from_handle(runtime, view), base.as_strided(sizes, strides))
    finally:
        delete(runtime, view, base_handle)
    assert program.take_divergences(runtime) == []


@pytest.mark.parametrize("sizes, strides", [([2, 2], [4, 1]), ([8, 8], [16, 1]), ([3], [2])])
def test_reinterpret_of_a_layout_with_holes_is_a_divergence(runtime, sizes, strides):
    """Upstream copies such a view into a new contiguous buffer (memory.cpp:530-561): what a kernel writes through it
    is lost and a kernel reads it with the view's strides past the copy's end. Here it stays a view, and is noted."""
    base = torch.arange(128, dtype=torch.float32)
    base_handle = program.tensor_handle(runtime, base)
    view = reinterpret(runtime, base_handle, sizes, strides)
    try:
        assert torch.equal(program.tensor_from_handle(runtime, view), base.as_strided(sizes, strides))
    finally:
        delete(runtime, view, base_handle)
    (divergence,) = program.take_divergences(runtime)
    assert divergence[0] == "aoti_torch__reinterpret_tensor" and "holes" in divergence[1]
    assert divergence[2] == f"sizes {sizes} strides {strides}"

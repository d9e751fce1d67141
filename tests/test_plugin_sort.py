"""The built-in sort plugin: a stable MSL sort checked on Linux through shimkit.metal against ATen."""

from __future__ import annotations

import ctypes
from pathlib import Path

import pytest
import torch
from hypothesis import settings

import shimkit.plugins.sort as sort_plugin
from shimkit.backend import backend_config
from shimkit.registry import InvalidPluginRecord, Kernel, MslKernel, OpPlugin, Shim
from shimkit.runtime.generated import msl_adapter_source
from shimkit.testing import PropertyFailure, assert_plugin_matches_reference
from shimkit.testing.kernels import msl_kernel

NAN, INF = float("nan"), float("inf")
INTEGER_DTYPES = ("long", "int", "short", "char", "uchar")


def test_the_msl_sort_matches_atens_stable_sort_in_every_dtype():
    assert_plugin_matches_reference("sort", settings=settings(max_examples=200, derandomize=True, deadline=None,
                                                              database=None))


@pytest.mark.parametrize("dtype", ["float", "half", "bfloat"])
@pytest.mark.parametrize("descending", [False, True])
def test_nan_order_signed_zeros_and_ties_are_atens(dtype, descending):
    row = torch.tensor([2.0, NAN, -0.0, 1.0, 0.0, -INF, NAN, 1.0, INF, 2.0])
    x = torch.stack([row, row.flip(0)], dim=1).to(getattr(torch, {"float": "float32", "half": "float16",
                                                                   "bfloat": "bfloat16"}[dtype]))
    sort = msl_kernel(sort_plugin.KERNEL, dtype)
    for dim in (0, 1, -1):
        values, indices = sort(x, dim=dim, descending=descending)
        expected_values, expected_indices = torch.sort(x, stable=True, dim=dim, descending=descending)
        assert torch.equal(indices, expected_indices)
        torch.testing.assert_close(values, expected_values, equal_nan=True, rtol=0, atol=0)
        assert torch.equal(values.signbit(), expected_values.signbit())  # -0.0 and 0.0 stay where ties put them


@pytest.mark.parametrize("dtype", INTEGER_DTYPES)
def test_long_rows_of_integers_with_many_ties(dtype):
    torch_dtype = getattr(torch, {"long": "int64", "int": "int32", "short": "int16", "char": "int8",
                                  "uchar": "uint8"}[dtype])
    generator = torch.Generator().manual_seed(7)
    x = torch.randint(0, 6, (3, 257, 2), generator=generator).to(torch_dtype)
    sort = msl_kernel(sort_plugin.KERNEL, dtype)
    for dim in (0, 1, 2):
        for descending in (False, True):
            values, indices = sort(x, stable=True, dim=dim, descending=descending)
            expected_values, expected_indices = torch.sort(x, stable=True, dim=dim, descending=descending)
            assert torch.equal(values, expected_values) and torch.equal(indices, expected_indices)


def test_empty_and_zero_dim_inputs_sort_as_aten_does():
    sort = msl_kernel(sort_plugin.KERNEL, "float")
    for x, dim in ((torch.empty(0), 0), (torch.empty(3, 0), 1), (torch.empty(3, 0), 0), (torch.tensor(5.0), -1)):
        values, indices = sort(x, dim=dim)
        expected_values, expected_indices = torch.sort(x, stable=True, dim=dim)
        assert values.shape == expected_values.shape and torch.equal(values, expected_values)
        assert torch.equal(indices, expected_indices) and indices.dtype == torch.int64
    with pytest.raises(IndexError, match="Dimension out of range"):
        sort(torch.zeros(2, 3), dim=2)


def test_an_unstable_variant_of_the_kernel_is_caught(tmp_path, register_plugin):
    """The property check can fail: the same kernel breaking ties by reverse position is caught."""
    folder = Path(sort_plugin.KERNEL.directory)
    source = (folder / "sort.metal").read_text()
    assert source.count("return i < j;") == 1
    (tmp_path / "sort.metal").write_text(source.replace("return i < j;", "return i > j;"))
    (tmp_path / "adapter.mm").write_text("// the Mac adapter is not under test here\n")
    kernel = Kernel(name="unstable_sort", directory=str(tmp_path), runtime_sources=("sort.metal", "adapter.mm"),
                    msl=MslKernel(source="sort.metal", function="sort_stable", dtypes=("float",),
                                  launch=sort_plugin.launch_sort), uses_sdk=False)
    register_plugin(OpPlugin(
        name="unstable-sort", ops=(sort_plugin.SORT,),
        shims=(Shim(op=sort_plugin.SORT, device="mps", symbol="aoti_torch_mps_sort_stable", kernel=kernel),),
        references={sort_plugin.SORT: sort_plugin.sort_reference},
        input_strategies={sort_plugin.SORT: sort_plugin.sort_inputs}, priority=10))
    with pytest.raises(PropertyFailure, match=r"unstable-sort: MSL kernel sort_stable_float of aten::sort.stable"):
        assert_plugin_matches_reference("unstable-sort", settings=settings(max_examples=200, derandomize=True,
                                                                           deadline=None, database=None))


def test_a_launched_msl_kernel_must_ship_its_own_adapter(tmp_path):
    (tmp_path / "sort.metal").write_text("")
    with pytest.raises(InvalidPluginRecord, match="ships its own c-shim adapter"):
        Kernel(name="k", directory=str(tmp_path), runtime_sources=("sort.metal",),
               msl=MslKernel(source="sort.metal", function="f", launch=sort_plugin.launch_sort))
    with pytest.raises(InvalidPluginRecord, match="launch must be callable"):
        MslKernel(source="sort.metal", function="f", launch="launch_sort")


def test_the_runtime_build_gets_the_adapter_and_the_msl_source_byte_for_byte(tmp_path):
    from shimkit.csrc.build import compile_shared_library

    config = backend_config("mps")
    assert config.provider_of("at::_ops::sort_stable::call").plugin == "sort"
    assert {str(Path(sort_plugin.KERNEL.directory) / name) for name in ("sort.metal", "sort_shim_mps.mm")} <= set(
        config.kernel_sources)
    generated = msl_adapter_source(config)
    assert "aoti_torch_mps_sort_stable(" not in generated  # sort_shim_mps.mm defines it, not the generator
    stubs = ("typedef void* AOTITensorHandle;\ntypedef int AOTITorchError;\n"
             'extern "C" AOTITorchError shimkit_msl_elementwise(const char*, const char*, AOTITensorHandle*, int)'
             " { return 0; }\n")
    (tmp_path / "adapter.cpp").write_text(
        stubs + generated.replace("#include <executorch/backends/apple/metal/runtime/shims/types.h>", ""))
    library = ctypes.CDLL(str(compile_shared_library("msl_sources", [tmp_path / "adapter.cpp"],
                                                     extra_flags=("-fvisibility=default",))))
    expected = (Path(sort_plugin.KERNEL.directory) / "sort.metal").read_bytes()
    embedded = (ctypes.c_char * (len(expected) + 1)).in_dll(library, "shimkit_msl_source_sort")
    assert expected and embedded.value == expected

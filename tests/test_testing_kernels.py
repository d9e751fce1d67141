"""shimkit.testing.kernels: a kernel's host module built, loaded and checked from its Kernel record,
from any folder, and a clear error when it cannot be."""

from __future__ import annotations

import pytest
import torch

import shimkit.plugins.addmm as addmm_plugin
from registry_helpers import CLEAN_ENV
from shimkit.backend import new_registry, use_registry
from shimkit.registry import InvalidPluginRecord, Kernel, MslKernel, OpPlugin, Shim, hookimpl
from shimkit.testing import PropertyFailure, assert_plugin_matches_reference
from shimkit.testing.kernels import KernelLoadError, host_module, kernels

HOST_SOURCE = r"""
#include <pybind11/pybind11.h>
#include "shimkit/pybind.h"

// Doubles a float32 tensor in place, through the SDK's zero-copy borrow.
static void twice(pybind11::handle tensor) {
  shimkit::bindings::BorrowedView b = shimkit::bindings::borrow(tensor, "tensor");
  shimkit::bindings::raise_if_error(shimkit::validate_view(b.view, "tensor"));
  float* data = static_cast<float*>(b.view.data);
  for (int64_t i = 0; i < b.view.numel(); ++i) data[i] *= 2;
}

PYBIND11_MODULE(SHIMKIT_HOST_MODULE, m) { m.def("twice", &twice); }
"""


def twice_kernel(folder, **fields):
    (folder / "twice.cpp").write_text(HOST_SOURCE)
    return Kernel(**{"name": "twice", "directory": str(folder), "runtime_sources": ("twice.cpp",),
                     "host_sources": ("twice.cpp",), "entry_points": ("twice",), **fields})


def test_a_kernel_in_any_folder_builds_loads_and_runs(tmp_path):
    module = host_module(twice_kernel(tmp_path))
    values = torch.arange(4, dtype=torch.float32)
    module.twice(values)
    assert values.tolist() == [0.0, 2.0, 4.0, 6.0]
    with pytest.raises(TypeError, match="tensor must be a tensor .* got list"):
        module.twice([1.0])  # the SDK's borrow names the argument


def test_a_missing_entry_point_names_the_kernel(tmp_path):
    with pytest.raises(KernelLoadError, match=r"kernel 'twice'.*lacks the entry point\(s\) thrice"):
        host_module(twice_kernel(tmp_path, entry_points=("twice", "thrice")))


def test_a_compile_error_names_the_kernel_and_the_compiler_message(tmp_path):
    (tmp_path / "broken.cpp").write_text("int main( {\n")
    kernel = Kernel(name="broken", directory=str(tmp_path), host_sources=("broken.cpp",))
    with pytest.raises(KernelLoadError, match=r"(?s)kernel 'broken': building its host module failed.*broken\.cpp"):
        host_module(kernel)


def test_a_prebuilt_host_module_is_imported_by_name():
    import shimkit_example_plugin._kernels as prebuilt

    kernel = Kernel(name="logaddexp", directory=str(prebuilt.__file__).rsplit("/", 1)[0],
                    host_module="shimkit_example_plugin._kernels", entry_points=("logaddexp",))
    assert host_module(kernel) is prebuilt
    missing = Kernel(name="gone", directory="/", host_module="shimkit_example_plugin._no_such_module")
    with pytest.raises(KernelLoadError, match="kernel 'gone': its host module .* does not import"):
        host_module(missing)


def test_kernels_are_found_by_plugin_name_from_the_registry(tmp_path):
    kernel = twice_kernel(tmp_path)

    class Plugin:
        @hookimpl
        def shimkit_op_plugins(self):
            yield OpPlugin(name="twice", ops=("aten::erfinv",),
                           shims=(Shim(op="aten::erfinv", device="mps", symbol="aoti_torch_mps_erfinv", kernel=kernel),
                                  Shim(op="aten::erfinv", device="cuda", symbol="aoti_torch_cuda_erfinv", kernel=kernel)))

    registry = new_registry(env=CLEAN_ENV)
    registry.register(Plugin(), name="twice")
    with use_registry(registry):
        assert kernels("twice") == [kernel]
        assert kernels("addmm") == [addmm_plugin.KERNEL]
        with pytest.raises(LookupError, match="no registered op plugin 'nope'"):
            kernels("nope")


WRONG_ABS = """
#include <metal_stdlib>
using namespace metal;
template <typename T>
kernel void my_abs(device T* out, constant T* x, uint i [[thread_position_in_grid]]) {
  out[i] = x[i] < T(0) ? -x[i] : x[i] + T(WRONG);  // WRONG is 0 or 1
}
template [[host_name("my_abs_float")]] kernel void my_abs<float>(device float*, constant float*, uint);
template [[host_name("my_abs_half")]] kernel void my_abs<half>(device half*, constant half*, uint);
"""


def abs_plugin(folder, wrong: int) -> OpPlugin:
    from hypothesis import strategies as st

    (folder / "abs.metal").write_text(WRONG_ABS.replace("WRONG", str(wrong)))
    kernel = Kernel(name="my_abs", directory=str(folder), runtime_sources=("abs.metal",),
                    msl=MslKernel(source="abs.metal", function="my_abs", dtypes=("float", "half")))
    values = st.lists(st.floats(-100, 100, width=16), min_size=0, max_size=9)
    return OpPlugin(name="my-abs", ops=("aten::abs",),
                    shims=(Shim(op="aten::abs", device="mps", symbol="aoti_torch_mps_abs_out", kernel=kernel),),
                    references={"aten::abs": torch.abs},
                    input_strategies={"aten::abs": lambda: values.map(lambda v: (torch.tensor(v, dtype=torch.float32),))})


def test_a_plugins_msl_kernel_is_checked_in_every_dtype_with_no_code_of_its_own(tmp_path, register_plugin):
    from hypothesis import settings

    register_plugin(abs_plugin(tmp_path, wrong=0))
    assert_plugin_matches_reference("my-abs", settings=settings(max_examples=30, derandomize=True, deadline=None))


def test_a_wrong_msl_kernel_is_caught_naming_the_kernel_and_dtype(tmp_path, register_plugin):
    from hypothesis import settings

    register_plugin(abs_plugin(tmp_path, wrong=1))
    with pytest.raises(PropertyFailure, match=r"my-abs: MSL kernel my_abs_(float|half) of aten::abs.default"):
        assert_plugin_matches_reference("my-abs", settings=settings(max_examples=60, derandomize=True,
                                                                    deadline=None, database=None))


def test_msl_kernel_records_are_validated(tmp_path):
    with pytest.raises(InvalidPluginRecord, match="must name a .metal file"):
        MslKernel(source="abs.cpp", function="f")
    with pytest.raises(InvalidPluginRecord, match="dtypes must be MSL type names"):
        MslKernel(source="abs.metal", function="f", dtypes=("float32",))
    (tmp_path / "abs.metal").write_text("")
    with pytest.raises(InvalidPluginRecord, match="must be one of the runtime_sources"):
        Kernel(name="k", directory=str(tmp_path), msl=MslKernel(source="abs.metal", function="f"))

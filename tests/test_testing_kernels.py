"""shimkit.testing.kernels: a kernel's host module built, loaded and checked from its Kernel record,
from any folder, and a clear error when it cannot be."""

from __future__ import annotations

import pytest
import torch

import shimkit.plugins.addmm as addmm_plugin
from registry_helpers import CLEAN_ENV
from shimkit.backend import new_registry, use_registry
from shimkit.registry import Kernel, OpPlugin, Shim, hookimpl
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

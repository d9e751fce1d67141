"""What the registry derives for a backend, and how it settles conflicts."""

from pathlib import Path

import pytest
import torch
from executorch.backends.apple.metal.metal_backend import MetalBackend

import shimkit.plugins.addmm as addmm_plugin
from registry_helpers import CLEAN_ENV
from shimkit.csrc.build import MSL_ADAPTER
from shimkit.registry import (InvalidPluginRecord, Kernel, MslKernel, OpPlugin, PassSpec, PluginConflictError, Shim,
                              hookimpl)
from shimkit.backend import inductor_options, new_registry


class Records:
    """A plugin object yielding the given op plugins and passes."""

    def __init__(self, *records):
        self.records = records

    @hookimpl
    def shimkit_op_plugins(self):
        return [r for r in self.records if isinstance(r, OpPlugin)]

    @hookimpl
    def shimkit_passes(self):
        return [r for r in self.records if isinstance(r, PassSpec)]


def registry_with(*plugins):
    registry = new_registry(env=CLEAN_ENV)
    for index, plugin in enumerate(plugins):
        registry.register(plugin, name=f"test-plugin-{index}")
    return registry


# Kernel sources must exist and be kernel sources; shimkit's own addmm Metal kernel is one.
KERNEL_SOURCE = addmm_plugin.KERNEL.runtime_paths[1]


def kernel_plugin(name, symbol="aoti_torch_mps_erfinv", op="aten::erfinv", priority=0, tmp=KERNEL_SOURCE):
    kernel = Kernel(name="test_kernel", directory=str(Path(tmp).parent),
                    runtime_sources=(Path(tmp).name,))
    return OpPlugin(name=name, ops=(op,), priority=priority,
                    shims=(Shim(op=op, device="mps", symbol=symbol, kernel=kernel),))


def test_derived_fallback_kernels_cover_executorch_metal_backend():
    config = new_registry(env=CLEAN_ENV).backend_config("mps")
    upstream = set(MetalBackend.get_supported_fallback_kernels())
    assert upstream <= set(config.fallback_kernels)


def test_decomposition_applies_only_where_no_shim():
    erfinv_decomposition = lambda x: x  # noqa: E731
    decomposing = OpPlugin(name="erfinv-decomp", ops=("aten::erfinv",),
                           decompositions={"aten::erfinv": erfinv_decomposition})
    registry = registry_with(Records(decomposing))
    config = registry.backend_config("mps")
    # The table entry wraps the decomposition (DecompositionDeclined -> NotImplemented for torch).
    assert config.decomposition_table[torch.ops.aten.erfinv.default].__wrapped__ is erfinv_decomposition
    assert config.capabilities.decomposition("aten::erfinv") is erfinv_decomposition

    registry = registry_with(Records(decomposing, kernel_plugin("erfinv-kernel")))
    config = registry.backend_config("mps")
    assert torch.ops.aten.erfinv.default not in config.decomposition_table
    assert config.capabilities.decomposition("aten::erfinv") is None
    assert config.capabilities.has_shim(torch.ops.aten.erfinv.default)
    assert KERNEL_SOURCE in config.kernel_sources
    assert config.provider_of("aoti_torch_mps_erfinv").plugin == "erfinv-kernel"


def test_decomposition_devices_limit_where_a_decomposition_applies():
    only_metal = OpPlugin(name="erfinv-metal", ops=("aten::erfinv",), decomposition_devices=("mps",),
                          decompositions={"aten::erfinv": lambda x: x})
    registry = registry_with(Records(only_metal))
    assert torch.ops.aten.erfinv.default in registry.backend_config("mps").decomposition_table
    cuda = registry.backend_config("cuda")
    assert torch.ops.aten.erfinv.default not in cuda.decomposition_table
    assert cuda.capabilities.decomposition("aten::erfinv") is None
    # Limiting a decomposition to Metal says CUDA's code generator compiles the op itself...
    assert cuda.capabilities.generates("aten::erfinv")
    assert not registry.backend_config("mps").capabilities.generates("aten::erfinv")
    # ... unless another plugin decomposes it there after all.
    everywhere = OpPlugin(name="erfinv-everywhere", ops=("aten::erfinv",), decompositions={"aten::erfinv": lambda x: x})
    both = registry_with(Records(only_metal, everywhere)).backend_config("cuda").capabilities
    assert not both.generates("aten::erfinv") and both.decomposition("aten::erfinv") is not None
    with pytest.raises(InvalidPluginRecord, match="erfinv-tpu.*decomposition_devices: device must be one of"):
        OpPlugin(name="erfinv-tpu", ops=("aten::erfinv",), decomposition_devices=("tpu",),
                 decompositions={"aten::erfinv": lambda x: x})
    with pytest.raises(InvalidPluginRecord, match="not one string"):
        OpPlugin(name="erfinv-str", ops=("aten::erfinv",), decomposition_devices="mps",
                 decompositions={"aten::erfinv": lambda x: x})


def test_custom_op_prototypes_become_custom_c_shims():
    config = new_registry(env=CLEAN_ENV).backend_config("mps")
    gather = torch.ops.metal.gather_qmv.default
    (prototype,) = config.custom_c_shims[gather]
    assert prototype.startswith("AOTITorchError aoti_torch_mps_gather_qmv(")
    assert config.provider_of("metal::gather_qmv").plugin == "gather-qmv"
    assert inductor_options(config)["aot_inductor.custom_ops_to_c_shims"][gather] == [prototype]


def test_cuda_derives_executorchs_runtime_kernels_under_both_names():
    config = new_registry(env=CLEAN_ENV).backend_config("cuda")
    assert {"aoti_torch_cuda_sort_stable", "at::_ops::sort_stable::call"} <= set(config.fallback_kernels)
    assert config.provider_of("at::_ops::sort_stable::call").plugin == "cuda-runtime-kernels"
    assert not any(name.startswith("aoti_torch_mps_") for name in config.fallback_kernels)
    # CudaBackend's Triton GEMM templates compile addmm and baddbmm: their decompositions are for Metal only.
    for op in ("addmm", "baddbmm"):
        assert getattr(torch.ops.aten, op).default not in config.decomposition_table
        assert config.capabilities.generates(f"aten::{op}") and not config.capabilities.has_shim(f"aten::{op}")
        assert config.capabilities.keeps(f"aten::{op}")
    assert torch.ops.aten.baddbmm.default in new_registry(env=CLEAN_ENV).backend_config("mps").decomposition_table


def test_unknown_device_is_rejected():
    with pytest.raises(ValueError, match="unknown device 'tpu'"):
        new_registry(env=CLEAN_ENV).backend_config("tpu")


def test_equal_priority_shims_conflict_naming_both():
    registry = registry_with(Records(kernel_plugin("first")), Records(kernel_plugin("second")))
    with pytest.raises(PluginConflictError, match=r"'first' .*test-plugin-0.* and 'second' .*test-plugin-1"):
        registry.backend_config("mps")


def test_higher_priority_wins_and_the_loser_is_recorded():
    registry = registry_with(Records(kernel_plugin("first")), Records(kernel_plugin("second", priority=5)))
    config = registry.backend_config("mps")
    assert config.provider_of("aoti_torch_mps_erfinv").plugin == "second"
    assert [p.plugin for p in config.shadowed] == ["first"]


def test_one_symbol_for_two_ops_conflicts():
    registry = registry_with(Records(kernel_plugin("a", op="aten::erfinv"),
                                     kernel_plugin("b", op="aten::erf")))
    with pytest.raises(PluginConflictError, match="aoti_torch_mps_erfinv.*'a'.*'b'"):
        registry.backend_config("mps")


def test_a_plugin_claiming_a_builtin_shim_conflicts():
    registry = registry_with(Records(kernel_plugin("my-mm", op="aten::mm", symbol="aoti_torch_mps_mm_out")))
    with pytest.raises(PluginConflictError, match="'mm' .*built-in.* and 'my-mm'"):
        registry.backend_config("mps")


def test_duplicate_plugin_names_conflict():
    registry = registry_with(Records(kernel_plugin("mm", op="aten::erfinv")))
    with pytest.raises(PluginConflictError, match="two op plugins are named 'mm'"):
        registry.backend_config("mps")


def make_pass(name):
    def factory(capabilities):
        def run(graph_module):
            return None
        run.__name__ = name
        return run
    return factory


def test_passes_follow_ordering_constraints_and_device():
    specs = Records(
        PassSpec(name="c", factory=make_pass("c"), after=("a",)),
        PassSpec(name="a", factory=make_pass("a")),
        PassSpec(name="b", factory=make_pass("b"), before=("a",), after=("missing",)),
        PassSpec(name="cuda-only", factory=make_pass("cuda-only"), devices=("cuda",)),
        PassSpec(name="late", factory=make_pass("late"), stage="post_grad"),
    )
    config = registry_with(specs).backend_config("mps")
    own = [n for n in config.pass_names if n in {"a", "b", "c", "cuda-only"}]
    assert own == ["b", "a", "c"]
    built = dict(zip(config.pass_names, config.passes))
    assert [built[name].__name__ for name in own] == ["b", "a", "c"]  # each factory's pass, in order
    assert "late" in config.post_grad_pass_names


def test_pass_ordering_cycle_is_an_error():
    specs = Records(PassSpec(name="x", factory=make_pass("x"), after=("y",)),
                    PassSpec(name="y", factory=make_pass("y"), after=("x",)))
    with pytest.raises(PluginConflictError, match="cycle: x -> y -> x"):
        registry_with(specs).backend_config("mps")


def test_pass_factories_see_device_capabilities():
    seen = {}

    def factory(capabilities):
        seen["mm"] = capabilities.has_shim("aten::mm")
        seen["device"] = capabilities.device
        return lambda gm: None

    registry_with(Records(PassSpec(name="probe", factory=factory))).backend_config("mps")
    assert seen == {"mm": True, "device": "mps"}


def test_cmake_snippet_lists_kernel_sources(tmp_path):
    source = tmp_path / "op_erfinv.mm"
    source.write_text("// erfinv\n")
    config = registry_with(Records(kernel_plugin("erfinv", tmp=str(source)))).backend_config("mps")
    lines = config.cmake_snippet().splitlines()
    start = lines.index("set(SHIMKIT_MPS_KERNEL_SOURCES")
    listed = lines[start + 1:lines.index(")", start)]
    assert listed == [f'  "{path}"' for path in config.kernel_sources]
    assert f'  "{source}"' in listed
    assert any(line.startswith("set(SHIMKIT_KERNEL_INCLUDE_DIR") for line in lines)


def test_cmake_snippet_quotes_every_path_so_cmake_reads_exactly_the_paths(tmp_path):
    """CMake itself reads the snippet back: the values are the paths, and nothing in a path runs."""
    import shutil
    import subprocess
    import sys

    from shimkit.registry.derive import cmake_quoted

    cmake = shutil.which("cmake", path=str(Path(sys.executable).parent)) or shutil.which("cmake")
    assert cmake, "cmake is a development requirement (requirements-dev.txt)"
    odd = tmp_path / 'dir with "quotes" $HOME ${CMAKE_COMMAND} @x@ and \\ back' / "op.mm"
    odd.parent.mkdir()
    odd.write_text("// kernel\n")
    config = registry_with(Records(kernel_plugin("erfinv", tmp=str(odd)))).backend_config("mps")
    script = tmp_path / "read.cmake"
    script.write_text(config.cmake_snippet() + 'foreach(p IN LISTS SHIMKIT_MPS_KERNEL_SOURCES)\n'
                      '  message(STATUS "source=${p}")\nendforeach()\n')
    out = subprocess.run([cmake, "-P", str(script)], capture_output=True, text=True, check=True)
    listed = [line.split("source=", 1)[1] for line in (out.stdout + out.stderr).splitlines() if "source=" in line]
    assert listed == list(config.kernel_sources) and str(odd) in listed
    with pytest.raises(ValueError, match="control character"):
        cmake_quoted("a\x00b")
    with pytest.raises(ValueError, match="CMake variable"):
        config.cmake_snippet('X)\nexecute_process(COMMAND touch /tmp/pwned)\nset(Y')


HOSTILE_MSL = ('// )msl0_0" ) " R"( \\ */ ??/ \n'
               "kernel void f(device float* out, uint i [[thread_position_in_grid]]) { out[i] = 1; }\n")
ADAPTER_STUBS = r"""
typedef void* AOTITensorHandle;
typedef int AOTITorchError;
#include <cstring>
#include <string>
static std::string g_source, g_function;
static int g_count = -1;
static void* g_first = nullptr;
extern "C" AOTITorchError shimkit_msl_elementwise(const char* source, const char* function,
                                                  AOTITensorHandle* tensors, int count) {
  g_source = source; g_function = function; g_count = count; g_first = tensors[0];
  return 0;
}
extern "C" __attribute__((visibility("default"))) const char* recorded(int what) {
  static std::string text;
  text = what == 0 ? g_source : what == 1 ? g_function : std::to_string(g_count);
  return text.c_str();
}
"""


def test_the_msl_adapter_passes_each_kernels_source_and_name_through_untouched(tmp_path):
    """The generated entry points compile, and hand the MSL text over byte for byte, even MSL that
    tries to close the raw string; every name in the code is a checked identifier."""
    import ctypes

    from shimkit.csrc.build import compile_shared_library

    (tmp_path / "f.metal").write_text(HOSTILE_MSL)
    kernel = Kernel(name="hostile", directory=str(tmp_path), runtime_sources=("f.metal",),
                    msl=MslKernel(source="f.metal", function="my_fn"))
    plugin = OpPlugin(name="hostile", ops=("aten::logaddexp",),
                      shims=(Shim(op="aten::logaddexp", device="mps", symbol="aoti_torch_mps_logaddexp_out",
                                  kernel=kernel),))
    config = registry_with(Records(plugin)).backend_config("mps")
    assert "aoti_torch_mps_logaddexp_out" in [s.symbol for s in config.msl_shims]
    assert MSL_ADAPTER in config.kernel_sources
    generated = config.msl_adapter_source().replace(
        "#include <executorch/backends/apple/metal/runtime/shims/types.h>", "")
    (tmp_path / "adapter.cpp").write_text(ADAPTER_STUBS + generated)
    library = ctypes.CDLL(str(compile_shared_library("msl_adapter", [tmp_path / "adapter.cpp"],
                                                     extra_flags=("-fvisibility=default",))))
    entry = library.aoti_torch_mps_logaddexp_out
    entry.argtypes = [ctypes.c_void_p] * 3
    entry.restype = ctypes.c_int
    assert entry(1, 2, 3) == 0
    library.recorded.restype = ctypes.c_char_p
    assert library.recorded(0).decode() == HOSTILE_MSL
    assert library.recorded(1).decode() == "my_fn"
    assert library.recorded(2).decode() == "3"  # out and logaddexp's two tensor arguments

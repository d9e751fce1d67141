"""What shimkit generates for a runtime build (shimkit.runtime.generated): the CMake source lists, read
back by CMake itself, and the MSL adapter source, compiled and called."""

from pathlib import Path

import pytest

from registry_helpers import Records, kernel_plugin, registry_with
from shimkit.csrc.build import MSL_ADAPTER
from shimkit.registry import Kernel, MslKernel, OpPlugin, Shim
from shimkit.runtime.generated import cmake_quoted, cmake_snippet, msl_adapter_source


def test_cmake_snippet_lists_kernel_sources(tmp_path):
    source = tmp_path / "op_erfinv.mm"
    source.write_text("// erfinv\n")
    config = registry_with(Records(kernel_plugin("erfinv", tmp=str(source)))).backend_config("mps")
    lines = cmake_snippet(config).splitlines()
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


    cmake = shutil.which("cmake", path=str(Path(sys.executable).parent)) or shutil.which("cmake")
    assert cmake, "cmake is a development requirement (requirements-dev.txt)"
    odd = tmp_path / 'dir with "quotes" $HOME ${CMAKE_COMMAND} @x@ and \\ back' / "op.mm"
    odd.parent.mkdir()
    odd.write_text("// kernel\n")
    config = registry_with(Records(kernel_plugin("erfinv", tmp=str(odd)))).backend_config("mps")
    script = tmp_path / "read.cmake"
    script.write_text(cmake_snippet(config) + 'foreach(p IN LISTS SHIMKIT_MPS_KERNEL_SOURCES)\n'
                      '  message(STATUS "source=${p}")\nendforeach()\n')
    out = subprocess.run([cmake, "-P", str(script)], capture_output=True, text=True, check=True)
    listed = [line.split("source=", 1)[1] for line in (out.stdout + out.stderr).splitlines() if "source=" in line]
    assert listed == list(config.kernel_sources) and str(odd) in listed
    with pytest.raises(ValueError, match="control character"):
        cmake_quoted("a\x00b")
    with pytest.raises(ValueError, match="CMake variable"):
        cmake_snippet(config, 'X)\nexecute_process(COMMAND touch /tmp/pwned)\nset(Y')


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
    generated = msl_adapter_source(config).replace(
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

"""The c-shim adapters for ExecuTorch's Metal runtime compile as plain C++ (ExecuTorch's Metal headers
declare the Metal handles as ``void*`` outside Objective-C): against shimkit's Linux stand-in of the
runtime (``runtime/native/include``) always, and against a real ExecuTorch source tree when
``SHIMKIT_EXECUTORCH_SOURCE`` names one. A probe compiled both ways pins the stand-in's ``et_metal.h``
to upstream's exact signatures, so an adapter that compiles here compiles on a Mac.

The adapters are every ``.mm`` the runtime build compiles (``BackendConfig.kernel_sources``) but
addmm's two, which drive MPSGraph through Objective-C, plus the generated ``--msl-adapter`` source."""

from __future__ import annotations

import ctypes
import importlib.util
import os
import subprocess
from pathlib import Path

import pytest
import torch

from registry_helpers import CLEAN_ENV
from shimkit.backend import new_registry
from shimkit.csrc.build import INCLUDE_DIR, compiler_command
from shimkit.metal import MSL_TYPES
from shimkit.runtime.program import RUNTIME_DIR
from shimkit.runtime.generated import msl_adapter_source

STAND_IN_INCLUDE = RUNTIME_DIR / "include"
OBJECTIVE_C = {"addmm_metal.mm", "addmm_shim_mps.mm"}
EXPECTED_ADAPTERS = {"msl_elementwise.mm", "sort_shim_mps.mm", "linalg_shim_mps.mm", "randint_shim_mps.mm", "fft_shim_mps.mm",
                     "nonzero_shim_mps.mm"}

# Every declaration of et_metal.h that the stand-in provides, as a pointer of upstream's exact type: a
# name, namespace, parameter or return type that differs does not compile.
ET_METAL_PROBE = r"""
#include <executorch/backends/apple/metal/runtime/shims/et_metal.h>
#include <executorch/runtime/core/exec_aten/exec_aten.h>

#include <functional>
#include <memory>
#include <string>
#include <type_traits>

namespace metal = executorch::backends::metal;
using Kernel = metal::ETMetalKernelFunction;
using Library = metal::ETMetalShaderLibrary;
using Stream = metal::ETMetalStream;
using Tensor = executorch::runtime::etensor::Tensor;

static_assert(std::is_constructible<Library, const std::string&>::value, "ETMetalShaderLibrary(source)");
static_assert(std::is_same<decltype(&Library::getKernelFunction),
                           std::shared_ptr<Kernel> (Library::*)(const std::string&)>::value, "getKernelFunction");

void probe() {
  (void)static_cast<void (Kernel::*)()>(&Kernel::startEncoding);
  (void)static_cast<void (Kernel::*)(unsigned, const Tensor&)>(&Kernel::setArg);
  (void)static_cast<void (Kernel::*)(unsigned, int64_t)>(&Kernel::setArg);
  (void)static_cast<void (Kernel::*)(unsigned, uint32_t)>(&Kernel::setArg);
  (void)static_cast<void (Kernel::*)(unsigned, float)>(&Kernel::setArg);
  (void)static_cast<void (Kernel::*)(unsigned, bool)>(&Kernel::setArg);
  (void)static_cast<void (Kernel::*)(unsigned, const void*, size_t)>(&Kernel::setArg);
  (void)static_cast<void (Kernel::*)(unsigned, uint32_t, uint32_t, uint32_t)>(&Kernel::setArgUint3);
  (void)static_cast<void (Kernel::*)(uint64_t)>(&Kernel::dispatchSingle);
  (void)static_cast<void (Kernel::*)(uint64_t, uint64_t)>(&Kernel::dispatchSingleWithGroupSize);
  (void)static_cast<void (Kernel::*)(const uint64_t*, size_t)>(&Kernel::dispatchArray);
  (void)static_cast<void (Kernel::*)(const uint64_t*, size_t, const uint64_t*, size_t)>(
      &Kernel::dispatchArrayWithGroupSize);
  (void)static_cast<void (Kernel::*)(uint64_t, uint64_t, uint64_t, uint64_t, uint64_t, uint64_t)>(
      &Kernel::dispatchThreadgroups);
  (void)static_cast<void (Kernel::*)(std::function<void(void)>)>(&Kernel::runCommandBlock);

  (void)static_cast<Stream* (*)()>(&Stream::getDefaultStream);
  (void)static_cast<void (Stream::*)(metal::SyncType)>(&Stream::synchronize);
  (void)static_cast<void (Stream::*)()>(&Stream::synchronize);
  (void)static_cast<bool (Stream::*)() const>(&Stream::isEmpty);
  (void)static_cast<void (Stream::*)()>(&Stream::endKernelCoalescing);
  const metal::SyncType kinds[] = {metal::SyncType::NONE, metal::SyncType::COMMIT, metal::SyncType::COMMIT_AND_WAIT,
                                   metal::SyncType::COMMIT_AND_CONTINUE, metal::SyncType::COMMIT_ADAPTIVE};
  metal::getCurrentMetalStream()->synchronize(kinds[2]);

  (void)static_cast<Stream* (*)()>(&metal::getCurrentMetalStream);
  (void)static_cast<void (*)(Stream*)>(&metal::setCurrentMetalStream);
  (void)static_cast<void (*)()>(&metal::synchronize_metal_stream);
  (void)static_cast<void (*)(int)>(&metal::synchronize_metal_stream_with_type);
  (void)static_cast<void* (*)(long)>(&metal::metal_allocate_buffer);
  (void)static_cast<void (*)(void*)>(&metal::metal_deallocate_buffer);
  (void)static_cast<bool (*)(void*)>(&metal::metal_is_device_pointer);
  (void)static_cast<int (*)(void*, const void*, size_t, bool, bool)>(&metal::metal_copy_memory);
  (void)static_cast<void (*)()>(&metal::metal_cleanup_resources);
  (void)static_cast<bool (*)(void*, size_t, bool)>(&metal::metal_buffer_nocopy);
}
"""


def _wheel_include() -> Path:
    spec = importlib.util.find_spec("executorch")
    assert spec is not None and spec.submodule_search_locations, "the executorch wheel is not installed"
    return Path(next(iter(spec.submodule_search_locations))) / "include"


def _adapters(tmp_path: Path) -> list[Path]:
    config = new_registry(env=CLEAN_ENV).backend_config("mps")
    sources = [Path(p) for p in config.kernel_sources if p.endswith(".mm") and Path(p).name not in OBJECTIVE_C]
    assert EXPECTED_ADAPTERS <= {p.name for p in sources}
    generated = tmp_path / "msl_adapter.cpp"
    generated.write_text(msl_adapter_source(config))
    probe = tmp_path / "et_metal_probe.cpp"
    probe.write_text(ET_METAL_PROBE)
    return [*sources, generated, probe]


def _check_compiles(sources: list[Path], include_flags: list[str]) -> None:
    """``-fsyntax-only`` as C++17, warnings as errors in shimkit's code (only: the ``-isystem`` headers are
    ExecuTorch's). The vendored c10 headers want a CMake-generated header unless told that the
    including build defines its macros, as ExecuTorch's own CMake package tells its consumers."""
    command = [*compiler_command(), "-std=c++17", "-fsyntax-only", "-x", "c++", "-Wall", "-Wextra", "-Werror",
               "-DC10_USING_CUSTOM_GENERATED_MACROS", f"-I{INCLUDE_DIR}", *include_flags]
    failures = []
    for source in sources:
        result = subprocess.run([*command, str(source)], capture_output=True, text=True)
        if result.returncode != 0:
            failures.append(f"{source}:\n{result.stderr}")
    assert not failures, "\n".join(failures)


def _core_include_flags(root: Path) -> list[str]:
    return ["-isystem", str(root), "-isystem", str(root / "executorch" / "runtime" / "core" / "portable_type" / "c10")]


def test_every_adapter_compiles_against_the_runtime_stand_in(tmp_path):
    _check_compiles(_adapters(tmp_path), [f"-I{STAND_IN_INCLUDE}", *_core_include_flags(_wheel_include())])


@pytest.mark.skipif(not os.environ.get("SHIMKIT_EXECUTORCH_SOURCE"),
                    reason="SHIMKIT_EXECUTORCH_SOURCE names no ExecuTorch source tree")
def test_every_adapter_compiles_against_upstream_executorch(tmp_path):
    source = Path(os.environ["SHIMKIT_EXECUTORCH_SOURCE"]).resolve()
    assert (source / "backends" / "apple" / "metal" / "runtime" / "shims" / "et_metal.h").is_file(), (
        f"{source} is not an ExecuTorch source tree with the Metal backend")
    # Upstream includes its own headers as <executorch/...>: the tree's root must be reachable under that name.
    root = tmp_path / "include"
    root.mkdir()
    (root / "executorch").symlink_to(source, target_is_directory=True)
    # The tree's core runtime first; the wheel's only for what a partial checkout lacks.
    _check_compiles(_adapters(tmp_path), [*_core_include_flags(root), *_core_include_flags(_wheel_include())])


def test_msl_type_name_is_shimkit_metals_dtype_map(tmp_path):
    """The adapters name a kernel variant by shimkit::msl_type_name of the tensor's scalar-type code: it must
    agree with the MSL_TYPES shimkit.metal instantiates and tests the kernels with, code for code as
    libtorch's AOTI ABI numbers the dtypes."""
    program = tmp_path / "names.cpp"
    program.write_text('#include <cstdio>\n#include "shimkit/dtype.h"\n'
                       "int main() {\n  for (int code = -1; code < 64; ++code) {\n"
                       "    const char* name = shimkit::msl_type_name(code);\n"
                       '    if (name != nullptr) std::printf("%d %s\\n", code, name);\n  }\n}\n')
    subprocess.run([*compiler_command(), "-std=c++17", f"-I{INCLUDE_DIR}", str(program), "-o", str(tmp_path / "names")],
                   check=True)
    printed = subprocess.run([str(tmp_path / "names")], capture_output=True, text=True, check=True).stdout
    names = {int(code): name for code, name in (line.split() for line in printed.splitlines())}
    aoti = ctypes.CDLL(str(Path(torch.__file__).parent / "lib" / "libtorch_cpu.so"))
    expected = {getattr(aoti, f"aoti_torch_dtype_{dtype}")(): name for dtype, name in MSL_TYPES.items()}
    assert names == expected

"""The kernel SDK: 16-bit conversions, layout classification, dense packing, the build helper, and
shimkit._C staying free of libtorch."""

from __future__ import annotations

import ctypes
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

import shimkit.csrc
from shimkit.csrc import build
from registry_helpers import CLEAN_ENV
from shimkit.backend import new_registry
from shimkit.csrc.__main__ import main as csrc_main
from shimkit.csrc.native import native

C = native()
HALF_TYPES = (torch.bfloat16, torch.float16)


@pytest.mark.parametrize("dtype", HALF_TYPES, ids=str)
def test_every_16_bit_pattern_widens_exactly(dtype):
    bits = torch.arange(-(2**15), 2**15, dtype=torch.int32).to(torch.int16)
    values = bits.view(dtype)
    widened = torch.empty(values.shape, dtype=torch.float32)
    C.cast(values, widened)
    expected = values.float()
    assert torch.equal(widened.isnan(), expected.isnan())
    finite = ~expected.isnan()
    assert torch.equal(widened[finite].view(torch.int32), expected[finite].view(torch.int32))


@pytest.mark.parametrize("dtype", HALF_TYPES, ids=str)
def test_narrowing_rounds_like_torch(dtype):
    generator = torch.Generator().manual_seed(0)
    # Every exponent float32 has, random mantissas, both signs; plus ties and edge values.
    bits = torch.randint(0, 2**31 - 1, (400_000,), generator=generator, dtype=torch.int64)
    bits = torch.cat([bits, -bits - 1]).to(torch.int32)
    values = bits.view(torch.float32)
    specials = torch.tensor([0.0, -0.0, float("inf"), -float("inf"), 65504.0, 65519.99, 65520.0,
                             2.0**-24, 2.0**-25, 3 * 2.0**-25, 2.0**-14, 1 + 2.0**-11, 1 + 3 * 2.0**-11,
                             1 + 2.0**-8, 1 + 3 * 2.0**-8, 3.3895e38, 3.4e38])
    values = torch.cat([values, specials, -specials])
    narrowed = torch.empty(values.shape, dtype=dtype)
    C.cast(values, narrowed)
    expected = values.to(dtype)
    assert torch.equal(narrowed.isnan(), expected.isnan())
    finite = ~expected.isnan()
    mismatch = (narrowed[finite].view(torch.int16) != expected[finite].view(torch.int16)).nonzero()
    assert mismatch.numel() == 0, values[finite][mismatch[:5, 0]]


@pytest.mark.parametrize("tensor,layout", [
    (torch.zeros(3, 4), "contiguous"),
    (torch.zeros(4, 3).t(), "transposed"),
    (torch.zeros(1, 4).t(), "contiguous"),  # a column of a dense matrix is dense either way
    (torch.zeros(4).expand(3, 4), "broadcast"),
    (torch.zeros(3, 1).expand(3, 4), "broadcast"),
    (torch.zeros(5, 6)[1:4, 2:5], "strided"),
    (torch.zeros(6, 8)[::2, ::2], "strided"),
    (torch.zeros(2, 3, 4).permute(2, 0, 1), "strided"),
    (torch.zeros(0, 3), "contiguous"),
    (torch.zeros(()), "contiguous"),
    (torch.zeros(5).as_strided((1, 5), (7, 1)), "contiguous"),  # a size-1 dimension's stride is moot
])
def test_classify_layout(tensor, layout):
    assert C.classify_layout(tensor) == layout


@given(st.integers(0, 2**31 - 1), st.sampled_from(["t", "slice", "step", "expand", "permute"]),
       st.sampled_from([torch.float32, torch.bfloat16]))
def test_repack_through_a_dense_buffer_keeps_every_element(seed, how, dtype):
    base = torch.randn(4, 5, 6, generator=torch.Generator().manual_seed(seed)).to(dtype)
    src = {"t": base[0].t(), "slice": base[1:3, 1:4, ::2], "step": base[::2, ::3, ::5],
           "expand": base[:1, 2:3].expand(3, 4, 6), "permute": base.permute(2, 0, 1)}[how]
    dst = torch.empty(src.shape[::-1], dtype=dtype).permute(*range(src.dim() - 1, -1, -1))
    C.repack(src, dst)
    assert torch.equal(dst, src)


def test_describe_view_shows_what_kernels_see():
    assert C.describe_view(torch.zeros(3, 4, dtype=torch.bfloat16).t()) == "bfloat16[4, 3] strides [1, 4]"


def test_extension_is_free_of_libtorch():
    """shimkit._C reads torch tensors through DLPack only: nothing from libtorch is linked or needed."""
    import shimkit._C

    needed = subprocess.run(["readelf", "-d", shimkit._C.__file__], capture_output=True, text=True).stdout
    assert "NEEDED" in needed
    assert "torch" not in needed and "c10" not in needed
    probe = "import sys, shimkit._C; print('torch' in sys.modules)"
    loaded = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert loaded.stdout.strip() == "False"


def test_shimkit_extension_for_a_plugin(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # setup.py runs from the plugin's folder
    kernel = tmp_path / "my_kernel.cpp"
    metal = tmp_path / "my_kernel_metal.mm"
    kernel.write_text("")
    metal.write_text("")
    extension = build.shimkit_extension("my_plugin._kernels", [kernel, metal])
    assert shimkit.csrc.get_include() in extension.include_dirs
    assert str(kernel) in extension.sources
    assert (str(metal) in extension.sources) == (sys.platform == "darwin")
    # setuptools refuses absolute paths and misplaces objects of ../ paths: the SDK comes in as one
    # generated file under the plugin's own build folder.
    (unity,) = [s for s in extension.sources if s.endswith("shimkit_sdk.cpp")]
    assert not os.path.isabs(unity) and not unity.startswith("..")
    included = [line.split('"')[1] for line in Path(unity).read_text().splitlines() if line.startswith("#include")]
    assert included == build.sdk_sources()
    assert ("SHIMKIT_WITH_METAL", "1" if sys.platform == "darwin" else "0") in extension.define_macros
    assert "-std=c++17" in extension.extra_compile_args


def test_the_mps_runtime_build_gets_the_sdk_and_the_addmm_kernel_but_no_host_code():
    sources = new_registry(env=CLEAN_ENV).backend_config("mps").kernel_sources
    names = {Path(s).name for s in sources}
    assert {"addmm_metal.mm", "addmm_shim_mps.mm", "addmm_plan.cpp", "dtype.cpp"} <= names
    assert not names & {"addmm_reference.cpp", "addmm_shim_reference.cpp", "addmm_bindings.cpp", "dlpack.cpp"}
    assert all(Path(s).is_absolute() and Path(s).exists() for s in sources)


def test_every_c10_code_of_the_sdk_is_libtorchs():
    """shimkit/c10_codes.h is the one copy of the codes the AOTI ABI passes as plain integers (the SDK, the
    stand-in runtime, the plugins' adapters and, through the runtime, shimkit.runtime.program read them there)."""
    header = (build.INCLUDE_DIR / "shimkit" / "c10_codes.h").read_text()
    getters = {"scalar_types": "aoti_torch_dtype_", "device_types": "aoti_torch_device_type_"}
    codes = {f"{getters[namespace]}{name.lower()}": int(value)
             for namespace, body in re.findall(r"namespace (scalar_types|device_types) \{(.*?)\}", header, re.S)
             for name, value in re.findall(r"constexpr int32_t k(\w+) = (\d+);", body)}
    assert len(codes) >= 10, codes  # the header's codes were found
    aoti = ctypes.CDLL(str(Path(torch.__file__).parent / "lib" / "libtorch_cpu.so"))
    assert codes == {getter: getattr(aoti, getter)() for getter in codes}


def test_the_sanitizer_run_asks_for_the_compiler_shimkit_builds_with(monkeypatch, capsys):
    monkeypatch.setenv("CXX", "ccache 'g++ 13'")
    assert csrc_main(["compiler"]) == 0
    assert shlex.split(capsys.readouterr().out) == build.compiler_command() == ["ccache", "g++ 13"]


def test_threads_asking_for_the_compiler_at_once_in_a_new_process_all_get_the_same_one():
    """sysconfig fills its table on first use without a lock: threads that asked at once (a program's parts
    compiling side by side) read an empty one, got ``c++`` and keyed their objects apart from ``g++``'s."""
    script = """
import sys, sysconfig, threading
from shimkit.csrc.build import compiler_command
start, found = threading.Barrier(16), []
def ask():
    start.wait()
    found.append(tuple(compiler_command()))
threads = [threading.Thread(target=ask) for _ in range(16)]
for thread in threads: thread.start()
for thread in threads: thread.join()
print(sorted(set(found)) == [tuple(compiler_command())], sysconfig.get_config_var("CXX"))
"""
    env = {k: v for k, v in os.environ.items() if k != "CXX"}
    for _ in range(3):
        done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=120)
        assert done.stdout.split()[0] == "True", done.stdout + done.stderr


PLUGIN_KERNEL = r"""
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>
#include "shimkit/layout.h"

// A third-party kernel using shimkit's SDK: classify a [rows, cols] matrix given its strides.
static std::string layout_of(std::vector<int64_t> sizes, std::vector<int64_t> strides) {
  static float storage[1];
  shimkit::TensorView view;
  view.data = storage;
  view.sizes = sizes;
  view.strides = strides;
  shimkit::Status status = shimkit::validate_view(view, "matrix");
  return status.is_ok() ? shimkit::layout_name(shimkit::classify_layout(view)) : status.message();
}

PYBIND11_MODULE(_kernels, m) { m.def("layout_of", &layout_of); }
"""

PLUGIN_SETUP = """
from setuptools import setup
from pybind11.setup_helpers import build_ext
from shimkit.csrc.build import shimkit_extension

setup(name="my_plugin", ext_modules=[shimkit_extension("my_plugin._kernels", ["kernel.cpp", "kernel.mm"])],
      cmdclass={"build_ext": build_ext})
"""


@pytest.mark.skipif(sys.platform == "darwin", reason="the .mm stand-in is meant to be skipped, which only Linux does")
def test_a_plugin_package_builds_and_imports_its_own_kernel(tmp_path):
    (tmp_path / "kernel.cpp").write_text(PLUGIN_KERNEL)
    (tmp_path / "kernel.mm").write_text("#error Metal sources must not be compiled off macOS\n")
    (tmp_path / "setup.py").write_text(PLUGIN_SETUP)
    (tmp_path / "my_plugin").mkdir()
    (tmp_path / "my_plugin" / "__init__.py").write_text("")
    subprocess.run([sys.executable, "setup.py", "-q", "build_ext", "--inplace"], cwd=tmp_path,
                   check=True, capture_output=True)
    probe = ("from my_plugin._kernels import layout_of; "
             "print(layout_of([3, 4], [1, 3]), '|', layout_of([2, -1], [1, 1]))")
    result = subprocess.run([sys.executable, "-c", probe], cwd=tmp_path, check=True,
                            capture_output=True, text=True)
    assert result.stdout.strip() == "transposed | matrix has a negative size: [2, -1]"

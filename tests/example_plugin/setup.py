"""The example plugin compiles its kernel exactly as shimkit compiles its own (C++17, shimkit's kernel
SDK headers and sources; Metal sources would be kept on macOS only). Build with
``pip install --no-build-isolation`` so the installed shimkit provides the helper."""

from pybind11.setup_helpers import build_ext
from setuptools import setup

from shimkit.csrc.build import shimkit_extension

setup(
    ext_modules=[shimkit_extension("shimkit_example_plugin._kernels",
                                   ["src/shimkit_example_plugin/csrc/logaddexp.cpp"])],
    cmdclass={"build_ext": build_ext},
)

"""Build and install shimkit.

The top-level folders are the architecture (``registry/``, ``passes/``, ``plugins/``, ``audit/``,
``csrc/``, ``metal/``, ``runtime/``, ``testing/``); this file maps each onto the one import namespace ``shimkit`` and compiles the pybind11
extension ``shimkit._C`` (the kernel SDK's bindings) from the portable sources in ``csrc/``.
Objective-C++ (Metal) sources are compiled only on macOS. Plugin kernels are not compiled here: each is
a ``Kernel`` record in its plugin's folder, built where it is used.
"""

import runpy
import sys
from pathlib import Path

from pybind11.setup_helpers import ParallelCompile, Pybind11Extension, build_ext
from setuptools import find_namespace_packages, setup

ROOT = Path(__file__).parent.resolve()

# Folder on disk -> import name (the rooms are listed once, in shimkit/_rooms.py; read, not imported: shimkit is
# not installed yet).
ROOMS = runpy.run_path(str(ROOT / "shimkit" / "_rooms.py"))["ROOMS"]
NAMESPACE_MAP = {"shimkit": "shimkit", **{room: f"shimkit.{room}" for room in ROOMS}}


def _packages():
    packages, package_dir = [], {}
    for folder, name in NAMESPACE_MAP.items():
        packages.append(name)
        package_dir[name] = folder
        # Namespace packages: a folder of kernel sources or headers is a package whose data is those files,
        # as setuptools expects data to be declared.
        for sub in find_namespace_packages(where=folder, exclude=["*__pycache__*"]):
            packages.append(f"{name}.{sub}")
            package_dir[f"{name}.{sub}"] = f"{folder}/{sub.replace('.', '/')}"
    return packages, package_dir


def _extension():
    portable = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "csrc").rglob("*.cpp"))
    metal = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "csrc").rglob("*.mm"))
    on_macos = sys.platform == "darwin"
    sources = portable + (metal if on_macos else [])
    macros = [("SHIMKIT_WITH_METAL", "1" if on_macos else "0")]
    extra_link = ["-framework", "Metal", "-framework", "MetalPerformanceShadersGraph",
                  "-framework", "Foundation"] if on_macos else []
    return Pybind11Extension(
        "shimkit._C",
        sources,
        include_dirs=[str(ROOT / "csrc" / "include")],
        define_macros=macros,
        extra_link_args=extra_link,
        cxx_std=17,
    )


packages, package_dir = _packages()
# The extension's sources compiled side by side, one per core ($SHIMKIT_BUILD_JOBS overrides).
ParallelCompile("SHIMKIT_BUILD_JOBS").install()

setup(
    name="shimkit",
    version="0.1.0",
    description="Plugin-driven FX passes, C shims and lowering audits for AOTInductor ExecuTorch backends",
    long_description=(ROOT / "README.md").read_text() if (ROOT / "README.md").exists() else "",
    long_description_content_type="text/markdown",
    python_requires=">=3.10",
    packages=packages,
    package_dir=package_dir,
    # Kernel files, each in the package of its folder: shimkit's SDK (csrc/), the stand-in runtime
    # (runtime/native/, built on demand, not part of shimkit._C), metal_stdlib and each built-in plugin's kernel
    # folder (its Kernel record's sources), and the Objective-C runtime and frameworks of objc/ (built by clang on demand).
    package_data={"": ["*.cpp", "*.mm", "*.cu", "*.h", "*.S", "*.metal", "metal_stdlib"]},
    include_package_data=True,
    ext_modules=[_extension()],
    cmdclass={"build_ext": build_ext},
    install_requires=[
        "torch>=2.13,<2.15",
        "executorch>=1.5.1,<1.6",
        # importing executorch parses its edge-dialect YAML: 0.2 to 0.4 s with libyaml's parser, 1.2 s without
        "ruamel.yaml.clib>=0.2.8; platform_python_implementation == 'CPython'",
        "pluggy>=1.5",
        "pybind11>=2.12",
        "libclang>=18.1",
        "tabulate>=0.9",
    ],
    extras_require={"test": ["pytest>=8", "hypothesis>=6.100"], "suites": ["transformers>=4.50"],
                    # --suite optimum: optimum-executorch's Metal recipe and the transformers it pins
                    "optimum": ["optimum-executorch==1.1.0", "optimum==2.0.0", "transformers==5.0.0rc1",
                                "accelerate>=0.26"],
                    # benchmarks/bench_pocl.py: POCL's CPU device beside shimkit.metal
                    "pocl": ["pyopencl>=2024.1", "pocl-binary-distribution>=3.0"]},
    entry_points={
        "console_scripts": ["shimkit=shimkit.cli:main"],
        "pytest11": ["shimkit=shimkit.testing.pytest_plugin"],
    },
    zip_safe=False,
)

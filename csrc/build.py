"""Compile kernels the way shimkit compiles its own.

Third-party plugin packages use :func:`shimkit_extension` in their ``setup.py`` to build a pybind11
extension against shimkit's kernel SDK (``shimkit/*.h`` plus the SDK sources, compiled into the
plugin's own extension: shimkit does not ship a linkable library). Metal sources (``*.mm``) are kept
only on macOS, exactly as for ``shimkit._C``; on Linux they are neither compiled nor run.

:func:`compile_shared_library` is the plain compiler driver behind shimkit's test-only builds (the
reference c-shim library linked against libtorch, the sanitizer build of ``shimkit._C``)::

    python -m shimkit.csrc.build sanitized-module   # prints the path of an ASan+UBSan shimkit._C
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shlex
import subprocess
import sys
import sysconfig
import tempfile
from pathlib import Path
from typing import Iterable, Sequence

SOURCE_DIR = Path(__file__).resolve().parent
INCLUDE_DIR = SOURCE_DIR / "include"
ON_MACOS = sys.platform == "darwin"
METAL_FRAMEWORKS = ("Metal", "MetalPerformanceShadersGraph", "Foundation")
SANITIZER_FLAGS = ("-fsanitize=address,undefined", "-fno-sanitize-recover=all",
                   "-fno-omit-frame-pointer", "-g", "-O1")


def sdk_sources() -> list[str]:
    """The SDK's implementation files, which an extension using ``shimkit/*.h`` must compile in."""
    return sorted(str(p) for p in (SOURCE_DIR / "sdk").glob("*.cpp"))


def kernel_sources(kernel: str, *, metal: bool = False) -> list[str]:
    """One kernel's portable sources (its plan, reference, c-shim adapters), plus its ``.mm`` files
    when ``metal`` is true."""
    folder = SOURCE_DIR / "kernels" / kernel
    if not folder.is_dir():
        raise ValueError(f"shimkit has no kernel {kernel!r} (no folder {folder})")
    patterns = ("*.cpp", "*.mm") if metal else ("*.cpp",)
    return sorted(str(p) for pattern in patterns for p in folder.glob(pattern))


def metal_runtime_sources(kernel: str) -> tuple[str, ...]:
    """Everything ExecuTorch's Metal runtime build compiles for ``kernel``'s mps c-shim: the SDK, the
    kernel's portable files and its ``.mm`` files (with ``INCLUDE_DIR`` on the include path)."""
    return tuple(sdk_sources() + kernel_sources(kernel, metal=True))


def _keep_for_platform(sources: Iterable[str | os.PathLike]) -> list[str]:
    return [str(s) for s in sources if ON_MACOS or not str(s).endswith(".mm")]


def shimkit_extension(name: str, sources: Sequence[str | os.PathLike], *,
                      include_dirs: Sequence[str] = (), define_macros: Sequence[tuple[str, str]] = (),
                      with_sdk: bool = True, **kwargs):
    """A ``Pybind11Extension`` compiled like ``shimkit._C``: C++17, shimkit's include directory,
    ``SHIMKIT_WITH_METAL`` defined, ``.mm`` sources and the Metal frameworks on macOS only.

    ``with_sdk`` adds :func:`sdk_sources`, which any code using ``TensorView``, ``Status``, dtype,
    layout or cache-key helpers needs. Other keyword arguments go to ``Pybind11Extension``.
    """
    from pybind11.setup_helpers import Pybind11Extension

    kept = _keep_for_platform(sources) + (sdk_sources() if with_sdk else [])
    # setuptools refuses absolute source paths in wheel and editable builds; setup.py runs from the
    # package's own folder, so paths relative to it (into the installed shimkit) are accepted.
    kept = [os.path.relpath(source) if os.path.isabs(source) else source for source in kept]
    extra_link = list(kwargs.pop("extra_link_args", []))
    if ON_MACOS:
        for framework in METAL_FRAMEWORKS:
            extra_link += ["-framework", framework]
    return Pybind11Extension(
        name,
        list(dict.fromkeys(kept)),
        include_dirs=[str(INCLUDE_DIR), *include_dirs],
        define_macros=[("SHIMKIT_WITH_METAL", "1" if ON_MACOS else "0"), *define_macros],
        extra_link_args=extra_link,
        cxx_std=17,
        **kwargs,
    )


def build_dir() -> Path:
    """Where test-only builds are cached: ``$SHIMKIT_BUILD_DIR`` or a per-user temp folder."""
    configured = os.environ.get("SHIMKIT_BUILD_DIR")
    path = Path(configured) if configured else Path(tempfile.gettempdir()) / f"shimkit-build-{os.getuid()}"
    path.mkdir(parents=True, exist_ok=True)
    return path


def compile_shared_library(stem: str, sources: Sequence[str | os.PathLike], *,
                           include_dirs: Sequence[str] = (), define_macros: Sequence[tuple[str, str]] = (),
                           library_dirs: Sequence[str] = (), libraries: Sequence[str] = (),
                           extra_flags: Sequence[str] = (), python_module: bool = False,
                           suffix: str = ".so") -> Path:
    """Compiles ``sources`` into one shared library in :func:`build_dir` and returns its path.

    The file name carries a digest of the sources' contents, the headers under ``INCLUDE_DIR`` and
    every flag, so an unchanged build is reused and a changed one never is. ``python_module`` adds the
    Python and pybind11 include directories. The library directories become its run path.
    """
    compiler = os.environ.get("CXX") or sysconfig.get_config_var("CXX") or "c++"
    command = shlex.split(compiler) + ["-shared", "-fPIC", "-std=c++17", "-fvisibility=hidden"]
    includes = [str(INCLUDE_DIR), *include_dirs]
    if python_module:
        import pybind11

        includes += [pybind11.get_include(), sysconfig.get_paths()["include"]]
    command += [f"-I{d}" for d in includes]
    command += [f"-D{k}={v}" for k, v in (("SHIMKIT_WITH_METAL", "0"), *define_macros)]
    command += list(extra_flags)
    sources = _keep_for_platform(sources)
    link = [f"-L{d}" for d in library_dirs] + [f"-Wl,-rpath,{d}" for d in library_dirs]
    link += [f"-l{lib}" for lib in libraries]

    digest = hashlib.sha256("\0".join(command + sources + link).encode())
    for path in sorted(sources) + sorted(str(h) for h in INCLUDE_DIR.rglob("*.h")):
        digest.update(Path(path).read_bytes())
    for path in sorted(Path(s).parent for s in sources):
        for header in sorted(path.glob("*.h")):
            digest.update(header.read_bytes())
    output = build_dir() / f"{stem}-{digest.hexdigest()[:16]}" / f"{stem}{suffix}"
    if output.exists():
        return output
    output.parent.mkdir(parents=True, exist_ok=True)
    partial = output.with_name(f"{output.name}.{os.getpid()}.tmp")
    result = subprocess.run(command + sources + ["-o", str(partial)] + link,
                            capture_output=True, text=True)
    if result.returncode != 0:
        raise RuntimeError(f"compiling {stem} failed:\n{shlex.join(result.args)}\n{result.stderr}")
    os.replace(partial, output)  # atomic, so concurrent test processes never load a half-written file
    return output


def shimkit_module_sources() -> list[str]:
    """The portable sources setup.py compiles into ``shimkit._C``."""
    return sorted(str(p) for p in SOURCE_DIR.rglob("*.cpp"))


def sanitized_module() -> Path:
    """``shimkit._C`` built with AddressSanitizer and UndefinedBehaviorSanitizer (Linux, gcc or clang).

    Load it through ``SHIMKIT_NATIVE_MODULE`` (see :mod:`shimkit.csrc.native`) in a process started with
    the ASan runtime preloaded; ``csrc/sanitize.sh`` does both.
    """
    return compile_shared_library("_C", shimkit_module_sources(), python_module=True,
                                  extra_flags=SANITIZER_FLAGS,
                                  suffix=sysconfig.get_config_var("EXT_SUFFIX"))


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m shimkit.csrc.build", description=__doc__.split("\n\n")[0])
    parser.add_argument("target", choices=["sanitized-module", "reference-shim"],
                        help="sanitized-module: ASan+UBSan shimkit._C; reference-shim: the libtorch-linked "
                             "reference c-shim library (sanitized when SHIMKIT_SANITIZE=1)")
    args = parser.parse_args(argv)
    if args.target == "sanitized-module":
        print(sanitized_module())
    else:
        from shimkit.csrc.reference_shim import build_reference_shim

        print(build_reference_shim())
    return 0


if __name__ == "__main__":
    sys.exit(main())

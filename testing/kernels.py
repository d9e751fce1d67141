"""Plugin kernels on the test machine: a plugin's host module found and loaded from its ``Kernel`` record.

>>> from shimkit.testing.kernels import host_module, kernels
>>> (addmm_kernel,) = kernels("addmm")
>>> addmm = host_module(addmm_kernel)          # built from the record on first use, then cached
>>> addmm.__name__
'shimkit_kernel_addmm'

A record with ``host_sources`` is compiled here (``shimkit.csrc.build.compile_host_module``, cached by a
digest of sources and flags); one with ``host_module`` is the plugin package's own extension, imported.
Either way the record's ``entry_points`` are checked, so a kernel that lost a function fails here,
naming the kernel and the plugin, not as an ``AttributeError`` deep in a test.

``SHIMKIT_SANITIZE=1`` builds host modules with AddressSanitizer and UndefinedBehaviorSanitizer (the
process must have the sanitizer runtimes preloaded: ``csrc/sanitize.sh`` does it). ``python -m
shimkit.testing.kernels`` builds every registered kernel's host module and prints the paths, which the
sanitizer run does before it preloads anything into the compiler's environment.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import importlib
import importlib.machinery
import importlib.util
import sys
import sysconfig
from pathlib import Path
from types import ModuleType
from typing import Any, Callable, Iterator

from shimkit.backend import get_registry
from shimkit.csrc.build import INCLUDE_DIR, compile_host_module, sanitize_requested
from shimkit.metal import MSL_TYPES
from shimkit.registry import Kernel, ShimkitPluginError
from shimkit.registry.records import MslKernel
from shimkit.store import EnvironmentFailure

AOTI_TORCH_SUCCESS = 0


class KernelLoadError(ShimkitPluginError, ImportError):
    """A kernel's host module could not be built or loaded, or lacks one of its entry points."""


def kernels(plugin: str) -> list[Kernel]:
    """The kernels the registered plugin ``plugin`` ships, in the order of its shims (each once)."""
    registered = [r for r in get_registry().op_plugins() if r.record.name == plugin]
    if not registered:
        known = sorted(r.record.name for r in get_registry().op_plugins())
        raise LookupError(f"no registered op plugin {plugin!r} (registered: {', '.join(known)})")
    shipped = [s.kernel for r in registered for s in r.record.shims if s.kernel is not None]
    return list({id(k): k for k in shipped}.values())


def host_module(kernel: Kernel) -> ModuleType:
    """The loaded host module of ``kernel``; raises :class:`KernelLoadError` naming the kernel."""
    return _load(kernel, sanitize_requested())


@functools.lru_cache(maxsize=None)
def _load(kernel: Kernel, sanitize: bool) -> ModuleType:
    if kernel.host_module is not None:
        try:
            module = importlib.import_module(kernel.host_module)
        except ImportError as error:
            raise KernelLoadError(f"kernel {kernel.name!r}: its host module {kernel.host_module!r} does not "
                                  f"import ({error}); is the plugin package built and installed?") from error
    elif kernel.host_sources:
        try:
            path = _build(kernel, sanitize)
        except EnvironmentFailure:  # the machine lacks a tool (clang for Objective-C++): a "could not run"
            raise
        except RuntimeError as error:
            raise KernelLoadError(f"kernel {kernel.name!r}: building its host module failed: {error}") from error
        module = _import_extension(f"shimkit_kernel_{kernel.name}", str(path))
    else:
        raise KernelLoadError(f"kernel {kernel.name!r} declares no host module (no host_sources, no "
                              "host_module): it cannot run on this machine")
    missing = [entry for entry in kernel.entry_points if not hasattr(module, entry) and not _exports(module, entry)]
    if missing:
        raise KernelLoadError(f"kernel {kernel.name!r}: its host module {module.__name__} lacks the entry "
                              f"point(s) {', '.join(missing)}")
    return module


# The torch dtype each MSL element type holds.
MSL_TORCH_DTYPES = {msl: torch_name for torch_name, msl in MSL_TYPES.items()}


def msl_kernel(kernel: Kernel, dtype: str) -> Callable[..., Any]:
    """The plugin's MSL kernel for MSL type ``dtype``, compiled by ``shimkit.metal`` and called as the
    runtime calls it. An elementwise kernel is called as the generated c-shim adapter calls it: ``out``
    (like the first tensor argument) then the tensor arguments as buffers, one thread per element; it
    returns ``out``. A kernel with its own ``launch`` is called through it and returns what it returns.

    >>> import shimkit_example_plugin.plugin as example      # doctest: +SKIP
    >>> msl_kernel(example.KERNEL, "half")(a, b)             # doctest: +SKIP
    """
    import torch

    from shimkit.metal import compile_shader

    spec: MslKernel | None = kernel.msl
    if spec is None or kernel.msl_path is None:
        raise KernelLoadError(f"kernel {kernel.name!r} declares no MSL kernel (msl=MslKernel(...))")
    if dtype not in spec.dtypes:
        raise KernelLoadError(f"kernel {kernel.name!r}: its MSL kernel has no {dtype!r} variant "
                              f"(dtypes: {', '.join(spec.dtypes)})")
    library = compile_shader(Path(kernel.msl_path).read_text())
    function = getattr(library, f"{spec.function}_{dtype}")
    if spec.launch is not None:
        launch = spec.launch

        def launched(*args: Any, **kwargs: Any) -> Any:
            return launch(library, *args, **kwargs)

        launched.__qualname__ = f"{kernel.name}.msl.{spec.function}_{dtype}"
        return launched
    torch_dtype = getattr(torch, MSL_TORCH_DTYPES[dtype])

    def run(*args: Any) -> Any:
        tensors = [a for a in args if isinstance(a, torch.Tensor)]
        if not tensors:
            raise ValueError(f"{spec.function}_{dtype}: the elementwise MSL contract needs a tensor argument")
        shape = tensors[0].shape
        if any(t.shape != shape or t.dtype != torch_dtype for t in tensors):
            raise ValueError(f"{spec.function}_{dtype}: every tensor must have the output's shape {tuple(shape)} and "
                             f"dtype {torch_dtype} (the adapter's contract), got "
                             f"{[(tuple(t.shape), t.dtype) for t in tensors]}")
        out = torch.empty_like(tensors[0], memory_format=torch.contiguous_format)
        if out.numel():
            function(out, *[t.contiguous() for t in tensors], threads=out.numel())
        return out

    run.__qualname__ = f"{kernel.name}.msl.{spec.function}_{dtype}"
    return run


def _build(kernel: Kernel, sanitize: bool) -> Path:
    """The host module, its Objective-C++ sources (``.mm``: an MPSGraph or Metal kernel) compiled with clang against
    shimkit.objc's Metal and MPSGraph on the CPU and linked with its framework; with ``sanitize``, instrumented by
    clang's AddressSanitizer and UBSan, whose calls GCC's runtimes (which ``csrc/sanitize.sh`` preloads) answer."""
    objc = [path for path in kernel.host_paths if path.endswith(".mm")]
    others = [path for path in kernel.host_paths if path not in objc]
    objects: list[str] = []
    library_dirs: list[str] = []
    libraries: list[str] = []
    if objc:
        import pybind11

        from shimkit.objc.build import compile_objects, framework_library

        include_dirs = [str(INCLUDE_DIR), pybind11.get_include(), sysconfig.get_paths()["include"], kernel.directory]
        if kernel.links_libtorch:
            import torch.utils.cpp_extension as cpp_extension

            include_dirs += cpp_extension.include_paths()
        module = f"shimkit_kernel_{kernel.name}"
        objects = compile_objects(objc, include_dirs=include_dirs, sanitize=sanitize,
                                  extra_flags=[f"-DSHIMKIT_HOST_MODULE={module}", "-DSHIMKIT_WITH_METAL=0"])
        framework = framework_library(sanitize=sanitize)
        library_dirs = [str(framework.parent)]
        libraries = [framework.name.removeprefix("lib").removesuffix(".so"), "BlocksRuntime"]
    return compile_host_module(kernel.name, others, uses_sdk=kernel.uses_sdk, links_libtorch=kernel.links_libtorch,
                               sanitize=sanitize, objects=objects, library_dirs=library_dirs, libraries=libraries)


def _import_extension(name: str, path: str) -> ModuleType:
    if kernel_module := sys.modules.get(name):
        if getattr(kernel_module, "__file__", None) == path:
            return kernel_module
    import torch  # noqa: F401  (a host module linking libtorch needs it loaded first)

    loader = importlib.machinery.ExtensionFileLoader(name, path)
    spec = importlib.util.spec_from_file_location(name, path, loader=loader)
    if spec is None:
        raise KernelLoadError(f"{path} is not a loadable extension module")
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    sys.modules[name] = module  # an extension initialises once per process: later loads reuse it
    return module


def _exports(module: ModuleType, symbol: str) -> bool:
    """Whether the module's shared library exports the C function ``symbol`` (a c-shim)."""
    try:
        getattr(c_library(module), symbol)
    except (AttributeError, OSError):
        return False
    return True


def c_library(module: ModuleType) -> ctypes.CDLL:
    """The host module's shared library, for calling the C functions (c-shims) it exports by name."""
    return ctypes.CDLL(module.__file__)


@contextlib.contextmanager
def tensor_handles(*tensors) -> Iterator[list[int]]:
    """AtenTensorHandles (as ints) for ``tensors``, owned by torch and freed on exit: exactly what an
    AOTInductor wrapper passes to a c-shim in libtorch (heap-allocated ``at::Tensor*``).

    A handle shares its tensor's storage, so a shim writing through ``out``'s handle writes the tensor.
    """
    from torch._C import _aoti

    capsules = _aoti.unsafe_alloc_void_ptrs_from_tensors(list(tensors))
    try:
        yield [_capsule_pointer(c) for c in capsules]
    finally:
        _aoti.alloc_tensors_by_stealing_from_void_ptrs(capsules)


def _capsule_pointer(capsule) -> int:
    # torch wraps each at::Tensor* in an unnamed PyCapsule.
    get_pointer = ctypes.pythonapi.PyCapsule_GetPointer
    get_pointer.argtypes = [ctypes.py_object, ctypes.c_char_p]
    get_pointer.restype = ctypes.c_void_p
    return get_pointer(capsule, None)


def main() -> int:
    """Builds every registered kernel's host module and prints its path."""
    names = dict.fromkeys(r.record.name for r in get_registry().op_plugins())
    for kernel in (k for name in names for k in kernels(name)):
        if kernel.host_sources:
            print(_build(kernel, sanitize_requested()))
    return 0


if __name__ == "__main__":
    sys.exit(main())


__all__ = ["AOTI_TORCH_SUCCESS", "KernelLoadError", "c_library", "host_module", "kernels", "msl_kernel",
           "tensor_handles"]

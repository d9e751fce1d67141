"""The reference-device c-shims, callable from Python with real AtenTensorHandles.

``shimkit_ref_addmm_out`` is the adapter body of ``aoti_torch_mps_addmm_out`` instantiated over
libtorch's implementation of the AOTI C accessor API (``aoti_torch_get_sizes`` ...). It lives in its own
shared library, linked against ``libtorch_cpu``, so that ``shimkit._C`` stays free of libtorch.

The handles are made by torch itself: ``torch._C._aoti.unsafe_alloc_void_ptrs_from_tensors`` returns
heap-allocated ``at::Tensor*`` -- exactly what an AOTInductor wrapper passes to a c-shim in libtorch --
sharing each tensor's storage, and ``alloc_tensors_by_stealing_from_void_ptrs`` takes them back and frees
them. The shim is called through ``ctypes`` by its unmangled symbol name, as the wrapper ``.so`` would.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import os
from pathlib import Path
from typing import Iterator

from shimkit.csrc.build import SANITIZER_FLAGS, compile_shared_library, kernel_sources, sdk_sources

AOTI_TORCH_SUCCESS = 0


def _sanitize_requested() -> bool:
    return os.environ.get("SHIMKIT_SANITIZE") == "1"


def build_reference_shim(sanitize: bool | None = None) -> Path:
    """Builds (or reuses) the reference c-shim library and returns its path."""
    import torch.utils.cpp_extension as cpp_extension

    sanitize = _sanitize_requested() if sanitize is None else sanitize
    torch_lib = str(Path(cpp_extension.library_paths()[0]))
    return compile_shared_library(
        "shimkit_reference_shims",
        sdk_sources() + kernel_sources("addmm"),
        include_dirs=cpp_extension.include_paths(),
        define_macros=[("SHIMKIT_WITH_LIBTORCH_ACCESSORS", "1")],
        library_dirs=[torch_lib],
        libraries=["torch_cpu", "c10"],
        extra_flags=SANITIZER_FLAGS if sanitize else ("-O2",),
    )


@functools.lru_cache(maxsize=None)
def load_reference_shim() -> ctypes.CDLL:
    """The loaded library, with argument types set for each exported shim."""
    import torch  # noqa: F401  (libtorch_cpu must be loaded before the library that links it)

    library = ctypes.CDLL(str(build_reference_shim()))
    handle = ctypes.c_void_p
    library.shimkit_ref_addmm_out.argtypes = [handle, handle, handle, handle,
                                              ctypes.c_double, ctypes.c_double]
    library.shimkit_ref_addmm_out.restype = ctypes.c_int32
    library.shimkit_ref_last_error.argtypes = []
    library.shimkit_ref_last_error.restype = ctypes.c_char_p
    return library


@contextlib.contextmanager
def tensor_handles(*tensors) -> Iterator[list[int]]:
    """AtenTensorHandles (as ints) for ``tensors``, owned by torch and freed on exit.

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


def last_error() -> str:
    """The message of this thread's last failed reference shim call."""
    return load_reference_shim().shimkit_ref_last_error().decode()


__all__ = ["AOTI_TORCH_SUCCESS", "build_reference_shim", "last_error",
           "load_reference_shim", "tensor_handles"]

"""The addmm plugin's host module, found from its Kernel record, with its c-shims typed for ctypes."""

from __future__ import annotations

import ctypes
import functools

import shimkit.plugins.addmm as addmm_plugin
from shimkit.testing.kernels import c_library, host_module

ADDMM = host_module(addmm_plugin.KERNEL)


@functools.lru_cache(maxsize=None)
def addmm_shims() -> ctypes.CDLL:
    """The exported c-shims ``shimkit_ref_addmm_out`` and ``shimkit_ref_last_error``, typed."""
    library = c_library(ADDMM)
    handle = ctypes.c_void_p
    library.shimkit_ref_addmm_out.argtypes = [handle, handle, handle, handle, ctypes.c_double, ctypes.c_double]
    library.shimkit_ref_addmm_out.restype = ctypes.c_int32
    library.shimkit_ref_last_error.argtypes = []
    library.shimkit_ref_last_error.restype = ctypes.c_char_p
    return library


def last_error() -> str:
    """The message of this thread's last failed ``shimkit_ref_*`` call."""
    return addmm_shims().shimkit_ref_last_error().decode()

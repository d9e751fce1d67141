"""shimkit.metal: Metal Shading Language compute kernels run on the CPU, for testing them anywhere.

``compile_shader(source)`` has the calling convention of ``torch.mps.compile_shader``::

    from shimkit.metal import compile_shader
    lib = compile_shader(MSL)
    lib.my_kernel(out, x, 2.0, threads=out.numel(), group_size=256)

The MSL is compiled as C++ against shimkit's ``metal_stdlib`` (docs/metal.md says what is emulated and
how, and what is not); threads that synchronise run as cooperative fibers. On macOS with MPS,
``SHIMKIT_METAL_DEVICE=mps`` makes ``compile_shader`` the real ``torch.mps.compile_shader``, so the same
tests run on a GPU.
"""

from __future__ import annotations

import os

from shimkit.metal.frontend import MetalSourceError
from shimkit.metal.library import MetalCompileError, MetalKernel, ShaderLibrary
from shimkit.metal.library import compile_shader as compile_for_cpu


def compile_shader(source: str):
    """Compiles MSL ``source``: on the CPU (default), or with ``torch.mps.compile_shader`` when
    ``SHIMKIT_METAL_DEVICE=mps`` on a Mac with MPS."""
    if os.environ.get("SHIMKIT_METAL_DEVICE") == "mps":
        import torch

        if not torch.backends.mps.is_available():
            raise RuntimeError("SHIMKIT_METAL_DEVICE=mps, but this machine has no MPS device")
        return torch.mps.compile_shader(source)
    return compile_for_cpu(source)


__all__ = ["MetalCompileError", "MetalKernel", "MetalSourceError", "ShaderLibrary", "compile_shader"]

"""shimkit.metal: Metal Shading Language compute kernels run on the CPU, for testing them anywhere.

``compile_shader(source)`` has the calling convention of ``torch.mps.compile_shader``::

    from shimkit.metal import compile_shader
    lib = compile_shader(MSL)
    lib.my_kernel(out, x, 2.0, threads=out.numel(), group_size=256)

``metal_kernel(name, input_names, output_names, source)`` has MLX's (``mx.fast.metal_kernel``): the
source is a kernel body, the signature is written from the inputs (:mod:`shimkit.metal.mlx`).

The MSL is compiled as C++ against shimkit's ``metal_stdlib`` (docs/metal.md says what is emulated and
how, and what is not); threads that synchronise run as cooperative fibers. On macOS with MPS,
``SHIMKIT_METAL_DEVICE=mps`` makes ``compile_shader`` the real ``torch.mps.compile_shader``, so the same
tests run on a GPU.
"""

from __future__ import annotations

import os

from shimkit.metal.frontend import MetalSourceError
from shimkit.metal.library import MetalCompileError, MetalKernel, MetalRaceError, ShaderLibrary
from shimkit.metal.library import compile_shader as compile_for_cpu
from shimkit.metal.mlx import MetalKernelError, metal_kernel


# The MSL scalar type that holds each torch dtype, as kernels name their variants (``sort_stable_half``).
MSL_TYPES = {"float32": "float", "float16": "half", "bfloat16": "bfloat", "int64": "long", "int32": "int",
             "int16": "short", "int8": "char", "uint8": "uchar", "bool": "bool"}


def msl_type(dtype) -> str:
    """The MSL type name of a torch dtype: ``msl_type(torch.float16) == "half"``."""
    name = str(dtype).removeprefix("torch.")
    if name not in MSL_TYPES:
        raise TypeError(f"{dtype} has no Metal scalar type (Metal has {', '.join(MSL_TYPES)})")
    return MSL_TYPES[name]


def compile_shader(source: str):
    """Compiles MSL ``source``: on the CPU (default), or with ``torch.mps.compile_shader`` when
    ``SHIMKIT_METAL_DEVICE=mps`` on a Mac with MPS."""
    if os.environ.get("SHIMKIT_METAL_DEVICE") == "mps":
        import torch

        if not torch.backends.mps.is_available():
            raise RuntimeError("SHIMKIT_METAL_DEVICE=mps, but this machine has no MPS device")
        return torch.mps.compile_shader(source)
    return compile_for_cpu(source)


__all__ = ["MetalCompileError", "MetalKernel", "MetalKernelError", "MetalRaceError", "MetalSourceError", "MSL_TYPES", "ShaderLibrary", "compile_shader", "metal_kernel", "msl_type"]

"""``aten::nonzero`` (and ``torch.argwhere``) on mps and cuda: kernels behind the c-shims Inductor already calls.

``torch.nonzero`` and ``torch.argwhere`` reach Inductor as ``aten::nonzero``, whose output size depends on
the data: Inductor leaves it to a c-shim, ``aoti_torch_mps_nonzero`` or ``aoti_torch_cuda_nonzero``
(both recorded as ``at::_ops::nonzero::call``), which neither ExecuTorch runtime has. This plugin ships both.

On mps: ``kernel/nonzero.metal`` (each thread counts the nonzero elements before it; a first dispatch stores
the total, which the host reads to size the result, as ATen's own mps ``nonzero`` waits for its count; a
second writes the coordinates) dispatched by ``kernel/nonzero_shim_mps.mm`` on the Mac and by
:func:`launch_nonzero` here, with the same buffers, through ``shimkit.metal`` (checked against
``torch.nonzero`` in every dtype).

On cuda: ``kernel/nonzero_shim_cuda.cu``, written against the AOTI c-shim ABI alone (the ``aoti_torch_*``
tensor, dtype, allocation and stream functions ExecuTorch's CUDA runtime defines, and libtorch too), so the
same source links into that runtime and against libtorch. A counting kernel (per-block counts, then one
block's scan), the total copied to the host (ATen's CUDA ``nonzero`` synchronizes the same way), the result
allocated with ``aoti_torch_empty_strided``, then a writing kernel; any strides, float32/16, bfloat16,
int64/32/16/8, uint8 and bool (float64 where the runtime holds it), the result laid out as ATen's CUDA
``nonzero`` returns it (shape ``(count, ndim)``, strides ``(1, count)``: the strides Inductor's fake
``nonzero`` promises the code after the call). No GPU here: ``tools/cuda_nonzero_check.py`` compiles it with
nvcc against libtorch on a GPU machine and compares it with ``torch.nonzero``.

Both programs then read the row count with ``aoti_torch_get_size``, which both runtimes lack too (they have
``aoti_torch_get_sizes``): ``kernel/aoti_torch_get_size.cpp``, also ABI-only, defines it for either, so the
whole program links.
"""

from __future__ import annotations

import math
from pathlib import Path

import torch

from shimkit.registry import Kernel, MslKernel, OpPlugin, Shim, hookimpl

NONZERO = "aten::nonzero.default"
NONZERO_DTYPES = ("float", "half", "bfloat", "long", "int", "short", "char", "uchar", "bool")


def launch_nonzero(library, self: torch.Tensor) -> torch.Tensor:
    """``nonzero`` through ``library``'s ``nonzero_<dtype>``, as ``nonzero_shim_mps.mm`` dispatches it: a
    counting dispatch, then a writing one, one thread per element of a contiguous ``self``."""
    from shimkit.metal import msl_type

    source = self.contiguous()
    ndim = source.dim()
    numel = source.numel()
    total = torch.zeros(1, dtype=torch.int64)
    if numel == 0:
        return torch.empty_strided((0, ndim), (1, 0), dtype=torch.int64)
    kernel = getattr(library, f"nonzero_{msl_type(source.dtype)}")
    sizes = torch.tensor(source.shape if ndim else (1,), dtype=torch.int64)
    # The counting dispatch writes no coordinates: any buffer stands in for them.
    kernel(total, total, source, sizes, ndim, numel, 0, threads=numel)
    rows = int(total.item())
    coordinates = torch.empty_strided((rows, ndim), (1, rows), dtype=torch.int64)  # ATen's layout
    if coordinates.numel():
        kernel(coordinates, total, source, sizes, ndim, numel, 1, threads=numel)
    return coordinates


KERNEL = Kernel(
    name="nonzero",
    directory=str(Path(__file__).resolve().parent / "kernel"),
    runtime_sources=("nonzero.metal", "nonzero_shim_mps.mm", "aoti_torch_get_size.cpp"),
    msl=MslKernel(source="nonzero.metal", function="nonzero", dtypes=NONZERO_DTYPES, launch=launch_nonzero),
    uses_sdk=False,
)


def nonzero_inputs():
    """Tensors 0-d to 4-d, empty dims included, mostly zeros (a mask) or mostly not, with -0.0 and NaN."""
    from hypothesis import strategies as st
    from hypothesis.extra import numpy as hnp
    import numpy as np

    elements = st.sampled_from([0.0, 0.0, 0.0, -0.0, 1.0, -2.5, 0.5, np.nan, np.inf, 3.0])
    shapes = hnp.array_shapes(min_dims=0, max_dims=4, min_side=0, max_side=6)
    return hnp.arrays(np.float32, shapes, elements=elements).map(lambda a: (torch.from_numpy(a),))


# The CUDA runtime's: no host module (the kernel needs a GPU; tools/cuda_nonzero_check.py runs it there).
CUDA_KERNEL = Kernel(
    name="nonzero_cuda",
    directory=str(Path(__file__).resolve().parent / "kernel"),
    runtime_sources=("nonzero_shim_cuda.cu", "aoti_torch_get_size.cpp"),
    uses_sdk=False,
)


@hookimpl
def shimkit_op_plugins():
    yield OpPlugin(
        name="nonzero",
        ops=(NONZERO,),
        shims=(Shim(op=NONZERO, device="mps", symbol="aoti_torch_mps_nonzero",
                    recorded_names=("at::_ops::nonzero::call",), kernel=KERNEL),
               Shim(op=NONZERO, device="cuda", symbol="aoti_torch_cuda_nonzero",
                    recorded_names=("at::_ops::nonzero::call",), kernel=CUDA_KERNEL)),
        references={NONZERO: torch.nonzero},
        input_strategies={NONZERO: nonzero_inputs},
        doc="nonzero / argwhere on mps (an MSL kernel) and cuda (a CUDA kernel over the c-shim ABI): count, then "
            "write the coordinates in row-major order.",
    )

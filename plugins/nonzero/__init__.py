"""``aten::nonzero`` (and ``torch.argwhere``) on mps: an MSL kernel behind the c-shim Inductor already calls.

``torch.nonzero`` and ``torch.argwhere`` reach Inductor as ``aten::nonzero``, whose output size depends on
the data: Inductor leaves it to the c-shim ``aoti_torch_mps_nonzero`` (recorded as
``at::_ops::nonzero::call``), which ExecuTorch's Metal runtime lacks. This plugin ships it:
``kernel/nonzero.metal`` (each thread counts the nonzero elements before it; a first dispatch stores the
total, which the host reads to size the result, as ATen's own mps ``nonzero`` waits for its count; a second
writes the coordinates) dispatched by ``kernel/nonzero_shim_mps.mm`` on the Mac and by :func:`launch_nonzero`
here, with the same buffers, through ``shimkit.metal`` (checked against ``torch.nonzero`` in every dtype).
The program then reads the row count with ``aoti_torch_get_size``, which the runtime lacks too (it has
``aoti_torch_get_sizes``): ``kernel/aoti_torch_get_size.cpp`` defines it, so the whole program links.
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
        return torch.empty(0, ndim, dtype=torch.int64)
    kernel = getattr(library, f"nonzero_{msl_type(source.dtype)}")
    sizes = torch.tensor(source.shape if ndim else (1,), dtype=torch.int64)
    # The counting dispatch writes no coordinates: any buffer stands in for them.
    kernel(total, total, source, sizes, ndim, numel, 0, threads=numel)
    coordinates = torch.empty(int(total.item()), ndim, dtype=torch.int64)
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


@hookimpl
def shimkit_op_plugins():
    yield OpPlugin(
        name="nonzero",
        ops=(NONZERO,),
        shims=(Shim(op=NONZERO, device="mps", symbol="aoti_torch_mps_nonzero",
                    recorded_names=("at::_ops::nonzero::call",), kernel=KERNEL),),
        references={NONZERO: torch.nonzero},
        input_strategies={NONZERO: nonzero_inputs},
        doc="nonzero / argwhere on mps: an MSL kernel that counts, then writes the coordinates in row-major order.",
    )

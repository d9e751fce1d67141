"""``aten::sort`` (and ``argsort``) on mps: a stable sort shipped as an MSL kernel.

``torch.sort`` and ``torch.argsort`` reach Inductor as ``aten::sort.stable``, which it leaves to the
c-shim ``aoti_torch_mps_sort_stable`` (recorded as ``at::_ops::sort_stable::call``); ExecuTorch's Metal
runtime has none. This plugin ships it: ``kernel/sort.metal`` (a rank sort, one thread per element,
stable by construction, ATen's NaN order) dispatched by ``kernel/sort_shim_mps.mm`` on the Mac and by
:func:`launch_sort` here, with the same buffers, wherever ``shimkit.metal`` runs it (``shimkit.testing``
checks it on Linux against ``torch.sort(stable=True)`` in every dtype it declares).

Every sort is stable: a non-stable request is a stable one that happens to agree with what any sort
may return. The adapter runs on Linux inside whole programs (``shimkit audit --execute``; docs/metal.md).
"""

from __future__ import annotations

import math
from pathlib import Path

import torch

from shimkit.registry import Kernel, MslKernel, OpCall, OpPlugin, Shim, hookimpl

SORT = "aten::sort.stable"
SORT_DTYPES = ("float", "half", "bfloat", "long", "int", "short", "char", "uchar")


def launch_sort(library, self: torch.Tensor, *, stable: bool | None = None, dim: int = -1,
                descending: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """``sort.stable`` through ``library``'s ``sort_stable_<dtype>``, as ``sort_shim_mps.mm`` dispatches
    it: a contiguous ``self`` viewed as ``[outer, size, inner]`` around ``dim``, one thread per element."""
    from shimkit.metal import msl_type

    rank = max(self.dim(), 1)
    if not -rank <= dim < rank:
        raise IndexError(f"Dimension out of range (expected to be in range of [{-rank}, {rank - 1}], but got {dim})")
    dim %= rank
    source = self.contiguous()
    size = source.shape[dim] if source.dim() else 1
    inner = math.prod(source.shape[dim + 1:])
    values = torch.empty_like(source)
    indices = torch.empty(source.shape, dtype=torch.int64, device=source.device)
    if source.numel():
        kernel = getattr(library, f"sort_stable_{msl_type(source.dtype)}")
        kernel(values, indices, source, size, inner, bool(descending), threads=source.numel())
    return values, indices


KERNEL = Kernel(
    name="sort",
    directory=str(Path(__file__).resolve().parent / "kernel"),
    runtime_sources=("sort.metal", "sort_shim_mps.mm"),
    msl=MslKernel(source="sort.metal", function="sort_stable", dtypes=SORT_DTYPES, launch=launch_sort),
    uses_sdk=False,
)


def sort_reference(self, *, stable=None, dim=-1, descending=False):
    return torch.sort(self, stable=True, dim=dim, descending=descending)


def sort_inputs():
    """``sort.stable(self, stable=, dim=, descending=)`` calls: rows full of ties, NaNs, infinities and signed zeros (where stability and ATen's order show),
    0-d to 3-d, empty dims included, every dim and both directions."""
    from hypothesis import strategies as st
    from hypothesis.extra import numpy as hnp
    import numpy as np

    specials = st.sampled_from([0.0, -0.0, 1.0, -1.0, np.nan, np.inf, -np.inf, 65504.0, 1e-8])
    elements = st.floats(-1e3, 1e3, width=32) | specials | st.integers(-3, 3).map(float)
    shapes = hnp.array_shapes(min_dims=0, max_dims=3, min_side=0, max_side=9)

    def call(shape):
        rank = max(len(shape), 1)
        return st.builds(lambda x, stable, dim, descending: OpCall((x,), {"stable": stable, "dim": dim,
                                                                          "descending": descending}),
                         hnp.arrays(np.float32, shape, elements=elements).map(torch.from_numpy),
                         st.sampled_from([None, True, False]), st.integers(-rank, rank - 1), st.booleans())

    return shapes.flatmap(call)


@hookimpl
def shimkit_op_plugins():
    yield OpPlugin(
        name="sort",
        ops=(SORT,),
        shims=(Shim(op=SORT, device="mps", symbol="aoti_torch_mps_sort_stable",
                    recorded_names=("at::_ops::sort_stable::call",), kernel=KERNEL),),
        references={SORT: sort_reference},
        input_strategies={SORT: sort_inputs},
        doc="Stable sort / argsort on mps: an MSL rank sort (ATen's NaN order, all dims, both directions).",
    )

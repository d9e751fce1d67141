"""``aten::addmm``: ``beta * self + alpha * (mat1 @ mat2)``.

Inductor emits ``aoti_torch_mps_addmm_out`` both for ``addmm`` in the graph and for its own
``mm + bias`` re-fusion (reference §5). Where a device has no addmm shim the decomposition below is
applied instead; it keeps the exact semantics of ``beta`` and ``alpha``: ``beta == 0`` ignores ``self``
(NaN and inf in it do not propagate) and ``alpha == 0`` ignores the product.

On mps the plugin ships its own ``aoti_torch_mps_addmm_out`` (``csrc/kernels/addmm``): a portable plan
(validation, layouts, graph-cache key) plus an MPSGraph implementation compiled by ExecuTorch's Metal
runtime build from the sources listed below. The Metal sources are NOT compiled or run on Linux, and
have not been run on a Mac by shimkit's CI; on Linux the same adapter runs the reference kernel as
``shimkit_ref_addmm_out`` (see docs/kernels.md).
"""

from __future__ import annotations

import torch

from shimkit.csrc.build import metal_runtime_sources
from shimkit.registry import OpPlugin, Shim, hookimpl

ADDMM = "aten::addmm.default"


def addmm_decomposition(self, mat1, mat2, *, beta=1, alpha=1):
    """``addmm`` written with ``mm``, ``mul`` and ``add`` only."""
    if alpha == 0:
        # The product is ignored entirely, so NaN/inf in mat1 or mat2 must not leak through mm.
        product = torch.zeros((mat1.shape[0], mat2.shape[1]), dtype=mat1.dtype, device=mat1.device)
    else:
        product = torch.mm(mat1, mat2)
        if alpha != 1:
            product = product * alpha
    if beta == 0:
        return product
    bias = self if beta == 1 else self * beta
    return product + bias


@hookimpl
def shimkit_op_plugins():
    yield OpPlugin(
        name="addmm",
        ops=(ADDMM,),
        shims=(Shim(op=ADDMM, device="mps", symbol="aoti_torch_mps_addmm_out",
                    sources=metal_runtime_sources("addmm")),),
        decompositions={ADDMM: addmm_decomposition},
        references={ADDMM: torch.addmm},
        doc="addmm: shimkit's Metal kernel on mps; mm plus a scaled add where a device has no addmm shim.",
    )

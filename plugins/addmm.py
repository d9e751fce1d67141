"""``aten::addmm``: ``beta * self + alpha * (mat1 @ mat2)``.

Inductor emits ``aoti_torch_mps_addmm_out`` both for ``addmm`` in the graph and for its own
``mm + bias`` re-fusion (reference §5). Where a device has no addmm shim the decomposition below is
applied instead; it keeps the exact semantics of ``beta`` and ``alpha``: ``beta == 0`` ignores ``self``
(NaN and inf in it do not propagate) and ``alpha == 0`` ignores the product.
"""

from __future__ import annotations

import torch

from shimkit.registry import OpPlugin, hookimpl

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
        decompositions={ADDMM: addmm_decomposition},
        references={ADDMM: torch.addmm},
        doc="addmm: mm plus a scaled add where the device has no addmm shim.",
    )

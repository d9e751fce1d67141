"""``aten::baddbmm``: ``beta * self + alpha * (batch1 @ batch2)`` with ``bmm``, for devices without
``aoti_torch_mps_baddbmm_out`` (ExecuTorch's Metal runtime has ``bmm_out`` only).

ATen's documented edge cases are kept: ``beta == 0`` ignores ``self``, so NaN and inf in it do not
propagate (its shape must still broadcast). ``alpha`` multiplies the product even when it is 0, as
ATen does, so NaN in the batches still shows. Results have the inputs' dtype; integer tensors take
integer ``alpha``/``beta`` as ATen requires.
"""

from __future__ import annotations

import torch

from shimkit.registry import OpPlugin, hookimpl

BADDBMM = "aten::baddbmm.default"


def baddbmm_decomposition(self, batch1, batch2, *, beta=1, alpha=1):
    product = torch.bmm(batch1, batch2)
    if alpha != 1:
        product = product * alpha
    if beta == 0:
        # Broadcast check only: ATen rejects a self that does not broadcast even when it ignores it.
        torch.broadcast_shapes(self.shape, product.shape)
        return product
    bias = self if beta == 1 else self * beta
    return product + bias


def _baddbmm_reference(self, batch1, batch2, *, beta=1, alpha=1):
    return torch.baddbmm(self, batch1, batch2, beta=beta, alpha=alpha)


@hookimpl
def shimkit_op_plugins():
    yield OpPlugin(
        name="baddbmm",
        ops=(BADDBMM,),
        decompositions={BADDBMM: baddbmm_decomposition},
        references={BADDBMM: _baddbmm_reference},
        doc="baddbmm as bmm plus a scaled add where the device has no baddbmm shim.",
    )

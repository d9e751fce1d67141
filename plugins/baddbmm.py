"""``aten::baddbmm``: ``beta * self + alpha * (batch1 @ batch2)`` with ``bmm``, for devices without
``aoti_torch_mps_baddbmm_out`` (ExecuTorch's Metal runtime has ``bmm_out`` only).

The rules are ``addmm``'s (``plugins/addmm.py``): half and bfloat16 are computed in float32 and
rounded once; ``beta == 0`` ignores ``self`` (its shape must still broadcast) and ``alpha == 0``
ignores the product, so NaN and inf in an ignored operand never propagate. ATen's ``baddbmm``
multiplies the product by a zero ``alpha`` (NaN shows); the reference below follows the shared rule,
and otherwise is ATen's. Results have the inputs' dtype; integer tensors take integer
``alpha``/``beta`` as ATen requires.
"""

from __future__ import annotations

import torch

from shimkit.registry import OpPlugin, hookimpl

BADDBMM = "aten::baddbmm.default"
ACCUMULATE_IN_FLOAT32 = (torch.float16, torch.bfloat16)


def baddbmm_decomposition(self, batch1, batch2, *, beta=1, alpha=1):
    result_dtype = batch1.dtype
    if result_dtype in ACCUMULATE_IN_FLOAT32:
        self, batch1, batch2 = self.float(), batch1.float(), batch2.float()
    if alpha == 0:
        product = torch.zeros((batch1.shape[0], batch1.shape[1], batch2.shape[2]), dtype=batch1.dtype,
                              device=batch1.device)
    else:
        product = torch.bmm(batch1, batch2)
        if alpha != 1:
            product = product * alpha
    if beta == 0:
        if _static(self.shape, product.shape):  # traced, export already checked the op's shapes
            torch.broadcast_shapes(self.shape, product.shape)  # ATen rejects a self that cannot broadcast
        result = product
    else:
        result = product + (self if beta == 1 else self * beta)
    return result.to(result_dtype)


def baddbmm_reference(self, batch1, batch2, *, beta=1, alpha=1):
    result_dtype = batch1.dtype
    if result_dtype in ACCUMULATE_IN_FLOAT32:
        self, batch1, batch2 = self.float(), batch1.float(), batch2.float()
    if alpha == 0:
        batch1 = torch.zeros_like(batch1)
    return torch.baddbmm(self, batch1, batch2, beta=beta, alpha=alpha).to(result_dtype)


def baddbmm_inputs():
    """``(self, batch1, batch2)`` of matching sizes (empty ones too), ``self`` full or broadcast."""
    from hypothesis import strategies as st

    from shimkit.testing import tensors

    def calls(sizes):
        b, n, k, m = sizes
        self_shapes = st.sampled_from([(b, n, m), (n, m), (m,), (1, 1, m)])
        return st.tuples(self_shapes.flatmap(lambda shape: tensors(shape, torch.float32)),
                         tensors((b, n, k), torch.float32), tensors((b, k, m), torch.float32))

    return st.tuples(*[st.integers(0, 4)] * 4).flatmap(calls)


def _static(*shapes: torch.Size) -> bool:
    return not any(isinstance(size, torch.SymInt) for shape in shapes for size in shape)


@hookimpl
def shimkit_op_plugins():
    yield OpPlugin(
        name="baddbmm",
        ops=(BADDBMM,),
        decompositions={BADDBMM: baddbmm_decomposition},
        references={BADDBMM: baddbmm_reference},
        input_strategies={BADDBMM: baddbmm_inputs},
        doc="baddbmm as bmm plus a scaled add where the device has no baddbmm shim.",
    )

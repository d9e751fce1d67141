"""``aten::masked_scatter`` as a prefix count of the mask and a gather from the source.

Inductor decomposes ``masked_scatter`` only for backends with ``MASKED_SCATTER_WITH_INDEX`` (not mps);
on Metal it falls back to ``at::_ops::masked_scatter::call``, which ExecuTorch's Metal runtime lacks
(found by the OpInfo sweep, docs/coverage.md). The algorithm is eager CUDA's and Inductor's: the
``k``-th true element of the (broadcast) mask takes the ``k``-th element of the source, and ``k`` is the
inclusive prefix count of the mask minus one. The count is ``plugins/cumsum.py``'s log-step scan, so the
decomposition declines, with that plugin's reason, for a mask whose element count is dynamic without an
upper bound.

Semantics kept from ATen: ``self`` and ``mask`` broadcast together; ``source`` is read in its
row-major order whatever its shape; elements where the mask is false keep ``self``'s value, NaN
included. Eager ATen raises when the source has fewer elements than the mask has true values; a
compiled program cannot check a data-dependent count (neither does Inductor's decomposition), so there
the missing elements read a zero pad instead of memory past the source.
"""

from __future__ import annotations

import math

import torch

from shimkit.plugins.cumsum import cumsum_decomposition
from shimkit.plugins.shared import float32_tensors
from shimkit.registry import OpCall, OpPlugin, hookimpl

MASKED_SCATTER = "aten::masked_scatter.default"


def masked_scatter_decomposition(self: torch.Tensor, mask: torch.Tensor, source: torch.Tensor) -> torch.Tensor:
    if mask.dtype != torch.bool:
        raise RuntimeError(f"masked_scatter_: expected BoolTensor for mask, got {mask.dtype}")
    if source.dtype != self.dtype:
        raise RuntimeError(f"masked_scatter: expected self and source to have same dtypes but got {self.dtype} "
                           f"and {source.dtype}")
    self, mask = torch.broadcast_tensors(self, mask)
    flat_mask = mask.reshape(-1)
    ranks = cumsum_decomposition(flat_mask, 0) - 1
    # One pad element: an empty source (an all-false mask) still has an element to gather.
    padded = torch.cat([source.reshape(-1), source.new_zeros(1)])
    picked = padded.index_select(0, ranks.clamp(min=0).clamp(max=padded.shape[0] - 1))
    return torch.where(flat_mask, picked, self.reshape(-1)).reshape(self.shape)


def masked_scatter_calls():
    """``masked_scatter(self, mask, source)`` calls: shapes up to 3-d from 0, a mask of the same shape
    or broadcast (to or from ``self``), a source with exactly as many or more elements than the mask has
    true values and of another shape, NaN and inf in both."""
    from hypothesis import strategies as st

    elements = st.floats(-8, 8, width=32) | st.sampled_from([float("nan"), float("inf")])

    def tensor(shape):
        return float32_tensors(shape, elements)

    def call(shapes):
        self_shape, mask_shape = shapes
        masks = st.lists(st.booleans(), min_size=math.prod(mask_shape), max_size=math.prod(mask_shape)).map(
            lambda v: torch.tensor(v, dtype=torch.bool).reshape(mask_shape))
        return st.tuples(tensor(self_shape), masks, st.integers(0, 3)).flatmap(
            lambda c: tensor((math.prod(torch.broadcast_shapes(self_shape, mask_shape)) + c[2],)).map(
                lambda source: OpCall((c[0], c[1], source), {})))

    shapes = st.sampled_from([((3, 4), (3, 4)), ((3, 4), (4,)), ((4,), (2, 4)), ((2, 3, 2), (1, 3, 1)),
                              ((0, 3), (0, 3)), ((), ()), ((5,), ())])
    return shapes.flatmap(call)


@hookimpl
def shimkit_op_plugins():
    yield OpPlugin(
        name="masked-scatter",
        ops=(MASKED_SCATTER,),
        decompositions={MASKED_SCATTER: masked_scatter_decomposition},
        references={MASKED_SCATTER: torch.masked_scatter},
        input_strategies={MASKED_SCATTER: masked_scatter_calls},
        decomposition_devices=("mps",),
        doc="masked_scatter as a prefix count of the mask (the cumsum plugin's scan) and a gather.",
    )

"""``aten::bmm`` on mps: ``aoti_torch_mps_bmm_out``, implemented by ExecuTorch's Metal runtime.

The runtime's bmm (``runtime/ops/op_bmm.mm``) hands each operand to MPSGraph as one dense buffer and refuses a
strided one ("must be contiguous"); Inductor passes its extern kernels views as they come (``q @ k.transpose``
hands bmm a transposed ``k``). Found by running whole programs on Linux (``shimkit audit --execute``): the
bundled ``baddbmm`` and ``rfft2_global_filter`` programs stopped at their bmm. The ``dense_bmm_operands``
post-grad pass copies such an operand into a contiguous one first, on mps only, where that is what
a Mac needs.
"""

import torch
from torch import fx

from shimkit.passes.base import PassContext, ShimkitPass
from shimkit.registry import OpPlugin, PassSpec, Shim, hookimpl

BMM = "aten::bmm.default"
_FORCED = "shimkit_dense_bmm_operands"


class DenseBmmOperands(ShimkitPass):
    """Post-grad pass: each ``bmm`` operand is given contiguous strides first (``prims.inductor_force_stride_order``: Inductor fuses the copy into the operand's producer or
    writes one copy kernel)."""

    name = "dense_bmm_operands"

    def transform(self, graph: fx.Graph, context: PassContext) -> bool:
        # Registered by Inductor, which runs this pass: looked up here, not when the plugin loads.
        force = torch.ops.prims.inductor_force_stride_order.default
        modified = False
        for node in graph.find_nodes(op="call_function", target=torch.ops.aten.bmm.default):
            for operand in node.args[:2]:
                value = operand.meta.get("val") if isinstance(operand, fx.Node) else None
                # Also when the graph's value is contiguous: Inductor may lay a buffer out in another order
                # (seen: a contiguous bmm operand written transposed). On one already laid out
                # contiguously the forced order costs nothing.
                if not isinstance(value, torch.Tensor) or node.meta.get(_FORCED) or operand.target is force:
                    continue
                # Inductor lowers clone's memory format away and lays the copy out as it likes (seen:
                # transposed again); forcing the stride order is what its own extern kernels use.
                dense_value = value.clone(memory_format=torch.contiguous_format)
                with graph.inserting_before(node):
                    source = operand
                    if 1 in value.shape:
                        # op_bmm.mm wants the exact strides [d1*d2, d2, 1], a dim of size 1 included, where a forced
                        # stride order leaves a view whose size-1 dim strides otherwise (q[:, :1]): a copy of it.
                        source = graph.call_function(torch.ops.aten.clone.default, (operand,),
                                                     {"memory_format": torch.contiguous_format})
                        source.meta["val"] = dense_value
                    dense = graph.call_function(force, (source, list(dense_value.stride())))
                dense.meta["val"] = dense_value
                node.replace_input_with(operand, dense)
                modified = True
            node.meta[_FORCED] = True
        return modified


@hookimpl
def shimkit_op_plugins():
    yield OpPlugin(
        name="bmm",
        ops=(BMM,),
        shims=(Shim(op=BMM, device="mps", symbol="aoti_torch_mps_bmm_out", provided_by_runtime=True),),
        references={BMM: torch.bmm},
        doc="Batched matrix multiply, provided by the stock Metal runtime (runtime/ops/op_bmm.mm).",
    )


@hookimpl
def shimkit_passes():
    yield PassSpec(
        name="dense_bmm_operands",
        factory=lambda capabilities: DenseBmmOperands(),
        devices=("mps",),
        stage="post_grad",
        doc="bmm operands copied contiguous where the Metal runtime's bmm needs dense buffers.",
    )

"""``aten::mm`` on mps: ``aoti_torch_mps_mm_out``, implemented by ExecuTorch's Metal runtime."""

import torch

from shimkit.registry import OpPlugin, Shim, hookimpl

MM = "aten::mm.default"


@hookimpl
def shimkit_op_plugins():
    yield OpPlugin(
        name="mm",
        ops=(MM,),
        # op_mm.mm reads self through sizes() alone, as a dense [M, K] matrix (mat2 densely or densely transposed).
        shims=(Shim(op=MM, device="mps", symbol="aoti_torch_mps_mm_out", provided_by_runtime=True,
                    dense_operands=("self",)),),
        references={MM: torch.mm},
        doc="Matrix multiply, provided by the stock Metal runtime (runtime/ops/op_mm.mm).",
    )

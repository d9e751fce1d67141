"""``aten::mm`` on mps: ``aoti_torch_mps_mm_out``, implemented by ExecuTorch's Metal runtime."""

import torch

from shimkit.registry import OpPlugin, Shim, hookimpl

MM = "aten::mm.default"


@hookimpl
def shimkit_op_plugins():
    yield OpPlugin(
        name="mm",
        ops=(MM,),
        shims=(Shim(op=MM, device="mps", symbol="aoti_torch_mps_mm_out", provided_by_runtime=True),),
        references={MM: torch.mm},
        doc="Matrix multiply, provided by the stock Metal runtime (runtime/ops/op_mm.mm).",
    )

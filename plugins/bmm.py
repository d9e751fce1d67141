"""``aten::bmm`` on mps: ``aoti_torch_mps_bmm_out``, implemented by ExecuTorch's Metal runtime."""

import torch

from shimkit.registry import OpPlugin, Shim, hookimpl

BMM = "aten::bmm.default"


@hookimpl
def shimkit_op_plugins():
    yield OpPlugin(
        name="bmm",
        ops=(BMM,),
        shims=(Shim(op=BMM, device="mps", symbol="aoti_torch_mps_bmm_out", provided_by_runtime=True),),
        references={BMM: torch.bmm},
        doc="Batched matrix multiply, provided by the stock Metal runtime (runtime/ops/op_bmm.mm).",
    )

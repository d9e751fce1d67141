"""``aten::convolution`` on mps: ``aoti_torch_mps_convolution``, from ExecuTorch's Metal runtime."""

import torch

from shimkit.registry import OpPlugin, Shim, hookimpl

CONVOLUTION = "aten::convolution.default"


@hookimpl
def shimkit_op_plugins():
    yield OpPlugin(
        name="convolution",
        ops=(CONVOLUTION,),
        # op_convolution.mm reads both through sizes() alone, as NCHW and OIHW (pytorch/executorch#22951).
        shims=(Shim(op=CONVOLUTION, device="mps", symbol="aoti_torch_mps_convolution",
                    provided_by_runtime=True, dense_operands=("input", "weight")),),
        references={CONVOLUTION: torch.ops.aten.convolution.default},
        doc="1-D/2-D convolution (grouped and depthwise), provided by the stock Metal runtime.",
    )

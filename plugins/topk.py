"""``aten::topk`` on mps: a c-shim fallback Inductor records as ``at::_ops::topk::call``."""

import torch

from shimkit.registry import OpPlugin, Shim, hookimpl

TOPK = "aten::topk.default"


@hookimpl
def shimkit_op_plugins():
    yield OpPlugin(
        name="topk",
        ops=(TOPK,),
        shims=(Shim(op=TOPK, device="mps", symbol="aoti_torch_mps_topk",
                    recorded_names=("at::_ops::topk::call",), provided_by_runtime=True),),
        references={TOPK: torch.topk},
        doc="Top-k values and indices, provided by the stock Metal runtime (runtime/ops/op_topk.mm).",
    )

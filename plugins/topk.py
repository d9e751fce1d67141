"""``aten::topk`` on mps: a c-shim fallback Inductor records as ``at::_ops::topk::call``."""

import torch

from shimkit.registry import OpPlugin, Shim, hookimpl

TOPK = "aten::topk.default"


@hookimpl
def shimkit_op_plugins():
    yield OpPlugin(
        name="topk",
        ops=(TOPK,),
        # op_topk.mm reads self through sizes() alone, as a dense buffer (a transposed self is read in the wrong order).
        shims=(Shim(op=TOPK, device="mps", symbol="aoti_torch_mps_topk",
                    recorded_names=("at::_ops::topk::call",), provided_by_runtime=True, dense_operands=("self",)),),
        references={TOPK: torch.topk},
        doc="Top-k values and indices, provided by the stock Metal runtime (runtime/ops/op_topk.mm).",
    )

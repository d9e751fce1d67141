"""torchao's 4-bit weight linear on mps, provided by ExecuTorch's Metal runtime.

The op is registered only where torchao's macOS library is loaded, so it is named by string; its
prototype is what ``custom_ops_to_c_shims`` needs for Inductor to emit the c-shim call.
"""

from shimkit.registry import OpPlugin, Shim, hookimpl

LINEAR_4BIT = "torchao::_linear_fp_act_4bit_weight.default"
SYMBOL = "aoti_torch_mps__linear_fp_act_4bit_weight"


@hookimpl
def shimkit_op_plugins():
    yield OpPlugin(
        name="torchao-linear-4bit",
        ops=(LINEAR_4BIT,),
        shims=(Shim(
            op=LINEAR_4BIT, device="mps", symbol=SYMBOL,
            recorded_names=("torchao::_linear_fp_act_4bit_weight",),
            c_prototype=(f"AOTITorchError {SYMBOL}(AtenTensorHandle A, AtenTensorHandle B, "
                         "int64_t group_size, AtenTensorHandle S, AtenTensorHandle Z, "
                         "AtenTensorHandle* ret)"),
            provided_by_runtime=True),),
        doc="Linear with float activations and 4-bit grouped weights (torchao), from the Metal runtime.",
    )

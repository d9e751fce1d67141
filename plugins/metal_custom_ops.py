"""ExecuTorch's own Metal custom ops: ``metal::gather_qmv`` and ``metal::gated_delta_rule``.

Importing their upstream modules registers the ops with torch and gives the C prototypes, so the
prototypes here always match the runtime ExecuTorch ships.
"""

from shimkit.registry import OpPlugin, PassSpec, Shim, canonical_op_name, hookimpl


def _plugin(name: str, c_shim_table: dict, doc: str, dense_operands: tuple[str, ...]) -> OpPlugin:
    ((op, prototypes),) = c_shim_table.items()
    op_name = canonical_op_name(op)
    schema_name = op_name.rsplit(".", 1)[0]
    symbol = f"aoti_torch_mps_{schema_name.split('::')[1]}"
    return OpPlugin(
        name=name,
        ops=(op,),
        shims=(Shim(op=op, device="mps", symbol=symbol, recorded_names=(schema_name,),
                    c_prototype=prototypes[0], provided_by_runtime=True, dense_operands=dense_operands),),
        references={op: op},
        doc=doc,
    )


@hookimpl
def shimkit_op_plugins():
    from executorch.backends.apple.metal.ops.gated_delta_rule import metal_gated_delta_rule_c_shim
    from executorch.backends.apple.metal.ops.gather_qmv import metal_gather_qmv_c_shim

    # Upstream's op_gather_qmv.mm and op_gated_delta_rule.mm read every operand through sizes() alone, as dense
    # memory from its data pointer (runtime/native/fallbacks/gather_qmv.cpp, gated_delta_rule.cpp): a transposed
    # or channels-last operand computes wrong on a Mac. gated_delta_rule's state is left as it is: the op writes
    # it in place, so a dense copy would take the update away from the cache it belongs to.
    yield _plugin("gather-qmv", metal_gather_qmv_c_shim,
                  "Expert-indexed INT4 quantized matmul for MoE (metal::gather_qmv).",
                  ("x", "w", "scales", "biases", "expert_indices"))
    yield _plugin("gated-delta-rule", metal_gated_delta_rule_c_shim,
                  "Gated delta-rule recurrence for linear attention (metal::gated_delta_rule).",
                  ("q", "k", "v", "g", "beta"))


@hookimpl
def shimkit_passes():
    def gather_qmv_operands(capabilities):
        import torch

        from shimkit.passes.operand_dtypes import CastOperandsTo

        return CastOperandsTo("gather_qmv_operand_dtypes", [torch.ops.metal.gather_qmv.default],
                              [(2, "scales"), (3, "biases")], (0, "x"))

    yield PassSpec(
        name="gather_qmv_operand_dtypes",
        factory=gather_qmv_operands,
        devices=("mps",),
        stage="post_grad",
        doc="metal::gather_qmv's scales and biases cast to the activations' dtype, the type its Metal kernel "
            "reads them as (upstream's Qwen3.5-MoE quantizes bf16 experts into float32 scales).",
    )

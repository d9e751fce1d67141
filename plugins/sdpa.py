"""Scaled dot-product attention on mps: both versions of ``_scaled_dot_product_attention_math_for_mps``.

Inductor lowers SDPA on mps to these ATen ops and records the c-shim fallback as
``at::_ops::<op>::call``. The ``_v2`` op exists only in newer torch releases; naming it by string keeps
this plugin loadable everywhere.
"""

from shimkit.registry import OpPlugin, Shim, hookimpl

VERSIONS = ("_scaled_dot_product_attention_math_for_mps",
            "_scaled_dot_product_attention_math_for_mps_v2")


@hookimpl
def shimkit_op_plugins():
    yield OpPlugin(
        name="sdpa",
        ops=tuple(f"aten::{op}.default" for op in VERSIONS),
        shims=tuple(
            Shim(op=f"aten::{op}.default", device="mps", symbol=f"aoti_torch_mps_{op}",
                 recorded_names=(f"at::_ops::{op}::call",), provided_by_runtime=True)
            for op in VERSIONS
        ),
        doc="SDPA math-for-mps v1 and v2, provided by the stock Metal runtime (runtime/ops/op_sdpa.mm).",
    )

"""Scalar operands that ExecuTorch's edge passes turned into 0-d tensor constants, made scalars again.

``to_edge`` gives ``aten::div.Tensor(x, 5.66)`` a 0-d tensor constant for its scalar. Inductor's attention
patterns bind the divisor of ``softmax(q @ k^T / inv_scale + mask) @ v`` whatever it is (pattern 5 has no
scalar check, unlike pattern 1) and call ``scaled_dot_product_attention(..., scale=1 / inv_scale)``, which
the schema refuses for a tensor: ``transformers/swin`` failed to lower once ``view_copy_to_view`` let the
pattern match. With the scalar back in place the pattern's replacement gets a number, as it would from
eager code.

A constant is inlined only where that changes no result: a 0-d constant as the second operand of an
elementwise binary op whose first operand is a tensor of at least one dimension and of the same or a
higher category (a float or integer constant beside a float tensor, an integer one beside an integer
tensor). There a 0-d tensor and a Python number promote alike (the dimensioned tensor's dtype wins) and the
op computes in that dtype either way; a 0-d float64 constant beside an integer tensor would make the
result float64 where a Python float makes it the default dtype, so it is left, as are bool and complex
constants, constants used as first operand and 0-d first operands.

The edge verifier refuses a number where the schema says tensor, so the pass is valid only right before
Inductor, where ``AotiBackend.preprocess`` hands it the ``ExportedProgram``; handed an edge program's module
to verify afterwards (``EdgeProgramManager.transform``) it raises :class:`~shimkit.passes.PassError`.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import fx
from torch.export.graph_signature import InputKind

from shimkit.passes.base import PassContext, PassError, ShimkitPass, verified_as_edge
from shimkit.passes.ops import aten_op

BINARY_OPS = frozenset({torch.ops.aten.div.Tensor, torch.ops.aten.mul.Tensor, torch.ops.aten.add.Tensor,
                        torch.ops.aten.sub.Tensor})


def _constant(node: Any, context: PassContext) -> torch.Tensor | None:
    """The value of a constant operand: a lifted tensor constant or unwritten buffer of the program (a
    placeholder), or a ``get_attr`` of the module."""
    if not isinstance(node, fx.Node):
        return None
    value: Any = None
    program = context.exported_program
    if node.op == "placeholder" and program is not None:
        # ExecuTorch's edge program keeps lifted constants as buffers; one the program never writes is constant.
        mutated = set(program.graph_signature.buffers_to_mutate.values())
        spec = next((s for s in program.graph_signature.input_specs
                     if s.kind in (InputKind.CONSTANT_TENSOR, InputKind.BUFFER) and s.target not in mutated
                     and getattr(s.arg, "name", None) == node.name), None)
        if spec is not None:
            value = program.constants.get(spec.target, program.state_dict.get(spec.target))
    elif node.op == "get_attr" and context.module is not None:
        value = context.module
        for part in str(node.target).split("."):
            value = getattr(value, part, None)
    return value if isinstance(value, torch.Tensor) else None


def _promotes_alike(tensor: torch.dtype, constant: torch.dtype) -> bool:
    integral = (torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64)
    if tensor.is_floating_point:
        return constant.is_floating_point or constant in integral
    return tensor in integral and constant in integral


class InlineScalarConstants(ShimkitPass):
    """Replace a 0-d constant second operand of ``div``/``mul``/``add``/``sub`` by its Python value."""

    name = "inline_scalar_constants"
    requires_exported_program = True
    only_before_inductor = True

    def transform(self, graph: fx.Graph, context: PassContext) -> bool:
        if verified_as_edge(graph, context):
            raise PassError(self.pass_name, None, "it writes Python numbers as the tensor operand of "
                            "div/mul/add/sub (aten.div.Tensor(x, 5.66)), which the edge verifier refuses: it is valid "
                            "only right before Inductor, called on the ExportedProgram as AotiBackend.preprocess "
                            "calls it, not on an edge program that EdgeProgramManager.transform verifies")
        modified = False
        for node in graph.nodes:
            if node.op != "call_function" or aten_op(node.target) not in BINARY_OPS or len(node.args) < 2:
                continue
            first, second = node.args[0], node.args[1]
            first_value = first.meta.get("val") if isinstance(first, fx.Node) else None
            constant = _constant(second, context)
            if (constant is None or constant.dim() != 0 or not isinstance(first_value, torch.Tensor)
                    or first_value.dim() == 0 or not _promotes_alike(first_value.dtype, constant.dtype)):
                continue
            node.args = (first, constant.item(), *node.args[2:])
            modified = True
        return modified

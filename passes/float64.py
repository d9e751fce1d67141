"""float64 computed as float32: an explicit, opt-in precision policy for devices without double.

Metal has no 64-bit float, so a program that computes in float64 fails to lower (Inductor's Metal code
generator: ``KeyError: torch.float64``), and by default it keeps failing: that is the faithful answer. A
user who accepts float32 precision opts in by running this pass on the exported program before ``to_edge``
(``shimkit audit --float64 float32`` does), and it rewrites the program:

- every ``torch.float64`` argument of a call (``x.double()``, ``softmax(x, 1, dtype=torch.float64)``,
  ``torch.zeros(..., dtype=torch.float64)``) becomes ``torch.float32``;
- float64 inputs, parameters, buffers and constants become float32 (the program then takes float32
  inputs where it took float64 ones);
- the graph's fake values are propagated again, so every later pass sees the new dtypes.

Nothing changes silently: each node whose value was float64 is recorded as a :class:`PrecisionChange`
(op, node, the user's source line), kept in ``meta["shimkit_precision"]`` and in :attr:`changes`, and the
audit lists them. A program without float64 is left as it is.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import fx
from torch.fx.passes.fake_tensor_prop import FakeTensorProp
from torch.utils import _pytree as pytree

from shimkit.passes.base import PassContext, PassError, ShimkitPass, describe_node
from shimkit.passes.meta import fake_mode_of

PRECISION_META = "shimkit_precision"


@dataclass(frozen=True)
class PrecisionChange:
    """A node whose float64 value is computed as float32."""

    op: str
    node: str
    where: str


POLICIES = ("refuse", "float32")
DEFAULT_POLICY = "refuse"


def check_policy(policy: str) -> str:
    """``policy`` if it is one of :data:`POLICIES`, else a ``ValueError`` naming them."""
    if policy not in POLICIES:
        raise ValueError(f"the float64 policy must be one of {', '.join(POLICIES)}; got {policy!r}")
    return policy


def _has_float64(value: Any) -> bool:
    return any(isinstance(leaf, torch.Tensor) and leaf.dtype == torch.float64 for leaf in pytree.tree_leaves(value))


def _as_float32(value: Any) -> Any:
    return torch.float32 if value is torch.float64 else value


def lower_float64_as_float32(exported: torch.export.ExportedProgram,
                             ) -> tuple[torch.export.ExportedProgram, list[PrecisionChange]]:
    """``exported`` with its float64 computation lowered as float32, and the nodes that changed. A program with
    float64 is first decomposed to core ATen (as ``to_edge`` would), so that composite ops that compute in
    float64 inside (``float_power``) are rewritten too; one without is returned as it is."""
    if not any(_has_float64(node.meta.get("val")) for node in exported.graph.nodes):
        return exported, []
    exported = exported.run_decompositions()
    policy = Float64AsFloat32()
    policy(exported)
    return exported, policy.changes


class Float64AsFloat32(ShimkitPass):
    """Rewrites an exported program's float64 computation as float32 and records each node it changed.

    >>> program = torch.export.export(Model(), (x,))               # doctest: +SKIP
    >>> policy = Float64AsFloat32()
    >>> policy(program).modified, [change.node for change in policy.changes]  # doctest: +SKIP
    (True, ['_to_copy', 'mul'])
    """

    name = "float64_as_float32"
    requires_exported_program = True

    def __init__(self) -> None:
        self.changes: list[PrecisionChange] = []

    def transform(self, graph: fx.Graph, context: PassContext) -> bool:
        program = context.exported_program
        if program is None or not isinstance(context.module, fx.GraphModule):
            raise PassError(self.pass_name, None, "needs the exported program (its inputs and weights change "
                                                  "dtype too): call it on an ExportedProgram")
        changed = [node for node in graph.nodes if _has_float64(node.meta.get("val"))]
        changes = [PrecisionChange(str(node.target) if node.op == "call_function" else node.op, node.name,
                                   describe_node(node)) for node in changed]
        rewritten = False
        for node in graph.nodes:
            if node.op == "call_function":
                args, kwargs = pytree.tree_map(_as_float32, (node.args, node.kwargs))
                if (args, kwargs) != (node.args, node.kwargs):
                    node.args, node.kwargs = args, kwargs
                    rewritten = True
        if not changed and not rewritten:
            return False
        fake_mode = fake_mode_of(graph)
        if fake_mode is None:
            raise PassError(self.pass_name, None, "the program's nodes carry no fake values to propagate")
        for weights in (program.state_dict, program.constants):
            for key, value in list(weights.items()):
                if isinstance(value, torch.Tensor) and value.dtype == torch.float64:
                    converted = value.detach().to(torch.float32)
                    weights[key] = (torch.nn.Parameter(converted, requires_grad=value.requires_grad)
                                    if isinstance(value, torch.nn.Parameter) else converted)
        # The fake values again, from float32 placeholders: every later pass sees the new dtypes.
        placeholders = list(graph.find_nodes(op="placeholder"))
        with fake_mode:
            inputs = [pytree.tree_map(lambda v: v.to(torch.float32) if isinstance(v, torch.Tensor)
                                      and v.dtype == torch.float64 else v, node.meta.get("val"))
                      for node in placeholders]
        for node, value in zip(placeholders, inputs):
            node.meta["val"] = value
        FakeTensorProp(context.module, mode=fake_mode).propagate_dont_convert_inputs(*inputs)
        self.changes = changes
        for node in changed:
            node.meta[PRECISION_META] = "float64 computed as float32"
        return True

"""Operands a runtime kernel reads as another operand's element type, cast to that type ahead of the call.

Metal kernels bind every floating buffer of a call as one element type ``T``, the type of the call's main
operand, and their hosts check that operand alone: ExecuTorch's SDPA reads the mask as the query's type
(``op_sdpa.mm``), ``gather_qmv`` the scales and biases as the activations' type (``op_gather_qmv.mm``). A
program handing them another floating type is read as the wrong bits on a Mac, silently. Casting first is what
the kernel computes with a right operand; eager's ATen rounds the same way where it adds in place.
"""

from __future__ import annotations

from typing import Any, Sequence

import torch
from torch import fx

from shimkit.passes.base import PassContext, ShimkitPass


def operand(node: fx.Node, index: int, name: str) -> Any:
    """The argument at ``index`` or keyword ``name`` (``None`` when absent)."""
    return node.args[index] if len(node.args) > index else node.kwargs.get(name)


def set_operand(node: fx.Node, index: int, name: str, value: fx.Node) -> None:
    """Makes ``value`` the argument at ``index``, or the keyword ``name`` where it was passed by keyword."""
    if len(node.args) > index:
        node.update_arg(index, value)
    else:
        node.update_kwarg(name, value)


def cast_operands_to(graph: fx.Graph, node: fx.Node, operands: Sequence[tuple[int, str]],
                     like: tuple[int, str]) -> bool:
    """Cast each floating operand of ``operands`` (position, name) whose dtype differs from the operand ``like``
    to its dtype, by a ``prims.convert_element_type`` node ahead of ``node``; whether any was cast. Operands
    without a fake value (``meta["val"]``) are left as they are."""
    reference = operand(node, *like)
    dtype = getattr(reference.meta.get("val"), "dtype", None) if isinstance(reference, fx.Node) else None
    if dtype is None or not dtype.is_floating_point:
        return False
    changed = False
    for index, name in operands:
        value = operand(node, index, name)
        fake = value.meta.get("val") if isinstance(value, fx.Node) else None
        if not isinstance(fake, torch.Tensor) or not fake.is_floating_point() or fake.dtype == dtype:
            continue
        with graph.inserting_before(node):
            cast = graph.call_function(torch.ops.prims.convert_element_type.default, (value, dtype))
        cast.meta = {**value.meta, "val": fake.to(dtype)}
        set_operand(node, index, name, cast)
        changed = True
    return changed


class CastOperandsTo(ShimkitPass):
    """Every call of ``ops``: ``operands`` cast to the dtype of the operand ``like`` (see the module)."""

    def __init__(self, name: str, ops: Sequence[torch._ops.OpOverload], operands: Sequence[tuple[int, str]],
                 like: tuple[int, str]) -> None:
        super().__init__()
        self._name, self.ops, self.operands, self.like = name, tuple(ops), tuple(operands), like

    @property
    def pass_name(self) -> str:
        return self._name

    def transform(self, graph: fx.Graph, context: PassContext) -> bool:
        calls = [n for n in graph.nodes if n.op == "call_function" and n.target in self.ops]
        return sum(cast_operands_to(graph, node, self.operands, self.like) for node in calls) > 0

"""Operands a runtime shim reads as dense memory of their sizes, handed to it with contiguous strides.

ExecuTorch's stock Metal runtime reads some operands through ``sizes()`` alone: ``op_convolution.mm`` takes its
input and weight as NCHW and OIHW buffers (a channels-last input is read as NCHW: pytorch/executorch#22951),
``op_mm.mm`` takes ``self`` as a dense ``[M, K]`` buffer. A program handing such a shim a transposed, sliced or
channels-last view computes wrong on a Mac, silently. A plugin's ``Shim.dense_operands`` names those operands;
``shimkit.backend.inductor_options`` derives this pass from them. It hands each such operand through Inductor's
own ``prims.inductor_force_stride_order`` with contiguous strides (the prim its layout constraints use). The traced
strides cannot decide it: Inductor picks the layout of a buffer it is still free to lay out (a copy, a pointwise
result) to suit the consumer, so a node traced contiguous may reach the shim transposed. The prim costs nothing
where the operand is dense already, fixes a layout Inductor is still free to choose without a copy, and is one copy
kernel (fused with the producer where it can be) only where the memory really is laid out otherwise.
"""

from __future__ import annotations

from typing import Mapping, Sequence

import torch
from torch import fx

from shimkit.passes.base import PROVENANCE_META, PassContext, ShimkitPass
from shimkit.passes.operand_dtypes import operand, set_operand


def _argument_slots(overload: torch._ops.OpOverload, names: Sequence[str]) -> tuple[tuple[int, str], ...]:
    positions = {argument.name: index for index, argument in enumerate(overload._schema.arguments)}
    return tuple((positions[name], name) for name in names)


class ContiguousOperands(ShimkitPass):
    """Every call of an op of ``operands`` (op → names of its arguments the shim reads densely): each named tensor
    operand handed over with contiguous strides (see the module). A ``post_grad`` pass: it needs Inductor's
    lowering of the prim it inserts."""

    name = "dense_operands"

    def __init__(self, operands: Mapping[torch._ops.OpOverload, Sequence[str]]) -> None:
        super().__init__()
        self.operands = {op: _argument_slots(op, names) for op, names in operands.items()}

    def transform(self, graph: fx.Graph, context: PassContext) -> bool:
        from torch._higher_order_ops.auto_functionalize import auto_functionalized, auto_functionalized_v2
        from torch._inductor import inductor_prims  # registers the prim; this pass runs inside Inductor anyway

        force_stride_order = inductor_prims.force_stride_order
        changed = False
        for node in [n for n in graph.nodes if n.op == "call_function"]:
            # An op that writes an argument in place (metal::gated_delta_rule's state) reaches post_grad wrapped in
            # auto_functionalized, the op its first argument and the others passed by name.
            functionalized = node.target in (auto_functionalized, auto_functionalized_v2) and bool(node.args)
            op = node.args[0] if functionalized else node.target
            if op not in self.operands:
                continue
            for index, name in self.operands[op]:
                if functionalized:
                    index = len(node.args)  # by name
                value = operand(node, index, name)
                fake = value.meta.get("val") if isinstance(value, fx.Node) else None
                if not isinstance(fake, torch.Tensor) or value.target is force_stride_order:
                    continue
                dense = fake.contiguous()
                with graph.inserting_before(node):
                    copy = graph.call_function(force_stride_order, (value, list(dense.stride())))
                copy.meta = {key: node.meta[key] for key in PROVENANCE_META if key in node.meta}
                copy.meta["val"] = dense
                set_operand(node, index, name, copy)
                _record_eager_stride(node, index, name, dense)
                changed = True
        return changed


def _record_eager_stride(node: fx.Node, index: int, name: str, dense: torch.Tensor) -> None:
    """A custom op is lowered with each operand in the strides eager gave it (``meta["eager_input_vals"]``, Inductor's
    ``constrain_to_fake_tensors``), which would lay the dense copy out as the strided original again: the operand's
    recorded eager value becomes the dense one."""
    recorded = node.meta.get("eager_input_vals")
    if recorded is None:
        return
    fake_args, fake_kwargs = recorded
    if len(fake_args) > index:
        fake_args = (*fake_args[:index], dense, *fake_args[index + 1:])
    elif name in fake_kwargs:
        fake_kwargs = {**fake_kwargs, name: dense}
    node.meta["eager_input_vals"] = (tuple(fake_args), fake_kwargs)

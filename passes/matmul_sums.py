"""``mm(a, b) + mm(c, d)`` as one product, ``mm(cat([a, c], 1), cat([b, d], 0))`` (and the same for two
bias-free ``linear``\\ s, which ExecuTorch's Metal partitioner keeps and Inductor decomposes into ``mm``).

ExecuTorch's Metal backend compiles with ``max_autotune``, which turns on Inductor's ``mm_plus_mm``
pattern: a sum of two products with operands of matching shapes (a bias-free recurrent cell,
``W x + U h``) becomes one call of the extern kernel ``aoti_torch__mm_plus_mm_out``, which the Metal runtime
does not have. Summing over the joined inner dimension computes the same sum as one product, through the
``mm`` shim every Metal program already uses, with one rounding of the result where two products and an
add round three times. Only the sums Inductor would fuse are rewritten (each product used once by the add,
``a``/``c`` and ``b``/``d`` of one shape and dtype); core ATen ops only, so an edge program stays valid.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import fx
from torch.fx.experimental.symbolic_shapes import statically_known_true, sym_eq

from shimkit.passes.base import PROVENANCE_META, PassContext, ShimkitPass
from shimkit.passes.meta import ValueComputer, fake_mode_of, set_value
from shimkit.passes.ops import aten_op, like

aten = torch.ops.aten
# The op of the extern kernel Inductor's fusion calls (aoti_torch__mm_plus_mm_out).
MM_PLUS_MM = "inductor::_mm_plus_mm.default"


class JoinMatmulSums(ShimkitPass):
    """Each ``add(mm(a, b), mm(c, d))`` (or of two bias-free ``linear``) that Inductor's ``mm_plus_mm``
    pattern would fuse, as one product.

    >>> JoinMatmulSums(keep_fusion=True).keep_fusion   # a device whose plugins ship the fused kernel
    True
    """

    name = "join_matmul_sums"

    def __init__(self, keep_fusion: bool = False) -> None:
        self.keep_fusion = keep_fusion

    @classmethod
    def from_capabilities(cls, capabilities) -> "JoinMatmulSums":
        """Leaves the sums to Inductor's fusion where a plugin ships its kernel (a shim for ``MM_PLUS_MM``)."""
        return cls(keep_fusion=capabilities.has_shim(MM_PLUS_MM))

    def transform(self, graph: fx.Graph, context: PassContext) -> bool:
        if self.keep_fusion:
            return False
        sums = [(node, op) for node in graph.nodes if (op := _fusable_sum(node)) is not None]
        if not sums:
            return False
        computer = ValueComputer(fake_mode_of(graph))
        for node, op in sums:
            first, second = node.args
            (a, b), (c, d) = first.args[:2], second.args[:2]
            # linear's weight is [out, in]: its inner dim is the last, as the input's.
            inner = 0 if op is aten.mm.default else 1
            with graph.inserting_before(node):
                rows = self._create(graph, node, like(aten.cat.default, node.target), ([a, c], 1), computer)
                columns = self._create(graph, node, like(aten.cat.default, node.target), ([b, d], inner), computer)
            # The add becomes the product: it keeps its name, users and provenance.
            node.target = like(op, node.target)
            node.args, node.kwargs = (rows, columns), {}
            set_value(node, computer)
            graph.erase_node(first)
            graph.erase_node(second)
        return True

    @staticmethod
    def _create(graph: fx.Graph, origin: fx.Node, target, args, computer: ValueComputer) -> fx.Node:
        new = graph.call_function(target, args)
        new.meta.update({key: origin.meta[key] for key in PROVENANCE_META if key in origin.meta})
        set_value(new, computer)
        return new


def _product_used_once_by(node: Any, user: fx.Node) -> torch._ops.OpOverload | None:
    """``mm`` or bias-free ``linear`` (which Inductor decomposes into an ``mm``), if ``node`` is one that
    only ``user`` uses."""
    if not (isinstance(node, fx.Node) and node.op == "call_function" and list(node.users) == [user]):
        return None
    op = aten_op(node.target)
    if op is aten.mm.default and len(node.args) == 2:
        return op
    bias = node.args[2] if len(node.args) > 2 else node.kwargs.get("bias")
    return op if op is aten.linear.default and bias is None and len(node.args) >= 2 else None


def _fusable_sum(node: fx.Node) -> torch._ops.OpOverload | None:
    """The product op if ``node`` is ``add(p(a, b), p(c, d))`` (alpha 1, ``p`` both ``mm`` or both
    bias-free ``linear``) with ``a``, ``c`` and ``b``, ``d`` alike: what Inductor's ``mm_plus_mm``
    lowering would fuse rather than compute as two products and an add."""
    if node.op != "call_function" or aten_op(node.target) is not aten.add.Tensor or len(node.args) != 2:
        return None
    if node.kwargs.get("alpha", 1) != 1:
        return None
    first, second = node.args
    op = _product_used_once_by(first, node)
    if first is second or op is None or _product_used_once_by(second, node) is not op:
        return None
    a, b, c, d = (operand.meta.get("val") if isinstance(operand, fx.Node) else None
                  for operand in (*first.args[:2], *second.args[:2]))
    if not (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor) and isinstance(c, torch.Tensor)
            and isinstance(d, torch.Tensor)):
        return None
    if a.dim() != 2 or not (a.dtype == c.dtype == b.dtype == d.dtype):
        return None
    alike = statically_known_true(sym_eq(a.shape, c.shape)) and statically_known_true(sym_eq(b.shape, d.shape))
    return op if alike else None

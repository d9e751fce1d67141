"""Decompose ``linear`` with bias where the device has no ``addmm`` shim.

``aten::linear`` with a 2-D input and a bias is ``addmm`` in ATen, and Inductor re-fuses ``mm`` plus a
bias add into ``addmm`` after any graph-level rewrite (docs/metal-aoti.md, "The mm + bias → addmm fusion"), so on a device without an addmm
shim a backend would record ``aoti_torch_mps_addmm_out``. Upstream's ``DecomposeLinearPass`` dodges
the fusion by unsqueezing 2-D inputs to 3-D, which Inductor folds away again at batch 1; the
Parakeet export wrote a custom decomposition to avoid both addmm and a 0-stride view of the bias.

This pass rewrites ``linear(x, w, b)`` as ``add(mm(x, permute(w)), b)`` (other ranks: ``x`` viewed as rows
and the product viewed back, dynamic sizes read with ``sym_size``), core ATen ops only, so an edge
program stays valid: the bias is broadcast by the pointwise add, never viewed with a 0 stride. The post-grad
:class:`~shimkit.passes.inductor.PostGradPipeline` (``unfuse_addmm``) undoes Inductor's re-fusion.
Where the device has an addmm shim or compiles ``addmm`` itself (``keep_addmm``) linears are left alone.
"""

from __future__ import annotations

import torch
from torch import fx

from shimkit.passes.base import PROVENANCE_META, PassContext, PassError, ShimkitPass
from shimkit.passes.meta import ValueComputer, fake_mode_of, set_value
from shimkit.passes.ops import aten_op, like

aten = torch.ops.aten


class DecomposeLinear(ShimkitPass):
    """``linear(x, w, b)`` → ``add(mm(x, permute(w)), b)`` unless the device keeps ``addmm``."""

    name = "decompose_linear"

    def __init__(self, keep_addmm: bool = False) -> None:
        self.keep_addmm = keep_addmm

    @classmethod
    def from_capabilities(cls, capabilities) -> "DecomposeLinear":
        return cls(keep_addmm=capabilities.keeps("aten::addmm"))

    def transform(self, graph: fx.Graph, context: PassContext) -> bool:
        if self.keep_addmm:
            return False
        linears = [n for n in graph.nodes if n.op == "call_function" and aten_op(n.target) is aten.linear.default
                   and _bias(n) is not None]
        if not linears:
            return False
        computer = ValueComputer(fake_mode_of(graph))
        for node in linears:
            self._decompose(graph, node, computer)
        return True

    def _decompose(self, graph: fx.Graph, node: fx.Node, computer: ValueComputer) -> None:
        x, weight = node.args[0], node.args[1]
        bias = _bias(node)
        x_value = x.meta.get("val") if isinstance(x, fx.Node) else None
        if x_value is None:
            raise PassError(self.pass_name, node, f"input {x} has no meta['val']: the rank decides between "
                            f"mm and matmul")
        # Core ATen only (permute, view, mm), so that the pass keeps an edge program valid: ExecuTorch's
        # backends apply passes with edge_program.transform, whose verifier refuses t and matmul.
        with graph.inserting_before(node):
            transposed = self._create(graph, node, like(aten.permute.default, node.target), (weight, [1, 0]),
                                      f"{node.name}_weight_t", computer, is_view=True)
            if x_value.dim() == 2:
                product = self._create(graph, node, like(aten.mm.default, node.target), (x, transposed),
                                       f"{node.name}_mm", computer)
            else:
                rows = self._create(graph, node, like(aten.view.default, node.target),
                                    (x, [-1, self._size(graph, x, x_value, -1)]), f"{node.name}_rows", computer,
                                    is_view=True)
                flat = self._create(graph, node, like(aten.mm.default, node.target), (rows, transposed),
                                    f"{node.name}_mm", computer)
                batch = [self._size(graph, x, x_value, d) for d in range(x_value.dim() - 1)]
                product = self._create(graph, node, like(aten.view.default, node.target),
                                       (flat, [*batch, self._size(graph, weight, weight.meta["val"], 0)]),
                                       f"{node.name}_product", computer, is_view=True)
        # The linear node itself becomes the bias add: it keeps its name, users and provenance.
        node.target = like(aten.add.Tensor, node.target)
        node.args, node.kwargs = (product, bias), {}
        set_value(node, computer)

    @staticmethod
    def _size(graph: fx.Graph, tensor: fx.Node, value: torch.Tensor, dim: int):
        """``value.shape[dim]`` as a view argument: the int, or a ``sym_size`` node reading a dynamic one."""
        size = value.shape[dim]
        if not isinstance(size, torch.SymInt):
            return size
        node = graph.call_function(aten.sym_size.int, (tensor, dim % value.dim()))
        node.meta["val"] = size
        return node

    def _create(self, graph: fx.Graph, origin: fx.Node, target, args, name: str, computer: ValueComputer,
                is_view: bool = False) -> fx.Node:
        new = graph.create_node("call_function", target, args, {}, name=name)
        for key in PROVENANCE_META:
            if key in origin.meta:
                new.meta[key] = origin.meta[key]
        set_value(new, computer, is_view)
        return new


def _bias(node: fx.Node):
    if len(node.args) > 2:
        return node.args[2]
    return node.kwargs.get("bias")

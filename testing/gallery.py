"""Deliberately broken passes, each with the property and programs that catch it.

The gallery proves the toolkit finds real bugs: every entry is a plausible mistake in a graph pass
(most of them made upstream or in review at some point), and shimkit's test suite checks that the
named property fails on programs from the entry's strategy within the ``ci`` hypothesis profile, while
the correct pass, where shimkit has one, passes the same property on the same programs.
"""

from __future__ import annotations

import operator
from dataclasses import dataclass, replace
from typing import Any, Callable

import torch
from torch import fx

from shimkit.passes.base import PassContext, ShimkitPass
from shimkit.passes.ops import aten_op, like
from shimkit.testing import programs as g
from shimkit.testing import properties as p
from shimkit.testing.opspecs import op_spec

aten = torch.ops.aten

_VIEW_OF_COPY = {
    aten.slice_copy.Tensor: aten.slice.Tensor, aten.select_copy.int: aten.select.int,
    aten.split_copy.Tensor: aten.split.Tensor,
    aten.split_with_sizes_copy.default: aten.split_with_sizes.default,
    aten.unbind_copy.int: aten.unbind.int, aten.transpose_copy.int: aten.transpose.int,
    aten.permute_copy.default: aten.permute.default, aten.unsqueeze_copy.default: aten.unsqueeze.default,
    aten.squeeze_copy.dim: aten.squeeze.dim, aten.narrow_copy.default: aten.narrow.default,
}


class ViewCopyToViewIgnoringWrites(ShimkitPass):
    """Swaps every view-copy for its view, as upstream's pass does for direct users only: a later
    in-place write to the base (or to the view) now shows through the other."""

    name = "broken-view-copy-to-view"

    def transform(self, graph: fx.Graph, context: PassContext) -> bool:
        changed = False
        for node in graph.nodes:
            view = _VIEW_OF_COPY.get(aten_op(node.target))
            if node.op == "call_function" and view is not None:
                node.target = like(view, node.target)
                changed = True
        return changed


class SplitToViewWithWrongDim(ShimkitPass):
    """Turns ``split_copy``/``split_with_sizes_copy`` into views but rebuilds the call from
    ``(self, split)`` only, so a split along any dim but 0 splits dim 0."""

    name = "broken-split-to-view"
    _SPLITS = {aten.split_copy.Tensor: aten.split.Tensor,
               aten.split_with_sizes_copy.default: aten.split_with_sizes.default}

    def transform(self, graph: fx.Graph, context: PassContext) -> bool:
        changed = False
        for node in graph.nodes:
            view = self._SPLITS.get(aten_op(node.target))
            if node.op == "call_function" and view is not None:
                node.target = like(view, node.target)
                node.args, node.kwargs = node.args[:2], {}
                changed = True
        return changed


class StaleMetaViewCopyToView(ShimkitPass):
    """Swaps view-copies for views in graphs without writes (so meaning is kept) but leaves the copy's
    contiguous ``meta["val"]`` on the now-strided view: later passes and Inductor read wrong strides."""

    name = "broken-stale-meta-view"

    def transform(self, graph: fx.Graph, context: PassContext) -> bool:
        if any(_writes(node) for node in graph.nodes):
            return False
        changed = False
        for node in graph.nodes:
            view = _VIEW_OF_COPY.get(aten_op(node.target))
            if node.op == "call_function" and view is not None:
                node.target = like(view, node.target)
                changed = True
        return changed


def _writes(node: fx.Node) -> bool:
    op = aten_op(node.target)
    return op is not None and op._schema.is_mutable


def _insert_call(graph: fx.Graph, before: fx.Node, op, args: tuple, kwargs: dict | None = None) -> fx.Node:
    """A new call before ``before``, in its dialect, with ``meta["val"]`` computed on meta tensors (so
    each broken pass below has only the one bug it is named for). A call the broken pass got wrong
    enough to be impossible keeps no value: it fails when the graph runs."""
    kwargs = kwargs or {}
    with graph.inserting_before(before):
        node = graph.call_function(like(op, before.target), args, kwargs)

    def meta(n: fx.Node) -> torch.Tensor:
        value = n.meta["val"]
        return torch.empty_strided(value.shape, value.stride(), dtype=value.dtype, device="meta")

    try:
        node.meta["val"] = op(*fx.node.map_arg(args, meta), **fx.node.map_arg(kwargs, meta))
    except RuntimeError:
        pass
    return node


class AddmmDecompositionDroppingBeta(ShimkitPass):
    """``addmm(self, m1, m2, beta=b, alpha=a)`` as ``mm(m1, m2) * a + self``: ``beta`` is lost."""

    name = "broken-addmm-decomposition"

    def transform(self, graph: fx.Graph, context: PassContext) -> bool:
        changed = False
        for node in list(graph.nodes):
            if aten_op(node.target) is not aten.addmm.default:
                continue
            bias, mat1, mat2 = node.args[:3]
            product = _insert_call(graph, node, aten.mm.default, (mat1, mat2))
            alpha = node.kwargs.get("alpha", 1)
            if alpha != 1:
                product = _insert_call(graph, node, aten.mul.Scalar, (product, alpha))
            result = _insert_call(graph, node, aten.add.Tensor, (product, bias))
            node.replace_all_uses_with(result)
            graph.erase_node(node)
            changed = True
        return changed


class AddmmDecompositionSkippingVectorBias(ShimkitPass):
    """A correct ``addmm`` decomposition that only matches a 2-D bias, so ``addmm`` with a 1-D bias
    (the common ``nn.Linear`` case) reaches Inductor and its ``aoti_torch_mps_addmm_out``."""

    name = "broken-addmm-2d-only"

    def transform(self, graph: fx.Graph, context: PassContext) -> bool:
        changed = False
        for node in list(graph.nodes):
            if aten_op(node.target) is not aten.addmm.default or node.args[0].meta["val"].dim() != 2:
                continue
            bias, mat1, mat2 = node.args[:3]
            beta, alpha = node.kwargs.get("beta", 1), node.kwargs.get("alpha", 1)
            product = _insert_call(graph, node, aten.mm.default, (mat1, mat2))
            product = _insert_call(graph, node, aten.mul.Scalar, (product, alpha))
            scaled = _insert_call(graph, node, aten.mul.Scalar, (bias, beta))
            node.replace_all_uses_with(_insert_call(graph, node, aten.add.Tensor, (product, scaled)))
            graph.erase_node(node)
            changed = True
        return changed


class LinearDecompositionTransposingInput(ShimkitPass):
    """``linear(x, w, b)`` on 2-D ``x`` as ``mm(w, t(x)) + b``: the input is transposed instead of
    the weight, which gives the transposed result; when batch and output sizes agree the shape is
    even right."""

    name = "broken-linear-decomposition"

    def transform(self, graph: fx.Graph, context: PassContext) -> bool:
        changed = False
        for node in list(graph.nodes):
            if aten_op(node.target) is not aten.linear.default or node.args[0].meta["val"].dim() != 2:
                continue
            x, weight = node.args[:2]
            bias = node.args[2] if len(node.args) > 2 else None
            result = _insert_call(graph, node, aten.mm.default,
                                  (weight, _insert_call(graph, node, aten.t.default, (x,))))
            if bias is not None:
                result = _insert_call(graph, node, aten.add.Tensor, (result, bias))
            node.replace_all_uses_with(result)
            graph.erase_node(node)
            changed = True
        return changed


class DeadCodeEliminationDroppingWrites(ShimkitPass):
    """Erases every call whose result nobody uses, which includes ``add_`` and ``copy_``: their
    effect is the write, not the result."""

    name = "broken-dead-code-elimination"

    def transform(self, graph: fx.Graph, context: PassContext) -> bool:
        changed = False
        for node in reversed(list(graph.nodes)):
            if node.op == "call_function" and not node.users:
                graph.erase_node(node)
                changed = True
        return changed


class CommonSubexpressionsAcrossWrites(ShimkitPass):
    """Merges calls with the same target and arguments, even when an in-place write to an argument
    happened between them, so the second call reads the value from before the write."""

    name = "broken-cse"

    def transform(self, graph: fx.Graph, context: PassContext) -> bool:
        seen: dict[Any, fx.Node] = {}
        changed = False
        for node in list(graph.nodes):
            if node.op != "call_function" or _writes(node) or node.target is operator.getitem:
                continue
            key = (node.target, repr(node.args), repr(sorted(node.kwargs.items())))
            if key in seen:
                node.replace_all_uses_with(seen[key])
                graph.erase_node(node)
                changed = True
            else:
                seen[key] = node
        return changed


class DimNormalizationAlwaysModified(ShimkitPass):
    """Rewrites negative ``dim`` arguments of view-copies as positive ones (correctly) but reports a
    change whenever it sees a dim, so a pipeline iterating to a fixed point never stops."""

    name = "broken-dim-normalization"

    def transform(self, graph: fx.Graph, context: PassContext) -> bool:
        seen_dim = False
        for node in graph.nodes:
            op = aten_op(node.target)
            if op is None or len(node.args) < 2 or op._schema.arguments[1].name != "dim":
                continue
            seen_dim = True
            dim, rank = node.args[1], node.args[0].meta["val"].dim()
            if isinstance(dim, int) and dim < 0:
                node.args = (node.args[0], dim + rank, *node.args[2:])
        return seen_dim


def naive_logaddexp(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """``log(exp(a) + exp(b))``: overflows to inf above ~88 and is NaN for two equal infinities."""
    return torch.log(torch.exp(a) + torch.exp(b))


@dataclass(frozen=True)
class GalleryBug:
    """A broken pass, the property that catches it, and the programs to look in.

    ``check(transform, program)`` is the property; ``correct`` builds shimkit's right version of the
    pass when it has one (it must satisfy the same property on the same programs).
    """

    name: str
    broken: Callable[[], Any]
    check: Callable[[Any, Any], None]
    programs: Any
    correct: Callable[[], Any] | None = None


def _view_replacement():
    from shimkit.passes.view_replacement import ReplaceViewCopyWithView

    return ReplaceViewCopyWithView()


def _addmm_policy():
    from shimkit.passes.addmm import AddmmPolicy
    from shimkit.plugins.addmm import addmm_decomposition

    return AddmmPolicy(addmm_decomposition)


def _linear_decomposition():
    from shimkit.passes.linear import DecomposeLinear

    return DecomposeLinear()


def _dead_code_elimination():
    class EliminateDeadCode(ShimkitPass):
        """torch's own DCE: it keeps nodes whose schema says they write an argument."""

        name = "eliminate-dead-code"

        def transform(self, graph: fx.Graph, context: PassContext) -> bool:
            return graph.eliminate_dead_code()

    return EliminateDeadCode()


_VIEW_COPIES = tuple(g.VIEW_COPY_OPS)
_SPLITS = ("aten::split_copy.Tensor", "aten::split_with_sizes_copy.default")

GALLERY = (
    GalleryBug("view replacement ignoring a later in-place write", ViewCopyToViewIgnoringWrites,
               p.assert_preserves_semantics,
               g.graphs(("aten::slice_copy.Tensor", "aten::select_copy.int", "aten::transpose_copy.int",
                         "aten::split_copy.Tensor") + g.INPLACE_OPS),
               _view_replacement),
    GalleryBug("split replacement with the wrong dim", SplitToViewWithWrongDim, p.assert_preserves_semantics,
               g.graphs(_SPLITS + ("aten::neg.default",)), _view_replacement),
    GalleryBug("view replacement leaving stale meta", StaleMetaViewCopyToView, p.assert_meta_consistent,
               g.graphs(_VIEW_COPIES), _view_replacement),
    GalleryBug("addmm decomposition dropping beta", AddmmDecompositionDroppingBeta,
               p.assert_preserves_semantics, g.graphs(("aten::addmm.default", "aten::neg.default")),
               _addmm_policy),
    GalleryBug("addmm decomposition skipping a 1-D bias", AddmmDecompositionSkippingVectorBias,
               lambda transform, program: p.assert_eliminates(transform, program, ["aten::addmm.default"]),
               g.graphs(("aten::addmm.default",)), _addmm_policy),
    GalleryBug("linear decomposition transposing the wrong operand", LinearDecompositionTransposingInput,
               p.assert_preserves_semantics,
               g.graphs((replace(op_spec("aten::linear.default"), ranks=(2, 2)), "aten::relu.default")),
               _linear_decomposition),
    GalleryBug("dead-code elimination dropping in-place writes", DeadCodeEliminationDroppingWrites,
               p.assert_preserves_semantics,
               g.graphs(g.INPLACE_OPS + g.POINTWISE_OPS), _dead_code_elimination),
    GalleryBug("common subexpressions merged across a write", CommonSubexpressionsAcrossWrites,
               p.assert_preserves_semantics,
               g.graphs(("aten::neg.default", "aten::mul_.Scalar"), max_inputs=1)),
    GalleryBug("dim normalisation always reporting a change", DimNormalizationAlwaysModified,
               p.assert_idempotent, g.graphs(_VIEW_COPIES), _view_replacement),
)
"""The broken passes of the gallery; ``naive_logaddexp`` is the broken plugin decomposition."""

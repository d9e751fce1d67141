"""Replace view-copy ops (``permute_copy``, ``split_copy`` ...) with the views they copy.

Inductor turns a view into index arithmetic, but a ``*_copy`` op without a C shim becomes a
proxy-executor fallback (``aten::split_copy.Tensor``), which ExecuTorch's AOTI runtime cannot run.
Upstream's ``ReplaceViewCopyWithViewPass`` converts slice, select and split and checks only direct
users; this pass converts the whole family of docs/metal-aoti.md, "The view_copy family" and skips a node where the view would change
meaning or be impossible:

* its result, its base or any other alias of the base is written after it (an in-place op, a
  ``getitem`` of a split/unbind that is then written, ``auto_functionalized``, a mutated graph output
  or a mutated input);
* it would let a graph output alias an input or another output;
* the view cannot be formed from the (possibly already converted, strided) input: ``t`` then ``view``
  on a non-contiguous tensor, ``view.dtype`` without last-dim stride 1, ``view_as_complex``;
* it is ``as_strided``, which indexes storage, and its input is not a fresh contiguous tensor;
* its result would not be dense and feeds an op that needs dense input (a C shim such as Metal's
  ``bmm``, which reads buffers as dense from offset 0: docs/metal-aoti.md, "Anatomy of a Metal op").

``view_copy`` becomes ``view`` where the input's layout is settled (a program input, a constant, a pointwise
result: as upstream's pass writes it, which the edge verifier accepts and memory planning lets share its
base's storage), else ``reshape``: the two agree wherever the layout this pass judges by (the exported
example's) allows a view, but the compiler may give an extern kernel's output another layout. Under
``CudaBackend`` (which compiles SDPA with the math backend) attention returns a contiguous
``(B, H, L, D)`` tensor where export's fused kernel returned ``(B, L, H, D)`` storage, so the usual
``transpose(1, 2)`` then ``view`` cannot be traced ("Cannot view a tensor with shape ..."); a
``reshape`` is decided again on the layout Inductor actually has: a view where it can be, a copy where not.

That is the form right before Inductor: on an ATen graph, and on an edge program handed over as the
``ExportedProgram`` (``AotiBackend.preprocess``). An edge program handed over as its ``GraphModule``, as
``EdgeProgramManager.transform`` does before running the edge verifier again
(:func:`~shimkit.passes.base.verified_as_edge`), gets core ATen views only: ``narrow`` is written as
``slice``, ``t`` and ``transpose`` as ``permute``, ``detach`` as ``alias``, ``squeeze`` as ``squeeze.dims``
and ``split`` as ``split_with_sizes`` (static sizes); a ``view_copy`` whose input's layout is not settled
stays a copy, and so does a view feeding it whose own input is not settled (Inductor lowers the kept copy
as ``view`` then ``clone``, on the layout it gives); ``unbind``, ``view.dtype``, ``unfold``, ``view_as_real``
and ``view_as_complex`` have no core view and stay copies.

``meta["val"]`` of converted nodes, their ``getitem`` users and anything downstream whose layout
changes is recomputed.
"""

from __future__ import annotations

import math
from typing import Any, Callable, Iterable

import torch
from torch import fx
from torch._prims_common import is_contiguous_or_false

from shimkit.passes.base import PassContext, ShimkitPass, verified_as_edge
from shimkit.passes.meta import (ValueComputer, argument_values, fake_mode_of, is_tensor_layout, layout,
                                 refresh_value, same_layout)
from shimkit.passes.ops import (aten_op, bound_arguments, is_edge, is_getitem, like, may_write,
                                returns_alias_of_input, written_arguments)

aten = torch.ops.aten

# (copy op, view op) pairs of docs/metal-aoti.md, "The view_copy family"; the schemas must agree argument for argument.
_FAMILY = (
    (aten.slice_copy.Tensor, aten.slice.Tensor),
    (aten.select_copy.int, aten.select.int),
    (aten.split_copy.Tensor, aten.split.Tensor),
    (aten.split_with_sizes_copy.default, aten.split_with_sizes.default),
    (aten.unbind_copy.int, aten.unbind.int),
    (aten.transpose_copy.int, aten.transpose.int),
    (aten.t_copy.default, aten.t.default),
    (aten.permute_copy.default, aten.permute.default),
    (aten.expand_copy.default, aten.expand.default),
    (aten.view_copy.default, aten.view.default),
    (aten.view_copy.dtype, aten.view.dtype),
    (aten.unsqueeze_copy.default, aten.unsqueeze.default),
    (aten.squeeze_copy.default, aten.squeeze.default),
    (aten.squeeze_copy.dim, aten.squeeze.dim),
    (aten.squeeze_copy.dims, aten.squeeze.dims),
    (aten.as_strided_copy.default, aten.as_strided.default),
    (aten.diagonal_copy.default, aten.diagonal.default),
    (aten.unfold_copy.default, aten.unfold.default),
    (aten.detach_copy.default, aten.detach.default),
    (aten.alias_copy.default, aten.alias.default),
    (aten.narrow_copy.default, aten.narrow.default),
    (aten.view_as_real_copy.default, aten.view_as_real.default),
    (aten.view_as_complex_copy.default, aten.view_as_complex.default),
)


def _signature(op: torch._ops.OpOverload) -> list[tuple[str, str, bool]]:
    return [(a.name, str(a.type), a.kwarg_only) for a in op._schema.arguments]


for _copy, _view in _FAMILY:
    if _signature(_copy) != _signature(_view):
        raise ImportError(f"shimkit.passes.view_replacement: {_copy} and {_view} no longer take the same "
                          f"arguments in torch {torch.__version__}; the pair cannot be swapped in place")

VIEW_OF_COPY: dict[torch._ops.OpOverload, torch._ops.OpOverload] = dict(_FAMILY)
"""Each view-copy op of docs/metal-aoti.md, "The view_copy family" and the view op whose meaning it has."""

# What a converted node becomes where that differs from its view (module docstring: layouts the
# compiler chooses). reshape's ``shape`` is view's ``size``, positionally.
_REPLACEMENT = {aten.view.default: aten.reshape.default}

_MULTI_OUTPUT = {aten.split.Tensor, aten.split_with_sizes.default, aten.unbind.int}
_NEVER = math.inf

# Copies that Inductor lowers as their view followed by a copy (``view(x).clone()``): kept in place, they
# still need a viewable input layout, the one the compiler gives, not only the exported example's.
_VIEWING_COPIES = {aten.view_copy.default, aten.view_copy.dtype}


class ReplaceViewCopyWithView(ShimkitPass):
    """Turn view-copy ops into views where that cannot change the program's meaning.

    ``ops`` restricts the pass to some copy ops (default: all of :data:`VIEW_OF_COPY`).
    ``needs_dense_input(op)`` says whether ``op`` must receive dense tensors; shimkit's registry
    plugin answers it with "the device has a C shim for ``op``".

    Called on an ``ExportedProgram`` (``requires_exported_program``), the graph signature tells which
    outputs are written back to buffers and inputs; on a bare graph every output is assumed to be.
    """

    name = "view_copy_to_view"
    requires_exported_program = True

    def __init__(self, ops: Iterable[Any] | None = None,
                 needs_dense_input: Callable[[torch._ops.OpOverload], bool] | None = None) -> None:
        if ops is None:
            self.view_of_copy = dict(VIEW_OF_COPY)
        else:
            self.view_of_copy = {}
            for op in ops:
                copy = aten_op(op)
                if copy not in VIEW_OF_COPY:
                    raise ValueError(f"[{self.name}] {op} is not a view-copy op this pass can convert; "
                                     f"known: {', '.join(sorted(str(o) for o in VIEW_OF_COPY))}")
                self.view_of_copy[copy] = VIEW_OF_COPY[copy]
        self.needs_dense_input = needs_dense_input

    def transform(self, graph: fx.Graph, context: PassContext) -> bool:
        candidates = [n for n in graph.nodes
                      if n.op == "call_function" and aten_op(n.target) in self.view_of_copy]
        if not candidates:
            return False
        position = {node: i for i, node in enumerate(graph.nodes)}
        last_write, roots = self._last_writes(graph, position, context)
        unsafe = {n for n in candidates if last_write.get(roots.get(n, n), -1) > position[n]}
        return self._convert(graph, set(candidates) - unsafe, verified_as_edge(graph, context))

    # -- mutation analysis -------------------------------------------------------------------------

    def _last_writes(self, graph: fx.Graph, position: dict[fx.Node, int],
                     context: PassContext) -> tuple[dict[fx.Node, float], dict[fx.Node, fx.Node]]:
        """Position of the last write into each alias class, as if every candidate became a view.

        Returns that and each aliasing node's class (its root: the node owning the storage).

        Assuming all candidates convert over-approximates aliasing, so a node judged safe stays safe
        whichever of its neighbours are converted.
        """
        roots: dict[fx.Node, fx.Node] = {}
        last_write: dict[fx.Node, float] = {}
        for node in graph.nodes:
            if node.op == "call_function":
                source = self._aliased_input(node, roots)
                if source is not None:
                    roots[node] = roots.get(source, source)
            if node.op == "call_function" and not may_write(node.target):
                continue
            for written in written_arguments(node):
                root = roots.get(written, written)
                last_write[root] = max(last_write.get(root, -1), position[node])

        output = graph.output_node()
        values = output.args[0] if isinstance(output.args[0], (tuple, list)) else (output.args[0],)
        mutated_outputs = context.mutated_output_indices()
        mutated_inputs = context.mutated_placeholders()
        output_roots: dict[fx.Node, int] = {}
        for index, value in enumerate(values):
            if not isinstance(value, fx.Node):
                continue
            root = roots.get(value, value)
            if mutated_outputs is None or index in mutated_outputs:
                last_write[root] = _NEVER
            output_roots[root] = output_roots.get(root, 0) + 1
        for root, count in output_roots.items():
            # An output must not alias an input or another output where the program returned copies.
            if root.op == "placeholder" or count > 1:
                last_write[root] = _NEVER
        # Without a signature nothing says which inputs are written back; their write-back happens
        # after the graph (in-graph writes are nodes, seen above), so only known ones are pinned.
        for node in graph.find_nodes(op="placeholder"):
            if mutated_inputs is not None and node.name in mutated_inputs:
                last_write[node] = _NEVER
        return last_write, roots

    def _aliased_input(self, node: fx.Node, roots: dict[fx.Node, fx.Node]) -> fx.Node | None:
        """The node whose storage ``node``'s result shares, once candidates are views."""
        if is_getitem(node):
            source = node.args[0]
            op = aten_op(getattr(source, "target", None))
            if op is not None and (op in self.view_of_copy or returns_alias_of_input(op)):
                return source
            return None
        op = aten_op(node.target)
        if op is None or not node.args or not isinstance(node.args[0], fx.Node):
            return None
        if op in self.view_of_copy or returns_alias_of_input(op):
            return node.args[0]
        return None

    # -- conversion --------------------------------------------------------------------------------

    def _convert(self, graph: fx.Graph, convertible: set[fx.Node], core_only: bool) -> bool:
        """Convert the nodes that can be views; with ``core_only`` (the edge verifier checks the result)
        edge-dialect nodes become core ATen views only."""
        computer = ValueComputer(fake_mode_of(graph))
        changed: set[fx.Node] = set()  # nodes whose meta["val"] layout changed
        converted: set[fx.Node] = set()
        handled: set[fx.Node] = set()  # getitem users already given their value
        for node in graph.nodes:
            if node in handled:
                continue
            if node in convertible:
                core = core_only and is_edge(node.target)
                spec = self._converted_layout(node, computer, converted, core)
                if spec is not None:
                    self._apply(node, spec, computer, changed, handled, core)
                    converted.add(node)
                    continue
            if changed and node.op == "call_function" and any(i in changed for i in node.all_input_nodes):
                if refresh_value(node, computer):
                    changed.add(node)
            if node.op == "output" and "val" in node.meta and any(i in changed for i in node.all_input_nodes):
                node.meta["val"] = fx.node.map_arg(node.args[0], lambda n: n.meta.get("val"))
        return bool(converted)

    def _converted_layout(self, node: fx.Node, computer: ValueComputer, converted: set[fx.Node], core: bool) -> Any:
        """Layout of the node's value as a view, or ``None`` where it must stay a copy (``core``: where
        no core ATen view does what it does)."""
        view = self.view_of_copy[aten_op(node.target)]
        source = node.args[0]
        if not isinstance(source, fx.Node) or not isinstance(source.meta.get("val"), torch.Tensor):
            return None
        if view is aten.as_strided.default and not _fresh_contiguous(source, converted):
            return None
        if core and _core_view(node, view) is None:
            return None
        try:
            args, kwargs = argument_values(node)
            spec = computer.layout_of(view, args, kwargs, is_view=True)
        except (KeyError, RuntimeError, ValueError, TypeError, IndexError):
            return None  # the view is impossible on this input's layout (or unknowable): the copy stays
        if not self._copies_stay_lowerable(node, spec, computer, core):
            return None
        if self.needs_dense_input is not None and not _dense(spec):
            for consumer in _consumers(node):
                op = aten_op(consumer.target)
                if op is not None and self.needs_dense_input(op):
                    return None
        return spec

    def _copies_stay_lowerable(self, node: fx.Node, spec: Any, computer: ValueComputer, core: bool) -> bool:
        """Whether every view-copy consuming ``node`` could still be formed as a view of its new layout.

        Eager ``view_copy`` reshapes any input, but Inductor lowers it as a view, so a copy left in
        place on a strided input fails to compile ("Cannot view a tensor with shape ..."). Where the
        consumer's view is impossible it stays a copy, so ``node`` must keep producing dense memory.
        Verified as an edge program (``core``), a ``view_copy`` consumer whose input's layout is not
        settled stays a copy (``reshape`` is not core ATen), which Inductor lowers as ``view`` then
        ``clone``: ``node`` keeps its copy too unless its own input is settled, the only case where the
        layout the compiler gives ``node`` is the one judged here.
        """
        if core and not _layout_is_settled(node.args[0]) and any(
                aten_op(getattr(c, "target", None)) in _VIEWING_COPIES for c in _consumers(node)):
            return False
        items = spec if not is_tensor_layout(spec) else None
        for user in node.users:
            user_spec = spec
            consumers: Iterable[fx.Node] = (user,)
            if is_getitem(user):
                if items is None:
                    continue
                user_spec, consumers = items[user.args[1]], user.users
            for consumer in consumers:
                op = aten_op(getattr(consumer, "target", None))
                if op not in VIEW_OF_COPY or not consumer.args or consumer.args[0] is not (
                        user if is_getitem(user) else node):
                    continue
                try:
                    args, kwargs = argument_values(consumer)
                    args = (computer.value_of(user_spec), *args[1:])
                    computer.layout_of(VIEW_OF_COPY[op], args, kwargs, is_view=True)
                except (RuntimeError, ValueError, TypeError, IndexError):
                    return False
                except KeyError:
                    continue  # no meta to judge by: the consumer's own conversion check decides
        return True

    def _apply(self, node: fx.Node, spec: Any, computer: ValueComputer, changed: set[fx.Node],
               handled: set[fx.Node], core: bool) -> None:
        view = self.view_of_copy[aten_op(node.target)]
        if core:
            core_view = _core_view(node, view)
            assert core_view is not None  # _converted_layout kept the copy otherwise
            node.target, node.args, node.kwargs = like(core_view[0], node.target), core_view[1], core_view[2]
        else:
            if not _layout_is_settled(node.args[0]):
                view = _REPLACEMENT.get(view, view)
            node.target = like(view, node.target)
        if view not in _MULTI_OUTPUT:
            if not same_layout(spec, layout(node.meta.get("val"))):
                node.meta["val"] = computer.value_of(spec)
                changed.add(node)
            return
        items = {}
        for user in node.users:
            if is_getitem(user):
                index = user.args[1]
                if not same_layout(spec[index], layout(user.meta.get("val"))):
                    user.meta["val"] = computer.value_of(spec[index])
                    changed.add(user)
                items[index] = user.meta["val"]
                handled.add(user)
        node.meta["val"] = [items[i] if i in items else computer.value_of(s) for i, s in enumerate(spec)]


def _static_ints(*values: Any) -> bool:
    return all(isinstance(v, int) and not isinstance(v, bool) for v in values)


def _core_view(node: fx.Node, view: torch._ops.OpOverload) -> tuple[torch._ops.OpOverload, tuple, dict] | None:
    """``(op, args, kwargs)``: the core ATen view ``node`` becomes in an edge program, or ``None`` where
    there is none and the copy must stay (the edge verifier refuses a view op outside core ATen).

    A ``view_copy`` becomes ``view`` only where the input's layout is settled: elsewhere only ``reshape``
    is sure to lower, and it is not core ATen.
    """
    arguments = [value for _, value in bound_arguments(node, view)]
    source = arguments[0]
    shape = source.meta["val"].shape
    if view is aten.view.default and not _layout_is_settled(source):
        return None
    if torch.Tag.core in view.tags:
        return view, node.args, dict(node.kwargs)
    if view in (aten.transpose.int, aten.t.default):
        order = list(range(len(shape)))
        if view is aten.t.default and len(shape) == 2:
            order = [1, 0]
        elif view is aten.transpose.int and order:
            first, second = (d % len(order) for d in arguments[1:3])
            order[first], order[second] = order[second], order[first]
        return aten.permute.default, (source, order), {}
    if view is aten.detach.default:
        return aten.alias.default, (source,), {}
    if view is aten.squeeze.default:
        # squeeze.default drops every size-1 dim; which those are is known only for static sizes.
        if not _static_ints(*shape):
            return None
        return aten.squeeze.dims, (source, [d for d, size in enumerate(shape) if size == 1]), {}
    if view is aten.narrow.default:
        dim, start, length = arguments[1:4]
        if not _static_ints(start, length) or (start < 0 and not _static_ints(shape[dim])):
            return None
        start = start + shape[dim] if start < 0 else start
        return aten.slice.Tensor, (source, dim, start, start + length), {}
    if view is aten.split.Tensor:
        dim = arguments[2]
        sizes = [piece.shape[dim] for piece in node.meta.get("val") or ()]
        if not sizes or not _static_ints(*sizes):
            return None
        return aten.split_with_sizes.default, (source, sizes, dim), {}
    return None  # unbind, view.dtype, unfold, view_as_real, view_as_complex: no core view


def _layout_is_settled(source: Any) -> bool:
    """Whether the compiler keeps ``source``'s contiguous layout as the graph has it: a program input, a
    constant or a pointwise result (Inductor lays those out contiguously, or as a view needs). Only an
    extern kernel's output can come back in another layout than the graph's value."""
    if not isinstance(source, fx.Node):
        return False
    value = source.meta.get("val")
    if not isinstance(value, torch.Tensor) or not is_contiguous_or_false(value):
        return False
    if source.op in ("placeholder", "get_attr"):
        return True
    op = aten_op(source.target) if source.op == "call_function" else None
    return op is not None and torch.Tag.pointwise in op.tags


def _fresh_contiguous(source: fx.Node, converted: set[fx.Node]) -> bool:
    """Whether ``source`` owns a contiguous storage from offset 0 (what ``as_strided`` indexes)."""
    if source.op != "call_function" or source in converted or is_getitem(source):
        return False
    op = aten_op(source.target)
    if op is None or returns_alias_of_input(op):
        return False
    value = source.meta.get("val")
    return isinstance(value, torch.Tensor) and value.is_contiguous() and value.storage_offset() == 0


def _dense(spec: Any) -> bool:
    """Whether every tensor layout in ``spec`` is contiguous."""
    if not is_tensor_layout(spec):
        return all(_dense(s) for s in spec)
    sizes, strides = spec[0], spec[1]
    expected = 1
    for size, stride in reversed(list(zip(sizes, strides))):
        if size != 1 and stride != expected:
            return False
        expected *= size
    return True


def _consumers(node: fx.Node) -> Iterable[fx.Node]:
    """Users of ``node``, looking through ``getitem`` of multi-output views."""
    for user in node.users:
        if is_getitem(user):
            yield from user.users
        else:
            yield user

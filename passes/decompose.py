"""Apply decompositions node by node, in place, instead of retracing the program.

``ExportedProgram.run_decompositions(table)`` retraces the whole program even when one node in a
thousand needs decomposing (7.5 s on the 2,546-node benchmark graph on a busy 2-core machine). This
pass traces each decomposition on the fake values of the node it replaces and splices the traced
nodes in where that node was: nothing else in the graph is touched, node names, stack traces and
module stacks are kept, and the graph signature stays valid.

A trace depends only on the op, the layouts of its tensor arguments and its other arguments, so it is
memoised on those: the 48 identical blocks of a transformer trace each decomposition once.

Under dynamic shapes a decomposition is traced on the program's own symbolic sizes (its shape
environment, with the bounds the user exported with), so it sees every size the program allows. A
decomposition that branches on a symbolic size (``if x.shape[1] > 16``, ``while step < length``)
adds a guard there that nothing downstream checks: the spliced program would be right at the example
size and silently wrong at others. Such a trace is refused with a :class:`PassError` naming the node
and the guard. A decomposition that cannot be exact for a call raises
:class:`~shimkit.registry.DecompositionDeclined`: the node is left in place (the backend then reports
its missing kernel) and the reason is kept in ``node.meta["shimkit_declined"]`` and in
:func:`recording_declines`; :func:`observing_decompositions` sees each one applied.

In an edge program that the edge verifier checks afterwards (``EdgeProgramManager.transform``:
:func:`~shimkit.passes.base.verified_as_edge`) a trace is brought to what ``to_edge`` itself would have
written: ops outside core ATen decomposed with ``to_edge``'s own table, a number given as a tensor operand
(``mul.Tensor(x, 2)``) passed to the op's ``Scalar`` overload, memory-format ops as the dim-order ops the
program uses. What still is not edge dialect is refused with a :class:`PassError` naming the op; right
before Inductor (``AotiBackend.preprocess`` hands the pass the ``ExportedProgram``) traces are spliced as
they are.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Mapping

import torch
from torch import fx
from torch._subclasses.fake_tensor import FakeTensor
from torch.fx.experimental.proxy_tensor import make_fx
from torch.utils import _pytree as pytree

from shimkit.passes.base import PROVENANCE_META, PassContext, PassError, ShimkitPass, describe_node, verified_as_edge
from shimkit.passes.meta import argument_key, fake_mode_of, guards_since, shape_env_of
from shimkit.passes.ops import aten_op, bound_arguments, edge_op, is_edge, is_getitem
from shimkit.registry.errors import DecompositionDeclined, declining_as_not_implemented



DECLINED_META = "shimkit_declined"


@dataclass(frozen=True)
class Decline:
    """A node a decomposition declined to replace, and why."""

    op: str
    node: str
    where: str
    reason: str


_declines: contextvars.ContextVar[list[Decline] | None] = contextvars.ContextVar("shimkit_declines", default=None)
_on_applied: contextvars.ContextVar[Callable[[str, torch._ops.OpOverload, fx.Node, Callable[..., Any]], None] | None] = (
    contextvars.ContextVar("shimkit_on_applied", default=None))


@contextlib.contextmanager
def observing_decompositions(
        callback: Callable[[str, torch._ops.OpOverload, fx.Node, Callable[..., Any]], None]) -> Iterator[None]:
    """Call ``callback(pass_name, op, node, decomposition)`` for every node a decomposition pass replaces inside
    the block, before the node is spliced out (the decomposition is the one whose trace succeeded: the plugin's,
    or the fallback table's where the plugin declined). The audit's provenance report is built from these."""
    token = _on_applied.set(callback)
    try:
        yield
    finally:
        _on_applied.reset(token)


@contextlib.contextmanager
def recording_declines() -> Iterator[list[Decline]]:
    """Collect every :class:`Decline` of the decomposition passes run inside the block."""
    collected: list[Decline] = []
    token = _declines.set(collected)
    try:
        yield collected
    finally:
        _declines.reset(token)


def _op_key(op: Any) -> torch._ops.OpOverload:
    resolved = aten_op(op)
    if resolved is None:
        from shimkit.registry.ops import resolve_op  # accepts the registry's "ns::name.overload" spelling

        resolved = resolve_op(op)
    return resolved


class _Template:
    """One traced decomposition: a small graph whose placeholders are the node's distinct inputs.

    ``verified`` (an edge program the edge verifier checks afterwards): its ops are made edge dialect as
    ``to_edge`` writes them, dim-order ops where ``dim_order``; ``problems`` says what could not be.
    """

    def __init__(self, graph: fx.Graph, edge: bool, verified: bool = False, dim_order: bool = True) -> None:
        graph.eliminate_dead_code()
        self.placeholders = list(graph.find_nodes(op="placeholder"))
        self.body = [n for n in graph.nodes if n.op not in ("placeholder", "output")]
        for node in self.body:
            if node.op != "call_function":
                raise ValueError(f"the traced decomposition contains a {node.op} node ({node.format_node()}); "
                                 f"decompositions must not create tensor constants or call modules")
        self.problems = _make_edge_verifiable(self.body, dim_order) if verified else []
        self.targets = {n: edge_op(n.target) if edge and isinstance(n.target, torch._ops.OpOverload)
                        else n.target for n in self.body}
        self.results = graph.output_node().args[0]
        # A result node can take over the replaced node (keeping its name) only if nothing else in the
        # template reads it and it is returned once.
        flat = [r for r in pytree.tree_leaves(self.results) if isinstance(r, fx.Node)]
        self.absorbable = {r for r in flat if flat.count(r) == 1 and len(r.users) == 1
                           and r.op == "call_function"}


@functools.lru_cache(maxsize=None)
def _to_edge_decompositions() -> dict[torch._ops.OpOverload, Callable[..., Any]]:
    """The decompositions ``to_edge`` applies, for the ops outside core ATen (the ones it must apply)."""
    from executorch.exir.program._program import _default_decomposition_table

    return {op: fn for op, fn in _default_decomposition_table().items()
            if isinstance(op, torch._ops.OpOverload) and torch.Tag.core not in op.tags}


def _holds_dim_order_ops(graph: fx.Graph) -> bool:
    """Whether the edge program writes memory-format ops as dim-order ops, as ``to_edge`` does unless its
    config skips them (``_skip_dim_order``, and then the verifier refuses dim-order ops). A program holding
    neither kind is taken to follow ``to_edge``'s default."""
    for node in graph.nodes:
        op = aten_op(node.target) if node.op == "call_function" else None
        if op is not None and op.namespace == "dim_order_ops":
            return True
        if op is not None and op in _MEMORY_FORMAT_OPS:
            return False
    return True


# Core ATen ops that the edge dialect writes as dim-order ops (ExecuTorch's DimOrderOpsMap).
_MEMORY_FORMAT_OPS = {torch.ops.aten._to_copy.default, torch.ops.aten.clone.default,
                      torch.ops.aten.empty.memory_format}


def _tensor_operands_given_numbers(node: fx.Node, op: torch._ops.OpOverload) -> list[str]:
    """Names of the ``Tensor`` parameters of ``op`` that ``node`` passes a Python number."""
    return [argument.name for argument, value in bound_arguments(node, op)
            if isinstance(argument.type, torch.TensorType) and isinstance(value, (bool, int, float))]


def _scalar_overload(op: torch._ops.OpOverload, names: list[str]) -> torch._ops.OpOverload | None:
    """``add.Scalar`` for ``add.Tensor`` given a number as ``other``: the core overload taking those
    parameters as ``Scalar``, with the same parameters otherwise."""
    if "Tensor" not in op._overloadname:
        return None
    packet = getattr(torch.ops.aten, op._schema.name.split("::")[1])
    scalar = getattr(packet, op._overloadname.replace("Tensor", "Scalar", 1), None)
    if scalar is None or torch.Tag.core not in scalar.tags:
        return None
    ours, theirs = op._schema.arguments, scalar._schema.arguments
    if [a.name for a in ours] != [a.name for a in theirs] or any(
            not isinstance(a.type, torch.NumberType) for a in theirs if a.name in names):
        return None
    return scalar


def _make_edge_verifiable(body: list[fx.Node], dim_order: bool) -> list[str]:
    """Rewrite traced ATen nodes, in place, into what the edge verifier accepts; describe what remains."""
    problems = []
    for node in body:
        op = aten_op(node.target)
        if op is None or op.namespace != "aten":
            continue
        numbers = _tensor_operands_given_numbers(node, op)
        if numbers:
            scalar = _scalar_overload(op, numbers)
            if scalar is None:
                problems.append(f"{op} with a number as tensor operand {', '.join(numbers)}")
                continue
            node.target = op = scalar
        if op in _MEMORY_FORMAT_OPS and dim_order:
            from executorch.exir.passes.dim_order_ops_registry import DimOrderOpsMap

            # The result's own layout: what memory_format asked for, or what preserve_format kept.
            kwargs = {k: v for k, v in node.kwargs.items() if k != "memory_format"}
            kwargs["dim_order"] = [int(d) for d in node.meta["val"].dim_order()]
            node.target, node.kwargs = DimOrderOpsMap[edge_op(op)]._op, kwargs
        elif not {torch.Tag.core, torch.Tag.view_copy} & set(op.tags):
            problems.append(f"{op}, which is not core ATen")
    return problems


def _single_fake_mode(values: list[Any]) -> Any:
    """The fake mode every tensor of ``values`` belongs to, or ``None`` where they do not share one."""
    modes = {id(v.fake_mode): v.fake_mode for v in values if isinstance(v, FakeTensor)}
    if len(modes) != 1 or not all(isinstance(v, FakeTensor) for v in values if isinstance(v, torch.Tensor)):
        return None
    return next(iter(modes.values()))


class DecomposeInPlace(ShimkitPass):
    """Replace each node whose op is in ``table`` by its traced decomposition, spliced in place.

    ``table`` maps ops (``OpOverload``, edge op or ``"ns::name.overload"``) to decompositions called
    like the op. Results match ``ExportedProgram.run_decompositions(table)``; the graph keeps its
    dialect (an edge-dialect node is replaced by edge-dialect ops). ``fallback`` is a second table,
    consulted for an op ``table`` lacks or whose decomposition declines the node: the backend's own
    table, so that what no plugin decomposes is decomposed as the backend would have (its retrace
    avoided). See :meth:`with_fallback`.
    """

    name = "plugin_decompositions"
    # Handed the program right before Inductor (AotiBackend.preprocess), traces are spliced as they are;
    # handed an edge program's module (EdgeProgramManager.transform), they are made edge dialect.
    requires_exported_program = True

    def __init__(self, table: Mapping[Any, Callable[..., Any]], *, name: str | None = None,
                 fallback: Mapping[Any, Callable[..., Any]] | None = None,
                 third_party: Mapping[Any, str] | None = None) -> None:
        self.table = {_op_key(op): fn for op, fn in table.items()}
        self.fallback = {_op_key(op): fn for op, fn in (fallback or {}).items()}
        # The ops whose decomposition a third-party plugin provides, with that plugin described: one that
        # fails to trace is that plugin's problem (the node is left, declined, and the lowering goes on);
        # a built-in's failure is shimkit's bug, raised.
        self.third_party = {_op_key(op): owner for op, owner in (third_party or {}).items()}
        if name is not None:
            self.name = name  # type: ignore[misc]
        self._templates: dict[Any, _Template] = {}
        self._templates_mode: Any = None  # the fake mode the memoised templates' values belong to

    def with_fallback(self, fallback: Mapping[Any, Callable[..., Any]]) -> "DecomposeInPlace":
        """This pass, with ``fallback`` tried after its own table.

        >>> import torch
        >>> from torch._inductor.decomposition import conv1d_to_conv2d
        >>> conv1d = torch.ops.aten.conv1d.default
        >>> plugins = DecomposeInPlace({})
        >>> conv1d in plugins.with_fallback({conv1d: conv1d_to_conv2d}).fallback
        True
        """
        return DecomposeInPlace(self.table, name=self.name, fallback={**self.fallback, **fallback},
                                third_party=self.third_party)

    def _candidates(self, op: torch._ops.OpOverload) -> list[Callable[..., Any]]:
        return [fn for fn in (self.table.get(op), self.fallback.get(op)) if fn is not None]

    @classmethod
    def from_capabilities(cls, capabilities: Any, **kwargs: Any) -> "DecomposeInPlace":
        """Every plugin decomposition that applies on the device (ops it has no shim for)."""
        table, third_party = {}, {}
        for op, provision in capabilities.decompositions.items():
            decomposition = capabilities.decomposition(op)
            if decomposition is not None:
                table[op] = decomposition
                if provision.source.kind != "builtin" and not capabilities.strict:
                    third_party[op] = f"op plugin {provision.plugin!r} ({provision.source.describe()})"
        return cls(table, third_party=third_party, **kwargs)

    def transform(self, graph: fx.Graph, context: PassContext) -> bool:
        if not self.table and not self.fallback:
            return False
        targets = [n for n in graph.nodes if n.op == "call_function"
                   and (aten_op(n.target) in self.table or aten_op(n.target) in self.fallback)
                   and DECLINED_META not in n.meta]
        if not targets:
            return False
        mode = fake_mode_of(graph)
        if mode is not self._templates_mode:
            # A template's values belong to the fake mode it was traced in; another program's graph must
            # not hold them (its range constraints and Inductor read the mode off the values).
            self._templates, self._templates_mode = {}, mode
        verified = verified_as_edge(graph, context)
        dim_order = verified and _holds_dim_order_ops(graph)
        return sum(self.decompose(graph, node, verified=verified, dim_order=dim_order) for node in targets) > 0

    def decompose(self, graph: fx.Graph, node: fx.Node, *, verified: bool = False, dim_order: bool = True) -> bool:
        """Splice the decomposition of ``node`` in its place; False where the decomposition declined.

        ``verified``: the edge verifier checks the result, so an edge-dialect node is replaced by edge
        dialect as ``to_edge`` writes it (dim-order ops where ``dim_order``)."""
        op = aten_op(node.target)
        leaves, spec = pytree.tree_flatten((node.args, node.kwargs))
        inputs: list[fx.Node] = []
        slots: list[int | None] = []
        for leaf in leaves:
            if isinstance(leaf, fx.Node):
                if leaf not in inputs:
                    inputs.append(leaf)
                slots.append(inputs.index(leaf))
            else:
                slots.append(None)
        for source in inputs:
            if "val" not in source.meta:
                raise PassError(self.pass_name, node, f"input {source.name} has no meta['val'] to trace the "
                                f"decomposition of {op} on (propagate fake values first, e.g. with "
                                f"torch.fx.passes.fake_tensor_prop.FakeTensorProp)")
        assert op is not None  # targets are the tables' ops
        declined: DecompositionDeclined | None = None
        for decomposition in self._candidates(op):
            try:
                template = self._template(graph, node, op, decomposition, leaves, spec, slots, inputs,
                                          verified and is_edge(node.target), dim_order)
                break
            except DecompositionDeclined as reason:
                declined = reason
        else:
            assert declined is not None
            node.meta[DECLINED_META] = declined.reason
            collected = _declines.get()
            if collected is not None:
                collected.append(Decline(op.name(), node.name, describe_node(node), declined.reason))
            return False
        observer = _on_applied.get()
        if observer is not None:
            observer(self.name, op, node, decomposition)
        if template.problems:
            raise PassError(self.pass_name, node, f"the decomposition of {op} "
                            f"({getattr(decomposition, '__qualname__', decomposition)}) writes "
                            f"{'; '.join(template.problems)}: the edge verifier refuses that, so it cannot be "
                            f"applied to an edge program that EdgeProgramManager.transform checks; it is "
                            f"valid right before Inductor (AotiBackend hands the pass the ExportedProgram)")
        self._splice(graph, node, template, inputs)
        return True

    def _template(self, graph: fx.Graph, node: fx.Node, op: torch._ops.OpOverload,
                  decomposition: Callable[..., Any], leaves: list, spec: Any, slots: list[int | None],
                  inputs: list[fx.Node], verified: bool, dim_order: bool) -> _Template:
        values = [n.meta["val"] for n in inputs]
        constants = [None if slot is not None else leaf for leaf, slot in zip(leaves, slots)]
        edge = is_edge(node.target)
        try:
            key = (op, decomposition, edge, verified, dim_order, spec, tuple(slots), argument_key(constants),
                   argument_key(values))
            hash(key)
        except TypeError:  # symbolic sizes: trace for this node alone
            key = None
        if key is not None and key in self._templates:
            return self._templates[key]

        def call_decomposition(*tensors: Any) -> Any:
            flat = [tensors[slot] if slot is not None else constant for slot, constant in zip(slots, constants)]
            args, kwargs = pytree.tree_unflatten(flat, spec)
            result = decomposition(*args, **kwargs)
            if result is NotImplemented:  # torch's decomposition-table convention for "keep the op"
                raise DecompositionDeclined(f"{getattr(decomposition, '__qualname__', decomposition)} returned "
                                            f"NotImplemented")
            # A named tuple (torch's return_types) would be traced as a constructor call.
            return tuple(result) if isinstance(result, (tuple, list)) else result

        symbolic = any(isinstance(s, torch.SymInt) for v in values if isinstance(v, torch.Tensor)
                       for s in (*v.shape, *v.stride()))
        # In the program's fake mode (make_fx finds it on the values), so that tensors the
        # decomposition creates (arange, zeros) are fake too, on the program's device.
        fake = any(isinstance(v, FakeTensor) for v in values)
        mode = "symbolic" if symbolic else "fake" if fake else "real"
        # Static values of one fake mode are traced as they are, inside that mode: make_fx's own
        # "fake" mode would first copy each of them into a fake mode of its own.
        own_mode = _single_fake_mode(values) if mode == "fake" else None
        shape_env = shape_env_of(graph) if symbolic else None
        guards_before = len(shape_env.guards) if shape_env is not None else 0
        try:
            # The table's other decompositions stay active: one that calls an op another plugin decomposes
            # (an ATen composite reaching cumsum, say) is spliced in without that op. Where that plugin
            # declines, so does this node, with its reason; but a fallback (the backend's own table) is
            # applied as the backend would, keeping the declined op (conv1d-as-conv2d reaching the
            # grouped-conv1d plugin, which declines 2-D convolutions).
            others = {other: fn for other, fn in self.table.items() if other != op}
            if decomposition is not self.table.get(op):
                others = {other: declining_as_not_implemented(fn) for other, fn in others.items()}
            if verified:
                others = {**{o: fn for o, fn in _to_edge_decompositions().items() if o != op}, **others}
            with own_mode if own_mode is not None else contextlib.nullcontext():
                traced = make_fx(call_decomposition, decomposition_table=others,
                                 tracing_mode="real" if own_mode is not None else mode)(*values)
            template = _Template(traced.graph, edge, verified, dim_order)
        except DecompositionDeclined:
            raise
        except Exception as error:
            failure = (f"tracing the decomposition of {op} ({getattr(decomposition, '__qualname__', decomposition)}) "
                       f"failed: {type(error).__name__}: {error}")
            if decomposition is self.table.get(op) and op in self.third_party:
                raise DecompositionDeclined(f"{self.third_party[op]}: {failure}; the node is left in place") from error
            raise PassError(self.pass_name, node, failure) from error
        added = guards_since(shape_env, guards_before)
        if added:
            raise PassError(self.pass_name, node, f"the decomposition of {op} "
                            f"({getattr(decomposition, '__qualname__', decomposition)}) branches on a dynamic "
                            f"size (guard {', '.join(added)}): the spliced program would be right only at sizes that "
                            f"take the same branch; read sizes without comparing them, or raise "
                            f"DecompositionDeclined")
        if key is not None:
            self._templates[key] = template
        return template

    def _splice(self, graph: fx.Graph, node: fx.Node, template: _Template, inputs: list[fx.Node]) -> None:
        slots_by_output = self._output_slots(node, template)
        env: dict[fx.Node, Any] = dict(zip(template.placeholders, inputs))
        inherited = {k: node.meta[k] for k in PROVENANCE_META if k in node.meta}
        inherited["original_aten"] = aten_op(node.target)
        absorbed = {result: slot for result, slot in slots_by_output.items() if result in template.absorbable}
        created: list[fx.Node] = []
        with graph.inserting_before(node):
            for tnode in template.body:
                args = fx.node.map_arg(tnode.args, env.__getitem__)
                kwargs = fx.node.map_arg(tnode.kwargs, env.__getitem__)
                slot = absorbed.get(tnode)
                if slot is not None:
                    # The replaced node (or its getitem) becomes this op: it keeps its name, so graph
                    # outputs and the signature naming them stay valid.
                    slot.target, slot.args, slot.kwargs = template.targets[tnode], args, kwargs
                    slot.meta.update(inherited)
                    slot.meta["val"] = tnode.meta.get("val")
                    env[tnode] = slot
                    continue
                new = graph.create_node("call_function", template.targets[tnode], args, kwargs,
                                        name=f"{node.name}_{tnode.name}")
                new.meta.update(inherited)
                if "val" in tnode.meta:
                    new.meta["val"] = tnode.meta["val"]
                env[tnode] = new
                created.append(new)
        for result, slot in slots_by_output.items():
            if result in absorbed:
                continue
            slot.replace_all_uses_with(env[result])
            graph.erase_node(slot)
        for user in list(node.users):  # the getitems of a list result, their own getitems re-pointed above
            if is_getitem(user) and not user.users:
                graph.erase_node(user)
        if node not in slots_by_output.values():
            graph.erase_node(node)
        for new in reversed(created):  # outputs of the decomposition nobody reads (e.g. layer norm's rstd)
            if not new.users and not new.is_impure():
                graph.erase_node(new)

    def _output_slots(self, node: fx.Node, template: _Template) -> dict[fx.Node, fx.Node]:
        """Which graph node stands for each result of the decomposition.

        A single result stands for ``node``; the i-th of several stands for ``node``'s ``getitem(i)``
        users (an unread result has none).
        """
        results = template.results
        if isinstance(results, fx.Node):
            return {results: node}
        if results is None and not node.users:  # an op run for its effect (an error check) returns nothing
            return {}
        if not isinstance(results, (list, tuple)):
            raise PassError(self.pass_name, node, f"the decomposition returned {type(results).__name__}, "
                            f"not a tensor or a tuple of tensors")
        slots: dict[fx.Node, fx.Node] = {}
        self._map_getitems(node, node, results, slots)
        return slots

    def _map_getitems(self, node: fx.Node, source: fx.Node, results: Any, slots: dict[fx.Node, fx.Node]) -> None:
        """Points each ``getitem`` user of ``source`` at its result; a result that is itself a list (an op
        returning ``Tensor[]``, such as histogramdd's bin edges) maps the getitems of that getitem."""
        for user in list(source.users):
            if not is_getitem(user):
                raise PassError(self.pass_name, node, f"{user.name} uses the op's tuple result directly; only "
                                f"getitem users can be re-pointed at the decomposition's results")
            result = results[user.args[1]]
            if isinstance(result, (list, tuple)):
                self._map_getitems(node, user, result, slots)
                continue
            if not isinstance(result, fx.Node):
                raise PassError(self.pass_name, node, f"result {user.args[1]} of the decomposition is "
                                f"{result!r}, but {user.name} reads it")
            if result in slots:  # one result read through two getitems: the second re-points
                user.replace_all_uses_with(slots[result])
                node.graph.erase_node(user)
                continue
            slots[result] = user

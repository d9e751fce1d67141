"""Operator helpers shared by the passes: one view of core ATen and edge-dialect targets.

Edge-dialect graphs (``executorch.exir``) wrap each ATen overload in an ``EdgeOpOverload`` whose
``_op`` is the ATen overload. Passes match on the ATen overload and, when they create nodes, emit
the dialect of the node they replace, so an edge graph stays an edge graph.
"""

from __future__ import annotations

import functools
import operator
import sys
from typing import Any, Iterator

import torch
from torch import fx

aten = torch.ops.aten
# executorch is optional and slow to import (seconds): it is imported when an edge op is first emitted.
# Until a process has imported it there are no edge-dialect graphs, so no target can be an edge op.
_EDGE_OPS_MODULE = "executorch.exir.dialects.edge._ops"


def aten_op(target: Any) -> torch._ops.OpOverload | None:
    """The ATen (or custom-namespace) ``OpOverload`` behind an FX target, or ``None``."""
    inner = getattr(target, "_op", None)
    if isinstance(inner, torch._ops.OpOverload):
        return inner
    if isinstance(target, torch._ops.OpOverload):
        return target
    return None


def is_edge(target: Any) -> bool:
    edge_ops = sys.modules.get(_EDGE_OPS_MODULE)
    return edge_ops is not None and isinstance(target, edge_ops.EdgeOpOverload)


@functools.lru_cache(maxsize=None)
def edge_op(op: torch._ops.OpOverload) -> Any:
    """The edge-dialect wrapper of ``op``; ``op`` itself for symbolic-shape ops edge does not wrap."""
    if op.namespace not in ("aten", "dim_order_ops") or op in _SYMBOLIC_OPS:
        return op
    try:
        from executorch.exir.passes.replace_aten_with_edge_pass import aten_to_edge
    except ImportError:
        raise RuntimeError(f"cannot emit edge-dialect {op}: executorch is not installed") from None
    return aten_to_edge(op)


_SYMBOLIC_OPS = frozenset({aten.sym_size.int, aten.sym_stride.int, aten.sym_numel.default,
                           aten.sym_storage_offset.default})


def like(op: torch._ops.OpOverload, reference_target: Any) -> Any:
    """``op`` in the dialect of ``reference_target`` (edge if it is an edge op, else core ATen)."""
    return edge_op(op) if is_edge(reference_target) else op


def is_higher_order(target: Any) -> bool:
    return isinstance(target, torch._ops.HigherOrderOperator)


def node_values(value: Any) -> Iterator[fx.Node]:
    """Every ``fx.Node`` inside an argument structure (lists, tuples, dicts, slices)."""
    if isinstance(value, fx.Node):
        yield value
    elif isinstance(value, (list, tuple)):
        for item in value:
            yield from node_values(item)
    elif isinstance(value, dict):
        for item in value.values():
            yield from node_values(item)
    elif isinstance(value, slice):
        yield from node_values((value.start, value.stop, value.step))


def returns_alias_of_input(op: torch._ops.OpOverload) -> bool:
    """True for view ops: the (first) result aliases an input without writing it."""
    returns = op._schema.returns
    if not returns:
        return False
    info = returns[0].alias_info
    return info is not None and not info.is_write


def written_arguments(node: fx.Node) -> Iterator[fx.Node]:
    """The nodes whose storage ``node`` writes.

    Covers ops whose schema marks an argument ``Tensor(a!)`` (``add_``, ``copy_``, ``index_put_``, out=
    variants), ``auto_functionalized``/``auto_functionalized_v2`` (their mutable arguments, which
    Inductor re-inplaces onto the input's storage), any other higher-order op (conservatively, all of
    its tensor arguments), in-place ``call_method`` calls (``x.add_(y)``) and ``call_module`` calls
    (a module may mutate what it is given).
    """
    if node.op == "call_method":
        if isinstance(node.target, str) and node.target.endswith("_") and node.args:
            yield from node_values(node.args[0])
        return
    if node.op == "call_module":
        yield from node_values((node.args, node.kwargs))
        return
    if node.op != "call_function":
        return
    target = node.target
    if is_higher_order(target):
        yield from _higher_order_writes(node)
        return
    op = aten_op(target)
    if op is None or not op._schema.is_mutable:
        return
    arguments = op._schema.arguments
    for index, value in enumerate(node.args):
        if index < len(arguments) and _is_write(arguments[index]):
            yield from node_values(value)
    by_name = {a.name: a for a in arguments}
    for name, value in node.kwargs.items():
        if name in by_name and _is_write(by_name[name]):
            yield from node_values(value)


def _is_write(argument: torch._C.Argument) -> bool:
    return argument.alias_info is not None and argument.alias_info.is_write


def _higher_order_writes(node: fx.Node) -> Iterator[fx.Node]:
    name = getattr(node.target, "__name__", "")
    if name == "auto_functionalized" and node.args:
        mutable = aten_op(node.args[0])
        if mutable is not None:
            written = {a.name for a in mutable._schema.arguments if _is_write(a)}
            for key, value in node.kwargs.items():
                if key in written:
                    yield from node_values(value)
            return
    if name == "auto_functionalized_v2":
        yield from node_values(node.kwargs.get("_all_bases", ()))
        return
    yield from node_values((node.args, node.kwargs))


_MAY_WRITE: dict[Any, bool] = {}


def may_write(target: Any) -> bool:
    """Cheap pre-check for :func:`written_arguments` on a ``call_function`` target."""
    known = _MAY_WRITE.get(target)
    if known is None:
        op = aten_op(target)
        known = is_higher_order(target) or (op._schema.is_mutable if op is not None else False)
        _MAY_WRITE[target] = known
    return known


def is_getitem(node: fx.Node) -> bool:
    return node.op == "call_function" and node.target is operator.getitem


def bound_arguments(node: fx.Node, op: torch._ops.OpOverload) -> list[tuple[Any, Any]]:
    """``(schema argument, value)`` for each parameter of ``op``, in schema order, from ``node``'s args and
    kwargs, defaults filled in.

    >>> graph = fx.Graph()
    >>> x = graph.placeholder("x")
    >>> node = graph.call_function(torch.ops.aten.add.Tensor, (x, 2))
    >>> [(argument.name, value) for argument, value in bound_arguments(node, torch.ops.aten.add.Tensor)]
    [('self', x), ('other', 2), ('alpha', 1)]
    """
    return [(argument, node.args[index] if index < len(node.args)
             else node.kwargs.get(argument.name, argument.default_value))
            for index, argument in enumerate(op._schema.arguments)]

"""Keeping ``node.meta["val"]`` right without re-propagating the whole graph.

Running one op through ``FakeTensorMode`` costs ~130 µs; a pass that re-ran every view it converted in
the 48-block benchmark graph (1,152 of them) that way would spend 150 ms on metadata alone. So
:class:`ValueComputer` works on *layouts* (sizes, strides, storage offset, dtype, device):

* view ops run their meta kernel on a meta tensor of the input's layout (~8 µs, no fake dispatch);
* other ops run once through the graph's fake mode;
* results are memoised by (op, argument layouts, other arguments), so the 48 identical blocks of a
  transformer cost one computation each, and a caller builds a new fake tensor only where the layout
  actually changed;
* fake values are memoised by static layout too: nodes with one layout share one fake tensor, as the
  nodes that :class:`~shimkit.passes.decompose.DecomposeInPlace` splices from one template do.

Values computed here describe layout, not storage sharing: a converted view's value does not share
its input's fake storage, and two nodes may share a value without sharing memory. Everything that
needs aliasing facts reads them from the op schemas.
"""

from __future__ import annotations

import operator
from typing import Any

import sympy
import torch
from torch import fx
from torch._subclasses.fake_tensor import FakeTensor, FakeTensorMode
from torch.utils import _pytree as pytree
from torch.utils._sympy.numbers import int_oo

from shimkit.passes.ops import aten_op



def fake_mode_of(graph: fx.Graph) -> FakeTensorMode | None:
    """The fake mode the graph's ``meta["val"]`` tensors belong to (placeholders are checked first)."""
    for node in graph.find_nodes(op="placeholder"):
        value = node.meta.get("val")
        if isinstance(value, FakeTensor):
            return value.fake_mode
    for node in graph.nodes:
        for value in pytree.tree_leaves(node.meta.get("val")):
            if isinstance(value, FakeTensor):
                return value.fake_mode
    return None


def shape_env_of(graph: fx.Graph) -> Any:
    """The ``ShapeEnv`` behind the graph's symbolic sizes, or ``None`` for a static graph."""
    return getattr(fake_mode_of(graph), "shape_env", None)


def finite_bound(bound: Any) -> int | None:
    """A value-range bound of a symbolic size as an int, or ``None`` where it is infinite (symbolic
    shapes spell "no bound" ``int_oo``; ``sympy.oo`` is not one, yet may appear too)."""
    return None if bound in (int_oo, -int_oo, sympy.oo, -sympy.oo) else int(bound)


def guards_since(shape_env: Any, count: int) -> list[str]:
    """The guards added to ``shape_env`` after it held ``count`` of them, as text.

    After ``torch.export`` nothing checks a guard again: a pass or decomposition that adds one (by
    comparing a symbolic size with a Python number, say) has decided something that holds only at
    the example size, and the program it leaves is silently wrong elsewhere.
    """
    if shape_env is None:
        return []
    return [str(guard.expr) for guard in shape_env.guards[count:]]


def layout(value: Any) -> Any:
    """What must agree for two values to be interchangeable as metadata."""
    if isinstance(value, (torch.Tensor, _Placed)):
        return (tuple(value.shape), tuple(value.stride()), value.storage_offset(), value.dtype,
                value.device)
    if isinstance(value, (list, tuple)):
        return tuple(layout(v) for v in value)
    return value


def same_layout(a: Any, b: Any) -> bool:
    """Whether two layouts describe the same memory pattern.

    Strides of size-1 dimensions address nothing, and view kernels and ``empty_like`` choose them
    differently, so they are ignored; so are an empty tensor's strides and storage offset (a split
    of a size-1 dimension places its empty piece by that dimension's stride).
    """
    if a == b:
        return True
    if is_tensor_layout(a) and is_tensor_layout(b):
        if a[0] != b[0] or a[3:] != b[3:]:
            return False
        if any(s == 0 for s in a[0]):
            return True
        return a[2] == b[2] and all(s == 1 or x == y for s, x, y in zip(a[0], a[1], b[1]))
    if isinstance(a, tuple) and isinstance(b, tuple) and len(a) == len(b) \
            and not is_tensor_layout(a) and not is_tensor_layout(b):
        return all(same_layout(x, y) for x, y in zip(a, b))
    return False


def _is_static(spec: Any) -> bool:
    """True when a layout holds no symbolic sizes (symbolic ones are neither hashable nor memoised)."""
    if is_tensor_layout(spec):
        sizes, strides, offset = spec[0], spec[1], spec[2]
        return type(offset) is int and all(type(x) is int for x in sizes) \
            and all(type(x) is int for x in strides)
    return not any(isinstance(x, torch.SymInt) for x in pytree.tree_leaves(spec))


def argument_key(value: Any) -> Any:
    """A hashable stand-in for an argument: tensors by layout, and 1, 1.0 and True kept apart."""
    kind = type(value)
    if kind in (int, float, bool, str) or value is None:
        return (kind, value)
    if isinstance(value, torch.Tensor):
        return (tuple(value.shape), tuple(value.stride()), value.storage_offset(), value.dtype,
                value.device)
    if kind in (list, tuple):
        return (kind, tuple(argument_key(v) for v in value))
    if kind is dict:
        return (kind, tuple((k, argument_key(v)) for k, v in value.items()))
    return (kind, value)


def _meta_tensor(sizes: Any, strides: Any, offset: Any, dtype: torch.dtype) -> torch.Tensor:
    """A meta tensor with this layout, backed by just enough storage."""
    if offset == 0:
        return torch.empty_strided(sizes, strides, dtype=dtype, device="meta")
    extent = offset + 1 + sum((s - 1) * st for s, st in zip(sizes, strides))
    if any(s == 0 for s in sizes):
        extent = offset
    return torch.empty(extent, dtype=dtype, device="meta").as_strided(sizes, strides, offset)


def is_tensor_layout(spec: Any) -> bool:
    return isinstance(spec, tuple) and len(spec) == 5 and isinstance(spec[3], torch.dtype)


class ValueComputer:
    """Computes ``meta["val"]`` of ops from their inputs' values, memoised by layout."""

    def __init__(self, mode: FakeTensorMode | None) -> None:
        self.mode = mode
        self._memo: dict[Any, Any] = {}
        self._values: dict[Any, FakeTensor] = {}

    def layout_of(self, target: Any, args: tuple, kwargs: dict, *, is_view: bool = False) -> Any:
        """Layout of ``target(*args, **kwargs)``; raises what the op raises (e.g. an impossible view)."""
        try:
            key = (target, argument_key(args), argument_key(kwargs))
            hash(key)
        except TypeError:  # symbolic sizes
            return layout(self._run(target, args, kwargs, is_view))
        spec = self._memo.get(key)
        if spec is None:
            spec = layout(self._run(target, args, kwargs, is_view))
            self._memo[key] = spec
        return spec

    def value_of(self, spec: Any) -> Any:
        """A fake value with layout ``spec`` (a tensor, or a list of them for list specs).

        Static layouts give the same tensor each time (module docstring); symbolic ones a fresh one.
        """
        if is_tensor_layout(spec):
            static = _is_static(spec)
            value = self._values.get(spec) if static else None
            if value is None:
                sizes, strides, offset, dtype, device = spec
                if self.mode is None:
                    raise RuntimeError("cannot build a fake value: the graph's meta['val'] has no fake mode")
                value = FakeTensor(self.mode, _meta_tensor(sizes, strides, offset, dtype), device)
                if static:
                    self._values[spec] = value
            return value
        if isinstance(spec, tuple) and all(is_tensor_layout(s) for s in spec):
            return [self.value_of(s) for s in spec]
        raise TypeError(f"no fake value can have layout {spec!r}")

    def _run(self, target: Any, args: tuple, kwargs: dict, is_view: bool) -> Any:
        if is_view and _is_static(layout(args[0])):
            op = aten_op(target)
            if op is None:
                raise TypeError(f"{target} is not an ATen view op")
            source = args[0]
            meta_args = (_meta_tensor(source.shape, source.stride(), source.storage_offset(), source.dtype),
                         *args[1:])
            return _on_device(op(*meta_args, **kwargs), source.device)
        if self.mode is None:
            raise RuntimeError(f"cannot compute the value of {target}: the graph has no fake mode")
        with self.mode:
            return target(*args, **kwargs)


class _Placed:
    """A meta result standing in for a tensor on ``device`` (only its layout is read)."""

    def __init__(self, tensor: torch.Tensor, device: torch.device) -> None:
        self.shape, self._stride, self._offset = tensor.shape, tensor.stride(), tensor.storage_offset()
        self.dtype, self.device = tensor.dtype, device

    def stride(self) -> tuple:
        return self._stride

    def storage_offset(self) -> int:
        return self._offset


def _on_device(result: Any, device: torch.device) -> Any:
    if isinstance(result, torch.Tensor):
        return _Placed(result, device)
    return [_on_device(r, device) for r in result]


def argument_values(node: fx.Node) -> tuple[tuple, dict]:
    """The node's args and kwargs with every node replaced by its ``meta["val"]``.

    Raises ``KeyError`` naming the first input without one.
    """
    def value(n: fx.Node) -> Any:
        if "val" not in n.meta:
            raise KeyError(n.name)
        return n.meta["val"]
    return fx.node.map_arg(node.args, value), fx.node.map_arg(node.kwargs, value)


def set_value(node: fx.Node, computer: ValueComputer, is_view: bool = False) -> None:
    """Give a node a pass just made its ``meta["val"]``, computed from its inputs' values; a node with an
    input without one keeps none (the graph had none to keep right)."""
    try:
        args, kwargs = argument_values(node)
    except KeyError:
        return
    node.meta["val"] = computer.value_of(computer.layout_of(node.target, args, kwargs, is_view=is_view))


def refresh_value(node: fx.Node, computer: ValueComputer) -> bool:
    """Recompute ``node``'s value from its inputs'; return whether its layout changed.

    Nodes that cannot be recomputed (placeholders, modules, inputs without values) keep theirs.
    """
    if node.op != "call_function" or not callable(node.target):
        return False
    try:
        args, kwargs = argument_values(node)
    except KeyError:
        return False
    old = node.meta.get("val")
    if not isinstance(old, torch.Tensor) and not (
            isinstance(old, (list, tuple)) and all(isinstance(v, torch.Tensor) for v in old)):
        return False
    if node.target is operator.getitem:
        new = operator.getitem(*args)
        node.meta["val"] = new
        return not same_layout(layout(new), layout(old))
    spec = computer.layout_of(node.target, args, kwargs)
    if same_layout(spec, layout(old)):
        return False
    node.meta["val"] = computer.value_of(spec)
    return True

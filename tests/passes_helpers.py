"""Hypothesis strategies for the pass tests: random FX graphs of view-copy chains with in-place users.

A graph is drawn op by op while an eager tensor tracks each value, so every drawn op is valid on its
input's shape by construction. Graphs get ``meta["val"]`` from ``FakeTensorProp`` on the example inputs,
like an exported graph. Kept test-private so ``shimkit.testing`` can adopt them later.
"""

from __future__ import annotations

import copy
import operator
from dataclasses import dataclass
from typing import Any

import torch
from hypothesis import strategies as st
from torch import fx
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.fx.passes.fake_tensor_prop import FakeTensorProp
from torch.utils._python_dispatch import TorchDispatchMode

from shimkit.passes.meta import layout, same_layout

aten = torch.ops.aten


@dataclass
class GeneratedGraph:
    module: fx.GraphModule
    inputs: list[torch.Tensor]
    description: str

    def run(self, module: fx.GraphModule | None = None) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
        """Outputs, and the inputs after the run (in-place ops may write them)."""
        inputs = [torch.empty_strided(i.shape, i.stride(), dtype=i.dtype).copy_(i) for i in self.inputs]
        out = (module or self.module)(*inputs)
        return list(out) if isinstance(out, (tuple, list)) else [out], inputs


def propagate_values(module: fx.GraphModule, inputs: list[torch.Tensor]) -> None:
    mode = FakeTensorMode(allow_non_fake_inputs=True)
    FakeTensorProp(module, mode).propagate(*inputs)


def _view_copy_step(draw, value: torch.Tensor) -> tuple[Any, tuple, dict, bool] | None:
    """A view-copy op valid on ``value``: (target, args after self, kwargs, returns a list)."""
    dims = value.dim()
    choices = ["permute", "view_flat", "unsqueeze", "alias", "detach"]
    if dims >= 1:
        choices += ["slice", "select", "split", "narrow", "unfold", "split_with_sizes", "unbind", "expand"]
    if dims >= 2:
        choices += ["transpose", "diagonal"]
    if dims == 2:
        choices.append("t")
    if any(s == 1 for s in value.shape):
        choices += ["squeeze_dim", "squeeze_dims"]
    if value.is_contiguous():
        choices.append("as_strided")
    if value.dtype == torch.float32 and dims >= 1 and value.shape[-1] > 0:
        choices.append("view_dtype")
    kind = draw(st.sampled_from(choices))
    dim = draw(st.integers(0, dims - 1)) if dims else 0
    size = value.shape[dim] if dims else 0
    if kind == "permute":
        return aten.permute_copy.default, (draw(st.permutations(range(dims))),), {}, False
    if kind == "view_flat":
        return aten.view_copy.default, ([value.numel()],), {}, False
    if kind == "unsqueeze":
        return aten.unsqueeze_copy.default, (draw(st.integers(0, dims)),), {}, False
    if kind == "alias":
        return aten.alias_copy.default, (), {}, False
    if kind == "detach":
        return aten.detach_copy.default, (), {}, False
    if kind == "slice":
        start = draw(st.integers(0, size))
        end = draw(st.integers(start, size))
        return aten.slice_copy.Tensor, (dim, start, end, draw(st.integers(1, 2))), {}, False
    if kind == "select" and size > 0:
        return aten.select_copy.int, (dim, draw(st.integers(-size, size - 1))), {}, False
    if kind == "narrow":
        start = draw(st.integers(0, size))
        return aten.narrow_copy.default, (dim, start, draw(st.integers(0, size - start))), {}, False
    if kind == "unfold":
        step_size = draw(st.integers(1, max(1, size)))
        return aten.unfold_copy.default, (dim, min(step_size, size), draw(st.integers(1, 2))), {}, False
    if kind == "split" and size > 0:
        return aten.split_copy.Tensor, (draw(st.integers(1, size)), dim), {}, True
    if kind == "split_with_sizes" and size > 0:
        first = draw(st.integers(0, size))
        return aten.split_with_sizes_copy.default, ([first, size - first], dim), {}, True
    if kind == "unbind" and 0 < size <= 3:
        return aten.unbind_copy.int, (dim,), {}, True
    if kind == "expand":
        shape = [draw(st.sampled_from([s, 3])) if s == 1 else s for s in value.shape]
        leading = [2] if draw(st.booleans()) else []
        return aten.expand_copy.default, (leading + shape,), {}, False
    if kind == "transpose":
        return aten.transpose_copy.int, (dim, draw(st.integers(0, dims - 1))), {}, False
    if kind == "diagonal":
        other = draw(st.integers(0, dims - 1).filter(lambda d: d != dim))
        return aten.diagonal_copy.default, (draw(st.integers(-1, 1)), dim, other), {}, False
    if kind == "t":
        return aten.t_copy.default, (), {}, False
    if kind == "squeeze_dim":
        return aten.squeeze_copy.dim, ([i for i, s in enumerate(value.shape) if s == 1][0],), {}, False
    if kind == "squeeze_dims":
        return aten.squeeze_copy.dims, ([i for i, s in enumerate(value.shape) if s == 1],), {}, False
    if kind == "as_strided":
        rows = draw(st.integers(1, max(1, value.numel() // 2)))
        return aten.as_strided_copy.default, ([rows, 2], [1, 1], 0), {}, False if value.numel() >= rows + 1 else None
    if kind == "view_dtype":
        return aten.view_copy.dtype, (torch.int32,), {}, False
    return None


@st.composite
def view_copy_graphs(draw, *, mutations: bool = True, max_steps: int = 6) -> GeneratedGraph:
    """Graphs of view-copy ops, pointwise ops and (optionally) in-place writes on random nodes."""
    rank = draw(st.integers(1, 3))
    shape = draw(st.lists(st.integers(1, 4), min_size=rank, max_size=rank))
    example = torch.randn(shape)
    if rank >= 2 and draw(st.booleans()):  # a non-contiguous input
        example = torch.randn(list(reversed(shape))).transpose(0, -1)
    graph = fx.Graph()
    x = graph.placeholder("x")
    values: dict[fx.Node, torch.Tensor] = {x: example.clone()}
    tensors = [x]
    notes = [f"x{tuple(example.shape)}{'' if example.is_contiguous() else ' strided'}"]
    for _ in range(draw(st.integers(1, max_steps))):
        source = draw(st.sampled_from(tensors))
        value = values[source]
        action = draw(st.sampled_from(["view", "view", "view", "pointwise"] + (["write"] if mutations else [])))
        if action == "view":
            step = _view_copy_step(draw, value)
            if step is None or step[3] is None:
                continue
            target, args, kwargs, returns_list = step
            try:
                result = target(value, *args, **kwargs)
            except RuntimeError:
                continue
            node = graph.call_function(target, (source, *args), kwargs)
            notes.append(f"{node.name}={target.__name__}{args}")
            if returns_list:
                for index, item in enumerate(result):
                    item_node = graph.call_function(operator.getitem, (node, index))
                    values[item_node] = item
                    tensors.append(item_node)
            else:
                values[node] = result
                tensors.append(node)
        elif action == "pointwise":
            if not value.is_floating_point():
                continue
            node = graph.call_function(aten.mul.Tensor, (source, 2.0))
            values[node] = value * 2.0
            tensors.append(node)
            notes.append(f"{node.name}=mul")
        else:
            if not value.is_floating_point() or any(s == 0 for s in value.stride()) and value.numel() > 1:
                continue  # writing through an expanded (0-stride) tensor is an error in eager too
            graph.call_function(aten.add_.Tensor, (source, 1.0))
            value.add_(1.0)  # the eager mirror sees the write (and any alias of it does not: copies)
            notes.append(f"add_({source.name})")
    picked = draw(st.lists(st.sampled_from(tensors), min_size=1, max_size=3, unique=True))
    outputs = [graph.call_function(aten.clone.default, (n,)) if draw(st.booleans()) else n for n in picked]
    graph.output(tuple(outputs))
    module = fx.GraphModule(torch.nn.Module(), graph)
    propagate_values(module, [example])
    return GeneratedGraph(module, [example], "; ".join(notes))


def assert_same_results(before: GeneratedGraph, after_module: fx.GraphModule) -> None:
    expected, expected_inputs = before.run()
    actual, actual_inputs = before.run(after_module)
    for e, a in zip(expected + expected_inputs, actual + actual_inputs):
        assert e.shape == a.shape and e.dtype == a.dtype, (e.shape, a.shape)
        assert torch.equal(e, a) or torch.allclose(e, a, equal_nan=True), (e, a)


def assert_values_fresh(module: fx.GraphModule, inputs: list[torch.Tensor]) -> None:
    """``meta["val"]`` of every node agrees (layout) with a fresh propagation."""
    fresh = copy.deepcopy(module)
    propagate_values(fresh, inputs)
    for old, new in zip(module.graph.nodes, fresh.graph.nodes):
        if "val" not in new.meta:
            continue
        assert "val" in old.meta, f"{old.name} lost meta['val']"
        assert same_layout(layout(old.meta["val"]), layout(new.meta["val"])), \
            f"{old.format_node()}: meta says {layout(old.meta['val'])}, fresh propagation {layout(new.meta['val'])}"


class Decomposing(TorchDispatchMode):
    """Every op of ``table`` called inside runs its decomposition instead (the ops the decomposition calls
    run as they are): OpInfo's samples reach the ATen overload exactly as a model's call would. ``used``
    collects the ops it replaced."""

    def __init__(self, table):
        super().__init__()
        self.table, self.used = table, set()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func in self.table:
            self.used.add(func)
            return self.table[func](*args, **(kwargs or {}))
        return func(*args, **(kwargs or {}))


def assert_stops_stock_and_lowers_clean_for_metal(module, inputs, op_text, dynamic_shapes=None):
    """``module`` exported (with ``dynamic_shapes``) stops in ``to_edge`` stock, naming ``op_text`` as not core
    ATen, and with shimkit's plugins lowers for Metal with nothing missing and its numbers checked against
    eager; returns the shimkit run's audit."""
    from shimkit.audit.loader import LoadedModel
    from shimkit.audit.options import AuditOptions
    from shimkit.audit.runner import audit_loaded
    from shimkit.backend import backend_config

    def audit(plugins):
        exported = torch.export.export(module, inputs, dynamic_shapes=dynamic_shapes, strict=False)
        return audit_loaded(LoadedModel("model", exported=exported),
                            config=backend_config("mps") if plugins else None, options=AuditOptions(numerics=plugins))

    stock = audit(plugins=False)
    assert stock.failure is not None and stock.failure.phase == "to_edge", stock.failure
    assert op_text in stock.failure.message and "Core ATen" in stock.failure.message
    fixed = audit(plugins=True)
    assert fixed.failure is None and not fixed.missing, (fixed.failure, fixed.missing)
    assert fixed.numerics is not None and fixed.numerics.ok and fixed.numerics.checks
    return fixed

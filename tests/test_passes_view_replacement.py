"""ReplaceViewCopyWithView: properties on generated graphs, and each hazard of docs/metal-aoti.md, "The view_copy family"."""

from __future__ import annotations

import copy
import operator

import pytest
import torch
from hypothesis import given, settings
from torch import fx

from passes_helpers import (assert_same_results, assert_values_fresh, propagate_values,
                            view_copy_graphs)

from shimkit.passes import VIEW_OF_COPY, ReplaceViewCopyWithView
from shimkit.passes.ops import aten_op

aten = torch.ops.aten


def _copies(module: fx.GraphModule) -> list[fx.Node]:
    return [n for n in module.graph.nodes if n.op == "call_function" and aten_op(n.target) in VIEW_OF_COPY]


@settings(max_examples=60, deadline=None)
@given(view_copy_graphs())
def test_outputs_inputs_and_values_survive(generated):
    module = copy.deepcopy(generated.module)
    ReplaceViewCopyWithView()(module)
    module.graph.lint()
    assert_same_results(generated, module)
    assert_values_fresh(module, generated.inputs)


@settings(max_examples=30, deadline=None)
@given(view_copy_graphs())
def test_idempotent(generated):
    module = copy.deepcopy(generated.module)
    ReplaceViewCopyWithView()(module)
    code = module.code
    assert not ReplaceViewCopyWithView()(module).modified
    assert module.code == code


@settings(max_examples=40, deadline=None)
@given(view_copy_graphs(mutations=False))
def test_functional_graphs_keep_only_copies_that_must_stay(generated):
    """Without writes, a copy stays only where it shares storage (once views) with a graph output
    (on a bare graph any output may be written back), or where the view is impossible."""
    module = copy.deepcopy(generated.module)
    ReplaceViewCopyWithView()(module)
    output_roots = {_root(n) for n in module.graph.output_node().args[0]}
    for node in _copies(module):
        view = VIEW_OF_COPY[aten_op(node.target)]
        if _root(node) in output_roots or view is aten.as_strided.default:
            continue
        # Eager decides on a real tensor of the input's layout: a fake `view` accepts some layouts eager
        # refuses (shape (2, 1, 2), strides (1, 2, 2) to [4]).
        args = fx.node.map_arg(node.args, lambda n: torch.empty_strided(
            n.meta["val"].shape, n.meta["val"].stride(), dtype=n.meta["val"].dtype))
        with pytest.raises(Exception):
            view(*args, **node.kwargs)


def _root(node: fx.Node) -> fx.Node:
    """The node owning ``node``'s storage if every view-copy were a view."""
    while node.op == "call_function":
        op = aten_op(node.target)
        aliases = op is None or op in VIEW_OF_COPY or bool(
            op._schema.returns and op._schema.returns[0].alias_info)
        if not aliases:
            break
        node = node.args[0]
    return node


def _module(build) -> fx.GraphModule:
    graph = fx.Graph()
    x = graph.placeholder("x")
    graph.output(build(graph, x))
    return fx.GraphModule(torch.nn.Module(), graph)


def _prepared(build, example):
    module = _module(build)
    propagate_values(module, [example])
    reference = copy.deepcopy(module)
    ReplaceViewCopyWithView()(module)
    x = example.clone()
    assert all(torch.equal(a, b) for a, b in zip(module(x.clone()), reference(x.clone())))
    return module


def test_write_to_result_keeps_the_copy():
    def build(g, x):
        s = g.call_function(aten.slice_copy.Tensor, (x, 0, 0, 2))
        g.call_function(aten.add_.Tensor, (s, 1.0))
        return (g.call_function(aten.clone.default, (x,)), g.call_function(aten.clone.default, (s,)))
    module = _prepared(build, torch.zeros(4, 3))
    assert len(_copies(module)) == 1


def test_write_to_base_after_the_view_keeps_the_copy():
    def build(g, x):
        y = g.call_function(aten.mul.Tensor, (x, 1.0))
        p = g.call_function(aten.permute_copy.default, (y, [1, 0]))
        g.call_function(aten.mul_.Tensor, (y, 3.0))
        return (g.call_function(aten.clone.default, (p,)),)
    module = _prepared(build, torch.ones(2, 3))
    assert len(_copies(module)) == 1


def test_write_through_getitem_of_split_keeps_the_copy():
    def build(g, x):
        y = g.call_function(aten.mul.Tensor, (x, 1.0))
        parts = g.call_function(aten.split_copy.Tensor, (y, 1))
        first = g.call_function(__import__("operator").getitem, (parts, 0))
        second = g.call_function(__import__("operator").getitem, (parts, 1))
        g.call_function(aten.add_.Tensor, (first, 5.0))
        return (g.call_function(aten.clone.default, (y,)), g.call_function(aten.clone.default, (second,)))
    module = _prepared(build, torch.ones(2, 3))
    assert len(_copies(module)) == 1


def test_write_before_the_view_allows_it():
    def build(g, x):
        y = g.call_function(aten.mul.Tensor, (x, 1.0))
        g.call_function(aten.add_.Tensor, (y, 1.0))
        p = g.call_function(aten.t_copy.default, (y,))
        return (g.call_function(aten.clone.default, (p,)),)
    module = _prepared(build, torch.ones(2, 3))
    assert not _copies(module)


def test_auto_functionalized_argument_keeps_the_copy():
    from torch._higher_order_ops.auto_functionalize import auto_functionalized

    lib = torch.library.Library("shimkit_test_views", "FRAGMENT")
    lib.define("bump(Tensor(a!) x) -> ()")
    lib.impl("bump", lambda x: x.add_(1), "CompositeExplicitAutograd")
    try:
        graph = fx.Graph()
        x = graph.placeholder("x")
        y = graph.call_function(aten.mul.Tensor, (x, 1.0))
        s = graph.call_function(aten.slice_copy.Tensor, (y, 0, 0, 1))
        graph.call_function(auto_functionalized, (torch.ops.shimkit_test_views.bump.default,), {"x": s})
        graph.output((graph.call_function(aten.clone.default, (y,)),))
        module = fx.GraphModule(torch.nn.Module(), graph)
        for node in module.graph.nodes:
            if node.op == "placeholder":
                node.meta["val"] = torch.empty(2, 2)
        assert not ReplaceViewCopyWithView()(module).modified
    finally:
        lib._destroy()


def test_chain_that_cannot_be_a_view_keeps_the_transpose_a_copy():
    # view(-1) of a transposed tensor is impossible, and Inductor lowers a view_copy left in place as a
    # view (a strided input would not compile), so the t stays a copy and the flattening, now of dense
    # memory, becomes a view.
    def build(g, x):
        y = g.call_function(aten.mul.Tensor, (x, 1.0))
        t = g.call_function(aten.t_copy.default, (y,))
        flat = g.call_function(aten.view_copy.default, (t, [6]))
        return (g.call_function(aten.clone.default, (flat,)),)
    module = _prepared(build, torch.arange(6.0).reshape(2, 3))
    assert [aten_op(n.target) for n in _copies(module)] == [aten.t_copy.default]


def test_chain_whose_consumer_can_view_the_strided_result_converts():
    # unsqueeze of a transposed tensor is a valid view, so both become views.
    def build(g, x):
        y = g.call_function(aten.mul.Tensor, (x, 1.0))
        t = g.call_function(aten.t_copy.default, (y,))
        lifted = g.call_function(aten.unsqueeze_copy.default, (t, 0))
        return (g.call_function(aten.clone.default, (lifted,)),)
    assert _copies(_prepared(build, torch.arange(6.0).reshape(2, 3))) == []


def test_views_that_would_alias_an_output_or_input_stay_copies():
    def build(g, x):
        return (g.call_function(aten.slice_copy.Tensor, (x, 0, 0, 1)),)
    assert len(_copies(_prepared(build, torch.ones(3, 2)))) == 1


def test_dense_input_policy_keeps_strided_results_away_from_shims():
    def build(g, x):
        y = g.call_function(aten.mul.Tensor, (x, 1.0))
        t = g.call_function(aten.permute_copy.default, (y, [1, 0]))
        return (g.call_function(aten.mm.default, (t, y)),)
    module = _module(build)
    propagate_values(module, [torch.ones(3, 3)])
    ReplaceViewCopyWithView(needs_dense_input=lambda op: op is aten.mm.default)(module)
    assert len(_copies(module)) == 1
    ReplaceViewCopyWithView()(module)
    assert not _copies(module)


def test_mutated_buffer_of_an_exported_program():
    class WithBuffer(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("state", torch.zeros(4))

        def forward(self, x):
            head = self.state[:2]
            self.state.add_(x)
            return head * 2, x[1:] * 3

    from executorch.exir import EdgeCompileConfig, to_edge

    program = to_edge(torch.export.export(WithBuffer(), (torch.ones(4),)),
                      compile_config=EdgeCompileConfig(_check_ir_validity=False)).exported_program()
    before = copy.deepcopy(program)
    ReplaceViewCopyWithView()(program)
    signature = program.graph_signature
    outputs = program.graph.output_node().args[0]
    written_back = {outputs[i].name for i, spec in enumerate(signature.output_specs)
                    if spec.kind.name == "BUFFER_MUTATION"}
    mutated_buffers = {spec.arg.name for spec in signature.input_specs if spec.target in signature.buffers_to_mutate.values()}
    remaining = _copies(program.graph_module)
    assert remaining and all(n.args[0].name in written_back | mutated_buffers for n in remaining)
    assert len(remaining) < len(_copies(before.graph_module))  # x[1:] became a view
    x = torch.arange(4.0)
    assert all(torch.equal(a, b) for a, b in zip(program.module()(x), before.module()(x)))


def test_rejects_unknown_ops():
    with pytest.raises(ValueError, match="not a view-copy op"):
        ReplaceViewCopyWithView(ops=[aten.add.Tensor])


def test_an_empty_piece_of_a_size_one_dimension_keeps_fresh_values():
    """Found by hypothesis: once ``permute`` is a view, its size-1 dimension has another stride, and a
    split there places its empty piece at another offset; neither addresses any memory."""
    def build(g, x):
        permuted = g.call_function(aten.permute_copy.default, (x, [1, 0]))
        parts = g.call_function(aten.split_with_sizes_copy.default, (permuted, [1, 0], 1))
        return tuple(g.call_function(aten.mul.Tensor, (g.call_function(operator.getitem, (parts, i)), 1.0))
                     for i in (0, 1))
    example = torch.tensor([[0.5, -1.5]])
    module = _prepared(build, example)
    assert _copies(module) == []
    assert_values_fresh(module, [example])

def test_a_flattened_attention_output_follows_the_layout_the_compiler_gives():
    """Export's CPU attention kernel returns the query's ``(B, L, H, D)`` storage, so ``transpose(1, 2)``
    then ``view_copy`` looks viewable; ``CudaBackend`` compiles SDPA with the math backend, which returns
    a contiguous ``(B, H, L, D)`` tensor, where a ``view`` cannot be formed (the H100's
    ``conformer_block`` failure). The converted node must still work on that layout."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    graph = fx.Graph()
    heads_last = [graph.call_function(aten.transpose_copy.int, (graph.placeholder(name), 1, 2)) for name in "qkv"]
    attended = graph.call_function(aten.scaled_dot_product_attention.default, tuple(heads_last))
    tokens = graph.call_function(aten.transpose_copy.int, (attended, 1, 2))
    flat = graph.call_function(aten.view_copy.default, (tokens, [1, 32, 64]))
    graph.output((graph.call_function(aten.mul.Tensor, (flat, 1.0)),))  # a bare graph's outputs may be written
    module = fx.GraphModule(torch.nn.Module(), graph)
    generator = torch.Generator().manual_seed(0)
    inputs = [torch.randn(1, 32, 4, 16, generator=generator) for _ in range(3)]
    propagate_values(module, inputs)
    expected = module(*inputs)[0]

    assert ReplaceViewCopyWithView()(module).modified
    assert _copies(module) == []
    # What the pass judged by: the fused kernel's layout, on which the flattening is a view.
    assert attended.meta["val"].transpose(1, 2).is_contiguous()
    with sdpa_kernel([SDPBackend.MATH]):
        torch.testing.assert_close(module(*inputs)[0], expected)


def test_view_copy_of_a_settled_layout_becomes_view_and_of_an_extern_result_reshape():
    # As upstream's pass writes it: a view where the input's layout cannot change (an input, a pointwise
    # result); reshape after an extern kernel (mm), whose output layout the compiler may choose.
    def build(g, x):
        of_input = g.call_function(aten.view_copy.default, (x, [3, 2]))
        of_pointwise = g.call_function(aten.view_copy.default, (g.call_function(aten.mul.Tensor, (x, 2.0)), [6]))
        product = g.call_function(aten.mm.default, (x, g.call_function(aten.t_copy.default, (x,))))
        of_extern = g.call_function(aten.view_copy.default, (product, [4]))
        return tuple(g.call_function(aten.clone.default, (v,)) for v in (of_input, of_pointwise, of_extern))
    module = _prepared(build, torch.arange(6.0).reshape(2, 3))
    targets = [aten_op(n.target) for n in module.graph.nodes if n.op == "call_function"
               and aten_op(n.target) in (aten.view.default, aten.reshape.default)]
    assert targets == [aten.view.default, aten.view.default, aten.reshape.default]


@pytest.mark.parametrize("start", [1, -3])
def test_narrow_copy_in_an_edge_program_becomes_something_the_edge_verifier_accepts(start):
    # narrow is not core ATen: in an edge program that transform() verifies it is written as the slice it is.
    from executorch.exir import to_edge

    class Narrow(torch.nn.Module):
        def forward(self, x):
            return torch.ops.aten.narrow_copy(x, 0, start, 2) * 2

    x = torch.randn(4, 3)
    edge = to_edge(torch.export.export(Narrow(), (x,)))
    program = edge.transform([ReplaceViewCopyWithView()]).exported_program()
    views = [(aten_op(n.target), n.args[1:]) for n in program.graph.nodes
             if aten_op(n.target) in (aten.slice.Tensor, aten.narrow.default, aten.narrow_copy.default)]
    assert views == [(aten.slice.Tensor, (0, 1, 3))]
    torch.testing.assert_close(program.module()(x), Narrow()(x))


def test_view_copy_in_an_edge_program_stays_a_copy_where_only_reshape_would_do():
    """reshape is not core ATen. Verified as an edge program, a view_copy after an extern kernel stays a
    copy (and so does a view feeding it); handed the ExportedProgram right before Inductor, as AotiBackend
    hands it, the pass writes reshape there. Both write view where the input's layout is settled."""
    from executorch.exir import to_edge

    class Flatten(torch.nn.Module):
        def forward(self, x, w):
            return (x * 2).view(6) + 1, torch.mm(x, w).unsqueeze(0).view(4) + 1

    inputs = (torch.randn(2, 3), torch.randn(3, 2))
    edge = to_edge(torch.export.export(Flatten(), inputs))
    verified = copy.deepcopy(edge).transform([ReplaceViewCopyWithView()]).exported_program()
    before_inductor = copy.deepcopy(edge).exported_program()
    ReplaceViewCopyWithView()(before_inductor)

    def ops(program):
        return [aten_op(n.target) for n in program.graph.nodes if n.op == "call_function"
                and aten_op(n.target) in (aten.view.default, aten.reshape.default, aten.view_copy.default,
                                          aten.unsqueeze.default, aten.unsqueeze_copy.default)]

    assert ops(verified) == [aten.view.default, aten.unsqueeze_copy.default, aten.view_copy.default]
    assert ops(before_inductor) == [aten.view.default, aten.unsqueeze.default, aten.reshape.default]
    for program in (verified, before_inductor):
        torch.testing.assert_close(program.module()(*inputs), Flatten()(*inputs))

"""``shimkit.passes.dense_operands``: the operands a shim reads through sizes() alone are handed over with
contiguous strides by Inductor's own prim, whatever layout reaches them, and nothing else in the graph changes."""

from __future__ import annotations

import torch
from hypothesis import given
from hypothesis import strategies as st
from torch._inductor import inductor_prims

from shimkit.backend import dense_operands, get_registry
from shimkit.passes.dense_operands import ContiguousOperands

FORCE = inductor_prims.force_stride_order


class Products(torch.nn.Module):
    def __init__(self, layout: str):
        super().__init__()
        self.layout = layout

    def forward(self, a, b):
        if self.layout == "transposed":
            a = a.t()
        elif self.layout == "sliced":
            a = a[:, ::2]
        return torch.mm(a, b), torch.mm(b.t(), b)


@given(layout=st.sampled_from(["contiguous", "transposed", "sliced"]), m=st.integers(1, 4), k=st.integers(1, 4))
def test_every_named_operand_goes_through_the_prim_and_the_values_are_unchanged(layout, m, k):
    a = torch.randn(k, m) if layout == "transposed" else torch.randn(m, 2 * k if layout == "sliced" else k)
    b = torch.randn(k, 3)
    module = Products(layout)
    program = torch.export.export(module, (a, b))
    graph_module = program.graph_module
    result = ContiguousOperands({torch.ops.aten.mm.default: ("self",)})(graph_module)
    assert result.modified
    calls = [n for n in graph_module.graph.nodes if n.target is torch.ops.aten.mm.default]
    assert len(calls) == 2
    for call in calls:
        (forced, mat2) = call.args
        assert forced.target is FORCE and forced.meta["val"].is_contiguous()
        assert forced.args[1] == list(forced.meta["val"].stride())
        assert mat2.target is not FORCE  # only the named operand
    assert ContiguousOperands({torch.ops.aten.mm.default: ("self",)})(graph_module).modified is False  # idempotent
    graph_module.recompile()
    torch.testing.assert_close(program.module()(a, b), module(a, b))


def test_the_builtin_plugins_declare_what_the_stock_shims_read_densely():
    declared = {str(op): names for op, names in dense_operands(get_registry().backend_config("mps")).items()}
    assert declared == {"aten.mm.default": ("self",), "aten.convolution.default": ("input", "weight"),
                        "aten.topk.default": ("self",),
                        "metal.gather_qmv.default": ("x", "w", "scales", "biases", "expert_indices"),
                        "metal.gated_delta_rule.default": ("q", "k", "v", "g", "beta")}


def test_an_op_that_writes_an_argument_is_found_inside_auto_functionalized_and_its_eager_strides_follow():
    """metal::gated_delta_rule writes its state in place, so it reaches post_grad as auto_functionalized_v2 with its
    operands by name; Inductor lowers a custom op with each operand in its recorded eager strides
    (``eager_input_vals``), which must become the dense ones or the copy is laid out strided again (Qwen 3.5's
    prefill: v of strides [15872, 1, 1984, 31] read as dense by op_gated_delta_rule.mm, wrong on a Mac)."""
    import executorch.backends.apple.metal.ops.gated_delta_rule  # noqa: F401  registers metal::gated_delta_rule
    from torch._higher_order_ops.auto_functionalize import auto_functionalized_v2

    op = torch.ops.metal.gated_delta_rule.default
    values = {"q": torch.randn(1, 3, 4, 64), "k": torch.randn(1, 3, 4, 64),
              "v": torch.randn(1, 256, 3).transpose(1, 2).reshape(1, 3, 4, 64),  # strided, as Qwen 3.5's
              "g": torch.rand(1, 3, 4), "beta": torch.rand(1, 3, 4), "state": torch.zeros(1, 4, 64, 64)}
    assert not values["v"].is_contiguous()
    graph = torch.fx.Graph()
    inputs = {}
    for name, value in values.items():
        inputs[name] = graph.placeholder(name)
        inputs[name].meta["val"] = value
    operands = {name: inputs[name] for name in ("q", "k", "v", "g", "beta")}
    call = graph.call_function(auto_functionalized_v2, (op,),
                               {**operands, "_state_base_index": 0, "_all_bases": [inputs["state"]]})
    call.meta["eager_input_vals"] = ((op,), {name: values[name] for name in operands})
    graph.output(call)
    module = torch.fx.GraphModule(torch.nn.Module(), graph)

    declared = dense_operands(get_registry().backend_config("mps"))
    assert ContiguousOperands(declared)(module).modified
    for name in operands:
        forced = call.kwargs[name]
        assert forced.target is FORCE and forced.args[0] is inputs[name] and forced.meta["val"].is_contiguous()
        assert call.meta["eager_input_vals"][1][name].is_contiguous()
    assert call.kwargs["_all_bases"] == [inputs["state"]]  # written in place: left as it is

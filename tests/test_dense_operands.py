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
                        "aten.topk.default": ("self",)}

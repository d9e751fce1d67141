"""DecomposeInPlace: same results as run_decompositions with the same table, without retracing."""

from __future__ import annotations

import copy

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch._decomp import decomposition_table
from torch.fx.passes.fake_tensor_prop import FakeTensorProp

from shimkit.passes import DecomposeInPlace, PassError
from shimkit.passes.meta import layout, same_layout
from shimkit.passes.ops import aten_op
from shimkit.backend import backend_config

aten = torch.ops.aten
TABLE = {op: decomposition_table[op] for op in (aten.native_layer_norm.default, aten.gelu.default,
                                                aten._softmax.default, aten.addmm.default)}
STEPS = ("layer_norm", "gelu", "gelu_tanh", "softmax", "linear", "linear_no_bias", "addmm")


class Drawn(torch.nn.Module):
    def __init__(self, steps, width):
        super().__init__()
        self.steps = steps
        self.norm = torch.nn.LayerNorm(width)
        self.linear = torch.nn.Linear(width, width)
        self.bare = torch.nn.Linear(width, width, bias=False)
        self.bias = torch.nn.Parameter(torch.randn(width))

    def forward(self, x):
        for step in self.steps:
            if step == "layer_norm":
                x = self.norm(x)
            elif step.startswith("gelu"):
                x = torch.nn.functional.gelu(x, approximate="tanh" if step.endswith("tanh") else "none")
            elif step == "softmax":
                x = torch.softmax(x, dim=-1)
            elif step == "linear":
                x = self.linear(x)
            elif step == "linear_no_bias":
                x = self.bare(x)
            else:
                x = torch.addmm(self.bias, x.reshape(-1, x.shape[-1]), self.bare.weight, beta=0.5, alpha=2.0
                                ).reshape(x.shape)
        return x, x.sum()


def core_program(module, example):
    return torch.export.export(module, (example,)).run_decompositions()


def program_inputs(program, user_inputs):
    state = {**program.state_dict, **program.constants}
    values = []
    for spec in program.graph_signature.input_specs:
        values.append(state[spec.target] if spec.target is not None else user_inputs.pop(0))
    return values


def assert_fresh_values(program, user_inputs):
    module = copy.deepcopy(program.graph_module)
    FakeTensorProp(module).propagate(*program_inputs(program, list(user_inputs)))
    for old, new in zip(program.graph.nodes, module.graph.nodes):
        if "val" in new.meta and isinstance(new.meta["val"], torch.Tensor):
            assert same_layout(layout(old.meta["val"]), layout(new.meta["val"])), old.format_node()


@settings(max_examples=12, deadline=None)
@given(steps=st.lists(st.sampled_from(STEPS), min_size=1, max_size=4),
       rows=st.sampled_from([1, 3]), width=st.sampled_from([2, 5]), strided=st.booleans())
def test_matches_run_decompositions(steps, rows, width, strided):
    torch.manual_seed(0)
    example = torch.randn(rows, width)
    program = core_program(Drawn(steps, width).eval(), example)
    ours = copy.deepcopy(program)
    result = DecomposeInPlace(TABLE)(ours)
    theirs = program.run_decompositions(TABLE)

    x = torch.randn(width, rows).t() if strided else torch.randn(rows, width)
    for mine, upstream in zip(ours.module()(x), theirs.module()(x)):
        torch.testing.assert_close(mine, upstream, rtol=1e-5, atol=1e-6)
    assert not any(aten_op(n.target) in TABLE for n in ours.graph.nodes if n.op == "call_function")
    assert result.modified == any(aten_op(n.target) in TABLE for n in program.graph.nodes if n.op == "call_function")
    assert not DecomposeInPlace(TABLE)(ours).modified  # idempotent
    # Signature intact: same inputs, outputs named after nodes that exist.
    assert ours.graph_signature.input_specs == program.graph_signature.input_specs
    names = {n.name for n in ours.graph.nodes}
    assert all(spec.arg.name in names for spec in ours.graph_signature.output_specs)
    ours.validate()
    assert_fresh_values(ours, [example])


def test_edge_graph_keeps_its_dialect_and_provenance():
    from executorch.exir import EdgeCompileConfig, to_edge
    from executorch.exir.dialects.edge._ops import EdgeOpOverload

    module = Drawn(("layer_norm", "linear", "gelu"), 4).eval()
    program = to_edge(torch.export.export(module, (torch.randn(2, 4),)),
                      compile_config=EdgeCompileConfig(_check_ir_validity=False)).exported_program()
    layer_norm = next(n for n in program.graph.nodes if aten_op(n.target) is aten.native_layer_norm.default)
    trace = layer_norm.meta["stack_trace"]
    DecomposeInPlace(TABLE)(program)
    spliced = [n for n in program.graph.nodes if n.name.startswith(layer_norm.name + "_")]
    assert spliced and all(isinstance(n.target, EdgeOpOverload) or n.target.__name__ == "getitem" for n in spliced)
    assert all(n.meta["stack_trace"] == trace for n in spliced)
    x = torch.randn(2, 4)
    torch.testing.assert_close(program.module()(x)[0], module(x)[0])


def test_identical_nodes_are_traced_once():
    program = core_program(Drawn(("gelu", "layer_norm", "gelu", "layer_norm"), 3).eval(), torch.randn(2, 3))
    decompose = DecomposeInPlace(TABLE)
    decompose(program)
    assert len(decompose._templates) == 2


def test_failing_decomposition_names_the_node_and_source_line():
    def broken(x, approximate="none"):
        raise ValueError("no gelu today")

    program = core_program(Drawn(("gelu",), 3).eval(), torch.randn(2, 3))
    with pytest.raises(PassError, match=r"\[plugin_decompositions\] at .*gelu.*test_passes_decompose.py.*no gelu today"):
        DecomposeInPlace({aten.gelu.default: broken})(program)


def test_registry_spelling_and_capabilities():
    
    capabilities = backend_config("mps").capabilities
    decompose = DecomposeInPlace.from_capabilities(capabilities)
    assert aten.baddbmm.default in decompose.table
    assert DecomposeInPlace({"aten::gelu": TABLE[aten.gelu.default]}).table.keys() == {aten.gelu.default}

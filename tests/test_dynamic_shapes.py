"""Programs exported with dynamic dimensions stay right at every size their bounds allow.

The cumsum decomposition once ran as many scan steps as the example length needed: exported at
length 16 it was exact at 16 and off by 0.9 at 17. These tests run what the mps pipeline leaves at
sizes other than the example, and check that anything deciding on a symbolic size is refused.
"""

from __future__ import annotations

import pytest
import torch
from executorch.exir import to_edge
from torch.export import Dim, export

from shimkit.passes import DecomposeInPlace, PassError, Pipeline
from shimkit.passes.decompose import DECLINED_META, recording_declines
from shimkit.passes.pipeline import PipelineError
from shimkit.registry import DecompositionDeclined
from shimkit.backend import backend_config, pipeline as device_pipeline

CUMSUM = "aten::cumsum.default"


class Cumsum(torch.nn.Module):
    def __init__(self, dim=1, dtype=None):
        super().__init__()
        self.dim, self.dtype = dim, dtype

    def forward(self, x):
        return torch.cumsum(x, self.dim, dtype=self.dtype)


def edge_program(module, example, dynamic_shapes):
    return to_edge(export(module, (example,), dynamic_shapes=dynamic_shapes)).exported_program()


def ops_in(program):
    return {str(n.target) for n in program.graph.nodes if n.op == "call_function"}


@pytest.mark.parametrize("dtype, tolerance", [(torch.float32, 1e-5), (torch.int64, 0), (torch.bfloat16, 1e-2)])
def test_cumsum_after_the_mps_pipeline_is_right_at_every_length_in_bounds(dtype, tolerance):
    generator = torch.Generator().manual_seed(0)
    example = torch.randint(-5, 5, (2, 16), generator=generator).to(dtype)
    program = edge_program(Cumsum(), example, ({1: Dim("seq", min=2, max=128)},))
    device_pipeline("mps")(program)
    assert not any("cumsum" in op for op in ops_in(program))
    for length in (2, 3, 15, 16, 17, 64, 100, 127, 128):
        x = torch.randint(-5, 5, (2, length), generator=generator).to(dtype)
        expected = torch.cumsum(x, 1)
        actual = program.module()(x)
        assert actual.dtype == expected.dtype
        torch.testing.assert_close(actual, expected, atol=tolerance, rtol=tolerance, msg=f"length {length}")


def test_cumsum_over_a_dimension_without_upper_bound_is_declined_and_says_why():
    program = edge_program(Cumsum(), torch.randn(2, 16), ({1: Dim("seq", min=2)},))
    with recording_declines() as declines:
        device_pipeline("mps")(program)
    node = next(n for n in program.graph.nodes if "cumsum" in str(n.target))  # left in place
    assert "no upper bound" in node.meta[DECLINED_META]
    assert [(d.op, d.node) for d in declines] == [("aten::cumsum", node.name)]
    assert "Dim(..., max=N)" in declines[0].reason and "test_dynamic_shapes.py" in declines[0].where


def test_a_declined_decomposition_becomes_notimplemented_in_the_backend_table():
    entry = backend_config("mps").decomposition_table[torch.ops.aten.cumsum.default]

    def declining(*args, **kwargs):
        raise DecompositionDeclined("not here")

    from shimkit.registry.errors import declining_as_not_implemented
    assert declining_as_not_implemented(declining)(torch.ones(2), 0) is NotImplemented
    torch.testing.assert_close(entry(torch.arange(5.0), 0), torch.cumsum(torch.arange(5.0), 0))


def test_a_static_cumsum_still_decomposes_with_the_static_length():
    program = edge_program(Cumsum(dim=-1), torch.randn(3, 5), None)
    device_pipeline("mps")(program)
    x = program.example_inputs[0][0] if program.example_inputs else torch.randn(3, 5)
    torch.testing.assert_close(program.module()(x), torch.cumsum(x, -1))


def test_a_decomposition_that_branches_on_a_dynamic_size_is_refused_naming_node_and_guard():
    def example_sized(x, dim, *, dtype=None):
        return x * 2 if x.shape[1] > 10 else x

    program = edge_program(Cumsum(), torch.randn(2, 16), ({1: Dim("seq", min=2, max=100)},))
    with pytest.raises(PassError, match=r"branches on a dynamic size \(guard s\d+ > 10\)") as caught:
        DecomposeInPlace({CUMSUM: example_sized})(program)
    assert "aten_cumsum_default" in str(caught.value) and "example_sized" in str(caught.value)


def test_a_pass_that_guards_on_a_dynamic_size_fails_the_pipeline():
    def specialise(graph_module):
        for node in graph_module.graph.nodes:
            value = node.meta.get("val")
            if isinstance(value, torch.Tensor) and value.dim() == 2 and value.shape[1] == 16:
                node.meta["seen"] = True

    program = edge_program(Cumsum(), torch.randn(2, 16), ({1: Dim("seq", min=2, max=100)},))
    with pytest.raises(PipelineError, match=r"pass 'specialise' guarded on a dynamic size"):
        Pipeline([("specialise", specialise)])(program)


def test_declining_inside_a_decomposition_is_not_reported_as_a_trace_failure():
    def never(x, dim, *, dtype=None):
        raise DecompositionDeclined("never here")

    program = edge_program(Cumsum(), torch.randn(2, 4), None)
    assert DecomposeInPlace({CUMSUM: never})(program).modified is False
    node = next(n for n in program.graph.nodes if "cumsum" in str(n.target))
    assert node.meta[DECLINED_META] == "never here"

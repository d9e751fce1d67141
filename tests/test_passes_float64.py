"""The float64 policy: Metal has no double, so float64 computation fails to lower by default (faithfully), and
with the opt-in it is computed as float32, every changed node named, the error against float64 eager held to
float32's tolerance. Checked on the six OpInfo entries that compute in float64 and on a model of our own."""

from __future__ import annotations

import pytest
import torch
from executorch.exir import to_edge

from shimkit.audit.coverage import audit_op
from shimkit.audit.loader import LoadedModel
from shimkit.audit.options import AuditOptions
from shimkit.audit.report import to_json
from shimkit.audit.runner import AuditRun, audit_loaded
from shimkit.backend import get_registry
from shimkit.passes import PassError
from shimkit.passes.float64 import Float64AsFloat32, lower_float64_as_float32

# The OpInfo entries whose float32 samples compute in float64 (docs/coverage.md).
FLOAT64_OPS = ("double", "float_power", "log_softmax.with_dtype", "nn.functional.softmin.with_dtype",
               "softmax.with_dtype", "to")


class Mixed(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.scale = torch.nn.Parameter(torch.linspace(0.5, 2.0, 5, dtype=torch.float64))

    def forward(self, x, y):
        probabilities = torch.softmax(x, -1, dtype=torch.float64)
        return probabilities * self.scale + y, x.sum()


def _inputs():
    generator = torch.Generator().manual_seed(0)
    return torch.randn(3, 5, generator=generator), torch.randn(3, 5, generator=generator, dtype=torch.float64)


def _float64_nodes(program):
    return [n.name for n in program.graph.nodes
            if isinstance(n.meta.get("val"), torch.Tensor) and n.meta["val"].dtype == torch.float64]


def test_the_pass_computes_float64_as_float32_and_names_every_node_it_changed():
    program = torch.export.export(Mixed(), _inputs())
    assert _float64_nodes(program)
    lowered, changes = lower_float64_as_float32(program)
    assert _float64_nodes(lowered) == []
    assert all(value.dtype == torch.float32 for value in lowered.state_dict.values())
    assert {change.node for change in changes} >= {"p_scale", "y"}
    softmax = next(change for change in changes if "softmax" in change.op)
    assert "torch.softmax(x, -1, dtype=torch.float64)" in softmax.where  # the user's source line
    # still a program the edge dialect takes, computing what eager computes, at float32 precision
    edge = to_edge(lowered).exported_program()
    x, y = _inputs()
    got, total = edge.module()(x, y.float())
    want, want_total = Mixed()(x, y)
    assert got.dtype == torch.float32 and want.dtype == torch.float64
    torch.testing.assert_close(got.double(), want, rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(total, want_total)


def test_a_program_without_float64_is_left_as_it_is():
    program = torch.export.export(torch.nn.Linear(4, 2), (torch.randn(3, 4),))
    before = str(program.graph)
    lowered, changes = lower_float64_as_float32(program)
    assert lowered is program and changes == [] and str(program.graph) == before
    assert Float64AsFloat32()(program).modified is False


def test_the_pass_refuses_a_bare_graph_naming_itself():
    graph_module = torch.fx.symbolic_trace(torch.nn.ReLU())
    with pytest.raises(PassError, match=r"\[float64_as_float32\].*ExportedProgram"):
        Float64AsFloat32()(graph_module)


def test_the_audit_lists_the_changed_nodes_and_checks_numbers_against_float64_eager():
    config = get_registry().backend_config("mps")
    refused = audit_loaded(LoadedModel("mixed", Mixed(), _inputs()), config=config)
    assert refused.status == "error" and "float64" in refused.failure.message and refused.precision == []
    audit = audit_loaded(LoadedModel("mixed", Mixed(), _inputs()), config=config,
                         options=AuditOptions(float64="float32", numerics=True))
    assert audit.status == "clean", (audit.failure, audit.numerics)
    assert audit.numerics.checks and all(check.ok for check in audit.numerics.checks)
    entry = to_json(AuditRun([audit], True, get_registry(), config))["models"][0]
    assert {change["node"] for change in entry["precision"]} >= {"p_scale", "y"}
    with pytest.raises(ValueError, match="float64 policy must be one of refuse, float32; got 'float16'"):
        AuditOptions(float64="float16")


@pytest.mark.parametrize("name", FLOAT64_OPS)
def test_the_opinfo_float64_entries_lower_clean_with_the_opt_in_and_compute_right(name):
    result = audit_op(name, "float32", AuditOptions(float64="float32", numerics=True))
    assert result.stock == "error" and "float64" in result.stock_detail  # stock and the default fail alike
    assert result.shimkit == "clean" and result.shimkit_detail.startswith("max error"), result

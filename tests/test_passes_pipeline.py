"""Pipeline: ordering, fixed point, check mode, report, foreign passes, AotiBackend-style calls."""

from __future__ import annotations

import copy

import pytest
import torch
from torch import fx

from passes_helpers import propagate_values
from shimkit.backend import pipeline as device_pipeline
from shimkit.passes import (DecomposeLinear, PassContext, PassError, Pipeline, PipelineError,
                            ReplaceViewCopyWithView, ShimkitPass)

aten = torch.ops.aten


class Model(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(4, 6)

    def forward(self, x):
        a, b = self.linear(x).split(3, dim=-1)
        return (a * b).permute(1, 0) + 1


def edge_program():
    from executorch.exir import EdgeCompileConfig, to_edge

    return to_edge(torch.export.export(Model().eval(), (torch.randn(2, 4),)),
                   compile_config=EdgeCompileConfig(_check_ir_validity=False)).exported_program()


class Named(ShimkitPass):
    def __init__(self, name, log, after=(), before=(), changes=0):
        self.name, self.log, self.after, self.before, self.changes = name, log, after, before, changes

    def transform(self, graph, context):
        self.log.append(self.name)
        if self.changes:
            self.changes -= 1
            return True
        return False


def test_order_follows_constraints_and_keeps_the_rest():
    log = []
    pipeline = Pipeline([Named("c", log, after=("b",)), Named("a", log), Named("b", log)], order=[("a", "b")])
    assert pipeline.names == ["a", "b", "c"]
    with pytest.raises(PipelineError, match="cycle: a -> b -> a"):
        Pipeline([Named("a", log, after=("b",)), Named("b", log, after=("a",))])
    with pytest.raises(PipelineError, match="two passes are named 'a'"):
        Pipeline([Named("a", log), Named("a", log)])


def test_fixed_point_reruns_only_what_may_change_and_is_bounded():
    module = fx.symbolic_trace(torch.nn.ReLU())
    log = []
    pipeline = Pipeline([Named("once", log, changes=1), Named("steady", log)])
    assert pipeline(module).modified
    # Iteration 2 re-runs nothing: no pass changed the graph after "once" (idempotent) or "steady" ran.
    assert log == ["once", "steady"] and pipeline.report.iterations == 2
    log.clear()
    pipeline = Pipeline([Named("steady", log), Named("once", log, changes=1)])
    pipeline(module)
    assert log == ["steady", "once", "steady"]  # "steady" must see what "once" changed
    busy = Named("busy", [], changes=10)
    busy.idempotent = False
    with pytest.raises(PipelineError, match="did not reach a fixed point in 3 iterations; still changing the graph: busy"):
        Pipeline([busy], max_iterations=3)(module)


def test_report_counts_nodes_by_op():
    program = edge_program()
    pipeline = Pipeline([DecomposeLinear(), ReplaceViewCopyWithView()])
    pipeline(program)
    records = pipeline.report.by_pass()
    view_changes = records["view_copy_to_view"][0].changes
    assert view_changes["aten::split_with_sizes_copy"] == (1, 0)
    assert "view_copy_to_view" in str(pipeline.report) and "ms" in str(pipeline.report)


def test_check_mode_names_the_pass_that_broke_meta():
    class Corrupt(ShimkitPass):
        name = "corrupt"

        def transform(self, graph, context):
            node = next(n for n in graph.nodes if n.op == "call_function")
            node.meta["val"] = torch.empty(7, 7, device="meta")
            return True

    graph = fx.Graph()
    x = graph.placeholder("x")
    graph.output(graph.call_function(aten.mul.Tensor, (x, 2.0)))
    module = fx.GraphModule(torch.nn.Module(), graph)
    propagate_values(module, [torch.ones(2)])
    with pytest.raises(PipelineError, match="pass 'corrupt' left a stale meta"):
        Pipeline([Corrupt()], check=True)(module)


def test_called_like_aotibackend_calls_custom_passes():
    """AotiBackend: pass(ep) if requires_exported_program else pass(ep.graph_module); result ignored."""
    program = edge_program()
    reference = copy.deepcopy(program)
    pipeline = Pipeline([DecomposeLinear(), ReplaceViewCopyWithView()], check=True)
    assert pipeline.requires_exported_program
    pipeline(program) if pipeline.requires_exported_program else pipeline(program.graph_module)
    x = torch.randn(2, 4)
    torch.testing.assert_close(program.module()(x), reference.module()(x))
    # The module's code is regenerated on first use, not inside the pass.
    torch.testing.assert_close(program.graph_module(*program_inputs(program, x))[0], reference.module()(x))
    code = program.graph_module.code
    assert "_ops_aten_split_with_sizes_default(" in code and "_ops_aten_split_with_sizes_copy" not in code


def program_inputs(program, x):
    state = {**program.state_dict, **program.constants}
    return [state[s.target] if s.target is not None else x for s in program.graph_signature.input_specs]


def test_foreign_and_nested_passes():
    from executorch.backends.aoti.passes.replace_view_copy_with_view import ReplaceViewCopyWithViewPass
    from executorch.exir import EdgeCompileConfig, to_edge

    class Sliced(torch.nn.Module):
        def forward(self, x):
            return x[:, 1:] * 2

    program = to_edge(torch.export.export(Sliced(), (torch.randn(2, 4),)),
                      compile_config=EdgeCompileConfig(_check_ir_validity=False)).exported_program()
    inner = Pipeline([("upstream_views", ReplaceViewCopyWithViewPass())], name="inner")
    outer = Pipeline([DecomposeLinear(), inner])
    assert outer(program).modified
    assert [r.name for r in outer.report.records] == ["decompose_linear", "inner", "decompose_linear", "inner"]
    assert [r.modified for r in inner.report.records] == [False]  # the last run found nothing left
    x = torch.randn(2, 4)
    torch.testing.assert_close(program.module()(x), x[:, 1:] * 2)


def test_pass_errors_name_the_pass():
    class Broken(ShimkitPass):
        name = "broken"

        def transform(self, graph, context: PassContext):
            raise KeyError("boom")

    with pytest.raises(PassError, match=r"\[broken\]: KeyError"):
        Pipeline([Broken()])(fx.symbolic_trace(torch.nn.ReLU()))


def test_pipeline_for_device_uses_the_registry():
    pipeline = device_pipeline("mps")
    assert pipeline.names[-2:] == ["view_copy_to_view", "forget_stale_unbacked_symbols"]
    assert "addmm_to_mm" in pipeline.names

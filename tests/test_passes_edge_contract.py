"""Issue 31, item 5: every graph pass offered for edge programs leaves one that the edge verifier accepts.

ExecuTorch's backends apply a pass to an edge program with ``edge_manager.transform([pass])``, which runs
the edge verifier on the result. For each graph-stage pass of the registry (mps and cuda, and the linear and
addmm policies where the device has no addmm shim, so that they act), on random edge programs: the
transform is accepted and the program computes what it computed before. A pass valid only right before
Inductor (``only_before_inductor``) must instead refuse an edge program, naming itself.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
from types import MappingProxyType
from typing import Any

import pytest
import torch
from hypothesis import HealthCheck, given, settings

from shimkit.backend import backend_config
from shimkit.passes import AddmmPolicy, DecomposeInPlace, DecomposeLinear, PassError
from shimkit.plugins.addmm import addmm_decomposition
from shimkit.testing import INPLACE_OPS, MATMUL_OPS, POINTWISE_OPS, VIEW_COPY_OPS, graphs, observe

# unfold_copy cannot reach an edge program at all: to_edge decomposes it to aten.unfold and then refuses
# that (not core ATen), with or without shimkit.
VIEWS = tuple(op for op in VIEW_COPY_OPS if op != "aten::unfold_copy.default")
# Core ATen ops (they survive to_edge) that the mps plugins decompose: plugin_decompositions acts on them.
DECOMPOSED_ON_MPS = ("aten::cumsum.default", "aten::sinh.default")
OPS = VIEWS + INPLACE_OPS + POINTWISE_OPS + MATMUL_OPS + DECOMPOSED_ON_MPS
LINEAR = torch.ops.aten.linear.default


@functools.cache
def _graph_passes() -> dict[str, Any]:
    """The registry's graph-stage passes by device, one instance each, reused across programs as a backend
    reuses them across the methods it lowers."""
    passes = {}
    for device in ("mps", "cuda"):
        config = backend_config(device)
        passes.update({f"{device}:{name}": graph_pass for name, graph_pass in zip(config.pass_names, config.passes)})
    # Both devices keep addmm (a shim on mps, Triton on cuda), so there the policies leave the program alone.
    mps = backend_config("mps").capabilities
    without_addmm = dataclasses.replace(mps, shims=MappingProxyType(
        {op: shim for op, shim in mps.shims.items() if "addmm" not in str(op)}))
    passes["mps without an addmm shim:decompose_linear"] = DecomposeLinear.from_capabilities(without_addmm)
    passes["mps without an addmm shim:addmm_to_mm"] = AddmmPolicy.from_capabilities(without_addmm)
    passes["mps without an addmm shim:plugin_decompositions"] = DecomposeInPlace.from_capabilities(without_addmm)
    return passes


def _edge_passes() -> dict[str, Any]:
    return {name: p for name, p in _graph_passes().items() if not getattr(p, "only_before_inductor", False)}


def _edge_manager(exported: torch.export.ExportedProgram) -> Any:
    from executorch.exir import EdgeCompileConfig, to_edge

    # linear is kept whole so that the linear policy has something to decompose. The config is built for
    # each program: ExecuTorch 1.5's verifiers extend the preserve_ops list they are given with the config's
    # own preserve_ops, and to_edge hands them that very list, so each to_edge quadruples
    # config.preserve_ops; one config shared by all examples grew to gigabytes after a dozen.
    config = EdgeCompileConfig(_core_aten_ops_exception_list=[LINEAR], preserve_ops=[LINEAR])
    return to_edge(exported, compile_config=config)


def _root_cause(error: BaseException) -> BaseException:
    while error.__cause__ is not None:
        error = error.__cause__
    return error


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(program=graphs(OPS, form="edge", max_calls=5))
def test_edge_passes_leave_a_program_the_edge_verifier_accepts(program):
    edge = _edge_manager(program.exported_program())
    expected = observe(edge.exported_program(), program.example_inputs())
    for name, graph_pass in _edge_passes().items():
        # transform() hands the pass the manager's own graph module: each pass gets a copy of the program.
        try:
            transformed = copy.deepcopy(edge).transform([graph_pass])
        except Exception as error:
            raise AssertionError(f"[{name}] the edge verifier refused the transformed program: "
                                 f"{type(_root_cause(error)).__name__}: {_root_cause(error)}\n\n"
                                 f"program: {program!r}") from error
        actual = observe(transformed.exported_program(), program.example_inputs())
        torch.testing.assert_close(actual, expected, equal_nan=True,
                                   msg=lambda m: f"[{name}] changed what the program computes: {m}\n\n"
                                                 f"program: {program!r}")


def test_passes_valid_only_before_inductor_refuse_an_edge_program():
    class Scaled(torch.nn.Module):
        def forward(self, x):
            return x / 5.66

    edge = _edge_manager(torch.export.export(Scaled(), (torch.randn(2, 3),)))
    refusing = {name: p for name, p in _graph_passes().items() if getattr(p, "only_before_inductor", False)}
    assert "mps:inline_scalar_constants" in refusing
    for name, graph_pass in refusing.items():
        with pytest.raises(Exception) as raised:
            copy.deepcopy(edge).transform([graph_pass])
        cause = _root_cause(raised.value)
        assert isinstance(cause, PassError) and cause.pass_name == graph_pass.pass_name, cause
        assert "only right before Inductor" in str(cause)


def test_a_decomposition_traced_in_half_precision_writes_dim_order_ops_in_an_edge_program():
    # addmm in float16 is computed in float32 and rounded once: _to_copy, which the edge dialect writes as
    # dim_order_ops._to_dim_order_copy.
    from executorch.exir.dialects.edge._ops import EdgeOpOverload

    class Addmm(torch.nn.Module):
        def forward(self, bias, a, b):
            return torch.addmm(bias, a, b, beta=0.5, alpha=2)

    inputs = tuple(torch.randn(*shape, dtype=torch.float16) for shape in ((2,), (3, 5), (5, 2)))
    edge = _edge_manager(torch.export.export(Addmm(), inputs))
    program = copy.deepcopy(edge).transform([AddmmPolicy(addmm_decomposition)]).exported_program()
    targets = [n.target for n in program.graph.nodes if n.op == "call_function"]
    assert all(isinstance(t, EdgeOpOverload) for t in targets)
    assert {t._op.name() for t in targets} >= {"dim_order_ops::_to_dim_order_copy", "aten::mm"}
    torch.testing.assert_close(program.module()(*inputs), edge.exported_program().module()(*inputs))


def test_a_decomposition_the_edge_dialect_cannot_hold_is_refused_naming_the_op():
    def by_unfold(x):  # aten.unfold is not core ATen, and to_edge has no decomposition for it
        return x.unfold(0, 1, 1).sum(-1)

    class Negate(torch.nn.Module):
        def forward(self, x):
            return -x

    edge = _edge_manager(torch.export.export(Negate(), (torch.randn(3),)))
    with pytest.raises(Exception) as raised:
        edge.transform([DecomposeInPlace({torch.ops.aten.neg.default: by_unfold})])
    cause = _root_cause(raised.value)
    assert isinstance(cause, PassError) and cause.pass_name == "plugin_decompositions"
    assert "aten.unfold.default, which is not core ATen" in str(cause) and "neg" in str(cause)

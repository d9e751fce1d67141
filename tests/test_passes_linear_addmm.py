"""Linear and addmm policy: no addmm reaches Inductor where the device has no addmm shim."""

from __future__ import annotations

import copy
import dataclasses
import math
from types import MappingProxyType

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from shimkit.passes import AddmmPolicy, DecomposeLinear, PassError
from shimkit.passes.inductor import PostGradPipeline
from shimkit.passes.ops import aten_op
from shimkit.plugins.addmm import addmm_decomposition
from shimkit.backend import backend_config, inductor_options

aten = torch.ops.aten


def _ops(program):
    return [aten_op(n.target) for n in program.graph.nodes if n.op == "call_function"]


class Linear(torch.nn.Module):
    def __init__(self, features, out, bias):
        super().__init__()
        self.linear = torch.nn.Linear(features, out, bias=bias)

    def forward(self, x):
        return self.linear(x)


@settings(max_examples=15, deadline=None)
@given(shape=st.sampled_from([(4,), (1, 4), (3, 4), (1, 1, 4), (2, 3, 4)]), out=st.sampled_from([1, 5]),
       bias=st.booleans())
def test_linear_with_bias_becomes_mm_and_add(shape, out, bias):
    module = Linear(shape[-1], out, bias).eval()
    program = torch.export.export(module, (torch.randn(shape),))
    before = copy.deepcopy(program)
    result = DecomposeLinear()(program)
    assert result.modified == bias
    ops = _ops(program)
    assert (aten.linear.default in ops) == (not bias)
    assert aten.addmm.default not in ops
    assert not DecomposeLinear()(program).modified
    x = torch.randn(shape)
    torch.testing.assert_close(program.module()(x), module(x))
    # The core-ATen form Inductor starts from has no addmm either (its re-fusion is the post-grad pass's job).
    assert aten.addmm.default not in _ops(program.run_decompositions())
    assert DecomposeLinear(keep_addmm=True)(before).modified is False


class Addmm(torch.nn.Module):
    def __init__(self, beta, alpha):
        super().__init__()
        self.beta, self.alpha = beta, alpha

    def forward(self, bias, a, b):
        return torch.addmm(bias, a, b, beta=self.beta, alpha=self.alpha)


@settings(max_examples=20, deadline=None)
@given(m=st.sampled_from([1, 3]), k=st.sampled_from([1, 4]), n=st.sampled_from([1, 2]),
       beta=st.sampled_from([0, 0.0, 1, 0.5, -2.0]), alpha=st.sampled_from([1, 0.5, 0.0]),
       bias_shape=st.sampled_from(["row", "full", "scalar_row"]), poison=st.sampled_from([math.nan, math.inf, None]))
def test_addmm_rewrite_has_exact_beta_alpha_semantics(m, k, n, beta, alpha, bias_shape, poison):
    shape = {"row": (n,), "full": (m, n), "scalar_row": (1, n)}[bias_shape]
    bias, a, b = torch.randn(shape), torch.randn(m, k), torch.randn(k, n)
    if poison is not None and beta == 0:
        bias = torch.full(shape, poison)  # beta == 0 must ignore self entirely
    module = Addmm(beta, alpha)
    program = torch.export.export(module, (bias, a, b))
    AddmmPolicy(addmm_decomposition)(program)
    assert aten.addmm.default not in _ops(program)
    torch.testing.assert_close(program.module()(bias, a, b), torch.addmm(bias, a, b, beta=beta, alpha=alpha),
                               equal_nan=True)


def test_addmm_policy_follows_the_registry():
    """Metal keeps addmm for its shim and CUDA for its Triton GEMM templates (the addmm plugin limits its
    decomposition to mps); a Metal registry without the shim gets the decomposition."""
    program = torch.export.export(Addmm(1, 1), (torch.randn(2), torch.randn(3, 4), torch.randn(4, 2)))
    metal = backend_config("mps").capabilities
    with_shim = AddmmPolicy.from_capabilities(metal)
    compiled = AddmmPolicy.from_capabilities(backend_config("cuda").capabilities)
    without = AddmmPolicy.from_capabilities(dataclasses.replace(metal, shims=MappingProxyType({})))
    assert with_shim.keep and not with_shim(copy.deepcopy(program)).modified
    assert compiled.keep and not compiled(copy.deepcopy(program)).modified
    assert not without.keep and without(program).modified
    assert aten.addmm.default not in _ops(program)
    with pytest.raises(PassError, match="no aten::addmm shim and no plugin"):
        AddmmPolicy(None)(torch.export.export(Addmm(1, 1), (torch.randn(2), torch.randn(3, 4), torch.randn(4, 2))))


def test_post_grad_pipeline_unfuses_inductors_addmm():
    """Inductor re-fuses mm + bias (and lowers linear) to addmm; the post-grad pass takes it apart."""
    from torch._inductor import config
    from torch._inductor.utils import run_and_get_code

    pipeline = PostGradPipeline([AddmmPolicy(addmm_decomposition, name="unfuse_addmm")], ["unfuse_addmm"])
    module = torch.nn.Linear(8, 5).eval()
    x = torch.randn(6, 8)
    results = {}
    for label, options in (("stock", {}), ("shimkit", {"post_grad_custom_post_pass": pipeline})):
        torch._dynamo.reset()
        with config.patch({**options, "fx_graph_cache": False}), torch.no_grad():
            out, (code, *_) = run_and_get_code(torch.compile(module), x)
        results[label] = "extern_kernels.addmm" in code
        torch.testing.assert_close(out, module(x))
    assert results == {"stock": True, "shimkit": False}
    assert any(r.modified for r in pipeline.report.records)


def test_post_grad_uuid_is_stable_and_follows_configuration():
    first = PostGradPipeline([AddmmPolicy(addmm_decomposition)], ["unfuse_addmm"])
    again = PostGradPipeline([AddmmPolicy(addmm_decomposition)], ["unfuse_addmm"])
    kept = PostGradPipeline([AddmmPolicy(addmm_decomposition, keep=True)], ["unfuse_addmm"])
    assert first.uuid() == again.uuid() != kept.uuid()
    options = inductor_options(backend_config("cuda"))
    assert isinstance(options["post_grad_custom_post_pass"], PostGradPipeline)


@pytest.mark.parametrize("shape, dynamic", [((4, 16), {0: "batch"}), ((2, 3, 16), {0: "batch", 1: "seq"}),
                                            ((16,), None)])
def test_decompose_linear_keeps_an_edge_program_valid(shape, dynamic):
    # How ExecuTorch's backends apply a pass to an edge program: transform() re-runs the edge verifier,
    # which refuses ops outside core ATen (aten.t, aten.matmul).
    from executorch.exir import EdgeCompileConfig, to_edge

    from shimkit.passes import DecomposeLinear

    linear = torch.nn.Linear(16, 8)
    x = torch.randn(*shape)
    dims = {d: torch.export.Dim(name, min=1, max=64) for d, name in (dynamic or {}).items()}
    exported = torch.export.export(linear, (x,), dynamic_shapes=(dims,) if dims else None)
    keep_linear = [torch.ops.aten.linear.default]
    edge = to_edge(exported, compile_config=EdgeCompileConfig(_core_aten_ops_exception_list=keep_linear,
                                                              preserve_ops=keep_linear))
    program = edge.transform([DecomposeLinear()]).exported_program()
    targets = {str(n.target) for n in program.graph.nodes if n.op == "call_function"}
    assert not any("linear" in t or "aten.t." in t or "matmul" in t for t in targets), targets
    for size in ([1, 5, 64] if dims else [None]):
        sample = torch.randn(size, *shape[1:]) if size else x
        torch.testing.assert_close(program.module()(sample), linear(sample))

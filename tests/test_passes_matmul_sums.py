"""JoinMatmulSums: the sums of two products that Inductor's mm_plus_mm pattern would fuse into a kernel the
Metal runtime lacks are one product, computing what eager computes; every other sum is left alone."""

from __future__ import annotations

import textwrap

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from shimkit.passes.matmul_sums import JoinMatmulSums
from shimkit.passes.ops import aten_op

aten = torch.ops.aten


def _ops(program):
    return [aten_op(n.target) for n in program.graph.nodes if n.op == "call_function"]


class MatmulSum(torch.nn.Module):
    """``x @ w + h @ u`` as mm or as bias-free linears (a recurrent cell's gates)."""

    def __init__(self, features, out, as_linear, dtype):
        super().__init__()
        generator = torch.Generator().manual_seed(features * 31 + out)
        self.w = torch.nn.Parameter(torch.randn(out, features, generator=generator).to(dtype))
        self.u = torch.nn.Parameter(torch.randn(out, features, generator=generator).to(dtype))
        self.as_linear = as_linear

    def forward(self, x, h):
        if self.as_linear:
            return torch.tanh(torch.nn.functional.linear(x, self.w) + torch.nn.functional.linear(h, self.u))
        return torch.tanh(torch.mm(x, self.w.T) + torch.mm(h, self.u.T))


@settings(max_examples=20, deadline=None)
@given(rows=st.integers(2, 5), features=st.integers(1, 9), out=st.integers(1, 6), as_linear=st.booleans(),
       dtype=st.sampled_from([torch.float32, torch.float16]), dynamic=st.booleans(), seed=st.integers(0, 2**16))
def test_a_sum_of_two_products_is_one_product_computing_the_same(rows, features, out, as_linear, dtype, dynamic,
                                                                  seed):
    module = MatmulSum(features, out, as_linear, dtype)
    generator = torch.Generator().manual_seed(seed)
    x, h = (torch.randn(rows, features, generator=generator).to(dtype) for _ in range(2))
    batch = torch.export.Dim("batch", min=1, max=16)
    program = torch.export.export(module, (x, h), dynamic_shapes=({0: batch}, {0: batch}) if dynamic else None)
    product = aten.linear.default if as_linear else aten.mm.default
    assert _ops(program).count(product) == 2
    assert JoinMatmulSums()(program).modified
    ops = _ops(program)
    assert ops.count(product) == 1 and aten.add.Tensor not in ops and ops.count(aten.cat.default) == 2
    tolerance = {"rtol": 2e-3, "atol": 2e-3 * features} if dtype == torch.float16 else {}
    for size in ((rows, 1, 16) if dynamic else (rows,)):
        x, h = (torch.randn(size, features, generator=generator).to(dtype) for _ in range(2))
        torch.testing.assert_close(program.module()(x, h), module(x, h), **tolerance)
    assert not JoinMatmulSums()(program).modified


class OtherSums(torch.nn.Module):
    def forward(self, x, h, w, v):
        product = torch.mm(x, w)
        return (product + torch.mm(h, w),  # the first product has another user (below)
                product * 2,
                torch.mm(x, w) + torch.mm(h[:, :2], v[:2, :5]),  # inner dims differ: Inductor would not fuse
                torch.add(torch.mm(x, w), torch.mm(h, w), alpha=2))  # alpha: not the pattern


def test_sums_inductor_would_not_fuse_are_left_alone():
    x, h, w, v = torch.randn(3, 4), torch.randn(3, 4), torch.randn(4, 5), torch.randn(6, 5)
    program = torch.export.export(OtherSums(), (x, h, w, v))
    before = str(program.graph)
    assert not JoinMatmulSums()(program).modified
    assert str(program.graph) == before
    assert not JoinMatmulSums(keep_fusion=True)(torch.export.export(MatmulSum(4, 3, False, torch.float32),
                                                                    (x, h))).modified


def test_the_pass_keeps_an_edge_program_valid():
    from executorch.exir import EdgeCompileConfig, to_edge

    module = MatmulSum(4, 3, False, torch.float32)
    x, h = torch.randn(2, 4), torch.randn(2, 4)
    edge = to_edge(torch.export.export(module, (x, h)), compile_config=EdgeCompileConfig())
    transformed = edge.transform([JoinMatmulSums()])  # runs the edge verifier
    program = transformed.exported_program()
    assert [str(aten_op(n.target)) for n in program.graph.nodes if n.op == "call_function"].count("aten.mm.default") == 1
    torch.testing.assert_close(program.module()(x, h), module(x, h))


def test_a_bias_free_recurrent_cell_lowers_on_metal_only_with_the_pass(tmp_path):
    """Stock, the cell misses aoti_torch__mm_plus_mm_out (Inductor's fusion under the Metal backend's
    max_autotune); with shimkit's plugins it calls only the mm shim and computes what eager computes."""
    from shimkit.audit import run_audit, to_json

    path = tmp_path / "cell.py"
    path.write_text(textwrap.dedent("""
        import torch

        class Cell(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.w = torch.nn.Linear(16, 16, bias=False)
                self.u = torch.nn.Linear(16, 16, bias=False)

            def forward(self, x, h):
                return torch.tanh(self.w(x) + self.u(h))

        def make():
            generator = torch.Generator().manual_seed(0)
            return Cell(), (torch.randn(4, 16, generator=generator), torch.randn(4, 16, generator=generator))
    """))
    spec = f"{path}:make"
    (stock,) = to_json(run_audit([spec], plugins=False))["models"]
    assert stock["missing"] == ["aoti_torch__mm_plus_mm_out"]
    (shimkit,) = to_json(run_audit([spec], plugins=True, check_numerics=True))["models"]
    assert shimkit["status"] == "clean", shimkit["failure"]
    assert [k["name"] for k in shimkit["kernels"]] == ["aoti_torch_mps_mm_out"]
    assert shimkit["numerics"]["ok"]


@pytest.mark.parametrize("has_kernel", [False, True])
def test_a_plugin_shipping_the_fused_kernel_keeps_the_fusion(has_kernel):
    from types import SimpleNamespace

    from shimkit.passes.matmul_sums import MM_PLUS_MM

    capabilities = SimpleNamespace(has_shim=lambda op: has_kernel and op == MM_PLUS_MM)
    assert JoinMatmulSums.from_capabilities(capabilities).keep_fusion is has_kernel

"""The built-in nonzero plugin: an MSL kernel for aoti_torch_mps_nonzero checked on Linux through shimkit.metal
against ATen, on hypothesis inputs in every dtype it declares and on PyTorch's OpInfo samples."""

from __future__ import annotations

import pytest
import torch
from hypothesis import settings
from executorch.exir import to_edge
from torch.testing._internal.common_methods_invocations import op_db

import shimkit.plugins.nonzero as nonzero
from shimkit.audit.coverage import audit_op
from shimkit.audit.loader import LoadedModel
from shimkit.audit.options import AuditOptions
from shimkit.audit.runner import audit_loaded
from shimkit.backend import get_registry
from shimkit.passes.unbacked import ForgetStaleUnbackedSymbols
from shimkit.testing import assert_plugin_matches_reference
from shimkit.testing.kernels import msl_kernel

OPS = {op.name: op for op in op_db if not op.variant_test_name}
TORCH_DTYPES = {"float": torch.float32, "half": torch.float16, "bfloat": torch.bfloat16, "long": torch.int64,
                "int": torch.int32, "short": torch.int16, "char": torch.int8, "uchar": torch.uint8, "bool": torch.bool}


def test_the_msl_nonzero_matches_aten_in_every_dtype():
    assert_plugin_matches_reference("nonzero", settings=settings(max_examples=200, derandomize=True, deadline=None,
                                                                 database=None))


@pytest.mark.parametrize("dtype", nonzero.NONZERO_DTYPES)
def test_signed_zero_nan_and_zero_dim_inputs(dtype):
    kernel = msl_kernel(nonzero.KERNEL, dtype)
    values = torch.tensor([[0.0, -0.0, float("nan")], [1.0, 0.0, -float("inf")]])
    torch_dtype = TORCH_DTYPES[dtype]
    x = values.nan_to_num(7.0).to(torch_dtype) if not torch_dtype.is_floating_point else values.to(torch_dtype)
    for tensor in (x, x[0, 0], x[1, 0], x[:, :0], x.t()):
        result = kernel(tensor)
        expected = torch.nonzero(tensor)
        assert result.dtype == torch.int64 and result.shape == expected.shape and torch.equal(result, expected)
        # ATen's layout, a column per dimension: Inductor's code after the call indexes it so.
        assert result.stride() == expected.stride()


@pytest.mark.parametrize("name", ["nonzero", "argwhere"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bool, torch.int64])
def test_opinfo_samples(name, dtype):
    cases = list(OPS[name].sample_inputs("cpu", dtype, requires_grad=False))
    assert cases
    kernel = msl_kernel(nonzero.KERNEL, {torch.float32: "float", torch.bool: "bool", torch.int64: "long"}[dtype])
    for sample in cases:
        if sample.args or sample.kwargs.get("as_tuple"):
            continue  # as_tuple is unbind of the same coordinates: not a different kernel
        assert torch.equal(kernel(sample.input), torch.nonzero(sample.input))


@pytest.mark.parametrize("name", ["nonzero", "argwhere"])
def test_the_sweep_finds_them_missing_stock_and_clean_with_shimkit(name):
    result = audit_op(name, "float32")
    assert (result.stock, result.shimkit) == ("missing", "clean"), result


class WhereNonzero(torch.nn.Module):
    def forward(self, x):
        return torch.where(x > 0, x, torch.zeros_like(x)).nonzero()


def test_a_data_dependent_output_after_to_edge_lowers_and_computes_like_eager():
    """to_edge's retraces leave nonzero's fresh size symbols pending in the program's ShapeEnv; Inductor, handed
    the same ShapeEnv, failed on them (PendingUnbackedSymbolNotFound) until forget_stale_unbacked_symbols ran."""
    model = WhereNonzero()
    x = torch.tensor([[0.5, -1.0, 0.0], [2.0, float("nan"), -0.0]])
    audit = audit_loaded(LoadedModel("where_nonzero", model, (x,)), config=get_registry().backend_config("mps"),
                         options=AuditOptions(numerics=True))
    assert audit.failure is None, audit.failure
    assert audit.status == "clean" and "at::_ops::nonzero::call" in {kernel.name for kernel in audit.kernels}
    assert audit.numerics is not None and [check.ok for check in audit.numerics.checks] == [True]


def test_the_pass_forgets_pending_symbols_and_leaves_the_graph():
    program = to_edge(torch.export.export(WhereNonzero(), (torch.randn(2, 3),))).exported_program()
    (env,) = {id(n.meta["val"].fake_mode.shape_env): n.meta["val"].fake_mode.shape_env
              for n in program.graph.nodes if isinstance(n.meta.get("val"), torch.Tensor)}.values()
    before = str(program.graph)
    if not env.pending_fresh_unbacked_symbols:
        pytest.skip("to_edge left no unbacked symbol pending: the upstream cause is gone")
    assert ForgetStaleUnbackedSymbols()(program.graph_module).modified is False
    assert env.pending_fresh_unbacked_symbols == [] and str(program.graph) == before

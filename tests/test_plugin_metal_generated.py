"""Ops Inductor writes Metal code for although they are not core ATen (plugins/metal_generated.py): stock
stops them in to_edge, shimkit lets them through and they lower clean; the Metal code Inductor writes,
run on the CPU, matches eager CPU on hypothesis inputs and on PyTorch's own OpInfo samples."""

from __future__ import annotations

import pytest
import torch
import torch.utils._pytree as pytree
from hypothesis import settings
from torch.testing._internal.common_methods_invocations import op_db

import shimkit.plugins.metal_generated as metal_generated
from shimkit.audit.loader import LoadedModel
from shimkit.audit.runner import audit_loaded
from shimkit.backend import backend_config
from shimkit.testing import assert_plugin_matches_reference
from shimkit.testing.properties import inductor_metal

# Inductor's Metal code computes exp2 as exp(x * ln 2) and c10's special functions are float32 ports
# of ATen's: agreement to 1e-5 (2**100 comes out 2e-6 off).
TOLERANCE = dict(rtol=1e-5, atol=1e-5)


def test_the_generated_metal_code_matches_aten_on_hypothesis_inputs():
    assert_plugin_matches_reference("metal-generated", **TOLERANCE,
                                    settings=settings(max_examples=120, derandomize=True, deadline=None,
                                                      database=None))


class EveryOp(torch.nn.Module):
    """Each declared op overload once, on ``x`` in (-1, 1) and ``n`` small non-negative integers."""

    def forward(self, x, n):
        outputs = [function(x) for function in metal_generated.UNARY.values()]
        outputs += [function(x.abs(), n) for function in metal_generated.BINARY.values()]
        for function in metal_generated.POLYNOMIALS.values():
            outputs += [function(x, n), function(0.5, n), function(x, 3)]
        outputs.append(torch.round(x, decimals=2))
        return outputs


def _audit(plugins):
    x = torch.linspace(-0.9, 0.9, 8)
    n = torch.arange(8.0)
    exported = torch.export.export(EveryOp(), (x, n), strict=False)
    declared = {f"{n.target._schema.name}.{n.target._overloadname}" for n in exported.graph.nodes
                if n.op == "call_function"}
    return declared, audit_loaded(LoadedModel("every-op", exported=exported),
                                  config=backend_config("mps") if plugins else None)


def test_stock_stops_them_before_the_backend_and_shimkit_lowers_them_clean():
    declared, stock = _audit(plugins=False)
    assert declared - {"aten::abs.default"} == set(metal_generated.REFERENCES)  # every declared overload
    assert stock.failure is not None and stock.failure.phase == "to_edge"
    assert "is not in Core ATen opset" in stock.failure.message
    _, fixed = _audit(plugins=True)
    assert fixed.failure is None and not fixed.missing, (fixed.failure, fixed.missing)


def test_only_declared_non_core_ops_on_their_device_are_let_through():
    mps, cuda = backend_config("mps"), backend_config("cuda")
    names = {f"aten::{op._schema.name.split('::')[1]}.{op._overloadname}" for op in mps.edge_exceptions}
    assert names == set(metal_generated.REFERENCES)
    assert all(torch.Tag.core not in op.tags for op in mps.edge_exceptions)
    assert not cuda.edge_exceptions  # nothing here vouches for CUDA's code generator
    assert mps.capabilities.generates("aten::special_bessel_j0") and mps.capabilities.keeps("aten::igamma")
    assert not cuda.capabilities.generates("aten::special_bessel_j0")


def test_the_edge_compile_config_keeps_what_the_caller_gives():
    mps = backend_config("mps")
    own = torch.ops.aten.special_airy_ai.default
    config = mps.edge_compile_config(_core_aten_ops_exception_list=[own], _skip_dim_order=True)
    assert config._core_aten_ops_exception_list[0] is own and config._skip_dim_order
    assert set(config._core_aten_ops_exception_list[1:]) == set(mps.edge_exceptions)


OPINFO = {op.name: op for op in op_db}
# OpInfo name -> the plugin op its samples call.
OPINFO_NAMES = ["erfinv", "i0", "special.i0e", "special.i1", "special.i1e", "special.spherical_bessel_j0",
                "special.bessel_j0", "special.bessel_j1", "special.bessel_y0", "special.bessel_y1",
                "special.modified_bessel_i0", "special.modified_bessel_i1", "special.modified_bessel_k0",
                "special.modified_bessel_k1", "special.scaled_modified_bessel_k0",
                "special.scaled_modified_bessel_k1", "erfc", "exp2", "signbit", "igamma", "igammac", "fmax", "fmin",
                "special.chebyshev_polynomial_t", "special.chebyshev_polynomial_u",
                "special.hermite_polynomial_h", "round"]


def _batched_samples(op, dtype):
    """The op's OpInfo samples in ``dtype``, grouped by their non-tensor arguments, each group's tensors
    broadcast, flattened and concatenated: the ops are elementwise, so one compiled call checks them all."""
    groups = {}
    for sample in op.sample_inputs("cpu", dtype, requires_grad=False):
        leaves, spec = pytree.tree_flatten((sample.input, sample.args, sample.kwargs))
        slots = [i for i, leaf in enumerate(leaves) if isinstance(leaf, torch.Tensor)]
        constants = tuple(None if i in slots else leaf for i, leaf in enumerate(leaves))
        tensors = [t.reshape(-1) for t in torch.broadcast_tensors(*(leaves[i] for i in slots))]
        key = (repr(constants), str(spec), tuple(slots))
        groups.setdefault(key, (leaves, spec, slots, []))[3].append(tensors)
    for leaves, spec, slots, parts in groups.values():
        yield leaves, spec, slots, [torch.cat(column) for column in zip(*parts)]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16], ids=str)
@pytest.mark.parametrize("name", OPINFO_NAMES)
def test_the_generated_metal_code_matches_aten_on_opinfo_samples(name, dtype):
    op = OPINFO[name] if name != "round" else next(o for o in op_db if o.name == "round")
    if dtype not in op.supported_dtypes("cpu"):
        pytest.skip(f"{name} has no {dtype} kernel on the CPU")
    variants = [o for o in op_db if o.name == name] if name == "round" else [op]
    checked = 0
    for variant in variants:
        for leaves, spec, slots, tensors in _batched_samples(variant, dtype):
            def call(*inputs, leaves=leaves, spec=spec, slots=slots):
                values = list(leaves)
                for slot, tensor in zip(slots, inputs):
                    values[slot] = tensor
                first, args, kwargs = pytree.tree_unflatten(values, spec)
                return variant.op(first, *args, **kwargs)

            expected = call(*tensors)
            got = inductor_metal(call)(*tensors)
            # Half types: c10 computes in float32 and rounds once, as ATen's CPU kernels do.
            tolerance = TOLERANCE if dtype == torch.float32 else {"rtol": float(torch.finfo(dtype).eps), "atol": 1e-5}
            torch.testing.assert_close(got, expected, equal_nan=True, **tolerance)
            checked += 1
    assert checked

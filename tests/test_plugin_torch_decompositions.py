"""plugins/torch_decompositions.py: PyTorch's own decompositions as pre-edge ones. Each kept op against ATen
on every OpInfo sample (float32 and float16), its traced decomposition holding only ops past to_edge, and
representative one-op models end to end (stock stops at to_edge, shimkit clean with eager's numbers)."""

from __future__ import annotations

import pytest
import torch
from torch._decomp import core_aten_decompositions
from torch.testing._internal.common_methods_invocations import op_db

from shimkit.audit.coverage import one_op_model
from shimkit.backend import backend_config
from shimkit.plugins.torch_decompositions import KEPT, torch_decomposition
from shimkit.registry import resolve_op
from passes_helpers import Decomposing, assert_stops_stock_and_lowers_clean_for_metal

OPS = {(op.name + (f".{op.variant_test_name}" if op.variant_test_name else "")): op for op in op_db}
# OpInfo name -> the kept ops its samples reach.
OPINFO = {
    "copysign": ("aten::copysign.Tensor", "aten::copysign.Scalar"),
    "ldexp": ("aten::ldexp.Tensor",),
    "dist": ("aten::dist.default",),
}



def _table(names):
    return {resolve_op(name): torch_decomposition(name) for name in names}


def _to64(value):
    return value.double() if isinstance(value, torch.Tensor) and value.is_floating_point() else value


def _run(op, sample, convert=lambda v: v):
    import torch.utils._pytree as pytree

    first, args, kwargs = pytree.tree_map(convert, (sample.input, sample.args, sample.kwargs))
    return op.op(first, *args, **kwargs)


@pytest.mark.parametrize("name", sorted(OPINFO))
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_every_opinfo_sample_matches_aten(name, dtype):
    op = OPS[name]
    if dtype not in op.supported_dtypes("cpu"):
        pytest.skip(f"ATen has no {name} for {dtype}")
    mode = Decomposing(_table(OPINFO[name]))
    checked = 0
    for sample in op.sample_inputs("cpu", dtype, requires_grad=False):
        expected = _run(op, sample)
        with mode:
            actual = _run(op, sample)
        try:
            torch.testing.assert_close(actual, expected, equal_nan=True)
        except AssertionError:
            if dtype is not torch.float16:
                raise
            # ATen's half kernel rounds its own way: both must then be as close to float64 as half allows.
            exact = _run(op, sample, _to64)
            torch.testing.assert_close(actual, exact, equal_nan=True, check_dtype=False, rtol=2e-3, atol=1e-3)
        checked += 1
    assert checked and mode.used, "no sample reached the decomposition"


def _allowed(target):
    if not isinstance(target, torch._ops.OpOverload):
        return True
    config = backend_config("mps")
    return (target.namespace == "aten" and torch.Tag.core in target.tags) or target in config.edge_exceptions \
        or target in core_aten_decompositions() or target in config.pre_edge_decomposition_table


@pytest.mark.parametrize("name", sorted(OPINFO))
def test_each_decomposition_traces_to_ops_past_to_edge(name):
    """Traced with make_fx on every float32 sample: core ATen, ops to_edge decomposes itself into core ATen,
    or ops Metal's code generator compiles (edge exceptions); no prims, no kept op left."""
    from torch.fx.experimental.proxy_tensor import make_fx

    op = OPS[name]
    table = _table(OPINFO[name])
    for sample in op.sample_inputs("cpu", torch.float32, requires_grad=False):
        def call(*tensors, sample=sample):
            return _run(op, sample)

        graph = make_fx(call, decomposition_table=table)()
        targets = {node.target for node in graph.graph.nodes if node.op == "call_function"}
        assert not targets & set(table), targets
        assert all(_allowed(t) for t in targets), sorted(map(str, (t for t in targets if not _allowed(t))))


def test_the_plugin_registers_every_kept_op_before_to_edge():
    for device in ("mps", "cuda"):
        table = backend_config(device).pre_edge_decomposition_table
        assert all(resolve_op(op) in table for op in KEPT), device


@pytest.mark.parametrize("name, op_text", [("copysign", "copysign"), ("ldexp", "ldexp"), ("dist", "dist")])
def test_the_opinfo_sample_stops_stock_and_lowers_clean_with_eagers_numbers(name, op_text):
    sample = next(iter(OPS[name].sample_inputs("cpu", torch.float32, requires_grad=False)))
    assert_stops_stock_and_lowers_clean_for_metal(*one_op_model(OPS[name], sample), op_text)

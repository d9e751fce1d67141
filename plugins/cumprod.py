"""``aten::cumprod`` as a log-step prefix product, for devices without a cumprod kernel.

Like ``cumsum`` (``plugins/cumsum.py``, whose scan this shares), Inductor has no scan codegen for mps
and falls back to ``at::_ops::cumprod::call``, which ExecuTorch's Metal runtime lacks; the OpInfo sweep
finds it behind ``torch.cumprod`` and ``torch.linalg.vander``. The Hillis–Steele steps multiply instead
of add, starting from 1, with the same step count: ``ceil(log2(n))`` for the largest size the scanned
dimension can take, declined for an unbounded dynamic one. ``aten.cumprod`` is not core ATen, so
``torch.cumprod`` itself stops in ``to_edge`` stock: the decomposition is also a pre-edge one.

Semantics kept from ATen: integral and bool inputs multiply in int64 unless ``dtype`` says otherwise
(and wrap the same way: a product of the same factors wraps to the same value in any order); half and
bfloat16 multiply in float32 and round once; a zero or NaN anywhere in a prefix gives ATen's result
(``0 * inf`` is NaN in either order). Products of floating-point values are formed in a different
order than ATen's sequential loop, so they agree to rounding, not bit for bit, and a prefix whose
partial products overflow in ATen's order but not in the tree's (or the reverse) can differ there.
"""

from __future__ import annotations

import torch

from shimkit.plugins.cumsum import scan_decomposition
from shimkit.plugins.shared import float32_tensors
from shimkit.registry import OpCall, OpPlugin, hookimpl

CUMPROD = "aten::cumprod.default"


def cumprod_decomposition(self: torch.Tensor, dim: int, *, dtype: torch.dtype | None = None) -> torch.Tensor:
    return scan_decomposition(self, dim, dtype, torch.mul, 1, "cumprod")


def _cumprod_reference(self, dim, *, dtype=None):
    return torch.cumprod(self, dim, dtype=dtype)


def cumprod_inputs():
    """``cumprod(self, dim, dtype=)`` calls: up to 3-d, sizes from 0, every dim (negative too), float32
    values near 1 (long products stay finite) with zeros, NaN and inf, int64 and bool inputs, and
    ``dtype`` casts to float32 and int64."""
    from hypothesis import strategies as st

    floats = (st.floats(0.5, 2.0, width=32) | st.floats(-2.0, -0.5, width=32)
              | st.sampled_from([0.0, -0.0, float("nan"), float("inf"), -float("inf")]))

    def call(shape, dtype, dim, cast):
        values = float32_tensors(shape, floats if dtype == torch.float32 else st.integers(-3, 3))
        return values.map(lambda v: OpCall((v.to(dtype), dim), {"dtype": cast}))

    shapes = st.lists(st.integers(0, 6), min_size=0, max_size=3).map(tuple)
    return st.tuples(shapes, st.sampled_from([torch.float32, torch.int64, torch.bool]),
                     st.sampled_from([None, torch.float32, torch.int64])).flatmap(
        lambda c: st.integers(-max(len(c[0]), 1), max(len(c[0]), 1) - 1).flatmap(
            lambda dim: call(c[0], c[1], dim, c[2])))


@hookimpl
def shimkit_op_plugins():
    yield OpPlugin(
        name="cumprod",
        ops=(CUMPROD,),
        decompositions={CUMPROD: cumprod_decomposition},
        # Not core ATen: without this, torch.cumprod stops in to_edge before any backend sees it.
        pre_edge=(CUMPROD,),
        references={CUMPROD: _cumprod_reference},
        input_strategies={CUMPROD: cumprod_inputs},
        # Inductor generates scans for CUDA (Triton), not for Metal.
        decomposition_devices=("mps",),
        doc="cumprod as a log-step prefix product (index_select, where, mul) for devices without a cumprod shim.",
    )

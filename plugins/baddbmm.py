"""``aten::baddbmm``: ``beta * self + alpha * (batch1 @ batch2)`` with ``bmm``, for devices without
``aoti_torch_mps_baddbmm_out`` (ExecuTorch's Metal runtime has ``bmm_out`` only).

The rules are ``addmm``'s (``plugins/addmm``), which are ATen's: half and bfloat16 are computed in float32
and rounded once; ``beta == 0`` ignores ``self`` (its shape must still broadcast); integer tensors take
``alpha``/``beta`` converted to their dtype first. Unlike ``addmm``, ATen's ``baddbmm`` multiplies the
product by a zero ``alpha`` in every dtype, so NaN and inf in ``batch1``/``batch2`` show as NaN.
"""

from __future__ import annotations

import torch

from shimkit.plugins.addmm import aten_reference, scaled_product_sum
from shimkit.plugins.shared import float32_tensors
from shimkit.registry import OpPlugin, hookimpl

BADDBMM = "aten::baddbmm.default"


def baddbmm_decomposition(self, batch1, batch2, *, beta=1, alpha=1):
    return scaled_product_sum(self, batch1, batch2, torch.bmm,
                              lambda a, b: (a.shape[0], a.shape[1], b.shape[2]), beta=beta, alpha=alpha,
                              zero_alpha_skips=frozenset())


baddbmm_reference = aten_reference(torch.baddbmm)


def baddbmm_inputs():
    """``(self, batch1, batch2)`` of matching sizes (empty ones too), ``self`` full or broadcast."""
    from hypothesis import strategies as st

    def tensor(shape):
        return float32_tensors(shape, st.floats(-8, 8, width=32))

    def calls(sizes):
        b, n, k, m = sizes
        self_shapes = st.sampled_from([(b, n, m), (n, m), (m,), (1, 1, m)])
        return st.tuples(self_shapes.flatmap(tensor), tensor((b, n, k)), tensor((b, k, m)))

    return st.tuples(*[st.integers(0, 4)] * 4).flatmap(calls)


@hookimpl
def shimkit_op_plugins():
    yield OpPlugin(
        name="baddbmm",
        ops=(BADDBMM,),
        decompositions={BADDBMM: baddbmm_decomposition},
        references={BADDBMM: baddbmm_reference},
        input_strategies={BADDBMM: baddbmm_inputs},
        # CUDA's Triton templates compile baddbmm itself: on the H100, a bfloat16 16x512x64 @ 64x512 baddbmm
        # ran in 0.57x the time of bmm plus the scaled add (benchmarks/bench_cuda_gemm.py, docs/cuda.md).
        decomposition_devices=("mps",),
        doc="baddbmm as bmm plus a scaled add where the device has no baddbmm shim.",
    )

"""``aten::_adaptive_avg_pool3d`` as three averaging matrices, one per spatial dim.

Inductor lowers 2-d adaptive pooling but falls back for 3-d to ``at::_ops::_adaptive_avg_pool3d::call``,
which ExecuTorch's Metal runtime lacks (found by the OpInfo sweep, docs/coverage.md). An adaptive average
is separable: output cell ``(d, h, w)`` averages the box ``[sd, ed) x [sh, eh) x [sw, ew)`` with ATen's
bounds ``s = floor(i * in / out)`` and ``e = ceil((i + 1) * in / out)`` per dim, and the mean over a box
is the mean over depth of the means over height of the means over width. Each 1-d mean is a matrix
``(out, in)`` window mask built from ``arange`` comparisons, so it is right at every size a dynamic input
takes; the masked sum is a reduction Inductor generates, divided by the window's length.

Numerics: half and bfloat16 are averaged in float32 and rounded once; the three-stage mean rounds three
times in float32 where ATen's sum-then-divide rounds once, so results agree to float32 rounding. NaN and
inf inside a window propagate to that window's outputs only (a weight of 0 outside the window would turn
an inf into NaN, so values outside each window are selected away with ``where``, not multiplied by 0).
"""

from __future__ import annotations

import torch

from shimkit.plugins.shared import ACCUMULATE_IN_FLOAT32, float32_tensors
from shimkit.registry import OpCall, OpPlugin, hookimpl, through_aten_composite

ADAPTIVE_AVG_POOL3D = "aten::_adaptive_avg_pool3d.default"
# F.adaptive_avg_pool3d reaches Inductor as this composite, expanded there into the op above.
ADAPTIVE_AVG_POOL3D_COMPOSITE = "aten::adaptive_avg_pool3d.default"


def _window_mean(values: torch.Tensor, dim: int, out_size: int) -> torch.Tensor:
    """The adaptive mean of ``values`` along ``dim`` to ``out_size`` cells."""
    in_size = values.shape[dim]
    cells = torch.arange(out_size, device=values.device)
    starts = torch.div(cells * in_size, out_size, rounding_mode="floor")
    ends = torch.div((cells + 1) * in_size + out_size - 1, out_size, rounding_mode="floor")
    positions = torch.arange(in_size, device=values.device)
    inside = (positions >= starts[:, None]) & (positions < ends[:, None])  # (out, in)
    moved = values.movedim(dim, -1).unsqueeze(-2)  # (..., 1, in)
    summed = torch.where(inside, moved, torch.zeros((), dtype=values.dtype, device=values.device)).sum(-1)
    return (summed / (ends - starts).to(values.dtype)).movedim(-1, dim)


def adaptive_avg_pool3d_decomposition(self: torch.Tensor, output_size: list[int]) -> torch.Tensor:
    if self.dim() not in (4, 5):
        raise RuntimeError(f"adaptive_avg_pool3d(): Expected 4D or 5D tensor, but got {tuple(self.shape)}")
    if len(output_size) != 3:
        raise RuntimeError(f"adaptive_avg_pool3d: output_size must be 3, got {list(output_size)}")
    if any(isinstance(size, int) and size == 0 for size in self.shape[1:]):
        raise RuntimeError(f"adaptive_avg_pool3d(): Expected input to have non-zero size for non-batch "
                           f"dimensions, but input has sizes {tuple(self.shape)}")
    result_dtype = self.dtype
    values = self.float() if result_dtype in ACCUMULATE_IN_FLOAT32 else self
    for offset, out_size in zip((3, 2, 1), output_size):
        values = _window_mean(values, self.dim() - offset, out_size)
    return values.to(result_dtype)


def _adaptive_avg_pool3d_reference(self, output_size):
    return torch.ops.aten._adaptive_avg_pool3d(self, output_size)


def pooling_calls():
    """``_adaptive_avg_pool3d(self, output_size)`` calls: 4-d and 5-d inputs, spatial sizes 1..6 and
    output sizes 1..7 (smaller, equal and larger than the input: overlapping windows), an empty batch,
    values with NaN and inf."""
    from hypothesis import strategies as st

    elements = st.floats(-8, 8, width=32) | st.sampled_from([float("nan"), float("inf"), -float("inf")])

    def call(shape, out):
        return float32_tensors(shape, elements).map(lambda values: OpCall((values, list(out)), {}))

    leading = st.sampled_from([(2,), (0, 2), (1, 3), (3,)])
    spatial = st.tuples(*[st.integers(1, 6)] * 3)
    outputs = st.tuples(*[st.integers(1, 7)] * 3)
    return st.tuples(leading, spatial, outputs).flatmap(lambda c: call((*c[0], *c[1]), c[2]))


@hookimpl
def shimkit_op_plugins():
    yield OpPlugin(
        name="adaptive-avg-pool3d",
        ops=(ADAPTIVE_AVG_POOL3D, ADAPTIVE_AVG_POOL3D_COMPOSITE),
        decompositions={ADAPTIVE_AVG_POOL3D: adaptive_avg_pool3d_decomposition,
                        ADAPTIVE_AVG_POOL3D_COMPOSITE: through_aten_composite(ADAPTIVE_AVG_POOL3D_COMPOSITE)},
        references={ADAPTIVE_AVG_POOL3D: _adaptive_avg_pool3d_reference,
                    ADAPTIVE_AVG_POOL3D_COMPOSITE: torch.ops.aten.adaptive_avg_pool3d.default},
        input_strategies={ADAPTIVE_AVG_POOL3D: pooling_calls, ADAPTIVE_AVG_POOL3D_COMPOSITE: pooling_calls},
        decomposition_devices=("mps",),
        doc="_adaptive_avg_pool3d as a separable mean over per-dim windows (arange, where, sum).",
    )

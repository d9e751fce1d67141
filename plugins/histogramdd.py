"""``aten::histogramdd`` with bin counts (``torch.histogramdd(x, bins=[...])``) as elementwise code and one
``index_add``.

ATen has no meta kernel for it and its fallback has no c-shim: the audit could not even trace it, and the
Metal runtime could not run it. ATen's algorithm (``aten/src/ATen/native/cpu/HistogramKernel.cpp``, linear
interpolation with local search) is written here step by step, so that every element lands in ATen's bin:

- the outer edges per dimension are ``range`` or the data's min and max (0 and 1 without data), widened
  by 0.5 on each side when equal; inner edges are ``linspace``'s, computed as ATen's kernel computes them
  (from the start below the halfway point, from the end above it);
- an element outside the outer edges, or NaN, counts nowhere; otherwise its bin is
  ``trunc((x - left) * bins / (right - left))``, corrected against the neighbouring edges as ATen's local
  search does, and the right edge belongs to the last bin;
- ``weight`` weighs each point; ``density`` divides by the total and by each bin's volume.

ATen raises for a data range that is not finite; a graph cannot raise on data, so such a histogram is NaN
everywhere instead (never a plausible count).
"""

from __future__ import annotations

import math

import torch

from shimkit.registry import OpCall, OpPlugin, hookimpl

HISTOGRAMDD = "aten::histogramdd.default"


def _linspace(left: torch.Tensor, right: torch.Tensor, bins: int) -> torch.Tensor:
    """``torch.linspace(left, right, bins + 1)`` with its kernel's rounding (both ends exact)."""
    step = (right - left) / bins
    index = torch.arange(bins + 1, device=left.device)
    from_left = left + step * index.to(left.dtype)
    from_right = right - step * (bins - index).to(left.dtype)
    return torch.where(index < (bins + 1) // 2, from_left, from_right)


def histogramdd_decomposition(self: torch.Tensor, bins, range=None, weight=None, density: bool = False):
    dims = self.shape[-1] if self.dim() else 1
    if len(bins) != dims:
        raise RuntimeError(f"torch.histogramdd: expected {dims} sequences of bin edges for each of the {dims} "
                           f"dimensions of the input, but got {len(bins)}")
    if any(b <= 0 for b in bins):
        raise RuntimeError(f"torch.histogramdd(): bins must be > 0, but got {min(bins)}")
    if range is not None and len(range) != 2 * dims:
        raise RuntimeError(f"torch.histogramdd: for a {dims}-dimensional histogram, range should have "
                           f"{2 * dims} elements, but got {len(range)}")
    points = self.reshape(-1, dims)
    if range is not None:
        left = torch.stack([torch.full((), float(v), dtype=self.dtype, device=self.device) for v in range[0::2]])
        right = torch.stack([torch.full((), float(v), dtype=self.dtype, device=self.device) for v in range[1::2]])
    else:
        sentinel = torch.full((1, dims), float("inf"), dtype=self.dtype, device=self.device)
        left = torch.cat([points, sentinel]).amin(0)
        right = torch.cat([points, -sentinel]).amax(0)
        empty = left > right  # only without points: +inf > -inf
        left = torch.where(empty, 0.0, left)
        right = torch.where(empty, 1.0, right)
    finite = (left.isfinite() & right.isfinite()).all()
    same = left == right
    left = torch.where(same, left - 0.5, left)
    right = torch.where(same, right + 0.5, right)
    edges = [_linspace(left[d], right[d], b) for d, b in enumerate(bins)]
    inside = torch.ones(points.shape[0], dtype=torch.bool, device=self.device)
    flat = torch.zeros(points.shape[0], dtype=torch.int64, device=self.device)
    for d, b in enumerate(bins):
        x, edge = points[:, d], edges[d]
        low, high = edge[0], edge[b]
        inside = inside & (x >= low) & (x <= high)
        position = ((x - low) * b / (high - low)).nan_to_num(0.0).clamp(0, b).to(torch.int64)
        # ATen's local search: the first of edges[position - 1 : position + 2] above x, minus one.
        first = (position - 1).clamp(min=0)
        above = torch.zeros_like(position)
        for offset in (0, 1, 2):
            candidate = first + offset
            valid = candidate <= torch.clamp(position + 1, max=b)
            above = above + (valid & (edge[candidate.clamp(max=b)] <= x)).to(torch.int64)
        position = first + above - 1
        position = torch.where(position == b, b - 1, position).clamp(0, b - 1)
        flat = flat * b + position
    counts = torch.ones_like(points[:, 0]) if weight is None else weight.reshape(-1).to(self.dtype)
    hist = torch.zeros(math.prod(bins), dtype=self.dtype, device=self.device)
    hist = hist.index_add(0, flat, torch.where(inside, counts, 0.0)).reshape(tuple(bins))
    if density:
        hist = hist / hist.sum()
        for d, b in enumerate(bins):
            shape = [1] * len(bins)
            shape[d] = b
            hist = hist / edges[d].diff().reshape(shape)
    hist = torch.where(finite, hist, float("nan"))
    return hist, edges


def histogramdd_calls():
    """Points in 1 to 3 dimensions (values with repeats, ties on edges, NaN and the odd infinity), bin
    counts 1 to 5, with and without a range, weights and density."""
    from hypothesis import strategies as st

    from shimkit.plugins.shared import float32_tensors

    elements = st.sampled_from([0.0, 0.5, 1.0, -1.0, 2.0, 0.25, 3.0]) | st.floats(-4, 4, width=32)

    def call(dims, count, bins, ranged, weighted, density):
        range_ = [-1.0, 2.0] * dims if ranged else None
        weights = float32_tensors((count,), st.floats(0, 3, width=32)) if weighted else st.none()
        return st.builds(lambda x, w: OpCall((x, bins[:dims]), {"range": range_, "weight": w, "density": density}),
                         float32_tensors((count, dims), elements), weights)

    return st.tuples(st.integers(1, 3), st.integers(0, 12), st.lists(st.integers(1, 5), min_size=3, max_size=3),
                     st.booleans(), st.booleans(), st.booleans()).flatmap(lambda c: call(*c))


def _reference(self, bins, range=None, weight=None, density=False):
    hist, edges = torch.ops.aten.histogramdd.default(self, bins, range, weight, density)
    return hist, list(edges)


@hookimpl
def shimkit_op_plugins():
    yield OpPlugin(
        name="histogramdd",
        ops=(HISTOGRAMDD,),
        decompositions={HISTOGRAMDD: histogramdd_decomposition},
        decomposition_devices=("mps",),
        references={HISTOGRAMDD: _reference},
        input_strategies={HISTOGRAMDD: histogramdd_calls},
        doc="histogramdd with bin counts as ATen's linear-interpolation binning and one index_add.",
    )

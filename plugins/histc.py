"""``aten::histc`` as a bin index per element and a ``scatter_add`` of ones.

``aten.histc`` is not core ATen, so ``torch.histc`` stops in ``to_edge`` on every backend. ATen computes
its histogram (``histogram_histc_out``, ``histogramdd_linear`` in ``HistogramKernel.cpp``) by mapping each
element to a bin with one division, no search: ``pos = (x - lo) * bins / (hi - lo)`` truncated, the last
bin also taking ``x == hi``; elements outside ``[lo, hi]`` and NaN are skipped. Here the same arithmetic
gives every element its bin (skipped ones add 0) and ``scatter_add`` counts them; the output has ``bins``
elements, a number of the program, so nothing depends on the input's size.

Semantics kept from ATen: ``min == max`` (the default 0, 0) takes the range from the data (its minimum and
maximum), and a range of one value becomes ``[v - 1, v + 1]``; an empty input gives zeros;
``lo`` and ``hi`` are rounded to the input's dtype and the bin arithmetic runs in that dtype, in ATen's
order (multiply, then divide); the result has the input's dtype. Counts of half and bfloat16 inputs add
in float32 and round once (ATen adds them in the input's dtype per thread). A range given by the program
that is not finite or not increasing raises as ATen does; one taken from the data cannot (ATen raises
for data holding infinities or NaN there; this bins what it can). Integer inputs, which ATen refuses,
are declined.
"""

from __future__ import annotations

import math

import torch

from shimkit.plugins.shared import ACCUMULATE_IN_FLOAT32, float32_tensors
from shimkit.registry import DecompositionDeclined, OpPlugin, hookimpl

HISTC = "aten::histc.default"


def histc_decomposition(self: torch.Tensor, bins: int = 100, min: float = 0, max: float = 0) -> torch.Tensor:
    if not self.is_floating_point():
        raise DecompositionDeclined(f"histc of {self.dtype} values: ATen bins floating-point ones only")
    torch._check(bins > 0, lambda: f"torch.histc(): bins must be > 0, but got {bins} for dimension 0")
    values = self.reshape(-1)
    low, high = float(min), float(max)
    if low == high:
        # The data's extremes, as ATen's aminmax; padded with an infinity that changes neither, so an
        # empty input (nothing to bin, whatever the range) needs no branch on its size.
        low_edge = torch.cat([values, values.new_full((1,), float("inf"))]).amin()
        high_edge = torch.cat([values, values.new_full((1,), -float("inf"))]).amax()
        one_value = low_edge == high_edge
        low_edge, high_edge = torch.where(one_value, low_edge - 1, low_edge), torch.where(one_value, high_edge + 1,
                                                                                           high_edge)
    else:
        torch._check(math.isfinite(low) and math.isfinite(high),
                     lambda: f"torch.histc: range of [{low}, {high}] is not finite")
        torch._check(low < high, lambda: "torch.histc: max must be larger than min")
        low_edge = torch.scalar_tensor(low, dtype=self.dtype, device=self.device)
        high_edge = torch.scalar_tensor(high, dtype=self.dtype, device=self.device)
    inside = (values >= low_edge) & (values <= high_edge)  # false for NaN
    position = ((values - low_edge) * bins / (high_edge - low_edge)).long().clamp(max=bins - 1)
    counts_dtype = torch.float32 if self.dtype in ACCUMULATE_IN_FLOAT32 else self.dtype
    counts = torch.zeros(bins, dtype=counts_dtype, device=self.device).scatter_add(
        0, torch.where(inside, position, 0), inside.to(counts_dtype))
    return counts.to(self.dtype)


def histc_inputs():
    """``histc(self, bins, min, max)`` calls: 0-d to 2-d, sizes from 0, 1..7 bins; the range given, with
    values on and between bin edges, outside the range, NaN and infinities; or taken from the data
    (min == max), with finite values (ATen refuses a range from data holding NaN or infinities)."""
    from hypothesis import strategies as st

    finite = st.floats(-4, 4, width=32) | st.sampled_from([0.0, 0.5, 1.0, 2.0, -1.0])
    anything = finite | st.sampled_from([float("nan"), float("inf"), -float("inf")])
    shapes = st.lists(st.integers(0, 6), min_size=0, max_size=2).map(tuple)
    given = st.tuples(st.floats(-4, 4, width=32), st.floats(-4, 4, width=32)).filter(lambda r: r[0] < r[1])
    ranges = st.tuples(st.just(anything), given) | st.tuples(st.just(finite), st.sampled_from([(0, 0), (3, 3)]))
    return st.tuples(shapes, st.integers(1, 7), ranges).flatmap(lambda c: float32_tensors(c[0], c[2][0]).map(
        lambda x: (x, c[1], *c[2][1])))


@hookimpl
def shimkit_op_plugins():
    yield OpPlugin(
        name="histc",
        ops=(HISTC,),
        decompositions={HISTC: histc_decomposition},
        # Not core ATen: without this, torch.histc stops in to_edge before any backend sees it.
        pre_edge=(HISTC,),
        references={HISTC: torch.histc},
        input_strategies={HISTC: histc_inputs},
        doc="histc as ATen's bin arithmetic per element and a scatter_add of ones.",
    )

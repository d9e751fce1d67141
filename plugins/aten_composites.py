"""ATen composite ops that reach Inductor whole and fall back there: ``cumulative_trapezoid`` and
``linalg.vander``.

ExecuTorch's AOTI partitioner keeps composite (``CompositeImplicitAutograd``) ops undecomposed, so
``aten::cumulative_trapezoid`` reaches Inductor as one node; Inductor expands it there into
``cumsum`` (and ``linalg.vander`` into ``cumprod``) after shimkit's passes ran, and the scans fall back
to kernels the Metal runtime lacks (found by the OpInfo sweep, docs/coverage.md). Decomposing such an
op through its own ATen composite in shimkit's pass, where the other plugins' decompositions are active
(:func:`~shimkit.registry.through_aten_composite`), splices in the composite with the scan already
decomposed (``plugins/cumsum.py``, ``plugins/cumprod.py``). Plugins whose op hides behind a composite
of its own list that composite themselves (``plugins/cdist.py``: ``aten::cdist``).

The numerics are ATen's composite's, op for op; only the scans inside are the plugins'. Where a scan
declines (an unbounded dynamic dimension) the composite declines with its reason.
"""

from __future__ import annotations

import torch

from shimkit.plugins.shared import float32_tensors
from shimkit.registry import OpCall, OpPlugin, hookimpl, through_aten_composite

CUMULATIVE_TRAPEZOID_X = "aten::cumulative_trapezoid.x"
CUMULATIVE_TRAPEZOID_DX = "aten::cumulative_trapezoid.dx"
LINALG_VANDER = "aten::linalg_vander.default"


def _values(shape):
    from hypothesis import strategies as st

    return float32_tensors(shape, st.floats(-4, 4, width=32) | st.sampled_from([float("nan"), float("inf")]))


def trapezoid_calls():
    """``cumulative_trapezoid(y, x, dim=)`` calls: ``y`` up to 3-d with sizes from 0, every dim, ``x``
    the sample points along ``dim`` (1-d) or one per element of ``y``."""
    from hypothesis import strategies as st

    def call(shape, dim, full):
        points = shape if full else (shape[dim],)
        return st.builds(lambda y, x: OpCall((y, x), {"dim": dim}), _values(shape), _values(points))

    shapes = st.lists(st.integers(0, 5), min_size=1, max_size=3).map(tuple)
    return st.tuples(shapes, st.booleans()).flatmap(
        lambda c: st.integers(-len(c[0]), len(c[0]) - 1).flatmap(lambda dim: call(c[0], dim, c[1])))


def trapezoid_spacing_calls():
    """``cumulative_trapezoid(y, dx=, dim=)`` calls: ``y`` as above, the spacing an int or a float."""
    from hypothesis import strategies as st

    shapes = st.lists(st.integers(0, 5), min_size=1, max_size=3).map(tuple)
    return shapes.flatmap(lambda shape: st.builds(
        lambda y, dx, dim: OpCall((y,), {"dx": dx, "dim": dim}), _values(shape),
        st.sampled_from([1, 2, 0.5, -0.25]), st.integers(-len(shape), len(shape) - 1)))


def vander_calls():
    """``linalg_vander(x, N=)`` calls: ``x`` with a batch dim (empty too) or none, 2..5 points (ATen
    needs N > 1), ``N`` absent or 2..6."""
    from hypothesis import strategies as st

    shapes = st.sampled_from([(2,), (3,), (5,), (0, 3), (2, 4)])
    return st.builds(lambda x, n: OpCall((x,), {"N": n}), shapes.flatmap(_values),
                     st.none() | st.integers(2, 6))


@hookimpl
def shimkit_op_plugins():
    aten = torch.ops.aten
    yield OpPlugin(
        name="aten-composites",
        ops=(CUMULATIVE_TRAPEZOID_X, CUMULATIVE_TRAPEZOID_DX, LINALG_VANDER),
        decompositions={CUMULATIVE_TRAPEZOID_X: through_aten_composite(aten.cumulative_trapezoid.x),
                        CUMULATIVE_TRAPEZOID_DX: through_aten_composite(aten.cumulative_trapezoid.dx),
                        LINALG_VANDER: through_aten_composite(aten.linalg_vander.default)},
        references={CUMULATIVE_TRAPEZOID_X: torch.cumulative_trapezoid,
                    CUMULATIVE_TRAPEZOID_DX: torch.cumulative_trapezoid,
                    LINALG_VANDER: torch.linalg.vander},
        input_strategies={CUMULATIVE_TRAPEZOID_X: trapezoid_calls, CUMULATIVE_TRAPEZOID_DX: trapezoid_spacing_calls,
                          LINALG_VANDER: vander_calls},
        # Their scans are decomposed on Metal only: CUDA generates them, composite and all.
        decomposition_devices=("mps",),
        doc="cumulative_trapezoid and linalg.vander through their ATen composites, so that the scans "
            "inside reach the cumsum and cumprod plugins.",
    )

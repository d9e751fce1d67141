"""``aten::_cdist_forward`` (``torch.cdist``) as ATen's own two forms: pairwise differences, or for the
Euclidean distance the matrix product ATen switches to; ``aten::_pdist_forward`` (``torch.pdist``) as the
differences of the pairs of rows ``i < j``.

Inductor has no lowering for ``_cdist_forward`` and falls back to ``at::_ops::_cdist_forward::call``,
which ExecuTorch's Metal runtime lacks (found by the OpInfo sweep, docs/coverage.md). ATen computes
``p``-norms of the pairwise differences, except for ``p == 2`` where, by ``compute_mode``, it uses
``|a|^2 - 2 a.b + |b|^2`` through one ``matmul`` (``use_mm_for_euclid_dist``, or
``use_mm_for_euclid_dist_if_necessary`` when either operand has more than 25 rows). Both forms are
written here as ATen writes them, so results agree to rounding with each path's own error (the matrix
form loses precision for nearby points, in ATen as here). For the ``if_necessary`` mode with a dynamic
row count both forms are computed and the row counts select one at run time: no size is baked in.

Semantics kept from ATen: ``p == 0`` counts differing coordinates, ``p == inf`` takes the largest
difference (cdist skipping NaN, as ATen's scalar comparison does; pdist propagating it, as its vectorized
maximum does), other ``p`` give ``sum(|d|^p)^(1/p)``; batch dims broadcast; no coordinates (``M == 0``)
gives zeros; NaN propagates; half and bfloat16 are computed in float32 and rounded once.

``pdist`` takes the same norms of ``x[i] - x[j]`` for the pairs in ``triu_indices(n, n, 1)`` order,
computed from the pair index (``shimkit.plugins.shared.upper_triangle_pairs``), so the row count may be
dynamic.
"""

from __future__ import annotations

import math

import torch

from shimkit.plugins.shared import ACCUMULATE_IN_FLOAT32, float32_tensors, upper_triangle_pairs
from shimkit.registry import DecompositionDeclined, OpCall, OpPlugin, hookimpl, through_aten_composite

CDIST_FORWARD = "aten::_cdist_forward.default"
# torch.cdist reaches Inductor as this composite, expanded there into _cdist_forward.
CDIST = "aten::cdist.default"
PDIST_FORWARD = "aten::_pdist_forward.default"
# torch.pdist reaches Inductor as this composite.
PDIST = "aten::pdist.default"
# ATen's use_mm_for_euclid_dist_if_necessary threshold on either operand's row count.
_MM_ROWS = 25


def _pairwise_norm(x1: torch.Tensor, x2: torch.Tensor, p: float) -> torch.Tensor:
    return _norm_of_differences((x1.unsqueeze(-2) - x2.unsqueeze(-3)).abs(), p)  # (..., P, R, M)


def _norm_of_differences(difference: torch.Tensor, p: float, *, max_skips_nan: bool = True) -> torch.Tensor:
    """ATen's ``p``-norm over the last dim of absolute differences. For ``p == inf`` cdist's running max
    skips NaN (a scalar comparison with NaN is false) and pdist's vectorized one propagates it."""
    if p == 0:
        return difference.ceil().clamp(max=1).sum(-1)  # ATen's count: NaN propagates
    if p == math.inf:
        # Both maxima start at 0: a zero column gives that start, and 0 without coordinates.
        zero = torch.zeros((*difference.shape[:-1], 1), dtype=difference.dtype, device=difference.device)
        if max_skips_nan:
            difference = torch.where(difference.isnan(), zero, difference)
        return torch.cat([difference, zero], -1).amax(-1)
    if p == 1:
        return difference.sum(-1)
    if p == 2:
        return difference.square().sum(-1).sqrt()
    return difference.pow(p).sum(-1).pow(1.0 / p)


def _euclidean_by_matmul(x1: torch.Tensor, x2: torch.Tensor) -> torch.Tensor:
    """ATen's ``_euclidean_dist``, line for line."""
    x1_norm = x1.pow(2).sum(-1, keepdim=True)
    x2_norm = x2.pow(2).sum(-1, keepdim=True)
    left = torch.cat([x1.mul(-2), x1_norm, torch.ones_like(x1_norm)], -1)
    right = torch.cat([x2, torch.ones_like(x2_norm), x2_norm], -1)
    return left.matmul(right.mT).clamp_min(0).sqrt()


def _more_rows_than(size: int | torch.SymInt, bound: int, device: torch.device) -> torch.Tensor:
    """``size > bound`` as a 0-d tensor, computed without comparing a symbolic size in Python."""
    return torch.ones(size, dtype=torch.int64, device=device).sum() > bound


def cdist_forward_decomposition(x1: torch.Tensor, x2: torch.Tensor, p: float,
                                compute_mode: int | None = None) -> torch.Tensor:
    if x1.dim() < 2 or x2.dim() < 2:
        raise RuntimeError(f"cdist only supports at least 2D tensors, X1 got: {x1.dim()}D, X2 got: {x2.dim()}D")
    if not (x1.is_floating_point() and x2.is_floating_point()):
        raise RuntimeError(f"cdist only supports floating-point dtypes, X1 got: {x1.dtype}, X2 got: {x2.dtype}")
    if p < 0:
        raise RuntimeError(f"cdist only supports non-negative p values, got {p}")
    if compute_mode not in (None, 0, 1, 2):
        raise RuntimeError(f"{compute_mode} is not a valid value for compute_mode")
    result_dtype = x1.dtype
    if result_dtype in ACCUMULATE_IN_FLOAT32:
        x1, x2 = x1.float(), x2.float()
    if p != 2 or compute_mode == 2:
        distances = _pairwise_norm(x1, x2, p)
    elif compute_mode == 1:
        distances = _euclidean_by_matmul(x1, x2)
    else:
        rows1, rows2 = x1.shape[-2], x2.shape[-2]
        if isinstance(rows1, int) and isinstance(rows2, int):
            by_matmul = rows1 > _MM_ROWS or rows2 > _MM_ROWS
            distances = _euclidean_by_matmul(x1, x2) if by_matmul else _pairwise_norm(x1, x2, 2)
        else:
            by_matmul = _more_rows_than(rows1, _MM_ROWS, x1.device) | _more_rows_than(rows2, _MM_ROWS, x1.device)
            distances = torch.where(by_matmul, _euclidean_by_matmul(x1, x2), _pairwise_norm(x1, x2, 2))
    return distances.to(result_dtype)


def pdist_forward_decomposition(self: torch.Tensor, p: float = 2.0) -> torch.Tensor:
    if self.dim() != 2:
        raise RuntimeError(f"pdist only supports 2D tensors, got: {self.dim()}D")
    if not self.is_floating_point():
        raise RuntimeError(f"pdist only supports floating-point dtypes, got: {self.dtype}")
    if p < 0:
        raise RuntimeError(f"pdist only supports non-negative p values, got {p}")
    n = self.shape[0]
    if isinstance(n, torch.SymInt) and n.node.hint == 2:
        raise DecompositionDeclined("pdist traced at an example of 2 rows: its one pair would make every "
                                    "elementwise step specialise to size 1; export with another row count")
    result_dtype = self.dtype
    x = self.float() if result_dtype in ACCUMULATE_IN_FLOAT32 else self
    rows, columns = upper_triangle_pairs(n, x.device)
    return _norm_of_differences((x[rows] - x[columns]).abs(), p, max_skips_nan=False).to(result_dtype)


def _pdist_forward_reference(x, p=2.0):
    return torch.ops.aten._pdist_forward(x, p)


def pdist_calls():
    """``_pdist_forward(x, p)``: 0 to 30 rows, 0 to 4 coordinates, values with NaN and inf, every kind of p."""
    from hypothesis import strategies as st

    elements = st.floats(-4, 4, width=32) | st.sampled_from([float("nan"), float("inf")])
    shapes = st.tuples(st.integers(0, 7) | st.integers(24, 30), st.integers(0, 4))
    return st.builds(lambda x, p: OpCall((x, p)), shapes.flatmap(lambda shape: float32_tensors(shape, elements)),
                     st.sampled_from([0.0, 1.0, 2.0, 3.0, 0.5, math.inf]))


def _cdist_forward_reference(x1, x2, p, compute_mode=None):
    return torch.ops.aten._cdist_forward(x1, x2, p, compute_mode)


def cdist_calls():
    """``_cdist_forward(x1, x2, p, compute_mode)`` calls: row counts 0..30 (both sides of ATen's switch
    to the matrix form at 25), 0..4 coordinates, a broadcast batch dim, p in {0, 1, 2, 3, 0.5, inf}, every
    compute mode, values with NaN and inf."""
    from hypothesis import strategies as st

    elements = st.floats(-4, 4, width=32) | st.sampled_from([float("nan"), float("inf")])

    def tensor(shape):
        return float32_tensors(shape, elements)

    def call(c):
        (batch1, batch2), rows1, rows2, coordinates, p, mode = c
        return st.builds(lambda a, b: OpCall((a, b, p, mode), {}), tensor((*batch1, rows1, coordinates)),
                         tensor((*batch2, rows2, coordinates)))

    batches = st.sampled_from([((), ()), ((2,), (2,)), ((2,), (1,)), ((1, 3), (2, 1))])
    rows = st.integers(0, 4) | st.integers(24, 30)
    return st.tuples(batches, rows, rows, st.integers(0, 4), st.sampled_from([0.0, 1.0, 2.0, 3.0, 0.5, math.inf]),
                     st.sampled_from([None, 0, 1, 2])).flatmap(call)


@hookimpl
def shimkit_op_plugins():
    yield OpPlugin(
        name="cdist",
        ops=(CDIST_FORWARD, CDIST, PDIST_FORWARD, PDIST),
        decompositions={CDIST_FORWARD: cdist_forward_decomposition, CDIST: through_aten_composite(CDIST),
                        PDIST_FORWARD: pdist_forward_decomposition, PDIST: through_aten_composite(PDIST)},
        references={CDIST_FORWARD: _cdist_forward_reference, CDIST: torch.ops.aten.cdist.default,
                    PDIST_FORWARD: _pdist_forward_reference, PDIST: torch.ops.aten.pdist.default},
        input_strategies={CDIST_FORWARD: cdist_calls, CDIST: cdist_calls, PDIST_FORWARD: pdist_calls,
                          PDIST: pdist_calls},
        decomposition_devices=("mps",),
        doc="_cdist_forward (torch.cdist) as ATen's pairwise-difference and matmul forms; _pdist_forward "
            "(torch.pdist) as the norms of the row differences i < j.",
    )

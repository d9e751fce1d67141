"""``aten::cummax`` and ``aten::cummin`` as a log-step scan of (value, index) pairs.

Neither op is core ATen, so ``torch.cummax``/``torch.cummin`` stop in ``to_edge`` on every backend. A
running maximum is a scan like ``cumsum`` (``plugins/cumsum.py``): Hillis–Steele steps, step ``k`` comparing
every element with the one ``2**k`` places before it, ``ceil(log2(n))`` steps for the largest size the
scanned dimension can take (declined for an unbounded dynamic one). What is scanned here is a pair: the
value and the index it came from, and the combine picks the earlier pair only where it strictly wins.

Semantics kept from ATen (``cummax_cummin_helper``, which replaces its running value where
``x >= value`` for cummax, ``x <= value`` for cummin, or where ``x`` is NaN): among equal values the
*last* index is returned; NaN wins over every number and, once seen, stays, with the index of the last
NaN so far; ``-0.0`` and ``0.0`` are equal (the later one is returned). Integer and bool inputs keep
their dtype, half and bfloat16 are compared as they are (nothing accumulates: values are ATen's bit for
bit); ``dim`` may be negative and is range-checked; a 0-d tensor is its own value at index 0.
"""

from __future__ import annotations

from typing import Callable

import torch

from shimkit.plugins.cumsum import scan_bound
from shimkit.plugins.shared import float32_tensors
from shimkit.registry import OpPlugin, hookimpl

CUMMAX = "aten::cummax.default"
CUMMIN = "aten::cummin.default"


def running_extreme(self: torch.Tensor, dim: int, beats: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
                    op: str) -> tuple[torch.Tensor, torch.Tensor]:
    """The running extreme of ``self`` along ``dim`` and its index, where ``beats(a, b)`` says that value
    ``a`` strictly beats ``b`` (ties go to the later index)."""
    rank = max(self.dim(), 1)
    if not -rank <= dim < rank:
        raise IndexError(f"Dimension out of range (expected to be in range of [{-rank}, {rank - 1}], but got {dim})")
    if self.dim() == 0:
        return self.clone(), torch.zeros((), dtype=torch.int64, device=self.device)
    dim %= rank
    length = self.shape[dim]
    largest = scan_bound(length, dim, op)
    positions = torch.arange(length, device=self.device)
    along_dim = [length if d == dim else 1 for d in range(self.dim())]
    values, indices = self, positions.reshape(along_dim).expand(self.shape)
    shift = 1
    while shift < largest:
        source = positions - shift
        earlier = source.clamp(min=0)
        earlier_values, earlier_indices = values.index_select(dim, earlier), indices.index_select(dim, earlier)
        # The earlier pair replaces the later one only where it exists and strictly beats it.
        take = (source >= 0).reshape(along_dim) & beats(earlier_values, values)
        values = torch.where(take, earlier_values, values)
        indices = torch.where(take, earlier_indices, indices)
        shift *= 2
    return values, indices


def _nan_first(strictly: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]):
    """``a`` beats ``b`` where ``a`` is NaN and ``b`` is not, or where ``strictly(a, b)`` (false for NaN)."""
    def beats(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        if not a.is_floating_point():
            return strictly(a, b)
        return (torch.isnan(a) & ~torch.isnan(b)) | strictly(a, b)
    return beats


def cummax_decomposition(self: torch.Tensor, dim: int) -> tuple[torch.Tensor, torch.Tensor]:
    return running_extreme(self, dim, _nan_first(torch.gt), "cummax")


def cummin_decomposition(self: torch.Tensor, dim: int) -> tuple[torch.Tensor, torch.Tensor]:
    return running_extreme(self, dim, _nan_first(torch.lt), "cummin")


def running_extreme_inputs():
    """``cummax``/``cummin(self, dim)`` calls: 0-d to 3-d, sizes from 0, every dim (negative too); float32
    values drawn from a few (ties everywhere) with NaN, infinities and both zeros, or int64 or bool ones."""
    from hypothesis import strategies as st

    floats = st.sampled_from([0.0, -0.0, 1.0, -1.0, 2.5, float("nan"), float("inf"), -float("inf")])

    def call(shape, dtype):
        rank = max(len(shape), 1)
        values = float32_tensors(shape, floats if dtype == torch.float32 else st.integers(-2, 2))
        return st.tuples(values.map(lambda v: v.to(dtype)), st.integers(-rank, rank - 1))

    shapes = st.lists(st.integers(0, 6), min_size=0, max_size=3).map(tuple)
    return st.tuples(shapes, st.sampled_from([torch.float32, torch.int64, torch.bool])).flatmap(lambda c: call(*c))


@hookimpl
def shimkit_op_plugins():
    yield OpPlugin(
        name="cummax",
        ops=(CUMMAX, CUMMIN),
        decompositions={CUMMAX: cummax_decomposition, CUMMIN: cummin_decomposition},
        # Not core ATen: without this, torch.cummax and torch.cummin stop in to_edge on every backend.
        pre_edge=(CUMMAX, CUMMIN),
        references={CUMMAX: torch.cummax, CUMMIN: torch.cummin},
        input_strategies={CUMMAX: running_extreme_inputs, CUMMIN: running_extreme_inputs},
        doc="cummax and cummin as a log-step scan of (value, index) pairs (the last index among ties, NaN wins).",
    )

"""``aten::combinations`` (``torch.combinations``) of one or two elements as gathers at computed indices.

ATen's composite builds a mask over an ``n^r`` grid and selects through it, so its result size depends on
data as far as the compiler can tell: export gives it an unbacked size, and Inductor then fails on the
symbols it cannot find (``PendingUnbackedSymbolNotFound``), stock and with every kernel present. The size
is in fact ``C(n, r)`` (``C(n + r - 1, r)`` with replacement): for ``r <= 2`` the rows are computed
directly, in ATen's lexicographic order, ``r == 1`` as the elements themselves and ``r == 2`` from the pair
index (``shimkit.plugins.shared.upper_triangle_pairs``; with replacement, the pairs ``i < j`` of ``n + 1``
elements are the pairs ``i <= j - 1`` of ``n``). Longer combinations are declined.

The decomposition runs before ``to_edge`` (``pre_edge``): ``to_edge`` re-runs the composite's fake kernel,
leaving unbacked symbols that no later trace in that program can bind.
"""

from __future__ import annotations

import torch

from shimkit.plugins.shared import upper_triangle_pairs
from shimkit.registry import DecompositionDeclined, OpCall, OpPlugin, hookimpl

COMBINATIONS = "aten::combinations.default"


def combinations_decomposition(self: torch.Tensor, r: int = 2, with_replacement: bool = False) -> torch.Tensor:
    if self.dim() != 1:
        raise RuntimeError(f"Expect a 1D vector, but got shape {list(self.shape)}")
    if r < 0:
        raise RuntimeError(f"Expect a non-negative number, but got {r}")
    if r == 0:
        return self.new_empty(0)
    if r == 1:
        return self.unsqueeze(-1).clone()
    if r > 2:
        raise DecompositionDeclined(f"combinations of {r} elements: only r <= 2 is computed without a mask")
    n = self.shape[0]
    first, second = upper_triangle_pairs(n + 1 if with_replacement else n, self.device)
    if with_replacement:
        second = second - 1
    return torch.stack([self[first], self[second]], -1)


def combinations_calls():
    """Vectors of 0 to 7 elements, one or two at a time, with and without replacement."""
    from hypothesis import strategies as st

    from shimkit.plugins.shared import float32_tensors

    return st.builds(lambda x, r, replacement: OpCall((x, r, replacement)),
                     st.integers(0, 7).flatmap(lambda n: float32_tensors((n,), st.floats(-4, 4, width=32))),
                     st.integers(0, 2), st.booleans())


@hookimpl
def shimkit_op_plugins():
    yield OpPlugin(
        name="combinations",
        ops=(COMBINATIONS,),
        decompositions={COMBINATIONS: combinations_decomposition},
        decomposition_devices=("mps",),
        pre_edge=(COMBINATIONS,),
        references={COMBINATIONS: torch.ops.aten.combinations.default},
        input_strategies={COMBINATIONS: combinations_calls},
        doc="combinations of one or two elements as gathers at computed indices (no data-dependent size).",
    )

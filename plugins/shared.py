"""What several built-in plugins share: ATen's accumulation rule for the half types, and the hypothesis
strategy their ``input_strategies`` build tensors with. Not a plugin itself."""

from __future__ import annotations

import math
from typing import Any, Sequence

import torch

# ATen computes these in float32 and rounds the result once.
ACCUMULATE_IN_FLOAT32 = (torch.float16, torch.bfloat16)


def float32_tensors(shape: Sequence[int], elements: Any) -> Any:
    """A hypothesis strategy of float32 tensors of ``shape`` (empty ones too) whose values come from
    ``elements``, a strategy of numbers: ``float32_tensors((2, 3), st.floats(-8, 8, width=32))``."""
    from hypothesis import strategies as st

    count = math.prod(shape)
    return st.lists(elements, min_size=count, max_size=count).map(
        lambda values: torch.tensor(values, dtype=torch.float32).reshape(tuple(shape)))


def upper_triangle_pairs(n: int | torch.SymInt, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """``torch.triu_indices(n, n, 1)`` as two int64 tensors, computed from the pair index rather than listed
    (no constant, and ``n`` may be dynamic): row ``i`` of pair ``k`` is
    ``floor((2n - 1 - sqrt((2n - 1)^2 - 8k)) / 2)`` with the square root in float32 and the rest in exact
    int64, then moved by one where the exact row starts disagree (the float error is below one row for
    ``n`` under a million)."""
    pairs = torch.arange(n * (n - 1) // 2, device=device)
    # The size enters as a 0-d tensor: mixed into tensor arithmetic as a symbolic Python number, it would
    # make fake kernels compare sizes.
    span = torch.scalar_tensor(2 * n - 1, dtype=torch.int64, device=device)
    discriminant = span * span - 8 * pairs
    rows = ((span - discriminant.float().sqrt()) / 2).floor().long().clamp(min=0)

    def first_pair(row):
        return row * (span - row) // 2

    rows = torch.where(first_pair(rows + 1) <= pairs, rows + 1, rows)
    rows = torch.where(first_pair(rows) > pairs, rows - 1, rows)
    return rows, pairs - first_pair(rows) + rows + 1

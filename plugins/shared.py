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

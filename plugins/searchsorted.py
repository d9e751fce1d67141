"""``aten::searchsorted`` and ``aten::bucketize`` as ATen's binary search, unrolled into gathers.

Neither op is core ATen, so ``torch.searchsorted`` and ``torch.bucketize`` stop in ``to_edge`` on every
backend. ATen answers each value with a binary search over its row of boundaries (``cus_lower_bound`` /
``cus_upper_bound`` in ``Bucketization.cpp``); here every value runs the same search at once: ``start``
and ``end`` are tensors shaped like the values, and each step gathers the boundary at ``mid``, compares,
and moves ``start`` or ``end`` where the search is still open (``start < end``). A search over ``n``
boundaries ends within ``n.bit_length()`` steps, for the largest ``n`` the boundaries' last dimension can
take (declined for an unbounded dynamic one): memory stays the size of the values, whatever ``n``.

Semantics kept from ATen, by running its very comparisons: ``right`` (or ``side="right"``) searches for the
first boundary ``> value``, else the first ``>= value`` (``bucketize``'s ``right`` maps the same way);
a NaN value compares false everywhere and lands past the end; boundaries holding NaN, or not sorted at
all, give ATen's answer, since the search takes ATen's path through them; ``sorter`` reads boundary
``sorter[mid]``; boundaries 1-D for every value, or one row per leading index of the values;
values and boundaries of different dtypes compare in their promoted dtype; a Python-number value gives
a 0-d result; ``out_int32`` gives int32, else int64.
"""

from __future__ import annotations

import math

import torch

from shimkit.plugins.cumsum import largest_size
from shimkit.registry import DecompositionDeclined, OpCall, OpPlugin, hookimpl

SEARCHSORTED = "aten::searchsorted.Tensor"
SEARCHSORTED_SCALAR = "aten::searchsorted.Scalar"
BUCKETIZE = "aten::bucketize.Tensor"
BUCKETIZE_SCALAR = "aten::bucketize.Scalar"


def _lookup(table: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """``table``'s entries at ``index`` along its last dimension: one row for all (1-D) or row by row."""
    if table.dim() == 1:
        return table.index_select(0, index.reshape(-1)).reshape(index.shape)
    return table.gather(-1, index)


def binary_search(boundaries: torch.Tensor, values: torch.Tensor, right: bool,
                  sorter: torch.Tensor | None) -> torch.Tensor:
    """ATen's lower bound (``right`` false) or upper bound of every value, as int64."""
    size = boundaries.shape[-1]
    largest = largest_size(size)
    if largest is None:
        raise DecompositionDeclined(
            f"searchsorted over {size} boundaries, a dynamic size with no upper bound, and an unrolled binary "
            f"search needs one: export with an upper bound on that dimension (torch.export.Dim(..., max=N))")
    start = torch.zeros(values.shape, dtype=torch.int64, device=values.device)
    end = torch.full(values.shape, size, dtype=torch.int64, device=values.device)
    for _ in range(largest.bit_length()):
        open_ = start < end
        mid = start + (end - start) // 2
        index = mid.clamp(max=size - 1)  # a closed search may sit at `size`: it reads the last, keeps nothing
        boundary = _lookup(boundaries, index if sorter is None else _lookup(sorter, index))
        go_right = ~(boundary > values) if right else ~(boundary >= values)
        start = torch.where(open_ & go_right, mid + 1, start)
        end = torch.where(open_ & ~go_right, mid, end)
    return start


def _check_rows(boundaries: torch.Tensor, values: torch.Tensor) -> None:
    same_rows = boundaries.dim() == values.dim() and all(
        b == v for b, v in zip(boundaries.shape[:-1], values.shape[:-1]))
    torch._check(boundaries.dim() == 1 or same_rows, lambda: (
        "torch.searchsorted(): boundaries tensor should be 1 dimension or the first N-1 dimensions of "
        f"boundaries tensor and input value tensor must match, but we got boundaries tensor "
        f"{list(boundaries.shape)} and input value tensor {list(values.shape)}"))


def searchsorted_decomposition(sorted_sequence: torch.Tensor, self: torch.Tensor, *, out_int32: bool = False,
                               right: bool = False, side: str | None = None,
                               sorter: torch.Tensor | None = None) -> torch.Tensor:
    if side is not None:
        torch._check(side in ("left", "right"), lambda: f"torch.searchsorted(): side can only be 'left' or "
                                                        f"'right' but got {side}")
        torch._check(not (right and side == "left"), lambda: "torch.searchsorted(): side and right can't be set "
                                                             "to opposites, got side of left while right was True")
        right = side == "right"
    if sorter is not None:
        torch._check(sorter.shape == sorted_sequence.shape, lambda: "torch.searchsorted(): boundary and sorter "
                                                                    "must have the same size")
    if sorted_sequence.dim() > 1:
        _check_rows(sorted_sequence, self)
    result = binary_search(sorted_sequence, self, right, sorter)
    return result.int() if out_int32 else result


def searchsorted_scalar_decomposition(sorted_sequence: torch.Tensor, self: float, *, out_int32: bool = False,
                                      right: bool = False, side: str | None = None,
                                      sorter: torch.Tensor | None = None) -> torch.Tensor:
    torch._check(sorted_sequence.dim() == 1, lambda: "torch.searchsorted(): input value can be a scalar only "
                                                     "when boundaries tensor dimension is 1")
    value = torch.scalar_tensor(self, dtype=torch.result_type(sorted_sequence, self), device=sorted_sequence.device)
    return searchsorted_decomposition(sorted_sequence, value, out_int32=out_int32, right=right, side=side,
                                      sorter=sorter)


def bucketize_decomposition(self: torch.Tensor, boundaries: torch.Tensor, *, out_int32: bool = False,
                            right: bool = False) -> torch.Tensor:
    torch._check(boundaries.dim() == 1, lambda: f"boundaries tensor must be 1 dimension, but got dim("
                                                f"{boundaries.dim()})")
    return searchsorted_decomposition(boundaries, self, out_int32=out_int32, right=right)


def bucketize_scalar_decomposition(self: float, boundaries: torch.Tensor, *, out_int32: bool = False,
                                   right: bool = False) -> torch.Tensor:
    return searchsorted_scalar_decomposition(boundaries, self, out_int32=out_int32, right=right)


def _search_inputs(scalar: bool, bucketize: bool):
    """Boundaries (0..7 per row: sorted with ties, now and then unsorted; 1-D or one row per leading index
    of the values) and values landing on, between and past them, NaN in both; ``right``, ``side``,
    ``sorter`` and ``out_int32`` where the op takes them."""
    from hypothesis import strategies as st

    numbers = st.sampled_from([-2.0, -1.0, 0.0, 0.5, 1.0, 3.0, float("nan"), float("inf")])

    @st.composite
    def calls(draw):
        rows = [] if bucketize or scalar or draw(st.booleans()) else draw(
            st.lists(st.integers(0, 3), min_size=1, max_size=2))
        size = draw(st.integers(0, 7))
        flat = draw(st.lists(numbers, min_size=math.prod(rows) * size, max_size=math.prod(rows) * size))
        boundaries = torch.tensor(flat, dtype=torch.float32).reshape(*rows, size)
        if draw(st.integers(0, 3)):
            boundaries = boundaries.sort(-1).values
        value_shape = (*rows, draw(st.integers(0, 4))) if rows else tuple(
            draw(st.lists(st.integers(0, 4), max_size=2)))
        values = (draw(numbers) if scalar else
                  torch.tensor(draw(st.lists(numbers, min_size=math.prod(value_shape), max_size=math.prod(value_shape))),
                               dtype=torch.float32).reshape(value_shape))
        kwargs = {"out_int32": draw(st.booleans()), "right": draw(st.booleans())}
        if bucketize:
            return OpCall((values, boundaries), kwargs)
        if draw(st.booleans()):
            kwargs["side"] = "right" if kwargs["right"] else draw(st.sampled_from(["left", "right"]))
        if draw(st.booleans()):  # a sorter over unsorted boundaries: ATen reads them in its order
            kwargs["sorter"] = torch.randperm(size, generator=torch.Generator().manual_seed(draw(
                st.integers(0, 99)))).expand(*rows, size).contiguous()
        return OpCall((boundaries, values), kwargs)

    return calls()


@hookimpl
def shimkit_op_plugins():
    yield OpPlugin(
        name="searchsorted",
        ops=(SEARCHSORTED, SEARCHSORTED_SCALAR, BUCKETIZE, BUCKETIZE_SCALAR),
        decompositions={SEARCHSORTED: searchsorted_decomposition,
                        SEARCHSORTED_SCALAR: searchsorted_scalar_decomposition,
                        BUCKETIZE: bucketize_decomposition, BUCKETIZE_SCALAR: bucketize_scalar_decomposition},
        # Not core ATen: without this, torch.searchsorted and torch.bucketize stop in to_edge everywhere.
        pre_edge=(SEARCHSORTED, SEARCHSORTED_SCALAR, BUCKETIZE, BUCKETIZE_SCALAR),
        references={SEARCHSORTED: torch.searchsorted, SEARCHSORTED_SCALAR: torch.searchsorted,
                    BUCKETIZE: torch.bucketize, BUCKETIZE_SCALAR: torch.bucketize},
        input_strategies={SEARCHSORTED: lambda: _search_inputs(scalar=False, bucketize=False),
                          SEARCHSORTED_SCALAR: lambda: _search_inputs(scalar=True, bucketize=False),
                          BUCKETIZE: lambda: _search_inputs(scalar=False, bucketize=True),
                          BUCKETIZE_SCALAR: lambda: _search_inputs(scalar=True, bucketize=True)},
        doc="searchsorted and bucketize as ATen's binary search unrolled into gathers (its NaN and sorter "
            "behaviour kept).",
    )

"""``aten::kthvalue`` as a sort and one slice, so that ``torch.kthvalue`` gets past ``to_edge``.

``aten.kthvalue`` is not core ATen and the AOTI partitioner keeps every op whole, so a model calling
``torch.kthvalue`` stops in ``to_edge`` (``SpecViolationError``) on every backend. The ``k``-th smallest
element along ``dim`` is the element at position ``k - 1`` of that dimension sorted ascending, and its
index is the index the sort carried there: ``aten.sort`` plus ``narrow``, both core ATen. On Metal the
sort is shimkit's MSL sort (``plugins/sort``, stable); CUDA's Inductor and runtime sort themselves.

Semantics kept from ATen: NaN is larger than every number (a row's NaNs are its largest values, as in
ATen's selection and in ``torch.sort``); ``dim`` may be negative and is range-checked, ``k`` must lie in
``1..size``; ``keepdim``; a 0-d tensor is its own first value at index 0; integer, half and bfloat16
values are compared as they are (no accumulation). Values are bit for bit ATen's. Among equal values
ATen returns the index its quickselect happens to stop at (neither the first nor the last of them, and
not documented); this returns the one the sort puts at ``k - 1``: on Metal, whose sort is stable, the
first of them in index order; elsewhere an index of an element equal to the value, as ATen promises.
"""

from __future__ import annotations

import math

import torch

from shimkit.registry import OpCall, OpPlugin, hookimpl

KTHVALUE = "aten::kthvalue.default"


def kthvalue_decomposition(self: torch.Tensor, k: int, dim: int = -1,
                           keepdim: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    rank = max(self.dim(), 1)
    if not -rank <= dim < rank:
        raise IndexError(f"Dimension out of range (expected to be in range of [{-rank}, {rank - 1}], but got {dim})")
    dim %= rank
    size = self.shape[dim] if self.dim() else 1
    torch._check(1 <= k, lambda: f"kthvalue(): selected number k out of range for dimension {dim}")
    torch._check(k <= size, lambda: f"kthvalue(): selected number k out of range for dimension {dim}")
    if self.dim() == 0:
        return self.clone(), torch.zeros((), dtype=torch.int64, device=self.device)
    values, indices = torch.sort(self, dim=dim)  # aten.sort.default: core ATen; sort.stable is not
    values, indices = values.narrow(dim, k - 1, 1), indices.narrow(dim, k - 1, 1)
    if not keepdim:
        values, indices = values.squeeze(dim), indices.squeeze(dim)
    return values, indices


def kthvalue_inputs():
    """``kthvalue(self, k, dim, keepdim)`` calls: 0-d to 3-d, the selected dim 1..6 long and the others from
    0, every ``k`` and dim (negative too), both ``keepdim``; float32 values (infinities, one NaN at most),
    all distinct, so that ATen's index is the only index of its value (the dynamic-size check draws random
    float32 values at other sizes, distinct too)."""
    from hypothesis import strategies as st

    @st.composite
    def calls(draw):
        rank = draw(st.integers(0, 3))
        dim = draw(st.integers(-max(rank, 1), max(rank, 1) - 1))
        shape = [draw(st.integers(0, 6)) for _ in range(rank)]
        if rank:
            shape[dim] = max(shape[dim], 1)
        count = math.prod(shape)
        numbers = st.floats(-1e3, 1e3, width=32) | st.sampled_from([float("inf"), -float("inf")])
        values = draw(st.lists(numbers, min_size=count, max_size=count, unique=True))
        if count and draw(st.booleans()):
            values[draw(st.integers(0, count - 1))] = float("nan")
        x = torch.tensor(values, dtype=torch.float32).reshape(shape)
        k = draw(st.integers(1, shape[dim] if rank else 1))
        return OpCall((x, k, dim, draw(st.booleans())))

    return calls()


@hookimpl
def shimkit_op_plugins():
    yield OpPlugin(
        name="kthvalue",
        ops=(KTHVALUE,),
        decompositions={KTHVALUE: kthvalue_decomposition},
        # Not core ATen: without this, torch.kthvalue stops in to_edge before any backend sees it.
        pre_edge=(KTHVALUE,),
        references={KTHVALUE: torch.kthvalue},
        input_strategies={KTHVALUE: kthvalue_inputs},
        doc="kthvalue as a sort and a slice at k - 1 (ATen's NaN order; an index of an equal value among ties).",
    )

"""``aten::_trilinear`` (behind ``torch.nn.functional.bilinear`` and ``nn.Bilinear``) as ``einsum``\\ s.

``F.bilinear(x1, x2, W, b)`` expands to ``_trilinear(x1, W, x2, ...)``, a sum of products of three
tensors whose dims are placed by ``expand1..3`` and summed over ``sumdim``. Inductor has no lowering for
it and falls back to ``at::_ops::_trilinear::call``, which ExecuTorch's Metal runtime lacks (found by the
OpInfo sweep, docs/coverage.md). The same contraction written as ``einsum`` equations (one letter per
dim of the expanded space, the summed ones left out of the output) becomes ``bmm``/``mm``, which the
runtime has, plus the elementwise ops Inductor generates.

Numerics: ATen's contraction, pair by pair in ATen's order (``i1`` with ``i2`` summing the dims ``i3``
lacks, then with ``i3``, then a summed ``unroll_dim``; each pair reaches ``bmm`` through
``sumproduct_pair`` as ATen's does), so results agree to rounding and a ``0 * inf`` becomes NaN where
ATen's does: that order, which ``unroll_dim`` changes, decides it. Half and bfloat16 follow the matmul
kernels' float32 accumulation.
"""

from __future__ import annotations

import string
from typing import Sequence

import torch

from torch.fx.experimental.symbolic_shapes import statically_known_true

from shimkit.plugins.shared import float32_tensors
from shimkit.registry import DecompositionDeclined, OpCall, OpPlugin, hookimpl, through_aten_composite

TRILINEAR = "aten::_trilinear.default"
# F.bilinear reaches Inductor as this composite, expanded there into _trilinear.
BILINEAR = "aten::bilinear.default"


def _letters(total: int, expand: Sequence[int]) -> str:
    """The einsum subscript of an input: the letters of the expanded space's dims it has."""
    return "".join(string.ascii_letters[d] for d in range(total) if d not in expand)


def _check_aligned_sizes(total: int, *operands: tuple[torch.Tensor, Sequence[int]]) -> None:
    """Decline where two operands meet in a dim whose sizes are not known to agree (or to broadcast)
    for every size the program allows: einsum would guard on them, and ATen's meta does not check."""
    for d in range(total):
        sizes = []
        for tensor, expand in operands:
            if d not in expand:
                sizes.append(tensor.shape[d - sum(e < d for e in expand)])
        known = [s for s in sizes if not statically_known_true(s == 1)]
        if any(not statically_known_true(a == b) for a, b in zip(known, known[1:])):
            raise DecompositionDeclined(
                f"_trilinear aligns sizes {', '.join(map(str, sizes))} in dim {d}, and the program does not "
                f"say they are equal at every size it allows: export them with one torch.export.Dim")


def trilinear_decomposition(i1: torch.Tensor, i2: torch.Tensor, i3: torch.Tensor, expand1: Sequence[int],
                            expand2: Sequence[int], expand3: Sequence[int], sumdim: Sequence[int],
                            unroll_dim: int = 1) -> torch.Tensor:
    total = i1.dim() + len(expand1)
    if total > len(string.ascii_letters):
        raise ValueError(f"_trilinear over {total} dims: einsum has letters for {len(string.ascii_letters)}")
    wrap = [[d % total if total else d for d in dims] for dims in (expand1, expand2, expand3, sumdim)]
    expand1, expand2, expand3, sumdim = wrap
    for name, tensor, expand in (("i1", i1, expand1), ("i2", i2, expand2), ("i3", i3, expand3)):
        if tensor.dim() + len(expand) != total:
            raise ValueError(f"_trilinear: {name} has {tensor.dim()} dims and expands {len(expand)}, but the "
                             f"expanded space has {total}")
    _check_aligned_sizes(total, (i1, expand1), (i2, expand2), (i3, expand3))
    # ATen's grouping, which decides where 0 * inf becomes NaN: summed dims i3 lacks go with i1 * i2, the
    # others with i3, and a summed unroll_dim last.
    unroll = unroll_dim % total if total else unroll_dim
    first = [d for d in sumdim if d in expand3 and d != unroll]
    second = [d for d in sumdim if d not in expand3 and d != unroll]
    operands = _letters(total, expand1), _letters(total, expand2), _letters(total, expand3)
    pair = "".join(c for c in string.ascii_letters[:total] if c in operands[0] + operands[1]
                   and string.ascii_letters.index(c) not in first)
    kept = "".join(c for c in string.ascii_letters[:total] if c in pair + operands[2]
                   and string.ascii_letters.index(c) not in first + second)
    result = torch.einsum(f"{operands[0]},{operands[1]}->{pair}", i1, i2)
    result = torch.einsum(f"{pair},{operands[2]}->{kept}", result, i3)
    output = "".join(string.ascii_letters[d] for d in range(total) if d not in sumdim)
    result = torch.einsum(f"{kept}->{output}", result)
    if any(isinstance(size, int) and size == 0 for t in (i1, i2, i3) for size in t.shape):
        # A sum over no terms is 0 in ATen, even where another operand is NaN or inf.
        return torch.zeros_like(result)
    return result


def _trilinear_reference(i1, i2, i3, expand1, expand2, expand3, sumdim, unroll_dim=1):
    return torch.ops.aten._trilinear(i1, i2, i3, expand1, expand2, expand3, sumdim, unroll_dim)


def bilinear_calls():
    """``_trilinear`` as ``F.bilinear`` calls it, ``(x1, W, x2, [1, 3], [0], [1, 2], [2, 3])``: batch,
    input and output sizes from 0 to 4, values with NaN and inf, ``unroll_dim`` 0..2."""
    from hypothesis import strategies as st

    elements = st.floats(-4, 4, width=32) | st.sampled_from([float("nan"), float("inf")])

    def tensor(shape):
        return float32_tensors(shape, elements)

    def call(sizes):
        batch, left, right, out = sizes
        return st.builds(lambda x1, w, x2, unroll: OpCall((x1, w, x2, [1, 3], [0], [1, 2], [2, 3], unroll), {}),
                         tensor((batch, left)), tensor((out, left, right)), tensor((batch, right)),
                         st.integers(0, 2))

    return st.tuples(*[st.integers(0, 4)] * 4).flatmap(call)


def bilinear_layer_calls():
    """``bilinear(x1, x2, weight, bias)`` calls: the non-empty ``_trilinear`` calls above as
    ``F.bilinear`` gets them (ATen's composite cannot reshape empty operands), with and without a bias."""
    from hypothesis import strategies as st

    def as_layer(call, with_bias):
        x1, weight, x2 = call.args[:3]
        bias = torch.linspace(-1, 1, weight.shape[0]) if with_bias else None
        return OpCall((x1, x2, weight, bias), {})

    non_empty = bilinear_calls().filter(lambda call: all(t.numel() for t in call.args[:3]))
    return st.builds(as_layer, non_empty, st.booleans())


@hookimpl
def shimkit_op_plugins():
    yield OpPlugin(
        name="bilinear",
        ops=(TRILINEAR, BILINEAR),
        decompositions={TRILINEAR: trilinear_decomposition, BILINEAR: through_aten_composite(BILINEAR)},
        references={TRILINEAR: _trilinear_reference, BILINEAR: torch.ops.aten.bilinear.default},
        input_strategies={TRILINEAR: bilinear_calls, BILINEAR: bilinear_layer_calls},
        decomposition_devices=("mps",),
        doc="_trilinear (nn.Bilinear) as einsums in ATen's order, which become bmm and elementwise ops.",
    )

"""Hypothesis strategies for tensors as passes and kernels meet them.

Kernels and passes break on layouts more often than on values, so :func:`tensors` draws not only
shapes and values but a *view history*: the tensor is carved out of a larger storage by an offset, a
channels-last copy, strided slices, a permutation and a broadcast ``expand``, in that order. The
history is kept in a :class:`TensorRecipe`, which builds a fresh tensor on every call (an in-place
write in one run must not leak into the next) and prints as the Python that builds it.

Values default to small integers stored in the chosen dtype: sums and products of them are exact in
float32, so a pass that changes meaning changes the result, not just its rounding.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import torch
from hypothesis import strategies as st

FLOAT_DTYPES = (torch.float32, torch.float16, torch.bfloat16, torch.float64)
INT_DTYPES = (torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8)
ALL_DTYPES = FLOAT_DTYPES + INT_DTYPES + (torch.bool,)

# What each device's runtime can hold. MPS has no 64-bit floats (docs/metal-aoti.md, "Which name inductor records": the Metal backend
# rejects float64 at lowering), "cpu" is the eager reference and holds everything.
DEVICE_DTYPES = {
    "cpu": ALL_DTYPES,
    "mps": (torch.float32, torch.float16, torch.bfloat16) + INT_DTYPES + (torch.bool,),
    "cuda": ALL_DTYPES,
}

_KINDS = {"float": FLOAT_DTYPES, "int": INT_DTYPES, "bool": (torch.bool,)}


def dtypes(device: str = "cpu", kinds: Sequence[str] = ("float",)) -> st.SearchStrategy[torch.dtype]:
    """Dtypes of the given ``kinds`` (``float``, ``int``, ``bool``) that ``device`` supports.

    float32 comes first, so failures shrink to the dtype people expect.
    """
    if device not in DEVICE_DTYPES:
        raise ValueError(f"unknown device {device!r}; expected one of {sorted(DEVICE_DTYPES)}")
    unknown = set(kinds) - set(_KINDS)
    if unknown:
        raise ValueError(f"unknown dtype kinds {sorted(unknown)}; expected some of {sorted(_KINDS)}")
    chosen = [d for kind in kinds for d in _KINDS[kind] if d in DEVICE_DTYPES[device]]
    if not chosen:
        raise ValueError(f"device {device!r} supports no dtype of kinds {list(kinds)}")
    return st.sampled_from(chosen)


def shapes(min_dims: int = 0, max_dims: int = 4, min_side: int = 1, max_side: int = 4
           ) -> st.SearchStrategy[tuple[int, ...]]:
    """Tensor shapes; small sides keep eager runs cheap while still hitting 0, 1 and >1 sizes."""
    return st.lists(st.integers(min_side, max_side), min_size=min_dims, max_size=max_dims).map(tuple)


@st.composite
def broadcastable_shapes(draw, shape: Sequence[int], *, min_dims: int = 0) -> tuple[int, ...]:
    """A shape that broadcasts *to* ``shape`` (the result keeps ``shape``): trailing dims kept or 1."""
    rank = draw(st.integers(min(min_dims, len(shape)), len(shape)))
    tail = shape[len(shape) - rank:]
    return tuple(draw(st.sampled_from((side, 1))) if side != 1 else 1 for side in tail)


@st.composite
def broadcastable_shape_pairs(draw, min_dims: int = 0, max_dims: int = 4, max_side: int = 4
                              ) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """Two shapes that broadcast against each other (either may grow the other)."""
    result = draw(shapes(min_dims, max_dims, 1, max_side))
    return draw(broadcastable_shapes(result)), draw(broadcastable_shapes(result))


@dataclass(frozen=True)
class TensorRecipe:
    """How to build one tensor: storage values, then a view history that ends at ``shape``.

    ``storage`` holds the flat values; ``offset`` elements are skipped; the rest is viewed as
    ``base_shape``, optionally copied to channels-last, sliced by ``slices`` (``(dim, start, step)``
    keeping ``base`` sides), permuted by ``permutation`` and finally expanded to ``shape``.
    """

    dtype: torch.dtype
    storage: tuple[float, ...]
    offset: int
    base_shape: tuple[int, ...]
    channels_last: bool
    slices: tuple[tuple[int, int, int, int], ...]  # (dim, start, stop, step)
    permutation: tuple[int, ...] | None
    shape: tuple[int, ...]

    @property
    def overlaps(self) -> bool:
        """True when elements share memory (an expanded dim): in-place writes to it are errors."""
        return self.expanded

    @property
    def expanded(self) -> bool:
        return self._pre_expand_shape() != self.shape

    def _pre_expand_shape(self) -> tuple[int, ...]:
        sides = list(self.base_shape)
        for dim, start, stop, step in self.slices:
            sides[dim] = len(range(start, stop, step))
        if self.permutation is not None:
            sides = [sides[p] for p in self.permutation]
        return tuple(sides)

    def build(self) -> torch.Tensor:
        """A fresh tensor: the same steps :meth:`expression` prints, without compiling them."""
        tensor = torch.tensor(self.storage, dtype=self.dtype)[self.offset:].view(self.base_shape)
        if self.channels_last:
            tensor = tensor.contiguous(memory_format=torch.channels_last)
        for dim, start, stop, step in self.slices:
            tensor = tensor[(slice(None),) * dim + (slice(start, stop, step),)]
        if self.permutation is not None:
            tensor = tensor.permute(self.permutation)
        return tensor.expand(self.shape) if self.expanded else tensor

    def expression(self) -> str:
        """A Python expression (needing only ``torch``) that builds this tensor."""
        values = [_literal(v, self.dtype) for v in self.storage]
        code = f"torch.tensor([{', '.join(values)}], dtype={self.dtype})"
        if self.offset:
            code += f"[{self.offset}:]"
        code += f".view({_shape_literal(self.base_shape)})"
        if self.channels_last:
            code += ".contiguous(memory_format=torch.channels_last)"
        for dim, start, stop, step in self.slices:
            index = ", ".join([":"] * dim + [f"{start}:{stop}" + (f":{step}" if step != 1 else "")])
            code += f"[{index}]"
        if self.permutation is not None:
            code += f".permute({_shape_literal(self.permutation)})"
        if self.expanded:
            code += f".expand({_shape_literal(self.shape)})"
        return code

    def describe(self) -> str:
        parts = []
        if self.offset:
            parts.append(f"offset {self.offset}")
        if self.channels_last:
            parts.append("channels-last")
        if self.slices:
            parts.append("sliced")
        if self.permutation is not None:
            parts.append(f"permuted {self.permutation}")
        if self.expanded:
            parts.append("expanded")
        layout = ", ".join(parts) or "contiguous"
        return f"{str(self.dtype).replace('torch.', '')}{list(self.shape)} ({layout})"


def _literal(value: float, dtype: torch.dtype) -> str:
    if dtype == torch.bool:
        return "True" if value else "False"
    if dtype.is_floating_point:
        if math.isnan(value):
            return "float('nan')"
        if math.isinf(value):
            return "float('inf')" if value > 0 else "float('-inf')"
        return repr(float(value))
    return repr(int(value))


def _shape_literal(shape: Sequence[int]) -> str:
    return repr(tuple(shape))


def small_values(dtype: torch.dtype) -> st.SearchStrategy[float]:
    """Small integers in ``dtype``: exact under the sums and products graphs compute."""
    if dtype == torch.bool:
        return st.booleans().map(float)
    if dtype == torch.uint8:
        return st.integers(0, 4).map(float)
    return st.integers(-4, 4).map(float)


def special_values(dtype: torch.dtype) -> st.SearchStrategy[float]:
    """Small integers plus the values that break decompositions: NaN, infinities, signed zero."""
    if not dtype.is_floating_point:
        return small_values(dtype)
    return small_values(dtype) | st.sampled_from((math.nan, math.inf, -math.inf, -0.0))


@st.composite
def tensor_recipes(draw, shape: Sequence[int] | st.SearchStrategy | None = None,
                   dtype: torch.dtype | st.SearchStrategy | None = None,
                   elements=None, layouts: bool = True, allow_overlap: bool = False) -> TensorRecipe:
    """A :class:`TensorRecipe`. ``layouts=False`` gives plain contiguous tensors;
    ``allow_overlap=True`` also draws expanded (stride-0) tensors, which cannot be written in place.
    ``elements`` maps a dtype to a strategy of values (default :func:`small_values`)."""
    if shape is None:
        shape = shapes()
    if isinstance(shape, st.SearchStrategy):
        shape = draw(shape)
    shape = tuple(shape)
    if dtype is None:
        dtype = torch.float32
    if isinstance(dtype, st.SearchStrategy):
        dtype = draw(dtype)
    rank = len(shape)
    pre_expand = list(shape)
    if layouts and allow_overlap and rank and draw(st.booleans()):
        pre_expand = [1 if draw(st.booleans()) else s for s in shape]
    permutation = None
    if layouts and rank >= 2 and draw(st.booleans()):
        permutation = tuple(draw(st.permutations(range(rank))))
        if permutation == tuple(range(rank)):
            permutation = None
    # Sides before the permutation: base dim permutation[i] becomes dim i.
    sides = list(pre_expand)
    if permutation is not None:
        for i, p in enumerate(permutation):
            sides[p] = pre_expand[i]
    base_shape, slices = list(sides), []
    if layouts and rank and draw(st.booleans()):
        for dim in range(rank):
            if not draw(st.booleans()):
                continue
            start, step = draw(st.integers(0, 1)), draw(st.integers(1, 2))
            base_shape[dim] = start + step * max(sides[dim] - 1, 0) + 1 + draw(st.integers(0, 1))
            slices.append((dim, start, start + step * sides[dim], step))
    channels_last = layouts and rank == 4 and draw(st.booleans())
    offset = draw(st.integers(0, 2)) if layouts else 0
    numel = math.prod(base_shape)
    values = draw(st.lists((elements or small_values)(dtype), min_size=numel + offset,
                           max_size=numel + offset))
    return TensorRecipe(dtype, tuple(values), offset, tuple(base_shape), channels_last, tuple(slices),
                        permutation, shape)


def tensors(shape=None, dtype=None, elements=None, layouts: bool = True, allow_overlap: bool = False
            ) -> st.SearchStrategy[torch.Tensor]:
    """Tensors with arbitrary strides, storage offsets and view histories (see :func:`tensor_recipes`)."""
    return tensor_recipes(shape, dtype, elements, layouts, allow_overlap).map(TensorRecipe.build)

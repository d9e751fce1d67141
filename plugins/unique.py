"""``torch.unique`` and ``torch.unique_consecutive`` as a stable sort, an adjacent-difference mask and ``nonzero``.

``aten._unique2`` (``torch.unique``), ``aten.unique_dim`` (``torch.unique(dim=)``) and ``aten.unique_consecutive``
(with or without ``dim``) are not core ATen, so a model calling them stops in ``to_edge`` on every backend.
(``aten.unique_dim_consecutive`` has no fake kernel: a model calling it directly does not export.) ATen's own
CPU kernel (``unique_cpu_sorted_template`` in ``Unique.cpp``, after NumPy's ``arraysetops``) is a sort
followed by a compaction, and so is this, in core ops:

1. flatten (``dim``: the slices along it as the rows of a 2-D view) and sort with ``argsort(stable=True)``,
   which ``to_edge`` keeps whole and Inductor lowers to the device's stable sort (shimkit's MSL sort on Metal,
   a generated Triton sort or the runtime's ``aoti_torch_cuda_sort_stable`` on CUDA); the consecutive ops
   sort nothing but the inverse's merge (4.);
2. a mask of the positions whose value (row) differs from the one before, the first position always;
3. ``nonzero`` of that mask: the first position of every group. Its length is the number of unique values,
   the data-dependent (unbacked) size of the outputs, and is the outputs' size itself, to which the
   exported program's own output size (ATen's) is rebound; ``nonzero`` is the ``nonzero`` plugin's kernel
   (Metal's runtime has none, nor CUDA's);
4. the values are the elements (with ``dim``: the input's slices, selected along ``dim``) at the group
   starts, the counts the differences of consecutive starts (the last group ending at the length), the
   inverse each position's group scattered back through the sort permutation. A position's group is the
   number of starts at or before it, minus one: a running count, which Metal has only as a scan bounded by
   the largest size (``plugins/cumsum.py``); it is computed here by one more sort instead (the starts merged
   with the positions), so dynamic sizes need no upper bound.

Semantics kept from ATen: the values come out sorted ascending whatever ``sorted`` says (ATen's CPU and CUDA
kernels always sort); NaN is unequal to everything, itself included, so every NaN is a value of its own with
a count of 1, after every number (ATen's ``IsUnique<equal_nan=false>``), here in input order (ATen's sort is
not stable past 16 elements, so which NaN of the input its inverse maps to which NaN value is its sort's
accident); ``-0.0`` and ``0.0`` are one value, returned as the first of them in input order (the sign of
ATen's may be the other one's, for the same reason; the values compare equal either way); bool, integer,
float, half, bfloat16 and double inputs keep their dtype (bool is sorted as ``uint8``, which the Metal sort
has);
inverse and counts are int64, the inverse shaped like the input (a 0-d input gives one value and a 0-d
inverse); ``_unique2`` and the flat ``unique_consecutive`` return an empty inverse or counts when not asked
for them, while ``unique_dim`` and ``unique_consecutive(dim=)`` always return both, as ATen does, and
``unique_consecutive(dim=0)`` of a 1-d tensor is the flat one; empty inputs give empty outputs, and ``dim``
refuses other empty dims as ATen does. Complex inputs, which ATen refuses, are declined.

``unique_dim`` sorts rows lexicographically, least significant column first: one stable sort per element of a
row, so it is decomposed where a row's length is static or bounded (``torch.export.Dim(..., max=N)``; past a
dynamic width the last column is sorted again, which changes nothing) and at most :data:`MAX_ROW_LENGTH`;
otherwise it is declined (:class:`~shimkit.registry.DecompositionDeclined`: the op stays and the audit
reports it stopping ``to_edge``, with the reason). Rows holding NaN differ from ATen in order only: ATen's
comparator is no ordering there (NaN neither less nor greater than anything, so where such rows land is its
``std::sort``'s accident), here NaN sorts after every number of its column; in both each such row is a
group of its own (``at::equal`` is false for NaN), so values and counts agree as multisets.
"""
from __future__ import annotations

import math

import torch

from shimkit.plugins.cumsum import largest_size
from shimkit.registry import DecompositionDeclined, OpPlugin, hookimpl

UNIQUE = "aten::_unique2.default"
UNIQUE_DIM = "aten::unique_dim.default"
UNIQUE_CONSECUTIVE = "aten::unique_consecutive.default"

# The longest row unique_dim sorts: one stable sort per element of a row.
MAX_ROW_LENGTH = 64


def _sort_key(values: torch.Tensor) -> torch.Tensor:
    """What the sort compares: bool as uint8 (the MSL sort has no bool), everything else as it is."""
    return values.to(torch.uint8) if values.dtype == torch.bool else values


def _first_of_groups(differs: torch.Tensor) -> torch.Tensor:
    """``differs[i]``: position ``i`` holds a value unlike the one before it. Returns the mask of the
    first position of every group (the first position always starts one)."""
    return differs | (torch.arange(differs.shape[0], device=differs.device) == 0)


def _previous(rows: torch.Tensor) -> torch.Tensor:
    """Each row's predecessor along dim 0 (the first row its own), with an index valid at every length."""
    positions = torch.arange(rows.shape[0], device=rows.device)
    return rows.index_select(0, (positions - 1).clamp(min=0))


def _group_of_each(starts: torch.Tensor, length: int | torch.SymInt) -> torch.Tensor:
    """The group of every position ``0 .. length - 1`` given the groups' first positions ``starts``
    (ascending): the number of starts at or before it, minus one. A running count is a scan, which Metal
    has only as a log-step one bounded by the largest size (``plugins/cumsum.py``); here it is a sort
    instead: the starts and the positions merged (start ``p`` as key ``2p``, position ``i`` as ``2i + 1``,
    so a start precedes the position it starts), position ``i`` lands at rank ``i`` plus the number of
    starts at or before it. No bound is needed, so dynamic sizes without one lower too."""
    positions = torch.arange(length, device=starts.device)
    keys = torch.cat([starts * 2, positions * 2 + 1])
    order = torch.argsort(keys, stable=True)
    ranks = torch.zeros_like(keys).scatter(0, order, torch.arange(keys.shape[0], device=keys.device))
    return ranks.narrow(0, starts.shape[0], length) - positions - 1


def _compact(rows: torch.Tensor, differs: torch.Tensor, permutation: torch.Tensor | None, *,
             inverse: bool = True, counts: bool = True,
             source: tuple[torch.Tensor, int] | None = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Values, inverse and counts from ``rows`` (sorted, or in input order for the consecutive ops),
    ``differs`` (row ``i`` unlike row ``i - 1``) and ``permutation`` (sorted position -> input position,
    ``None`` for the identity). The inverse is indexed by input position; an inverse or counts not asked
    for is empty, as ATen returns it. With ``source`` (the input and a dim), the values are its slices
    along that dim at the groups' first input positions, selected there rather than reshaped from rows:
    no view of a data-dependent size is left for the backend's view passes to reason about.

    The group starts come from one ``nonzero``, whose length is the data-dependent (unbacked) number of
    groups; the outputs' sizes are that symbol itself, which the exported program's own (ATen's) output
    symbol is rebound to."""
    length = rows.shape[0]
    first = _first_of_groups(differs)
    starts = first.nonzero()[:, 0]
    groups = starts.shape[0]
    torch._check(groups <= length)
    if source is None:
        values = rows.index_select(0, starts)
    else:
        tensor, dim = source
        values = tensor.index_select(dim, starts if permutation is None else permutation.index_select(0, starts))
    group_counts = group_of_input = _empty_long(rows)
    if counts:
        # Each group ends where the next starts, the last at the length (a 0-d tensor: as a symbolic Python
        # number mixed into tensor arithmetic it would make fake kernels compare sizes).
        total = torch.scalar_tensor(length, dtype=torch.int64, device=rows.device).reshape(1)
        group_counts = torch.cat([starts, total]).narrow(0, 1, groups) - starts
    if inverse:
        group_of_input = _group_of_each(starts, length)
        if permutation is not None:
            group_of_input = torch.zeros_like(group_of_input).scatter(0, permutation, group_of_input)
    return values, group_of_input, group_counts


def _empty_long(like: torch.Tensor) -> torch.Tensor:
    return torch.empty((0,), dtype=torch.int64, device=like.device)


def unique_decomposition(self: torch.Tensor, sorted: bool = True, return_inverse: bool = False,
                         return_counts: bool = False) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``aten._unique2``: ``torch.unique(x, sorted=, return_inverse=, return_counts=)`` without ``dim``."""
    if self.is_complex():
        raise DecompositionDeclined(f"unique of {self.dtype} values: ATen has no complex unique to match")
    flat = self.reshape(-1)
    permutation = torch.argsort(_sort_key(flat), stable=True)
    ordered = flat.index_select(0, permutation)
    values, inverse, counts = _compact(ordered, ordered != _previous(ordered), permutation,
                                       inverse=return_inverse, counts=return_counts)
    return values, inverse.reshape(self.shape) if return_inverse else inverse, counts


def _rows(self: torch.Tensor, dim: int) -> tuple[torch.Tensor, int]:
    """``self``'s slices along ``dim`` as the rows of a 2-D tensor, and ``dim`` made non-negative;
    ATen's checks on the dim and on empty dims."""
    if self.dim() == 0:
        raise IndexError(f"Dimension specified as {dim} but tensor has no dimensions")
    if not -self.dim() <= dim < self.dim():
        raise IndexError(f"Dimension out of range (expected to be in range of [{-self.dim()}, {self.dim() - 1}], "
                         f"but got {dim})")
    dim %= self.dim()
    others = [size for d, size in enumerate(self.shape) if d != dim]
    if any(size == 0 for size in others):
        # ATen's messages (_unique_dim_cpu_template), for unique_dim and unique_consecutive(dim=) alike.
        raise RuntimeError("There are 0 sized dimensions, and they aren't selected, so unique cannot be applied"
                           if self.shape[dim] != 0 else
                           "Number of zero sized dimensions is more than one, so unique cannot be applied ")
    return self.movedim(dim, 0).reshape(self.shape[dim], math.prod(others)), dim


def unique_dim_decomposition(self: torch.Tensor, dim: int, sorted: bool = True, return_inverse: bool = False,
                             return_counts: bool = False) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``aten.unique_dim``: the unique slices along ``dim``, sorted lexicographically (ATen always returns
    the inverse and counts too)."""
    if self.is_complex():
        raise DecompositionDeclined(f"unique_dim of {self.dtype} values: ATen has no complex unique to match")
    rows, dim = _rows(self, dim)
    width = rows.shape[1]
    widest = largest_size(width)
    if widest is None:
        raise DecompositionDeclined(
            f"unique_dim over dim {dim}: a row holds a dynamic number of elements ({width}) with no upper bound, "
            f"and the lexicographic sort takes one stable sort per element: export the other dims static or "
            f"bounded (torch.export.Dim(..., max=N))")
    if widest > MAX_ROW_LENGTH:
        raise DecompositionDeclined(
            f"unique_dim over dim {dim}: rows of up to {widest} elements would take {widest} sorts (one per "
            f"element; at most {MAX_ROW_LENGTH} are decomposed)")
    permutation = torch.arange(rows.shape[0], device=self.device)
    # Least significant column first: each stable sort keeps the order of the columns after it. Under a
    # dynamic width the columns past the last are the last again: sorting twice by one key changes nothing.
    for column in reversed(range(widest)):
        if isinstance(width, int):
            key = rows.select(1, column)
        else:
            index = torch.scalar_tensor(column, dtype=torch.int64, device=self.device).clamp(max=width - 1)
            key = rows.index_select(1, index.reshape(1)).reshape(-1)
        key = _sort_key(key).index_select(0, permutation)
        permutation = permutation.index_select(0, torch.argsort(key, stable=True))
    ordered = rows.index_select(0, permutation)
    return _compact(ordered, (ordered != _previous(ordered)).any(1), permutation, source=(self, dim))


def unique_consecutive_decomposition(self: torch.Tensor, return_inverse: bool = False, return_counts: bool = False,
                                     dim: int | None = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``aten.unique_consecutive``: runs of equal values (or, with ``dim``, of equal slices) in input order."""
    if self.is_complex():
        raise DecompositionDeclined(f"unique_consecutive of {self.dtype} values: ATen has no complex unique to "
                                    f"match")
    if dim is not None and not (dim == 0 and self.dim() == 1):
        return _unique_dim_consecutive(self, dim, return_inverse, return_counts)
    flat = self.reshape(-1)
    values, inverse, counts = _compact(flat, flat != _previous(flat), None, inverse=return_inverse,
                                       counts=return_counts)
    return values, inverse.reshape(self.shape) if return_inverse else inverse, counts


def _unique_dim_consecutive(self: torch.Tensor, dim: int, return_inverse: bool = False,
                            return_counts: bool = False) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """ATen's ``unique_dim_consecutive``: runs of equal slices along ``dim`` (inverse and counts always)."""
    if self.is_complex():
        raise DecompositionDeclined(f"unique_consecutive of {self.dtype} values: ATen has no complex unique to "
                                    f"match")
    rows, dim = _rows(self, dim)
    return _compact(rows, (rows != _previous(rows)).any(1), None, source=(self, dim))


# -- references and inputs for the tests ----------------------------------------------------------------

def _unique_reference(self, sorted=True, return_inverse=False, return_counts=False):
    return torch.ops.aten._unique2.default(self, sorted, return_inverse, return_counts)


def _unique_dim_reference(self, dim, sorted=True, return_inverse=False, return_counts=False):
    return torch.ops.aten.unique_dim.default(self, dim, sorted, return_inverse, return_counts)


def _unique_consecutive_reference(self, return_inverse=False, return_counts=False, dim=None):
    return torch.ops.aten.unique_consecutive.default(self, return_inverse, return_counts, dim)


_DTYPES = (torch.float32, torch.int64, torch.bool, torch.float16, torch.bfloat16, torch.int32, torch.uint8)


def _tensors(nans: str, min_rank: int = 0, min_side: int = 0):
    """Tensors 0-d to 3-d (sides ``min_side``..5) of values drawn from a few, so that repeats are many: signed
    zeros and infinities for the floating dtypes, small integers for the others. ``nans``: ``"none"``,
    ``"one"`` (at most one NaN: ATen's sort is not stable past 16 elements, so the order of several NaNs,
    which its inverse shows, is its own) or ``"many"``."""
    from hypothesis import strategies as st
    from hypothesis.extra import numpy as hnp
    import numpy as np

    specials = [0.0, -0.0, 1.0, -1.0, 2.5, float("inf"), -float("inf")] + ([float("nan")] if nans == "many" else [])
    floats = st.sampled_from(specials) | st.integers(-3, 3).map(float)
    shapes = hnp.array_shapes(min_dims=min_rank, max_dims=3, min_side=min_side, max_side=5)

    @st.composite
    def tensor(draw):
        shape, dtype = draw(shapes), draw(st.sampled_from(_DTYPES))
        if not dtype.is_floating_point:
            low, high = (0, 1) if dtype == torch.bool else (0, 3) if dtype == torch.uint8 else (-3, 3)
            return torch.from_numpy(draw(hnp.arrays(np.int64, shape, elements=st.integers(low, high)))).to(dtype)
        values = draw(hnp.arrays(np.float32, shape, elements=floats))
        if nans == "one" and values.size and draw(st.booleans()):
            values.flat[draw(st.integers(0, values.size - 1))] = np.nan
        return torch.from_numpy(values).to(dtype)

    return tensor()


def unique_inputs():
    """``_unique2(self, sorted, return_inverse, return_counts)``: tensors of repeated values (one NaN at most,
    signed zeros and infinities among the floating ones; bool, integer and half types too), every combination
    of flags."""
    from hypothesis import strategies as st

    return st.tuples(_tensors("one"), st.booleans(), st.booleans(), st.booleans())


def unique_consecutive_inputs():
    """``unique_consecutive(self, return_inverse, return_counts, dim)``: as :func:`unique_inputs` but with NaN
    anywhere (nothing is sorted), ``dim`` absent or one of the tensor's (either sign)."""
    from hypothesis import strategies as st

    def call(x, inverse, counts, dim_choice):
        if dim_choice is None:
            return (x, inverse, counts)
        return (x, inverse, counts, dim_choice % x.dim() - (x.dim() if dim_choice < 0 else 0))

    flat = st.builds(call, _tensors("many"), st.booleans(), st.booleans(), st.none())
    dims = st.builds(call, _tensors("many", min_rank=1, min_side=1), st.booleans(), st.booleans(),
                     st.integers(-3, 2))
    return flat | dims


def unique_dim_inputs():
    """``unique_dim(self, dim, sorted, return_inverse, return_counts)``: 1-d to 3-d tensors without NaN (see the
    module's docstring), every dim (negative too), every combination of flags."""
    from hypothesis import strategies as st

    def call(x, dim_choice, flags):
        dim = dim_choice % x.dim() - (x.dim() if dim_choice < 0 else 0)
        return (x, dim, *flags)

    return st.builds(call, _tensors("none", min_rank=1, min_side=1), st.integers(-3, 2),
                     st.tuples(st.booleans(), st.booleans(), st.booleans()))


@hookimpl
def shimkit_op_plugins():
    ops = (UNIQUE, UNIQUE_DIM, UNIQUE_CONSECUTIVE)
    yield OpPlugin(
        name="unique",
        ops=ops,
        decompositions={UNIQUE: unique_decomposition, UNIQUE_DIM: unique_dim_decomposition,
                        UNIQUE_CONSECUTIVE: unique_consecutive_decomposition},
        # Not core ATen: without this, torch.unique and torch.unique_consecutive stop in to_edge on every backend.
        pre_edge=ops,
        references={UNIQUE: _unique_reference, UNIQUE_DIM: _unique_dim_reference,
                    UNIQUE_CONSECUTIVE: _unique_consecutive_reference},
        input_strategies={UNIQUE: unique_inputs, UNIQUE_DIM: unique_dim_inputs,
                          UNIQUE_CONSECUTIVE: unique_consecutive_inputs},
        doc="unique / unique_consecutive as a stable sort, an adjacent-difference mask and nonzero (NaN each "
            "its own value, as ATen).",
    )

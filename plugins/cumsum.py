"""``aten::cumsum`` as a log-step prefix sum of gathers and adds, for devices without a cumsum kernel.

Inductor has no scan codegen for mps and falls back to ``aoti_torch_mps_cumsum`` (recorded as
``at::_ops::cumsum::call``), which ExecuTorch's Metal runtime lacks. A Hillis–Steele scan needs only
``arange``, ``index_select``, ``where`` and ``add``, which Inductor turns into Metal kernels of its
own: step ``k`` adds to every element the value ``2**k`` places before it (zero where there is none),
after which every element holds the sum of the ``2**(k+1)`` elements ending at it.

The number of steps is a property of the program, not of the example: it is ``ceil(log2(n))`` for
the largest length ``n`` the scanned dimension can take, a static size or the upper bound of a
dynamic one (``Dim("seq", max=128)`` gives 7 steps, right for every length from 0 to 128). Each step
shifts with an index that is valid at every length, so nothing guards on the example size. A dynamic
dimension without an upper bound has no step count that is right for every length: the
decomposition declines (:class:`~shimkit.registry.DecompositionDeclined`), the op stays in the graph
and the audit reports the missing kernel with the reason, instead of a program that is wrong past
some length.

Semantics kept from ATen: integral and bool inputs sum in int64 unless ``dtype`` says otherwise (and
wrap the same way); ``dtype`` casts before summing; a 0-d tensor is returned cast; ``dim`` may be
negative and is range-checked; an all-``-0.0`` prefix sums to ``+0.0`` as ATen's ``0 + x`` does.
half and bfloat16 are summed in float32 and rounded once, as ATen accumulates them. Floating-point
sums are added in a different order than ATen's sequential loop, so they agree to rounding, not bit
for bit (every prefix is a sum of the same terms).
"""

from __future__ import annotations

from typing import Any, Callable

import torch

from shimkit.passes.meta import finite_bound
from shimkit.plugins.shared import ACCUMULATE_IN_FLOAT32
from shimkit.registry import DecompositionDeclined, OpPlugin, hookimpl

CUMSUM = "aten::cumsum.default"


def largest_size(size: int | torch.SymInt) -> int | None:
    """The largest value ``size`` can take in this program: itself when static, the upper bound of
    its symbolic expression when dynamic, ``None`` when that is unbounded."""
    if isinstance(size, int):
        return size
    node = size.node
    if node.shape_env is None:
        return None
    return finite_bound(node.shape_env.bound_sympy(node.expr).upper)


def scan_bound(length: int | torch.SymInt, dim: int, op: str) -> int:
    """The largest size a scanned dimension of ``length`` can take, which bounds a log-step scan's steps;
    :class:`DecompositionDeclined` (naming ``op``) for a dynamic size with no upper bound."""
    largest = largest_size(length)
    if largest is None:
        raise DecompositionDeclined(
            f"{op} scans dim {dim}, a dynamic size ({length}) with no upper bound, and a log-step scan "
            f"needs one: export with an upper bound on that dimension (torch.export.Dim(..., max=N))")
    return largest


def log_step_scan(values: torch.Tensor, dim: int, combine: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
                  identity: float, op: str) -> torch.Tensor:
    """The inclusive scan of ``values`` along ``dim`` (already checked and made non-negative) under
    ``combine``, an associative function with ``identity``: Hillis–Steele steps up to the largest
    size ``dim`` can take. Raises :class:`DecompositionDeclined` (naming ``op``) for an unbounded
    dynamic dimension."""
    length = values.shape[dim]
    largest = scan_bound(length, dim, op)
    positions = torch.arange(length, device=values.device)
    along_dim = [length if d == dim else 1 for d in range(values.dim())]
    neutral = torch.full((), identity, dtype=values.dtype, device=values.device)
    shift = 1
    while shift < largest:
        source = positions - shift
        has_source = (source >= 0).reshape(along_dim)
        earlier = values.index_select(dim, source.clamp(min=0))
        values = combine(values, torch.where(has_source, earlier, neutral))
        shift *= 2
    return values


def scan_decomposition(self: torch.Tensor, dim: int, dtype: torch.dtype | None,
                       combine: Callable[[torch.Tensor, Any], torch.Tensor], identity: int, op: str) -> torch.Tensor:
    """``op`` (``cumsum``, ``cumprod``) by ATen's rules: integral and bool inputs scan in int64 unless
    ``dtype`` says otherwise, ``dtype`` casts first, ``dim`` is range-checked (a 0-d tensor takes 0 and
    -1 and is returned cast), half and bfloat16 scan in float32 and round once, and floating-point
    values start from ``identity`` as ATen's loop does (``0 + -0.0`` is ``+0.0``)."""
    if dtype is None and not (self.is_floating_point() or self.is_complex()):
        dtype = torch.int64
    values = self if dtype is None else self.to(dtype)
    rank = max(values.dim(), 1)
    if not -rank <= dim < rank:
        raise IndexError(f"Dimension out of range (expected to be in range of [{-rank}, {rank - 1}], but got {dim})")
    if values.dim() == 0:
        return values.clone()
    result_dtype = values.dtype
    if result_dtype in ACCUMULATE_IN_FLOAT32:
        values = values.float()
    if values.is_floating_point() or values.is_complex():
        values = combine(values, identity)
    return log_step_scan(values, dim % rank, combine, identity, op).to(result_dtype)


def cumsum_decomposition(self: torch.Tensor, dim: int, *, dtype: torch.dtype | None = None) -> torch.Tensor:
    return scan_decomposition(self, dim, dtype, torch.add, 0, "cumsum")


def _cumsum_reference(self, dim, *, dtype=None):
    return torch.cumsum(self, dim, dtype=dtype)


@hookimpl
def shimkit_op_plugins():
    yield OpPlugin(
        name="cumsum",
        ops=(CUMSUM,),
        decompositions={CUMSUM: cumsum_decomposition},
        references={CUMSUM: _cumsum_reference},
        # Inductor generates scans for CUDA (Triton), not for Metal.
        decomposition_devices=("mps",),
        doc="cumsum as a log-step prefix sum (narrow, add, cat) for devices without a cumsum shim.",
    )

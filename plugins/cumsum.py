"""``aten::cumsum`` as a log-step prefix sum of slices and adds, for devices without a cumsum kernel.

Inductor has no scan codegen for mps and falls back to ``aoti_torch_mps_cumsum`` (recorded as
``at::_ops::cumsum::call``), which ExecuTorch's Metal runtime lacks. A Hillis–Steele scan needs only
``narrow``, ``cat`` and ``add``, which Inductor turns into Metal kernels of its own: after step ``k``
every element holds the sum of the ``2**k`` elements ending at it, so ``ceil(log2(n))`` steps give the
prefix sums.

Semantics kept from ATen: integral and bool inputs sum in int64 unless ``dtype`` says otherwise (and
wrap the same way); ``dtype`` casts before summing; a 0-d tensor is returned cast; ``dim`` may be
negative and is range-checked; an all-``-0.0`` prefix sums to ``+0.0`` as ATen's ``0 + x`` does.
half and bfloat16 are summed in float32 and rounded once, as ATen accumulates them. Floating-point
sums are added in a different order than ATen's sequential loop, so they agree to rounding, not bit
for bit (every prefix is a sum of the same terms). The number of steps follows the static length of
``dim``.
"""

from __future__ import annotations

import torch

from shimkit.registry import OpPlugin, hookimpl

CUMSUM = "aten::cumsum.default"
_ACCUMULATE_IN_FLOAT32 = (torch.float16, torch.bfloat16)


def cumsum_decomposition(self: torch.Tensor, dim: int, *, dtype: torch.dtype | None = None) -> torch.Tensor:
    if dtype is None and not (self.is_floating_point() or self.is_complex()):
        dtype = torch.int64
    values = self if dtype is None else self.to(dtype)
    if values.dim() == 0:
        if dim not in (0, -1):
            raise IndexError(f"Dimension out of range (expected to be in range of [-1, 0], but got {dim})")
        return values.clone()
    if not -values.dim() <= dim < values.dim():
        raise IndexError(f"Dimension out of range (expected to be in range of "
                         f"[{-values.dim()}, {values.dim() - 1}], but got {dim})")
    dim = dim % values.dim()
    result_dtype = values.dtype
    if result_dtype in _ACCUMULATE_IN_FLOAT32:
        values = values.float()
    if values.is_floating_point() or values.is_complex():
        values = values + 0  # ATen starts from 0: a leading -0.0 becomes +0.0
    length = values.shape[dim]
    shift = 1
    while shift < length:
        head = values.narrow(dim, 0, shift)
        tail = values.narrow(dim, shift, length - shift) + values.narrow(dim, 0, length - shift)
        values = torch.cat([head, tail], dim)
        shift *= 2
    return values.to(result_dtype)


def _cumsum_reference(self, dim, *, dtype=None):
    return torch.cumsum(self, dim, dtype=dtype)


@hookimpl
def shimkit_op_plugins():
    yield OpPlugin(
        name="cumsum",
        ops=(CUMSUM,),
        decompositions={CUMSUM: cumsum_decomposition},
        references={CUMSUM: _cumsum_reference},
        doc="cumsum as a log-step prefix sum (narrow, add, cat) for devices without a cumsum shim.",
    )

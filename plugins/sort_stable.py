"""``torch.sort(x, stable=True)`` (``aten::sort.stable``) as the stable ``argsort`` and a ``gather``, so that it
gets past ``to_edge``.

``aten.sort.stable`` is not core ATen and has no decomposition in ``to_edge``'s table, so the AOTI partitioner
cannot keep it whole and the edge verifier stops it, on Metal and on CUDA alike (core ATen is device-blind;
``plugins/cuda_runtime.py``'s ``aoti_torch_cuda_sort_stable`` is never reached). ``torch.argsort(x,
stable=True)`` lowers because its op, ``aten.argsort.stable``, *is* in that table: the partitioner keeps it
whole, the verifier lets the ops the partitioner keeps through, and Inductor expands it into
``sort.stable``: on Metal a call of ``plugins/sort``'s MSL sort, on CUDA a Triton sort Inductor generates
(checked on an H200: no kernel call left) or, where it cannot, a call of the runtime's
``aoti_torch_cuda_sort_stable``. This decomposition writes ``sort.stable`` as that form: the stable
``argsort`` and the values gathered through its indices (``gather``, core ATen), so Inductor sorts as a
model's own ``sort.stable`` would have been sorted had ``to_edge`` let it through; it applies on every
device, since every device's ``to_edge`` stops the op.

Semantics kept from ATen: every sort is stable (a request with ``stable=False`` or ``None`` gets a stable
sort, which is one any sort may return; Metal's kernel sorts stably whatever it is asked); ATen's NaN order
(NaN after every number ascending, before descending), signed zeros as equal (in input order); ``dim`` may be
negative; a 0-d tensor is its own value at index 0; the values are the input's elements bit for bit, NaN
payloads and zero signs included (gathered, not recomputed); bool is sorted as ``uint8`` (the MSL sort has
no bool), the values keep bool.
"""

from __future__ import annotations

import torch

from shimkit.plugins.sort import sort_inputs, sort_reference
from shimkit.registry import OpPlugin, hookimpl

SORT = "aten::sort.stable"


def sort_stable_decomposition(self: torch.Tensor, *, stable: bool | None = None, dim: int = -1,
                              descending: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    rank = max(self.dim(), 1)
    if not -rank <= dim < rank:
        raise IndexError(f"Dimension out of range (expected to be in range of [{-rank}, {rank - 1}], but got {dim})")
    key = self.to(torch.uint8) if self.dtype == torch.bool else self
    # aten.argsort.stable: kept whole by the AOTI partitioner, expanded by Inductor into the sort kernel call.
    indices = torch.argsort(key, stable=True, dim=dim, descending=descending)
    if self.dim() == 0:
        return self.clone(), indices
    return self.gather(dim, indices), indices


@hookimpl
def shimkit_op_plugins():
    yield OpPlugin(
        name="sort-stable",
        ops=(SORT,),
        decompositions={SORT: sort_stable_decomposition},
        # Not core ATen and not in to_edge's table: without this torch.sort(stable=True) stops in to_edge on
        # every backend, although each has the sort kernel it would reach.
        pre_edge=(SORT,),
        references={SORT: sort_reference},
        input_strategies={SORT: sort_inputs},
        doc="sort(stable=True) as the stable argsort (which to_edge keeps) and a gather of the values.",
    )

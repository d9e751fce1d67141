"""The ``addmm`` policy: keep it where the device has a shim or compiles it, else rewrite it as ``mm`` plus a
scaled add.

``addmm`` reaches a graph from user code, from decompositions (``linear`` of a 2-D input) and, inside
Inductor, from its own ``mm + bias`` re-fusion. The rewrite is the registry's ``aten::addmm``
decomposition (the ``addmm`` op plugin), applied in place by
:class:`~shimkit.passes.decompose.DecomposeInPlace`, so there is one implementation of its
``beta``/``alpha`` semantics (``beta == 0`` ignores ``self``, NaN and inf included) for both the graph
stage and the post-grad stage.
"""

from __future__ import annotations

from typing import Any, Callable

import torch
from torch import fx

from shimkit.passes.base import PassContext, PassError
from shimkit.passes.decompose import DecomposeInPlace
from shimkit.passes.ops import aten_op

ADDMM = torch.ops.aten.addmm.default


class AddmmPolicy(DecomposeInPlace):
    """Rewrite every ``addmm`` with ``decomposition`` unless ``keep`` (the device has an addmm shim, or
    its code generator compiles ``addmm``: CUDA's Triton GEMM templates).

    With neither a shim nor a decomposition an ``addmm`` in the graph is an error: Inductor would
    emit a kernel the runtime lacks.
    """

    name = "addmm_to_mm"

    def __init__(self, decomposition: Callable[..., Any] | None, *, keep: bool = False,
                 name: str | None = None) -> None:
        super().__init__({ADDMM: decomposition} if decomposition is not None and not keep else {}, name=name)
        self.keep = keep
        self.decomposition = decomposition

    @classmethod
    def from_capabilities(cls, capabilities: Any, **kwargs: Any) -> "AddmmPolicy":  # type: ignore[override]
        return cls(capabilities.decomposition(ADDMM), keep=capabilities.keeps(ADDMM), **kwargs)

    def transform(self, graph: fx.Graph, context: PassContext) -> bool:
        if self.keep:
            return False
        if self.decomposition is None:
            for node in graph.nodes:
                if node.op == "call_function" and aten_op(node.target) is ADDMM:
                    raise PassError(self.pass_name, node, "the device has no aten::addmm shim and no plugin "
                                    "provides an aten::addmm decomposition (is the 'addmm' plugin blocked?)")
            return False
        return super().transform(graph, context)

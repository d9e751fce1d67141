"""Unbacked size symbols that an earlier retrace allocated and never bound, forgotten before Inductor traces.

A data-dependent op (``nonzero``, ``masked_select``, ``unique``, boolean-mask indexing) gets a fresh
unbacked size symbol each time its fake implementation runs; the symbol waits in the program's ShapeEnv,
"pending", until the traced node's output binds it. ``to_edge``'s passes run those implementations again
on values they then discard, so their symbols stay pending (12 for ``where(x > 0, x, 0).nonzero()``).
ExecuTorch's AOTI backend hands Inductor the program's fake inputs, hence the same ShapeEnv, and
Inductor's trace requires every pending symbol to appear in the outputs of the next node it traces: the
first node fails with ``PendingUnbackedSymbolNotFound`` (stock and with shimkit alike).

None of those symbols is reachable from the graph: every node's value was bound when its own trace
recorded it. Forgetting them is what the retraces should have done; Inductor's own trace allocates and
binds fresh ones for each data-dependent node.
"""

from __future__ import annotations

from torch import fx

from shimkit.passes.base import PassContext, ShimkitPass
from shimkit.passes.meta import shape_env_of


class ForgetStaleUnbackedSymbols(ShimkitPass):
    """Clears the pending unbacked symbols of the ShapeEnv behind the graph's fake values; the graph itself is
    left as it is (the result says unmodified)."""

    def transform(self, graph: fx.Graph, context: PassContext) -> bool:
        shape_env = shape_env_of(graph)
        if shape_env is not None:
            shape_env.pending_fresh_unbacked_symbols.clear()
        return False

"""The edge dialect's ``*_copy`` view ops, removed before Inductor by the ``view_copy_to_view`` pass.

``to_edge`` turns every view into its functional ``*_copy`` twin; several have no c-shim and would fall
back to the proxy executor, which the libtorch-free runtime lacks (``aten::split_copy.Tensor`` in the
seed). Each has a view op with the same signature, which Inductor generates code for, so no kernel is
needed: the pass swaps the target wherever aliasing is safe (docs/metal-aoti.md, "The view_copy family"). The ops covered are
exactly the pass's table, so the two cannot drift apart.
"""

from shimkit.passes.view_replacement import VIEW_OF_COPY, ReplaceViewCopyWithView
from shimkit.registry import OpPlugin, hookimpl


@hookimpl
def shimkit_op_plugins():
    yield OpPlugin(
        name="view-copy",
        ops=tuple(VIEW_OF_COPY),
        eliminated_by={op: ReplaceViewCopyWithView.name for op in VIEW_OF_COPY},
        doc="split_copy, slice_copy and the rest of the view_copy family, replaced by views.",
    )

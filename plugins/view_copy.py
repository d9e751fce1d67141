"""The edge dialect's ``*_copy`` view ops, removed before Inductor by the ``view_copy_to_view`` pass.

``to_edge`` turns every view into its functional ``*_copy`` twin; several have no c-shim and would fall
back to the proxy executor, which the libtorch-free runtime lacks (``aten::split_copy.Tensor`` in the
seed). Each has a view op with the same signature, which Inductor generates code for, so no kernel is
needed: the pass swaps the target wherever aliasing is safe (reference §6).
"""

from shimkit.registry import OpPlugin, hookimpl

VIEW_COPY_OPS = (
    "aten::slice_copy.Tensor",
    "aten::select_copy.int",
    "aten::split_copy.Tensor",
    "aten::split_with_sizes_copy.default",
    "aten::unbind_copy.int",
    "aten::transpose_copy.int",
    "aten::t_copy.default",
    "aten::permute_copy.default",
    "aten::expand_copy.default",
    "aten::view_copy.default",
    "aten::view_copy.dtype",
    "aten::unsqueeze_copy.default",
    "aten::squeeze_copy.dim",
    "aten::squeeze_copy.dims",
    "aten::as_strided_copy.default",
    "aten::diagonal_copy.default",
    "aten::unfold_copy.default",
    "aten::detach_copy.default",
    "aten::alias_copy.default",
    "aten::narrow_copy.default",
    "aten::view_as_real_copy.default",
    "aten::view_as_complex_copy.default",
)


@hookimpl
def shimkit_op_plugins():
    yield OpPlugin(
        name="view-copy",
        ops=VIEW_COPY_OPS,
        eliminated_by={op: "view_copy_to_view" for op in VIEW_COPY_OPS},
        doc="split_copy, slice_copy and the rest of the view_copy family, replaced by views.",
    )

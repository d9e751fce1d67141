"""shimkit's built-in graph passes, contributed through the same hook third-party plugins use.

Graph stage, in order: ``decompose_linear`` → ``addmm_to_mm`` → ``plugin_decompositions`` →
``view_copy_to_view`` → ``forget_stale_unbacked_symbols``. Views are converted last so that the view pass sees the ops that will really
consume each view (a decomposition may turn an ``addmm`` into an ``mm`` whose shim needs dense input).
Post-grad stage: ``unfuse_addmm``, which takes apart Inductor's own ``mm + bias`` re-fusion on devices
without an addmm shim.
"""

from __future__ import annotations

from shimkit.passes import AddmmPolicy, DecomposeInPlace, DecomposeLinear, ReplaceViewCopyWithView
from shimkit.passes.scalar_constants import InlineScalarConstants
from shimkit.passes.unbacked import ForgetStaleUnbackedSymbols
from shimkit.registry import PassSpec, hookimpl


def _view_copy_to_view(capabilities):
    # A strided view handed to a C shim is read as dense from offset 0 (docs/metal-aoti.md, "Anatomy of a Metal op"): keep the copy.
    return ReplaceViewCopyWithView(needs_dense_input=capabilities.has_shim)


def _unfuse_addmm(capabilities):
    return AddmmPolicy.from_capabilities(capabilities, name="unfuse_addmm")


@hookimpl
def shimkit_passes():
    yield PassSpec(
        name="decompose_linear",
        factory=DecomposeLinear.from_capabilities,
        before=("addmm_to_mm",),
        doc="linear with bias -> permute + mm (+ view) + add where the device has no addmm shim.",
    )
    yield PassSpec(
        name="addmm_to_mm",
        factory=AddmmPolicy.from_capabilities,
        before=("plugin_decompositions",),
        doc="addmm -> the registry's addmm decomposition (mm plus scaled add) where there is no addmm shim.",
    )
    yield PassSpec(
        name="plugin_decompositions",
        factory=DecomposeInPlace.from_capabilities,
        before=("view_copy_to_view",),
        doc="Each op without a shim on the device but with a plugin decomposition, decomposed in place.",
    )
    yield PassSpec(
        name="inline_scalar_constants",
        factory=lambda capabilities: InlineScalarConstants(),
        devices=("mps",),
        before=("view_copy_to_view",),
        doc="0-d tensor constants ExecuTorch made of scalar operands (x / 5.66) turned back into scalars, so that "
            "Inductor's attention patterns get a number for their scale.",
    )
    yield PassSpec(
        name="view_copy_to_view",
        factory=_view_copy_to_view,
        doc="view-copy ops -> views where no write, output aliasing or impossible view forbids it.",
    )
    yield PassSpec(
        name="forget_stale_unbacked_symbols",
        factory=lambda capabilities: ForgetStaleUnbackedSymbols(),
        after=("view_copy_to_view",),
        doc="Unbacked size symbols that to_edge's retraces left pending forgotten, so that Inductor can trace a "
            "program with a data-dependent op (where(...).nonzero() failed with PendingUnbackedSymbolNotFound).",
    )
    yield PassSpec(
        name="unfuse_addmm",
        factory=_unfuse_addmm,
        stage="post_grad",
        doc="Inductor's mm + bias -> addmm re-fusion undone where the device has no addmm shim.",
    )

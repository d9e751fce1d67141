"""The hook contract between shimkit and op plugins (built-in and third-party alike).

A plugin is any module or object with functions decorated by :data:`hookimpl`. Third-party packages
expose theirs through the entry-point group ``shimkit``::

    [project.entry-points.shimkit]
    my_ops = "my_package.shimkit_plugin"

Each hook returns (or yields) records; the registry validates them and reports a plugin whose hook
raises or returns something malformed by name, then skips it.
"""

from __future__ import annotations

from typing import Iterable

import pluggy

from shimkit.registry.records import OpPlugin, PassSpec

PROJECT = "shimkit"
hookspec = pluggy.HookspecMarker(PROJECT)
hookimpl = pluggy.HookimplMarker(PROJECT)


@hookspec
def shimkit_op_plugins() -> Iterable[OpPlugin]:
    """Declare op plugins: the ops covered and, per device, shim, kernel and decomposition.

    Example — a plugin giving ``aten::cumsum`` a decomposition wherever no device has a shim::

        import torch
        from shimkit.registry import OpPlugin, hookimpl

        def cumsum_by_matmul(x, dim, dtype=None):
            n = x.shape[dim]
            tri = torch.ones(n, n, dtype=x.dtype, device=x.device).tril()
            return torch.movedim(torch.movedim(x, dim, -1) @ tri.T, -1, dim)

        @hookimpl
        def shimkit_op_plugins():
            yield OpPlugin(
                name="cumsum",
                ops=(torch.ops.aten.cumsum.default,),
                decompositions={torch.ops.aten.cumsum.default: cumsum_by_matmul},
                doc="cumsum as a triangular matmul, for devices without a cumsum shim.",
            )
    """
    return ()


@hookspec
def shimkit_passes() -> Iterable[PassSpec]:
    """Contribute graph passes to backend pipelines, with ordering constraints.

    Example — a pass that runs after shimkit's view replacement on mps only::

        from shimkit.registry import PassSpec, hookimpl
        from my_package.passes import FuseMyPattern

        @hookimpl
        def shimkit_passes():
            yield PassSpec(
                name="fuse-my-pattern",
                factory=lambda capabilities: FuseMyPattern(),
                devices=("mps",),
                after=("view_copy_to_view",),
            )
    """
    return ()

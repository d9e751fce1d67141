"""Make a stock ExecuTorch AOTInductor backend take its configuration from the shimkit registry.

``MetalBackend`` (and ``CudaBackend``) keep their names, so the delegate blob still names the backend
the runtime knows; only the classmethods that upstream writes by hand are swapped, and swapped back on
exit, also when lowering raises::

    from executorch.backends.apple.metal.metal_backend import MetalBackend
    from shimkit.integration import registry_backend

    with registry_backend(MetalBackend):
        program = to_edge_transform_and_lower(exported, partitioner=[MetalPartitioner(specs)])

Patching a class is process-wide: do not lower with the same backend class from another thread while
the block is active.
"""

from __future__ import annotations

import contextlib
from typing import Any, Iterator

from shimkit._patching import ScopedPatches, importable_torchao_mps_cshim
from shimkit.backend import backend_config, inductor_options
from shimkit.passes import DecomposeInPlace
from shimkit.registry import BackendConfig

# The graph pass that applies the registry's decomposition table in place (plugins/core_passes.py).
IN_PLACE_DECOMPOSITIONS = "plugin_decompositions"

PATCHED = (
    "get_supported_fallback_kernels",
    "get_decomposition_table",
    "get_custom_passes",
    "get_aoti_compile_options",
)


def device_of(backend_cls: Any) -> str:
    """The registry device for an AOTI backend class (``MetalBackend`` compiles for ``mps``)."""
    name = backend_cls.get_device_name()
    return "mps" if name == "metal" else name


def _replacements(backend_cls: Any, config: BackendConfig) -> dict[str, Any]:
    original_options = backend_cls.get_aoti_compile_options
    # The backend's own table (CudaBackend: conv1d as conv2d, which its Triton templates need) stays in
    # force under the plugins' entries: installing shimkit must never lose a decomposition stock applies.
    backend_table = dict(backend_cls.get_decomposition_table())
    in_place = IN_PLACE_DECOMPOSITIONS in config.pass_names

    def get_supported_fallback_kernels(cls):
        return dict(config.fallback_kernels)

    def get_decomposition_table(cls):
        # plugin_decompositions applies both tables in place, and what it left every decomposition declined.
        # Handed on, a table would only make AotiBackend retrace the whole program (run_decompositions
        # runs whenever a table op occurs), and the retrace writes each reshape whose input looks viewable
        # as a view: on the H100 the conformer's attention output was not viewable in the layout Inductor
        # gives it (docs/cuda.md). Without the pass, the tables are the backend's to apply.
        if in_place:
            return {}
        return {**backend_table, **config.decomposition_table}

    def get_custom_passes(cls, compile_specs):
        return [graph_pass.with_fallback(backend_table)
                if backend_table and name == IN_PLACE_DECOMPOSITIONS and isinstance(graph_pass, DecomposeInPlace)
                else graph_pass
                for name, graph_pass in zip(config.pass_names, config.passes)]

    def get_aoti_compile_options(cls, compile_specs):
        patches = ScopedPatches()
        try:
            importable_torchao_mps_cshim(patches)
            options = dict(original_options(compile_specs))
        finally:
            patches.undo()
        options.pop("aot_inductor.custom_ops_to_c_shims", None)
        options.update(inductor_options(config))
        return options

    return {
        "get_supported_fallback_kernels": classmethod(get_supported_fallback_kernels),
        "get_decomposition_table": classmethod(get_decomposition_table),
        "get_custom_passes": classmethod(get_custom_passes),
        "get_aoti_compile_options": classmethod(get_aoti_compile_options),
    }


class Installation:
    """A reversible patch of one backend class; :meth:`undo` restores exactly what was there."""

    def __init__(self, backend_cls: type, config: BackendConfig) -> None:
        self.backend_cls = backend_cls
        self.config = config
        self._patches = ScopedPatches()
        for name, replacement in _replacements(backend_cls, config).items():
            self._patches.replace(backend_cls, name, replacement)
        self.active = True

    def undo(self) -> None:
        self._patches.undo()
        self.active = False


def install(backend_cls: type, config: BackendConfig | None = None) -> Installation:
    """Patch ``backend_cls`` until ``.undo()``; ``config`` defaults to the registry's for its device."""
    return Installation(backend_cls, config or backend_config(device_of(backend_cls)))


@contextlib.contextmanager
def registry_backend(backend_cls: type, config: BackendConfig | None = None) -> Iterator[BackendConfig]:
    """Within the block, ``backend_cls`` takes fallback kernels, decompositions, c-shims and passes
    from ``config`` (default: derived from the registry for the backend's device)."""
    installation = install(backend_cls, config)
    try:
        yield installation.config
    finally:
        installation.undo()

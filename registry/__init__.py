"""The op-plugin registry: the plugin-author contract (hook specs, ``hookimpl``, records, errors) and
discovery (the plugin manager), with the configuration derived from the registered records.

It is handed the built-in plugins and imports neither :mod:`shimkit.passes` nor
:mod:`shimkit.plugins`; the process-wide registry with the built-ins, pipelines and Inductor options
are assembled one layer up, in :mod:`shimkit.backend`.

>>> from shimkit.registry import PluginRegistry
>>> registry = PluginRegistry(env={"SHIMKIT_DISABLE_PLUGIN_AUTOLOAD": "1"}, builtins=("shimkit.plugins.mm",))
>>> "aoti_torch_mps_mm_out" in registry.backend_config("mps").fallback_kernels
True
"""

from __future__ import annotations

from shimkit._versions import check_versions

VERSIONS = check_versions()  # before anything below touches torch or executorch internals

from shimkit.registry.derive import BackendConfig, Contest, DeviceCapabilities, Provision
from shimkit.registry.errors import (
    DecompositionDeclined,
    InvalidPluginRecord,
    PluginConflictError,
    PluginLoadError,
    ShimkitPluginError,
    UnknownOpError,
)
from shimkit.registry.hookspecs import hookimpl, hookspec
from shimkit.registry.manager import PluginProblem, PluginRegistry, PluginSource, Registered
from shimkit.registry.ops import canonical_op_name, resolve_op, through_aten_composite
from shimkit.registry.records import Kernel, MslKernel, OpCall, OpPlugin, PassSpec, RandomReference, Shim, as_call

__all__ = [
    "BackendConfig", "Contest", "DecompositionDeclined", "DeviceCapabilities", "InvalidPluginRecord", "OpCall", "OpPlugin", "PassSpec",
    "PluginConflictError", "PluginLoadError", "PluginProblem", "PluginRegistry", "PluginSource",
    "Kernel", "MslKernel", "Provision", "RandomReference", "Registered", "Shim", "ShimkitPluginError", "UnknownOpError",
    "as_call", "canonical_op_name", "hookimpl", "hookspec", "resolve_op", "through_aten_composite",
]

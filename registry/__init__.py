"""The op-plugin registry: hook specs, records, discovery and everything derived from them.

>>> from shimkit.registry import backend_config
>>> "aoti_torch_mps_mm_out" in backend_config("mps").fallback_kernels
True
"""

from __future__ import annotations

import contextlib
import threading
from typing import Iterator, Mapping

from shimkit._versions import check_versions

VERSIONS = check_versions()  # before anything below touches torch or executorch internals

from shimkit.registry.derive import BackendConfig, DeviceCapabilities, Provision
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
from shimkit.registry.ops import canonical_op_name, resolve_op
from shimkit.registry.records import OpPlugin, PassSpec, Shim

__all__ = [
    "BackendConfig", "DecompositionDeclined", "DeviceCapabilities", "InvalidPluginRecord", "OpPlugin", "PassSpec",
    "PluginConflictError", "PluginLoadError", "PluginProblem", "PluginRegistry", "PluginSource",
    "Provision", "Registered", "Shim", "ShimkitPluginError", "UnknownOpError", "backend_config",
    "canonical_op_name", "get_registry", "hookimpl", "hookspec", "resolve_op", "use_registry",
]

_lock = threading.Lock()
_current: PluginRegistry | None = None


def get_registry() -> PluginRegistry:
    """The process-wide registry, created from ``os.environ`` on first use."""
    global _current
    with _lock:
        if _current is None:
            _current = PluginRegistry()
        return _current


@contextlib.contextmanager
def use_registry(registry: PluginRegistry | None = None, *, env: Mapping[str, str] | None = None
                 ) -> Iterator[PluginRegistry]:
    """Make ``registry`` (or a fresh one built from ``env``) the process-wide one for a block."""
    global _current
    replacement = registry if registry is not None else PluginRegistry(env=env)
    with _lock:
        previous, _current = _current, replacement
    try:
        yield replacement
    finally:
        with _lock:
            _current = previous


def backend_config(device: str) -> BackendConfig:
    """Derive the configuration for ``device`` (``"mps"`` or ``"cuda"``) from the active plugins."""
    return get_registry().backend_config(device)

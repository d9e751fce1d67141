"""Errors raised by the registry. Each names the plugin (and where it came from) at fault."""

from __future__ import annotations


class ShimkitPluginError(Exception):
    """Base class for plugin problems."""


class InvalidPluginRecord(ShimkitPluginError, ValueError):
    """A plugin produced a record that does not satisfy the record's contract."""


class PluginLoadError(ShimkitPluginError):
    """A plugin could not be imported or its hook raised (raised only in strict mode)."""


class PluginConflictError(ShimkitPluginError):
    """Two active plugins claim the same (op, device) shim, the same C symbol, or the same name."""


class UnknownOpError(ShimkitPluginError, LookupError):
    """An op name does not resolve to a registered torch operator overload."""

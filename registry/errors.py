"""Errors raised by the registry. Each names the plugin (and where it came from) at fault."""

from __future__ import annotations

import functools
from typing import Any, Callable


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


class DecompositionDeclined(Exception):
    """Raised by a plugin decomposition that cannot be exact for this call (e.g. a scan over a
    dynamic dimension with no upper bound). The op is then left in place, so the backend reports it
    as a missing kernel instead of computing a wrong result; ``reason`` says why, for the audit."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def declining_as_not_implemented(decomposition: Callable[..., Any]) -> Callable[..., Any]:
    """``decomposition`` for torch's decomposition tables: where it raises
    :class:`DecompositionDeclined` it returns ``NotImplemented``, which tells ``make_fx`` and
    ``run_decompositions`` to keep the op instead of failing the trace."""
    @functools.wraps(decomposition)
    def table_entry(*args: Any, **kwargs: Any) -> Any:
        try:
            return decomposition(*args, **kwargs)
        except DecompositionDeclined:
            return NotImplemented

    return table_entry

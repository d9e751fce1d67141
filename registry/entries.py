"""What the registry holds: each record with the plugin it came from, and the plugins it reported and skipped.

Below both the plugin manager (``manager.py``), which fills them, and the derivation (``derive.py``), which reads
them: neither imports the other's module for these types.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from shimkit.registry.records import OpPlugin, PassSpec


@dataclass(frozen=True)
class PluginSource:
    """Where a plugin came from: ``kind`` is ``builtin``, ``entry_point`` or ``code``."""

    kind: str
    name: str
    module: str
    distribution: str | None = None

    def describe(self) -> str:
        if self.kind == "entry_point":
            return f"entry point {self.name!r} ({self.module}, from {self.distribution})"
        if self.kind == "builtin":
            return f"built-in {self.name!r} ({self.module})"
        return f"registered from code {self.name!r} ({self.module})"

    def as_json(self) -> dict[str, Any]:
        """As ``shimkit plugins --json`` and the audit report list it."""
        return {"kind": self.kind, "name": self.name, "module": self.module, "distribution": self.distribution}


@dataclass(frozen=True)
class PluginProblem:
    """A plugin that was reported and skipped. ``stage``: import, hook, record, not-allowed."""

    source: PluginSource
    stage: str
    message: str

    def describe(self) -> str:
        return f"{self.source.describe()}: {self.stage}: {self.message}"

    def as_json(self) -> dict[str, Any]:
        """As ``shimkit plugins --json`` and the audit report list it."""
        return {"source": self.source.as_json(), "stage": self.stage, "message": self.message}


RecordT = TypeVar("RecordT", OpPlugin, PassSpec)


@dataclass(frozen=True)
class Registered(Generic[RecordT]):
    """A record together with the plugin that produced it and whether blocking disabled it."""

    record: RecordT
    source: PluginSource
    blocked: bool = False

    @property
    def name(self) -> str:
        return self.record.name

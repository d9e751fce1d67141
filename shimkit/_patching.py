"""Patch and undo: the one way shimkit swaps an attribute of someone else's module or class.

The audit's fake-mps lowering and the ExecuTorch integration both replace upstream attributes for a
scope and must restore exactly what was there (a classmethod in the class's own dict, an inherited
attribute that was not there at all, an entry of ``sys.modules``), newest first, also on error.
"""

from __future__ import annotations

import sys
import types
from collections.abc import MutableMapping
from dataclasses import dataclass, field
from typing import Any, Callable

TORCHAO_MPS_CSHIM = "torchao.experimental.ops.mps.cshim"

_MISSING = object()


@dataclass
class ScopedPatches:
    """Attribute replacements that are all undone, newest first, when the scope ends."""

    applied: list[tuple[Any, Any, Any]] = field(default_factory=list)

    def replace(self, owner: Any, name: str, value: Any) -> None:
        """Set ``owner.name`` to ``value`` until undone."""
        # The raw class/module dict entry, so classmethods and inherited attributes restore exactly.
        raw = vars(owner).get(name, _MISSING)
        self.applied.append((owner, name, raw))
        setattr(owner, name, value)

    def replace_item(self, mapping: MutableMapping, key: Any, value: Any) -> None:
        """Set ``mapping[key]`` (an entry of ``sys.modules``, of ``os.environ``) until undone."""
        self.applied.append((mapping, key, mapping.get(key, _MISSING)))
        mapping[key] = value

    def on_undo(self, callback: Callable[[], Any]) -> None:
        """Run ``callback`` when the scope ends, in order with the restorations around it."""
        self.applied.append((callback, None, None))

    def undo(self) -> None:
        while self.applied:
            owner, name, raw = self.applied.pop()
            if callable(owner) and name is None:
                owner()
            elif isinstance(owner, MutableMapping):
                if raw is _MISSING:
                    owner.pop(name, None)
                else:
                    owner[name] = raw
            elif raw is _MISSING:
                delattr(owner, name)
            else:
                setattr(owner, name, raw)




def importable_torchao_mps_cshim(patches: ScopedPatches) -> None:
    """Let ``MetalBackend.get_aoti_compile_options`` import torchao's mps c-shim table off macOS.

    The module loads torchao's macOS dylib at import. Off macOS its ops are those the torchao-linear plugin
    defines, whose c-shim prototypes come from the plugin's record, so an empty table is what the import
    would contribute: where the import
    fails, an empty stand-in takes its place in ``sys.modules`` until ``patches`` are undone.
    """
    try:
        __import__(TORCHAO_MPS_CSHIM)
    except (ImportError, RuntimeError, OSError):
        stand_in = types.ModuleType(TORCHAO_MPS_CSHIM)
        stand_in.torchao_op_c_shim = {}  # type: ignore[attr-defined]
        patches.replace_item(sys.modules, TORCHAO_MPS_CSHIM, stand_in)

"""The audit cache: a model whose audit would come out the same is answered from an earlier result.

Almost all of an audit's time is ``to_edge``, the backend's passes and Inductor; ``torch.export`` is a small
part (docs/audit.md, "Speed"). So each model is still loaded and exported, and the exported program, with
everything else that decides the report, is hashed into a key:

* the exported program: its graph with every node's shapes, dtypes and strides, the source line behind each
  node (the report quotes them), the graph signature and the ranges of its dynamic dimensions; the values of
  its weights and example inputs only with ``--check-numerics``, the one audit they change;
* the options: plugins or stock, ``--check-numerics``, the backend;
* the versions of Python, torch, ExecuTorch and shimkit, and the digest of shimkit's own sources (an
  editable install changes without a version);
* the plugin registry, active and blocked: every op plugin's and pass's record, the source files of the
  module that declared it (a changed decomposition changes its module), every file of each kernel folder,
  and the problems reported for broken plugins.

A hit returns the stored report entry with ``"cached": true``. Entries are entries of kind ``audit`` of the
artifact store (:mod:`shimkit.store`: written whole or not at all, verified against their manifest before
they are read), so concurrent writers (``-j`` workers, parallel CI jobs) never leave a torn entry and a
corrupt, foreign or incomplete one is a miss, never a crash.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import sys
from datetime import datetime, timezone
from functools import lru_cache
from pathlib import Path
from typing import Any, Iterable

from shimkit.audit.options import AuditOptions, Numerics
from shimkit.store import EnvironmentFailure, current_file_digest, default_store, tree_digest, user_cache_root

CACHE_FORMAT = 1


def default_cache_dir() -> Path:
    """The user's artifact store (:func:`shimkit.store.user_cache_root`: ``$XDG_CACHE_HOME/shimkit``, else
    ``~/.cache/shimkit``), whatever ``$SHIMKIT_BUILD_DIR`` says of builds; entries go to its ``audit/``
    folder."""
    return user_cache_root()


# What every stored entry must hold for a report to be made of it.
_ENTRY_FIELDS = {"status": str, "kernels": list, "missing": list}


class AuditCache:
    """Report entries by key: entries of kind ``audit`` in the artifact store at ``directory``, each verified
    against its manifest before it is read (:mod:`shimkit.store`)."""

    def __init__(self, directory: str | os.PathLike[str]) -> None:
        self.store = default_store(Path(directory))
        self._unusable_said = False

    @property
    def directory(self) -> Path:
        return self.store.root

    def get(self, key: str) -> dict[str, Any] | None:
        """The stored entry for ``key``, with ``audited_at`` (when that audit ran: ISO 8601, UTC), or ``None``:
        absent, corrupt, foreign or incomplete entries are misses."""
        try:
            folder = self.store.lookup("audit", self.store.key("audit", [key]))
            if folder is None:
                return None
            stored = json.loads((folder / "entry.json").read_text(encoding="utf-8"))
        except EnvironmentFailure as error:
            self._say_unusable(error)
            return None
        except (OSError, ValueError):
            return None
        if not isinstance(stored, dict) or stored.get("format") != CACHE_FORMAT or stored.get("key") != key:
            return None
        entry = stored.get("entry")
        if not isinstance(entry, dict) or any(not isinstance(entry.get(k), t) for k, t in _ENTRY_FIELDS.items()):
            return None
        audited_at = stored.get("audited_at")
        return {**entry, "audited_at": audited_at} if isinstance(audited_at, str) else entry

    def put(self, key: str, entry: dict[str, Any]) -> None:
        """Store ``entry`` unless a whole one is stored for ``key`` (the same key makes the same report), in
        place of a damaged one; a cache that cannot be written (read-only, full, refused) is skipped, never
        an error."""
        store, name = self.store, self.store.key("audit", [key])
        try:
            with store.locked("audit", name), store.staging("audit") as staging:
                if self.get(key) is not None:
                    return
                with open(staging / "entry.json", "w", encoding="utf-8") as handle:
                    json.dump({"format": CACHE_FORMAT, "key": key, "entry": entry,
                               "audited_at": datetime.now(timezone.utc).isoformat(timespec="seconds")}, handle)
                store.commit("audit", name, staging, replace=True, inputs={"model": str(entry.get("name"))})
        except EnvironmentFailure as error:
            self._say_unusable(error)

    def _say_unusable(self, error: EnvironmentFailure) -> None:
        if not self._unusable_said:
            self._unusable_said = True
            print(f"shimkit audit: the cache is not used: {error}", file=sys.stderr)


def audit_key(exported: Any, example_inputs: Iterable[Any], options: AuditOptions, registry: Any) -> str:
    """The digest of everything that decides one model's audit report (see the module docstring) under
    ``options``."""
    digest = hashlib.sha256()
    for part in (f"format={CACHE_FORMAT}", _environment(), options.key(), registry_fingerprint(registry)):
        digest.update(part.encode())
        digest.update(b"\0")
    if options.numerics is Numerics.EXECUTE:  # the runtime the programs link and the MSL translation decide too
        from shimkit.runtime.program import runtime_fingerprint

        digest.update(runtime_fingerprint().encode())
    _hash_program(digest, exported, example_inputs, with_values=bool(options.numerics))
    return digest.hexdigest()


def _hash_program(digest: Any, exported: Any, example_inputs: Iterable[Any], *, with_values: bool) -> None:
    import torch

    module = exported.graph_module
    digest.update(module.print_readable(print_output=False, include_stride=True, include_device=True).encode())
    for graph_module in module.modules():
        for node in getattr(getattr(graph_module, "graph", None), "nodes", ()):
            digest.update(f"{node.name}\0{node.meta.get('stack_trace') or ''}\0".encode())
    digest.update(str(exported.graph_signature).encode())
    digest.update(str(sorted((str(k), str(v)) for k, v in exported.range_constraints.items())).encode())
    tensors = [*exported.state_dict.items(), *exported.constants.items(),
               *((f"input{i}", t) for i, t in enumerate(example_inputs))]
    for name, value in tensors:
        if not isinstance(value, torch.Tensor):
            digest.update(f"{name}={type(value).__name__}".encode())
            continue
        digest.update(f"{name}:{tuple(value.shape)}:{value.dtype}:{value.stride()}".encode())
        if with_values:
            digest.update(value.detach().cpu().contiguous().reshape(-1).view(torch.uint8).numpy().tobytes()
                          if value.numel() else b"")


def registry_fingerprint(registry: Any) -> str:
    """The digest of a registry's plugins as they decide an audit: records, declaring sources, kernel files
    and reported problems, active and blocked alike."""
    digest = hashlib.sha256()
    for entries in (registry.op_plugins(include_blocked=True), registry.pass_specs(include_blocked=True)):
        for entry in entries:
            digest.update(f"{_stable(entry.record)}\0{_stable(entry.source)}\0{entry.blocked}\0".encode())
            digest.update(_module_digest(entry.source.module).encode())
            for shim in getattr(entry.record, "shims", ()):
                if shim.kernel is not None:
                    digest.update(tree_digest(shim.kernel.directory).encode())
    for problem in registry.problems:
        digest.update(f"{_stable(problem.source)}\0{problem.stage}\0{problem.message}\0".encode())
    return digest.hexdigest()


def _stable(value: Any) -> str:
    """Text for a record that is the same in every process: callables by name (their code is hashed with
    the module declaring them), never by address."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        fields = ",".join(f"{f.name}={_stable(getattr(value, f.name))}" for f in dataclasses.fields(value))
        return f"{type(value).__name__}({fields})"
    if isinstance(value, dict):
        return "{" + ",".join(f"{_stable(k)}:{_stable(v)}" for k, v in sorted(value.items(), key=lambda i: str(i[0]))) + "}"
    if isinstance(value, (list, tuple, frozenset, set)):
        items = sorted(map(_stable, value)) if isinstance(value, (set, frozenset)) else map(_stable, value)
        return "[" + ",".join(items) + "]"
    if isinstance(value, (str, int, float, bool, type(None))):
        return repr(value)
    if callable(value) and hasattr(value, "__qualname__"):
        return f"{getattr(value, '__module__', '?')}.{value.__qualname__}"
    text = str(value)
    return type(value).__name__ if " at 0x" in text else text


def _module_digest(module_name: str) -> str:
    """The source files of a loaded module: all of its package's ``.py`` files for a package."""
    path = Path(getattr(sys.modules.get(module_name), "__file__", "") or "")
    if not path.is_file():
        return "no-file"
    if path.name == "__init__.py":
        return tree_digest(path.parent, ("*.py",))
    return current_file_digest(path)


@lru_cache(maxsize=None)
def _environment() -> str:
    import importlib.metadata
    import importlib.util

    import torch

    def version(distribution: str) -> str:
        try:
            return importlib.metadata.version(distribution)
        except importlib.metadata.PackageNotFoundError:
            return "absent"

    import shimkit
    from shimkit._rooms import ROOMS

    sources = hashlib.sha256()
    for name in ("shimkit", *(f"shimkit.{room}" for room in ROOMS)):
        spec = importlib.util.find_spec(name)
        for folder in (spec.submodule_search_locations or []) if spec else []:
            sources.update(tree_digest(folder, ("*.py",)).encode())
    return (f"python={sys.version_info[:3]} torch={torch.__version__} executorch={version('executorch')} "
            f"shimkit={shimkit.__version__} sources={sources.hexdigest()}")

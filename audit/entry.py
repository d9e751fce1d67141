"""A MODEL's ``--json`` report entries (one per method of its program), from the audit cache or audited: the one
per-model path of every caller (the CLI in this process and in its workers, the benchmarks)."""

from __future__ import annotations

import sys
import time
from typing import Any

import shimkit._progress as progress
from shimkit.audit.cache import AuditCache, audit_key
from shimkit.audit.loader import LoadedModel, load_methods
from shimkit.audit.options import AuditOptions
from shimkit.audit.report import to_json
from shimkit.audit.runner import AuditRun, audit_loaded, export_model, run_audit
from shimkit.audit.speed import lowering_ahead


def audit_entries(spec: str, options: AuditOptions, *, cache: AuditCache | None = None,
                  registry: Any | None = None) -> list[dict[str, Any]]:
    """``spec``'s report entries under ``options``, one per method of its program (one for a model of one method):
    each from ``cache`` when an identical audit is stored there (the entry then says ``"cached": true``), else
    audited and stored. A model that does not load or export is audited as usual (its failure is the report) and
    not cached."""
    if registry is None:
        from shimkit.backend import get_registry

        registry = get_registry()
    if cache is None:
        return _audited(spec, options, registry)
    try:
        with progress.working_on(spec):
            progress.stage("loading")
            methods = load_methods(spec)
    except (Exception, SystemExit):  # the uncached audit reports the failure as usual
        return _audited(spec, options, registry)
    return [_entry(loaded, options, cache, registry) for loaded in methods]


def _entry(loaded: LoadedModel, options: AuditOptions, cache: AuditCache, registry: Any) -> dict[str, Any]:
    config = registry.backend_config(options.target.device) if options.plugins else None
    try:
        with progress.working_on(loaded.name):
            progress.stage("exporting")
            started = time.perf_counter()
            exported = export_model(loaded, plugins=options.plugins)
            export_seconds = time.perf_counter() - started
    except (Exception, SystemExit):  # the audit reports the failure as usual
        return _json(audit_loaded(loaded, config=config, options=options), options, registry, config)
    try:
        key = audit_key(exported, loaded.example_inputs or exported.example_inputs[0], options, registry)
    except Exception as error:  # the cache only saves time: a model it cannot key is audited, not failed
        print(f"shimkit audit: {loaded.name} is not cached: its cache key failed: {type(error).__name__}: {error}",
              file=sys.stderr)
        key = None
    stored = cache.get(key) if key is not None else None
    if stored is not None:
        return {**stored, "name": loaded.name, "method": loaded.method, "cached": True}
    loaded.exported = exported
    lowering_ahead()
    audit = audit_loaded(loaded, config=config, options=options)
    audit.timings["export"] = export_seconds
    entry = _json(audit, options, registry, config)
    # What this machine could not finish (an unusable build folder, a timeout, a full disk) is no answer to
    # keep: the next run on a mended machine audits it again.
    if key is not None and entry["status"] not in ("interrupted", "unchecked", "error"):
        cache.put(key, entry)
    return entry


def _json(audit: Any, options: AuditOptions, registry: Any, config: Any) -> dict[str, Any]:
    return to_json(AuditRun([audit], options.plugins, registry, config, target=options.target))["models"][0]


def _audited(spec: str, options: AuditOptions, registry: Any) -> list[dict[str, Any]]:
    return to_json(run_audit([spec], options, registry=registry))["models"]

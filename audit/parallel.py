"""Auditing many models at scale: worker processes (``-j``), deterministic shards (``--shard``) and
merged reports (``shimkit merge``).

Each model is audited in a worker process forked from the parent (imports done, torch single-threaded,
as DataLoader's workers; :mod:`shimkit.audit.workers`) and comes back as its JSON report entry; the parent
merges them in the order given. A model that raises, crashes its worker or runs past ``timeout`` is reported
as that model's error, and the others' results are kept.
"""

from __future__ import annotations

import functools
import json
from typing import Any, Callable, Sequence

from shimkit.audit.cache import AuditCache
from shimkit.audit.options import AuditOptions
from shimkit.audit.report import SCHEMA_VERSION, document_of, target_of
from shimkit.audit.targets import Target
from shimkit.audit.workers import TaskFailure, run_tasks


class MergeError(ValueError):
    """Reports that cannot be merged: the message names the file and what is wrong with it."""


def shard(specs: Sequence[str], selector: str) -> list[str]:
    """The ``K/N`` shard of ``specs`` (``K`` from 1): every N-th model starting at the K-th, so that N
    machines given the same list cover it exactly once.

    >>> shard(["a", "b", "c", "d", "e"], "2/2")
    ['b', 'd']
    """
    try:
        index, count = (int(part) for part in selector.split("/"))
    except ValueError:
        raise ValueError(f"--shard takes K/N with integers 1 <= K <= N, got {selector!r}") from None
    if not 1 <= index <= count:
        raise ValueError(f"--shard takes K/N with integers 1 <= K <= N, got {selector!r}")
    return [spec for position, spec in enumerate(specs) if position % count == index - 1]


# What a MODEL's audit gives: a report entry per method of its program (one for a model of one method).
Entries = list[dict[str, Any]]


def _audit_one(spec: str, options: AuditOptions, cache: AuditCache | None = None) -> Entries:
    import contextlib
    import sys
    import warnings

    with warnings.catch_warnings(), contextlib.redirect_stdout(sys.stderr):
        warnings.simplefilter("ignore")
        from shimkit.audit.entry import audit_entries

        return audit_entries(spec, options, cache=cache)


def audit_in_process(specs: Sequence[str], options: AuditOptions, *, cache: AuditCache | None = None,
                     on_progress: Callable[[int, int, str, Entries | None], None] | None = None
                     ) -> tuple[Entries, bool]:
    """:func:`audit_in_workers` in this process, one model after the other (``-j 1`` without ``--timeout`` or
    ``--execute``)."""
    from shimkit.audit.entry import audit_entries

    models: Entries = []
    index, done = 0, 0
    try:
        for index, spec in enumerate(specs):
            if on_progress:
                on_progress(index, len(specs), spec, None)
            entries = audit_entries(spec, options, cache=cache)
            models += entries
            done = index + 1
            if on_progress:
                on_progress(index, len(specs), spec, entries)
    except KeyboardInterrupt:
        if done == index < len(specs):
            models += failure_entry(specs[index], TaskFailure("interrupted", "KeyboardInterrupt: interrupted", 0.0))
        return models, True
    return models, False


def _single_threaded_torch() -> None:
    import torch

    torch.set_num_threads(1)


def failure_entry(spec: str, failure: TaskFailure) -> Entries:
    """The report entry of a model whose worker gave no result of its own."""
    from shimkit.audit.loader import split_method
    from shimkit.audit.runner import PHASES

    status = "interrupted" if failure.phase == "interrupted" else "error"
    return [{"name": spec, "method": split_method(spec)[1], "status": status, "partitions": 0, "kernels": [],
             "missing": [], "upstream_errors": [],
             "failure": {"kind": status, "phase": failure.phase, "message": failure.message, "op": None,
                         "node": None, "source": None, "fixes": [], "traceback": ""},
             "timings_s": {**dict.fromkeys(PHASES, 0.0), "total": round(failure.seconds, 3)}, "numerics": None,
             "declines": [], "precision": [], "decompositions": [], "renamed": [], "cached": False}]


def audit_in_workers(specs: Sequence[str], options: AuditOptions, *, jobs: int, timeout: float | None,
                     on_progress: Callable[[int, int, str, Entries | None], None] | None = None,
                     cache: AuditCache | None = None) -> tuple[Entries, bool]:
    """Every model of ``specs`` audited in ``jobs`` worker processes (:mod:`shimkit.audit.workers`): their
    report entries, in order, and whether Ctrl-C cut the run short (the entries then end with the model
    it interrupted)."""
    # Workers fork from this process and run torch single-threaded (GNU OpenMP's thread pool does not
    # survive a fork). CUDA does not survive one either: workers that lower on a real GPU start afresh, one
    # per model, so that a CUDA fault in one model (it poisons the process's context) cannot fail the next.
    fake_device = options.target.fake_device
    per_model, interrupted = run_tasks(
        functools.partial(_audit_one, options=options, cache=cache), specs, jobs=jobs, timeout=timeout,
        on_failure=failure_entry, initializer=_single_threaded_torch, start_method="fork" if fake_device else "spawn",
        tasks_per_worker=None if fake_device else 1, on_progress=on_progress)
    return [entry for entries in per_model for entry in entries], interrupted


def merge_reports(paths: Sequence[str]) -> dict[str, Any]:
    """One report from several ``--json`` reports (shards of one run): the models of each in order, the
    summary and status recomputed. All must come from the same schema and the same plugin setting. The plugin
    registry's contested claims and problems (``plugin_conflicts``, ``plugin_problems``) are the first report's
    that has them: shards of one run derive the same registry."""
    if not paths:
        raise MergeError("merging needs at least one --json report")
    models: list[dict[str, Any]] = []
    plugins: bool | None = None
    target: Target | None = None
    interrupted = False
    registry: dict[str, Any] = {}
    for path in paths:
        try:
            with open(path, encoding="utf-8") as handle:
                document = json.load(handle)
        except (OSError, json.JSONDecodeError) as error:
            raise MergeError(f"{path}: not a readable JSON report ({error})") from None
        if not isinstance(document, dict) or document.get("tool") != "shimkit audit":
            raise MergeError(f"{path}: not a `shimkit audit --json` report")
        if document.get("schema_version") != SCHEMA_VERSION:
            raise MergeError(f"{path}: schema version {document.get('schema_version')!r}, this shimkit reads "
                             f"{SCHEMA_VERSION!r}")
        if plugins is not None and document["plugins"] != plugins:
            raise MergeError(f"{path}: audited {'with' if document['plugins'] else 'without'} plugins, unlike "
                             f"{paths[0]}: merge reports of one setting")
        if target is not None and target_of(document) != target:
            raise MergeError(f"{path}: audited for {target_of(document).backend}, unlike {paths[0]} "
                             f"({target.backend}): merge reports of one backend")
        plugins, target = document["plugins"], target_of(document)
        interrupted = interrupted or document["status"] == "interrupted"
        models += document["models"]
        if not registry and "plugin_conflicts" in document:
            registry = {key: document[key] for key in ("plugin_conflicts", "plugin_problems") if key in document}
    assert plugins is not None and target is not None
    return {**document_of(models, plugins=plugins, interrupted=interrupted, target=target), **registry}

"""Auditing many models at scale: worker processes (``-j``), deterministic shards (``--shard``) and
merged reports (``shimkit audit merge``).

Each model is audited in a worker process forked from the parent (imports done, torch single-threaded,
as DataLoader's workers) and comes back as its JSON report entry; the parent merges them in the order
given. A model
that crashes its worker or runs past ``timeout`` is reported as that model's error, and the others'
results are kept.
"""

from __future__ import annotations

import json
import multiprocessing
from typing import Any, Callable, Sequence

from shimkit.audit.report import SCHEMA_VERSION, document_of, target_of
from shimkit.audit.targets import METAL, TARGETS, Target


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


# How long past --timeout the parent waits for a worker before giving its model up: the worker's own
# alarm stops a Python-level hang at --timeout; this covers start-up and a hang in native code.
WORKER_GRACE_S = 300.0


class ModelTimeout(Exception):
    """Raised in a worker when its model's audit runs past ``--timeout``."""


def _audit_one(spec: str, plugins: bool, check_numerics: bool, timeout: float | None,
               target_name: str = METAL.name) -> dict[str, Any]:
    import contextlib
    import signal
    import sys
    import warnings

    from shimkit.audit.report import to_json
    from shimkit.audit.runner import run_audit

    def expire(signum: int, frame: Any) -> None:
        raise ModelTimeout(f"the audit did not finish within {timeout:g} s (--timeout); the other models' "
                           f"results are kept")

    if timeout is not None:
        signal.signal(signal.SIGALRM, expire)
        signal.setitimer(signal.ITIMER_REAL, timeout)
    try:
        with warnings.catch_warnings(), contextlib.redirect_stdout(sys.stderr):
            warnings.simplefilter("ignore")
            return to_json(run_audit([spec], plugins=plugins, check_numerics=check_numerics,
                                     target=TARGETS[target_name]))["models"][0]
    finally:
        if timeout is not None:
            signal.setitimer(signal.ITIMER_REAL, 0)


def _single_threaded_torch() -> None:
    import torch

    torch.set_num_threads(1)


def _failed(spec: str, phase: str, message: str) -> dict[str, Any]:
    """The report entry of a model whose worker gave no result."""
    from shimkit.audit.runner import PHASES

    return {"name": spec, "status": "error", "partitions": 0, "kernels": [], "missing": [], "upstream_errors": [],
            "failure": {"kind": "error", "phase": phase, "message": message, "op": None, "node": None, "traceback": ""},
            "timings_s": {**dict.fromkeys(PHASES, 0.0), "total": 0.0}, "numerics": None, "declines": []}


def audit_in_workers(specs: Sequence[str], *, plugins: bool, check_numerics: bool, jobs: int,
                     timeout: float | None, target: Target = METAL,
                     on_progress: Callable[[int, int, str, dict[str, Any] | None], None] | None = None,
                     ) -> tuple[list[dict[str, Any]], bool]:
    """Every model of ``specs`` audited in ``jobs`` worker processes: their report entries, in order, and
    whether Ctrl-C cut the run short (the entries then end with the model it interrupted)."""
    models: list[dict[str, Any]] = []
    # Workers fork from this process, as torch's DataLoader forks its workers, so that none pays the seconds
    # of importing torch, executorch and Inductor again; like DataLoader's, each runs torch single-threaded
    # (GNU OpenMP's thread pool does not survive a fork).
    # CUDA does not survive one either: workers that lower on a real GPU start afresh, one per model, so
    # that a CUDA fault in one model (it poisons the process's context) cannot fail the next.
    context = multiprocessing.get_context("fork" if target.fake_device else "spawn")
    pool = context.Pool(jobs, initializer=_single_threaded_torch,
                        maxtasksperchild=None if target.fake_device else 1)
    index = 0
    try:
        pending = [(spec, pool.apply_async(_audit_one, (spec, plugins, check_numerics, timeout, target.name)))
                   for spec in specs]
        for index, (spec, handle) in enumerate(pending):
            if on_progress:
                on_progress(index, len(specs), spec, None)
            try:
                model = handle.get(timeout=None if timeout is None else timeout + WORKER_GRACE_S)
            except multiprocessing.TimeoutError:
                model = _failed(spec, "timeout", f"its worker gave no result within {timeout:g} s (--timeout) "
                                f"plus {WORKER_GRACE_S:g} s; the other models' results are kept")
            except Exception as error:  # a worker that died or raised: this model's error only
                model = _failed(spec, "worker", f"{type(error).__name__}: {error}")
            models.append(model)
            if on_progress:
                on_progress(index, len(specs), spec, model)
    except KeyboardInterrupt:
        # Ctrl-C lands anywhere in the loop, a progress line included: the models done are kept, and the
        # one in flight, if any, is reported as interrupted.
        if len(models) == index < len(specs):
            interrupted = _failed(specs[index], "interrupted", "KeyboardInterrupt: the audit was interrupted")
            interrupted["status"] = interrupted["failure"]["kind"] = "interrupted"
            models.append(interrupted)
        return models, True
    finally:
        pool.terminate()
        pool.join()
    return models, False


def merge_reports(paths: Sequence[str]) -> dict[str, Any]:
    """One report from several ``--json`` reports (shards of one run): the models of each in order, the
    summary and status recomputed. All must come from the same schema and the same plugin setting."""
    if not paths:
        raise MergeError("shimkit audit merge needs at least one --json report")
    models: list[dict[str, Any]] = []
    plugins: bool | None = None
    target: Target | None = None
    interrupted = False
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
    assert plugins is not None and target is not None
    return document_of(models, plugins=plugins, interrupted=interrupted, target=target)

"""Pipelines: ordered, composable, run to a fixed point, with a per-pass report and a check mode.

>>> from shimkit.passes import Pipeline, ReplaceViewCopyWithView, DecomposeLinear
>>> pipeline = Pipeline([DecomposeLinear(), ReplaceViewCopyWithView()])  # doctest: +SKIP
>>> pipeline(exported_program)                                         # doctest: +SKIP
>>> print(pipeline.report)                                             # doctest: +SKIP

A pipeline is itself a pass (nest them freely) and accepts what any pass accepts: an
``ExportedProgram``, a ``GraphModule`` or a bare ``Graph``. Besides shimkit passes it runs any
torch.fx-style pass (a ``PassBase``, or a callable taking a ``GraphModule``) provided it changes the
graph in place.
"""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Sequence

import torch
from torch import fx
from torch.fx.passes.infra.pass_base import PassResult

from shimkit._ordering import OrderingCycle, prerequisites_of, stable_order
from shimkit.passes.base import PassContext, PassError, ShimkitPass, describe_node, sync_output_signature
from shimkit.passes.meta import (ValueComputer, argument_values, fake_mode_of, guards_since, layout, same_layout,
                                 shape_env_of)
from shimkit.passes.ops import aten_op

__all__ = ["Pipeline", "PipelineError", "PassRecord", "PipelineReport"]


class PipelineError(RuntimeError):
    """The pipeline could not be ordered, did not converge, or a pass broke the graph (check mode)."""


def _op_label(node: fx.Node) -> str:
    op = aten_op(node.target)
    if op is not None:
        return op.name()
    if node.op == "call_function":
        return getattr(node.target, "__name__", str(node.target))
    return node.op


def count_ops(graph: fx.Graph) -> Counter:
    """Nodes by op (``aten::mm``, ``getitem``, ``placeholder`` ...): what a pass report compares."""
    counts: Counter = Counter()
    labels: dict[Any, str] = {}
    for node in graph.nodes:
        key = node.target if node.op == "call_function" else node.op
        label = labels.get(key)
        if label is None:
            label = labels[key] = _op_label(node)
        counts[label] += 1
    return counts


@dataclass
class PassRecord:
    """One run of one pass: how long it took and what it changed."""

    name: str
    iteration: int
    seconds: float
    modified: bool
    nodes_before: int
    nodes_after: int
    changes: dict[str, tuple[int, int]] = field(default_factory=dict)  # op -> (before, after)

    def describe(self) -> str:
        changes = ", ".join(f"{op} {before}->{after}" for op, (before, after) in sorted(self.changes.items()))
        status = "modified" if self.modified else "unchanged"
        return (f"[{self.iteration}] {self.name}: {self.seconds * 1e3:.2f} ms, {status}, "
                f"{self.nodes_before}->{self.nodes_after} nodes" + (f" ({changes})" if changes else ""))


@dataclass
class PipelineReport:
    """What a pipeline run did, pass by pass."""

    records: list[PassRecord] = field(default_factory=list)
    iterations: int = 0
    seconds: float = 0.0

    def by_pass(self) -> dict[str, list[PassRecord]]:
        grouped: dict[str, list[PassRecord]] = {}
        for record in self.records:
            grouped.setdefault(record.name, []).append(record)
        return grouped

    def __str__(self) -> str:
        lines = [f"pipeline: {self.iterations} iteration(s), {self.seconds * 1e3:.2f} ms"]
        lines += ["  " + r.describe() for r in self.records]
        return "\n".join(lines)


def _pass_name(item: Any) -> str:
    if isinstance(item, ShimkitPass):
        return item.pass_name
    name = getattr(item, "name", None)
    if isinstance(name, str) and name:
        return name
    return getattr(item, "__name__", type(item).__name__)


class Pipeline(ShimkitPass):
    """Run passes in order until none changes the graph.

    ``passes`` are pass objects or ``(name, pass)`` pairs. A pass may declare ``after``/``before``
    (names of passes that must run before/after it); ``order`` adds ``(first, second)`` pairs. The
    given order is kept except where a constraint moves a pass; a cycle is an error.

    Each iteration runs every pass; a pass is skipped when the graph has not changed since it last
    ran and the pass is idempotent (shimkit passes are unless they set ``idempotent = False``; other
    passes, and pipelines holding them, always re-run).
    If passes still change the graph after ``max_iterations`` iterations, :class:`PipelineError`.

    ``check=True`` lints the graph after every pass and checks that each node's ``meta["val"]`` is
    present and agrees with a fresh computation from its inputs, naming the pass that broke it.
    ``report`` holds the last run's :class:`PipelineReport`.
    """

    name = "pipeline"

    def __init__(self, passes: Iterable[Any], *, name: str | None = None, max_iterations: int = 4,
                 check: bool = False, order: Sequence[tuple[str, str]] = ()) -> None:
        named: list[tuple[str, Any]] = []
        for item in passes:
            if isinstance(item, tuple) and len(item) == 2 and isinstance(item[0], str):
                named.append(item)
            else:
                named.append((_pass_name(item), item))
        if name is not None:
            self.name = name  # type: ignore[misc]
        if max_iterations < 1:
            raise ValueError("max_iterations must be at least 1")
        self.passes = _ordered(named, order)
        self.max_iterations = max_iterations
        self.check = check
        self.report = PipelineReport()

    @property
    def requires_exported_program(self) -> bool:  # type: ignore[override]
        return any(getattr(p, "requires_exported_program", False) for _, p in self.passes)

    @property
    def idempotent(self) -> bool:  # type: ignore[override]  # idempotent when every pass in it is
        return all(_idempotent(p) for _, p in self.passes)

    @property
    def names(self) -> list[str]:
        return [name for name, _ in self.passes]

    def transform(self, graph: fx.Graph, context: PassContext) -> bool:
        report = self.report = PipelineReport()
        started = time.perf_counter()
        version = 0  # bumped by every modification
        last_run: dict[int, int] = {}  # pass index -> version after it last ran
        counts = count_ops(graph)
        size = len(graph.nodes)
        shape_env = shape_env_of(graph)
        if self.check:
            self._check(graph, "the pipeline's input")
        converged = False
        for iteration in range(1, self.max_iterations + 1):
            modified_now: list[str] = []
            for index, (name, item) in enumerate(self.passes):
                if last_run.get(index) == version and _idempotent(item):
                    continue
                tick = time.perf_counter()
                guards_before = len(shape_env.guards) if shape_env is not None else 0
                modified = self._run_one(name, item, graph, context)
                seconds = time.perf_counter() - tick
                added = guards_since(shape_env, guards_before)
                if added:
                    raise PipelineError(
                        f"pass {name!r} guarded on a dynamic size ({', '.join(added)}): what it decided holds "
                        f"only at sizes like the example's, and nothing checks that guard again after "
                        f"export; the pass must not compare symbolic sizes")
                changes: dict[str, tuple[int, int]] = {}
                new_size = size
                if modified:
                    version += 1
                    modified_now.append(name)
                    new_counts = count_ops(graph)
                    new_size = len(graph.nodes)
                    changes = {op: (counts.get(op, 0), new_counts.get(op, 0))
                               for op in set(counts) | set(new_counts) if counts.get(op, 0) != new_counts.get(op, 0)}
                    counts = new_counts
                    if context.exported_program is not None:
                        sync_output_signature(context.exported_program)
                    if self.check:
                        self._check(graph, f"pass {name!r}")
                last_run[index] = version
                report.records.append(PassRecord(name, iteration, seconds, modified, size, new_size, changes))
                size = new_size
            report.iterations = iteration
            if not modified_now:
                converged = True
                break
        report.seconds = time.perf_counter() - started
        if not converged:
            raise PipelineError(
                f"pipeline {self.pass_name!r} did not reach a fixed point in {self.max_iterations} iterations; "
                f"still changing the graph: {', '.join(modified_now)}\n{report}")
        return version > 0

    def _run_one(self, name: str, item: Any, graph: fx.Graph, context: PassContext) -> bool:
        try:
            if isinstance(item, ShimkitPass):
                return bool(item.transform(graph, context))
            return self._run_foreign(name, item, graph, context)
        except PassError:
            raise
        except Exception as error:
            raise PassError(name, None, f"{type(error).__name__}: {error}") from error

    @staticmethod
    def _run_foreign(name: str, item: Callable[..., Any], graph: fx.Graph, context: PassContext) -> bool:
        """A torch.fx-style pass: called on the program or module; must change the graph in place."""
        module = context.module
        if getattr(item, "requires_exported_program", False) and context.exported_program is not None:
            target: Any = context.exported_program
        elif isinstance(module, fx.GraphModule):
            target = module
        else:
            raise PipelineError(f"pass {name!r} takes a GraphModule, but the pipeline runs on a bare Graph")
        before = _fingerprint(graph)
        result = item(target)
        if isinstance(result, PassResult) or hasattr(result, "graph_module"):
            if result.graph_module is not module and result.graph_module is not target:
                raise PipelineError(f"pass {name!r} returned a new module; pipelines change graphs in place "
                                    f"(wrap it so that it edits the module it is given)")
        # A foreign pass's own "modified" flag is often always True; the graph says what happened.
        return _fingerprint(graph) != before

    def _check(self, graph: fx.Graph, after: str) -> None:
        try:
            graph.lint()
        except Exception as error:
            raise PipelineError(f"{after} left an invalid graph: {error}") from error
        has_values = any("val" in n.meta for n in graph.find_nodes(op="placeholder"))
        if not has_values:
            return
        computer = ValueComputer(fake_mode_of(graph))
        for node in graph.nodes:
            if node.op not in ("call_function", "placeholder"):
                continue
            if "val" not in node.meta:
                raise PipelineError(f"{after} left {describe_node(node)} without meta['val']")
            if node.op != "call_function" or not callable(node.target) or not isinstance(
                    node.meta["val"], (torch.Tensor, list, tuple)):
                continue
            try:
                args, kwargs = argument_values(node)
                if node.target.__name__ == "getitem":
                    expected = layout(node.target(*args))
                else:
                    expected = computer.layout_of(node.target, args, kwargs)
            except Exception:
                continue  # ops fake tensors cannot run (data-dependent ...): nothing to compare with
            if not same_layout(expected, layout(node.meta["val"])):
                raise PipelineError(f"{after} left a stale meta['val'] on {describe_node(node)}: it says "
                                    f"{layout(node.meta['val'])}, its inputs give {expected}")

    def __repr__(self) -> str:
        return f"Pipeline({self.pass_name!r}: {' -> '.join(self.names)})"


def _idempotent(item: Any) -> bool:
    """Shimkit passes say so (:class:`ShimkitPass` declares ``idempotent``); a foreign pass is not
    assumed to be unless it carries the same attribute."""
    return bool(getattr(item, "idempotent", False))


def _fingerprint(graph: fx.Graph) -> tuple:
    return tuple((n.name, n.op, str(n.target), str(n.args), str(n.kwargs)) for n in graph.nodes)


def _ordered(named: list[tuple[str, Any]], order: Sequence[tuple[str, str]]) -> list[tuple[str, Any]]:
    """Stable topological order: the given order, moved only as constraints demand."""
    names = [n for n, _ in named]
    if len(set(names)) != len(names):
        duplicates = sorted({n for n in names if names.count(n) > 1})
        raise PipelineError(f"two passes are named {', '.join(map(repr, duplicates))}; give each a distinct name")
    first = prerequisites_of((name, getattr(item, "after", ()), getattr(item, "before", ()))
                             for name, item in named)
    for a, b in order:
        for n in (a, b):
            if n not in first:
                raise PipelineError(f"ordering constraint names {n!r}, which is not in the pipeline ({names})")
        first[b].add(a)
    try:
        result = stable_order(names, first)
    except OrderingCycle as cycle:
        raise PipelineError(str(cycle)) from None
    by_name = dict(named)
    return [(n, by_name[n]) for n in result]

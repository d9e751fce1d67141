"""Stable topological ordering of named steps under ``after``/``before`` constraints.

Shared by the registry (ordering plugin passes) and pipelines (ordering their members): both keep
the given order except where a constraint demands a move, so a run is reproducible from the order in
which things were registered.
"""

from __future__ import annotations

from typing import Iterable, Mapping


class OrderingCycle(ValueError):
    """The constraints cannot all hold; ``cycle`` lists the names around the loop."""

    def __init__(self, cycle: list[str]) -> None:
        self.cycle = cycle
        super().__init__(f"pass ordering constraints form a cycle: {' -> '.join(cycle)}")


def prerequisites_of(steps: Iterable[tuple[str, Iterable[str], Iterable[str]]]) -> dict[str, set[str]]:
    """``{name: names that must come first}`` from ``(name, after, before)`` triples.

    Constraints naming a step that is not among ``steps`` are ignored: a plugin may order itself
    against a pass that another, absent, plugin would provide.
    """
    steps = list(steps)
    first: dict[str, set[str]] = {name: set() for name, _, _ in steps}
    for name, after, before in steps:
        first[name] |= {other for other in after if other in first}
        for later in before:
            if later in first:
                first[later].add(name)
    return first


def stable_order(names: list[str], prerequisites: Mapping[str, Iterable[str]]) -> list[str]:
    """``names`` reordered so each comes after its ``prerequisites``, otherwise keeping their order.

    >>> stable_order(["c", "a", "b"], {"c": ["a"], "b": []})
    ['a', 'c', 'b']
    """
    position = {name: index for index, name in enumerate(names)}
    ordered: list[str] = []
    done: set[str] = set()
    visiting: list[str] = []

    def visit(name: str) -> None:
        if name in done:
            return
        if name in visiting:
            raise OrderingCycle(visiting[visiting.index(name):] + [name])
        visiting.append(name)
        for first in sorted(prerequisites.get(name, ()), key=position.__getitem__):
            visit(first)
        visiting.pop()
        done.add(name)
        ordered.append(name)

    for name in names:
        visit(name)
    return ordered

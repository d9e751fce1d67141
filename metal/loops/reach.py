"""Reach: which calls split a kernel (barriers and simdgroup functions) and which functions of the source
reach one, so that they are inlined."""

from __future__ import annotations

import re

import shimkit.metal.cursors as cursors
from shimkit.metal.loops.source import callee_name, parameters_of, qualified_name

BARRIERS = {"threadgroup_barrier", "simdgroup_barrier"}
COLLECTIVE = re.compile(r"^(simd_\w+|quad_\w+)$")


class Reach:
    """Which calls are split points, and which functions of the source reach one."""

    def __init__(self, definitions: dict[str, list]) -> None:
        self.definitions = definitions
        self.by_name: dict[str, list[str]] = {}
        for qualified in definitions:
            self.by_name.setdefault(qualified.rsplit("::", 1)[-1], []).append(qualified)
        self.memo: dict[str, str | None] = {}

    def kind(self, call) -> str:
        """"barrier", "collective" (a simdgroup function, or a pure function of values that reaches only
        simdgroup functions), "inline" (a function of the source that reaches a barrier) or "plain"."""
        name = callee_name(call)
        declared = call.referenced
        where = declared.location.file.name if declared is not None and declared.location.file else None
        if where is not None and where != "kernel.cpp":
            if where.endswith("sync.h"):
                if name in BARRIERS:
                    return "barrier"
                if COLLECTIVE.match(name):
                    return "collective"
            return "plain"
        candidates = ([qualified_name(declared)] if declared is not None and where == "kernel.cpp"
                      else self.by_name.get(name, []))
        if declared is None and name in BARRIERS:
            return "barrier"
        if declared is None and COLLECTIVE.match(name):
            return "collective"  # a dependent call: shimkit's simdgroup function or a wrapper of one
        reached = [(c, self.reaches(c)) for c in candidates]
        reached = [(c, r) for c, r in reached if r is not None]
        if not reached:
            return "plain"
        if all(r == "collective" for _, r in reached):
            return "collective"
        return "inline"

    def reaches(self, qualified: str) -> str | None:
        """None, "collective" (a function of values reaching simdgroup functions only), or why not."""
        if qualified in self.memo:
            return self.memo[qualified]
        self.memo[qualified] = None  # recursion reaches nothing new
        verdict: str | None = None
        for definition in self.definitions.get(qualified, []):
            by_reference = any(cursors.kind(a.type) in ("POINTER", "LVALUEREFERENCE", "RVALUEREFERENCE")
                               for a in parameters_of(definition))
            for node in cursors.walk(definition):
                if node.kind.name != "CALL_EXPR":
                    continue
                kind = self.kind(node)
                if kind == "inline":
                    verdict = "reaches threadgroup_barrier"
                    break
                if kind == "barrier":
                    verdict = f"reaches {callee_name(node)}"
                    break
                if kind == "collective":
                    verdict = ("takes pointers or references and reaches simdgroup functions" if by_reference
                               else verdict or "collective")
            if verdict not in (None, "collective"):
                break
        self.memo[qualified] = verdict
        return verdict

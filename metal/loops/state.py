"""The one record the passes share while they write a kernel's group function, and the refusal any of
them may raise."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Protocol

import shimkit.metal.cursors as cursors
from shimkit.metal.loops.fragments import Carried, Text
from shimkit.metal.loops.reach import Reach
from shimkit.metal.loops.source import Source
from shimkit.metal.loops.uniformity import Uniformity

MAX_THREADS = "::shimkit_metal::kMaxGroupThreads"


class Unsplittable(Exception):
    """Why a kernel keeps running on fibers."""


@dataclass(frozen=True)
class Recomputed:
    """What a region binds a recomputable variable's name to (uniformity): its value, computed again
    from the thread's position, of its declared type."""

    type: str
    value: str

    def binding(self, name: str) -> str:
        return f"std::remove_cv_t<{self.type}> {name} = ({self.value});"


@dataclass
class GroupState:
    """What writing one kernel's group function has gathered so far."""

    src: Source
    kernel: Any                 # the kernel's definition (a libclang cursor)
    reach: Reach
    body_cursor: Any            # the kernel's body
    buffers: list[str] = field(default_factory=list)  # the group function's buffer parameters
    storage: list[str] = field(default_factory=list)  # per-thread copies of the parameters the kernel assigns
    # (name, declaration) of the kernel's thread parameters
    thread_values: list[tuple[str, str]] = field(default_factory=list)
    # the parameters with one value for the group (uniformity's seeds)
    group_values: set[str] = field(default_factory=set)
    # whether the kernel's thread positions (grid, in group) are scalars, each the x coordinate alone
    scalar_positions: bool = False
    declared: list[str] = field(default_factory=list)  # declarations to place before the statement being written
    # Per-thread arrays, masks and uniform values are declared once at the top of the group function:
    # nothing then stands between two regions that could run as one (see regions.join_pending); those of
    # a type the body declares (or sized by its constants) stay where they are.
    top: list[str] = field(default_factory=list)
    parents: dict[str, str] = field(default_factory=dict)  # mask -> the mask it was made from
    edits: list[tuple[int, int, str]] = field(default_factory=list)  # names qualified in inlined functions' bodies
    # (offset, offset, text) replacing the calls of the statement being split
    replacing: list[tuple[int, int, str]] = field(default_factory=list)
    # (result, returned) of each function being inlined
    inlined: list[tuple[str | None, str]] = field(default_factory=list)
    # The template arguments of each function being inlined (`using T = float;`), opened in each of its
    # regions rather than in its block, so that a region can join one outside the block.
    aliases: list[str] = field(default_factory=list)
    # A region tests an inlined function's `returned` flags only where one of its returns may have run
    # before it (`may_return`), and records the flags it tests and the masks such a test clears (an
    # inlined function whose mask nothing clears runs under its caller's).
    may_return: set[str] = field(default_factory=set)
    tested: set[str] = field(default_factory=set)
    cleared: set[str] = field(default_factory=set)
    # names declared at group level (a region joined across them could see them)
    hoisted: list[str] = field(default_factory=list)
    # (name, the thread's element it names in a region: `shimkit_v1[shimkit_t]`, a value shared by the
    # group's threads, or its value computed again) by block
    scopes: list[list[tuple[str, str | Recomputed]]] = field(default_factory=lambda: [[]])
    loop_depth: int = 0
    names: int = 0
    uniformity: Uniformity = field(init=False)  # of the body being written (the kernel's or an inlined one's)

    @property
    def source(self) -> bytes:
        return self.src.original

    def fresh(self, what: str) -> str:
        self.names += 1
        return f"shimkit_{what}{self.names}"

    def split_points(self, cursor) -> list:
        """The split-point calls in a statement: barrier and simdgroup calls (outside lambdas), but for
        those the statement being split has replaced."""
        found = []
        for node in [cursor, *cursors.walk(cursor)]:
            if cursors.kind(node) == "CALL_EXPR" and self.reach.kind(node) != "plain" and not any(
                    a <= self.src.start(node) and self.src.end(node) <= b for a, b, _ in self.replacing):
                found.append(node)
        return found


# What a block's statements call to write out the statements pending for a region, after group-level code.
Flush = Callable[..., None]
# The writer's own entry points, handed to the passes that write the blocks and statements nested in theirs.
class BlockWriter(Protocol):
    def __call__(self, state: GroupState, statements: list, mask: str, carried: Carried | None = None) -> Text: ...


StatementWriter = Callable[[GroupState, Any, str, list, list, Flush], None]

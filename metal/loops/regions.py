"""Parallel regions (POCL's ParallelRegion): the statements between two split points run as one loop over
the group's threads under a mask, joined to the region before where nothing but block ends stands between;
values that are one for the group are assigned once, at group level."""

from __future__ import annotations

import re
from typing import Callable

from shimkit.metal.loops.bindings import group_bindings, preamble, with_declared_types
from shimkit.metal.loops.fragments import Carried, Region, Text
from shimkit.metal.loops.state import MAX_THREADS, Flush, GroupState


def region(state: GroupState, mask: str, code: str) -> str:
    return Region(mask, thread_fragment(state, mask, code)) if code.strip() else ""


def thread_fragment(state: GroupState, mask: str, code: str) -> str:
    """A region's code for one thread, with its preamble."""
    code = with_declared_types(state, code)
    opening, closing = preamble(state, mask, code)
    return f"{opening} {code} {closing}"


def thread_code(state: GroupState, mask: str, pending: list[str]) -> str:
    """One thread's code in a region for the pending statements, with the preamble that binds their
    names, and the code carried in from a caller (Carried: already bound)."""
    pieces: list[str] = []
    statements: list[str] = []

    def bind() -> None:
        code = " ".join(statements)
        statements.clear()
        if code.strip():
            pieces.append(thread_fragment(state, mask, code))

    for entry in pending:
        if isinstance(entry, Carried):
            bind()
            pieces.append(entry)
        else:
            statements.append(entry)
    bind()
    return pieces[0] if len(pieces) == 1 else " ".join(f"{{ {piece} }}" for piece in pieces)


def carry(state: GroupState, mask: str, pending: list[str], hidden: set[str]) -> Carried | None:
    """The pending statements as one thread's code for a region to come, which ``hidden`` names are
    visible in; None where they would hide a name of theirs."""
    text = " ".join(pending)
    if not text.strip() or hidden & set(re.findall(r"[A-Za-z_]\w*", text)):
        return None
    code = thread_code(state, mask, pending)
    pending.clear()
    return Carried(code)


def join_pending(state: GroupState, before, mask: str, pending: list[str]) -> Text | None:
    """``before`` (group-level code) with the region that would follow it under ``mask`` joined to the
    region it ends with, where nothing but the ends of blocks lies between them (the last region of an
    inlined function, and its caller's statements after the call): one loop over the threads instead
    of two. None where that does not apply."""
    text = " ".join(pending)
    if not text.strip():
        return None
    return join_after(state, before, mask, mask, text, lambda: thread_code(state, mask, pending))


def join_after(state: GroupState, before, mask: str, then: str, text: str, fragment: Callable[[], str]) -> Text | None:
    """``before`` with ``fragment()`` (one thread's code, naming what ``text`` names) run for the
    threads of ``then`` (``mask`` or a mask the region before sets) right after the region ``before``
    ends with, in one loop over ``mask``'s threads. That region runs under ``mask`` or under a mask
    made from it (an inlined function's: it then runs for that mask's threads only). No two threads
    are ordered between two barriers, so one thread's both parts may run before the next thread's."""
    last = before if isinstance(before, Region) else before.last if isinstance(before, Text) else None
    if last is None or (last.mask != mask and not within(state, last.mask, mask)):
        return None
    hidden: set[str] = before.hidden if isinstance(before, Text) else set()
    at = before.rindex(last)
    if before[at + len(last):].strip(" }"):
        return None
    if hidden & set(re.findall(r"[A-Za-z_]\w*", text)):
        return None  # a name the blocks between declare would hide the caller's
    # The first part's returns leave it alone; a thread it took out of the mask skips the second.
    only = "" if last.mask == mask else f"{last.mask}[shimkit_t] && "
    joined = Region(mask, f"if ({only}![&]() -> bool {{ {last.fragment} return true; }}()) return false; "
                           f"if (!{then}[shimkit_t]) return true; {{ {fragment()} }}")
    first = before.first if isinstance(before, Text) else last
    return Text(before[:at] + joined + before[at + len(last):], joined, hidden, joined if first is last else first)


def within(state: GroupState, mask: str, outer: str) -> bool:
    """Whether ``mask`` was made from ``outer`` (directly or through other masks)."""
    while mask in state.parents:
        mask = state.parents[mask]
        if mask == outer:
            return True
    return False


def new_mask(state: GroupState, mask: str, value: bool | None) -> tuple[str, str]:
    name = state.fresh("m")
    state.parents[name] = mask
    state.top.append(f"bool {name}[{MAX_THREADS}];")
    fill = f"std::memcpy({name}, {mask}, shimkit_count);" if value is None else f"std::memset({name}, 0, shimkit_count);"
    return name, fill


def declare_storage(state: GroupState, declaration: str) -> str:
    """Declares storage at the top of the group function; returns what stays where it is (the
    declaration, where it names a type or constant the body declares)."""
    if set(state.hoisted) & set(re.findall(r"[A-Za-z_]\w*", declaration)):
        return declaration
    state.top.append(declaration)
    return ""


def group_value(state: GroupState, expression: str) -> str:
    """A uniform condition evaluated once for the group."""
    expression = with_declared_types(state, expression)
    opening, closing = group_bindings(state, expression)
    return (f"[&]() __attribute__((always_inline)) -> bool {{ {opening} "
            f"return static_cast<bool>({expression}); {closing} }}()")


def group_statement(state: GroupState, mask: str, code: str) -> str:
    """An assignment of a uniform variable run once for the group, where a thread of ``mask`` runs (a
    uniform value may divide by a zero that no thread reaches)."""
    code = with_declared_types(state, code)
    opening, closing = group_bindings(state, code)
    return f"if (shimkit_g.any({mask})) {{ {opening} {code} {closing} }}"


def assign_uniform(state: GroupState, mask: str, code: str, name: str, out: list[str], pending: list[str],
                    flush: Flush) -> None:
    """Writes a uniform assignment at group level, before the pending statements unless they read
    the variable (nothing else they do can change a uniform value)."""
    if any(re.search(rf"\b{name}\b", entry) for entry in pending):
        flush()
    out.append(group_statement(state, mask, code))

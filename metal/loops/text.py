"""The source text a group function is written from, read through the edits the passes make: the calls
of the statement being split replaced, the names of inlined bodies qualified."""

from __future__ import annotations

from shimkit.metal.loops.source import msl_line
from shimkit.metal.loops.state import GroupState


def line_of(state: GroupState, cursor) -> int:
    return msl_line(state.source, state.src.start(cursor))


def source_text(state: GroupState, start: int, end: int) -> str:
    """The source between two offsets, with the calls of the statement being split replaced and the
    names in inlined bodies qualified."""
    pieces, at = [], start
    # At one offset: insertions first, then the longest replacement.
    for a, b, replacement in sorted(state.replacing + state.edits, key=lambda e: (e[0], e[0] != e[1], -e[1])):
        if start <= a and b <= end and a >= at:
            pieces += [state.source[at:a].decode(), replacement]
            at = b
    pieces.append(state.source[at:end].decode())
    return "".join(pieces)


def statement_end(state: GroupState, cursor) -> int:
    end = state.src.end(cursor)
    rest = state.source[end:end + 256]
    stripped = rest.lstrip()
    if stripped.startswith(b";"):
        return end + (len(rest) - len(stripped)) + 1
    return end


def expression_code(state: GroupState, cursor) -> str:
    text = source_text(state, state.src.start(cursor), state.src.end(cursor))
    return " ".join(line for line in text.split("\n") if not line.lstrip().startswith("#"))

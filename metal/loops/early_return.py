"""A simdgroup-uniform early return (c10's NaN-propagating ``simd_max``): a vote every active lane of a
simdgroup shares decides the return, so the second combine runs speculatively and the two returns become one
choice, with no returned flag and no mask."""

from __future__ import annotations

import shimkit.metal.cursors as cursors
from shimkit.metal.loops.collectives import DIRECT, split_directly
from shimkit.metal.loops.source import callee_name, inside
from shimkit.metal.loops.state import Flush, GroupState, StatementWriter
from shimkit.metal.loops.text import expression_code, source_text

UNIFORM_VOTES = {"simd_any", "simd_all"}  # one value for every active lane of a simdgroup
ARITHMETIC = {"BOOL", "CHAR_S", "SCHAR", "UCHAR", "SHORT", "USHORT", "INT", "UINT", "LONG", "ULONG", "LONGLONG",
              "ULONGLONG", "FLOAT", "DOUBLE"}


def is_uniform_early_return(state: GroupState, statement, following) -> bool:
    """``if (simd_any(...)) return a; return f(simd_max(x));`` as an inlined function's two
    statements (c10's NaN-propagating simd_max and simd_min): the vote is one value for every active
    lane of a simdgroup, so a simdgroup's lanes all return early or none does, and the second combine
    may run for every lane, its result unused where the vote was taken. The two then need no returned
    flag and no mask: ``return vote ? a : f(max)`` after both combines. Only where that speculation is
    harmless: the second call's operands are variables, literals and conversions to floating point
    (nothing read from memory, nothing that can trap), and both values have one arithmetic type."""
    if not state.inlined or state.inlined[-1][0] is None or state.loop_depth:
        return False
    if cursors.kind(statement) != "IF_STMT" or cursors.kind(following) != "RETURN_STMT":
        return False
    children = list(statement.get_children())
    if len(children) != 2:
        return False
    condition, then = children
    if cursors.kind(then) == "COMPOUND_STMT":
        inner = list(then.get_children())
        if len(inner) != 1:
            return False
        then = inner[0]
    if cursors.kind(then) != "RETURN_STMT" or state.split_points(then):
        return False
    early, late = list(then.get_children()), list(following.get_children())
    if len(early) != 1 or len(late) != 1:
        return False
    vote = single_direct_call(state, condition)
    if vote is None or callee_name(vote) not in UNIFORM_VOTES or cursors.unwrapped(condition) != vote:
        return False
    call = single_direct_call(state, following)
    if call is None or not all(speculable(argument) for argument in call.get_arguments()):
        return False
    types = {value.type.get_canonical().spelling for value in (early[0], late[0])}
    return len(types) == 1 and arithmetic(late[0].type.get_canonical())


def single_direct_call(state: GroupState, cursor):
    """The one simdgroup call in ``cursor`` when it is one of sync.h's on operands that reach none
    (what ``direct_combine`` combines over arrays), else None."""
    splits = state.split_points(cursor)
    outermost = [c for c in splits if not any(c is not o and inside(c, o) for o in splits)]
    if len(outermost) != 1 or len(splits) != 1:
        return None
    call = outermost[0]
    declared = call.referenced
    if (callee_name(call) not in DIRECT or state.reach.kind(call) != "collective" or declared is None
            or declared.location.file is None or not declared.location.file.name.endswith("sync.h")):
        return None
    return call


def speculated_return(state: GroupState, statement, following, mask: str, out: list[str], pending: list[str],
                      flush: Flush, write_statement: StatementWriter) -> None:
    """Writes what ``is_uniform_early_return`` accepted: the vote's combine, then the return whose
    value chooses between the two. A vote ``direct_combine`` declines (a type it cannot name) leaves both
    statements to the general way, before anything is written."""
    condition, then = list(statement.get_children())
    if cursors.kind(then) == "COMPOUND_STMT":
        then = list(then.get_children())[0]
    early = list(then.get_children())[0]
    votes: list[str] = []
    if not split_directly(state, condition, state.split_points(condition), mask, out, pending, flush,
                                lambda: expression_code(state, condition), votes.append):
        write_statement(state, statement, mask, out, pending, flush)
        write_statement(state, following, mask, out, pending, flush)
        return
    late = list(following.get_children())[0]
    start, end = state.src.start(late), state.src.end(late)
    choice = f"(({votes[0]}) ? ({source_text(state, state.src.start(early), state.src.end(early))}) : ("
    saved = state.replacing
    state.replacing = [*saved, (start, start, choice), (end, end, "))")]
    try:
        write_statement(state, following, mask, out, pending, flush)
    finally:
        state.replacing = saved


def speculable(expression) -> bool:
    """An expression any thread may evaluate, whatever its values: variables, literals and conversions to
    floating point (no memory read through a pointer, no call, no operator that can trap or overflow)."""
    for node in [expression, *cursors.walk(expression)]:
        kind = cursors.kind(node)
        if kind in ("DECL_REF_EXPR", "INTEGER_LITERAL", "FLOATING_LITERAL", "CXX_BOOL_LITERAL_EXPR",
                    "TYPE_REF", "NAMESPACE_REF", "TEMPLATE_REF", "PAREN_EXPR"):
            continue
        if kind == "UNEXPOSED_EXPR" or kind in cursors.CASTS:
            inner = cursors.operands(node)
            same = len(inner) == 1 and inner[0].type.get_canonical().spelling == node.type.get_canonical().spelling
            if same or cursors.kind(node.type.get_canonical()) in ("FLOAT", "DOUBLE") or \
                    node.type.get_canonical().spelling == "_Float16":
                continue
        return False
    return True


def arithmetic(type_) -> bool:
    return cursors.kind(type_) in ARITHMETIC or type_.spelling == "_Float16"

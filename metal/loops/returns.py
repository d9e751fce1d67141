"""How a thread leaves: a statement's code with each ``return`` rewritten to take the thread out of the
kernel's later regions (or out of the function being inlined, its result stored), and the jumps (``goto``,
``break`` / ``continue`` out of a split loop) that a region cannot make."""

from __future__ import annotations

import shimkit.metal.cursors as cursors
from shimkit.metal.loops.state import GroupState, Unsplittable
from shimkit.metal.loops.text import line_of, source_text, statement_end

LOOPS = {"FOR_STMT", "WHILE_STMT", "DO_STMT"}


def statement_code(state: GroupState, cursor) -> str:
    """A statement's text on one line, with `return` taking the thread out of the kernel, or out of
    the function being inlined with its result stored."""
    start = state.src.start(cursor)
    end = statement_end(state, cursor)
    edits = []
    for node in [cursor, *cursors.walk(cursor)]:
        if cursors.kind(node) == "RETURN_STMT":
            value = list(node.get_children())
            at = state.src.start(node)
            if not state.inlined:
                if value:
                    raise Unsplittable(f"line {line_of(state, node)}: returns a value")
                edits.append((at, at + len("return"), "return false"))
                continue
            result, returned = state.inlined[-1]
            returned_value = source_text(state, state.src.start(value[0]), state.src.end(value[0])) if value else ""
            if not returned_value.lstrip().startswith("{"):
                returned_value = f"({returned_value})"  # `return {a, b};` assigns the braced list as it is
            stored = f"{result}[shimkit_t] = {returned_value}; " if value and result else ""
            edits.append((at, statement_end(state, node),
                          f"{{ {stored}{returned}[shimkit_t] = true; return true; }}"))
        elif cursors.kind(node) in ("GOTO_STMT", "INDIRECT_GOTO_STMT", "LABEL_STMT"):
            raise Unsplittable(f"line {line_of(state, node)}: goto")
    if state.loop_depth:
        check_jumps(state, cursor)
    pieces, at = [], start
    for a, b, replacement in sorted(edits):
        if a < at:
            continue
        pieces += [source_text(state, at, a), replacement]
        at = b
    pieces.append(source_text(state, at, end))
    lines = "".join(pieces).split("\n")
    return " ".join(line for line in lines if not line.lstrip().startswith("#")).strip()


def check_jumps(state: GroupState, cursor) -> None:
    """break / continue that would leave a split loop from inside a region."""
    def visit(node, inside_loop: bool, inside_switch: bool) -> None:
        kind = node.kind.name
        if kind == "BREAK_STMT" and not inside_loop and not inside_switch:
            raise Unsplittable(f"line {line_of(state, node)}: break out of a loop with a barrier")
        if kind == "CONTINUE_STMT" and not inside_loop:
            raise Unsplittable(f"line {line_of(state, node)}: continue in a loop with a barrier")
        if kind == "LAMBDA_EXPR":
            return
        for child in node.get_children():
            visit(child, inside_loop or kind in LOOPS, inside_switch or kind == "SWITCH_STMT")
    visit(cursor, False, False)


def returns_in_loop(body) -> bool:
    """Whether a function body returns from inside a loop (outside lambdas)."""
    def visit(node, in_loop: bool) -> bool:
        for child in node.get_children():
            kind = cursors.kind(child)
            if kind == "LAMBDA_EXPR":
                continue
            if (kind == "RETURN_STMT" and in_loop) or visit(child, in_loop or kind in LOOPS):
                return True
        return False
    return visit(body, False)

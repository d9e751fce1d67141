"""Control flow around split points: an ``if`` or loop with a uniform condition runs as plain C++ at group
level around its body's regions; otherwise each thread's branch or iteration is a mask over the group's
threads, and the loop runs while any thread of its mask does."""

from __future__ import annotations

import contextlib
from typing import Iterator

import shimkit.metal.cursors as cursors
from shimkit.metal.loops.collectives import evaluate, split_directly
from shimkit.metal.loops.declarations import declaration_code
from shimkit.metal.loops.fragments import Text, ending
from shimkit.metal.loops.regions import group_statement, group_value, join_after, new_mask, region
from shimkit.metal.loops.state import BlockWriter, Flush, GroupState, Unsplittable
from shimkit.metal.loops.text import expression_code, line_of
from shimkit.metal.loops.uniformity import written


def scoped(state: GroupState, statements: list, mask: str, write_block: BlockWriter) -> Text:
    state.scopes.append([])
    try:
        body = write_block(state, statements, mask)
        return ending("{ " + body + " }", body, body.hidden, body)
    finally:
        state.scopes.pop()


def branch(state: GroupState, statement, mask: str, write_block: BlockWriter) -> Text:
    if cursors.kind(statement) == "COMPOUND_STMT":
        return scoped(state, list(statement.get_children()), mask, write_block)
    return scoped(state, [statement], mask, write_block)


def write_if(state: GroupState, statement, mask: str, out: list[str], pending: list[str], flush: Flush,
             write_block: BlockWriter) -> None:
    children = list(statement.get_children())
    if any(cursors.kind(c) == "DECL_STMT" or cursors.kind(c) == "VAR_DECL" for c in children[:-1]) or \
            len(children) not in (2, 3):
        raise Unsplittable(f"line {line_of(state, statement)}: if with a declaration and a barrier")
    condition, then = children[0], children[1]
    orelse = children[2] if len(children) == 3 else None
    if not state.split_points(condition) and state.uniformity.uniform(condition):
        # every thread takes the same branch: an `if` around the branches' regions, no masks
        flush()
        test = group_value(state, expression_code(state, condition))
        branches = f"if ({test}) {{ {branch(state, then, mask, write_block)} }}"
        if orelse is not None:
            branches += f" else {{ {branch(state, orelse, mask, write_block)} }}"
        out.append(f"if (shimkit_g.any({mask})) {{ {branches} }}")
        return
    taken, fill_taken = new_mask(state, mask, False)
    other, fill_other = new_mask(state, mask, False) if orelse is not None else ("", "")
    def set_masks() -> str:
        return (f"{{ const bool shimkit_c = static_cast<bool>({expression_code(state, condition)}); "
                f"{taken}[shimkit_t] = shimkit_c; " + (f"{other}[shimkit_t] = !shimkit_c; " if other else "") + "}")
    # The condition is evaluated with the statements before the if (around its simdgroup call, if it
    # has one), and the first region of the branch taken joins the region that sets the masks.
    splits = state.split_points(condition)
    if splits and not split_directly(state, condition, splits, mask, out, pending, flush, set_masks):
        flush()
        out.append(f"{fill_taken} {fill_other} {evaluate(state, mask, condition, set_masks)}")
    else:
        if not splits:
            pending.append(set_masks())
        flush(f"{fill_taken} {fill_other}")
    then_text = branch(state, then, taken, write_block)
    first = then_text.first
    joined = join_after(state, out[-1], mask, taken, first, lambda: first.fragment) if (
        out and first is not None and first.mask == taken) else None
    if joined is not None:
        out[-1] = joined
        then_text = then_text.without_first()
    parts = [then_text]
    if orelse is not None:
        parts.append(branch(state, orelse, other, write_block))
    out.append(" ".join(parts))


def write_loop(state: GroupState, statement, mask: str, write_block: BlockWriter) -> str:
    kind = statement.kind.name
    line = line_of(state, statement)
    children = list(statement.get_children())
    init = condition = step = None
    if kind == "FOR_STMT":
        init, condition, step, body = for_parts(state, statement)
    elif kind == "WHILE_STMT":
        if len(children) != 2 or children[0].kind.name in ("DECL_STMT", "VAR_DECL"):
            raise Unsplittable(f"line {line}: while with a declaration and a barrier")
        condition, body = children
    else:
        body, condition = children
    if uniform_loop(state, condition, init, step):
        return group_loop(state, kind, init, condition, step, body, mask, write_block)
    running, declare = new_mask(state, mask, None)
    with loop_scope(state):
        parts = ["{", declare]
        if init is not None:
            if cursors.kind(init) == "DECL_STMT":
                if state.split_points(init):
                    parts.append(evaluate(state, running, init, lambda: declaration_code(state, init) or ""))
                else:
                    parts.append(region(state, running, declaration_code(state, init) or ""))
            else:
                parts.append(evaluate(state, running, init, lambda: expression_code(state, init) + ";"))
            parts[2:2] = state.declared  # the loop variable's storage, before its first region
            state.declared = []
        test = ""
        if condition is not None:
            test = evaluate(state, running, condition, lambda: (
                f"if (!static_cast<bool>({expression_code(state, condition)})) {running}[shimkit_t] = false;"))
        elif any(returned in state.may_return for _, returned in state.inlined):
            # a thread that returned from an inlined function leaves the loop here
            test = region(state, running, ";")
        iteration: list[str] = [branch(state, body, running, write_block)]
        if step is not None:
            iteration.append(evaluate(state, running, step, lambda: expression_code(state, step) + ";"))
        if kind == "DO_STMT":
            parts.append(f"for (;;) {{ {' '.join(iteration)} {test} if (!shimkit_g.any({running})) break; }}")
        else:
            parts.append(f"for (;;) {{ {test} if (!shimkit_g.any({running})) break; {' '.join(iteration)} }}")
        parts.append("}")
        return " ".join(parts)


@contextlib.contextmanager
def loop_scope(state: GroupState) -> Iterator[None]:
    """Inside a loop with a split point: its own scope (the init's variables), and jumps checked."""
    state.scopes.append([])
    state.loop_depth += 1
    try:
        yield
    finally:
        state.loop_depth -= 1
        state.scopes.pop()


def uniform_loop(state: GroupState, condition, init, step) -> bool:
    """Whether every thread runs a loop's iterations alike: its condition is uniform, and its init and
    step assign uniform variables (uniformity)."""
    if condition is None or any(state.split_points(p) for p in (condition, init, step) if p is not None) \
            or not state.uniformity.uniform(condition):
        return False
    if init is not None:
        variables = ([c for c in init.get_children()] if cursors.kind(init) == "DECL_STMT"
                     else [written(init)])
        if not all(v is not None and cursors.kind(v) == "VAR_DECL" and v.hash in state.uniformity.variables
                   for v in variables):
            return False
    target = written(step) if step is not None else None
    return step is None or (target is not None and target.hash in state.uniformity.variables)


def group_loop(state: GroupState, kind: str, init, condition, step, body, mask: str,
               write_block: BlockWriter) -> str:
    """A loop with a uniform condition: a C++ loop at group level around its body's regions, which run
    under the loop's own mask (every thread of it runs each iteration)."""
    with loop_scope(state):
        parts = ["{"]
        if init is not None:
            if cursors.kind(init) == "DECL_STMT":
                uniform: list[tuple[str, str]] = []
                declaration_code(state, init, uniform)
                parts += state.declared
                state.declared = []
                parts += [group_statement(state, mask, code) for _, code in uniform]
            else:
                parts.append(group_statement(state, mask, expression_code(state, init) + ";"))
        test = f"shimkit_g.any({mask}) && {group_value(state, expression_code(state, condition))}"
        iteration: list[str] = [branch(state, body, mask, write_block)]
        if step is not None:
            iteration.append(group_statement(state, mask, expression_code(state, step) + ";"))
        if kind == "DO_STMT":
            parts.append(f"do {{ {' '.join(iteration)} }} while ({test});")
        else:
            parts.append(f"while ({test}) {{ {' '.join(iteration)} }}")
        parts.append("}")
        return " ".join(parts)


def for_parts(state: GroupState, statement):
    """init, condition, step and body of a for statement."""
    parts = cursors.for_parts(statement)
    if parts is None:
        raise Unsplittable(f"line {line_of(state, statement)}: a range-based for with a barrier")
    if parts[1] is not None and cursors.kind(parts[1]) in ("DECL_STMT", "VAR_DECL"):
        raise Unsplittable(f"line {line_of(state, statement)}: a for condition that declares")
    return parts

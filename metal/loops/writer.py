"""The writer: walks a kernel's body block by block, handing each statement to the pass it needs (regions,
collectives, inlining, control flow, the early return), and emits the group function around the result."""

from __future__ import annotations

from shimkit.metal.loops.collectives import evaluate, split_directly
from shimkit.metal.loops.control_flow import scoped, write_if, write_loop
from shimkit.metal.loops.declarations import declaration_code
from shimkit.metal.loops.early_return import is_uniform_early_return, speculated_return
from shimkit.metal.loops.fragments import Carried, Out, Region, Text, ending
from shimkit.metal.loops.group_reductions import write_group_reduction
from shimkit.metal.loops.inlining import call_to_inline, inlinable_collective, write_inlined
from shimkit.metal.loops.regions import assign_uniform, join_pending, thread_code
from shimkit.metal.loops.returns import LOOPS, statement_code
from shimkit.metal.loops.state import Flush, GroupState, Unsplittable
from shimkit.metal.loops.text import line_of, source_text
from shimkit.metal.loops.uniformity import written

BARRIER = "/* barrier */"
SPLIT_SUFFIX = "__shimkit_group"


def write_group_function(state: GroupState) -> str:
    # The front end's dry call that measures threadgroup memory calls the kernel, not its group
    # function; reading its thread_local flag once per group instead of in a region keeps a
    # `__tls_get_addr` call out of every thread's iteration.
    body = write_block(state, list(state.body_cursor.get_children()), "shimkit_g.alive").replace(
        "::shimkit_metal::measuring", "shimkit_measuring")
    start = state.src.start(state.kernel)
    name_at = state.src.start(next(t for t in state.kernel.get_tokens() if t.spelling == state.kernel.spelling))
    head = " ".join(source_text(state, start, name_at).split()) + " "
    parameters = ", ".join([*state.buffers, "const ::shimkit_metal::ThreadInfo& shimkit_base",
                            "::shimkit_metal::uint shimkit_count"])
    prologue = (f"::shimkit_metal::LoopGroup shimkit_g(shimkit_base, shimkit_count); "
                f"const ::shimkit_metal::Positions shimkit_p = shimkit_g.positions(); "
                f"const bool shimkit_measuring = ::shimkit_metal::measuring; (void)shimkit_measuring; "
                f"{' '.join(state.storage)} {' '.join(state.top)} {body}")
    if state.scalar_positions:
        # Instantiated for groups along x and for any shape (on_axis in loops.h).
        prologue = (f"::shimkit_metal::on_axis(shimkit_base, [&](auto shimkit_along_x_of) __attribute__((always_inline)) {{ "
                    f"constexpr bool shimkit_along_x = decltype(shimkit_along_x_of)::value; {prologue} }});")
    else:
        prologue = f"constexpr bool shimkit_along_x = false; {prologue}"
    return f"{head}SHIMKIT_GROUP_FUNCTION {state.kernel.spelling}{SPLIT_SUFFIX}({parameters}) {{ {prologue} }}"


def write_block(state: GroupState, statements: list, mask: str, carried: Carried | None = None) -> Text:
    """The group-level code of a block; ``carried``: a region's code that runs first in its first region
    (an inlined function's caller's statements before the call)."""
    out: list[str] = Out()
    pending: list[str] = [carried] if carried else []
    hoisted_from = len(state.hoisted)

    def flush(prelude: str = "") -> None:
        """Writes the pending statements as a region, after ``prelude`` (group-level code)."""
        joined = join_pending(state, out[-1], mask, pending) if out else None
        if joined is not None:
            out[-1:] = [text for text in (prelude, joined) if text]
        else:
            code = thread_code(state, mask, pending)
            out.extend(text for text in (prelude, Region(mask, code) if code.strip() else "") if text)
        pending.clear()

    index = 0
    while index < len(statements):
        before = len(out)
        if index + 1 < len(statements) and is_uniform_early_return(state, statements[index], statements[index + 1]):
            speculated_return(state, statements[index], statements[index + 1], mask, out, pending, flush,
                              write_statement)
            index += 2
        else:
            write_statement(state, statements[index], mask, out, pending, flush)
            index += 1
        out[before:before] = [text for text in state.declared if text.strip()]
        state.declared = []
    flush()
    out = [text for text in out if text]
    return ending(" ".join(out), out[-1] if out else None, set(state.hoisted[hoisted_from:]),
                   out[0] if out else None)


def write_statement(state: GroupState, statement, mask: str, out: list[str], pending: list[str], flush: Flush) -> None:
    kind = statement.kind.name
    splits = state.split_points(statement)
    inline = [c for c in splits if state.reach.kind(c) == "inline"]
    if not inline:
        # A function of the source that reaches only simdgroup functions (c10's NaN-propagating
        # simd_max, simd_argmax) is inlined too where it is a whole statement's call: each simdgroup
        # function in it then splits alone, with one evaluation, instead of re-evaluating the call.
        inline = [c for c in splits if inlinable_collective(state, statement, c, splits)]
    if inline:
        call = call_to_inline(state, statement, inline, splits)
        result = (write_group_reduction(state, call, mask, out, pending, flush)
                  or write_inlined(state, call, mask, out, pending, flush, write_block))
        saved = state.replacing
        state.replacing = [*saved, (state.src.start(call), state.src.end(call),
                                   f"{result}[shimkit_t]" if result else "(void)0")]
        try:
            write_statement(state, statement, mask, out, pending, flush)
        finally:
            state.replacing = saved
        return
    if kind == "DECL_STMT":
        if not splits:
            uniform: list[tuple[str, str]] = []
            pending.append(declaration_code(state, statement, uniform) or "")
            for name, code in uniform:
                assign_uniform(state, mask, code, name, out, pending, flush)
        elif not split_directly(state, statement, splits, mask, out, pending, flush,
                                lambda: declaration_code(state, statement) or ""):
            flush()
            out.append(evaluate(state, mask, statement, lambda: declaration_code(state, statement) or ""))
        return
    if not splits:
        if kind in ("BREAK_STMT", "CONTINUE_STMT") and state.loop_depth:
            raise Unsplittable(f"line {line_of(state, statement)}: {kind.split('_')[0].lower()} "
                               f"in a loop with a barrier")
        target = written(statement)
        if target is not None and target.hash in state.uniformity.variables:
            assign_uniform(state, mask, statement_code(state, statement), target.spelling, out, pending, flush)
        else:
            pending.append(statement_code(state, statement))
        return
    if kind == "IF_STMT":
        write_if(state, statement, mask, out, pending, flush, write_block)
        return
    expression = kind.endswith("_EXPR") or kind.endswith("_OPERATOR") or kind == "RETURN_STMT"
    if expression and not (kind == "CALL_EXPR" and state.reach.kind(statement) == "barrier") and \
            split_directly(state, statement, splits, mask, out, pending, flush,
                           lambda: statement_code(state, statement)):
        return
    flush()
    if kind == "COMPOUND_STMT":
        out.append(scoped(state, list(statement.get_children()), mask, write_block))
    elif kind in LOOPS:
        out.append(write_loop(state, statement, mask, write_block))
    elif kind.endswith("_EXPR") or kind.endswith("_OPERATOR") or kind == "RETURN_STMT":
        if kind == "CALL_EXPR" and state.reach.kind(statement) == "barrier":
            out.append(BARRIER)  # the boundary between two regions: nothing joins across it
            return
        out.append(evaluate(state, mask, statement, lambda: statement_code(state, statement)))
    else:
        raise Unsplittable(f"line {line_of(state, statement)}: a barrier or simdgroup function "
                           f"inside {kind.lower().replace('_stmt', '')}")

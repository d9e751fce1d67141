"""Collectives: a statement with simdgroup functions splits around its calls. Each call is evaluated for
every thread, the lanes of each simdgroup combine, then the statement runs with the results (COX's
treatment of warp functions, ``shimkit_metal/loops.h``); a call of sync.h's own functions on plain operands
is combined directly over per-thread arrays (``metal::lanes``), with no second evaluation."""

from __future__ import annotations

import re
from typing import Callable

import shimkit.metal.cursors as cursors
from shimkit.metal.loops.bindings import preamble, variable_element, with_declared_types
from shimkit.metal.loops.fragments import Carried
from shimkit.metal.loops.regions import declare_storage, region
from shimkit.metal.loops.source import callee_name, inside, parameters_of
from shimkit.metal.loops.state import MAX_THREADS, Flush, GroupState, Unsplittable
from shimkit.metal.loops.text import expression_code, line_of

ASSIGNMENTS = {"=", "+=", "-=", "*=", "/=", "%=", "&=", "|=", "^=", "<<=", ">>=", "++", "--"}
TWO_COMBINES = {"simd_ballot", "simd_any", "simd_all"}  # sync.h functions with two simd_collective calls
# sync.h's simdgroup functions that metal::lanes also has over per-thread arrays (called directly).
DIRECT = {"simd_sum", "simd_product", "simd_min", "simd_max", "simd_and", "simd_or", "simd_xor",
          "simd_prefix_inclusive_sum", "simd_prefix_exclusive_sum", "simd_prefix_inclusive_product",
          "simd_prefix_exclusive_product", "simd_broadcast", "simd_broadcast_first", "simd_shuffle",
          "simd_shuffle_down", "simd_shuffle_up", "simd_shuffle_xor", "simd_shuffle_rotate_down",
          "simd_shuffle_rotate_up", "simd_ballot", "simd_any", "simd_all"}
# Words in a type's spelling that C++ cannot write where the type is needed (Clang's names for deduced,
# dependent and unnamed types).
UNNAMEABLE = ("auto", "dependent", "(lambda", "(anonymous", "(unnamed")


def evaluate(state: GroupState, mask: str, cursor, code: Callable[[], str]) -> str:
    """Runs ``code()`` (which evaluates ``cursor``) per thread: a region, or a split around its
    simdgroup calls. The calls are evaluated left to right, each into a local that the statement
    reads instead (C++ leaves the order of operands unspecified; the replay needs one)."""
    splits = state.split_points(cursor)
    if not splits:
        return region(state, mask, code())
    outermost = outermost_calls(state, cursor, splits)
    direct = direct_combine(state, mask, outermost, code)
    if direct is not None:
        storage, operands, combine, statement = direct
        return f"{{ {storage} {region(state, mask, operands)} {combine} {region(state, mask, statement)} }}"
    calls = [expression_code(state, call) for call in outermost]
    names = [state.fresh("c") for _ in outermost]
    saved = state.replacing
    state.replacing = [*saved, *((state.src.start(c), state.src.end(c), n) for c, n in zip(outermost, names))]
    try:
        statement = code()
    finally:
        state.replacing = saved
    values = " ".join(f"auto {name} = {call};" for name, call in zip(names, calls))
    return collective_call(state, mask, ", ".join(f"(void)({call})" for call in calls), f"{values} {statement}",
                            combines_reached(state, outermost))


def collective_call(state: GroupState, mask: str, call: str, code: str, reaches: int) -> str:
    call, code = with_declared_types(state, call), with_declared_types(state, code)
    opening, closing = preamble(state, mask, call)
    statement_opening, statement_closing = preamble(state, mask, code)
    return (f"shimkit_g.collective<{reaches}>({mask}, [&](unsigned shimkit_t) -> bool {{ {opening} (void)({call}); "
            f"{closing} return true; }}, "
            f"[&](unsigned shimkit_t) -> bool {{ {statement_opening} {code} {statement_closing} return true; }});")


def outermost_calls(state: GroupState, cursor, splits: list) -> list:
    """The simdgroup calls of an expression that no other contains, left to right."""
    line = line_of(state, cursor)
    if any(state.reach.kind(c) in ("barrier", "inline") for c in splits):
        raise Unsplittable(f"line {line}: a barrier inside an expression")
    outermost = sorted((c for c in splits if not any(c is not o and inside(c, o) for o in splits)),
                       key=lambda c: c.extent.start.offset)
    for call in outermost:
        if any(t.spelling in ASSIGNMENTS for t in call.get_tokens()):
            raise Unsplittable(f"line {line}: a simdgroup function call whose operands assign")
    return outermost


def direct_combine(state: GroupState, mask: str, outermost: list,
                   code: Callable[[], str]) -> tuple[str, str, str, str] | None:
    """One call of sync.h's simdgroup functions whose operands reach none: the operands are evaluated
    into per-thread arrays, each simdgroup combines them (``metal::lanes``, the combine the fibers
    use), and the statement reads the result, instead of evaluating the call through lane records
    twice. Returns the arrays' declarations, the operands' per-thread assignments, the combine and the
    statement; None where that does not apply (the statement then splits as a collective)."""
    if len(outermost) != 1:
        return None
    call = outermost[0]
    declared = call.referenced
    name = callee_name(call)
    if (name not in DIRECT or declared is None or declared.location.file is None
            or not declared.location.file.name.endswith("sync.h")):
        return None
    parameters, arguments = parameters_of(declared), list(call.get_arguments())
    if len(parameters) != len(arguments) or any(state.split_points(argument) for argument in arguments):
        return None
    types = [nameable(parameter.type) for parameter in parameters] + [nameable(declared.result_type)]
    if any(t is None for t in types):
        return None
    operands, evaluate, storage = [], [], []
    for argument, parameter, type_ in zip(arguments, parameters, types):
        # An operand that is a per-thread variable of the parameter's type is combined from its array.
        element = variable_element(state, argument, parameter.type.get_canonical(), arguments)
        if element is not None and element.endswith("[shimkit_t]"):
            operands.append(element[:-len("[shimkit_t]")])
            continue
        operands.append(state.fresh("o"))
        evaluate.append(f"{operands[-1]}[shimkit_t] = ({expression_code(state, argument)});")
        storage.append(declare_storage(state, f"std::remove_cv_t<{type_}> {operands[-1]}[{MAX_THREADS}];"))
    result = state.fresh("c")
    storage.append(declare_storage(state, f"std::remove_cv_t<{types[-1]}> {result}[{MAX_THREADS}];"))
    saved = state.replacing
    state.replacing = [*saved, (state.src.start(call), state.src.end(call), f"{result}[shimkit_t]")]
    try:
        statement = code()
    finally:
        state.replacing = saved
    pointers = ", ".join(f"{n} + shimkit_first" for n in [result, *operands])
    combine = (f"shimkit_g.lanes({mask}, [&](const bool* shimkit_on, unsigned shimkit_first) {{ "
               f"::metal::lanes::{name}(shimkit_on, {pointers}); }});")
    return " ".join(a for a in storage if a), " ".join(evaluate), combine, statement


def nameable(type_) -> str | None:
    """A callee's parameter or result type as C++ that names it where the call is (its canonical form),
    or None where it depends on the callee's template parameters."""
    spelled = type_.get_canonical().spelling
    if any(word in spelled for word in ("type-parameter", *UNNAMEABLE)):
        return None
    return spelled


def combines_reached(state: GroupState, calls: list) -> int:
    """At most how many combines evaluating ``calls`` reaches, when each call in them is one of
    shimkit's simdgroup functions; 0 when that is not known (a function of the source)."""
    count = 0
    for call in calls:
        for node in [call, *cursors.walk(call)]:
            if node.kind.name != "CALL_EXPR" or state.reach.kind(node) != "collective":
                continue
            declared = node.referenced
            if declared is None or declared.location.file is None or not declared.location.file.name.endswith(
                    "sync.h"):
                return 0
            count += 2 if callee_name(node) in TWO_COMBINES else 1
    return count


def leave_before_group_step(state: GroupState, mask: str, pending: list[str]) -> None:
    """A thread that returns from an inlined function in the region before a combine or a group step
    takes no part in it (the next region's test would take it out of the mask only after it)."""
    leaving = [re.sub(r"(shimkit_x\d+\[shimkit_t\] = true; )return true;", rf"\1{mask}[shimkit_t] = false; return true;",
                      entry) for entry in pending]
    if leaving != pending:
        state.cleared.add(mask)
        pending[:] = [Carried(new) if isinstance(old, Carried) else new for old, new in zip(pending, leaving)]


def split_directly(state: GroupState, statement, splits: list, mask: str, out: list[str], pending: list[str],
                    flush: Flush, code: Callable[[], str],
                    evaluated_to: Callable[[str], None] | None = None) -> bool:
    """A statement split at a direct simdgroup call (``direct_combine``) shares its regions: its operands are
    evaluated with the statements before it, and it runs with those after (no thread waits for
    another between two split points). ``evaluated_to`` takes the statement's code after the combine
    instead of the next region."""
    direct = direct_combine(state, mask, outermost_calls(state, statement, splits), code)
    if direct is None:
        return False
    storage, operands, combine, evaluated = direct
    if storage:
        state.declared.append(storage)
    leave_before_group_step(state, mask, pending)
    pending.append(operands)
    flush()
    out.append(combine)
    (evaluated_to or pending.append)(evaluated)
    return True

"""Names in a region: a region's code reaches the kernel's variables through references to their per-thread
elements or group values (one nested scope per block), its thread coordinates through values computed from
the thread's index, and an inlined function's early return through its flag."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Callable

import shimkit.metal.cursors as cursors
from shimkit.metal.loops.state import GroupState, Recomputed

if TYPE_CHECKING:
    from clang import cindex


def preamble(state: GroupState, mask: str, code: str) -> tuple[str, str]:
    """Each region's opening: the thread's coordinates that ``code`` names (the others would cost a
    division per thread for a group that is not flat), its per-thread variables by their names, and
    (in an inlined function) leaving the region when the thread has returned from it."""
    # A recomputed variable's value names thread coordinates of its own.
    named = " ".join([code, *(s.value for scope in state.scopes for _, s in scope if isinstance(s, Recomputed))])
    opening = " ".join([*state.aliases, *(d for name, d in state.thread_values if re.search(rf"\b{name}\b", named))])
    for _, returned in state.inlined:
        if returned in state.may_return:
            opening += f" if ({returned}[shimkit_t]) {{ {mask}[shimkit_t] = false; return true; }}"
            state.tested.add(returned)
            state.cleared.add(mask)
    # The returns in this region's code take effect for the regions written after it (a thread that
    # returns leaves this one there and then); regions run in the order they are written but for a
    # loop's, which write_inlined sees to.
    state.may_return.update(returned for _, returned in state.inlined if f"{returned}[shimkit_t] = true" in code)
    bindings, closing = scope_bindings(state, lambda name, storage: True)
    return opening + bindings, closing


def scope_bindings(state: GroupState, keep: Callable[[str, str | Recomputed], bool]) -> tuple[str, str]:
    """The variables in scope that ``keep(name, storage)`` selects, bound by their names: one nested
    ``{ auto& name = storage; ... }`` per scope (a recomputed variable: its value), innermost last (an
    inner name hides an outer one), and the braces that close them."""
    opening = closing = ""
    for scope in state.scopes:
        kept = [(name, storage) for name, storage in scope if keep(name, storage)]
        if kept:
            opening += " { " + " ".join(storage.binding(name) if isinstance(storage, Recomputed)
                                        else f"auto& {name} = {storage};" for name, storage in kept)
            closing += " }"
    return opening, closing


def with_declared_types(state: GroupState, code: str) -> str:
    """``decltype(x)`` of a per-thread variable names its declared type, not the reference the region
    binds to it (Inductor writes ``static_cast<decltype(tmp3)>(...)``)."""
    names = {name for scope in state.scopes for name, _ in scope}
    if not names or "decltype" not in code:
        return code
    return re.sub(r"\bdecltype\s*\(\s*([A-Za-z_]\w*)\s*\)",
                  lambda m: f"std::remove_reference_t<decltype({m.group(1)})>" if m.group(1) in names
                  else m.group(0), code)


def group_bindings(state: GroupState, code: str) -> tuple[str, str]:
    """What group-level code that reads uniform values opens and closes with: the uniform thread
    parameters it names and the variables in scope that are one value for the group (uniformity)."""
    opening = " ".join([*state.aliases, *(d for name, d in state.thread_values
                                          if name in state.group_values and re.search(rf"\b{name}\b", code))])
    bindings, closing = scope_bindings(state,
        lambda name, storage: not isinstance(storage, Recomputed) and "shimkit_t" not in storage
        and re.search(rf"\b{name}\b", code) is not None)
    return opening + bindings, closing


def named_variable(state: GroupState, argument) -> tuple[str, str | Recomputed | None, cindex.Type] | None:
    """``(name, its binding in the innermost scope that has one or None, its canonical type)`` where
    ``argument`` names a variable alone, else None."""
    reference = cursors.unwrapped(argument)
    if cursors.kind(reference) != "DECL_REF_EXPR" or reference.referenced is None:
        return None
    name = reference.spelling
    element = next((e for scope in reversed(state.scopes) for n, e in reversed(scope) if n == name), None)
    return name, element, reference.referenced.type.get_canonical()


def variable_element(state: GroupState, argument, declared_type, arguments: list) -> str | None:
    """The element a per-thread variable of the caller names, where ``argument`` is that variable alone,
    of the parameter's type and no other argument names it (which could change it through a pointer)."""
    named = named_variable(state, argument)
    if named is None:
        return None
    name, element, variable_type = named
    if (element is None or isinstance(element, Recomputed) or declared_type.is_const_qualified()
            or variable_type.is_const_qualified()
            or variable_type.spelling != declared_type.spelling):
        return None
    if any(a is not argument and any(t.spelling == name for t in a.get_tokens()) for a in arguments):
        return None
    return element

"""Declarations in a block with a split point: a variable becomes a per-thread array (or one value, where
uniformity finds every thread holds it alike) declared at the top of the group function, its initialiser an
assignment in its region; group-level declarations (threadgroup memory, ``constexpr``, types) stay once."""

from __future__ import annotations

import shimkit.metal.cursors as cursors
from shimkit.metal.loops.collectives import UNNAMEABLE
from shimkit.metal.loops.regions import declare_storage
from shimkit.metal.loops.returns import statement_code
from shimkit.metal.loops.state import MAX_THREADS, GroupState, Recomputed, Unsplittable
from shimkit.metal.loops.text import line_of, source_text


def declaration_code(state: GroupState, statement, uniform: list[tuple[str, str]] | None = None) -> str | None:
    """Group-level declarations (threadgroup memory, ``constexpr``, types) stay once, where they are;
    a variable becomes a per-thread array declared there, and its initialisation the returned
    assignment. A uniform variable (uniformity) is one value, and its (name, assignment) goes to
    ``uniform``, to run at group level (without ``uniform``, each thread assigns the one value)."""
    children = list(statement.get_children())
    tokens = [t.spelling for t in statement.get_tokens()]
    if any(c.kind.name != "VAR_DECL" for c in children) or "constexpr" in tokens or (
            children and all(c.storage_class is not None and c.storage_class.name == "STATIC"
                             for c in children)):
        if state.split_points(statement):
            raise Unsplittable(f"line {line_of(state, statement)}: a static declaration with a barrier")
        state.declared.append(statement_code(state, statement))
        state.hoisted += [c.spelling for c in children]
        for variable in children:
            if variable.kind.name == "VAR_DECL" and variable.tls_kind.name != "NONE":
                through_opaque_reference(state, variable)
        return None
    assignments = []
    for variable in children:
        # Canonical types are fully qualified: an inlined body's types are written in the callee's
        # namespace, and an `auto` deduces sugar such as c10's opmath_t<float>. A template kernel's own
        # types stay as written (their canonical form names no template parameter).
        canonical = variable.type.get_canonical().spelling
        spelled = variable.type.spelling if "type-parameter" in canonical else canonical
        line = line_of(state, variable)
        if any(word in spelled for word in UNNAMEABLE):
            raise Unsplittable(f"line {line}: variable {variable.spelling} of type {spelled} is live across a "
                               f"split and its type cannot be named")
        if cursors.kind(variable.type) in ("LVALUEREFERENCE", "RVALUEREFERENCE"):
            raise Unsplittable(f"line {line}: reference {variable.spelling} in a block with a barrier")
        one = variable.hash in state.uniformity.variables
        initializer = [c for c in variable.get_children() if c.kind.name not in ("TYPE_REF", "TEMPLATE_REF",
                                                                                 "NAMESPACE_REF")]
        variable_tokens = list(variable.get_tokens())
        # An array's size is a child too, so its initialiser shows only in its tokens (`= {...}`, `{...}`).
        if cursors.kind(variable.type).endswith("ARRAY") and {"=", "{"} & {t.spelling for t in variable_tokens}:
            raise Unsplittable(f"line {line}: array {variable.spelling} initialised in a block with a barrier")
        equals = next((i for i, t in enumerate(variable_tokens)
                       if t.spelling == "=" and i > 0 and variable_tokens[i - 1].spelling == variable.spelling),
                      None)
        if equals is None:
            if initializer and not cursors.kind(variable.type).endswith("ARRAY"):
                raise Unsplittable(f"line {line}: {variable.spelling} is initialised directly, not with =")
            declare(state, variable, spelled, one)
            continue
        start = state.src.start(variable_tokens[equals + 1])
        end = state.src.end(variable)
        value = " ".join(line for line in source_text(state, start, end).split("\n") if not line.lstrip().startswith("#"))
        if variable.hash in state.uniformity.recomputable:
            state.scopes[-1].append((variable.spelling, Recomputed(spelled, value)))
            continue
        declare(state, variable, spelled, one)
        if one and uniform is not None:
            uniform.append((variable.spelling, f"{variable.spelling} = {value};"))
        else:
            assignments.append(f"{variable.spelling} = {value};")
    return " ".join(assignments)


def declare(state: GroupState, variable, spelled: str, one: bool) -> None:
    """A variable's storage at the top of the group function: one value (uniform) or an array over the
    group's threads, and its name in the current scope."""
    storage = state.fresh("v")
    if one:
        state.declared.append(declare_storage(state, f"std::remove_cv_t<{spelled}> {storage};"))
        state.scopes[-1].append((variable.spelling, storage))
    else:
        state.declared.append(declare_storage(state, f"std::remove_cv_t<{spelled}> {storage}[{MAX_THREADS}];"))
        state.scopes[-1].append((variable.spelling, f"{storage}[shimkit_t]"))


def through_opaque_reference(state: GroupState, variable) -> None:
    """Threadgroup memory (the front end's ``static thread_local``) is named in the regions through a
    reference bound once per group to its address, which the optimiser cannot see through: GCC
    otherwise recomputed a thread_local's address at its uses inside the regions' loops, a
    ``__tls_get_addr`` call each in a ``-fPIC`` library (Inductor's row max: 2.45 -> 2.08 ms per 1M
    threads)."""
    reference = state.fresh("g")
    state.declared.append(f"auto& {reference} = *::shimkit_metal::opaque(&{variable.spelling});")
    state.hoisted.append(reference)  # declared where the variable is: what names it stays after it
    for node in cursors.walk(state.body_cursor):
        if cursors.kind(node) == "DECL_REF_EXPR" and node.referenced == variable:
            state.edits.append((state.src.start(node), state.src.end(node), reference))

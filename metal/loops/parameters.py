"""The kernel's parameters in its group function: buffers pass through (a per-thread copy where the
kernel assigns one), thread parameters become values computed from the thread's index, and those that are
one value for the group seed the uniformity analysis."""

from __future__ import annotations

import re

import shimkit.metal.cursors as cursors
from shimkit.metal.loops.reach import Reach
from shimkit.metal.loops.source import Source, body_of, parameters_of
from shimkit.metal.loops.state import MAX_THREADS, GroupState, Recomputed, Unsplittable
from shimkit.metal.loops.uniformity import Uniformity

ASSIGNMENTS = {"=", "+=", "-=", "*=", "/=", "%=", "&=", "|=", "^=", "<<=", ">>=", "++", "--"}
# libclang's kinds of the scalar types a thread position can be declared as (uint, ushort, int, ...).
INTEGER_KINDS = {"UINT", "USHORT", "ULONG", "ULONGLONG", "INT", "SHORT", "LONG", "LONGLONG", "UCHAR", "SCHAR",
                 "CHAR_U", "CHAR_S"}
THREAD_INDEX = {"index_in_group": "shimkit_t", "lane": "shimkit_t % ::shimkit_metal::kSimdWidth",
                "simd_index": "shimkit_t / ::shimkit_metal::kSimdWidth",
                "simds_per_group": "shimkit_p.base.simds_per_group"}


def start_group(source: Source, kernel, parameters: list, reach: Reach) -> GroupState:
    """The state a kernel's group function starts from; ``parameters`` are the front end's
    (``frontend.Parameter``), in the kernel's order."""
    arguments = parameters_of(kernel)
    if len(arguments) != len(parameters):
        raise Unsplittable("libclang and the front end read different parameter lists")
    state = GroupState(source, kernel, reach, body_of(kernel))
    modified = assigned_parameters(arguments, state.body_cursor)
    outer: list[tuple[str, str | Recomputed]] = []
    for argument, parameter in zip(arguments, parameters):
        name, spelled = argument.spelling, argument.type.spelling
        if parameter.kind == "buffer":
            # As the front end wrote it into the translation: `constant` is `const` (frontend.translate).
            state.buffers.append(re.sub(r"\bconstant\s+const\b|\bconst\s+constant\b", "constant", parameter.text))
            if name in modified:
                storage = state.fresh("p")
                state.storage.append(f"std::remove_cv_t<{spelled}> {storage}[{MAX_THREADS}]; "
                                    f"for (unsigned t = 0; t < shimkit_count; ++t) {storage}[t] = {name};")
                outer.append((name, f"{storage}[shimkit_t]"))
            elif cursors.kind(argument.type) == "POINTER" or argument.type.get_pointee().is_const_qualified():
                state.group_values.add(name)  # the pointer, or a `constant` value
            continue
        if name in modified:
            raise Unsplittable(f"it assigns its thread parameter {name}")
        if parameter.kind == "constant" or (parameter.kind == "index" and parameter.binding == "simds_per_group") \
                or (parameter.kind == "position" and parameter.binding not in ("grid", "in_group")):
            state.group_values.add(name)
        if parameter.kind == "position":
            where = (f"shimkit_p.{parameter.binding}<shimkit_along_x>(shimkit_t).v" if parameter.binding in ("grid", "in_group")
                     else f"shimkit_p.base.{parameter.binding}")
            value = f"::shimkit_metal::from_position<{spelled}>({where})"
        elif parameter.kind == "index":
            value = f"::shimkit_metal::from_index<{spelled}>({THREAD_INDEX[parameter.binding]})"
        else:
            value = f"::shimkit_metal::from_index<{spelled}>({parameter.binding})"
        state.thread_values.append((name, f"auto {name} = {value};"))
    positions = [argument for argument, parameter in zip(arguments, parameters)
                 if parameter.kind == "position" and parameter.binding in ("grid", "in_group")]
    state.scalar_positions = bool(positions) and all(
        cursors.kind(argument.type.get_canonical()) in INTEGER_KINDS for argument in positions)
    state.scopes = [outer]
    state.uniformity = Uniformity(
        state.body_cursor, lambda statement: bool(state.split_points(statement)),
        lambda declared: cursors.kind(declared) == "PARM_DECL" and declared.semantic_parent == kernel
        and declared.spelling in state.group_values,
        lambda declared: cursors.kind(declared) == "PARM_DECL" and declared.semantic_parent == kernel
        and any(declared.spelling == name for name, _ in state.thread_values))
    return state


def assigned_parameters(parameters: list, body) -> set[str]:
    """The parameters the body may assign: ``p = ...``, ``p += ...``, ``++p``, ``p.x = ...``,
    ``p[0] = ...`` (for a value, not a pointer), or whose address it takes."""
    kinds = {p.spelling: cursors.kind(p.type) for p in parameters}
    tokens = [t.spelling for t in body.get_tokens()]
    modified = set()
    for i, token in enumerate(tokens):
        if token not in kinds or (i > 0 and tokens[i - 1] in (".", "->", "::")):
            continue
        after = tokens[i + 1] if i + 1 < len(tokens) else ""
        before = tokens[i - 1] if i > 0 else ""
        if after == "." and i + 3 < len(tokens):
            after = tokens[i + 3]  # p.x = ...
        elif after == "[" and kinds[token] not in ("POINTER", "LVALUEREFERENCE", "RVALUEREFERENCE"):
            depth, j = 0, i + 1
            while j < len(tokens):
                depth += {"[": 1, "]": -1}.get(tokens[j], 0)
                if depth == 0:
                    break
                j += 1
            after = tokens[j + 1] if j + 1 < len(tokens) else ""
        unary_address = before == "&" and i > 1 and not re.match(r"^\w+$|^[)\]]$", tokens[i - 2])
        if after in ASSIGNMENTS or before in ("++", "--") or unary_address:
            modified.add(token)
    return modified

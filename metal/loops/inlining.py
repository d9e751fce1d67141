"""Inlining: a call to a function of the source that reaches a barrier (c10's ``threadgroup_sum``), or a
whole statement's call to one that reaches only simdgroup functions, is written in place at group level,
its body split like the kernel's, its parameters bound to the caller's elements or to group values."""

from __future__ import annotations

import re

import shimkit.metal.cursors as cursors
from shimkit.metal.loops.bindings import variable_element
from shimkit.metal.loops.fragments import ending
from shimkit.metal.loops.parameters import assigned_parameters
from shimkit.metal.loops.regions import carry, declare_storage
from shimkit.metal.loops.returns import returns_in_loop
from shimkit.metal.loops.source import body_of, callee_name, inside, parameters_of, qualified_name
from shimkit.metal.loops.state import MAX_THREADS, BlockWriter, Flush, GroupState, Unsplittable
from shimkit.metal.loops.text import expression_code, line_of
from shimkit.metal.loops.uniformity import Uniformity

MAX_INLINE_DEPTH = 8


def inlinable_collective(state: GroupState, statement, call, splits: list) -> bool:
    declared = call.referenced
    if (state.reach.kind(call) != "collective" or declared is None or declared.location.file is None
            or declared.location.file.name != "kernel.cpp" or cursors.kind(declared) == "CXX_METHOD"
            or len(state.inlined) >= MAX_INLINE_DEPTH):
        return False
    if any(c is not call and inside(call, c) for c in splits) or len(
            [c for c in splits if not any(c is not o and inside(c, o) for o in splits)]) != 1:
        return False
    if statement.kind.name not in ("DECL_STMT", "RETURN_STMT") and not (
            cursors.kind(statement).endswith("_EXPR") or cursors.kind(statement).endswith("_OPERATOR")):
        return False
    if any(cursors.kind(p.type) == "LVALUEREFERENCE" for p in parameters_of(declared)):
        return False
    return not any(cursors.kind(n) == "CONDITIONAL_OPERATOR" and inside(call, n) for n in cursors.walk(statement))


def call_to_inline(state: GroupState, statement, inline: list, splits: list):
    """The one call to inline in ``statement``: outermost, and evaluated unconditionally."""
    line = line_of(state, statement)
    if statement.kind.name not in ("DECL_STMT", "RETURN_STMT") and not (
            cursors.kind(statement).endswith("_EXPR") or cursors.kind(statement).endswith("_OPERATOR")):
        raise Unsplittable(f"line {line}: a call to {callee_name(inline[0])}, which reaches a barrier, inside "
                           f"{statement.kind.name.lower().replace('_stmt', '')}")
    outermost = [c for c in inline if not any(c is not o and inside(c, o) for o in splits)]
    if len(outermost) != 1 or len(inline) != 1:
        raise Unsplittable(f"line {line}: calls to functions with barriers nested or side by side")
    call = outermost[0]
    for node in [statement, *cursors.walk(statement)]:
        if cursors.kind(node) == "CONDITIONAL_OPERATOR" and inside(call, node):
            raise Unsplittable(f"line {line}: a call to {callee_name(call)}, which reaches a barrier, under ?:")
    return call


def write_inlined(state: GroupState, call, mask: str, out: list[str], pending: list[str], flush: Flush,
           write_block: BlockWriter) -> str | None:
    """Writes the body of the function ``call`` calls at group level; returns the per-thread array of
    its results (None for void). The body is the instantiation Clang made for this call, so its
    variables have their types; its names are qualified, as they are looked up where it is written.
    Its arguments are evaluated in one region with the caller's statements before the call."""
    name, line = callee_name(call), line_of(state, call)
    declared = call.referenced
    if len(state.inlined) >= MAX_INLINE_DEPTH:
        raise Unsplittable(f"line {line}: functions with barriers nested more than {MAX_INLINE_DEPTH} deep")
    definition = declared if declared is not None and body_of(declared) is not None else (
        declared.get_definition() if declared is not None else None)
    if definition is None or body_of(definition) is None:
        raise Unsplittable(f"line {line}: it calls {name}, which reaches a barrier and whose definition "
                           f"Clang cannot resolve here (a call in a template) to inline")
    if cursors.kind(definition) == "CXX_METHOD":
        raise Unsplittable(f"line {line}: it calls member function {name}, which reaches a barrier "
                           f"(member functions are not inlined)")
    parameters, arguments = parameters_of(definition), list(call.get_arguments())
    if len(parameters) != len(arguments):
        raise Unsplittable(f"line {line}: the call to {name} leaves default arguments out")
    from clang import cindex
    result_type = definition.result_type.get_canonical()
    result = None if cursors.kind(result_type) == "VOID" else state.fresh("r")
    returned, inner = state.fresh("x"), state.fresh("m")
    storage = [declare_storage(state, f"std::remove_cv_t<{result_type.spelling}> {result}[{MAX_THREADS}];") if result else ""]
    parts = ["{"]
    aliases: list[str] = []
    template_names: list[str] = []
    pattern = cindex.conf.lib.clang_getSpecializedCursorTemplate(definition)
    if pattern is not None and cursors.kind(pattern) == "FUNCTION_TEMPLATE":
        template_names = names = [c.spelling for c in pattern.get_children()
                 if cursors.kind(c) in ("TEMPLATE_TYPE_PARAMETER", "TEMPLATE_NON_TYPE_PARAMETER")]
        for index, parameter in enumerate(names):
            if not parameter:
                continue  # unnamed (`typename = enable_if_t<...>`): the body cannot refer to it
            try:
                kind = definition.get_template_argument_kind(index).name
            except ValueError:  # libclang has no name for the kind (a pack, a template template argument)
                kind = "unknown"
            if kind == "TYPE":
                aliases.append(f"using {parameter} = {definition.get_template_argument_type(index).get_canonical().spelling};")
            elif kind == "INTEGRAL":
                aliases.append(f"constexpr auto {parameter} = {definition.get_template_argument_value(index)};")
            else:
                raise Unsplittable(f"line {line}: {name} has a template argument of kind {kind.lower()}")
    bound: list[tuple[str, str]] = []
    assignments: list[str] = []
    shared: list[str] = []
    modified = assigned_parameters(parameters, body_of(definition))
    for parameter, argument in zip(parameters, arguments):
        kind = cursors.kind(parameter.type)
        declared_type = parameter.type.get_canonical()
        if kind == "LVALUEREFERENCE" and not declared_type.get_pointee().is_const_qualified():
            raise Unsplittable(f"line {line}: {name} takes {parameter.spelling} by reference")
        if kind in ("LVALUEREFERENCE", "RVALUEREFERENCE"):
            declared_type = declared_type.get_pointee()
        if state.split_points(argument):
            raise Unsplittable(f"line {line}: an argument of {name} has a barrier or simdgroup function")
        value = expression_code(state, argument)
        if parameter.spelling and parameter.spelling not in modified:
            # A parameter the body leaves alone names the caller's element where the argument is a
            # per-thread variable of its type, or one value for the group where it is a constant: no
            # per-thread copy.
            same = variable_element(state, argument, declared_type, arguments)
            if same is not None:
                bound.append((parameter.spelling, same))
                continue
            group_value = group_parameter(state, argument)
            if group_value is not None:
                value = group_value
            if group_value is not None or uniform_argument(state, argument):
                constant = state.fresh("u")
                declaration = f"const std::remove_cv_t<{declared_type.spelling}> {constant} = ({value});"
                if set(state.hoisted) & set(re.findall(r"[A-Za-z_]\w*", value)):
                    shared.append(declaration)  # names a constant the body declares: where it is
                else:
                    state.top.append(declaration)  # one value for the whole group function
                bound.append((parameter.spelling, constant))
                continue
        array = state.fresh("a")
        storage.append(declare_storage(state, f"std::remove_cv_t<{declared_type.spelling}> {array}[{MAX_THREADS}];"))
        assignments.append(f"{array}[shimkit_t] = ({value});")
        if parameter.spelling:
            bound.append((parameter.spelling, f"{array}[shimkit_t]"))
    if any(storage):
        out.append(" ".join(a for a in storage if a))
    pending.append(" ".join(assignments))
    # The caller's statements before the call (and its arguments) run in the body's first region,
    # unless a name the body's block declares would hide one of theirs.
    top = {c.spelling for statement in body_of(definition).get_children() if cursors.kind(statement) == "DECL_STMT"
           for c in statement.get_children()}
    carried = carry(state, mask, pending, top | set(template_names))
    if carried is None:
        flush()
    parts += shared  # constants: the same before and after the caller's statements
    flags_at = len(parts)
    qualify(state, body_of(definition))
    if pattern is not None and cursors.kind(pattern) == "FUNCTION_TEMPLATE" and body_of(pattern) is not None:
        qualify(state, body_of(pattern))  # the instantiation leaves out some type sugar (opmath_t<T>)
    saved_scopes, saved_depth, saved_uniformity = state.scopes, state.loop_depth, state.uniformity
    state.scopes, state.loop_depth = [[], [*bound]], 0  # the callee sees its parameters, not the caller's names
    group_parameters = {name for name, element in bound if "shimkit_t" not in element}
    state.uniformity = Uniformity(
        body_of(definition), lambda statement: bool(state.split_points(statement)),
        lambda declared: cursors.kind(declared) == "PARM_DECL" and declared.semantic_parent == definition
        and declared.spelling in group_parameters)
    state.inlined.append((result, returned))
    saved_aliases, state.aliases = state.aliases, aliases
    if returns_in_loop(body_of(definition)):
        state.may_return.add(returned)  # the loop's next iteration runs after the return
    try:
        body = write_block(state, list(body_of(definition).get_children()), inner, carried)
    finally:
        state.scopes, state.loop_depth, state.uniformity = saved_scopes, saved_depth, saved_uniformity
        state.inlined.pop()
        state.aliases = saved_aliases
    # The flag and the mask exist only where a region tests or clears them: a thread's return from a
    # function that returns last (c10's threadgroup_* helpers) leaves it by leaving its last region.
    flags = ""
    if returned in state.tested:
        state.top.append(f"bool {returned}[{MAX_THREADS}];")
        flags = f"std::memset({returned}, 0, shimkit_count);"
    else:
        body = body.map(lambda text: text.replace(f"{returned}[shimkit_t] = true; ", ""))
    if inner in state.cleared:
        state.parents[inner] = mask
        state.top.append(f"bool {inner}[{MAX_THREADS}];")
        flags += f" std::memcpy({inner}, {mask}, shimkit_count);"
    else:
        body = body.map(lambda text: re.sub(rf"\b{inner}\b", mask, text))
    parts[flags_at:flags_at] = [flags, body, "}"]
    out.append(ending(" ".join(p for p in parts if p), body, body.hidden | set(template_names), body))
    return result


def uniform_argument(state: GroupState, argument) -> bool:
    """Whether an argument has one value for the whole group all through the call: a literal, or a
    constant, an array (its address) or a buffer parameter of the kernel, none of them per thread."""
    expression = cursors.unwrapped(argument)
    kind = cursors.kind(expression)
    if kind in ("INTEGER_LITERAL", "FLOATING_LITERAL", "CXX_BOOL_LITERAL_EXPR"):
        return True
    declared = expression.referenced if kind == "DECL_REF_EXPR" else None
    if declared is None:
        return False
    name = expression.spelling
    if any(n == name for scope in state.scopes for n, _ in scope) or any(n == name for n, _ in state.thread_values):
        return False
    if cursors.kind(declared) == "ENUM_CONSTANT_DECL":
        return True
    if cursors.kind(declared) == "PARM_DECL":
        return declared.semantic_parent == state.kernel  # a buffer (per-thread copies are in scopes)
    return cursors.kind(declared) == "VAR_DECL" and (declared.type.is_const_qualified()
                                             or cursors.kind(declared.type) == "CONSTANTARRAY")


def group_parameter(state: GroupState, argument) -> str | None:
    """The value of a kernel parameter that is one per group (``threads_per_threadgroup``, ...), where
    ``argument`` names one alone: an inlined function's parameter bound to it is one value."""
    expression = cursors.unwrapped(argument)
    declared = expression.referenced if cursors.kind(expression) == "DECL_REF_EXPR" else None
    if declared is None or cursors.kind(declared) != "PARM_DECL" or declared.semantic_parent != state.kernel:
        return None
    if any(n == expression.spelling for scope in state.scopes for n, _ in scope):
        return None  # a per-thread copy of a buffer the kernel assigns
    return next((d.split(" = ", 1)[1].rstrip(";") for name, d in state.thread_values
                 if name == expression.spelling and name in state.group_values), None)


def qualify(state: GroupState, body) -> None:
    """Names the body finds in its namespaces, written ``::ns::name`` so that they mean the same
    where the body is inlined."""
    tokens = list(body.get_tokens())
    previous = {token.extent.start.offset: tokens[i - 1].spelling if i else "" for i, token in enumerate(tokens)}
    for node in cursors.walk(body):
        if node.kind.name not in ("DECL_REF_EXPR", "TEMPLATE_REF", "TYPE_REF", "OVERLOADED_DECL_REF", "NAMESPACE_REF"):
            continue
        target = node.referenced
        if target is None or target.semantic_parent is None or target.semantic_parent.kind.name != "NAMESPACE":
            continue
        first = next(node.get_tokens(), None)
        if first is None or first.spelling != target.spelling:
            continue
        if previous.get(first.extent.start.offset, "") in ("::", ".", "->"):
            continue
        edit = (state.src.start(first), state.src.end(first), "::" + qualified_name(target))
        if edit not in state.edits:
            state.edits.append(edit)

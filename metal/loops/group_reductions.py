"""Work-group reductions: a call of c10's two-stage threadgroup reductions (``threadgroup_sum``, ``_prod``,
``_max``, ``_min``, ``_argmax``, ``_argmin`` in torch's ``c10/metal/reduction_utils.h``, which every
Inductor reduction calls) runs as one group-level step, ``LoopGroup::threadgroup_reduce`` or
``threadgroup_arg_reduce`` in ``shimkit_metal/loops.h``, as POCL runs OpenCL's ``work_group_reduce_*``. The
helper inlined is five loops over the group and two combines; the step takes the same combines over the
same lanes, and where every thread runs and ``idx`` is the thread's index it touches only the threads that
act in each stage. A helper whose body is not the one this was written against (another torch), or whose
operands do not fit, is inlined as before."""

from __future__ import annotations

import hashlib

from shimkit.metal.loops.bindings import group_bindings, named_variable, with_declared_types
from shimkit.metal.loops.collectives import leave_before_group_step
from shimkit.metal.loops.inlining import group_parameter, uniform_argument
from shimkit.metal.loops.regions import declare_storage
from shimkit.metal.loops.source import body_of, parameters_of, qualified_name
from shimkit.metal.loops.state import MAX_THREADS, Flush, GroupState
from shimkit.metal.loops.text import expression_code

# Each helper: (LoopGroup's step, its combine in sync.h's c10_lanes, the digest of its template's body
# tokens in torch 2.13's header, its parameters' roles: memory and size are one value for the group,
# `value` / `index_value` per thread of the template's first / second type, `position` the thread's idx).
VALUE = ("memory", "value", "position", "size")
ARG = ("memory", "memory", "value", "index_value", "position", "size")
HELPERS = {
    "c10::metal::threadgroup_sum": ("threadgroup_reduce", "Sum", "97973a6d", VALUE),
    "c10::metal::threadgroup_prod": ("threadgroup_reduce", "Product", "5a80fe68", VALUE),
    "c10::metal::threadgroup_max": ("threadgroup_reduce", "Max", "67d41a11", VALUE),
    "c10::metal::threadgroup_min": ("threadgroup_reduce", "Min", "21743005", VALUE),
    "c10::metal::threadgroup_argmax": ("threadgroup_arg_reduce", "ArgMax", "f1d5e606", ARG),
    "c10::metal::threadgroup_argmin": ("threadgroup_arg_reduce", "ArgMin", "7d6dc300", ARG),
}
# The template's types whose combines c10_lanes reproduces: c10's simd_sum / simd_max of long are its own
# shuffles, and half and bfloat go through their own simd types. The index of an arg helper is only
# broadcast, so any integer.
VALUES = {"float"}
INDICES = {"long", "int", "unsigned int", "long long", "unsigned long"}


def body_digest(definition) -> str | None:
    """The digest of the body of the template ``definition`` instantiates (its tokens, spaced)."""
    from clang import cindex

    pattern = cindex.conf.lib.clang_getSpecializedCursorTemplate(definition)
    body = body_of(pattern) if pattern is not None else None
    if body is None:
        return None
    return hashlib.sha256(" ".join(t.spelling for t in body.get_tokens()).encode()).hexdigest()[:8]


def thread_array(state: GroupState, argument, type_: str) -> str | None:
    """The per-thread array of a variable of ``type_`` (``const`` or not: the step only reads it) that
    ``argument`` names alone, or None."""
    named = named_variable(state, argument)
    if named is None:
        return None
    _, element, variable_type = named
    if (not isinstance(element, str) or not element.endswith("[shimkit_t]")
            or variable_type.spelling.removeprefix("const ") != type_):
        return None
    return element[:-len("[shimkit_t]")]


def write_group_reduction(state: GroupState, call, mask: str, out: list[str], pending: list[str],
                          flush: Flush) -> str | None:
    """Writes ``call`` as one group-level step where it is one of c10's helpers this knows; returns the
    per-thread array of its results, or None (then it is inlined)."""
    declared = call.referenced
    if declared is None or body_of(declared) is None:
        return None
    helper = HELPERS.get(qualified_name(declared))
    if helper is None or body_digest(declared) != helper[2]:
        return None
    step, combine, _, roles = helper
    try:
        types = {"value": declared.get_template_argument_type(0).get_canonical().spelling, "position": "unsigned int"}
        if "index_value" in roles:
            types["index_value"] = declared.get_template_argument_type(1).get_canonical().spelling
    except ValueError:
        return None
    parameters, arguments = parameters_of(declared), list(call.get_arguments())
    if (types["value"] not in VALUES or types.get("index_value", "long") not in INDICES
            or len(parameters) != len(roles) or len(arguments) != len(roles)
            or any(state.split_points(argument) for argument in arguments)):
        return None
    group: dict[int, str] = {}  # checked before anything is written
    for position, (argument, role) in enumerate(zip(arguments, roles)):
        if role in ("memory", "size"):
            known = group_parameter(state, argument)
            if known is None and not uniform_argument(state, argument):
                return None
            group[position] = f"({known if known is not None else expression_code(state, argument)})"
    storage, assignments, passed = [], [], []
    for position, (argument, role) in enumerate(zip(arguments, roles)):
        if position in group:
            passed.append(group[position])
            continue
        same = thread_array(state, argument, types[role])
        if same is not None:
            passed.append(same)
            continue
        array = state.fresh("o")
        storage.append(declare_storage(state, f"{types[role]} {array}[{MAX_THREADS}];"))
        assignments.append(f"{array}[shimkit_t] = static_cast<{types[role]}>({expression_code(state, argument)});")
        passed.append(array)
    result = state.fresh("r")
    result_type = types["index_value" if "index_value" in roles else "value"]
    storage.append(declare_storage(state, f"{result_type} {result}[{MAX_THREADS}];"))
    if any(storage):
        out.append(" ".join(s for s in storage if s))
    leave_before_group_step(state, mask, pending)
    pending.append(" ".join(assignments))
    flush()
    code = with_declared_types(state, f"shimkit_g.{step}({mask}, {result}, {', '.join(passed)}, "
                                      f"::shimkit_metal::c10_lanes::{combine}{{}});")
    opening, closing = group_bindings(state, code)
    out.append(f"{{ {opening} {code} {closing} }}")
    return result

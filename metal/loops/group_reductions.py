"""Work-group reductions: a call of c10's two-stage threadgroup reductions (``threadgroup_sum``, ``_prod``,
``_max``, ``_min`` in torch's ``c10/metal/reduction_utils.h``, which every Inductor reduction calls) runs
as one group-level step, ``LoopGroup::threadgroup_reduce`` in ``shimkit_metal/loops.h``, as POCL runs
OpenCL's ``work_group_reduce_*``. The helper inlined is five loops over the group and two combines; the
step takes the same combines over the same lanes, and where every thread runs and ``idx`` is the thread's
index it touches only the threads that act in each stage. A helper whose body is not the one this
was written against (another torch), or whose operands do not fit, is inlined as before."""

from __future__ import annotations

import hashlib

from shimkit.metal.loops.bindings import group_bindings, variable_element, with_declared_types
from shimkit.metal.loops.inlining import group_parameter, uniform_argument
from shimkit.metal.loops.regions import declare_storage
from shimkit.metal.loops.source import body_of, parameters_of, qualified_name
from shimkit.metal.loops.state import MAX_THREADS, Flush, GroupState
from shimkit.metal.loops.text import expression_code

# The helper -> (its combine in loops.h, the digest of its template's body tokens in torch 2.13's header).
HELPERS = {
    "c10::metal::threadgroup_sum": ("Sum", "97973a6d"),
    "c10::metal::threadgroup_prod": ("Product", "5a80fe68"),
    "c10::metal::threadgroup_max": ("Max", "67d41a11"),
    "c10::metal::threadgroup_min": ("Min", "21743005"),
}
# Element types whose combines loops.h's c10_lanes reproduces (c10's simd_sum / simd_max for long are
# its own shuffles, half and bfloat go through their own simd types).
TYPES = {"float"}


def body_digest(definition) -> str | None:
    """The digest of the body of the template ``definition`` instantiates (its tokens, spaced)."""
    from clang import cindex

    pattern = cindex.conf.lib.clang_getSpecializedCursorTemplate(definition)
    body = body_of(pattern) if pattern is not None else None
    if body is None:
        return None
    return hashlib.sha256(" ".join(t.spelling for t in body.get_tokens()).encode()).hexdigest()[:8]


def write_group_reduction(state: GroupState, call, mask: str, out: list[str], pending: list[str],
                          flush: Flush) -> str | None:
    """Writes ``call`` as one ``threadgroup_reduce`` step where it is one of c10's helpers this knows;
    returns the per-thread array of its results, or None (then it is inlined)."""
    declared = call.referenced
    if declared is None or body_of(declared) is None:
        return None
    helper = HELPERS.get(qualified_name(declared))
    if helper is None or body_digest(declared) != helper[1]:
        return None
    try:
        element = declared.get_template_argument_type(0).get_canonical().spelling
    except ValueError:
        return None
    parameters, arguments = parameters_of(declared), list(call.get_arguments())
    if element not in TYPES or len(parameters) != 4 or len(arguments) != 4:
        return None
    data, value, index, size = arguments
    if any(state.split_points(argument) for argument in arguments):
        return None
    group = []
    for argument in (data, size):
        known = group_parameter(state, argument)
        if known is None and not uniform_argument(state, argument):
            return None
        group.append(known if known is not None else expression_code(state, argument))
    storage, assignments, operands = [], [], []
    for argument, type_ in ((value, element), (index, "unsigned int")):
        same = variable_element(state, argument, parameters[arguments.index(argument)].type.get_canonical(),
                                arguments)
        if same is not None and same.endswith("[shimkit_t]"):
            operands.append(same[:-len("[shimkit_t]")])
            continue
        array = state.fresh("o")
        storage.append(declare_storage(state, f"{type_} {array}[{MAX_THREADS}];"))
        assignments.append(f"{array}[shimkit_t] = static_cast<{type_}>({expression_code(state, argument)});")
        operands.append(array)
    result = state.fresh("r")
    storage.append(declare_storage(state, f"{element} {result}[{MAX_THREADS}];"))
    if any(storage):
        out.append(" ".join(s for s in storage if s))
    pending.append(" ".join(assignments))
    flush()
    step = with_declared_types(
        state, f"shimkit_g.threadgroup_reduce({mask}, {result}, ({group[0]}), {operands[0]}, {operands[1]}, "
               f"({group[1]}), ::shimkit_metal::c10_lanes::{helper[0]}{{}});")
    opening, closing = group_bindings(state, step)
    out.append(f"{{ {opening} {step} {closing} }}")
    return result

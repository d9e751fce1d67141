"""The work-group compiler's passes (metal/loops/) one at a time, on small C++ that libclang parses here,
and on MSL kernels translated by the front end and parsed with shimkit's metal_stdlib (the passes that
need sync.h's barriers and simdgroup functions): what tests/test_metal_loops.py checks only through whole
kernels."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import shimkit.metal.loops.cache as cache
from shimkit.csrc.build import compiler_command
from shimkit.metal.library import INCLUDE_DIR, _qualified, _translation
from shimkit.metal.loops import bindings, collectives, control_flow, early_return, inlining
from shimkit.metal.loops.declarations import declaration_code
from shimkit.metal.loops.fragments import Region, Text, ending
from shimkit.metal.loops.parameters import assigned_parameters, start_group
from shimkit.metal.loops.reach import Reach
from shimkit.metal.loops.regions import new_mask, within
from shimkit.metal.loops.returns import returns_in_loop, statement_code
from shimkit.metal.loops.source import Source, body_of, definitions, msl_line, parameters_of
from shimkit.metal.loops.state import GroupState, Unsplittable
from shimkit.metal.loops.writer import write_block, write_group_function
from shimkit.store import digest_of, tree_digest

cindex = pytest.importorskip("clang.cindex")


def parse(code: str):
    unit = cindex.Index.create().parse("kernel.cpp", args=["-x", "c++", "-std=c++20"],
                                       unsaved_files=[("kernel.cpp", code)])
    return definitions(unit.cursor)


def test_source_suffixes_floating_literals_for_clang_and_maps_offsets_back():
    source = Source(b"x = 2.0 + 1e3 + a1.5;")
    assert source.parsed == b"x = 2.0f + 1e3f + a1.5;"
    after_second = source.parsed.index(b"+ a1")
    assert source.original[source.offset(after_second):].startswith(b"+ a1")


def test_msl_line_counts_from_the_last_line_marker():
    text = b'int a;\n# 40 "kernel.metal"\nint b;\nint c;\n'
    assert msl_line(text, text.index(b"int c")) == 41
    assert msl_line(b"int a;\nint b;", 8) == 1


def test_a_region_knows_its_mask_and_text_knows_the_regions_at_its_ends():
    first, last = Region("m", "a();"), Region("m", "b();")
    text = ending("{ " + first + " x(); " + last + " }", last, {"hidden"}, first)
    assert isinstance(text, Text) and text.first is first and text.last is last and text.hidden == {"hidden"}
    rest = text.without_first()
    assert first not in rest and rest.last is last and rest.first is None
    assert text.map(lambda s: s.replace("m", "n")).last.mask == "n"


def test_reach_finds_split_points_through_dependent_calls_and_the_functions_that_reach_them():
    defined = parse("""
        template <class T> void wait(T flags) { threadgroup_barrier(flags); }
        template <class T> T vote(T x) { return simd_sum(x); }
        void plain(int x) { (void)x; }
        void kernel_body() { wait(1); vote(2); plain(3); }""")
    reach = Reach(defined)
    calls = {c.spelling: reach.kind(c) for c in body_of(defined["kernel_body"][0]).walk_preorder()
             if c.kind.name == "CALL_EXPR"}
    assert calls == {"wait": "inline", "vote": "collective", "plain": "plain"}
    assert reach.reaches("wait") == "reaches threadgroup_barrier"


def test_assigned_parameters_are_those_written_or_whose_address_is_taken():
    [function] = parse("""
        struct P { int x; };
        void f(int a, int b, P c, int* d, int e, int g) { a = 1; c.x = 2; d[0] = 3; int* h = &e; (void)h; ++g; (void)b; }
    """)["f"]
    assert assigned_parameters(parameters_of(function), body_of(function)) == {"a", "c", "e", "g"}


def test_returns_in_loop_sees_a_return_inside_a_loop_but_not_inside_a_lambda():
    defined = parse("""
        int early(int n) { for (int i = 0; i < n; ++i) { if (i == 3) return i; } return 0; }
        int last(int n) { for (int i = 0; i < n; ++i) { auto f = [] { return 1; }; (void)f; } return n; }""")
    assert returns_in_loop(body_of(defined["early"][0]))
    assert not returns_in_loop(body_of(defined["last"][0]))


def test_masks_are_fresh_names_declared_once_and_remember_the_mask_they_were_made_from():
    [function] = parse("void k() {}")["k"]
    state = GroupState(Source(b"void k() {}"), function, Reach({}), body_of(function))
    taken, fill = new_mask(state, "shimkit_g.alive", False)
    inner, copy = new_mask(state, taken, None)
    assert (taken, inner) == ("shimkit_m1", "shimkit_m2")
    assert fill == "std::memset(shimkit_m1, 0, shimkit_count);" and copy == "std::memcpy(shimkit_m2, shimkit_m1, shimkit_count);"
    assert within(state, inner, "shimkit_g.alive") and not within(state, taken, inner)
    assert state.top == ["bool shimkit_m1[::shimkit_metal::kMaxGroupThreads];",
                         "bool shimkit_m2[::shimkit_metal::kMaxGroupThreads];"]


def test_the_split_cache_key_covers_every_module_of_shimkit_metal():
    """cursors.py and the passes alike decide what the splitter writes: the key is over shimkit.metal's
    modules, not the package's own."""
    metal = Path(cache.__file__).parents[1]
    include = metal / "include"
    headers = tree_digest(include / "shimkit_metal", ("*.h",))
    assert cache.headers_digest(include) == digest_of([headers, tree_digest(metal, ("*.py",))])
    assert cache.headers_digest(include) != digest_of([headers, tree_digest(metal / "loops", ("*.py",))])


# One program for the passes below: translated once, parsed once with metal_stdlib (about a second), each
# test starting a kernel's GroupState afresh and reading its statements by index.
MSL = """#include <metal_stdlib>
using namespace metal;
namespace helpers {
constant uint kScale = 3;
float group_total(threadgroup float* shared, float v, uint t, uint n) {
  shared[t] = v * float(kScale);
  threadgroup_barrier(mem_flags::mem_threadgroup);
  float total = 0; for (uint k = 0; k < n; ++k) total += shared[k];
  return total;
}
}
float doubled_sum(float x) { return 2.0f * simd_sum(x); }
float nan_max(float v) {
  if (simd_any(isnan(v))) return NAN;
  return simd_max(v);
}
float guarded(constant float* in, uint i, uint n) {
  if (simd_any(i >= n)) return 0.0f;
  return simd_sum(in[i]);
}
kernel void collect(device float* out, constant float* in, uint i [[thread_position_in_grid]]) {
  float v = in[i];
  out[i] = simd_sum(v) + 1.0f;
  out[i] = simd_shuffle_down(in[i] * 2.0f, 1);
  out[i] = simd_sum(in[i]) - (simd_any(v > 0.0f) ? 1.0f : 0.0f);
  out[i] = simd_sum(v += 1.0f);
  out[i] = (threadgroup_barrier(mem_flags::mem_threadgroup), simd_sum(v));
}
kernel void inline_it(device float* out, constant float* in, uint i [[thread_position_in_grid]],
                      uint t [[thread_position_in_threadgroup]], uint n [[threads_per_threadgroup]]) {
  threadgroup float shared[256];
  out[i] = helpers::group_total(shared, in[i] + 1.0f, t, n);
  out[i] += doubled_sum(in[i]);
  out[i] = t > 3 ? helpers::group_total(shared, in[i], t, n) : 0.0f;
  out[i] = helpers::group_total(shared, in[i], t, n) + helpers::group_total(shared, 1.0f, t, n);
}
kernel void loops(device float* out, constant float* in, uint i [[thread_position_in_grid]],
                  uint t [[thread_position_in_threadgroup]], uint n [[threads_per_threadgroup]]) {
  threadgroup float shared[256];
  for (uint s = n / 2; s > 0; s /= 2) { if (t < s) shared[t] += shared[t + s];
                                        threadgroup_barrier(mem_flags::mem_threadgroup); }
  for (uint k = 0; k < t; ++k) threadgroup_barrier(mem_flags::mem_threadgroup);
  if (n > 32) { threadgroup_barrier(mem_flags::mem_threadgroup); }
  if (t < 16) { out[i] = simd_sum(in[i]); } else { out[i] = 0.0f; }
  if (uint x = t; x < 4) { threadgroup_barrier(mem_flags::mem_threadgroup); }
  for (float w : {1.0f, 2.0f}) { out[i] += simd_sum(w); }
  while (uint w = t) { threadgroup_barrier(mem_flags::mem_threadgroup); }
}
kernel void early(device float* out, constant float* in, uint i [[thread_position_in_grid]]) {
  out[i] = nan_max(in[i]); }
kernel void guard(device float* out, constant float* in, uint i [[thread_position_in_grid]],
                  uint n [[threads_per_grid]]) { out[i] = guarded(in, i, n); }
kernel void declare(device float* out, constant float* in, uint i [[thread_position_in_grid]],
                    uint n [[threads_per_threadgroup]]) {
  threadgroup float shared[64];
  constexpr uint kTwo = 2;
  float a = in[i] * kTwo;
  uint half_n = n / 2;
  float direct(3.0f);
  thread float& alias = a;
  auto f = [](float x) { return x; };
  float pair[2] = {in[i], 2.0f};
  uint looks = 1, through = n / 4;
  if (i % 2 == 0) { looks = 2; threadgroup_barrier(mem_flags::mem_threadgroup); }
  thread uint* p = &through;
  shared[i % 64] = a;
  threadgroup_barrier(mem_flags::mem_threadgroup);
  out[i] = a + float(half_n) + direct + alias + f(1.0f) + pair[0] + shared[0] + float(looks + *p);
}
"""
MASK = "shimkit_g.alive"


def line(snippet: str) -> int:
    """The MSL line of a snippet of MSL: what a refusal names."""
    return MSL[:MSL.index(snippet)].count("\n") + 1


@pytest.fixture(scope="module")
def program():
    """MSL's kernels as split_translation parses them (the header itself, not its precompiled form)."""
    translation = _translation(MSL, False)
    kernels = {_qualified(k.function): k.parameters for k in translation.kernels.values()}
    source = Source(('#include "metal_stdlib"\n' + translation.text).encode())
    args = ["-x", "c++", "-std=c++20", f"-I{INCLUDE_DIR}"]
    include = cache.system_include(tuple(compiler_command()))
    unit = cindex.Index.create().parse("kernel.cpp", args=[*args, *(["-isystem", include] if include else [])],
                                       unsaved_files=[("kernel.cpp", source.parsed)])
    assert not [d for d in unit.diagnostics if d.severity >= cindex.Diagnostic.Error], list(unit.diagnostics)
    defined = definitions(unit.cursor)
    return source, defined, Reach(defined), kernels


def group(program, kernel: str) -> tuple[GroupState, list]:
    """A fresh state for ``kernel``, and its body's statements (the front end's own come first where it
    declares threadgroup memory: the declaration, and the `measuring` test)."""
    source, defined, reach, kernels = program
    state = start_group(source, defined[kernel][0], kernels[kernel], reach)
    return state, list(state.body_cursor.get_children())


def refusal(call) -> str:
    with pytest.raises(Unsplittable) as refused:
        call()
    return str(refused.value)


def test_a_simdgroup_call_on_plain_operands_combines_over_arrays_and_a_variable_is_not_copied(program):
    state, body = group(program, "collect")
    declaration_code(state, body[0])  # `v`: a per-thread array the combine reads in place
    code = collectives.evaluate(state, MASK, body[1], lambda: statement_code(state, body[1]))
    result = re.search(r"::metal::lanes::simd_sum\(shimkit_on, (shimkit_c\d+) \+ shimkit_first, shimkit_v1 \+ "
                       r"shimkit_first\)", code)
    assert result and f"out[i] = {result[1]}[shimkit_t] + 1.0f;" in code, code
    assert f"std::remove_cv_t<float> {result[1]}[::shimkit_metal::kMaxGroupThreads];" in state.top
    # An operand that is an expression is evaluated into an array of the parameter's type in the region before.
    code = collectives.evaluate(state, MASK, body[2], lambda: statement_code(state, body[2]))
    assert re.search(r"shimkit_o\d+\[shimkit_t\] = \(in\[i\] \* 2\.0f\);", code), code
    assert re.search(r"std::remove_cv_t<unsigned short> shimkit_o\d+\[", " ".join(state.top)), state.top
    assert code.index("shimkit_g.region(") < code.index("shimkit_g.lanes(") < code.rindex("shimkit_g.region(")


def test_two_simdgroup_calls_in_one_statement_split_as_a_collective_counting_its_combines(program):
    state, body = group(program, "collect")
    declaration_code(state, body[0])
    # simd_any is a ballot and its reduction: two combines, simd_sum one.
    calls = collectives.outermost_calls(state, body[3], state.split_points(body[3]))
    assert [c.spelling for c in calls] == ["simd_sum", "simd_any"] and collectives.combines_reached(state, calls) == 3
    code = collectives.evaluate(state, MASK, body[3], lambda: statement_code(state, body[3]))
    assert code.startswith("shimkit_g.collective<3>(shimkit_g.alive, ") and "::metal::lanes" not in code, code
    assert re.search(r"auto (shimkit_c\d+) = simd_sum\(in\[i\]\); auto (shimkit_c\d+) = simd_any\(v > 0\.0f\); "
                     r"out\[i\] = \1 - \(\2 \? 1\.0f : 0\.0f\);", code), code


def test_a_simdgroup_call_whose_operands_assign_or_that_sits_beside_a_barrier_is_refused_with_its_line(program):
    state, body = group(program, "collect")
    assert refusal(lambda: collectives.outermost_calls(state, body[4], state.split_points(body[4]))) == (
        f"line {line('simd_sum(v += 1.0f)')}: a simdgroup function call whose operands assign")
    assert refusal(lambda: collectives.outermost_calls(state, body[5], state.split_points(body[5]))) == (
        f"line {line('(threadgroup_barrier(')}: a barrier inside an expression")


def test_an_inlined_function_binds_its_parameters_and_splits_its_body_at_its_barrier(program):
    state, body = group(program, "inline_it")
    flushed: list[str] = []
    out: list[str] = []
    result = inlining.write_inlined(state, state.split_points(body[2])[0], MASK, out, [],
                           lambda prelude="": flushed.append(prelude), write_block)
    code = out[-1]
    assert not flushed  # the arguments' region is carried into the callee's first region, not written alone
    assert result is not None and f"std::remove_cv_t<float> {result}[::shimkit_metal::kMaxGroupThreads];" in state.top
    # Two regions around the callee's barrier; its `return` stores the result and leaves the region.
    assert code.count("shimkit_g.region(") == 2 and code.index("/* barrier */") > code.index("shimkit_g.region(")
    assert f"{{ {result}[shimkit_t] = (total); return true; }}" in code, code
    # An expression argument is a per-thread array; `n` (threads_per_threadgroup) and the threadgroup array
    # are one value for the group, declared once at the top.
    assert re.search(r"(shimkit_a\d+)\[shimkit_t\] = \(in\[i\] \+ 1\.0f\);.* auto& v = \1\[shimkit_t\];", code), code
    constant = re.search(r"auto& n = (shimkit_u\d+);", code)
    assert constant and (f"const std::remove_cv_t<unsigned int> {constant[1]} = "
                         "(::shimkit_metal::from_position<uint>(shimkit_p.base.group_size));") in state.top
    assert re.search(r"auto& shared = shimkit_u\d+;", code), code
    # The body's namespace names are qualified for where it is written; it returns last, so no returned flag.
    assert "float(::helpers::kScale)" in code and "shimkit_x" not in code + " ".join(state.top)
    assert state.inlined == [] and state.scopes[0] == []


def test_a_call_with_a_barrier_is_inlined_only_alone_and_unconditionally(program):
    state, body = group(program, "inline_it")
    splits = state.split_points(body[3])  # the same cursors throughout: the passes compare them by identity
    assert inlining.inlinable_collective(state, body[3], splits[0], splits)  # doubled_sum reaches only simd_sum
    for statement, why in ((body[4], "a call to group_total, which reaches a barrier, under ?:"),
                           (body[5], "calls to functions with barriers nested or side by side")):
        splits = state.split_points(statement)
        where = line(state.source[state.src.start(statement):state.src.end(statement)].decode())
        assert refusal(lambda: inlining.call_to_inline(state, statement, splits, splits)) == f"line {where}: {why}"


def test_a_loop_with_a_uniform_condition_runs_at_group_level_with_no_mask(program):
    state, body = group(program, "loops")
    init, condition, step, _ = control_flow.for_parts(state, body[2])
    assert control_flow.uniform_loop(state, condition, init, step)
    code = control_flow.write_loop(state, body[2], MASK, write_block)
    stride = re.search(r"auto& s = (shimkit_v\d+);", code)
    assert stride and f"std::remove_cv_t<unsigned int> {stride[1]};" in state.top, state.top  # one value
    assert re.search(r"while \(shimkit_g\.any\(shimkit_g\.alive\) && \[&\]\(\).*return static_cast<bool>\(s > 0\);",
                     code), code
    assert re.search(r"if \(shimkit_g\.any\(shimkit_g\.alive\)\) \{ +\{ auto& s = shimkit_v\d+; s /= 2; +\} \}", code)
    assert "bool shimkit_m" not in " ".join(state.top) and "for (;;)" not in code


def test_a_loop_with_a_per_thread_condition_runs_while_any_thread_of_its_mask_does(program):
    state, body = group(program, "loops")
    init, condition, step, _ = control_flow.for_parts(state, body[3])
    assert not control_flow.uniform_loop(state, condition, init, step)  # `k < t`: t is the thread's position
    code = control_flow.write_loop(state, body[3], MASK, write_block)
    mask = re.search(r"std::memcpy\((shimkit_m\d+), shimkit_g\.alive, shimkit_count\);", code)
    assert mask and f"bool {mask[1]}[::shimkit_metal::kMaxGroupThreads];" in state.top, code
    assert re.search(rf"for \(;;\) \{{ shimkit_g\.region\({mask[1]}, .*if \(!static_cast<bool>\(k < t\)\) "
                     rf"{mask[1]}\[shimkit_t\] = false;.* if \(!shimkit_g\.any\({mask[1]}\)\) break;", code), code
    assert re.search(r"std::remove_cv_t<unsigned int> shimkit_v\d+\[", " ".join(state.top))  # k: per thread


def test_an_if_with_a_uniform_condition_is_one_test_and_a_divergent_one_sets_a_mask_per_branch(program):
    state, body = group(program, "loops")
    code = write_block(state, [body[4]], MASK)
    assert code.startswith("if (shimkit_g.any(shimkit_g.alive)) { if ([&]()") and "n > 32" in code, code
    assert not state.top
    code = write_block(state, [body[5]], MASK)
    taken, other = re.findall(r"bool (shimkit_m\d+)\[", " ".join(state.top))
    assert f"std::memset({taken}, 0, shimkit_count); std::memset({other}, 0, shimkit_count);" in code, code
    assert f"{taken}[shimkit_t] = shimkit_c; {other}[shimkit_t] = !shimkit_c;" in code
    # The then branch's simd_sum combines over the threads that took it, and its first region joins the
    # region that sets the masks.
    assert f"shimkit_g.lanes({taken}, " in code and f"if (!{taken}[shimkit_t]) return true;" in code, code
    assert re.search(rf"shimkit_g\.region\({other}, .*out\[i\] = 0\.0f;", code), code


def test_control_flow_it_cannot_split_is_refused_with_its_line(program):
    state, body = group(program, "loops")
    assert refusal(lambda: write_block(state, [body[6]], MASK)) == (
        f"line {line('if (uint x = t;')}: if with a declaration and a barrier")
    assert refusal(lambda: write_block(state, [body[7]], MASK)) == (
        f"line {line('for (float w')}: a barrier or simdgroup function inside cxx_for_range")
    assert refusal(lambda: write_block(state, [body[8]], MASK)) == (
        f"line {line('while (uint w')}: while with a declaration and a barrier")


def test_an_early_return_on_a_vote_is_taken_only_inlined_outside_loops_and_where_speculation_reads_no_memory(program):
    state, _ = group(program, "early")
    _, defined, _, _ = program
    vote, value = body_of(defined["nan_max"][0]).get_children()
    guard_vote, guarded = body_of(defined["guarded"][0]).get_children()
    assert not early_return.is_uniform_early_return(state, vote, value)  # not inside an inlined function
    state.inlined.append(("shimkit_r1", "shimkit_x2"))
    assert early_return.is_uniform_early_return(state, vote, value)
    assert not early_return.is_uniform_early_return(state, guard_vote, guarded)  # simd_sum(in[i]) reads past n
    [read] = state.split_points(guarded)[0].get_arguments()
    [variable] = state.split_points(value)[0].get_arguments()  # simd_max(v)
    assert not early_return.speculable(read) and early_return.speculable(variable)
    state.loop_depth = 1  # the next iteration may run after the return
    assert not early_return.is_uniform_early_return(state, vote, value)


def test_a_vote_and_the_combine_after_it_become_one_choice_with_no_returned_flag(program):
    state, _ = group(program, "early")
    code = write_group_function(state)
    vote, maximum = re.findall(r"::metal::lanes::simd_(?:any|max)\(shimkit_on, (shimkit_c\d+) \+", code)
    # Both combines run back to back for every lane; the return chooses.
    assert re.search(r"simd_any\([^;]*; \}\); shimkit_g\.lanes\(shimkit_g\.alive, [^;]*simd_max\(", code), code
    assert f"(({vote}[shimkit_t]) ? (__builtin_nanf(\"\")) : ({maximum}[shimkit_t]))" in code, code
    assert not re.search(r"bool shimkit_[xm]\d+\[", code), code
    # Where the value would read memory a returning lane must not, the return keeps its flag, and a thread
    # that returned leaves the callee's mask before the region that reads `in[i]` for the next combine.
    state, _ = group(program, "guard")
    code = write_group_function(state)
    leave = re.search(r"if \((shimkit_x\d+)\[shimkit_t\]\) \{ (shimkit_m\d+)\[shimkit_t\] = false; return true; \}",
                      code)
    assert leave and f"bool {leave[1]}[" in code, code
    assert f"std::memcpy({leave[2]}, shimkit_g.alive, shimkit_count);" in code
    assert code.index(leave[0]) < code.index("= (in[i]);") < code.rindex(f"shimkit_g.lanes({leave[2]}, "), code


def test_declarations_become_per_thread_arrays_or_one_value_and_group_level_ones_stay(program):
    state, body = group(program, "declare")
    assert declaration_code(state, body[0]) is None  # threadgroup memory: once, named through one reference
    assert state.declared == ["static thread_local float shared[64];",
                              "auto& shimkit_g1 = *::shimkit_metal::opaque(&shared);"]
    assert state.hoisted == ["shared", "shimkit_g1"] and {e[2] for e in state.edits} == {"shimkit_g1"}
    state.declared = []
    assert declaration_code(state, body[2]) is None and state.declared == ["constexpr uint kTwo = 2;"]
    assert "kTwo" in state.hoisted
    state.declared = []
    assert declaration_code(state, body[3]) == "a = in[i] * kTwo;"
    uniform: list[tuple[str, str]] = []
    assert declaration_code(state, body[4], uniform) == "" and uniform == [("half_n", "half_n = n / 2;")]
    assert state.scopes[-1] == [("a", "shimkit_v2[shimkit_t]"), ("half_n", "shimkit_v3")]
    assert state.top == ["std::remove_cv_t<float> shimkit_v2[::shimkit_metal::kMaxGroupThreads];",
                         "std::remove_cv_t<unsigned int> shimkit_v3;"]


@pytest.mark.parametrize("index, snippet, why", [
    (5, "float direct(", "direct is initialised directly, not with ="),
    (6, "thread float& alias", "reference alias in a block with a barrier"),
    (7, "auto f = ", "variable f of type (lambda at <msl>:{line}:12) is live across a split and its type "
                     "cannot be named"),
])
def test_a_declaration_a_region_cannot_hold_per_thread_is_refused_with_its_line(program, index, snippet, why):
    state, body = group(program, "declare")
    assert refusal(lambda: declaration_code(state, body[index])) == (
        f"line {line(snippet)}: " + why.format(line=line(snippet)))


def test_an_array_initialised_in_a_block_with_a_barrier_is_refused(program):
    # Its size is a child of the declaration too: the initialiser was once dropped unseen, and read garbage.
    state, body = group(program, "declare")
    assert refusal(lambda: declaration_code(state, body[8])) == (
        f"line {line('float pair[2]')}: array pair initialised in a block with a barrier")


def test_uniformity_keeps_a_variable_one_value_only_where_every_assignment_is_uniform_at_group_level(program):
    state, _ = group(program, "declare")
    names = {node.spelling for node in state.body_cursor.walk_preorder()
             if node.kind.name == "VAR_DECL" and node.hash in state.uniformity.variables}
    # From threads_per_threadgroup and literals; but `looks` is assigned under a branch on the thread's
    # position, `through` has its address taken, `a` is read from memory, and `shared` is memory.
    assert names == {"kTwo", "half_n", "direct"}


def test_bindings_name_per_thread_elements_and_group_values_and_leave_an_inlined_function_once_returned():
    state = GroupState(Source(b""), None, Reach({}), None)
    state.scopes = [[("acc", "shimkit_v1[shimkit_t]")], [("half", "shimkit_v2")]]
    state.thread_values = [("t", "auto t = T;"), ("n", "auto n = N;")]
    state.group_values = {"n"}
    opening, closing = bindings.preamble(state, "shimkit_m3", "acc += t;")
    assert opening == "auto t = T; { auto& acc = shimkit_v1[shimkit_t]; { auto& half = shimkit_v2;"
    assert closing == " } }"
    # Group-level code sees only what is one value for the group, and only what it names.
    assert bindings.group_bindings(state, "half > n") == ("auto n = N; { auto& half = shimkit_v2;", " }")
    assert bindings.with_declared_types(state, "static_cast<decltype(acc)>(x) + sizeof(decltype(t))") == (
        "static_cast<std::remove_reference_t<decltype(acc)>>(x) + sizeof(decltype(t))")
    # In an inlined function that may have returned, a region first takes the returned threads out.
    state.inlined, state.may_return = [("shimkit_r4", "shimkit_x5")], {"shimkit_x5"}
    opening, _ = bindings.preamble(state, "shimkit_m3", "acc;")
    assert opening.startswith(" if (shimkit_x5[shimkit_t]) { shimkit_m3[shimkit_t] = false; return true; }")
    assert state.tested == {"shimkit_x5"} and state.cleared == {"shimkit_m3"}

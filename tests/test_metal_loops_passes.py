"""The work-group compiler's passes (metal/loops/) one at a time, on small C++ that libclang parses here:
what tests/test_metal_loops.py checks only through whole kernels."""

from __future__ import annotations

from pathlib import Path

import pytest

import shimkit.metal.loops.cache as cache
from shimkit.metal.loops.fragments import Region, Text, ending
from shimkit.metal.loops.parameters import assigned_parameters
from shimkit.metal.loops.reach import Reach
from shimkit.metal.loops.regions import new_mask, within
from shimkit.metal.loops.returns import returns_in_loop
from shimkit.metal.loops.source import Source, body_of, definitions, msl_line, parameters_of
from shimkit.metal.loops.state import GroupState
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

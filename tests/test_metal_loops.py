"""Kernels with barriers split into work-group loops (metal/loops/) against the same kernels on
cooperative fibers, element for element: hypothesis writes the kernels (random numbers of barrier regions,
uniform loops with barriers inside, simdgroup functions in uniform and divergent branches, threads that
return early, values uniform over the group and values that only look uniform, blocks that end at a
barrier) and runs them at group sizes that are and are not multiples of 32, with partial edge groups.
Then what the splitter refuses, and that it says why."""

from __future__ import annotations

import re

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from shimkit.csrc.build import compiler_command
from shimkit.metal.library import (INCLUDE_DIR, MetalRaceError, ShaderLibrary, _qualified, _translation,
                                   compile_library)
from shimkit.metal.loops import split_translation
from shimkit.store import Store

HEADER = """
#include <metal_stdlib>
using namespace metal;
kernel void generated(device uint* out, constant uint* in, uint i [[thread_position_in_grid]],
                      uint t [[thread_position_in_threadgroup]], uint n [[threads_per_threadgroup]],
                      uint lane [[thread_index_in_simdgroup]]) {
  threadgroup uint shared[1024];
  uint mine = in[i];
"""
SIMD_CALLS = ["simd_sum(mine)", "simd_max(mine)", "simd_min(mine)", "simd_prefix_exclusive_sum(mine)",
              "simd_prefix_inclusive_sum(mine)", "simd_broadcast_first(mine)", "simd_shuffle_xor(mine, 1)",
              "simd_shuffle_down(mine, 3)", "simd_shuffle_up(mine, 2)", "simd_broadcast(mine, 5)",
              "simd_product(mine | 1u)", "(simd_any(mine % 5u == 0u) ? 7u : 1u)",
              "(simd_all(mine > 3u) ? 11u : 2u)", "(simd_ballot((mine & 1u) != 0u).any() ? 3u : 4u)",
              "simd_shuffle(mine, lane ^ 4u)", "simd_shuffle_rotate_down(mine, 5)", "simd_shuffle_rotate_up(mine, 7)",
              "simd_and(mine | 256u)", "simd_or(mine & 255u)", "simd_xor(mine)"]
# A program's kernels share the prelude; each gets its own name.
PRELUDE, _, SIGNATURE = HEADER.partition("kernel void generated")


@st.composite
def steps(draw, depth: int = 0, returned: bool = False) -> tuple[list[str], bool]:
    """Statements of a kernel body, and whether some threads may have returned by their end (a thread
    that returned leaves stale threadgroup memory, so later regions read only their own)."""
    lines: list[str] = []
    for _ in range(draw(st.integers(1, 4))):
        choice = draw(st.sampled_from(["barrier", "simd", "branch", "loop", "return", "local", "uniform",
                                       "divergent", "tree", "uniform branch", "countdown", "block"]
                                      if depth < 2 else ["barrier", "simd", "local", "uniform", "divergent"]))
        shift = draw(st.integers(0, 40))
        name = f"{choice[0]}{depth}_{len(lines)}"
        if choice == "barrier":
            source = "t" if returned else f"(t + {shift}u) % n"
            lines += ["shared[t] = mine;", "threadgroup_barrier(mem_flags::mem_threadgroup);",
                      f"mine = mine * 3u + shared[{source}];", "threadgroup_barrier(mem_flags::mem_threadgroup);"]
        elif choice == "simd":
            calls = draw(st.lists(st.sampled_from(SIMD_CALLS), min_size=1, max_size=3))
            lines.append(f"mine += {' - '.join(calls)};")
        elif choice == "local":
            lines.append(f"uint v{len(lines)} = mine ^ {shift}u; mine = v{len(lines)} * 5u + 1u;")
        elif choice == "branch":
            # A divergent branch with a simdgroup function: the lanes that entered take part. A barrier
            # follows it, so that no lane outside can meet the branch's lanes at a later simdgroup call.
            inner, returned = draw(steps(depth + 1, returned))
            body = [line for line in inner if "threadgroup_barrier" not in line and "shared[" not in line]
            lines += [f"if (lane % 3u == {shift % 3}u) {{", f"  mine += simd_sum(mine + {shift}u);",
                      *body, "} else {", "  mine ^= 9u;", "}", "threadgroup_barrier(mem_flags::mem_threadgroup);"]
        elif choice == "loop":
            inner, returned = draw(steps(depth + 1, returned))
            rounds = draw(st.integers(0, 3))
            lines += [f"for (uint r{depth} = 0; r{depth} < {rounds}u; ++r{depth}) {{", *inner,
                      f"  mine += r{depth};", "}"]
        elif choice == "return" and depth == 0:
            lines.append(f"if (i % 7u == {shift % 7}u) {{ out[i] = mine + 1000u; return; }}")
            returned = True
        elif choice == "uniform":
            # one value for the group (metal/loops/uniformity.py): assigned at group level, read after a barrier
            lines += [f"uint {name} = n / {shift % 5 + 1}u + {shift}u;", f"{name} += n % 3u;",
                      "threadgroup_barrier(mem_flags::mem_threadgroup);", f"mine += {name} * 7u;"]
        elif choice == "divergent":
            # assigned alike at group level, but also under a branch some threads skip: per thread
            lines += [f"uint {name} = {shift}u;", f"if (lane % 3u == 1u) {{ {name} = mine; mine += simd_sum(1u); }}",
                      "threadgroup_barrier(mem_flags::mem_threadgroup);", f"mine ^= {name};"]
        elif choice == "tree" and not returned:
            # a tree reduction in threadgroup memory: a uniform loop with a barrier, one region per step
            lines += ["shared[t] = mine;", "threadgroup_barrier(mem_flags::mem_threadgroup);",
                      f"for (uint {name} = n / 2u; {name} > 0u; {name} /= 2u) {{",
                      f"  if (t < {name} && t + {name} < n) shared[t] += shared[t + {name}];",
                      "  threadgroup_barrier(mem_flags::mem_threadgroup);", "}",
                      "mine += shared[0];", "threadgroup_barrier(mem_flags::mem_threadgroup);"]
        elif choice == "uniform branch":
            inner, returned = draw(steps(depth + 1, returned))
            lines += [f"if (n > {shift}u) {{", *inner, "} else {", "  mine ^= 5u;",
                      "  threadgroup_barrier(mem_flags::mem_threadgroup);", "}"]
        elif choice == "countdown":
            inner, returned = draw(steps(depth + 1, returned))
            lines += [f"uint {name} = n % {shift % 3 + 1}u + 1u;", f"while ({name} > 0u) {{", *inner,
                      f"  mine += {name};", f"  {name}--;", "}"]
        elif choice == "block" and not returned:
            # a block that ends at a barrier: the statements after it read another thread's value
            lines += ["{", "  shared[t] = mine;", "  threadgroup_barrier(mem_flags::mem_threadgroup);", "}",
                      f"mine = mine * 5u + shared[(t + {shift}u) % n];", "threadgroup_barrier(mem_flags::mem_threadgroup);"]
    return lines, returned


# Each example compiles its programs twice (split and fibers): several programs share one library, so that
# the examples cost compiles, not the programs in them.
PROGRAMS_PER_EXAMPLE = 4


@settings(max_examples=max(1, settings().max_examples // 3))
@given(programs=st.lists(steps(), min_size=1, max_size=PROGRAMS_PER_EXAMPLE), group=st.integers(1, 96),
       groups=st.integers(1, 3), partial=st.integers(0, 95), seed=st.integers(0, 2**16))
def test_generated_barrier_kernels_split_into_loops_compute_what_fibers_compute(programs, group, groups, partial,
                                                                               seed):
    # Every program ends with a simdgroup function, so that each one is cooperative.
    kernels = [f"kernel void generated{k}{SIGNATURE}" + "\n".join("  " + line for line in lines)
               + "\n  out[i] = mine + simd_sum(mine);\n}\n" for k, (lines, _) in enumerate(programs)]
    source = PRELUDE + "".join(kernels)
    split_library = ShaderLibrary(source)
    fibers_library = ShaderLibrary(source, split_barriers=False)
    threads = group * groups + partial % group
    values = torch.randint(0, 2**31, (threads,), generator=torch.Generator().manual_seed(seed)).to(torch.int64)
    values = values.to(torch.int32)
    for k, kernel in enumerate(kernels):
        split, fibers = getattr(split_library, f"generated{k}"), getattr(fibers_library, f"generated{k}")
        assert split.execution == "split", (split.fibers_because, kernel)
        assert fibers.execution == "fibers"
        expected, actual = torch.zeros_like(values), torch.zeros_like(values)
        fibers(expected, values, threads=threads, group_size=group)
        split(actual, values, threads=threads, group_size=group)
        assert torch.equal(actual, expected), kernel


FIXED = HEADER.replace("kernel void generated", "kernel void fixed") + """
  shared[t] = mine;
  threadgroup_barrier(mem_flags::mem_threadgroup);
  for (uint stride = n / 2; stride > 0; stride /= 2) {
    if (t < stride) shared[t] += shared[t + stride];
    threadgroup_barrier(mem_flags::mem_threadgroup);
  }
  out[i] = shared[0] + simd_sum(mine);
}
"""


def test_a_tree_reduction_splits_and_its_threadgroup_memory_is_measured():
    lib = ShaderLibrary(FIXED)
    assert lib.fixed.execution == "split" and lib.fixed.fibers_because is None
    assert "split" in repr(lib.fixed)
    assert lib.fixed.static_thread_group_memory_length == 4096
    values = torch.arange(64, dtype=torch.int32)
    out = torch.zeros_like(values)
    lib.fixed(out, values, threads=64, group_size=64)
    lanes = values.view(2, 32).sum(1).repeat_interleave(32)
    assert torch.equal(out, values.sum() + lanes)


UNIFORM_AND_NOT = HEADER.replace("kernel void generated", "kernel void uniformity") + """
  uint looks_uniform = 1u;
  if (lane % 2u == 0u) {
    looks_uniform = 2u;
    mine += simd_sum(mine);
  }
  shared[t] = mine;
  threadgroup_barrier(mem_flags::mem_threadgroup);
  for (uint stride = n / 2; stride > 0; stride /= 2) {
    if (t < stride) shared[t] += shared[t + stride];
    threadgroup_barrier(mem_flags::mem_threadgroup);
  }
  out[i] = shared[0] * looks_uniform;
}
"""


def test_a_value_uniform_over_the_group_is_one_value_and_its_loop_runs_at_group_level():
    """The tree reduction's stride is one value for the group (metal/loops/uniformity.py): its loop is a C++ loop
    around one loop over the threads per step, with no per-thread mask; a variable also assigned where only
    some threads go stays one per thread."""
    text = compile_library(UNIFORM_AND_NOT)[1].text
    group = text[text.index("uniformity__shimkit_group"):]
    assert re.search(r"auto& stride = shimkit_v\d+;", group), group
    assert re.search(r"auto& looks_uniform = shimkit_v\d+\[shimkit_t\];", group), group
    loop = group[group.index("while ("):]
    assert loop.count("shimkit_g.region(") >= 1 and "std::memcpy" not in loop[:loop.index("shimkit_g.region(")]
    values = torch.arange(100, dtype=torch.int32)
    split, fibers = torch.zeros_like(values), torch.zeros_like(values)
    ShaderLibrary(UNIFORM_AND_NOT).uniformity(split, values, threads=100, group_size=50)
    ShaderLibrary(UNIFORM_AND_NOT, split_barriers=False).uniformity(fibers, values, threads=100, group_size=50)
    assert torch.equal(split, fibers)
    assert not torch.equal(split[0::2], split[1::2])  # the per-thread value made a difference


@pytest.mark.parametrize("tail", [
    "  const uint neighbour = shared[(t + 1u) % n];\n  out[i] = neighbour + simd_sum(0u);\n",
    # this one did not even compile at the start of this round (an operand's array declared out of scope)
    "  out[i] = shared[(t + 1u) % n];\n  threadgroup_barrier(mem_flags::mem_threadgroup);\n  out[i] += simd_sum(0u);\n",
])
def test_statements_after_a_block_that_ends_at_a_barrier_wait_for_every_thread(tail):
    """The region after a block that ends with a barrier does not join the block's last region (it did
    once regions joined across blocks: each thread then read its neighbour's slot before the neighbour
    wrote it)."""
    source = PRELUDE + f"kernel void after_block{SIGNATURE}" + """
  {
    shared[t] = mine;
    threadgroup_barrier(mem_flags::mem_threadgroup);
  }
""" + tail + "}\n"
    values = torch.arange(64, dtype=torch.int32) * 3
    out = torch.zeros_like(values)
    kernel = ShaderLibrary(source).after_block
    assert kernel.execution == "split", kernel.fibers_because
    kernel(out, values, threads=64, group_size=64)
    assert torch.equal(out, values.roll(-1))


def test_a_buffer_parameter_moved_by_a_uniform_amount_moves_for_every_thread():
    """A buffer parameter the kernel reassigns is a per-thread copy, never a uniform value, even when
    every thread moves it alike (a group-level assignment would move the parameter the regions do not
    read)."""
    source = PRELUDE + f"kernel void moved{SIGNATURE}" + """
  in += n / n;
  threadgroup_barrier(mem_flags::mem_threadgroup);
  out[i] = in[i] + simd_sum(0u);
}
"""
    values = torch.arange(65, dtype=torch.int32) * 7
    out = torch.zeros(64, dtype=torch.int32)
    kernel = ShaderLibrary(source).moved
    assert kernel.execution == "split", kernel.fibers_because
    kernel(out, values, threads=64, group_size=64)
    assert torch.equal(out, values[1:])


@pytest.mark.parametrize("declare, change", [
    ("uint v = n / 2u;", "thread uint* p = &v; *p += lane;"),  # through its address
    ("uint v = n / 2u;", "bump(v, lane);"),  # through a reference parameter
    ("uint v = n / 2u;", "v += lane;"),  # by a value one per thread
    ("uint v = n / 2u;", "if (lane % 2u == 0u) { v = 3u; mine += simd_sum(mine); }"),  # under a divergent branch
    ("uint v = n / 2u; uint w = v;", "w += t; v = w;"),  # from a variable that is one per thread
])
def test_a_value_changed_per_thread_stays_one_per_thread(declare, change):
    source = PRELUDE + "void bump(thread uint& v, uint by) { v += by; }\n" + (
        f"kernel void lookalike{SIGNATURE}  {declare}\n  {change}\n"
        "  threadgroup_barrier(mem_flags::mem_threadgroup);\n  out[i] = v + simd_sum(mine);\n}\n")
    text = compile_library(source)[1].text
    group = text[text.index("lookalike__shimkit_group"):]
    assert re.search(r"auto& v = shimkit_v\d+\[shimkit_t\];", group), group
    values = torch.arange(40, dtype=torch.int32)
    split, fibers = torch.zeros_like(values), torch.zeros_like(values)
    ShaderLibrary(source).lookalike(split, values, threads=40, group_size=40)
    ShaderLibrary(source, split_barriers=False).lookalike(fibers, values, threads=40, group_size=40)
    assert torch.equal(split, fibers)


@pytest.mark.parametrize("statement, direct", [
    ("mine += simd_sum(mine);", True),
    ("mine = simd_shuffle_down(mine, lane & 3u);", True),
    ("if (simd_any(mine > 5u)) mine += 1u;", True),
    ("mine += simd_sum(mine) - simd_max(mine);", False),  # two calls in one statement: evaluated twice
])
def test_a_simdgroup_function_on_plain_operands_is_combined_over_arrays_not_lane_records(statement, direct):
    source = PRELUDE + f"kernel void generated{SIGNATURE}  {statement}\n  out[i] = mine;\n}}\n"
    text = compile_library(source)[1].text
    group = text[text.index("generated__shimkit_group"):]
    assert ("::metal::lanes::" in group) == direct and ("collective<" in group) != direct, group
    values = torch.arange(40, dtype=torch.int32)
    split, fibers = torch.zeros_like(values), torch.zeros_like(values)
    ShaderLibrary(source).generated(split, values, threads=40, group_size=40)
    ShaderLibrary(source, split_barriers=False).generated(fibers, values, threads=40, group_size=40)
    assert torch.equal(split, fibers)


HELPER_WITH_BARRIER = """
#include <metal_stdlib>
using namespace metal;
float group_total(threadgroup float* shared, float v, uint t, uint n) {
  shared[t] = v;
  threadgroup_barrier(mem_flags::mem_threadgroup);
  float total = 0;
  for (uint k = 0; k < n; ++k) total += shared[k];
  return total;
}
kernel void helper(device float* out, constant float* in, uint i [[thread_position_in_grid]],
                   uint t [[thread_position_in_threadgroup]], uint n [[threads_per_threadgroup]]) {
  threadgroup float shared[256];
  out[i] = group_total(shared, in[i], t, n);
}
"""
BY_REFERENCE = """
#include <metal_stdlib>
using namespace metal;
void add_group(threadgroup float* shared, thread float& v, uint t, uint n) {
  shared[t] = v;
  threadgroup_barrier(mem_flags::mem_threadgroup);
  for (uint k = 0; k < n; ++k) v += shared[k];
}
kernel void by_reference(device float* out, constant float* in, uint i [[thread_position_in_grid]],
                         uint t [[thread_position_in_threadgroup]], uint n [[threads_per_threadgroup]]) {
  threadgroup float shared[256];
  float v = in[i];
  add_group(shared, v, t, n);
  out[i] = v;
}
"""
BREAK_ACROSS_BARRIER = """
#include <metal_stdlib>
using namespace metal;
kernel void leaves(device float* out, constant uint& rounds, uint i [[thread_position_in_grid]]) {
  float v = 0;
  for (uint r = 0; r < 8; ++r) {
    v += simd_sum(1.0f);
    if (r == rounds) break;
  }
  out[i] = v;
}
"""


def test_a_function_with_a_barrier_is_inlined_into_the_split_kernel():
    kernel = ShaderLibrary(HELPER_WITH_BARRIER).helper
    assert kernel.execution == "split", kernel.fibers_because
    values = torch.arange(96, dtype=torch.float32)
    out = torch.zeros(96)
    kernel(out, values, threads=96, group_size=64)
    expected = torch.cat([torch.full((64,), float(values[:64].sum())), torch.full((32,), float(values[64:].sum()))])
    assert torch.equal(out, expected)


@pytest.mark.parametrize("source, name, reason", [
    (BY_REFERENCE, "by_reference", "line 13: add_group takes v by reference"),
    (BREAK_ACROSS_BARRIER, "leaves", "line 8: break out of a loop with a barrier"),
])
def test_what_cannot_be_split_runs_on_fibers_and_says_why(source, name, reason):
    kernel = getattr(ShaderLibrary(source), name)
    assert kernel.execution == "fibers"
    assert reason in kernel.fibers_because
    out = torch.zeros(64)
    if name == "by_reference":
        values = torch.arange(64, dtype=torch.float32)
        kernel(out, values, threads=64, group_size=64)
        assert torch.equal(out, values + float(values.sum()))
    else:
        kernel(out, 2, threads=64, group_size=64)
        assert torch.equal(out, torch.full((64,), 96.0))


THREE_D = """
#include <metal_stdlib>
using namespace metal;
kernel void coordinates(device uint* out, uint3 at [[thread_position_in_grid]], uint3 local [[thread_position_in_threadgroup]],
                        uint3 group [[threadgroup_position_in_grid]], uint3 size [[threads_per_threadgroup]],
                        uint3 groups [[threadgroups_per_grid]], uint3 grid [[threads_per_grid]],
                        uint index [[thread_index_in_threadgroup]], uint lane [[thread_index_in_simdgroup]],
                        uint simd [[simdgroup_index_in_threadgroup]], uint simds [[simdgroups_per_threadgroup]]) {
  threadgroup uint shared[1024];
  shared[index] = at.x + 7u * at.y + 131u * at.z;
  threadgroup_barrier(mem_flags::mem_threadgroup);
  const uint linear = at.x + grid.x * (at.y + grid.y * at.z);
  const uint neighbour = shared[(index + 1u) % (size.x * size.y * size.z)];
  out[linear] = neighbour ^ (local.x << 4) ^ (local.y << 8) ^ (local.z << 12) ^ (group.x << 16) ^ (group.y << 18)
              ^ (group.z << 20) ^ (groups.x << 22) ^ (groups.y << 24) ^ (lane << 26) ^ (simd << 28) ^ simds
              ^ simd_sum(index);
}
"""


@given(grid=st.tuples(st.integers(1, 9), st.integers(1, 7), st.integers(1, 5)),
       group=st.tuples(st.integers(1, 8), st.integers(1, 6), st.integers(1, 4)))
def test_every_thread_coordinate_of_a_3d_dispatch_is_what_fibers_see(grid, group):
    split = ShaderLibrary(THREE_D).coordinates
    fibers = ShaderLibrary(THREE_D, split_barriers=False).coordinates
    assert split.execution == "split"
    count = grid[0] * grid[1] * grid[2]
    expected, actual = torch.zeros(count, dtype=torch.int32), torch.zeros(count, dtype=torch.int32)
    fibers(expected, threads=grid, group_size=group)
    split(actual, threads=grid, group_size=group)
    assert torch.equal(actual, expected)


SCALAR_POSITIONS = """
#include <metal_stdlib>
using namespace metal;
kernel void first_row_tree(device uint* out, constant uint* in, constant uint& width,
                           uint t [[thread_position_in_threadgroup]], uint index [[thread_index_in_threadgroup]]) {
  threadgroup uint partial[1024];
  partial[index] = in[index] ^ (t << 16);
  threadgroup_barrier(mem_flags::mem_threadgroup);
  for (uint stride = 512; stride > 0; stride /= 2) {
    if (index == t && t < stride && t + stride < width) partial[t] += partial[t + stride];
    threadgroup_barrier(mem_flags::mem_threadgroup);
  }
  out[index] = partial[index] + t;
}
"""


@given(shape=st.one_of(st.tuples(st.integers(1, 300), st.just(1)), st.tuples(st.just(1), st.integers(2, 300)),
                       st.tuples(st.integers(2, 16), st.integers(2, 16))),
       seed=st.integers(0, 2**31 - 1))
def test_a_kernel_of_scalar_positions_computes_what_fibers_compute_in_groups_of_every_shape(shape, seed):
    """A kernel whose thread positions are scalars has its group function instantiated for groups along
    x, where `t` is the thread's index (loops.h's on_axis), and for every other shape: a tree over the
    first row of the group, in groups along x, along y and of two axes."""
    library = ShaderLibrary(SCALAR_POSITIONS)
    split, fibers = library.first_row_tree, ShaderLibrary(SCALAR_POSITIONS, split_barriers=False).first_row_tree
    assert split.execution == "split", split.fibers_because
    count = shape[0] * shape[1]
    values = torch.randint(0, 2**20, (count,), dtype=torch.int32, generator=torch.Generator().manual_seed(seed))
    expected, actual = torch.zeros_like(values), torch.ones_like(values)
    fibers(expected, values, shape[0], threads=(*shape, 1), group_size=(*shape, 1))
    split(actual, values, shape[0], threads=(*shape, 1), group_size=(*shape, 1))
    assert torch.equal(actual, expected)


def test_only_kernels_of_scalar_positions_get_a_group_function_for_groups_along_x():
    """Inductor's kernels (uint2 positions) keep one group function: for them a second gained nothing
    measurable and doubled the compile time."""
    assert "on_axis(" in _translation(SCALAR_POSITIONS).text
    assert "on_axis" not in _translation(THREE_D).text


C10_HELPERS = """
#include <c10/metal/reduction_utils.h>
using namespace metal;
kernel void helpers(device float* sums, device float* maxima, device long* argmaxima, constant float* in,
                    uint i [[thread_position_in_grid]], uint t [[thread_position_in_threadgroup]],
                    uint n [[threads_per_threadgroup]], uint group [[threadgroup_position_in_grid]]) {
  threadgroup float partial[32];
  threadgroup float values[32];
  threadgroup long indices[32];
  const float v = in[i];
  auto total = c10::metal::threadgroup_sum(partial, v, t, n);
  auto largest = c10::metal::threadgroup_max(partial, v, t, n);
  auto where = c10::metal::threadgroup_argmax(values, indices, v, long(i), t, n);
  if (t == 0) {
    sums[group] = total;
    maxima[group] = largest;
    argmaxima[group] = where;
  }
}
"""


@given(group=st.integers(1, 256), groups=st.integers(1, 3),
       values=st.lists(st.floats(-1e3, 1e3, width=32) | st.just(float("nan")), min_size=1, max_size=768))
def test_c10_reduction_helpers_inlined_compute_what_fibers_compute(group, groups, values):
    split = ShaderLibrary(C10_HELPERS).helpers
    fibers = ShaderLibrary(C10_HELPERS, split_barriers=False).helpers
    assert split.execution == "split", split.fibers_because
    threads = group * groups
    x = torch.tensor((values * (threads // len(values) + 1))[:threads], dtype=torch.float32)
    results = []
    for kernel in (split, fibers):
        out = (torch.zeros(groups), torch.zeros(groups), torch.zeros(groups, dtype=torch.int64))
        kernel(*out, x, threads=threads, group_size=group)
        results.append(out)
    for a, b in zip(*results):
        assert torch.equal(a, b) or torch.allclose(a, b, equal_nan=True, rtol=0, atol=0)
    assert torch.allclose(results[0][1], x.view(groups, group).amax(1), equal_nan=True)


RACY = """
#include <metal_stdlib>
using namespace metal;
kernel void neighbour(device float* out, constant float* in, uint i [[thread_position_in_grid]],
                      uint t [[thread_position_in_threadgroup]], uint n [[threads_per_threadgroup]]) {
  threadgroup float shared[64];
  shared[t] = in[i];
  BARRIER
  out[i] = shared[(t + 1) % n];
  threadgroup_barrier(mem_flags::mem_threadgroup);
}
"""


def test_the_race_check_reports_a_read_of_threadgroup_memory_written_without_a_barrier():
    values = torch.arange(1.0, 129.0)
    out = torch.zeros(128)
    racy = ShaderLibrary(RACY.replace("BARRIER", ""), check_races=True).neighbour
    assert racy.execution == "split"
    with pytest.raises(MetalRaceError, match=r"kernel 'neighbour': buffer 0 .* no barrier between them"):
        racy(out, values, threads=128, group_size=64)
    fixed = ShaderLibrary(RACY.replace("BARRIER", "threadgroup_barrier(mem_flags::mem_threadgroup);"),
                          check_races=True).neighbour
    fixed(out, values, threads=128, group_size=64)
    assert torch.equal(out, values.view(2, 64).roll(-1, 1).reshape(-1))


DECLTYPE = """
#include <metal_stdlib>
using namespace metal;
kernel void typed(device float* out, constant float* in, uint t [[thread_position_in_threadgroup]],
                  uint i [[thread_position_in_grid]]) {
  threadgroup float shared[64];
  auto tmp3 = in[i] * 2.0;
  shared[t] = tmp3;
  threadgroup_barrier(mem_flags::mem_threadgroup);
  out[i] = static_cast<decltype(tmp3)>(shared[(t + 1) % 64]) + tmp3;
}
"""


def test_decltype_of_a_variable_live_across_a_barrier_is_its_declared_type():
    """Inductor writes static_cast<decltype(tmp3)>(...); the split binds tmp3 by reference in each region."""
    kernel = ShaderLibrary(DECLTYPE).typed
    assert kernel.execution == "split"
    values, out = torch.arange(64.0), torch.zeros(64)
    kernel(out, values, threads=64, group_size=64)
    assert torch.equal(out, values.roll(-1) * 2 + values * 2)


INLINED = """
#include <metal_stdlib>
using namespace metal;
// Returns from inside a loop with barriers (all threads at once: a barrier's threads must all reach it),
// and assigns its parameter v (which so is copied per thread).
float rounds(threadgroup float* shared, float v, uint t, uint n, uint limit) {
  for (uint k = 0; k < 3; ++k) {
    shared[t] = v;
    threadgroup_barrier(mem_flags::mem_threadgroup);
    v += shared[(t + 1) % n] * 0.5f;
    threadgroup_barrier(mem_flags::mem_threadgroup);
    if (k >= limit) return v * 2.0f;
  }
  return v;
}
// Declares names its callers use too (the template parameter T, the constant stride); some threads
// return after the last barrier.
template <typename T>
T group_sum(threadgroup T* shared, T v, uint t, uint n, T scale) {
  constexpr uint stride = 1;
  shared[t] = v;
  threadgroup_barrier(mem_flags::mem_threadgroup);
  T total = 0;
  for (uint k = 0; k < n; k += stride) total += shared[k];
  threadgroup_barrier(mem_flags::mem_threadgroup);
  if (t % 3 == 1) return total;
  return total * scale + simd_sum(v);
}
float twice(threadgroup float* shared, float v, uint t, uint n) {
  const float once = group_sum(shared, v, t, n, 1.0f);
  return once + group_sum(shared, v * 2.0f, t, n, 0.5f);
}
kernel void inlined(device float* out, constant float* in, constant uint& limit, uint i [[thread_position_in_grid]],
                    uint t [[thread_position_in_threadgroup]], uint n [[threads_per_threadgroup]]) {
  threadgroup float shared[256];
  float v = in[i];
  int stride = int(t) * 2;
  float T = 0.25f;
  float a = group_sum(shared, v, t, n, 2.0f);
  float b = group_sum(shared, v + T, t, n, T) + float(stride);
  float c = rounds(shared, a, t, n, limit);
  float d = twice(shared, c, t, n);
  float e = rounds(shared, v, t, n, limit + 1u);
  out[i] = a + b * T + c + d + e + float(stride);
}
"""


@pytest.mark.parametrize("threads, group", [(64, 64), (100, 40), (96, 96), (7, 7)])
def test_inlined_functions_with_shared_and_aliased_parameters_compute_what_fibers_compute(threads, group):
    """Arguments that are constants or a caller's per-thread variable are not copied per thread, a callee's
    first and last regions run with its caller's statements around the call, and returns inside loops,
    parameters the callee assigns and names both declare keep their meaning."""
    split = ShaderLibrary(INLINED).inlined
    fibers = ShaderLibrary(INLINED, split_barriers=False).inlined
    assert split.execution == "split", split.fibers_because
    values = torch.randint(-50, 50, (threads,), generator=torch.Generator().manual_seed(threads)).float()
    for limit in (0, 2, 1000):
        expected, actual = torch.zeros(threads), torch.zeros(threads)
        fibers(expected, values, limit, threads=threads, group_size=group)
        split(actual, values, limit, threads=threads, group_size=group)
        assert torch.equal(actual, expected), limit


def test_c10s_threadgroup_sum_inlined_is_five_loops_over_the_group():
    """Of the twelve regions c10's threadgroup_sum split into (its simd_sum wrapper's copies, returned
    flags and masks), five remain: the caller's statements before and after the call join the callee's
    first and last regions, its arguments are not copied per thread, `if (size > simdgroup_size)` (the
    size a `threads_per_threadgroup` parameter) is one test for the group with no mask, and the first
    region of `if (idx < ...)` joins the region that sets its mask. (Of int: float's is one group-level
    step, below.)"""
    source = C10_HELPERS.replace("  auto largest = c10::metal::threadgroup_max(partial, v, t, n);\n", "").replace(
        "  auto where = c10::metal::threadgroup_argmax(values, indices, v, long(i), t, n);\n", "").replace(
        "    maxima[group] = largest;\n    argmaxima[group] = where;\n", "").replace(
        "threadgroup float partial[32];", "threadgroup int partial[32];").replace(
        "threadgroup_sum(partial, v, t, n)", "threadgroup_sum(partial, int(v), t, n)")
    text = compile_library(source)[1].text
    group = text[text.index("helpers__shimkit_group"):]
    assert "threadgroup_reduce(" not in group, group
    assert group.count("shimkit_g.region(") == 5 and group.count("shimkit_g.lanes(") == 2, group
    assert len(re.findall(r"bool shimkit_m\d+\[", group)) == 1, group  # the mask of `idx < ...` only
    assert "kMaxGroupThreads]; std::memcpy" not in group  # no inlined function's mask is copied


def test_c10s_nan_propagating_max_inlined_combines_twice_with_no_returned_flag():
    """c10's simd_max for floats returns NaN early when `simd_any(isnan(val))`: a vote, one value for every
    lane of a simdgroup, so either all of a simdgroup's lanes return early or none does. The max is then
    combined for every lane and the return chooses: threadgroup_max is threadgroup_sum's five regions with
    both its simd_max calls two combines back to back, and no returned flag or mask of its own. (Of half:
    float's is one group-level step, below.)"""
    source = C10_HELPERS.replace("  auto total = c10::metal::threadgroup_sum(partial, v, t, n);\n", "").replace(
        "  auto where = c10::metal::threadgroup_argmax(values, indices, v, long(i), t, n);\n", "").replace(
        "    sums[group] = total;\n", "").replace("    argmaxima[group] = where;\n", "").replace(
        "threadgroup float partial[32];", "threadgroup half partial[32];").replace(
        "threadgroup_max(partial, v, t, n)", "threadgroup_max(partial, half(v), t, n)")
    text = compile_library(source)[1].text
    group = text[text.index("helpers__shimkit_group"):]
    assert "threadgroup_reduce(" not in group, group
    assert group.count("shimkit_g.region(") == 5 and group.count("shimkit_g.lanes(") == 4, group
    assert not re.search(r"bool shimkit_x\d+\[", group), group
    assert len(re.findall(r"bool shimkit_m\d+\[", group)) == 1, group  # the mask of `idx < ...` only


C10_STEPS = """
#include <c10/metal/reduction_utils.h>
using namespace metal;
kernel void steps(device float* out, constant float* in, constant uint& limit, constant uint& shift,
                  uint i [[thread_position_in_grid]], uint t [[thread_position_in_threadgroup]],
                  uint n [[threads_per_threadgroup]]) {
  threadgroup float partial[32];
  threadgroup long indices[32];
  if (i >= limit) return;
  const float v = in[i];
  const uint idx = (t + shift) % n;
  const float total = c10::metal::threadgroup_sum(partial, v, idx, n);
  const float product = c10::metal::threadgroup_prod(partial, v, idx, n);
  const float largest = c10::metal::threadgroup_max(partial, v, idx, n);
  const float smallest = c10::metal::threadgroup_min(partial, v, idx, n);
  const long first_largest = c10::metal::threadgroup_argmax(partial, indices, v, long(i), idx, n);
  const long first_smallest = c10::metal::threadgroup_argmin(partial, indices, v, long(i), idx, n);
  out[6 * i] = total;
  out[6 * i + 1] = product;
  out[6 * i + 2] = largest;
  out[6 * i + 3] = smallest;
  out[6 * i + 4] = float(first_largest);
  out[6 * i + 5] = float(first_smallest);
}
"""


def test_c10s_float_reductions_are_one_group_level_step_each():
    """c10's threadgroup_sum, _prod, _max, _min, _argmax and _argmin of float run as a step over the group
    (LoopGroup::threadgroup_reduce, threadgroup_arg_reduce; POCL's work-group functions), not as their
    inlined regions: the kernel is the caller's seven regions before, between and after the calls, and six
    steps."""
    text = compile_library(C10_STEPS)[1].text
    group = text[text.index("steps__shimkit_group"):]
    assert group.count("shimkit_g.threadgroup_reduce(") == 4, group
    assert group.count("shimkit_g.threadgroup_arg_reduce(") == 2, group
    for combine in ("Sum", "Product", "Max", "Min", "ArgMax", "ArgMin"):
        assert f"::shimkit_metal::c10_lanes::{combine}{{}}" in group
    assert "shimkit_g.lanes(" not in group and group.count("shimkit_g.region(") == 7, group


@given(group=st.integers(1, 256), groups=st.integers(1, 3), shift=st.sampled_from([0, 0, 1, 31, 33]),
       returned=st.integers(0, 40),
       values=st.lists(st.floats(-2, 2, width=32) | st.just(float("nan")), min_size=1, max_size=300))
@settings(max_examples=30)
def test_c10s_reductions_as_group_steps_compute_what_fibers_compute(group, groups, shift, returned, values):
    """Bit for bit against the same kernel on fibers (which run c10's helpers as written): every thread at
    its own index (the step's fast path), indices shifted (`idx` not the thread's: each stage's threads are
    others), and threads that returned before the calls."""
    split = ShaderLibrary(C10_STEPS).steps
    fibers = ShaderLibrary(C10_STEPS, split_barriers=False).steps
    assert split.execution == "split", split.fibers_because
    threads = group * groups
    x = torch.tensor((values * (threads // len(values) + 1))[:threads], dtype=torch.float32)
    limit = max(threads - returned, 0)
    results = []
    for kernel in (split, fibers):
        out = torch.full((6 * threads,), -7.0)
        kernel(out, x, limit, shift, threads=threads, group_size=group)
        results.append(out)
    assert torch.equal(results[0].isnan(), results[1].isnan())
    assert torch.equal(results[0].nan_to_num(0.5), results[1].nan_to_num(0.5))


NOT_C10S = """
#include <metal_stdlib>
using namespace metal;
namespace c10 { namespace metal {
template <typename T>
T threadgroup_sum(threadgroup T* data, T val, unsigned idx, unsigned size) {
  data[idx] = val;
  ::metal::threadgroup_barrier(::metal::mem_flags::mem_threadgroup);
  T total = 0;
  for (unsigned k = 0; k < size; ++k) total += data[k];
  ::metal::threadgroup_barrier(::metal::mem_flags::mem_threadgroup);
  return total;
}
} }
kernel void own(device float* out, constant float* in, uint i [[thread_position_in_grid]],
                uint t [[thread_position_in_threadgroup]], uint n [[threads_per_threadgroup]]) {
  threadgroup float partial[256];
  out[i] = c10::metal::threadgroup_sum(partial, in[i], t, n);
}
"""


def test_a_helper_of_c10s_name_but_another_body_is_inlined_as_written():
    """The step stands for the body of torch's header only (its digest): a function of the same name and
    signature with another body is inlined, and computes what it says."""
    kernel = ShaderLibrary(NOT_C10S).own
    assert kernel.execution == "split", kernel.fibers_because
    assert "threadgroup_reduce(" not in compile_library(NOT_C10S)[1].text
    x = torch.arange(64, dtype=torch.float32)
    out = torch.zeros(64)
    kernel(out, x, threads=64, group_size=16)
    assert torch.equal(out, x.view(4, 16).sum(1).repeat_interleave(16))


RECOMPUTED = """
#include <metal_stdlib>
using namespace metal;
void bump(thread uint& v) { v += 1; }
kernel void positions(device uint* out, constant uint& n, uint i [[thread_position_in_grid]],
                      uint t [[thread_position_in_threadgroup]], uint size [[threads_per_threadgroup]]) {
  threadgroup uint shared[256];
  uint s = n;
  const uint once = n * 2;
  const uint kept = t * 3 + s;
  const uint again = t * 5 + once + (size - 1);
  const uint twice = again ^ i;
  uint stepped = i;
  uint through = t;
  s = n + 7;
  stepped += 2;
  bump(through);
  shared[t] = kept;
  threadgroup_barrier(mem_flags::mem_threadgroup);
  out[i] = shared[(t + 1) % size] + kept + again + twice + stepped + through + s;
}
"""


@given(group=st.integers(1, 256), groups=st.integers(1, 3), n=st.integers(0, 2**20))
def test_a_variable_of_thread_positions_alone_is_recomputed_in_each_region(group, groups, n):
    """A variable assigned once, by its initialisation, from thread positions, constants and values that
    never change after (`again`, `twice`) is computed again in each region that names it, with no per-thread
    array; one that depends on a value assigned again later (`kept`), is assigned again itself (`stepped`) or
    is passed by reference (`through`) keeps its array. The kernel computes what it does on fibers."""
    text = compile_library(RECOMPUTED)[1].text
    group_function = text[text.index("positions__shimkit_group"):]
    for name in ("again", "twice"):
        assert re.search(rf"std::remove_cv_t<[^>]*> {name} = \(", group_function), name
        assert f"auto& {name} =" not in group_function, name
    for name in ("kept", "stepped", "through"):
        assert f"auto& {name} =" in group_function, name
    split, fibers = ShaderLibrary(RECOMPUTED).positions, ShaderLibrary(RECOMPUTED, split_barriers=False).positions
    assert split.execution == "split", split.fibers_because
    expected, actual = torch.zeros(group * groups, dtype=torch.int32), torch.ones(group * groups, dtype=torch.int32)
    fibers(expected, n, threads=group * groups, group_size=group)
    split(actual, n, threads=group * groups, group_size=group)
    assert torch.equal(actual, expected)


EARLY_RETURNS = """
#include <metal_stdlib>
using namespace metal;
float nan_max(float v) {
  if (simd_any(isnan(v))) {
    return numeric_limits<float>::quiet_NaN();
  }
  return simd_max(v);
}
float none_small_or_sum(float v) {
  if (simd_all(v > -0.5f)) return -1.0f;
  return simd_sum(float(v));
}
float guarded_sum(constant float* in, uint i, uint n) {
  if (simd_any(i >= n)) return 0.0f;
  return simd_sum(in[i]);
}
kernel void early(device float* out, constant float* in, constant uint& n, uint i [[thread_position_in_grid]]) {
  const float v = i < n ? in[i] : 0.0f;
  const float largest = nan_max(v);
  const float total = none_small_or_sum(v);
  const float guarded = guarded_sum(in, i, n);
  out[3 * i] = largest;
  out[3 * i + 1] = total;
  out[3 * i + 2] = guarded;
}
"""


@given(group=st.integers(1, 96), groups=st.integers(1, 3), short=st.integers(0, 40),
       values=st.lists(st.floats(-1e3, 1e3, width=32) | st.just(float("nan")), min_size=1, max_size=300))
def test_an_early_return_on_a_vote_computes_what_fibers_compute(group, groups, short, values):
    """Where the value after a vote's early return may be combined for every lane (`nan_max`, and
    `none_small_or_sum`'s conversion to float) it is, and where that would read memory a returning lane
    must not (`guarded_sum`'s `in[i]` past `n`) the return keeps its flag: fibers give the same bits."""
    split = ShaderLibrary(EARLY_RETURNS).early
    fibers = ShaderLibrary(EARLY_RETURNS, split_barriers=False).early
    assert split.execution == "split", split.fibers_because
    threads = group * groups
    n = max(0, threads - short)
    x = torch.tensor((values * (n // len(values) + 1))[:n], dtype=torch.float32)
    results = []
    for kernel in (split, fibers):
        out = torch.full((3 * threads,), 123.0)
        kernel(out, x, n, threads=threads, group_size=group)
        results.append(out)
    assert torch.equal(results[0].isnan(), results[1].isnan())
    assert torch.equal(results[0].nan_to_num(), results[1].nan_to_num())
    text = compile_library(EARLY_RETURNS)[1].text
    early = text[text.index("early__shimkit_group"):]
    assert len(re.findall(r"bool shimkit_x\d+\[", early)) == 1, early  # guarded_sum's returned flag only


def test_the_splitter_reads_metal_stdlib_precompiled_and_splits_as_from_the_header(tmp_path):
    translation = _translation(C10_HELPERS, False)
    kernels = {_qualified(k.function): k.parameters for k in translation.kernels.values() if k.cooperative}
    compiler = tuple(compiler_command())
    store = Store(tmp_path)
    precompiled = split_translation(translation.text, kernels, INCLUDE_DIR, compiler, store)
    [header] = tmp_path.glob("libclang-pch/*/metal_stdlib.pch")
    parsed = split_translation(translation.text, kernels, INCLUDE_DIR, compiler)
    assert precompiled.split == parsed.split == set(kernels)
    assert precompiled.text == parsed.text
    header.write_bytes(b"not a precompiled header")  # a libclang that refuses it: the header is parsed
    assert split_translation(translation.text, kernels, INCLUDE_DIR, compiler, store).text == parsed.text


def test_threadgroup_memory_is_named_in_regions_through_one_reference_per_group():
    # The front end's `static thread_local` for threadgroup memory: a -fPIC library reaches a thread_local
    # through a __tls_get_addr call, which GCC repeated at uses inside the regions' loops.
    text = compile_library(C10_HELPERS)[1].text
    group = text[text.index("helpers__shimkit_group"):]
    for name in ("partial", "values", "indices"):
        assert len(re.findall(rf"\b{name}\b", group)) == 2, group  # declared, and its address taken once
        assert re.search(rf"auto& shimkit_g\d+ = \*::shimkit_metal::opaque\(&{name}\);", group), group

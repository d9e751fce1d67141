"""shimkit.metal's own fiber context switch (metal/include/shimkit_metal/context.h) against glibc's
ucontext, element for element: generated barrier programs (a uniform loop of a random number of rounds,
each two barrier regions reading other threads' threadgroup memory, a uniform branch choosing between
simdgroup functions) at group sizes that are and are not multiples of 32, with partial edge groups; and
a Python model of the same program, so that both paths are checked against something neither wrote. The
same program split into work-group loops (metal/loops/, the default) is held to the same answers."""

from __future__ import annotations

import numpy as np
import torch
from hypothesis import given
from hypothesis import strategies as st

from shimkit.metal.library import ShaderLibrary

ROUNDS = """
#include <metal_stdlib>
using namespace metal;
kernel void rounds(device uint* out, constant uint* in, constant uint& count, constant uint* shifts,
                   uint i [[thread_position_in_grid]], uint t [[thread_position_in_threadgroup]],
                   uint n [[threads_per_threadgroup]]) {
  threadgroup uint shared[1024];
  uint mine = in[i];
  for (uint r = 0; r < count; ++r) {
    shared[t] = mine;
    threadgroup_barrier(mem_flags::mem_threadgroup);
    mine = mine * 3u + shared[(t + shifts[r]) % n];
    if (shifts[r] % 3 == 0) {
      mine += simd_sum(mine);
    } else if (shifts[r] % 3 == 1) {
      mine ^= simd_prefix_exclusive_sum(mine);
    } else {
      mine += simd_max(mine) - simd_broadcast_first(mine);
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);
  }
  out[i] = mine;
}
"""
FAST = ShaderLibrary(ROUNDS, split_barriers=False)
UCONTEXT = ShaderLibrary(ROUNDS, ucontext_fibers=True, split_barriers=False)
SPLIT = ShaderLibrary(ROUNDS)
MASK = 0xFFFFFFFF


def model(values: list[int], group: int, shifts: list[int]) -> list[int]:
    """Metal's definition of the program, one threadgroup at a time, in 32-bit unsigned arithmetic."""
    out = []
    for start in range(0, len(values), group):
        mine = np.array(values[start:start + group], dtype=np.uint64)
        n = len(mine)
        simds = [slice(s, min(s + 32, n)) for s in range(0, n, 32)]
        for shift in shifts:
            shared = mine.copy()
            mine = (mine * 3 + shared[(np.arange(n) + shift) % n]) & MASK
            for lanes in simds:
                part = mine[lanes]
                if shift % 3 == 0:
                    part = (part + part.sum()) & MASK
                elif shift % 3 == 1:
                    part = part ^ ((np.cumsum(part) - part) & MASK)
                else:
                    part = (part + part.max() - part[0]) & MASK
                mine[lanes] = part
        out.extend(int(v) for v in mine)
    return out


@given(st.integers(1, 300), st.integers(1, 96), st.lists(st.integers(0, 200), max_size=6), st.integers(0, 2**31))
def test_generated_barrier_programs_agree_on_both_fiber_switches_and_with_metals_definition(
        threads, group, shifts, seed):
    values = torch.randint(0, 2**31, (threads,), generator=torch.Generator().manual_seed(seed), dtype=torch.int64)
    inputs = values.to(torch.int32)
    shift_buffer = torch.tensor(shifts or [0], dtype=torch.int32)
    results = []
    for library in (FAST, UCONTEXT, SPLIT):
        out = torch.zeros(threads, dtype=torch.int32)
        library.rounds(out, inputs, len(shifts), shift_buffer, threads=(threads,), group_size=(group,))
        results.append(out)
    assert torch.equal(results[0], results[1]) and torch.equal(results[0], results[2])
    expected = model(values.tolist(), group, shifts)
    assert (results[0].to(torch.int64) & MASK).tolist() == expected


def test_both_switches_report_which_way_the_kernel_runs():
    assert FAST.rounds.execution == UCONTEXT.rounds.execution == "fibers"
    assert SPLIT.rounds.execution == "split"

"""What shimkit.metal computes, checked against Metal's rules written out in Python: the grid and its
partial edge threadgroups, threadgroup memory and barriers, simdgroup functions over 32 lanes (with
inactive lanes), half/bfloat rounding, atomics, vectors and swizzles; and the errors it gives."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from shimkit.csrc.build import compiler_command
from shimkit.metal import MetalSourceError, compile_shader
from shimkit.metal.library import (EAGER_KERNELS, FLAGS, INCLUDE_DIR, ShaderLibrary, _is_gcc, _precompiled_header,
                                   compile_library)

COORDINATES = compile_shader("""
kernel void where(device uint* out,
                  uint3 grid [[thread_position_in_grid]], uint3 local [[thread_position_in_threadgroup]],
                  uint3 group [[threadgroup_position_in_grid]], uint3 size [[threads_per_threadgroup]],
                  uint3 groups [[threadgroups_per_grid]], uint3 total [[threads_per_grid]],
                  uint index [[thread_index_in_threadgroup]], uint lane [[thread_index_in_simdgroup]],
                  uint simd [[simdgroup_index_in_threadgroup]], uint simds [[simdgroups_per_threadgroup]]) {
  uint at = (grid.z * total.y + grid.y) * total.x + grid.x;
  device uint* o = out + at * 12;
  o[0] = local.x; o[1] = local.y; o[2] = group.x; o[3] = group.y; o[4] = size.x; o[5] = size.y;
  o[6] = groups.x; o[7] = groups.y; o[8] = index; o[9] = lane; o[10] = simd; o[11] = simds;
}
""")


@given(st.integers(1, 70), st.integers(1, 9), st.integers(1, 40), st.integers(1, 4))
def test_a_grid_that_is_not_a_multiple_of_the_group_has_partial_edge_groups(width, height, group_x, group_y):
    out = torch.full((height, width, 12), 999, dtype=torch.int32)
    COORDINATES.where(out, threads=(width, height), group_size=(group_x, group_y))
    for y in range(height):
        for x in range(width):
            size_x = min(group_x, width - x // group_x * group_x)
            size_y = min(group_y, height - y // group_y * group_y)
            index = (y % group_y) * size_x + x % group_x
            count = size_x * size_y
            expected = [x % group_x, y % group_y, x // group_x, y // group_y, size_x, size_y,
                        -(-width // group_x), -(-height // group_y), index, index % 32, index // 32,
                        -(-count // 32)]
            assert out[y, x].tolist() == expected, (x, y)


SYNC_SOURCE = """
#include <metal_stdlib>
using namespace metal;

kernel void reverse_in_group(device int* out, constant int* in,
                             uint i [[thread_position_in_grid]], uint t [[thread_position_in_threadgroup]],
                             uint n [[threads_per_threadgroup]]) {
  threadgroup int shared[1024];
  shared[t] = in[i];
  threadgroup_barrier(mem_flags::mem_threadgroup);
  out[i] = shared[n - 1 - t];
}

kernel void simd_ops(device int* out, constant int* in, uint i [[thread_position_in_grid]]) {
  int v = in[i];
  device int* o = out + i * 9;
  o[0] = simd_sum(v);
  o[1] = simd_prefix_exclusive_sum(v);
  o[2] = simd_prefix_inclusive_sum(v);
  o[3] = simd_shuffle_down(v, 3);
  o[4] = simd_shuffle_xor(v, 5);
  o[5] = simd_broadcast(v, 2);
  o[6] = simd_max(v);
  o[7] = int(uint(ulong(simd_ballot(v > 0)) & 0xffffffffu));
  o[8] = simd_shuffle_and_fill_down(v, -v, 4);
}

kernel void divergent(device int* out, constant int* in, uint i [[thread_position_in_grid]],
                      uint lane [[thread_index_in_simdgroup]]) {
  if (lane % 2 == 0) {
    out[i] = simd_sum(in[i]);
  } else {
    out[i] = -1;
  }
}

kernel void early_return(device int* out, uint i [[thread_position_in_grid]]) {
  threadgroup int shared[64];
  if (i % 2 == 1) return;
  shared[i] = int(i) * 10;
  threadgroup_barrier(mem_flags::mem_threadgroup);
  out[i] = shared[(i + 2) % 64];
}
"""
SYNC = compile_shader(SYNC_SOURCE)


@given(st.integers(1, 200), st.integers(1, 8))
def test_threadgroup_memory_is_shared_by_one_group_and_the_barrier_orders_it(n, groups_of):
    group = min(1024, max(1, n // groups_of))
    values = torch.arange(n, dtype=torch.int32) * 7
    out = torch.empty_like(values)
    SYNC.reverse_in_group(out, values, group_size=group)
    expected = torch.cat([chunk.flip(0) for chunk in values.split(group)])
    assert torch.equal(out, expected)


def simd_reference(values: list[int]) -> list[list[int]]:
    """Metal's simdgroup functions over one threadgroup's lanes, 32 per simdgroup, the last one partial."""
    rows = []
    for start in range(0, len(values), 32):
        lanes = values[start:start + 32]
        active = len(lanes)

        def lane(i, own):
            return lanes[i] if 0 <= i < active else own

        def fill_down(i):  # an inactive lane inside the simdgroup reads 0, as on Apple silicon (c10 counts on it)
            return lanes[i] if i < active else 0

        ballot = sum(1 << k for k, v in enumerate(lanes) if v > 0)
        ballot = ballot - (1 << 32) if ballot >= 1 << 31 else ballot
        for k, v in enumerate(lanes):
            fill = -lanes[k + 4 - 32] if k + 4 >= 32 and k + 4 - 32 < active else v
            rows.append([sum(lanes), sum(lanes[:k]), sum(lanes[:k + 1]), lane(k + 3, v), lane(k ^ 5, v),
                         lane(2, v), max(lanes), ballot, fill_down(k + 4) if k + 4 < 32 else fill])
    return rows


@given(st.lists(st.integers(-1000, 1000), min_size=1, max_size=100))
def test_simdgroup_functions_match_metals_definitions(values):
    data = torch.tensor(values, dtype=torch.int32)
    out = torch.empty(len(values), 9, dtype=torch.int32)
    SYNC.simd_ops(out, data, threads=len(values), group_size=len(values))
    assert out.tolist() == simd_reference(values)


def test_lanes_in_another_branch_take_no_part_in_a_simdgroup_function():
    data = torch.arange(64, dtype=torch.int32)
    out = torch.empty_like(data)
    SYNC.divergent(out, data, group_size=64)
    for simd in range(2):
        even = sum(range(simd * 32, simd * 32 + 32, 2))
        assert out[simd * 32:(simd + 1) * 32:2].tolist() == [even] * 16
        assert out[simd * 32 + 1:(simd + 1) * 32:2].tolist() == [-1] * 16


def test_threads_that_returned_are_not_waited_for_at_a_barrier():
    """Metal leaves it undefined; Apple GPUs, and shimkit.metal, release the barrier once every thread
    still running has reached it (docs/metal.md)."""
    out = torch.full((64,), -1, dtype=torch.int32)
    SYNC.early_return(out, group_size=64)
    assert out[0::2].tolist() == [(i + 2) % 64 * 10 for i in range(0, 64, 2)]
    assert out[1::2].tolist() == [-1] * 32


ARITHMETIC = compile_shader("""
#include <metal_stdlib>
using namespace metal;
kernel void half_ops(device half* out, constant half* a, constant half* b, uint i [[thread_position_in_grid]]) {
  out[i] = a[i] * b[i] + a[i];
}
kernel void bfloat_ops(device bfloat* out, constant bfloat* a, constant bfloat* b, uint i [[thread_position_in_grid]]) {
  out[i] = a[i] * b[i] + a[i];
}
kernel void atomics(device atomic_int* count, device atomic_float* total, constant float* x,
                    uint i [[thread_position_in_grid]]) {
  atomic_fetch_add_explicit(count, 1, memory_order_relaxed);
  atomic_fetch_add_explicit(total, x[i], memory_order_relaxed);
  atomic_fetch_max_explicit(count + 1, int(i), memory_order_relaxed);
}
kernel void vectors(device float4* out, constant float4* in, uint i [[thread_position_in_grid]]) {
  float4 v = in[i];
  v.xy = v.yx;
  v.zw += float2(1.0, 2.0);
  float3 w = v.zyx;
  out[i] = select(float4(w, as_type<float>(as_type<uint>(v.w))), float4(0), isnan(v));
}
""")

FLOATS = st.floats(-300, 300, width=16) | st.sampled_from([float("nan"), float("inf"), -float("inf"), 0.0, -0.0])


@given(st.lists(st.tuples(FLOATS, FLOATS), min_size=1, max_size=64))
def test_half_and_bfloat_round_after_every_operation(pairs):
    for dtype, kernel in ((torch.float16, ARITHMETIC.half_ops), (torch.bfloat16, ARITHMETIC.bfloat_ops)):
        a = torch.tensor([p[0] for p in pairs]).to(dtype)
        b = torch.tensor([p[1] for p in pairs]).to(dtype)
        out = torch.empty_like(a)
        kernel(out, a, b)
        torch.testing.assert_close(out, a * b + a, rtol=0, atol=0, equal_nan=True)


def test_atomics_from_every_thread_land():
    x = torch.linspace(0, 1, 3000)
    count = torch.zeros(2, dtype=torch.int32)
    total = torch.zeros(1)
    ARITHMETIC.atomics(count, total, x, threads=3000, group_size=256)
    assert count.tolist() == [3000, 2999]
    torch.testing.assert_close(total, x.sum().reshape(1), rtol=1e-5, atol=1e-3)


def test_vectors_swizzles_select_and_as_type():
    data = torch.tensor([[1.0, 2.0, 3.0, 4.0], [float("nan"), 5.0, 6.0, 7.0]])
    out = torch.empty_like(data)
    ARITHMETIC.vectors(out, data, threads=2)
    # (1,2,3,4): xy swapped (2,1,3,4), zw += (1,2) (2,1,4,6), w = zyx (4,1,2); no NaN to select away.
    assert out[0].tolist() == [4.0, 1.0, 2.0, 6.0]
    # (nan,5,6,7) -> (5,nan,6,7) -> (5,nan,7,9) -> w = (7,nan,5); select zeroes where v is NaN: lane y.
    assert out[1].tolist() == [7.0, 0.0, 5.0, 9.0]


def test_kernel_properties():
    kernel = SYNC.reverse_in_group
    assert kernel.thread_execution_width == 32
    assert kernel.max_threads_per_threadgroup == 1024
    assert kernel.static_thread_group_memory_length == 4096
    limited = compile_shader("[[max_total_threads_per_threadgroup(64)]] kernel void k(device float* x, "
                             "uint i [[thread_position_in_grid]]) { x[i] = 0; }")
    assert limited.k.max_threads_per_threadgroup == 64
    assert limited.k.execution == "loop" and kernel.execution == "split" and "split" in repr(kernel)
    assert ShaderLibrary(SYNC_SOURCE, split_barriers=False).reverse_in_group.execution == "fibers"


def test_templates_are_reachable_under_their_host_name():
    lib = compile_shader("""
    template <typename T> kernel void fill(device T* out, constant T& v, uint i [[thread_position_in_grid]]) {
      out[i] = v;
    }
    template [[host_name("fill_float")]] kernel void fill<float>(device float*, constant float&, uint);
    template [[host_name("fill_int")]] kernel void fill<int>(device int*, constant int&, uint);
    """)
    assert dir(lib) == ["fill_float", "fill_int"]
    x = torch.zeros(3, dtype=torch.int32)
    lib.fill_int(x, 7, arg_casts="int32")
    assert x.tolist() == [7, 7, 7]


@pytest.mark.parametrize("source, construct", [
    ("kernel void k(texture2d<float> t [[texture(0)]]) {}", "textures"),
    ("kernel void k(device float* x) { simdgroup_float8x8 m; }", "simdgroup matrices"),
    ("#include <metal_tensor>\nkernel void k(device float* x) {}", "Metal 4 tensors"),
])
def test_unsupported_constructs_are_named_with_their_line(source, construct):
    with pytest.raises(MetalSourceError, match=construct):
        compile_shader(source)


def test_wrong_arguments_are_refused_clearly():
    lib = compile_shader("kernel void k(device float* x, uint i [[thread_position_in_grid]]) { x[i] = 1; }")
    with pytest.raises(ValueError, match=r"argument 0 is not dense \(strides \(2,\) for shape \(4,\)\)"):
        lib.k(torch.zeros(8)[::2])
    with pytest.raises(ValueError, match=r"argument 0 is not dense"):
        lib.k(torch.zeros(1).expand(4))
    transposed = torch.zeros(3, 2).t()  # dense: the buffer is exactly its six elements
    lib.k(transposed)
    assert transposed.eq(1).all()
    with pytest.raises(ValueError, match=r"threads must be an int or 1 to 3 ints"):
        lib.k(torch.zeros(4), threads=(1, 1, 1, 1))
    with pytest.raises(ValueError, match="group_size has 2 entries but threads has 1"):
        lib.k(torch.zeros(4), threads=4, group_size=(2, 2))
    with pytest.raises(ValueError, match="unknown arg_casts dtype 'fp8'"):
        lib.k(torch.zeros(4), arg_casts="fp8")
    with pytest.raises(TypeError, match="argument 0 is a str"):
        lib.k("x", threads=1)


def test_a_compiled_library_is_reused_for_the_same_source():
    source = "kernel void k(device float* x, uint i [[thread_position_in_grid]]) { x[i] = 2; }"
    assert compile_library(source)[0] is compile_library(source)[0]


def _compile_after(barrier, source) -> None:
    import os

    barrier.wait()
    library, _ = compile_library(source)
    x = torch.zeros(4)
    compile_shader(source).fill(x, threads=4)  # the library just built, from this process's cache
    os._exit(0 if hasattr(library, "shimkit_launch_0") and x.tolist() == [7.0] * 4 else 1)


def test_processes_compiling_one_library_at_once_all_get_a_whole_one(tmp_path, monkeypatch):
    # Twelve test workers once compiled one shader together: one compiled another's half-written source
    # into a library without kernels, cached on disk for every later run ("undefined symbol").
    import multiprocessing

    monkeypatch.setenv("SHIMKIT_BUILD_DIR", str(tmp_path))
    source = ("kernel void fill(device float* x, uint i [[thread_position_in_grid]]) { x[i] = 7; }\n"
              + "".join(f"kernel void pad{n}(device float* x, uint i [[thread_position_in_grid]]) {{ x[i] = {n}; }}\n"
                        for n in range(60)))
    context = multiprocessing.get_context("fork")
    barrier = context.Barrier(4)
    builders = [context.Process(target=_compile_after, args=(barrier, source)) for _ in range(4)]
    for builder in builders:
        builder.start()
    for builder in builders:
        builder.join(300)
    assert [builder.exitcode for builder in builders] == [0] * 4
    entries = (tmp_path / "metal-library").iterdir()
    assert {tuple(sorted(path.name for path in entry.iterdir())) for entry in entries if entry.is_dir()} \
        == {("library.cpp", "library.so", "manifest.json")}  # nothing half-done is left behind


@pytest.mark.skipif(not _is_gcc(tuple(compiler_command())), reason="a .gch found beside a header is GCC's")
def test_libraries_read_metal_stdlib_precompiled_and_parse_it_where_that_cannot_be_built(tmp_path, monkeypatch):
    monkeypatch.setenv("SHIMKIT_BUILD_DIR", str(tmp_path))
    compiler, flags = tuple(compiler_command()), tuple(f for f in FLAGS if f != "-shared")
    [include] = _precompiled_header(compiler, flags)
    folder = include.removeprefix("-I")
    assert folder.startswith(str(tmp_path))
    # -H lists each header read; "!" marks a valid precompiled one, "x" one GCC found and refused.
    read = subprocess.run([*compiler, *flags, include, f"-I{INCLUDE_DIR}", "-H", "-fsyntax-only", "-x", "c++", "-"],
                          input='#include "metal_stdlib"\n', capture_output=True, text=True, check=True)
    assert f"! {folder}/metal_stdlib.gch" in read.stderr.splitlines()
    assert _precompiled_header(compiler, (*flags, "-fno-such-option")) == []
    kept = sorted(p.relative_to(tmp_path / "metal-pch") for p in (tmp_path / "metal-pch").rglob("*") if p.is_file())
    assert [p.name for p in kept if len(p.parts) > 1] == ["manifest.json", "metal_stdlib.gch"]
    assert all(p.suffix == ".lock" for p in kept if len(p.parts) == 1)  # the failed build leaves no half


def test_a_library_of_many_kernels_compiles_each_on_first_use():
    # As ATen's sort (700 template instantiations): a caller uses few, and only those are compiled.
    count = EAGER_KERNELS + 4
    source = ("template <int N> kernel void put(device float* x, uint i [[thread_position_in_grid]]) { x[i] = N; }\n"
              + "".join(f'template [[host_name("put{n}")]] kernel void put<{n}>(device float*, uint);\n'
                        for n in range(count)))
    lib = compile_shader(source)
    assert dir(lib) == sorted(f"put{n}" for n in range(count))
    for n in (3, count - 1):
        x = torch.zeros(5)
        getattr(lib, f"put{n}")(x, threads=5)
        assert x.tolist() == [float(n)] * 5
    only_three = compile_library(source, kernels=("put3",))[0]
    assert hasattr(only_three, "shimkit_launch_3") and not hasattr(only_three, "shimkit_launch_4")
    with pytest.raises(AttributeError, match="no kernel 'put99'"):
        lib.put99


EXTREMA = compile_shader("""
#include <metal_stdlib>
using namespace metal;
kernel void extrema(device float* out, constant float* a, constant float* b, uint i [[thread_position_in_grid]]) {
  out[4 * i] = max(a[i], b[i]);
  out[4 * i + 1] = min(a[i], b[i]);
  out[4 * i + 2] = fmax(a[i], b[i]);
  out[4 * i + 3] = simd_max(a[i]);
}
""")


@given(st.lists(st.tuples(FLOATS, FLOATS), min_size=1, max_size=64))
def test_max_and_min_take_the_number_where_one_side_is_nan(pairs):
    # Metal's max, min and fmax are IEEE maxNum / minNum: a NaN loses to a number (torch's fmax / fmin).
    a = torch.tensor([p[0] for p in pairs])
    b = torch.tensor([p[1] for p in pairs])
    out = torch.empty(4 * len(pairs))
    EXTREMA.extrema(out, a, b, threads=len(pairs), group_size=len(pairs))
    got = out.view(-1, 4)
    torch.testing.assert_close(got[:, 0], torch.fmax(a, b), rtol=0, atol=0, equal_nan=True)
    torch.testing.assert_close(got[:, 1], torch.fmin(a, b), rtol=0, atol=0, equal_nan=True)
    torch.testing.assert_close(got[:, 2], torch.fmax(a, b), rtol=0, atol=0, equal_nan=True)
    # Every lane of one simdgroup: the largest number of its lanes, NaN only where all are NaN.
    for first in range(0, len(pairs), 32):
        lanes = a[first:first + 32]
        numbers = lanes[~lanes.isnan()]
        expected = numbers.max() if len(numbers) else torch.tensor(float("nan"))
        torch.testing.assert_close(got[first:first + 32, 3], expected.expand(len(lanes)), rtol=0, atol=0,
                                   equal_nan=True)


AXPB_SOURCE = """
kernel void axpb(device float* y, constant float* x, uint i [[thread_position_in_grid]]) { y[i] = 2 * x[i] + 1; }
"""
AXPB = compile_shader(AXPB_SOURCE)


def _axpb_in_forked_child(size: int) -> None:
    import os

    torch.set_num_threads(1)  # the child must not wait on the parent's OpenMP threads either
    x = torch.arange(size, dtype=torch.float32)
    y = torch.empty(size)
    AXPB.axpb(y, x, threads=size)
    os._exit(0 if torch.equal(y, 2 * x + 1) else 1)


def test_launch_workers_serve_launch_after_launch_and_a_forked_child_starts_its_own():
    """Grids of 64K threads and more run on a pool of threads that outlives each launch; the audit forks its
    workers after kernels ran, and a child waiting on the parent's pool threads (which it does not have) would
    hang: it makes its own."""
    import multiprocessing

    size = 1 << 17
    x = torch.randn(size)
    for _ in range(3):
        y = torch.full((size,), float("nan"))
        AXPB.axpb(y, x, threads=size)
        torch.testing.assert_close(y, 2 * x + 1, rtol=0, atol=0)
    child = multiprocessing.get_context("fork").Process(target=_axpb_in_forked_child, args=(size,))
    child.start()
    child.join(120)
    if child.exitcode is None:
        child.kill()
    assert child.exitcode == 0


def test_launches_from_several_host_threads_at_once_each_compute_their_own_grid():
    """One launch holds the pool (its workers spin between launches, then sleep); a launch that finds it held
    runs on threads of its own. Launches back to back from four host threads must each see only their own
    job, whichever way they ran."""
    from concurrent.futures import ThreadPoolExecutor

    size = 1 << 17

    def launch_again_and_again(offset: int) -> bool:
        x = torch.arange(size, dtype=torch.float32) + offset
        for _ in range(25):
            y = torch.full((size,), float("nan"))
            AXPB.axpb(y, x, threads=size)
            if not torch.equal(y, 2 * x + 1):
                return False
        return True

    with ThreadPoolExecutor(4) as host_threads:
        assert all(host_threads.map(launch_again_and_again, range(4)))


def _needed(library: Path) -> list[str]:
    dynamic = subprocess.run(["readelf", "-d", str(library)], capture_output=True, text=True, check=True).stdout
    return re.findall(r"\(NEEDED\)\s+Shared library: \[(libshimkit_metal_runtime_\w+\.so)\]", dynamic)


def test_kernel_libraries_link_one_runtime_per_set_of_flags_and_share_its_worker_pool():
    """The worker pool, the fiber scheduler and the lane records are compiled once per set of flags
    (shimkit_metal/runtime.cpp) into a library every kernel library needs, not into each of them: libraries
    of one set of flags need the same runtime and hold no pool of their own, a build with other flags
    (ucontext fibers) needs another, and launches of two libraries from host threads at once each compute
    their own grid on the one pool."""
    from concurrent.futures import ThreadPoolExecutor

    source = ("kernel void axpc(device float* y, constant float* x, uint i [[thread_position_in_grid]]) "
              "{ y[i] = 3 * x[i] - 1; }")
    plain, _ = compile_library(source)
    fibers_by_ucontext, _ = compile_library(source, ucontext_fibers=True)
    axpb, _ = compile_library(AXPB_SOURCE)
    runtimes = [_needed(Path(axpb._name)), _needed(Path(plain._name)), _needed(Path(fibers_by_ucontext._name))]
    assert runtimes[0] == runtimes[1] and len(runtimes[0]) == 1
    assert len(runtimes[2]) == 1 and runtimes[2] != runtimes[0]
    symbols = subprocess.run(["nm", "-C", plain._name], capture_output=True, text=True, check=True).stdout
    assert "WorkerPool" not in symbols and "Scheduler" not in symbols

    other = compile_shader(source)
    size = 1 << 17

    def launch_again_and_again(which: int) -> bool:
        x = torch.arange(size, dtype=torch.float32) + which
        for _ in range(25):
            y = torch.full((size,), float("nan"))
            if which % 2:
                other.axpc(y, x, threads=size)
                expected = 3 * x - 1
            else:
                AXPB.axpb(y, x, threads=size)
                expected = 2 * x + 1
            if not torch.equal(y, expected):
                return False
        return True

    with ThreadPoolExecutor(4) as host_threads:
        assert all(host_threads.map(launch_again_and_again, range(4)))


def test_constant_and_const_in_one_declaration():
    """`constant` is an address space with const's meaning here; a declaration that also says `const` (ExecuTorch's
    op_gather_qmv.mm: `static constant constexpr const int SIMD_SIZE = 32;`, c10's `constant const T*`) compiles, as
    Apple's compiler takes it."""
    lib = compile_shader("""
        static constant constexpr const int SCALE = 3;
        constant const float OFFSET = 0.5f;
        const constant int* unused_pointer(const constant int* p) { return p; }
        kernel void f(device float* out, uint i [[thread_position_in_grid]]) { out[i] = i * SCALE + OFFSET; }
    """)
    out = torch.zeros(4)
    lib.f(out)
    assert out.tolist() == [0.5, 3.5, 6.5, 9.5]

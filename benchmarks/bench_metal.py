"""shimkit.metal speed: compiling MSL (cold and cached), and running kernels vs eager torch on the CPU.

    .venv/bin/python benchmarks/bench_metal.py [--repeat 5]

* compile, cold: a new source (a unique comment) through the front end, the preprocessor and g++;
* compile, cached: the same source again in this process (``compile_shader`` returns the library it
  already built) and from the on-disk cache in a fresh process;
* a 1M-element elementwise kernel (``out = a * b + a``, no barriers: one plain loop per threadgroup, all
  cores) vs ``torch.addcmul``-free eager ``a * b + a``;
* a 4096 x 4096 row reduction (one 1024-thread group per row, threadgroup memory, ``simd_sum`` and a
  barrier: cooperative fibers) vs eager ``x.sum(-1)``;
* each of Inductor's Metal reductions from ``tests/test_metal_inductor.py`` at 1024 x 1024 (its kernels
  run by shimkit.metal, the Python wrapper included) vs eager torch, on all cores and on one thread;
* a 1024 x 1024 row sum as a tree reduction in threadgroup memory (a barrier inside a loop, 256-thread
  groups) vs eager ``x.sum(1)``, and a 1024 x 1024 row softmax with ``simd_max`` / ``simd_sum`` and three
  barriers (1024-thread groups) vs eager ``torch.softmax`` (issue 30's two further kernels).

Each figure is the median of ``--repeat`` samples (a sample repeats a fast call to fill 20 ms); ratios are shimkit.metal / torch in the same process.
Targets (issue 12): cached compile < 50 ms, elementwise within 10x of eager torch.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
import uuid

import torch
import torch.nn.functional as F

from shimkit.metal import ShaderLibrary, compile_shader
from shimkit.metal.inductor import inductor_metal_on_cpu

ELEMENTWISE = """
kernel void fma_like(device float* out, constant float* a, constant float* b, uint i [[thread_position_in_grid]]) {
  out[i] = a[i] * b[i] + a[i];
}
"""
ROW_SUM = """
#include <metal_stdlib>
using namespace metal;
kernel void row_sum(device float* out, constant float* x, constant long& n,
                    uint row [[threadgroup_position_in_grid]], uint t [[thread_position_in_threadgroup]],
                    uint size [[threads_per_threadgroup]], uint lane [[thread_index_in_simdgroup]],
                    uint simd [[simdgroup_index_in_threadgroup]], uint simds [[simdgroups_per_threadgroup]]) {
  threadgroup float partial[32];
  float acc = 0;
  for (long i = t; i < n; i += size) acc += x[row * n + i];
  acc = simd_sum(acc);
  if (lane == 0) partial[simd] = acc;
  threadgroup_barrier(mem_flags::mem_threadgroup);
  if (simd == 0) {
    float v = simd_sum(lane < simds ? partial[lane] : 0.0f);
    if (lane == 0) out[row] = v;
  }
}
"""
TREE_SUM = """
#include <metal_stdlib>
using namespace metal;
kernel void tree_sum(device float* out, constant float* x, constant uint& n,
                     uint row [[threadgroup_position_in_grid]], uint t [[thread_position_in_threadgroup]],
                     uint size [[threads_per_threadgroup]]) {
  threadgroup float partial[1024];
  float acc = 0;
  for (uint i = t; i < n; i += size) acc += x[row * n + i];
  partial[t] = acc;
  threadgroup_barrier(mem_flags::mem_threadgroup);
  for (uint stride = size / 2; stride > 0; stride /= 2) {
    if (t < stride) partial[t] += partial[t + stride];
    threadgroup_barrier(mem_flags::mem_threadgroup);
  }
  if (t == 0) out[row] = partial[0];
}
"""
SOFTMAX = """
#include <metal_stdlib>
using namespace metal;
kernel void softmax(device float* out, constant float* x, constant uint& n,
                    uint row [[threadgroup_position_in_grid]], uint t [[thread_position_in_threadgroup]],
                    uint size [[threads_per_threadgroup]], uint lane [[thread_index_in_simdgroup]],
                    uint simd [[simdgroup_index_in_threadgroup]], uint simds [[simdgroups_per_threadgroup]]) {
  threadgroup float partial[32];
  threadgroup float shared;
  float m = -INFINITY;
  for (uint i = t; i < n; i += size) m = max(m, x[row * n + i]);
  m = simd_max(m);
  if (lane == 0) partial[simd] = m;
  threadgroup_barrier(mem_flags::mem_threadgroup);
  if (t == 0) {
    float all = -INFINITY;
    for (uint s = 0; s < simds; ++s) all = max(all, partial[s]);
    shared = all;
  }
  threadgroup_barrier(mem_flags::mem_threadgroup);
  const float row_max = shared;
  float sum = 0;
  for (uint i = t; i < n; i += size) sum += exp(x[row * n + i] - row_max);
  sum = simd_sum(sum);
  threadgroup_barrier(mem_flags::mem_threadgroup);
  if (lane == 0) partial[simd] = sum;
  threadgroup_barrier(mem_flags::mem_threadgroup);
  float total = 0;
  for (uint s = 0; s < simds; ++s) total += partial[s];
  for (uint i = t; i < n; i += size) out[row * n + i] = exp(x[row * n + i] - row_max) / total;
}
"""


def median_seconds(fn, repeat: int, sample_seconds: float = 0.02) -> float:
    """Seconds per call of ``fn``, the median of ``repeat`` samples after one warm-up call; a sample runs
    ``fn`` as many times as fill about ``sample_seconds`` (as timeit does), so that a call of tens of
    microseconds is not read off one timer interval and one cache state."""
    start = time.perf_counter()
    fn()
    number = max(1, int(sample_seconds / max(time.perf_counter() - start, 1e-9)))
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        for _ in range(number):
            fn()
        times.append((time.perf_counter() - start) / number)
    return statistics.median(times)


def cooperative(label: str, source: str, name: str, arguments: tuple, threads: int, group: int, eager_fn,
                repeat: int) -> None:
    """One kernel with barriers, split into loops (the default) and on fibers, against eager torch."""
    eager = median_seconds(eager_fn, repeat)
    figures = []
    for split in (True, False):
        kernel = getattr(ShaderLibrary(source, split_barriers=split), name)
        run = lambda: kernel(*arguments, threads=(threads,), group_size=(group,))  # noqa: E731
        run()
        torch.testing.assert_close(arguments[0], eager_fn(), rtol=1e-4, atol=1e-3)
        seconds = median_seconds(run, max(1, repeat // 2))
        figures.append(f"{kernel.execution} {seconds * 1e3:.1f} ms ({seconds / eager:.0f}x)")
    print(f"{label}: {', '.join(figures)}; eager {eager * 1e3:.2f} ms")


# Inductor's reductions from tests/test_metal_inductor.py, at a 1M-element size (1024 x 1024).
INDUCTOR_REDUCTIONS = {
    "row sum": lambda x: x.sum(-1),
    "row max": lambda x: x.amax(-1),
    "full sum": lambda x: x.sum(),
    "mean + var": lambda x: x.mean(0) + x.var(0),
    "softmax": lambda x: torch.softmax(x, -1),
    "log_softmax (dim 0)": lambda x: torch.log_softmax(x, 0),
    "layer norm": lambda x: F.layer_norm(x, (1024,)),
    "rms norm": lambda x: x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6),
    "argmax": lambda x: torch.argmax(x, -1),
    "argmin (dim 0)": lambda x: torch.argmin(x, 0),
    "logsumexp": lambda x: torch.logsumexp(x, -1),
}


def inductor_reductions(repeat: int) -> None:
    """Each reduction compiled by Inductor for Metal and run by shimkit.metal (its kernels split into
    work-group loops), against eager torch on the same 1M-element input."""
    x = torch.randn(1024, 1024)
    for label, fn in INDUCTOR_REDUCTIONS.items():
        torch._dynamo.reset()
        # Timed inside the block: outside it, dynamo's cache entry is gone and the call recompiles for the CPU.
        with inductor_metal_on_cpu() as sources:
            compiled = torch.compile(fn, fullgraph=True, dynamic=False)
            got = compiled(x)
            metal = median_seconds(lambda: compiled(x), repeat)
        executions = sorted({getattr(lib, k).execution for lib in map(compile_shader, sources) for k in dir(lib)})
        expected = fn(x)
        if expected.dtype.is_floating_point:
            torch.testing.assert_close(got, expected, rtol=1e-3, atol=1e-3)
        else:
            assert torch.equal(got, expected)
        eager = median_seconds(lambda: fn(x), repeat)
        one_thread = eager_on_one_thread(lambda: fn(x), repeat)
        print(f"Inductor {label} 1024x1024 ({'/'.join(executions)}): shimkit.metal {metal * 1e3:.1f} ms, "
              f"eager {eager * 1e3:.2f} ms, ratio {metal / eager:.0f}x; eager on one thread {one_thread * 1e3:.2f} ms, "
              f"ratio {metal / one_thread:.1f}x")


def eager_on_one_thread(fn, repeat: int) -> float:
    """:func:`median_seconds` of ``fn`` with torch on one thread: the reference of issue 47's goals (and of
    ``bench_pocl.py``)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return median_seconds(fn, repeat)
    finally:
        torch.set_num_threads(threads)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()

    source = f"// {uuid.uuid4()}\n{ELEMENTWISE}"
    start = time.perf_counter()
    compile_shader(source)
    cold = time.perf_counter() - start
    cached = median_seconds(lambda: compile_shader(source), args.repeat)
    probe = ("import time, sys; from shimkit.metal import compile_shader; s = sys.stdin.read(); "
             "t = time.perf_counter(); compile_shader(s); print(time.perf_counter() - t)")
    disk = float(subprocess.run([sys.executable, "-c", probe], input=source, capture_output=True, text=True,
                                check=True).stdout)
    print(f"compile: cold {cold * 1e3:.0f} ms, cached in-process {cached * 1e3:.3f} ms, "
          f"from the disk cache in a new process {disk * 1e3:.1f} ms")

    lib = compile_shader(ELEMENTWISE)
    a, b = torch.randn(1 << 20), torch.randn(1 << 20)
    out = torch.empty_like(a)
    lib.fma_like(out, a, b)
    torch.testing.assert_close(out, a * b + a)
    metal = median_seconds(lambda: lib.fma_like(out, a, b), args.repeat)
    eager = median_seconds(lambda: a * b + a, args.repeat)
    print(f"elementwise 1M: shimkit.metal {metal * 1e3:.2f} ms, eager {eager * 1e3:.2f} ms, "
          f"ratio {metal / eager:.1f}x")

    x = torch.randn(4096, 4096)
    cooperative("row reduction 4096x4096", ROW_SUM, "row_sum", (torch.empty(4096), x, 4096), 4096 * 1024, 1024,
                lambda: x.sum(-1), args.repeat)
    square = torch.randn(1024, 1024)
    cooperative("tree reduction 1024x1024", TREE_SUM, "tree_sum", (torch.empty(1024), square, 1024), 1024 * 256,
                256, lambda: square.sum(1), args.repeat)
    cooperative("simdgroup softmax 1024x1024", SOFTMAX, "softmax", (torch.empty_like(square), square, 1024),
                1024 * 1024, 1024, lambda: torch.softmax(square, -1), args.repeat)
    inductor_reductions(args.repeat)
    print(f"(threads: torch {torch.get_num_threads()}, shimkit.metal workers {os.cpu_count()})")
    return 0


if __name__ == "__main__":
    sys.exit(main())

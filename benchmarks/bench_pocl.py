"""shimkit.metal beside POCL (OpenCL on the CPU through pyopencl) on the same tasks, as ratios to eager torch
on one thread, all in one run (issue 47):

    pip install -e '.[pocl]'            # pyopencl and POCL's CPU device
    .venv/bin/python benchmarks/bench_pocl.py [--repeat 7]

* ``y = 2x + 1`` over 1M floats: no barrier (shimkit runs a group's threads as one loop the compiler
  vectorises; POCL's work-item loops are vectorised by LLVM), vs eager ``mul`` then ``add_`` in place;
* a 1024 x 1024 row sum as a tree in threadgroup (local) memory, 256-thread groups, a barrier inside a loop,
  vs eager ``x.sum(1)``;
* a 1024 x 1024 row softmax, 256-thread groups: simdgroup reductions in MSL, local-memory trees in OpenCL C
  (OpenCL 1.2 has no sub-group functions on every device), vs eager ``torch.softmax``;
* building one new kernel (a fresh name defeats every cache): shimkit's translation and compile, POCL's
  ``clBuildProgram`` and first launch.

Each figure is the median of ``--repeat`` samples (a sample repeats a call to fill 20 ms, as timeit does).
Both run on every core (shimkit.metal's workers, POCL's pthread device); eager torch on one thread. Every
result is checked against eager before it is timed.
"""

from __future__ import annotations

import argparse
import sys
import time
import uuid

import numpy as np
import torch

from bench_metal import SOFTMAX, TREE_SUM, median_seconds  # the same tasks' MSL, the same timing
from shimkit.metal import ShaderLibrary

N, ROWS, GROUP = 1 << 20, 1024, 256

MSL = {
    "axpb": """
kernel void axpb(device float* y, constant float* x, uint i [[thread_position_in_grid]]) { y[i] = 2 * x[i] + 1; }
""",
    "tree_sum": TREE_SUM,
    "softmax": SOFTMAX,
}

OPENCL = {
    "axpb": """
__kernel void axpb(__global float* y, __global const float* x) { size_t i = get_global_id(0); y[i] = 2 * x[i] + 1; }
""",
    "tree_sum": """
__kernel void tree_sum(__global float* out, __global const float* x, uint n) {
  __local float partial[256];
  uint row = get_group_id(0), t = get_local_id(0), size = get_local_size(0);
  float acc = 0;
  for (uint i = t; i < n; i += size) acc += x[row * n + i];
  partial[t] = acc;
  barrier(CLK_LOCAL_MEM_FENCE);
  for (uint stride = size / 2; stride > 0; stride /= 2) {
    if (t < stride) partial[t] += partial[t + stride];
    barrier(CLK_LOCAL_MEM_FENCE);
  }
  if (t == 0) out[row] = partial[0];
}
""",
    "softmax": """
__kernel void softmax(__global float* out, __global const float* x, uint n) {
  __local float partial[256];
  uint row = get_group_id(0), t = get_local_id(0), size = get_local_size(0);
  float m = -INFINITY;
  for (uint i = t; i < n; i += size) m = fmax(m, x[row * n + i]);
  partial[t] = m;
  barrier(CLK_LOCAL_MEM_FENCE);
  for (uint stride = size / 2; stride > 0; stride /= 2) {
    if (t < stride) partial[t] = fmax(partial[t], partial[t + stride]);
    barrier(CLK_LOCAL_MEM_FENCE);
  }
  float row_max = partial[0];
  barrier(CLK_LOCAL_MEM_FENCE);
  float sum = 0;
  for (uint i = t; i < n; i += size) sum += exp(x[row * n + i] - row_max);
  partial[t] = sum;
  barrier(CLK_LOCAL_MEM_FENCE);
  for (uint stride = size / 2; stride > 0; stride /= 2) {
    if (t < stride) partial[t] += partial[t + stride];
    barrier(CLK_LOCAL_MEM_FENCE);
  }
  float total = partial[0];
  for (uint i = t; i < n; i += size) out[row * n + i] = exp(x[row * n + i] - row_max) / total;
}
""",
}


class Pocl:
    def __init__(self) -> None:
        import pyopencl as cl

        self.cl = cl
        devices = [d for p in cl.get_platforms() if "Portable" in p.name for d in p.get_devices()]
        if not devices:
            raise SystemExit("no POCL device: pip install -e '.[pocl]'")
        self.device = devices[0]
        self.context = cl.Context([self.device])
        self.queue = cl.CommandQueue(self.context)

    def build(self, source: str):
        return self.cl.Program(self.context, source).build()

    def buffer(self, array: np.ndarray):
        flags = self.cl.mem_flags.READ_WRITE | self.cl.mem_flags.COPY_HOST_PTR
        return self.cl.Buffer(self.context, flags, hostbuf=array)

    def run(self, kernel, global_size: int, local_size: int | None, *args) -> None:
        kernel(self.queue, (global_size,), None if local_size is None else (local_size,), *args)
        self.queue.finish()

    def read(self, buffer, like: np.ndarray) -> torch.Tensor:
        result = np.empty_like(like)
        self.cl.enqueue_copy(self.queue, result, buffer)
        return torch.from_numpy(result)


def tasks():
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(N, generator=generator)
    rows = torch.randn(ROWS, ROWS, generator=generator)
    flat = rows.reshape(-1)

    def eager_axpb(out=torch.empty(N)):
        torch.mul(x, 2, out=out)
        return out.add_(1)

    return [
        ("y = 2x + 1, 1M floats", "axpb", x, N, None, torch.empty(N), eager_axpb, ()),
        ("tree row sum 1024x1024", "tree_sum", flat, ROWS * GROUP, GROUP, torch.empty(ROWS), lambda: rows.sum(1),
         (ROWS,)),
        ("row softmax 1024x1024", "softmax", flat, ROWS * GROUP, GROUP, torch.empty(ROWS, ROWS),
         lambda: torch.softmax(rows, 1), (ROWS,)),
    ]


def compile_times(pocl: Pocl) -> tuple[float, float]:
    """Seconds to build and first launch one kernel neither has seen: a fresh name (a comment would not do:
    shimkit's caches key the preprocessed text)."""
    name = f"axpb_{uuid.uuid4().hex}"
    start = time.perf_counter()
    getattr(ShaderLibrary(MSL["axpb"].replace("axpb", name)), name)(torch.empty(64), torch.zeros(64), threads=64)
    shimkit_seconds = time.perf_counter() - start
    start = time.perf_counter()
    program = pocl.build(OPENCL["axpb"].replace("axpb", name))
    zeros = np.zeros(64, np.float32)
    pocl.run(getattr(program, name), 64, None, pocl.buffer(zeros), pocl.buffer(zeros))
    return shimkit_seconds, time.perf_counter() - start


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=7)
    args = parser.parse_args()
    torch.set_num_threads(1)
    pocl = Pocl()
    print(f"POCL device: {pocl.device.name}; eager torch on 1 thread; medians of {args.repeat} samples")
    print(f"{'task':<26} {'eager ms':>9} {'shimkit ms':>11} {'POCL ms':>9} {'shimkit/eager':>14} {'POCL/eager':>11}")
    for label, name, x, threads, group, out, eager, scalars in tasks():
        expected = eager()
        kernel = getattr(ShaderLibrary(MSL[name]), name)
        uint_scalars = [np.uint32(s) for s in scalars]
        shimkit_run = lambda: kernel(out, x, *scalars, threads=(threads,),  # noqa: E731
                                     **({"group_size": (group,)} if group else {}))
        shimkit_run()
        torch.testing.assert_close(out, expected, rtol=1e-4, atol=1e-4)
        program = getattr(pocl.build(OPENCL[name]), name)
        source, result = pocl.buffer(x.numpy()), pocl.buffer(np.empty(out.numel(), np.float32))
        pocl_run = lambda: pocl.run(program, threads, group, result, source, *uint_scalars)  # noqa: E731
        pocl_run()
        torch.testing.assert_close(pocl.read(result, out.reshape(-1).numpy()).reshape(out.shape), expected,
                                   rtol=1e-4, atol=1e-4)
        seconds = {who: median_seconds(fn, args.repeat) for who, fn in
                   (("eager", eager), ("shimkit", shimkit_run), ("pocl", pocl_run))}
        print(f"{label:<26} {seconds['eager'] * 1e3:>9.3f} {seconds['shimkit'] * 1e3:>11.3f} "
              f"{seconds['pocl'] * 1e3:>9.3f} {seconds['shimkit'] / seconds['eager']:>13.2f}x "
              f"{seconds['pocl'] / seconds['eager']:>10.2f}x")
    shimkit_build, pocl_build = compile_times(pocl)
    print(f"{'one new kernel, built':<26} {'':>9} {shimkit_build:>10.2f}s {pocl_build:>8.2f}s")
    return 0


if __name__ == "__main__":
    sys.exit(main())

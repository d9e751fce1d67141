"""In-place decomposition vs ``ExportedProgram.run_decompositions``, same table, one run.

    .venv/bin/python benchmarks/bench_decompositions.py                 # 48-block graph + 1k/10k/100k scaling
    .venv/bin/python benchmarks/bench_decompositions.py --sizes 1000,10000 --upstream-max-nodes 3000

The table decomposes every ``addmm``, ``native_layer_norm``, ``gelu`` and ``_softmax`` (384 of the
2,546 nodes) with torch's own decompositions. Both sides start from the same edge program; outputs
are compared on a random input. "cold" is the first call in the process (one-time tracer set-up
included), "warm" the median of ``--repeat`` later calls, each on a fresh copy with a fresh pass
(so every decomposition is traced again). As ``timeit`` does, the garbage collector is run
before and paused during each timed call, so a full collection of the large copied graphs does not
land in one side's timing.
"""

from __future__ import annotations

import argparse
import copy
import gc
import statistics
import sys
import time
from pathlib import Path

import torch
from torch._decomp import decomposition_table

sys.path.insert(0, str(Path(__file__).resolve().parent))
from transformer_graph import blocks_for, edge_program  # noqa: E402

from shimkit.passes import DecomposeInPlace  # noqa: E402

aten = torch.ops.aten
TABLE = {op: decomposition_table[op] for op in (aten.addmm.default, aten.native_layer_norm.default,
                                                aten.gelu.default, aten._softmax.default)}


def time_in_place(program, repeat: int) -> tuple[float, list[float], object]:
    times, result = [], None
    for _ in range(repeat):
        candidate = copy.deepcopy(program)
        gc.collect()
        gc.disable()
        started = time.perf_counter()
        DecomposeInPlace(TABLE)(candidate)
        times.append(time.perf_counter() - started)
        gc.enable()
        result = candidate
    return times[0], times[1:] or times, result


def time_upstream(program, repeat: int) -> tuple[float, list[float], object]:
    times, result = [], None
    for _ in range(repeat):
        gc.collect()
        gc.disable()
        started = time.perf_counter()
        result = program.run_decompositions(TABLE)
        times.append(time.perf_counter() - started)
        gc.enable()
    return times[0], times[1:] or times, result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--sizes", default="1000,10000,100000", help="graph sizes (nodes) for the scaling table")
    parser.add_argument("--upstream-max-nodes", type=int, default=12000,
                        help="run run_decompositions on scaling graphs up to this size (it is slow)")
    args = parser.parse_args()

    model, example, program, build = edge_program(48)
    print(f"48-block transformer: {len(program.graph.nodes)} edge nodes (built in {build:.1f} s)")
    ours_cold, ours_warm, ours = time_in_place(program, args.repeat + 1)
    theirs_cold, theirs_warm, theirs = time_upstream(program, args.repeat + 1)
    x = torch.randn(1, 8, 32)
    with torch.no_grad():
        expected, mine, upstream = model(x), ours.module()(x), theirs.module()(x)
    print(f"  nodes after: in-place {len(ours.graph.nodes)}, run_decompositions {len(theirs.graph.nodes)}")
    print(f"  max |in-place - run_decompositions| = {(mine - upstream).abs().max().item():.3g}, "
          f"max |in-place - eager| = {(mine - expected).abs().max().item():.3g}")
    ours_median, theirs_median = statistics.median(ours_warm), statistics.median(theirs_warm)
    print(f"  run_decompositions: cold {theirs_cold * 1e3:8.1f} ms, warm {theirs_median * 1e3:8.1f} ms")
    print(f"  DecomposeInPlace:   cold {ours_cold * 1e3:8.1f} ms, warm {ours_median * 1e3:8.1f} ms")
    print(f"  speed-up: {theirs_median / ours_median:.1f}x warm, {theirs_cold / ours_cold:.1f}x cold")

    print("\nscaling (same blocks, more of them):")
    print(f"  {'nodes':>8} {'build s':>8} {'in-place ms':>12} {'us/node':>8} {'run_decomp ms':>14} {'us/node':>8} {'ratio':>6}")
    for size in (int(s) for s in args.sizes.split(",") if s):
        model, example, program, build = edge_program(blocks_for(size))
        nodes = len(program.graph.nodes)
        _, warm, _ = time_in_place(program, 2)
        mine = statistics.median(warm)
        line = f"  {nodes:>8} {build:>8.1f} {mine * 1e3:>12.1f} {mine / nodes * 1e6:>8.1f}"
        if nodes <= args.upstream_max_nodes:
            _, warm, _ = time_upstream(program, 1)
            theirs = statistics.median(warm)
            line += f" {theirs * 1e3:>14.1f} {theirs / nodes * 1e6:>8.1f} {theirs / mine:>6.1f}"
        print(line, flush=True)


if __name__ == "__main__":
    main()

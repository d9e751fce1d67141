"""The registry's full graph-stage pipeline on the 48-block transformer edge graph, vs upstream's passes.

    .venv/bin/python benchmarks/bench_pipeline.py [--repeat 5] [--device mps|cuda] [--scale 10000,100000]

Upstream is what ``AotiBackend.preprocess`` runs for Metal: ``ReplaceViewCopyWithViewPass`` then
``DecomposeLinearPass``. Each run starts from a fresh copy of the edge program with freshly built
passes; "warm" is the median after the first run in the process. Code regeneration of the module is
deferred by shimkit; the garbage collector is paused during timed calls, as in ``timeit`` (``AotiBackend`` rebuilds the module with ``ExportedProgram.module()``), while
upstream's passes regenerate it inside the pass: the table shows both with and without that step.
``--scale`` then times the pipeline on the graph's body chained to about each number of nodes
(``transformer_graph.repeated_program``), warm median of ``--repeat``, to show the cost per node stays flat.
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

sys.path.insert(0, str(Path(__file__).resolve().parent))
from transformer_graph import edge_program, repeated_program  # noqa: E402

from shimkit.backend import pipeline as device_pipeline  # noqa: E402


def run_shimkit(program, device: str):
    candidate = copy.deepcopy(program)
    pipeline = device_pipeline(device)
    gc.collect()
    gc.disable()
    started = time.perf_counter()
    pipeline(candidate)
    elapsed = time.perf_counter() - started
    gc.enable()
    started = time.perf_counter()
    candidate.graph_module.recompile()
    return elapsed, time.perf_counter() - started, candidate, pipeline


def run_upstream(program):
    from executorch.backends.aoti.passes.replace_view_copy_with_view import ReplaceViewCopyWithViewPass
    from executorch.backends.apple.metal.passes.decompose_linear_pass import DecomposeLinearPass

    candidate = copy.deepcopy(program)
    gc.collect()
    gc.disable()
    started = time.perf_counter()
    ReplaceViewCopyWithViewPass()(candidate.graph_module)
    DecomposeLinearPass()(candidate.graph_module)
    elapsed = time.perf_counter() - started
    gc.enable()
    return elapsed, candidate


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--device", action="append", help="mps and/or cuda (default: both)")
    parser.add_argument("--scale", default="", help="comma-separated graph sizes (nodes) for the scaling table")
    args = parser.parse_args()
    model, example, program, build = edge_program(48)
    print(f"48-block transformer: {len(program.graph.nodes)} edge nodes (built in {build:.1f} s)")
    x = torch.randn(1, 8, 32)
    with torch.no_grad():
        expected = model(x)
    for device in args.device or ["mps", "cuda"]:
        runs = [run_shimkit(program, device) for _ in range(args.repeat + 1)]
        cold, warm = runs[0][0], statistics.median(r[0] for r in runs[1:])
        recompile = statistics.median(r[1] for r in runs[1:])
        _, _, result, pipeline = runs[-1]
        with torch.no_grad():
            error = (result.module()(x) - expected).abs().max().item()
        print(f"\nshimkit pipeline for {device}: {' -> '.join(pipeline.names)}")
        print(f"  cold {cold * 1e3:.1f} ms, warm {warm * 1e3:.1f} ms (+ {recompile * 1e3:.1f} ms if the module's "
              f"code is regenerated), max |out - eager| = {error:.3g}")
        print("  " + str(pipeline.report).replace("\n", "\n  "))
    upstream = [run_upstream(program) for _ in range(args.repeat + 1)]
    with torch.no_grad():
        error = (upstream[-1][1].module()(x) - expected).abs().max().item()
    print(f"\nupstream ReplaceViewCopyWithViewPass + DecomposeLinearPass (recompile included): "
          f"cold {upstream[0][0] * 1e3:.1f} ms, warm {statistics.median(r[0] for r in upstream[1:]) * 1e3:.1f} ms, "
          f"max |out - eager| = {error:.3g}")
    sizes = [int(size) for size in args.scale.split(",") if size]
    if sizes:
        print("\nscaling (the 48-block body chained; warm median; per node):")
    for size in sizes:
        body = sum(node.op == "call_function" for node in program.graph.nodes)  # what a copy repeats
        large = repeated_program(program, max(1, round((size - len(program.graph.nodes)) / body) + 1))
        nodes = len(large.graph.nodes)
        for device in args.device or ["mps", "cuda"]:
            runs = [run_shimkit(large, device)[0] for _ in range(args.repeat + 1)]
            warm = statistics.median(runs[1:])
            print(f"  {device}: {nodes} nodes, {warm * 1e3:.0f} ms, {warm / nodes * 1e6:.1f} µs per node")


if __name__ == "__main__":
    main()

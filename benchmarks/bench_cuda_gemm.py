"""On a CUDA GPU: ``baddbmm`` decomposed by shimkit (``bmm`` plus a scaled add) against left to Inductor's
Triton templates, for ExecuTorch's ``CudaBackend``.

    python benchmarks/bench_cuda_gemm.py [--repeat 200]      (tools/cuda_device.sh sets the paths up)

For each way and dtype a fresh interpreter lowers an attention-score ``baddbmm`` (16 x 512 x 64 @ 64 x 512
plus a broadcast bias) with shimkit's ``CudaBackend``: as shimkit ships it (the ``baddbmm`` plugin decomposes
for mps only, so CUDA keeps the op), and with the plugin's decomposition registered for CUDA too,
timing ``to_edge_transform_and_lower`` (Inductor's autotuning included, caches off); then compiles the
very program the backend handed to Inductor, with the backend's own autotuning options, through
``aoti_compile_and_package`` and times ``--repeat`` runs with CUDA events after a warm-up. Reported per
dtype: both ways' lowering seconds and run microseconds, and the ratios kept / decomposed, in one run.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

WAYS = ("decomposed", "kept")
DTYPES = ("float32", "bfloat16")
SHAPE = dict(batch=16, rows=512, inner=64, columns=512)
# The options of CudaBackend's that decide the code Inductor writes for a GEMM.
AUTOTUNING = ("max_autotune", "max_autotune_gemm_backends", "max_autotune_conv_backends", "coordinate_descent_tuning")


def registry_for(way: str):
    """The registry of a way: as shipped (``kept``), or with the built-in ``baddbmm`` plugin's decomposition
    registered for CUDA as well (``decomposed``)."""
    from shimkit.backend import new_registry
    from shimkit.plugins.baddbmm import BADDBMM, baddbmm_decomposition
    from shimkit.registry import OpPlugin, hookimpl

    if way == "kept":
        return new_registry()

    class BaddbmmOnCuda:
        @hookimpl
        def shimkit_op_plugins(self):
            yield OpPlugin(name="baddbmm-on-cuda", ops=(BADDBMM,), decompositions={BADDBMM: baddbmm_decomposition},
                           decomposition_devices=("mps", "cuda"), doc="baddbmm as bmm plus a scaled add, on CUDA too.")

    registry = new_registry({**os.environ, "SHIMKIT_BLOCK_PLUGINS": "baddbmm"})
    registry.register(BaddbmmOnCuda(), name="baddbmm-on-cuda")
    return registry


def measure(way: str, dtype_name: str, repeat: int) -> dict:
    import time

    import torch
    import torch._inductor as inductor
    from executorch.backends.cuda.cuda_backend import CudaBackend
    from executorch.backends.cuda.cuda_partitioner import CudaPartitioner
    from executorch.exir import to_edge_transform_and_lower
    from torch._inductor import aoti_compile_and_package, aoti_load_package

    from shimkit.integration import registry_backend

    class AttentionScores(torch.nn.Module):
        def forward(self, bias, query, key):
            return torch.baddbmm(bias, query, key, beta=0.5, alpha=0.125)

    dtype = getattr(torch, dtype_name)
    generator = torch.Generator().manual_seed(0)
    b, n, k, m = SHAPE.values()
    inputs = tuple(torch.randn(*shape, generator=generator).to("cuda", dtype)
                   for shape in ((n, m), (b, n, k), (b, k, m)))
    exported = torch.export.export(AttentionScores(), inputs)
    config = registry_for(way).backend_config("cuda")
    handed: list = []
    original = inductor.aot_compile

    def aot_compile(gm, args, *rest, **kwargs):
        handed.append((gm, kwargs.get("options") or (rest[0] if rest else {})))
        return original(gm, args, *rest, **kwargs)

    inductor.aot_compile = aot_compile
    try:
        with registry_backend(CudaBackend, config):
            started = time.perf_counter()
            to_edge_transform_and_lower(config.prepare_for_edge(exported),
                                        partitioner=[CudaPartitioner([CudaBackend.generate_method_name_compile_spec("forward")])],
                                        compile_config=config.edge_compile_config())
            lowering_s = time.perf_counter() - started
    finally:
        inductor.aot_compile = original
    (module, options), = handed
    ops = sorted({getattr(node.target, "__name__", str(node.target)) for node in module.graph.nodes
                  if node.op == "call_function"})
    package = aoti_compile_and_package(torch.export.export(module, inputs, strict=False),
                                       inductor_configs={k: v for k, v in options.items() if k in AUTOTUNING})
    run = aoti_load_package(package)
    for _ in range(10):
        run(*inputs)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize()
    start.record()
    for _ in range(repeat):
        run(*inputs)
    end.record()
    torch.cuda.synchronize()
    return {"lowering_s": lowering_s, "run_us": start.elapsed_time(end) * 1000 / repeat, "ops": ops}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=200, help="timed runs of each compiled program")
    parser.add_argument("--dtypes", nargs="+", default=list(DTYPES), choices=DTYPES, help="default: both")
    parser.add_argument("--child", nargs=2, metavar=("WAY", "DTYPE"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(measure(*args.child, args.repeat)))
        return
    results: dict = {}
    for dtype in args.dtypes:
        for way in WAYS:
            child = subprocess.run([sys.executable, __file__, "--repeat", str(args.repeat), "--child", way, dtype],
                                   env={**os.environ, "TORCHINDUCTOR_FORCE_DISABLE_CACHES": "1"},
                                   capture_output=True, text=True)
            if child.returncode != 0:
                print(f"{way} {dtype} failed ({child.returncode}):\n{child.stderr[-3000:]}", file=sys.stderr)
                continue
            results[dtype, way] = json.loads(child.stdout.strip().splitlines()[-1])
            print(f"{dtype} {way}: {results[dtype, way]}", flush=True)  # a run cut short keeps what it measured
    print(f"baddbmm {SHAPE} on CudaBackend, {args.repeat} runs each")
    print(f"{'dtype':9} {'way':11} {'lowering s':>10} {'run us':>9}  ops handed to Inductor")
    for (dtype, way), result in results.items():
        print(f"{dtype:9} {way:11} {result['lowering_s']:10.1f} {result['run_us']:9.1f}  {', '.join(result['ops'])}")
    for dtype in args.dtypes:
        if (dtype, "kept") not in results or (dtype, "decomposed") not in results:
            continue
        kept, decomposed = results[dtype, "kept"], results[dtype, "decomposed"]
        print(f"{dtype}: kept / decomposed: lowering {kept['lowering_s'] / decomposed['lowering_s']:.2f}, "
              f"run {kept['run_us'] / decomposed['run_us']:.2f}")


if __name__ == "__main__":
    main()

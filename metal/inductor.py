"""Inductor's own Metal kernels, run on the CPU: the code nobody here wrote that shimkit.metal must run.

Inside :func:`inductor_metal_on_cpu`, ``torch.compile`` on CPU tensors generates code with Inductor's mps
backend (``MetalScheduling`` and the Python wrapper, exactly as on a Mac) and compiles its kernels with
``shimkit.metal.compile_shader`` instead of ``torch.mps.compile_shader``; the compiled function then runs
those kernels on the CPU tensors. Comparing it with eager CPU checks, kernel by kernel, what Inductor would
compute on a GPU::

    with inductor_metal_on_cpu() as sources:
        got = torch.compile(fn, fullgraph=True)(x)
    torch.testing.assert_close(got, fn(x)); assert sources  # the MSL that ran

It swaps Inductor's code generator for the cpu device, so nothing else may compile in the process
meanwhile; everything is undone on exit (the dynamo cache too, so no function compiled inside is reused).
"""

from __future__ import annotations

import contextlib
from typing import Iterator

import torch

from shimkit._patching import ScopedPatches
from shimkit.metal.library import compile_shader

# Inductor splits reductions by the GPU's core count; 10 is an M2's.
CORE_COUNT = 10


@contextlib.contextmanager
def inductor_metal_on_cpu() -> Iterator[list[str]]:
    """Yields the list that receives every MSL library Inductor compiles inside the block."""
    import torch._inductor.codegen.common as common
    import torch._inductor.config as inductor_config
    import torch._inductor.runtime.runtime_utils as runtime_utils
    from torch._inductor.codegen.mps import MetalKernel, MetalScheduling
    from torch.utils._ordered_set import OrderedSet
    from torch._inductor.codegen.wrapper import PythonWrapperCodegen

    sources: list[str] = []

    def compile_mps_shader(source: str):
        sources.append(source)
        return compile_shader(source)

    common.init_backend_registration()
    patches = ScopedPatches()
    torch._dynamo.reset()
    try:
        # MetalKernel.headers is one set on the class that every kernel adds to: a bounds check here ("error")
        # would give every later Metal kernel of the process an error_buf argument, which AOTInductor's
        # wrapper never binds. The block's kernels add to a copy.
        patches.replace(MetalKernel, "headers", OrderedSet(MetalKernel.headers))
        patches.replace_item(common.device_codegens, "cpu", common.DeviceCodegen(MetalScheduling, PythonWrapperCodegen))
        patches.replace(runtime_utils, "compile_mps_shader", compile_mps_shader)
        patches.replace(torch.backends.mps, "get_core_count", lambda: CORE_COUNT)
        patches.on_undo(torch._dynamo.reset)
        # Generated code must be generated here, not loaded from a cache filled by a cpu compile.
        with inductor_config.patch(fx_graph_cache=False, autotune_local_cache=False):
            yield sources
    finally:
        patches.undo()

"""Compile and run one exported program with torch's own AOTInductor, in a process of its own.

``python -m shimkit.audit.aoti_process PROGRAM PACKAGE INPUTS OUTPUTS DEVICE`` loads ``PROGRAM`` (a
``torch.export.save`` file), compiles it into ``PACKAGE`` with ``aoti_compile_and_package`` unless that
exists already, runs it on ``DEVICE`` with the tensors ``torch.load`` reads from ``INPUTS``, and saves
the results (on the CPU) to ``OUTPUTS``. :class:`shimkit.audit.numerics.AotiCompiled` starts it.

Why a process: in the process that has just lowered with ExecuTorch's ``CudaBackend``, loading the
package AOTInductor compiled crashed with SIGSEGV on the H100 (torch 2.11), and a crashed worker is
a hung ``-j`` pool. Here nothing but torch (and, for programs calling ExecuTorch's custom ops, the
backend module that registers them) is loaded, and a crash is a return code the check reports.
"""

from __future__ import annotations

import sys
from pathlib import Path

# Namespaces of custom ops a program handed to CudaBackend's Inductor may call, and what registers them.
_REGISTERED_BY = {"triton": "executorch.backends.cuda.cuda_backend",
                  "executorch_cuda": "executorch.backends.cuda.cuda_backend"}


def custom_op_modules(graph) -> list[str]:
    """The modules to import so that every custom op ``graph`` calls is registered."""
    import torch

    namespaces = {node.target.namespace for node in graph.nodes
                  if node.op == "call_function" and isinstance(node.target, torch._ops.OpOverload)}
    return sorted({_REGISTERED_BY[n] for n in namespaces if n in _REGISTERED_BY})


def main(argv: list[str]) -> int:
    program, package, inputs, outputs, device, *modules = argv
    import importlib

    import torch
    from torch._inductor import aoti_compile_and_package, aoti_load_package
    from torch.utils import _pytree as pytree

    for module in modules:
        importlib.import_module(module)
    if not Path(package).exists():
        aoti_compile_and_package(torch.export.load(program), package_path=package)
    operands = [o.to(device) if isinstance(o, torch.Tensor) else o for o in torch.load(inputs)]
    result = aoti_load_package(package)(*operands)
    torch.save(pytree.tree_map(lambda v: v.cpu() if isinstance(v, torch.Tensor) else v, result), outputs)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))

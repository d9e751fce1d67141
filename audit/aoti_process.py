"""Run one AOTInductor package, in a process of its own.

``python -m shimkit.audit.aoti_process PACKAGE INPUTS OUTPUTS DEVICE [MODULE...]`` imports each
``MODULE`` (those registering custom ops the program calls), loads ``PACKAGE`` (compiled by
:class:`shimkit.audit.numerics.AotiCompiled` with ``aoti_compile_and_package``), runs it on ``DEVICE``
with the tensors ``torch.load`` reads from ``INPUTS`` and saves the results (on the CPU) to ``OUTPUTS``.

Why a process: in the process that has just lowered with ExecuTorch's ``CudaBackend``, loading the
package AOTInductor compiled crashed with SIGSEGV on the H100 (torch 2.11), and a crashed worker is
a hung ``-j`` pool. Here nothing but torch (and, for programs calling ExecuTorch's custom ops, the
backend module that registers them) is loaded, and a crash is a return code the check reports.

Before loading, the package's shared objects are checked for the compiler trap that crash came from
(docs/cuda.md): Inductor links with ``$CXX``, and a ``$CXX`` that links libstdc++ statically (a wrapper
script around another g++ build) gives a ``wrapper.so`` with its own copy of ``std::regex``, which crashes
on the process's locale in AOTInductor's ``parse_device_str``. Such a package is refused with what to do.
"""

from __future__ import annotations

import os
import struct
import sys
import zipfile

# Namespaces of custom ops a program handed to CudaBackend's Inductor may call, and what registers them.
_REGISTERED_BY = {"triton": "executorch.backends.cuda.cuda_backend",
                  "executorch_cuda": "executorch.backends.cuda.cuda_backend"}


def custom_op_modules(graph) -> list[str]:
    """The modules to import so that every custom op ``graph`` calls is registered."""
    import torch

    namespaces = {node.target.namespace for node in graph.nodes
                  if node.op == "call_function" and isinstance(node.target, torch._ops.OpOverload)}
    return sorted({_REGISTERED_BY[n] for n in namespaces if n in _REGISTERED_BY})


class StaticLibstdcxx(RuntimeError):
    """A shared object of an AOTInductor package carries its own libstdc++ instead of linking the process's."""


def needed_libraries(elf: bytes, name: str = "shared object") -> list[str]:
    """The ``DT_NEEDED`` entries of a 64-bit little-endian ELF shared object, in order.

    >>> needed_libraries(open("/usr/lib/x86_64-linux-gnu/libm.so.6", "rb").read())
    ['libc.so.6', 'ld-linux-x86-64.so.2']
    """
    if elf[:4] != b"\x7fELF" or elf[4] != 2 or elf[5] != 1:
        raise ValueError(f"{name} is not a 64-bit little-endian ELF file")
    section_offset, = struct.unpack_from("<Q", elf, 0x28)
    entry_size, count = struct.unpack_from("<HH", elf, 0x3A)
    sections = [struct.unpack_from("<IIQQQQIIQQ", elf, section_offset + i * entry_size) for i in range(count)]
    dynamic_type = 6
    for _, kind, _, _, offset, size, link, _, _, _ in sections:
        if kind != dynamic_type:
            continue
        strings = sections[link][4]
        needed = []
        for at in range(offset, offset + size, 16):
            tag, value = struct.unpack_from("<qQ", elf, at)
            if tag == 0:
                break
            if tag == 1:
                end = elf.index(b"\0", strings + value)
                needed.append(elf[strings + value:end].decode())
        return needed
    return []  # linked statically throughout


def check_dynamic_libstdcxx(package: str) -> None:
    """Raise :class:`StaticLibstdcxx` when a shared object in ``package`` (an AOTInductor ``.pt2``) does not
    link ``libstdc++.so``, naming it, the compiler Inductor used and the way out."""
    with zipfile.ZipFile(package) as archive:
        for member in archive.namelist():
            if not member.endswith(".so"):
                continue
            needed = needed_libraries(archive.read(member), member)
            if not any(library.startswith("libstdc++.so") for library in needed):
                compiler = os.environ.get("CXX", "g++ (no $CXX set)")
                raise StaticLibstdcxx(
                    f"{member} in {package} does not link libstdc++.so dynamically (its DT_NEEDED: "
                    f"{', '.join(needed) or 'none'}): it carries its own libstdc++, whose std::regex "
                    f"crashes when AOTInductor loads it. Inductor compiled it with $CXX={compiler}; "
                    f"compile with the system g++ (CXX=/usr/bin/g++) or preload the process's "
                    f"libstdc++.so.6 (LD_PRELOAD) and compile again")


def main(argv: list[str]) -> int:
    package, inputs, outputs, device, *modules = argv
    import importlib

    import torch
    from torch._inductor import aoti_load_package
    from torch.utils import _pytree as pytree

    try:
        check_dynamic_libstdcxx(package)
    except StaticLibstdcxx as refused:
        print(f"refused to load: {refused}", file=sys.stderr)
        return 3
    for module in modules:
        importlib.import_module(module)
    operands = [o.to(device) if isinstance(o, torch.Tensor) else o for o in torch.load(inputs)]
    result = aoti_load_package(package)(*operands)
    torch.save(pytree.tree_map(lambda v: v.cpu() if isinstance(v, torch.Tensor) else v, result), outputs)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))

"""Tensor constants that are a buffer under another name, made that buffer.

A module may hold one tensor twice: as a registered buffer, and as an attribute of an object that is not a
module. transformers' static KV cache does (``TorchExportableModuleWithStaticCache`` registers each layer's
``StaticCache`` tensors as ``key_cache_<i>`` / ``value_cache_<i>``, and attention writes them through the
cache object). ``torch.export`` then lifts the attribute as a tensor constant sharing the buffer's storage,
and the decode step's ``index_copy_`` writes the constant. The first step of ``to_edge``
(``run_decompositions``) sees two program inputs that alias and fails inside AOTAutograd (``expected
compiled_fn to be GraphModule, got <class 'function'>``: its synthetic-base wrapper has no export form), on
stock ExecuTorch as with shimkit; had it not, the cache writes would have gone to a constant, not to the
program's state.

:func:`merge_constants_aliasing_buffers` gives each such constant's uses to the buffer it views exactly
(same storage, offset, shape and strides), so the writes become the buffer's mutations, as the module meant.
"""

from __future__ import annotations

import torch
from torch.export.graph_signature import InputKind


def _same_view(a: torch.Tensor, b: torch.Tensor) -> bool:
    return (a.untyped_storage().data_ptr() == b.untyped_storage().data_ptr() and a.storage_offset() == b.storage_offset()
            and a.shape == b.shape and a.stride() == b.stride() and a.dtype == b.dtype)


def merge_constants_aliasing_buffers(exported: torch.export.ExportedProgram) -> list[tuple[str, str]]:
    """Rewrites ``exported`` in place; returns ``(constant, buffer)`` for each constant merged."""
    specs = exported.graph_signature.input_specs
    buffers = []
    for spec in specs:
        if spec.kind == InputKind.BUFFER:
            value = exported.state_dict.get(spec.target, exported.constants.get(spec.target))
            if isinstance(value, torch.Tensor) and not isinstance(value, torch._subclasses.FakeTensor):
                buffers.append((spec, value))
    placeholders = {node.name: node for node in exported.graph.find_nodes(op="placeholder")}
    merged = []
    for spec in list(specs):
        constant = exported.constants.get(spec.target) if spec.kind == InputKind.CONSTANT_TENSOR else None
        if not isinstance(constant, torch.Tensor):
            continue
        buffer = next((b for b, value in buffers if _same_view(constant, value)), None)
        if buffer is None:
            continue
        node = placeholders[spec.arg.name]
        node.replace_all_uses_with(placeholders[buffer.arg.name])
        exported.graph.erase_node(node)
        specs.remove(spec)
        del exported.constants[spec.target]
        merged.append((spec.target, buffer.target))
    if merged:
        exported.graph_module.recompile()
    return merged

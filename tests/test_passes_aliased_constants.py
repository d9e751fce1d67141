"""A tensor held both as a buffer and through a non-module object (transformers' static KV cache) exports as a
constant aliasing the buffer; merged into the buffer, the program passes to_edge's run_decompositions and
keeps its writes as buffer mutations."""

from __future__ import annotations

import pytest
import torch
from torch.export.graph_signature import OutputKind

from shimkit.passes.aliased_constants import merge_constants_aliasing_buffers


class Cache:
    """Not a module: export lifts what it holds as constants."""

    def __init__(self, keys: torch.Tensor) -> None:
        self.keys = keys


class CachedStep(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.cache = Cache(torch.zeros(1, 8, 4))
        self.register_buffer("key_cache", self.cache.keys)  # the same tensor, registered too
        self.project = torch.nn.Linear(4, 4)

    def forward(self, x: torch.Tensor, position: torch.Tensor) -> torch.Tensor:
        self.cache.keys.index_copy_(1, position, self.project(x))
        return self.cache.keys.sum(1)


def _exported() -> tuple[torch.nn.Module, torch.export.ExportedProgram, tuple]:
    model = CachedStep()
    inputs = (torch.randn(1, 1, 4), torch.tensor([2]))
    with torch.no_grad():
        return model, torch.export.export(model, inputs, strict=False), inputs


def test_the_aliasing_constant_is_what_stops_run_decompositions():
    _, exported, _ = _exported()
    with pytest.raises(AssertionError, match="expected compiled_fn to be GraphModule"):
        exported.run_decompositions({})


def test_merged_into_the_buffer_the_writes_become_its_mutations_and_compute_as_eager():
    model, exported, inputs = _exported()
    assert [buffer for _, buffer in merge_constants_aliasing_buffers(exported)] == ["key_cache"]
    decomposed = exported.run_decompositions({})
    assert [(s.kind, s.target) for s in decomposed.graph_signature.output_specs][0] == \
        (OutputKind.BUFFER_MUTATION, "key_cache")
    assert not decomposed.constants
    program = decomposed.module()
    for position in (2, 5):
        step = (torch.randn(1, 1, 4), torch.tensor([position]))
        with torch.no_grad():
            torch.testing.assert_close(program(*step), model(*step))


def test_a_constant_that_only_shares_storage_stays_a_constant():
    class Halves(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            whole = torch.arange(8.0)
            self.holder = Cache(whole[:4])  # a view of part of the buffer: not the buffer
            self.register_buffer("whole", whole)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x + self.holder.keys + self.whole[4:]

    with torch.no_grad():
        exported = torch.export.export(Halves(), (torch.ones(4),), strict=False)
    assert merge_constants_aliasing_buffers(exported) == []

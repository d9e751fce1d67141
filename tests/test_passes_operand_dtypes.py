"""passes/operand_dtypes.py: operands a Metal kernel reads as its main operand's type are cast to it."""

from __future__ import annotations

import pytest
import torch

from shimkit.passes.base import PassContext
from shimkit.passes.operand_dtypes import CastOperandsTo

pytest.importorskip("executorch.backends.apple.metal.ops.gather_qmv")


class _Experts(torch.nn.Module):
    def __init__(self, scale_dtype: torch.dtype) -> None:
        super().__init__()
        generator = torch.Generator().manual_seed(0)
        self.register_buffer("w", torch.randint(0, 255, (4, 8, 16), dtype=torch.uint8, generator=generator))
        self.register_buffer("scales", torch.rand(4, 8, 1, generator=generator).to(scale_dtype))
        self.register_buffer("biases", torch.rand(4, 8, 1, generator=generator).to(scale_dtype))

    def forward(self, x: torch.Tensor, indices: torch.Tensor) -> torch.Tensor:
        return torch.ops.metal.gather_qmv(x, self.w, self.scales, self.biases, indices, 32)


def _graph(scale_dtype: torch.dtype):
    x, indices = torch.randn(3, 32, dtype=torch.bfloat16), torch.tensor([0, 3, 1], dtype=torch.int32)
    return torch.export.export(_Experts(scale_dtype), (x, indices)).graph


@pytest.mark.parametrize("scale_dtype", [torch.float32, torch.float16])
def test_scales_and_biases_of_another_dtype_are_cast_to_the_activations(scale_dtype):
    graph = _graph(scale_dtype)
    cast = CastOperandsTo("casts", [torch.ops.metal.gather_qmv.default], [(2, "scales"), (3, "biases")], (0, "x"))
    assert cast.transform(graph, PassContext())
    (call,) = [n for n in graph.nodes if n.target is torch.ops.metal.gather_qmv.default]
    for operand in call.args[2:4]:
        assert operand.target is torch.ops.prims.convert_element_type.default
        assert operand.args[1] == torch.bfloat16 and operand.meta["val"].dtype == torch.bfloat16
    graph.lint()
    assert not cast.transform(graph, PassContext())  # nothing left to cast


def test_operands_already_of_the_activations_dtype_are_left_alone():
    graph = _graph(torch.bfloat16)
    before = [n.format_node() for n in graph.nodes]
    cast = CastOperandsTo("casts", [torch.ops.metal.gather_qmv.default], [(2, "scales"), (3, "biases")], (0, "x"))
    assert not cast.transform(graph, PassContext())
    assert [n.format_node() for n in graph.nodes] == before

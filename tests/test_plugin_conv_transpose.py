"""The conv-transpose plugin: ``ConvTranspose{1,2,3}d`` on CUDA as a matrix product and shifted sums, which
Inductor generates Triton code for. Checked against ATen on PyTorch's own OpInfo samples, and on exported models
through the registry's CUDA decompositions (what ``CudaBackend``'s passes run): no convolution is left, and
the program computes what the model does, at other sizes too. The lowering itself runs on the GPU
machine (tools/cuda_device.sh, docs/cuda.md); the plugin against ATen on hypothesis inputs, at dynamic sizes
too, is in test_testing_dynamic.py."""

from __future__ import annotations

import pytest
import torch
from torch.testing._internal.common_methods_invocations import op_db

from shimkit.backend import new_registry
from shimkit.passes import DecomposeInPlace
from shimkit.plugins.conv_transpose import conv_transpose

from registry_helpers import CLEAN_ENV

OPINFOS = {op.name: op for op in op_db if op.name.startswith("nn.functional.conv_transpose")}


@pytest.mark.parametrize("name", sorted(OPINFOS))
def test_matches_aten_on_pytorchs_own_samples(name):
    op, checked = OPINFOS[name], 0
    for sample in op.sample_inputs("cpu", torch.float64):
        weight, *rest = sample.args
        bias = rest[0] if rest else sample.kwargs.get("bias")
        kwargs = {key: value for key, value in sample.kwargs.items() if key != "bias"}
        expected = op(sample.input, *sample.args, **sample.kwargs)
        got = conv_transpose(sample.input, weight, bias, **kwargs)
        torch.testing.assert_close(got, expected, rtol=1e-10, atol=1e-10)
        checked += 1
    assert checked >= 3


class _Upsampler(torch.nn.Module):
    """A decoder's upsampling step: stride 2, padding 1, output padding 1, two groups, then a 1-D one."""

    def __init__(self) -> None:
        super().__init__()
        self.up2d = torch.nn.ConvTranspose2d(8, 6, 3, stride=2, padding=1, output_padding=1, groups=2)
        self.up1d = torch.nn.ConvTranspose1d(6, 4, 4, stride=2, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        image = self.up2d(x)
        return self.up1d(image.flatten(2)).relu()


class _LatentGenerator(torch.nn.Module):
    """A DCGAN generator's first layer: one latent position spread into a 4x4 patch per sample."""

    def __init__(self) -> None:
        super().__init__()
        self.project = torch.nn.ConvTranspose2d(16, 8, 4, stride=1, padding=0)

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        return self.project(z).tanh()


def _cuda_decompositions() -> DecomposeInPlace:
    return DecomposeInPlace.from_capabilities(new_registry(env=CLEAN_ENV).backend_config("cuda").capabilities)


def test_cuda_sees_matrix_products_where_the_model_had_transposed_convolutions():
    torch.manual_seed(0)
    model, x = _Upsampler().eval(), torch.randn(2, 8, 5, 7)
    exported = torch.export.export(model, (x,))
    assert _decompose_and_compare(exported, (x,), model)
    targets = {node.target for node in exported.graph.nodes if node.op == "call_function"}
    assert not {t for t in targets if "conv" in str(t)}  # not even an ordinary one: its template is TF32
    assert torch.ops.aten.bmm.default in targets or torch.ops.aten.mm.default in targets


def test_a_latent_at_any_batch_size_is_one_matrix_product():
    torch.manual_seed(0)
    model, z = _LatentGenerator().eval(), torch.randn(3, 16, 1, 1)
    batch = torch.export.Dim("batch", min=1, max=64)
    exported = torch.export.export(model, (z,), dynamic_shapes=({0: batch},))
    assert _decompose_and_compare(exported, (z,), model)
    for size in (1, 7, 64):
        other = torch.randn(size, 16, 1, 1)
        torch.testing.assert_close(exported.module()(other), model(other), rtol=1e-5, atol=1e-5)


def test_dynamic_sizes_and_dilation_are_written_out_without_baking_in_the_example():
    torch.manual_seed(0)
    model = _Upsampler().eval()
    width, batch = torch.export.Dim("width", min=2, max=32), torch.export.Dim("batch", min=1, max=8)
    exported = torch.export.export(model, (torch.randn(2, 8, 5, 7),), dynamic_shapes=({0: batch, 3: width},))
    assert _decompose_and_compare(exported, (torch.randn(2, 8, 5, 7),), model)  # a guard would fail the pass
    for shape in ((1, 8, 5, 2), (3, 8, 5, 32), (8, 8, 5, 13)):
        x = torch.randn(shape)
        torch.testing.assert_close(exported.module()(x), model(x), rtol=1e-5, atol=1e-5)
    dilated = torch.nn.ConvTranspose2d(4, 4, 3, stride=2, dilation=2, output_padding=1).eval()
    x = torch.randn(1, 4, 5, 5)
    assert _decompose_and_compare(torch.export.export(dilated, (x,)), (x,), dilated)


def test_non_finite_inputs_reach_only_the_outputs_atens_kernel_sends_them_to():
    """No product with an inserted zero: a NaN input pixel spoils only the outputs its taps land on."""
    weight = torch.randn(1, 1, 3, 3, dtype=torch.float64)
    x = torch.zeros(1, 1, 4, 4, dtype=torch.float64)
    x[0, 0, 1, 2] = float("nan")
    x[0, 0, 3, 0] = float("inf")
    expected = torch.nn.functional.conv_transpose2d(x, weight, stride=2, dilation=2, padding=1)
    got = conv_transpose(x, weight, None, [2, 2], [1, 1], [0, 0], 1, [2, 2])
    torch.testing.assert_close(got, expected, equal_nan=True)
    assert expected.isnan().sum() == 9 and expected.isfinite().sum() < expected.numel()


def test_metal_keeps_its_convolution_kernel():
    model, x = _Upsampler().eval(), torch.randn(1, 8, 3, 3)
    exported = torch.export.export(model, (x,))
    decompose = DecomposeInPlace.from_capabilities(new_registry(env=CLEAN_ENV).backend_config("mps").capabilities)
    decompose(exported.graph_module)
    assert [n for n in exported.graph.nodes if n.target is torch.ops.aten.conv_transpose2d.input]


def _decompose_and_compare(exported, inputs, model) -> bool:
    expected = model(*inputs)
    modified = _cuda_decompositions()(exported.graph_module).modified
    torch.testing.assert_close(exported.module()(*inputs), expected, rtol=1e-5, atol=1e-5)
    return modified

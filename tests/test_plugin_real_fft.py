"""The built-in real-fft plugin: irfft, hfft and their 2-D and n-D forms of real input as discrete Fourier
sums, against ATen's FFTs (pocketfft) on hypothesis signals and PyTorch's OpInfo samples."""

from __future__ import annotations

import pytest
import torch
from hypothesis import settings
from torch.testing._internal.common_methods_invocations import op_db

import shimkit.plugins.real_fft as real_fft
from shimkit.audit.coverage import audit_op
from shimkit.backend import backend_config
from shimkit.passes import DecomposeInPlace
from shimkit.registry import DecompositionDeclined
from shimkit.testing import assert_plugin_matches_reference

OPS = {op.name: op for op in op_db if not op.variant_test_name}
NAMES = ["fft.irfft", "fft.hfft", "fft.irfft2", "fft.irfftn", "fft.hfft2", "fft.hfftn"]


def test_the_sums_match_atens_ffts():
    assert_plugin_matches_reference("real-fft", rtol=1e-4, atol=1e-4,
                                    settings=settings(max_examples=80, derandomize=True, deadline=None, database=None))


class _Sample(torch.nn.Module):
    def __init__(self, op, sample):
        super().__init__()
        self.op, self.sample = op, sample

    def forward(self, x):
        return self.op(x, *self.sample.args, **self.sample.kwargs)


@pytest.mark.parametrize("name", NAMES)
def test_opinfo_samples_through_the_decomposed_program(name):
    """Every float32 sample, exported and decomposed by the mps table: no complex op is left, and the
    program computes what eager does."""
    table = backend_config("mps").decomposition_table
    cases = list(OPS[name].sample_inputs("cpu", torch.float32, requires_grad=False))
    assert cases
    checked = 0
    for sample in cases:
        try:
            expected = OPS[name].op(sample.input, *sample.args, **sample.kwargs)
        except RuntimeError:
            continue  # a sample ATen itself rejects (OpInfo's error inputs ride along)
        program = torch.export.export(_Sample(OPS[name].op, sample), (sample.input,), strict=False)
        assert DecomposeInPlace(table)(program).modified
        assert not any("fft" in str(node.target) for node in program.graph.nodes), program.graph
        scale = max(1.0, float(expected.abs().max())) if expected.numel() else 1.0
        torch.testing.assert_close(program.module()(sample.input), expected, rtol=1e-4, atol=1e-4 * scale,
                                   msg=lambda m, s=sample: f"{name} on {s}: {m}")
        checked += 1
    assert checked


def test_complex_input_is_declined_not_wrong():
    decomposition = real_fft.one_dim_decomposition("aten::fft_irfft.default", False)
    with pytest.raises(DecompositionDeclined, match="complex"):
        decomposition(torch.randn(5, dtype=torch.complex64))


def test_atens_argument_errors():
    irfftn = real_fft.many_dims_decomposition("aten::fft_irfftn.default", False, None)
    with pytest.raises(RuntimeError, match=r"Invalid number of data points \(0\)"):
        real_fft.one_dim_decomposition("aten::fft_irfft.default", False)(torch.randn(1))
    with pytest.raises(RuntimeError, match="FFT dims must be unique"):
        irfftn(torch.randn(3, 4), None, [1, -1])
    with pytest.raises(RuntimeError, match='Invalid normalization mode: "sideways"'):
        irfftn(torch.randn(3, 4), None, None, "sideways")


@pytest.mark.parametrize("name", ["fft.irfft", "fft.hfftn"])
def test_the_sweep_finds_them_missing_stock_and_clean_with_shimkit(name):
    result = audit_op(name, "float32")
    assert (result.stock, result.shimkit) == ("missing", "clean"), result

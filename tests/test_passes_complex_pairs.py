"""ComplexPairs: programs with real inputs and outputs that compute through complex tensors, made real
(complex values carried as view_as_real-packed tensors), against eager PyTorch (pocketfft) on PyTorch's
OpInfo samples and hypothesis signals of odd and prime lengths in every norm."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch.testing._internal.common_methods_invocations import op_db

from shimkit.passes import PassError
from shimkit.passes.complex_pairs import ComplexPairs
from shimkit.plugins.complex_fft import fft_c2c

# Every transform through the FFT op (on the CPU it is torch.fft: what is checked is the graph around it,
# the kernel itself in test_plugin_complex_fft_kernel.py and the adapter in test_metal_program_adapters.py).
THROUGH_FFT_OP = {"fft_kernel": torch.ops.shimkit.fft_c2c.default, "fft_kernel_from": 1}

OPS = {op.name: op for op in op_db if not op.variant_test_name}
# Real input only (ATen rejects complex input to these).
REAL_FFTS = ["fft.rfft", "fft.ihfft", "fft.rfft2", "fft.rfftn", "fft.ihfft2", "fft.ihfftn"]
# Complex input too (given as view_as_complex of a real program input).
COMPLEX_FFTS = ["fft.fft", "fft.ifft", "fft.fft2", "fft.ifft2", "fft.fftn", "fft.ifftn", "fft.irfft", "fft.hfft"]
SAMPLES_PER_CASE = 4  # OpInfo's first samples: every n/s/dim/norm form; all of them would cost CI a minute


def _no_complex_left(program: torch.export.ExportedProgram) -> bool:
    return not any(isinstance(v, torch.Tensor) and v.is_complex()
                   for node in program.graph.nodes for v in torch.utils._pytree.tree_leaves(node.meta.get("val")))


class _RealEdges(torch.nn.Module):
    """``op`` on a sample, the program's input and output real: complex ones through view_as_complex/real."""

    def __init__(self, op, sample, complex_input: bool):
        super().__init__()
        self.op, self.sample, self.complex_input = op, sample, complex_input

    def forward(self, x):
        if self.complex_input:
            x = torch.view_as_complex(x)
        result = self.op(x, *self.sample.args, **self.sample.kwargs)
        return torch.view_as_real(result.resolve_conj()) if result.is_complex() else result


def _made_real(module: torch.nn.Module, x: torch.Tensor, **options) -> torch.export.ExportedProgram:
    program = torch.export.export(module, (x,), strict=False).run_decompositions()
    ComplexPairs(**options)(program)
    assert _no_complex_left(program), program.graph
    return program


def _calls_fft_op(program: torch.export.ExportedProgram) -> bool:
    return any(node.target is torch.ops.shimkit.fft_c2c.default for node in program.graph.nodes)


@pytest.mark.parametrize("options", [{}, THROUGH_FFT_OP], ids=["dft", "fft-op"])
@pytest.mark.parametrize(("name", "dtype"), [(name, torch.float32) for name in REAL_FFTS + COMPLEX_FFTS[:6]]
                         + [(name, torch.complex64) for name in COMPLEX_FFTS])
def test_opinfo_fft_samples_made_real(name, dtype, options):
    cases = list(OPS[name].sample_inputs("cpu", dtype, requires_grad=False))[:SAMPLES_PER_CASE]
    checked = 0
    for sample in cases:
        module = _RealEdges(OPS[name].op, sample, dtype.is_complex)
        x = torch.view_as_real(sample.input).contiguous() if dtype.is_complex else sample.input
        try:
            expected = module(x)
        except RuntimeError:
            continue  # a sample ATen itself rejects
        program = _made_real(module, x, **options)
        assert _calls_fft_op(program) == bool(options) or x.numel() == 0, program.graph
        scale = max(1.0, float(expected.abs().max())) if expected.numel() else 1.0
        torch.testing.assert_close(program.module()(x), expected, rtol=1e-4, atol=1e-5 * scale,
                                   msg=lambda m, s=sample: f"{name} on {s}: {m}")
        checked += 1
    assert checked


class _SpectralArithmetic(torch.nn.Module):
    """Every rule at once: r2c, c2c both ways, c2r, complex/polar/conj/abs/angle, + - * / and a complex matmul."""

    def __init__(self, norm):
        super().__init__()
        self.norm = norm

    def forward(self, x):
        spectrum = torch.fft.fft(x, norm=self.norm)
        half = torch.fft.rfft(x, norm=self.norm)
        shaped = torch.polar(half.abs() + 1, half.angle()) / (half.conj() + 2j) - 0.5 * half
        mixed = torch.complex(x, x.flip(-1)) * spectrum + x
        back = torch.fft.ifft(mixed @ mixed.mT.conj(), norm=self.norm)
        return (torch.view_as_real(back).sum(-1),
                torch.fft.irfft(shaped, n=x.shape[-1], norm=self.norm), back.imag - back.real)


@settings(max_examples=12, deadline=None)
@given(rows=st.integers(1, 3), length=st.sampled_from([1, 2, 3, 5, 7, 8, 12, 13, 17, 31]),
       norm=st.sampled_from([None, "backward", "forward", "ortho"]), seed=st.integers(0, 2**16),
       options=st.sampled_from([{}, THROUGH_FFT_OP]))
def test_spectral_arithmetic_odd_and_prime_lengths(rows, length, norm, seed, options):
    x = torch.randn(rows, length, generator=torch.Generator().manual_seed(seed))
    module = _SpectralArithmetic(norm)
    program = _made_real(module, x, **options)
    assert _calls_fft_op(program) == bool(options)
    for got, expected in zip(program.module()(x), module(x)):
        scale = max(1.0, float(expected.abs().max()))
        torch.testing.assert_close(got, expected, rtol=1e-4, atol=2e-5 * scale)


class _StftMagnitude(torch.nn.Module):
    def forward(self, x):
        frames = torch.stft(x, 32, hop_length=8, window=torch.hann_window(32), return_complex=True)
        return frames.abs(), torch.istft(frames, 32, hop_length=8, window=torch.hann_window(32), length=x.shape[-1])


def test_stft_magnitude_and_istft_round_trip():
    x = torch.randn(2, 200, generator=torch.Generator().manual_seed(0))
    program = _made_real(_StftMagnitude(), x)
    magnitude, resynthesized = program.module()(x)
    expected_magnitude, expected_resynthesized = _StftMagnitude()(x)
    torch.testing.assert_close(magnitude, expected_magnitude, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(resynthesized, expected_resynthesized, rtol=1e-4, atol=1e-4)


class _ComplexOut(torch.nn.Module):
    def forward(self, x):
        return torch.fft.fft(x) * 2


def test_a_complex_output_is_named():
    program = torch.export.export(_ComplexOut(), (torch.randn(4),)).run_decompositions()
    with pytest.raises(PassError, match=r"mul.*complex value is a graph output.*view_as_real"):
        ComplexPairs()(program)


class _ComplexExp(torch.nn.Module):
    def forward(self, x):
        return torch.view_as_real(torch.fft.fft(x).exp())


def test_a_complex_op_without_rule_is_named():
    program = torch.export.export(_ComplexExp(), (torch.randn(4),)).run_decompositions()
    with pytest.raises(PassError, match=r"aten\.exp\.default on complex values has no real-pair rule"):
        ComplexPairs()(program)


class _Identity(torch.nn.Module):
    def forward(self, z):
        return torch.view_as_real(z * 2)


def test_a_complex_input_is_named():
    program = torch.export.export(_Identity(), (torch.randn(4, dtype=torch.complex64),)).run_decompositions()
    with pytest.raises(PassError, match="is a complex input"):
        ComplexPairs()(program)


def test_a_real_program_is_left_alone():
    program = torch.export.export(torch.nn.Linear(3, 2), (torch.randn(4, 3),)).run_decompositions()
    before = str(program.graph)
    assert not ComplexPairs()(program).modified
    assert str(program.graph) == before


@pytest.mark.parametrize("device", ["mps", "cuda"])
def test_both_devices_prepare_complex_programs_for_edge(device):
    """Registered as a pre-edge pass on mps and cuda (to_edge's verifier rejects complex programs on
    both); a complex output stays complex through one view_as_complex of its pair."""
    from shimkit.backend import backend_config

    x = torch.randn(3, 8, generator=torch.Generator().manual_seed(1))
    program = backend_config(device).prepare_for_edge(torch.export.export(_ComplexOut(), (x,)))
    complex_nodes = [n for n in program.graph.nodes if isinstance(n.meta.get("val"), torch.Tensor)
                     and n.meta["val"].is_complex()]
    assert [n.target for n in complex_nodes] == [torch.ops.aten.view_as_complex.default]
    torch.testing.assert_close(program.module()(x), _ComplexOut()(x), rtol=1e-5, atol=1e-5)


class _LongAndShort(torch.nn.Module):
    def forward(self, x):
        return torch.fft.irfft(torch.fft.rfft2(x) * 0.5, n=x.shape[-1]).sum(-2)


@pytest.mark.parametrize("device", ["mps", "cuda"])
def test_long_transforms_take_the_fft_op_only_where_the_device_has_its_kernel(device):
    """On mps (the complex_fft plugin ships aoti_torch_mps_fft_c2c) the 300-point transforms are
    shimkit::fft_c2c and the 8-point ones DFT matmuls; CUDA has no such shim: every transform a matmul."""
    from shimkit.backend import backend_config

    x = torch.randn(8, 300, generator=torch.Generator().manual_seed(2))
    program = backend_config(device).prepare_for_edge(torch.export.export(_LongAndShort(), (x,)))
    transforms = [n for n in program.graph.nodes if n.target is torch.ops.shimkit.fft_c2c.default]
    lengths = sorted(n.args[0].meta["val"].shape[-2] for n in transforms)
    assert lengths == ([300, 300] if device == "mps" else []), program.graph
    torch.testing.assert_close(program.module()(x), _LongAndShort()(x), rtol=1e-4, atol=1e-4)


def test_fft_op_options_are_checked():
    with pytest.raises(ValueError, match="fft_kernel_from must be a positive number of points, got 0"):
        ComplexPairs(fft_kernel=fft_c2c, fft_kernel_from=0)
    with pytest.raises(TypeError, match="fft_kernel must be an op like shimkit::fft_c2c"):
        ComplexPairs(fft_kernel="fft")
    with pytest.raises(ValueError, match=r"shimkit::fft_c2c: self must be float32 real pairs \[..., n, 2\]"):
        fft_c2c(torch.zeros(3, 4), False, 0)
    with pytest.raises(ValueError, match="normalization must be ATen's fft_norm_mode 0, 1 or 2, got 5"):
        fft_c2c(torch.zeros(3, 2), False, 5)


class _RoundTrip(torch.nn.Module):
    def forward(self, x):
        return torch.fft.irfft(torch.fft.rfft(x) * 2, n=x.shape[-1]) + torch.fft.fft(x).abs()


def test_float64_transforms_are_float64_matmuls_not_the_float32_kernel():
    """The FFT op is float32 (Metal's kernel); a float64 transform stays a DFT in float64, exact to float64
    rounding, for the float64 policy (or the audit) to see as float64."""
    x = torch.randn(2, 300, dtype=torch.float64, generator=torch.Generator().manual_seed(3))
    program = _made_real(_RoundTrip(), x, fft_kernel=torch.ops.shimkit.fft_c2c.default)
    assert not _calls_fft_op(program)
    torch.testing.assert_close(program.module()(x), _RoundTrip()(x), rtol=1e-10, atol=1e-10)

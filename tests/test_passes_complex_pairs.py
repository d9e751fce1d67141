"""ComplexPairs: programs with real inputs and outputs that compute through complex tensors, made real
(complex values carried as view_as_real-packed tensors), against eager PyTorch (pocketfft) on PyTorch's
OpInfo samples and hypothesis signals of odd and prime lengths in every norm."""

from __future__ import annotations

import functools
import math

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


class _ComplexSin(torch.nn.Module):
    def forward(self, x):
        return torch.view_as_real(torch.fft.fft(x).sin())


def test_a_complex_op_without_rule_is_named():
    program = torch.export.export(_ComplexSin(), (torch.randn(4),)).run_decompositions()
    with pytest.raises(PassError, match=r"at %sin .*aten\.sin\.default on complex values has no real-pair rule"):
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


# Complex pointwise math: exp, log, sqrt, pow, abs, angle, polar, reciprocal, rsqrt and a complex number times
# a real tensor (1j * phase), against ATen's complex64 results. ATen's CPU kernels compute each element with
# glibc's cexpf/clogf/csqrtf/cpowf (C99 Annex G), so special values are compared exactly: NaN where ATen has
# NaN, infinities of its signs, and (for all but pow, whose NaNs' signs decide some zeros' signs) zeros of
# its signs. Finite values are held to torch.testing's complex64 tolerance (rtol 1.3e-6, atol 1e-5, what
# OpInfo tests use) relative to the complex modulus: vectorised kernels round differently by host. pow's is
# widened by |exponent * log(base)|: exp(u) carries the float32 rounding of u, eps * |u|, relative, in ATen as
# here.
RTOL, ATOL = 1.3e-6, 1e-5
POINTWISE = ["exp", "log", "sqrt", "abs", "angle", "polar", "pow", "__rpow__", "reciprocal", "rsqrt", "square"]


def _assert_like_aten(got, expected, *, complex_result, rtol=RTOL, zero_signs=True, loose_signs=False, what=""):
    """``got`` and ``expected`` real (``view_as_real`` of a complex result when ``complex_result``); where
    ``loose_signs`` (pow's, :func:`_pow_tolerance`), which infinities but not their signs."""
    assert got.shape == expected.shape and got.dtype == expected.dtype, what
    special = ~expected.isfinite() | ~got.isfinite()
    same = (got.isnan() & expected.isnan()) | (got == expected) | (loose_signs & got.isinf() & expected.isinf())
    mismatch = special & ~same
    if zero_signs is not False:  # True, or where (C99 leaves the signs of zeros from NaN inputs unspecified)
        where = zero_signs.unsqueeze(-1) if complex_result and isinstance(zero_signs, torch.Tensor) else zero_signs
        mismatch |= (got == 0) & (expected == 0) & (got.signbit() != expected.signbit()) & where
    difference = torch.where(special, 0.0, got.double() - expected.double())
    magnitude = torch.where(special, 0.0, expected.double())
    if complex_result:
        mismatch, difference, magnitude = mismatch.any(-1), difference.norm(dim=-1), magnitude.norm(dim=-1)
    wrong = mismatch | (difference.abs() > ATOL + rtol * magnitude)
    if wrong.any():
        index = tuple(wrong.nonzero()[0].tolist())
        raise AssertionError(f"{what}: {int(wrong.sum())} of {wrong.numel()} differ from ATen, first at {index}: "
                             f"got {got[index].tolist()}, ATen {expected[index].tolist()}")


class _RealOperands(torch.nn.Module):
    """``op`` on a sample with every tensor operand a program input (a complex one as its view_as_real) and a
    complex result returned as its view_as_real."""

    def __init__(self, op, sample):
        super().__init__()
        self.op = op
        self.leaves, self.spec = torch.utils._pytree.tree_flatten((sample.input, sample.args, sample.kwargs))
        self.tensor_at = [i for i, leaf in enumerate(self.leaves) if isinstance(leaf, torch.Tensor)]

    def operands(self):
        return tuple(torch.view_as_real(self.leaves[i]).contiguous() if self.leaves[i].is_complex()
                     else self.leaves[i] for i in self.tensor_at)

    def forward(self, *operands):
        leaves = list(self.leaves)
        for index, operand in zip(self.tensor_at, operands):
            leaves[index] = torch.view_as_complex(operand) if self.leaves[index].is_complex() else operand
        x, args, kwargs = torch.utils._pytree.tree_unflatten(leaves, self.spec)
        result = self.op(x, *args, **kwargs)
        return torch.view_as_real(result) if result.is_complex() else result


def _pow_tolerance(base, exponent):
    """pow's RTOL widened by ``|u|``, ``u = exponent * log(base)`` (in complex128), and where the signs of
    infinite parts are noise: exp(u) carries the float32 rounding of u, about eps |u|, relative, and so
    the direction of an infinite result when ``|cos(Im u)|`` or ``|sin(Im u)|`` is within that."""
    u = torch.as_tensor(exponent).to(torch.complex128) * torch.as_tensor(base).to(torch.complex128).log()
    rtol = RTOL * (1 + u.abs().nan_to_num(posinf=0.0))
    return rtol, torch.stack([u.imag.cos().abs(), u.imag.sin().abs()], -1) <= rtol.unsqueeze(-1)


@pytest.mark.parametrize("name", POINTWISE)
def test_opinfo_pointwise_samples_match_atens_complex64(name):
    """Every complex64 sample of OpInfo's (polar: float32, its output complex), each operand a program
    input, made real and run against eager ATen."""
    dtype = torch.float32 if name == "polar" else torch.complex64
    samples = list(OPS[name].sample_inputs("cpu", dtype, requires_grad=False))
    assert samples
    for sample in samples:
        module = _RealOperands(OPS[name].op, sample)
        operands = module.operands()
        expected = module(*operands)
        program = torch.export.export(module, operands, strict=False).run_decompositions()
        ComplexPairs()(program)
        assert _no_complex_left(program), program.graph
        rtol, loose_signs = RTOL, False
        if name in ("pow", "__rpow__"):
            base, exponent = (sample.input, sample.args[0]) if name == "pow" else (sample.args[0], sample.input)
            rtol, loose_signs = _pow_tolerance(base, exponent)
        _assert_like_aten(program.module()(*operands), expected, complex_result=name not in ("abs", "angle"),
                          rtol=rtol, zero_signs=name not in ("pow", "__rpow__"), loose_signs=loose_signs,
                          what=f"{name} on {sample}")


class _Pointwise(torch.nn.Module):
    """Each rule on the same values: ``zs`` and ``ws`` are [n, 2] real pairs."""

    NAMES = ("exp", "log", "sqrt", "abs", "angle", "polar", "z ** 2.5", "z ** w", "2 ** z", "z ** (1+2j)",
             "z ** -1", "z ** 0.5", "z ** 3", "reciprocal", "rsqrt", "mag * exp(1j * phase)")
    POW = {"z ** 2.5", "z ** w", "2 ** z", "z ** (1+2j)"}

    def forward(self, zs, ws):
        z, w, r = torch.view_as_complex(zs), torch.view_as_complex(ws), torch.view_as_real
        magnitude, phase = zs.unbind(-1)
        return (r(z.exp()), r(z.log()), r(z.sqrt()), z.abs(), z.angle(), r(torch.polar(magnitude, phase)),
                r(z ** 2.5), r(z ** w), r(2.0 ** z), r(z ** (1 + 2j)), r(z ** -1), r(z ** 0.5), r(z ** 3),
                r(z.reciprocal()), r(z.rsqrt()), r(magnitude * torch.exp(1j * phase)))

    def tolerances(self, zs, ws):
        """(rtol, loose_signs) of each output: pow's from :func:`_pow_tolerance`."""
        z, w = (torch.view_as_complex(v) for v in (zs, ws))
        powers = {"z ** 2.5": (z, 2.5), "z ** w": (z, w), "2 ** z": (2.0, z), "z ** (1+2j)": (z, 1 + 2j)}
        return [_pow_tolerance(*powers[name]) if name in self.POW else (RTOL, False) for name in self.NAMES]


@functools.lru_cache(maxsize=None)
def _pointwise_made_real(rows):
    examples = (torch.randn(rows, 2), torch.randn(rows, 2))  # two tensors: export would alias one given twice
    program = torch.export.export(_Pointwise(), examples, strict=False).run_decompositions()
    ComplexPairs()(program)
    assert _no_complex_left(program), program.graph
    return program.module()


def _check_pointwise(zs, ws):
    module = _Pointwise()
    got, expected = _pointwise_made_real(len(zs))(zs, ws), module(zs, ws)
    # C99 leaves the signs that a NaN operand's sign bit decides unspecified (sqrt(-inf + i nan) = nan ± i inf).
    nan_rows = zs.isnan().any(-1) | ws.isnan().any(-1)
    for name, got_one, expected_one, (rtol, loose_signs) in zip(module.NAMES, got, expected,
                                                                 module.tolerances(zs, ws)):
        complex_result = name not in ("abs", "angle")
        nan_at = nan_rows.unsqueeze(-1) if complex_result else nan_rows
        _assert_like_aten(got_one, expected_one, complex_result=complex_result, rtol=rtol,
                          zero_signs=name not in module.POW and ~nan_rows, loose_signs=loose_signs | nan_at, what=name)


SPECIALS = [0.0, -0.0, 1.0, -1.0, 0.5, 2.0, -3.0, 1e-3, 88.0, 89.0, 100.0, -100.0, 3e38, -3e38, 1e-40, 1e-20, 1e19,
            math.inf, -math.inf, math.nan]


def _special_grid():
    """Every pair of special parts (signed zeros, subnormals, past exp's range, float's largest, infinities,
    NaN) as z, and in another order as w."""
    zs = torch.tensor([(x, y) for x in SPECIALS for y in SPECIALS], dtype=torch.float32)
    return zs, zs.flip(0).flip(1).contiguous()


def test_special_values_match_aten():
    _check_pointwise(*_special_grid())


def test_branch_cuts_follow_the_sign_of_zero():
    """The negative real axis: sqrt and log take the side of the imaginary part's sign, -0 included, and a real
    magnitude times exp(1j * 0) keeps ATen's +0 imaginary part (its angle pi, not -pi)."""
    zs = torch.tensor([[-4.0, 0.0], [-4.0, -0.0], [-1.0, 0.0], [-1.0, -0.0]])
    module = _pointwise_made_real(len(zs))
    outputs = dict(zip(_Pointwise.NAMES, module(zs, zs)))
    assert outputs["sqrt"].tolist() == [[0.0, 2.0], [0.0, -2.0], [0.0, 1.0], [0.0, -1.0]]
    assert outputs["log"][:, 1].tolist() == pytest.approx([math.pi, -math.pi, math.pi, -math.pi])
    assert outputs["angle"].tolist() == pytest.approx([math.pi, -math.pi, math.pi, -math.pi])
    on_axis = outputs["mag * exp(1j * phase)"]  # magnitudes -4 and -1, phases 0 and -0
    assert on_axis[:, 1].signbit().tolist() == [False, False, False, False]
    _check_pointwise(zs, zs)


PARTS = st.floats(width=32)  # any float32: subnormals, float's largest, infinities, NaN


@settings(max_examples=60, deadline=None)
@given(z=st.lists(st.tuples(PARTS, PARTS), min_size=32, max_size=32),
       w=st.lists(st.tuples(PARTS, PARTS), min_size=32, max_size=32))
def test_hypothesis_values_match_aten(z, w):
    _check_pointwise(torch.tensor(z, dtype=torch.float32), torch.tensor(w, dtype=torch.float32))


class _PhaseHead(torch.nn.Module):
    """An iSTFT vocoder head as written: magnitude times exp(1j * phase), resynthesized by istft, and the same
    spectrum through irfft."""

    def __init__(self, frame=32, hop=8, features=16):
        super().__init__()
        self.frame, self.hop = frame, hop
        self.register_buffer("window", torch.hann_window(frame))
        self.out = torch.nn.Linear(features, frame + 2)

    def forward(self, features):
        magnitude, phase = self.out(features).transpose(1, 2).chunk(2, dim=1)
        spectrum = torch.exp(magnitude).clamp(max=1e2) * torch.exp(1j * phase)
        return (torch.istft(spectrum, self.frame, hop_length=self.hop, window=self.window, center=True),
                torch.fft.irfft(spectrum, n=self.frame, dim=1))


@pytest.mark.parametrize("device", ["mps", "cuda"])
def test_phase_head_is_made_real_on_both_devices(device):
    """`mag * torch.exp(1j * phase)` stopped both devices' pre-edge pass ("aten.exp on complex values has no
    real-pair rule")."""
    from shimkit.backend import backend_config

    head, x = _PhaseHead().eval(), torch.randn(1, 9, 16, generator=torch.Generator().manual_seed(4))
    program = backend_config(device).prepare_for_edge(torch.export.export(head, (x,)))
    assert _no_complex_left(program), program.graph
    for got, expected in zip(program.module()(x), head(x)):
        torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-4)


def _audit_on_metal(name, model, inputs):
    from shimkit.audit.loader import LoadedModel
    from shimkit.audit.options import AuditOptions
    from shimkit.audit.runner import audit_loaded
    from shimkit.backend import new_registry

    config = new_registry(env={"SHIMKIT_DISABLE_PLUGIN_AUTOLOAD": "1"}).backend_config("mps")
    return audit_loaded(LoadedModel(name, model=model, example_inputs=inputs), config=config,
                        options=AuditOptions(numerics="execute"))


def test_phase_head_audits_clean_for_metal_with_its_numbers_executed():
    """The generated Metal program (Inductor's MSL kernels and wrapper, run on Linux by shimkit's stand-in
    runtime) against eager, at float32 tolerance from float64."""
    torch.manual_seed(5)
    audit = _audit_on_metal("phase_head", _PhaseHead().eval(), (torch.randn(1, 9, 16),))
    assert (audit.status, audit.failure, audit.missing) == ("clean", None, []), audit
    (check,) = audit.numerics.checks
    assert audit.numerics.ran == "program" and check.ok and len(check.max_errors) == 2, audit.numerics


def test_the_metal_program_gives_atens_special_values():
    """Inductor's MSL for the rules (isinf, isnan, where, atan2, the reciprocal's signed infinities) executed
    on the special-value grid: the audit requires every NaN and infinity where eager has it."""
    audit = _audit_on_metal("special_grid", _Pointwise(), _special_grid())
    assert audit.status == "clean" and audit.numerics.ran == "program", audit.numerics

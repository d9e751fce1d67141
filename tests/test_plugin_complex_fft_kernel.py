"""The MSL FFT kernel (plugins/complex_fft/kernel/fft.metal) run by shimkit.metal against torch.fft:
mixed-radix Stockham lengths, Bluestein's lengths (a prime factor above 13), odd and prime lengths,
every norm, both directions, on hypothesis signals."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from shimkit.metal import compile_shader
from shimkit.plugins.complex_fft.fft import FFT_SOURCE, NORMS, fft, radices

LIBRARY = compile_shader(FFT_SOURCE.read_text())
# Powers of two, every radix the kernel has, primes the Stockham passes cannot take (Bluestein), and a
# length with all six small primes.
LENGTHS = st.integers(1, 160) | st.sampled_from([256, 1024, 4096, 3 * 5 * 7 * 11 * 13, 1009, 4099, 2 * 8191])


def _relative_error(got: torch.Tensor, x: torch.Tensor, inverse: bool, norm) -> float:
    transform = torch.fft.ifft if inverse else torch.fft.fft
    want = torch.view_as_real(transform(torch.view_as_complex(x.double()), norm=norm))
    return ((got.double() - want).norm() / want.norm().clamp_min(1e-30)).item()


@given(n=LENGTHS, batch=st.integers(1, 3), inverse=st.booleans(), norm=st.sampled_from((None, *NORMS)),
       data=st.data())
def test_the_kernel_computes_torch_fft_of_any_length(n, batch, inverse, norm, data):
    values = data.draw(hnp.arrays("float32", (batch, n, 2), elements=st.floats(-1e3, 1e3, width=32)))
    x = torch.from_numpy(values)
    got = fft(LIBRARY, x, inverse=inverse, norm=norm)
    assert got.shape == x.shape and got.dtype == torch.float32
    # float32 FFTs err like log2(n) roundings (pocketfft's complex64 results do too); a wrong twiddle,
    # index or scale errs by order one.
    assert _relative_error(got, x, inverse, norm) < 2e-6 * max(1.0, math.log2(n)), (n, batch, inverse, norm)


def test_long_prime_lengths_take_bluestein_and_smooth_ones_the_stockham_passes():
    assert radices(3 * 5 * 7 * 11 * 13 * 8) == [8, 3, 5, 7, 11, 13]
    assert radices(17) is None and radices(4099) is None and radices(1) == []
    for n in (17, 4099):
        x = torch.randn(2, n, 2, generator=torch.Generator().manual_seed(n))
        assert _relative_error(fft(LIBRARY, x), x, False, None) < 2e-6 * math.log2(n)


def test_a_round_trip_gives_the_signal_back_and_leading_dims_are_kept():
    x = torch.randn(2, 3, 97, 2, generator=torch.Generator().manual_seed(0))
    back = fft(LIBRARY, fft(LIBRARY, x, norm="ortho"), inverse=True, norm="ortho")
    assert back.shape == x.shape
    torch.testing.assert_close(back, x, rtol=0, atol=2e-5)
    assert fft(LIBRARY, torch.empty(0, 5, 2)).shape == (0, 5, 2)


def test_bad_input_is_refused_naming_what_is_wrong():
    with pytest.raises(ValueError, match=r"float32 real pairs \[..., n, 2\], got torch.float64"):
        fft(LIBRARY, torch.zeros(4, 2, dtype=torch.float64))
    with pytest.raises(ValueError, match="fft of 0 points"):
        fft(LIBRARY, torch.zeros(3, 0, 2))
    with pytest.raises(ValueError, match="Invalid normalization mode: 'unitary'"):
        fft(LIBRARY, torch.zeros(4, 2), norm="unitary")


def test_the_plugins_kernel_matches_its_op_through_the_registrys_checks():
    """shimkit::fft_c2c's MSL kernel, launched as its c-shim adapter dispatches it, against the op's CPU
    implementation (torch.fft) on the plugin's own input strategy: what shimkit.testing runs for any plugin."""
    from hypothesis import HealthCheck, settings

    from shimkit.testing import assert_plugin_matches_reference

    # values in [-1, 1] and up to 1000 points: float32 rounding of sums as large as about 30
    assert_plugin_matches_reference("complex_fft", rtol=1e-5, atol=2e-5,
                                    settings=settings(max_examples=40, derandomize=True, deadline=None,
                                                      suppress_health_check=[HealthCheck.too_slow]))

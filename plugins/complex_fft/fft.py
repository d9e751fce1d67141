"""FFTs of any length through ``kernel/fft.metal``, dispatched as the Mac would dispatch them, for complex
values carried as real pairs (``[..., n, 2]``, ``torch.view_as_real``'s layout).

>>> from shimkit.metal import compile_shader
>>> x = torch.randn(3, 17, 2)                 # three rows of 17 complex values: a prime length
>>> got = fft(compile_shader(FFT_SOURCE.read_text()), x, norm="ortho")
>>> want = torch.view_as_real(torch.fft.fft(torch.view_as_complex(x), norm="ortho"))
>>> torch.allclose(got, want, atol=1e-5)
True
"""

from __future__ import annotations

import functools
import math
from pathlib import Path

import torch

FFT_SOURCE = Path(__file__).resolve().parent / "kernel" / "fft.metal"
RADICES = (8, 4, 2, 3, 5, 7, 11, 13)  # kernel/fft.metal's kMaxRadix is the largest
NORMS = ("backward", "forward", "ortho")


def radices(n: int) -> list[int] | None:
    """The Stockham passes for length ``n`` (largest radices first), or ``None`` when a prime factor above
    13 leaves it to Bluestein's algorithm."""
    passes = []
    for radix in RADICES:
        while n % radix == 0 and n > 1:
            passes.append(radix)
            n //= radix
    return passes if n == 1 else None


def norm_scale(n: int, norm: str | None, inverse: bool) -> float:
    """The factor ``torch.fft`` applies for ``norm`` on a transform of ``n`` points."""
    norm = norm or "backward"
    if norm not in NORMS:
        raise ValueError(f"Invalid normalization mode: {norm!r} (expected one of {', '.join(NORMS)})")
    if norm == "ortho":
        return 1 / math.sqrt(n)
    return 1 / n if (norm == "backward") == inverse else 1.0


def fft(library, x: torch.Tensor, *, inverse: bool = False, norm: str | None = None) -> torch.Tensor:
    """The discrete Fourier transform over the last complex dim of real pairs ``x`` (``[..., n, 2]``
    float32), as ``torch.fft.fft`` (``ifft`` with ``inverse``) computes it, through ``library`` (the
    compiled ``kernel/fft.metal``); a new tensor of ``x``'s shape."""
    _check_pairs(x)
    return _transform(library, x, inverse, norm_scale(x.shape[-2], norm, inverse))


def launch_fft_c2c(library, self: torch.Tensor, inverse: bool, normalization: int) -> torch.Tensor:
    """``shimkit::fft_c2c`` through ``library``, as ``fft_shim_mps.mm`` dispatches it: ATen's
    ``fft_norm_mode`` (0 none, 1 by ``1 / sqrt(n)``, 2 by ``1 / n``) scales the last dispatch."""
    _check_pairs(self)
    return _transform(library, self, inverse, normalization_scale(self.shape[-2], normalization))


def normalization_scale(n: int, normalization: int) -> float:
    """ATen's ``fft_norm_mode`` as a factor: 0 none, 1 by ``1 / sqrt(n)``, 2 by ``1 / n``."""
    if normalization not in (0, 1, 2):
        raise ValueError(f"normalization must be ATen's fft_norm_mode 0, 1 or 2, got {normalization!r}")
    return (1.0, 1 / math.sqrt(n), 1 / n)[normalization]


def _check_pairs(x: torch.Tensor) -> None:
    if x.dtype != torch.float32 or x.dim() < 2 or x.shape[-1] != 2:
        raise ValueError(f"fft takes float32 real pairs [..., n, 2], got {x.dtype} of shape {list(x.shape)}")
    if x.shape[-2] == 0:
        raise ValueError("fft of 0 points: torch.fft requires at least one")


def _transform(library, x: torch.Tensor, inverse: bool, scale: float) -> torch.Tensor:
    n = x.shape[-2]
    rows = x.reshape(-1, n, 2).contiguous()
    if rows.shape[0] == 0:
        return x.new_empty(x.shape)
    sign = 1 if inverse else -1
    passes = radices(n)
    out = _stockham(library, rows, passes, sign, scale) if passes is not None else \
        _bluestein(library, rows, sign, scale)
    return out.reshape(x.shape)


def _stockham(library, rows: torch.Tensor, passes: list[int], sign: int, scale: float) -> torch.Tensor:
    n = rows.shape[1]
    passes = passes or [1]  # one point: a radix-1 pass writes it times the scale
    source, target = rows, torch.empty_like(rows)
    done = 1
    for index, radix in enumerate(passes):
        last = index == len(passes) - 1
        library.fft_stockham_pass_float(target, source, n, radix, done, sign, scale if last else 1.0,
                                  threads=(n // radix, rows.shape[0]), group_size=(min(n // radix, 256), 1))
        done *= radix
        source, target = target, (torch.empty_like(rows) if source is rows else source)
    return source


def _bluestein(library, rows: torch.Tensor, sign: int, scale: float) -> torch.Tensor:
    batch, n = rows.shape[:2]
    m = 1 << (2 * n - 2).bit_length()  # the least power of two >= 2n - 1
    power_of_two = radices(m)
    assert power_of_two is not None  # a power of two is all radix 8, 4 and 2
    group = (min(m, 256), 1)
    chirped = torch.empty(batch, m, 2)
    library.fft_bluestein_chirp_float(chirped, rows, n, m, sign, threads=(m, batch), group_size=group)
    spectrum = _stockham(library, chirped, power_of_two, -1, 1.0)
    library.fft_bluestein_multiply_float(spectrum, _bluestein_filter(library, n, m, sign), m,
                                   threads=(m, batch), group_size=group)
    convolved = _stockham(library, spectrum, power_of_two, 1, 1 / m)
    out = torch.empty_like(rows)
    library.fft_bluestein_finish_float(out, convolved, n, m, sign, scale, threads=(n, batch), group_size=(min(n, 256), 1))
    return out


@functools.lru_cache(maxsize=32)
def _bluestein_filter(library, n: int, m: int, sign: int) -> torch.Tensor:
    """The spectrum of Bluestein's chirp filter: it depends only on the length and the direction, so each
    library computes it once per (n, sign). Read only (the multiply writes its other operand)."""
    power_of_two = radices(m)
    assert power_of_two is not None
    kernel = torch.empty(1, m, 2)
    library.fft_bluestein_filter_float(kernel, n, m, sign, threads=m, group_size=min(m, 256))
    return _stockham(library, kernel, power_of_two, -1, 1.0)

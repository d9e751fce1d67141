"""Complex values carried as real pairs: a program whose inputs and outputs are real, but which computes
through complex tensors (an STFT magnitude, an FFT-domain product read back with ``view_as_real``), made
real throughout.

Neither Metal nor Inductor's Metal code generator has a complex dtype. Every complex-valued node is
replaced by a real node holding the same value as ``view_as_real`` lays it out: the complex shape plus a
trailing dim of 2, real part first ("packed"). Each op that creates, combines or consumes complex values
has a rule from packed (and real) inputs to a packed (or real) result, traced on the nodes' fake values
and spliced in place:

- ``view_as_real`` is the packed value itself, ``view_as_complex`` its real input; ``complex``, ``polar``,
  ``real``, ``imag``, ``conj``, ``abs`` (``hypot``), ``angle`` (``atan2``) read or build the two parts;
- ``add``/``sub``/``mul``/``div`` and ``mm``/``bmm``/``matmul`` with complex operands (a real operand is
  a complex one with zero imaginary part, ``1j * phase`` included) follow complex arithmetic as ATen's
  ``c10::complex`` does it;
- ``exp``, ``log``, ``sqrt``, ``pow`` (complex or real base and exponent, tensor or number),
  ``reciprocal`` and ``rsqrt`` follow ATen's CPU kernels (glibc's C99 functions): principal branches,
  cuts taken by the sign of a zero part, C99's special values, no overflow from intermediate squares;
- ops that act on the real and imaginary parts alike (views, slices, ``cat``, ``clone``, ``sum``,
  ``mean`` ...) run on each part;
- ``_fft_r2c``, ``_fft_c2c`` and ``_fft_c2r`` (what every ``torch.fft`` function and ``stft`` lower to) are
  discrete Fourier sums as real matrix products, one transformed dim at a time, with angles reduced
  exactly (``(k t) mod n`` in int64 before ``cos``/``sin`` in the values' dtype) as in ``plugins/real_fft.py``.
  They cost ``O(n)`` per output point: right for the short transforms models use (STFT frames). Longer
  ones go to an FFT op where the pass is given one (``fft_kernel``: ``shimkit::fft_c2c`` on mps), ``c2r``
  through the whole Hermitian spectrum.

A complex value that reaches a graph output cannot be a pair: the pass raises :class:`PassError` naming
the node. A complex op without a rule is named the same way. Sizes must be static.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import math
import operator
from typing import Any, Callable

import torch
from torch import fx
from torch._subclasses.fake_tensor import FakeTensor
from torch.fx.experimental.proxy_tensor import make_fx
from torch.utils import _pytree as pytree

from shimkit.passes.base import PROVENANCE_META, PassContext, PassError, ShimkitPass
from shimkit.passes.decompose import DecomposeInPlace
from shimkit.passes.ops import aten_op, edge_op, is_edge

__all__ = ["ComplexPairs"]

aten = torch.ops.aten


class _Pair:
    """A complex value inside a rule: its real and imaginary parts as real tensors."""

    def __init__(self, real: torch.Tensor, imag: torch.Tensor, packed: torch.Tensor | None = None) -> None:
        self.real, self.imag, self._packed = real, imag, packed

    @staticmethod
    def unpack(packed: torch.Tensor) -> "_Pair":
        return _Pair(packed[..., 0], packed[..., 1], packed)

    def pack(self) -> torch.Tensor:
        # A value passed through unchanged (view_as_real, view_as_complex, resolve_conj) costs no copy.
        return self._packed if self._packed is not None else torch.stack([self.real, self.imag], dim=-1)


def _lift(value: Any) -> _Pair:
    """A complex operand: a pair stays, a real tensor or number gets a zero imaginary part."""
    if isinstance(value, _Pair):
        return value
    if isinstance(value, complex):
        return _Pair(value.real, value.imag)  # type: ignore[arg-type]
    return _Pair(value, torch.zeros_like(value) if isinstance(value, torch.Tensor) else 0.0)


def _add(a: Any, b: Any, alpha: Any = 1, sign: int = 1) -> _Pair:
    a, b = _lift(a), _lift(b)
    alpha = _lift(alpha)
    # b * alpha, alpha possibly complex
    scaled = _Pair(b.real * alpha.real - b.imag * alpha.imag, b.real * alpha.imag + b.imag * alpha.real)
    return _Pair(a.real + sign * scaled.real, a.imag + sign * scaled.imag)


def _mul(a: Any, b: Any) -> _Pair:
    """Complex multiplication as ATen's: a real operand (a tensor, or a number such as a norm's scale) is
    complex with imaginary part +0 and all four products are taken, so that zero signs and NaNs come out as
    ATen's: ``(1 + 0i) * -1`` is ``-1 + 0i`` (angle pi) where scaling both parts would give ``-1 - 0i``
    (angle -pi), and ``1j * phase`` (an iSTFT head's phase) is ``phase * 0 - 0 + (phase + 0) i``. The
    imaginary part of a real operand is the number 0.0, not a tensor of zeros."""
    a, b = (v if isinstance(v, (_Pair, complex)) else _Pair(v, 0.0) for v in (a, b))
    a, b = _lift(a), _lift(b)
    return _Pair(a.real * b.real - a.imag * b.imag, a.real * b.imag + a.imag * b.real)


def _div(a: Any, b: Any) -> _Pair:
    if isinstance(b, complex):
        return _mul(a, 1 / b)
    if not isinstance(b, _Pair):
        a = _lift(a)
        return _Pair(a.real / b, a.imag / b)
    a = _lift(a)
    # c10::complex's division (Smith's algorithm, as numpy's), which ATen's kernels use: no overflow
    # from squaring |b|, the numerator times the reciprocal of the denominator as c10 computes it, and a
    # zero divisor giving each part over 0 (inf or NaN).
    bigger_real = b.real.abs() >= b.imag.abs()
    ratio_r = b.imag / b.real
    scale_r = (b.real + b.imag * ratio_r).reciprocal()
    ratio_i = b.real / b.imag
    scale_i = (b.imag + b.real * ratio_i).reciprocal()
    real = torch.where(bigger_real, (a.real + a.imag * ratio_r) * scale_r, (a.real * ratio_i + a.imag) * scale_i)
    imag = torch.where(bigger_real, (a.imag - a.real * ratio_r) * scale_r, (a.imag * ratio_i - a.real) * scale_i)
    zero = (b.real == 0) & (b.imag == 0)
    return _Pair(torch.where(zero, a.real / b.real.abs(), real), torch.where(zero, a.imag / b.imag.abs(), imag))


def _product(op: Callable[..., torch.Tensor]) -> Callable[..., _Pair]:
    def product(a: Any, b: Any) -> _Pair:
        if not isinstance(a, _Pair) or not isinstance(b, _Pair):
            pair, other = (a, b) if isinstance(a, _Pair) else (b, a)
            first = isinstance(a, _Pair)
            return _Pair(*(op(part, other) if first else op(other, part) for part in (pair.real, pair.imag)))
        if a.real.dim() < 2 or b.real.dim() < 2:
            return _Pair(op(a.real, b.real) - op(a.imag, b.imag), op(a.real, b.imag) + op(a.imag, b.real))
        return _one_product(op, a, b.real, b.imag)

    return product


def _one_product(op: Callable[..., torch.Tensor], a: _Pair, b_real: torch.Tensor, b_imag: torch.Tensor) -> _Pair:
    """``a @ (b_real + i b_imag)`` as one real product, ``[ar ai] @ [[br bi], [-bi br]]``: not the four
    that ``a.real @ b.real - a.imag @ b.imag`` takes, which Inductor's ``mm_plus_mm`` pattern (on under
    ``max_autotune``, as ExecuTorch's Metal backend sets it) would fuse into ``aoti_torch__mm_plus_mm_out``,
    a kernel the Metal runtime lacks."""
    columns = b_real.shape[-1]
    block = torch.cat([torch.cat([b_real, b_imag], -1), torch.cat([-b_imag, b_real], -1)], -2)
    out = op(torch.cat([a.real, a.imag], -1), block)
    return _Pair(out[..., :columns], out[..., columns:])


def _magnitude_terms(a: torch.Tensor, b: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``|a + ib| = big * sqrt(1 + ratio^2)`` with ``ratio <= 1`` (nothing squared overflows), and where
    either part is infinite (the magnitude then is, even with a NaN beside it)."""
    a, b = a.abs(), b.abs()
    big = torch.maximum(a, b)
    ratio = torch.minimum(a, b) / torch.where(big == 0, 1.0, big)
    return big, ratio, a.isinf() | b.isinf()


def _hypot(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """``|a + ib|`` as ``hypot`` computes it, in core ATen ops: ``hypot`` itself is not core ATen, and the
    edge verifier rejects it."""
    big, ratio, infinite = _magnitude_terms(a, b)
    return torch.where(infinite, math.inf, big * torch.sqrt(1 + ratio * ratio))


def _negative(x: torch.Tensor) -> torch.Tensor:
    """Whether ``x``'s sign bit is set, ``-0`` included (``1 / -0`` is ``-inf``): ``signbit`` and
    ``copysign`` are not core ATen."""
    return (x < 0) | ((x == 0) & (x.reciprocal() < 0))


def _copysign(magnitude: Any, sign: torch.Tensor) -> torch.Tensor:
    """``|magnitude|`` with ``sign``'s sign bit (a NaN ``sign`` counts as positive)."""
    magnitude = magnitude.abs() if isinstance(magnitude, torch.Tensor) else abs(magnitude)
    return torch.where(_negative(sign), -magnitude, magnitude)


# The special values below are C99's (Annex G): ATen's CPU kernels compute each element with c10::complex's
# exp/log/sqrt/pow, which are std::'s, glibc's cexpf/clogf/csqrtf/cpowf on Linux (libc++'s, also Annex G, on
# macOS). Where C99 leaves a sign unspecified, glibc's is taken where it costs nothing (a NaN's sign bit,
# which core ATen ops cannot read, is not).

def _exp(z: _Pair) -> _Pair:
    """``e^x (cos y + i sin y)``, ``e^x`` as ``e^(x/2)`` twice: past float's exp range (``x`` > 88.7) the
    product is still finite where ``|cos y|`` or ``|sin y|`` is small, as glibc's scaled cexpf gives it.
    Where the formula's ``inf * 0`` or ``0 * nan`` would be NaN, C99's values: a zero imaginary part stays
    itself (``exp(inf + 0i) = inf + 0i``, ``exp(nan + 0i) = nan + 0i``), and with ``y`` infinite or NaN,
    ``x = -inf`` gives ``0`` (imaginary part of ``y``'s sign, as glibc's) and ``x = +inf`` gives
    ``inf + i nan`` (finite ``x`` gives NaNs, as the formula does)."""
    x, y = z.real, z.imag
    half = torch.exp(x * 0.5)
    real, imag = half * (half * y.cos()), half * (half * y.sin())
    imag = torch.where(y == 0, y, imag)
    unbounded_angle = x.isinf() & (y.isinf() | y.isnan())
    real = torch.where(unbounded_angle, torch.where(x > 0, math.inf, 0.0), real)
    imag = torch.where(unbounded_angle, torch.where(x > 0, math.nan, _copysign(0.0, y)), imag)
    return _Pair(real, imag)


def _log(z: _Pair) -> _Pair:
    """The principal log, ``log|z| + i atan2(y, x)``: its cut along the negative real axis is taken by the
    sign of a zero imaginary part (``log(-1 + 0i) = i pi``, ``log(-1 - 0i) = -i pi``) and ``log(±0)`` is
    ``-inf`` with angle ``0`` or ``pi``, all as atan2 has them; ``log|z|`` is infinite when either part is
    (``log(inf + i nan) = inf + i nan``)."""
    return _Pair(_log_magnitude(z.real, z.imag), torch.atan2(z.imag, z.real))


def _log_magnitude(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """``log|x + iy|`` to a few ulps relative, as glibc's clogf: ``pow`` multiplies it by the exponent.

    Away from ``|z| = 1``, ``log(big) + log(sqrt(1 + ratio^2))``, not ``log(hypot)``: ``|z|`` overflows
    past float's largest where its log does not (``log|3e38 + 3e38i|`` is 88.9). Near it (``big`` in
    [0.5, 2)) that is a difference of rounded terms, 0 for ``log|-1 - 9.5e-15i|`` where glibc has 4.6e-29
    (and ``(-1 - 9.5e-15i) ** 29i`` an imaginary part of 4.9e12, not 0): there
    ``log1p((big - 1)(big + 1) + small^2) / 2``, ``big - 1`` exact (Sterbenz), and ``log1p(d)`` as
    ``d log(1 + d) / ((1 + d) - 1)`` (Goldberg), since Inductor's Metal log1p is ``log(1 + d)``, which
    loses what this keeps."""
    big, ratio, infinite = _magnitude_terms(x, y)
    far = torch.log(big) + 0.5 * torch.log(1 + ratio * ratio)
    small = torch.minimum(x.abs(), y.abs())
    d = (big - 1) * (big + 1) + small * small
    u = 1 + d
    near = 0.5 * torch.where(u == 1, d, torch.log(u) * d / (u - 1))
    return torch.where(infinite, math.inf, torch.where((big >= 0.5) & (big < 2), near, far))


def _sqrt(z: _Pair) -> _Pair:
    """The principal root (real part >= 0), its imaginary part of ``y``'s sign, ``-0`` included: the cut
    along the negative real axis gives ``sqrt(-4 + 0i) = 2i`` and ``sqrt(-4 - 0i) = -2i``.

    Kahan's form: ``t = sqrt((|x| + |z|) / 2)`` is one part and ``y / 2t`` the other, with no cancellation;
    ``|z| = big * sqrt(1 + ratio^2)`` (hypot's terms) with ``big`` factored out of the root, so that
    neither ``|z|`` nor ``|x| + |z|`` overflows for parts near float's largest. Then C99's special values:
    ``sqrt(±0 ± 0i) = +0 ± 0i``; an infinite imaginary part gives ``inf + y i`` whatever ``x`` is;
    ``x = +inf`` gives ``inf ± 0i`` (NaN for a NaN ``y``) and ``x = -inf`` gives ``0 ± inf i``."""
    x, y = z.real, z.imag
    big, ratio, _ = _magnitude_terms(x, y)
    scale = torch.where(big == 0, 1.0, big)
    t = torch.sqrt(scale) * torch.sqrt((x.abs() / scale + torch.sqrt(1 + ratio * ratio)) * 0.5)
    right = x >= 0
    real = torch.where(right, t, y.abs() / (2 * t))
    imag = torch.where(right, y / (2 * t), _copysign(t, y))
    real, imag = torch.where(big == 0, 0.0, real), torch.where(big == 0, y, imag)
    real = torch.where(x == -math.inf, (y * 0).abs(), real)  # y * 0: NaN stays NaN
    imag = torch.where(x == -math.inf, _copysign(math.inf, y), imag)
    real, imag = torch.where(x == math.inf, math.inf, real), torch.where(x == math.inf, y * 0, imag)
    return _Pair(torch.where(y.isinf(), math.inf, real), torch.where(y.isinf(), y, imag))


def _reciprocal(z: Any) -> _Pair:
    """``1 / z`` as ATen's reciprocal kernel computes it, by c10::complex's division."""
    return _div(1.0, z)


def _log_of_number(base: complex) -> complex:
    """``log(base)`` of a Python number (a ``pow`` base), ``log(0) = -inf`` as clog has it (``cmath``
    raises)."""
    return complex(math.log(abs(base)) if base != 0 else -math.inf, math.atan2(base.imag, base.real))


def _annex_g_mul(a: _Pair, b: _Pair) -> _Pair:
    """``a * b`` as C99's Annex G multiplication (``__mulsc3``), which glibc's cpow (and libc++'s pow)
    use for ``exponent * log(base)``: where the formula gives ``NaN + NaN i`` although a factor is
    infinite or a product overflowed, the infinity is recovered (an infinite factor boxed to parts of
    ±1 and ±0, NaNs beside an infinity made 0, the formula again times inf), so that
    ``(inf + i nan) ** 2.5`` is ``inf + i nan`` and not NaN."""
    parts = [a.real, a.imag, b.real, b.imag]
    like = next(p for p in parts if isinstance(p, torch.Tensor))
    ar, ai, br, bi = (p if isinstance(p, torch.Tensor) else torch.full_like(like, p) for p in parts)
    ac, bd, ad, bc = ar * br, ai * bi, ar * bi, ai * br
    real, imag = ac - bd, ad + bc
    a_inf, b_inf = ar.isinf() | ai.isinf(), br.isinf() | bi.isinf()
    overflow = ~(a_inf | b_inf) & (ac.isinf() | bd.isinf() | ad.isinf() | bc.isinf())

    def boxed(v: torch.Tensor) -> torch.Tensor:
        return _copysign(torch.where(v.isinf(), 1.0, 0.0), v)

    def nan_to_zero(v: torch.Tensor) -> torch.Tensor:
        return torch.where(v.isnan(), _copysign(0.0, v), v)

    ar, ai = (torch.where(a_inf, boxed(v), torch.where(b_inf | overflow, nan_to_zero(v), v)) for v in (ar, ai))
    br, bi = (torch.where(b_inf, boxed(v), torch.where(a_inf | overflow, nan_to_zero(v), v)) for v in (br, bi))
    recover = real.isnan() & imag.isnan() & (a_inf | b_inf | overflow)
    return _Pair(torch.where(recover, math.inf * (ar * br - ai * bi), real),
                 torch.where(recover, math.inf * (ar * bi + ai * br), imag))


def _pow(base: Any, exponent: Any) -> _Pair:
    """``base ** exponent`` with a complex operand, as ATen computes it: a number exponent that ATen's
    ``pow_tensor_scalar`` special-cases (0, 1, 2, 3, -2, 1/2, -1/2, -1; a complex one with a zero
    imaginary part too) as the same products, roots and quotients; any other as glibc's cpow,
    ``exp(exponent * log(base))``, the product complex even for a real exponent (whose zero imaginary
    part makes ``0 * inf`` NaNs as cpow's does) and recovering infinities as Annex G's. A number base of
    1 gives 1 (ATen's ``pow.Scalar``)."""
    if not isinstance(exponent, (_Pair, torch.Tensor)):
        if isinstance(exponent, complex) and exponent.imag == 0:
            exponent = exponent.real
        base = _lift(base)
        if exponent == 0:
            return _Pair(torch.full_like(base.real, 1.0), torch.full_like(base.real, 0.0))
        special = {1: lambda: base, 2: lambda: _mul(base, base), 3: lambda: _mul(_mul(base, base), base),
                   -2: lambda: _reciprocal(_mul(base, base)), 0.5: lambda: _sqrt(base),
                   -0.5: lambda: _reciprocal(_sqrt(base)), -1: lambda: _reciprocal(base)}
        if exponent in special:
            return special[exponent]()
        return _exp(_annex_g_mul(_lift(complex(exponent)), _log(base)))
    exponent = _lift(exponent)
    if not isinstance(base, (_Pair, torch.Tensor)):
        if base == 1:
            return _Pair(torch.full_like(exponent.real, 1.0), torch.full_like(exponent.real, 0.0))
        return _exp(_annex_g_mul(exponent, _lift(_log_of_number(complex(base)))))
    return _exp(_annex_g_mul(exponent, _log(_lift(base))))


def _angles(outputs: int, inputs: int, period: int, like: torch.Tensor) -> torch.Tensor:
    """``2 pi ((k t) mod period) / period`` as a [outputs, inputs] matrix (t rows, k columns) of ``like``'s
    floating dtype and device."""
    t = torch.arange(outputs, device=like.device).unsqueeze(-1)
    k = torch.arange(inputs, device=like.device).unsqueeze(0)
    return (t * k % period).to(like.dtype) * (2 * math.pi / period)


@dataclasses.dataclass(frozen=True)
class _FftKernel:
    """An FFT op for transforms of at least ``from_points`` points: ``op(rows, inverse, normalization)`` on
    contiguous real pairs ``[..., n, 2]`` over dim -2, as ``shimkit::fft_c2c``."""

    op: Callable[..., torch.Tensor]
    from_points: int

    def takes(self, values: torch.Tensor, points: int) -> bool:
        """Whether a transform of ``points`` points over ``values``' dtype goes to the op (float32 only:
        the kernel's; float64 stays a matmul, for the float64 policy to see)."""
        return points >= self.from_points and values.dtype == torch.float32


def _dft(value: _Pair, dim: int, outputs: int, forward: bool, kernel: _FftKernel | None) -> _Pair:
    """The unnormalized DFT of ``value`` along ``dim`` (its full length), its first ``outputs`` points:
    through ``kernel`` where it takes that length, else as one real matrix product."""
    length = value.real.shape[dim]
    if kernel is not None and kernel.takes(value.real, length):
        rows = torch.stack([value.real, value.imag], dim=-1).movedim(dim, -2).contiguous()
        spectrum = kernel.op(rows, not forward, 0).narrow(-2, 0, outputs).movedim(-2, dim)
        return _Pair(spectrum[..., 0], spectrum[..., 1])
    angles = _angles(outputs, length, length, value.real)
    cos, sin = angles.cos(), angles.sin() * (-1.0 if forward else 1.0)
    rows = _Pair(value.real.movedim(dim, -1), value.imag.movedim(dim, -1))
    out = _one_product(torch.matmul, rows, cos.mT, sin.mT)
    return _Pair(out.real.movedim(-1, dim), out.imag.movedim(-1, dim))


def _normalized(value: _Pair | torch.Tensor, normalization: int, points: int) -> Any:
    """ATen's ``fft_norm_mode``: 0 none, 1 by ``1 / sqrt(n)``, 2 by ``1 / n``."""
    scale = {0: 1.0, 1: 1 / math.sqrt(points), 2: 1 / points}[normalization]
    if scale == 1.0:
        return value
    return _mul(value, scale) if isinstance(value, _Pair) else value * scale


def _fft_r2c(x: torch.Tensor, dim: list[int], normalization: int, onesided: bool, *,
             kernel: _FftKernel | None = None) -> _Pair:
    dims = [d % x.dim() for d in dim]
    last = dims[-1]
    points = math.prod(x.shape[d] for d in dims)
    length = x.shape[last]
    value = _dft(_Pair(x, torch.zeros_like(x)), last, length // 2 + 1 if onesided else length, True, kernel)
    for d in dims[:-1]:
        value = _dft(value, d, value.real.shape[d], True, kernel)
    return _normalized(value, normalization, points)


def _fft_c2c(z: _Pair, dim: list[int], normalization: int, forward: bool, *,
             kernel: _FftKernel | None = None) -> _Pair:
    dims = [d % z.real.dim() for d in dim]
    for d in dims:
        z = _dft(z, d, z.real.shape[d], forward, kernel)
    return _normalized(z, normalization, math.prod(z.real.shape[d] for d in dims))


def _fft_c2r(z: _Pair, dim: list[int], normalization: int, last_dim_size: int, *,
             kernel: _FftKernel | None = None) -> torch.Tensor:
    dims = [d % z.real.dim() for d in dim]
    for d in dims[:-1]:
        z = _dft(z, d, z.real.shape[d], False, kernel)
    last, n = dims[-1], last_dim_size
    half = n // 2 + 1
    real, imag = z.real.narrow(last, 0, half), z.imag.narrow(last, 0, half)
    points = n * math.prod(z.real.shape[d] for d in dims[:-1])
    if kernel is not None and kernel.takes(real, n):
        # The whole Hermitian spectrum, X[n - k] = conj(X[k]); the real part of its inverse transform
        # ignores the imaginary parts of X[0] and X[n / 2], as ATen's c2r does.
        mirror = (real.narrow(last, 1, n - half).flip(last), -imag.narrow(last, 1, n - half).flip(last))
        whole = _Pair(torch.cat([real, mirror[0]], last), torch.cat([imag, mirror[1]], last))
        return _normalized(_dft(whole, last, n, False, kernel).real, normalization, points)
    angles = _angles(n, half, n, real)
    k = torch.arange(half, device=real.device)
    # Each term stands for itself and its mirror image, except k = 0 and, for even n, k = n / 2.
    weights = torch.where((k == 0) | (2 * k == n), 1.0, 2.0).to(real.dtype)
    cos, sin = angles.cos() * weights, angles.sin() * weights
    # One product, as _one_product's real part.
    result = (torch.cat([real.movedim(last, -1), imag.movedim(last, -1)], -1)
              @ torch.cat([cos.mT, -sin.mT], -2)).movedim(-1, last)
    return _normalized(result, normalization, points)


def _componentwise(op: Callable[..., Any]) -> Callable[..., _Pair]:
    """An op that acts on real and imaginary parts alike (views, slices, cat, sum, real scaling ...)."""

    def on_parts(*args: Any, **kwargs: Any) -> _Pair:
        parts = []
        for part in ("real", "imag"):
            args_, kwargs_ = pytree.tree_map(lambda v: getattr(v, part) if isinstance(v, _Pair) else v,
                                             (args, kwargs), is_leaf=lambda v: isinstance(v, _Pair))
            parts.append(op(*args_, **kwargs_))
        return _Pair(*parts)

    return on_parts


def _to_complex(x: Any, *args: Any, **kwargs: Any) -> _Pair:
    """A real tensor (or a pair) converted to a complex dtype: the value itself, zero imaginary part."""
    return _lift(x)


_RULES: dict[Any, Callable[..., Any]] = {
    aten.view_as_real.default: lambda z: z.pack(),
    aten.view_as_complex.default: lambda packed: _Pair.unpack(packed),
    aten.view_as_real_copy.default: lambda z: z.pack(),
    aten.view_as_complex_copy.default: lambda packed: _Pair.unpack(packed),
    aten.complex.default: lambda real, imag: _Pair(real, imag),
    aten.polar.default: lambda magnitude, angle: _Pair(magnitude * angle.cos(), magnitude * angle.sin()),
    aten.real.default: lambda z: z.real,
    aten.imag.default: lambda z: z.imag,
    aten.conj.default: lambda z: _Pair(z.real, -z.imag),
    aten._conj.default: lambda z: _Pair(z.real, -z.imag),
    aten.conj_physical.default: lambda z: _Pair(z.real, -z.imag),
    aten._conj_physical.default: lambda z: _Pair(z.real, -z.imag),
    aten.resolve_conj.default: lambda z: z,
    aten.resolve_neg.default: lambda z: z,
    aten.abs.default: lambda z: _hypot(z.real, z.imag),
    aten.angle.default: lambda z: torch.atan2(z.imag, z.real),
    aten.exp.default: _exp,
    aten.log.default: _log,
    aten.sqrt.default: _sqrt,
    aten.reciprocal.default: _reciprocal,
    aten.rsqrt.default: lambda z: _reciprocal(_sqrt(z)),
    aten.pow.Tensor_Scalar: _pow,
    aten.pow.Tensor_Tensor: _pow,
    aten.pow.Scalar: _pow,
    aten.neg.default: lambda z: _Pair(-z.real, -z.imag),
    aten.add.Tensor: lambda a, b, alpha=1: _add(a, b, alpha),
    aten.add.Scalar: lambda a, b, alpha=1: _add(a, b, alpha),
    aten.sub.Tensor: lambda a, b, alpha=1: _add(a, b, alpha, sign=-1),
    aten.sub.Scalar: lambda a, b, alpha=1: _add(a, b, alpha, sign=-1),
    aten.rsub.Scalar: lambda a, b, alpha=1: _add(b, _mul(a, alpha), 1, sign=-1),
    aten.mul.Tensor: _mul,
    aten.mul.Scalar: _mul,
    aten.div.Tensor: _div,
    aten.div.Scalar: _div,
    aten.mm.default: _product(torch.mm),
    aten.bmm.default: _product(torch.bmm),
    aten.matmul.default: _product(torch.matmul),
    aten._fft_r2c.default: _fft_r2c,
    aten._fft_c2c.default: _fft_c2c,
    aten._fft_c2r.default: _fft_c2r,
    aten._to_copy.default: _to_complex,
    aten.sum.dim_IntList: _componentwise(aten.sum.dim_IntList),
    aten.sum.default: _componentwise(aten.sum.default),
    aten.mean.dim: _componentwise(aten.mean.dim),
}

_COMPONENTWISE = (
    aten.alias.default, aten.clone.default, aten.view.default, aten._unsafe_view.default, aten.reshape.default,
    aten.permute.default, aten.transpose.int, aten.t.default, aten.unsqueeze.default, aten.squeeze.dim,
    aten.squeeze.dims, aten.squeeze.default, aten.expand.default, aten.slice.Tensor, aten.select.int,
    aten.narrow.default, aten.cat.default, aten.stack.default, aten.flip.default, aten.roll.default,
    aten.constant_pad_nd.default, aten.index_select.default, aten.index.Tensor, aten.unfold.default,
    aten.contiguous.default, aten.split.Tensor, aten.split_with_sizes.default, aten.unbind.int,
    aten.view_copy.default, aten.permute_copy.default, aten.slice_copy.Tensor, aten.select_copy.int,
    aten.unsqueeze_copy.default, aten.squeeze_copy.dims, aten.transpose_copy.int, aten.expand_copy.default,
    aten.alias_copy.default, aten.t_copy.default, aten.unbind_copy.int, aten.split_copy.Tensor,
    aten.split_with_sizes_copy.default,
)
_RULES.update({op: _componentwise(op) for op in _COMPONENTWISE})
# In-place metadata changes (stft's composite transposes its result in place): the packed value is a new
# node, so the out-of-place view stands for them; the composites that use them read only the result.
_RULES.update({aten.transpose_.default: _componentwise(aten.transpose.int),
               aten.squeeze_.dim: _componentwise(aten.squeeze.dim),
               aten.unsqueeze_.default: _componentwise(aten.unsqueeze.default),
               aten.t_.default: _componentwise(aten.t.default)})


_FFT_OPS = (aten._fft_r2c.default, aten._fft_c2c.default, aten._fft_c2r.default)


def _is_complex(value: Any) -> bool:
    return any(isinstance(v, torch.Tensor) and v.is_complex() for v in pytree.tree_leaves(value))


_OUTPUT_META = "complex_pairs_output"


def _composite(op: torch._ops.OpOverload) -> bool:
    return torch._C._dispatch_has_kernel_for_dispatch_key(op.name(), "CompositeImplicitAutograd")


class ComplexPairs(ShimkitPass):
    """Every complex-valued node made a real node holding its ``view_as_real`` layout (module docstring).

    Ops with no rule of their own but an ATen composite (``fft_fft``, ``stft``, ``istft``: the graph a
    partitioner keeps undecomposed) are first replaced by it. With ``complex_outputs="error"`` a complex
    graph output is a :class:`PassError` naming its node; with ``"view_as_complex"`` everything before it is
    made real and the output is ``view_as_complex`` of its packed value: the one complex op left, which
    the audit then names as the missing kernel.

    A transform of at least ``fft_kernel_from`` points goes to ``fft_kernel`` where one is given: an op on
    contiguous real pairs ``[..., n, 2]`` over dim -2, ``(rows, inverse, normalization)``, as
    ``shimkit::fft_c2c`` (``plugins/complex_fft``, which passes it on devices with its kernel).
    """

    name = "complex_pairs"

    def __init__(self, *, complex_outputs: str = "error", fft_kernel: Callable[..., torch.Tensor] | None = None,
                 fft_kernel_from: int = 256) -> None:
        if complex_outputs not in ("error", "view_as_complex"):
            raise ValueError(f"complex_outputs must be 'error' or 'view_as_complex', not {complex_outputs!r}")
        if fft_kernel is not None and not callable(fft_kernel):
            raise TypeError(f"fft_kernel must be an op like shimkit::fft_c2c, got {fft_kernel!r}")
        if isinstance(fft_kernel_from, bool) or not isinstance(fft_kernel_from, int) or fft_kernel_from < 1:
            raise ValueError(f"fft_kernel_from must be a positive number of points, got {fft_kernel_from!r}")
        self.complex_outputs = complex_outputs
        self._fft_kernel = _FftKernel(fft_kernel, fft_kernel_from) if fft_kernel is not None else None

    def _touches_complex(self, node: fx.Node) -> bool:
        return node.op == "call_function" and _OUTPUT_META not in node.meta and (
            _is_complex(node.meta.get("val")) or any(isinstance(a, fx.Node) and _is_complex(a.meta.get("val"))
                                                     for a in pytree.tree_leaves((node.args, node.kwargs))))

    def _decompose_composites(self, graph: fx.Graph, context: PassContext) -> bool:
        changed = False
        while True:
            ops = {op for n in graph.nodes if self._touches_complex(n) and (op := aten_op(n.target)) is not None}
            table = {op: op.decompose for op in ops if op not in _RULES and _composite(op)}
            if not table or not DecomposeInPlace(table, name=self.name).transform(graph, context):
                return changed
            changed = True

    def transform(self, graph: fx.Graph, context: PassContext) -> bool:
        decomposed = self._decompose_composites(graph, context)
        # complex node -> its packed real replacement (a tuple of them for a list of complex tensors)
        packed: dict[fx.Node, Any] = {}
        replaced: list[fx.Node] = []
        for node in list(graph.nodes):
            if node.op == "output":
                self._outputs(graph, node, packed)
                continue
            if _OUTPUT_META in node.meta:
                continue
            if node.op == "placeholder" and _is_complex(node.meta.get("val")):
                raise PassError(self.pass_name, node, "is a complex input: only programs whose inputs are real "
                                "(complex only through view_as_complex inside) are made real")
            if node.op != "call_function":
                continue
            reads_pair = any(isinstance(a, fx.Node) and a in packed
                             for a in pytree.tree_leaves((node.args, node.kwargs)))
            if not reads_pair and not _is_complex(node.meta.get("val")):
                continue
            if node.target is operator.getitem and node.args[0] in packed:
                source, index = node.args
                packed[node] = packed[source][index]  # type: ignore[index]
                replaced.append(node)
                continue
            self._rewrite(graph, node, packed)
            replaced.append(node)
        for node in reversed(replaced):
            if node in packed and not node.users:
                graph.erase_node(node)
        return decomposed or bool(replaced)

    def _outputs(self, graph: fx.Graph, output: fx.Node, packed: dict[fx.Node, Any]) -> None:
        for leaf in dict.fromkeys(pytree.tree_leaves(output.args)):
            if not (isinstance(leaf, fx.Node) and leaf in packed):
                continue
            if self.complex_outputs == "error":
                raise PassError(self.pass_name, leaf, "its complex value is a graph output, which cannot be a "
                                "pair of real tensors: return torch.view_as_real(...) of it instead")
            source = packed[leaf]
            target = edge_op(aten.view_as_complex.default) if is_edge(leaf.target) else aten.view_as_complex.default
            with graph.inserting_before(output):
                restored = graph.call_function(target, (source,))
            value = source.meta["val"]
            with value.fake_mode if isinstance(value, FakeTensor) else contextlib.nullcontext():
                restored.meta["val"] = aten.view_as_complex.default(value.contiguous())
            restored.meta[_OUTPUT_META] = True
            restored.meta.update({k: leaf.meta[k] for k in PROVENANCE_META if k in leaf.meta})
            output.replace_input_with(leaf, restored)

    def _rewrite(self, graph: fx.Graph, node: fx.Node, packed: dict[fx.Node, Any]) -> None:
        op = aten_op(node.target)
        rule = _RULES.get(op)
        if rule is None:
            raise PassError(self.pass_name, node, f"{op} on complex values has no real-pair rule: Metal has no "
                            f"complex dtype, so this program cannot be lowered")
        if op in _FFT_OPS:
            rule = functools.partial(rule, kernel=self._fft_kernel)
        leaves, spec = pytree.tree_flatten((node.args, node.kwargs))
        inputs = list(dict.fromkeys(leaf for leaf in leaves if isinstance(leaf, fx.Node)))
        sources = [packed.get(n, n) for n in inputs]
        is_pair = [n in packed for n in inputs]
        values = [s.meta["val"] for s in sources]
        if any(isinstance(size, torch.SymInt) for v in values if isinstance(v, torch.Tensor) for size in v.shape):
            raise PassError(self.pass_name, node, "complex values of dynamic size are not made real pairs yet")

        def call_rule(*tensors: torch.Tensor) -> Any:
            by_node = {n: (_Pair.unpack(t) if pair else t) for n, t, pair in zip(inputs, tensors, is_pair)}
            args, kwargs = pytree.tree_unflatten([by_node.get(leaf, leaf) if isinstance(leaf, fx.Node) else leaf
                                                  for leaf in leaves], spec)
            result = rule(*args, **kwargs)
            if isinstance(result, (list, tuple)):
                return tuple(r.pack() if isinstance(r, _Pair) else r for r in result)
            if isinstance(result, _Pair):  # split/unbind return a list of pairs: componentwise gives pair of lists
                if isinstance(result.real, (list, tuple)):
                    return tuple(_Pair(r, i).pack() for r, i in zip(result.real, result.imag))
                return result.pack()
            return result

        modes = {id(v.fake_mode): v.fake_mode for v in values if isinstance(v, FakeTensor)}
        if len(modes) > 1:
            raise PassError(self.pass_name, node, "inputs belong to different fake modes")
        try:
            if modes:
                with next(iter(modes.values())):
                    traced = make_fx(call_rule, tracing_mode="real")(*values)
            else:
                traced = make_fx(call_rule)(*values)
        except Exception as error:
            raise PassError(self.pass_name, node, f"making {op} a real-pair computation failed: "
                            f"{type(error).__name__}: {error}") from error
        result = self._splice(graph, node, traced.graph, sources)
        if _is_complex(node.meta.get("val")):
            packed[node] = result
        else:
            node.replace_all_uses_with(result)
            graph.erase_node(node)

    def _splice(self, graph: fx.Graph, node: fx.Node, template: fx.Graph, sources: list[fx.Node]) -> Any:
        template.eliminate_dead_code()
        env: dict[fx.Node, Any] = dict(zip(template.find_nodes(op="placeholder"), sources))
        edge = is_edge(node.target)
        inherited = {k: node.meta[k] for k in PROVENANCE_META if k in node.meta}
        with graph.inserting_before(node):
            for tnode in template.nodes:
                if tnode.op in ("placeholder", "output"):
                    continue
                if tnode.op != "call_function":
                    raise PassError(self.pass_name, node, f"the real-pair rule made a {tnode.op} node")
                target = edge_op(tnode.target) if edge and isinstance(tnode.target, torch._ops.OpOverload) \
                    else tnode.target
                new = graph.create_node("call_function", target, fx.node.map_arg(tnode.args, env.__getitem__),
                                        fx.node.map_arg(tnode.kwargs, env.__getitem__), name=f"{node.name}_{tnode.name}")
                new.meta.update(inherited)
                if "val" in tnode.meta:
                    new.meta["val"] = tnode.meta["val"]
                env[tnode] = new
        output = template.output_node().args[0]
        if isinstance(output, (list, tuple)):  # split/unbind of a complex tensor: its getitems map to these
            return tuple(env[o] for o in output)
        return env[output]

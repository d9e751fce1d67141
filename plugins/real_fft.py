"""The inverse real FFTs of real input (``torch.fft.irfft``, ``hfft`` and their 2-D and n-D forms) as
discrete Fourier sums, which Inductor writes as Metal code.

These ops return real tensors, but ATen computes them through complex ones (``_fft_c2c``, ``_fft_c2r``),
which neither Inductor's Metal code generator nor ExecuTorch's Metal runtime has: every one of them was a
missing kernel. Given real input, each is a real computation, written here as ATen defines it
(``aten/src/ATen/native/SpectralOps.cpp``):

- every transformed dim is resized to its signal length (sliced or zero-padded), the last to ``n // 2 + 1``
  for an output of ``n`` points (``n = 2 (L - 1)`` by default);
- the other dims get an unnormalized inverse complex DFT (for ``hfft*``, whose input ATen conjugates after
  a forward one, that is the same sum: the input is real), carried as a real and an imaginary part;
- the last dim gets the complex-to-real sum ``x[t] = sum_k w_k (Re X_k cos(2 pi k t / n) - Im X_k sin(...))``,
  ``w_k = 2`` except 1 for ``k = 0`` and ``k = n / 2``;
- the result is scaled as ``norm`` says for an inverse transform (``irfft*``: "backward" by ``1 / N``) or a
  forward one (``hfft*``: "forward" by ``1 / N``), ``N`` the product of the output signal lengths.

Angles are reduced exactly, ``(k t) mod n`` in int64 before the float32 ``cos``/``sin``, so the terms that
vanish mathematically vanish exactly. The sums cost ``O(n)`` per output point (an FFT costs ``O(log n)``):
right for the small transforms these ops see in models, with float32 error growing like ``sqrt(n)``.
Complex input is declined: its ops stay missing kernels, as complex tensors have no Metal path.
"""

from __future__ import annotations

import math

import torch
from torch.fx.experimental.symbolic_shapes import statically_known_true

from shimkit.registry import DecompositionDeclined, OpCall, OpPlugin, hookimpl, resolve_op

ONE_DIM = {"aten::fft_irfft.default": False, "aten::fft_hfft.default": True}
MANY_DIMS = {"aten::fft_irfft2.default": (False, (-2, -1)), "aten::fft_irfftn.default": (False, None),
             "aten::fft_hfft2.default": (True, (-2, -1)), "aten::fft_hfftn.default": (True, None)}


def _resized(x: torch.Tensor, dim: int, length) -> torch.Tensor:
    """``x`` sliced or zero-padded along ``dim`` to ``length``, as ATen's ``resize_fft_input``."""
    size = x.shape[dim]
    if statically_known_true(size == length):
        return x
    if statically_known_true(size > length):
        return x.narrow(dim, 0, length)
    if statically_known_true(size < length):
        pad = [0, 0] * (x.dim() - 1 - dim) + [0, length - size]
        return torch.nn.functional.pad(x, pad)
    raise DecompositionDeclined(f"cannot tell without a guard whether dim {dim} ({size}) is longer than {length}")


def _angles(outputs, inputs, period, device) -> torch.Tensor:
    """``2 pi ((k t) mod period) / period`` as a [outputs, inputs] float32 matrix (t rows, k columns)."""
    t = torch.arange(outputs, device=device).unsqueeze(-1)
    k = torch.arange(inputs, device=device).unsqueeze(0)
    return (t * k % period).to(torch.float32) * (2 * math.pi / period)


def _inverse_dft(real: torch.Tensor, imag: torch.Tensor, dim: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The unnormalized inverse complex DFT of ``real + i imag`` along ``dim``."""
    length = real.shape[dim]
    angles = _angles(length, length, length, real.device)
    cos, sin = angles.cos(), angles.sin()
    real, imag = real.movedim(dim, -1), imag.movedim(dim, -1)
    out_real = real @ cos.mT - imag @ sin.mT
    out_imag = real @ sin.mT + imag @ cos.mT
    return out_real.movedim(-1, dim), out_imag.movedim(-1, dim)


def _complex_to_real(real: torch.Tensor, imag: torch.Tensor, dim: int, n) -> torch.Tensor:
    """ATen's unnormalized ``_fft_c2r`` along ``dim`` (which holds ``n // 2 + 1`` points) to ``n`` points."""
    half = real.shape[dim]
    angles = _angles(n, half, n, real.device)
    k = torch.arange(half, device=real.device)
    # Each term stands for itself and its mirror image, except k = 0 and, for even n, k = n / 2.
    weights = torch.where((k == 0) | (2 * k == n), 1.0, 2.0).to(torch.float32)
    cos, sin = angles.cos() * weights, angles.sin() * weights
    real, imag = real.movedim(dim, -1), imag.movedim(dim, -1)
    return (real @ cos.mT - imag @ sin.mT).movedim(-1, dim)


def _scale(norm: str | None, forward: bool, points) -> float | torch.Tensor:
    if norm not in (None, "backward", "forward", "ortho"):
        raise RuntimeError(f'Invalid normalization mode: "{norm}"')
    norm = norm or "backward"
    if norm == "ortho":
        return 1 / torch.sym_sqrt(points) if isinstance(points, torch.SymInt) else 1 / math.sqrt(points)
    divides = (norm == "backward") != forward  # inverse: "backward" divides; forward: "forward" divides
    return 1 / points if divides else 1.0


def _real_input(op: str, x: torch.Tensor) -> torch.Tensor:
    if x.is_complex():
        raise DecompositionDeclined(f"{op} of complex input: complex tensors have no Metal path")
    if not x.is_floating_point():
        x = x.to(torch.get_default_dtype())
    if x.dtype != torch.float32:
        raise DecompositionDeclined(f"{op} in {x.dtype}: only float32 is decomposed")
    return x


def _c2r_many(op: str, x: torch.Tensor, dims: list[int], lengths: list, n, norm, forward: bool) -> torch.Tensor:
    if not (isinstance(n, torch.SymInt) or n >= 1):
        raise RuntimeError(f"Invalid number of data points ({n}) specified")
    x = _real_input(op, x)
    for dim, length in zip(dims, lengths):
        x = _resized(x, dim, length)
    real, imag = x, torch.zeros_like(x)
    for dim in dims[:-1]:
        real, imag = _inverse_dft(real, imag, dim)
    result = _complex_to_real(real, imag, dims[-1], n)
    points = n
    for dim in dims[:-1]:
        points = points * x.shape[dim]
    return result * _scale(norm, forward, points)


def one_dim_decomposition(op: str, forward: bool):
    def decomposition(self: torch.Tensor, n=None, dim: int = -1, norm: str | None = None) -> torch.Tensor:
        dim = dim % self.dim() if self.dim() else 0
        length = n // 2 + 1 if n is not None else self.shape[dim]
        points = n if n is not None else 2 * (self.shape[dim] - 1)
        return _c2r_many(op, self, [dim], [length], points, norm, forward)

    decomposition.__qualname__ = f"{op.split('::')[1].split('.')[0]}_of_real_input"
    return decomposition


def many_dims_decomposition(op: str, forward: bool, default_dims):
    def decomposition(self: torch.Tensor, s=None, dim=None, norm: str | None = None) -> torch.Tensor:
        if dim is None:
            dim = default_dims if default_dims is not None else (
                list(range(self.dim() - len(s), self.dim())) if s is not None else list(range(self.dim())))
        dims = [d % self.dim() for d in dim]
        if len(set(dims)) != len(dims):
            raise RuntimeError("FFT dims must be unique")
        if s is not None and len(s) != len(dims):
            raise RuntimeError("When given, dim and shape arguments must have the same length")
        shape = list(s) if s is not None else [self.shape[d] for d in dims]
        points = shape[-1] if s is not None else 2 * (self.shape[dims[-1]] - 1)
        lengths = shape[:-1] + [points // 2 + 1]
        return _c2r_many(op, self, dims, lengths, points, norm, forward)

    decomposition.__qualname__ = f"{op.split('::')[1].split('.')[0]}_of_real_input"
    return decomposition


def one_dim_calls():
    """Real float32 signals of 1 to 3 dims, every norm, n omitted, shorter, longer, odd and even."""
    from hypothesis import strategies as st

    from shimkit.plugins.shared import float32_tensors

    def call(shape, n, dim, norm):
        return st.builds(lambda x: OpCall((x, n, dim % len(shape), norm)),
                         float32_tensors(shape, st.floats(-4, 4, width=32)))

    def valid(c):  # without n, the signal has 2 (L - 1) points: L = 1 is ATen's error, not a signal
        shape, n, dim, _ = c
        return n is not None or shape[dim % len(shape)] > 1

    shapes = st.lists(st.integers(1, 6), min_size=1, max_size=3).map(tuple)
    return st.tuples(shapes, st.none() | st.integers(1, 12), st.integers(-3, 2),
                     st.sampled_from([None, "backward", "forward", "ortho"])).filter(valid).flatmap(lambda c: call(*c))


def many_dims_calls(default_dims):
    from hypothesis import strategies as st

    from shimkit.plugins.shared import float32_tensors

    def call(shape, sizes, norm):
        dims = list(default_dims) if default_dims is not None else [-2, -1]
        return st.builds(lambda x: OpCall((x, sizes, dims, norm)), float32_tensors(shape, st.floats(-4, 4, width=32)))

    def valid(c):  # without s, the last dim has 2 (L - 1) points: L = 1 is ATen's error, not a signal
        shape, sizes, _ = c
        return sizes is not None or shape[-1] > 1

    shapes = st.lists(st.integers(1, 5), min_size=2, max_size=3).map(tuple)
    return st.tuples(shapes, st.none() | st.lists(st.integers(1, 8), min_size=2, max_size=2),
                     st.sampled_from([None, "backward", "forward", "ortho"])).filter(valid).flatmap(lambda c: call(*c))


@hookimpl
def shimkit_op_plugins():
    decompositions = {op: one_dim_decomposition(op, forward) for op, forward in ONE_DIM.items()}
    decompositions.update({op: many_dims_decomposition(op, forward, dims) for op, (forward, dims) in MANY_DIMS.items()})
    yield OpPlugin(
        name="real-fft",
        ops=(*ONE_DIM, *MANY_DIMS),
        decompositions=decompositions,
        decomposition_devices=("mps",),
        references={op: resolve_op(op) for op in (*ONE_DIM, *MANY_DIMS)},
        input_strategies={**{op: one_dim_calls for op in ONE_DIM},
                          **{op: (lambda dims=dims: many_dims_calls(dims)) for op, (_, dims) in MANY_DIMS.items()}},
        doc="irfft, hfft and their 2-D and n-D forms of real input as discrete Fourier sums (no complex tensors).",
    )

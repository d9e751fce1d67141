"""Window functions built inside ``forward`` (``torch.hann_window`` and its kin) as ``arange`` and pointwise math.

``aten.hamming_window``, ``blackman_window``, ``bartlett_window`` and ``kaiser_window`` are not core ATen, so
a model that builds its window in ``forward`` (an STFT's ``torch.hann_window(n_fft)``, say) stops in
``to_edge``; ``hann_window`` gets through only where ``to_edge``'s core decomposition table expands it, not
on every backend. Each is a closed formula over the positions ``0 .. N - 1``: ATen computes it from
``arange`` with a few in-place multiplies and one ``cos`` (``TensorFactories.cpp``), the same ops are
written here, in the same order and in the window's dtype, with every scalar rounded to that dtype as
ATen's in-place ops round it, so the values are ATen's bit for bit. Kaiser windows are computed in float32
for the half types, as ATen's kernel does, then rounded once; they agree with ATen's to rounding, since its
kernel evaluates ``i0`` in a loop of its own rather than through ``aten.i0``.

Semantics kept from ATen: ``periodic`` windows (the default) are the symmetric window of ``N + 1`` points
without its last; a window of length 0 is empty and of length 1 is ``[1]``; ``hann`` is ``hamming`` with
``alpha = beta = 0.5``; ``hamming``'s ``alpha``/``beta`` and ``kaiser``'s ``beta`` default to 0.54/0.46 and
12; the dtype defaults to torch's default dtype and must be floating point; ``device`` is kept. Kaiser
windows call ``aten.i0``, which Metal's code generator compiles (``plugins/metal_generated.py``).
"""

from __future__ import annotations

import math
from typing import Callable

import torch

from shimkit.plugins.shared import ACCUMULATE_IN_FLOAT32
from shimkit.registry import OpCall, OpPlugin, hookimpl

HANN = ("aten::hann_window.default", "aten::hann_window.periodic")
HAMMING = ("aten::hamming_window.default", "aten::hamming_window.periodic", "aten::hamming_window.periodic_alpha",
           "aten::hamming_window.periodic_alpha_beta")
BLACKMAN = ("aten::blackman_window.default", "aten::blackman_window.periodic")
BARTLETT = ("aten::bartlett_window.default", "aten::bartlett_window.periodic")
KAISER = ("aten::kaiser_window.default", "aten::kaiser_window.periodic", "aten::kaiser_window.beta")


def _window(name: str, window_length: int, periodic: bool, dtype: torch.dtype | None, device: torch.device | None,
            formula: Callable[[torch.Tensor, int], torch.Tensor]) -> torch.Tensor:
    """ATen's frame around every window: ``formula(positions, N)`` of the symmetric window of ``N`` points,
    ``N`` one more than asked for a periodic window, whose last point is then dropped."""
    dtype = dtype if dtype is not None else torch.get_default_dtype()
    torch._check(dtype.is_floating_point, lambda: f"{name} expects floating point dtypes, got: {dtype}")
    torch._check(window_length >= 0, lambda: f"{name} requires non-negative window_length, got "
                                             f"window_length={window_length}")
    if window_length == 0:
        return torch.empty((0,), dtype=dtype, device=device)
    if window_length == 1:
        return torch.ones((1,), dtype=dtype, device=device)
    length = window_length + 1 if periodic else window_length
    window = formula(torch.arange(length, dtype=dtype, device=device), length)
    return window.narrow(0, 0, length - 1) if periodic else window


def _scalar(value: float, like: torch.Tensor) -> torch.Tensor:
    """``value`` rounded to ``like``'s dtype, as ATen's in-place ``mul_``/``add_`` with a scalar round it
    (for half and bfloat16 that is not the float32 a Python number would be computed in)."""
    return torch.scalar_tensor(value, dtype=like.dtype, device=like.device)


def hamming_window(window_length: int, periodic: bool = True, alpha: float = 0.54, beta: float = 0.46, *,
                   dtype=None, layout=None, device=None, pin_memory=None) -> torch.Tensor:
    def formula(n, N):
        return (n * _scalar(math.pi * 2.0 / (N - 1), n)).cos() * _scalar(-beta, n) + _scalar(alpha, n)

    return _window("hamming_window", window_length, periodic, dtype, device, formula)


def hann_window(window_length: int, periodic: bool = True, *, dtype=None, layout=None, device=None,
                pin_memory=None) -> torch.Tensor:
    return hamming_window(window_length, periodic, 0.5, 0.5, dtype=dtype, device=device)


def blackman_window(window_length: int, periodic: bool = True, *, dtype=None, layout=None, device=None,
                    pin_memory=None) -> torch.Tensor:
    def formula(n, N):
        angle = n * _scalar(math.pi / (N - 1), n)
        return (angle * 4).cos() * _scalar(0.08, n) - (angle * 2).cos() * _scalar(0.5, n) + _scalar(0.42, n)

    return _window("blackman_window", window_length, periodic, dtype, device, formula)


def bartlett_window(window_length: int, periodic: bool = True, *, dtype=None, layout=None, device=None,
                    pin_memory=None) -> torch.Tensor:
    def formula(n, N):
        rising = n * _scalar(2.0 / (N - 1), n)
        first_half = ((N - 1) >> 1) + 1
        return torch.where(n >= first_half, rising * -1 + 2, rising)

    return _window("bartlett_window", window_length, periodic, dtype, device, formula)


def kaiser_window(window_length: int, periodic: bool = True, beta: float = 12.0, *, dtype=None, layout=None,
                  device=None, pin_memory=None) -> torch.Tensor:
    def formula(n, N):
        computed = n.float() if n.dtype in ACCUMULATE_IN_FLOAT32 else n
        alpha = (N - 1) / 2.0
        ratio = (computed - alpha) / alpha
        window = torch.i0(beta * (1 - ratio.pow(2)).abs().sqrt()) / torch.i0(torch.scalar_tensor(beta, dtype=computed.dtype,
                                                                                                  device=n.device))
        return window.to(n.dtype)

    return _window("kaiser_window", window_length, periodic, dtype, device, formula)


def window_inputs(parameters: int):
    """Window calls: lengths 0..40, periodic or symmetric (where the overload takes it), ``parameters``
    floats after it (alpha, beta), float32, float16 or bfloat16."""
    from hypothesis import strategies as st

    def call(length, periodic, values, dtype):
        args = (length,) if periodic is None else (length, periodic, *values)
        return OpCall(args, {"dtype": dtype})

    return st.builds(call, st.integers(0, 40), st.none() if parameters < 0 else st.booleans(),
                     st.lists(st.floats(0.0, 8.0, width=32), min_size=max(parameters, 0),
                              max_size=max(parameters, 0)),
                     st.sampled_from([torch.float32, torch.float16, torch.bfloat16]))


@hookimpl
def shimkit_op_plugins():
    families = ((HANN, hann_window, "hann_window", (-1, 0)),
                (HAMMING, hamming_window, "hamming_window", (-1, 0, 1, 2)),
                (BLACKMAN, blackman_window, "blackman_window", (-1, 0)),
                (BARTLETT, bartlett_window, "bartlett_window", (-1, 0)),
                (KAISER, kaiser_window, "kaiser_window", (-1, 0, 1)))
    ops, decompositions, references, strategies = [], {}, {}, {}
    for overloads, decomposition, name, parameters in families:
        for op, count in zip(overloads, parameters):
            ops.append(op)
            decompositions[op] = decomposition
            references[op] = getattr(torch, name)
            strategies[op] = lambda count=count: window_inputs(count)
    yield OpPlugin(
        name="window-functions",
        ops=tuple(ops),
        decompositions=decompositions,
        # Not core ATen (hann_window only through to_edge's own table): decomposed first, on every backend.
        pre_edge=tuple(ops),
        references=references,
        input_strategies=strategies,
        doc="hann, hamming, blackman, bartlett and kaiser windows as ATen's arange-and-cos formulas.",
    )

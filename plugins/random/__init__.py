"""Random numbers on mps: the seeds Inductor's Metal code draws from, and ``uniform`` through that code.

Inductor writes ``rand``, ``randn``, ``bernoulli`` and dropout masks as Metal code (Philox, from
``c10/metal/random.h``), but takes their per-kernel int64 seeds from one fallback call,
``aten::randint.low_out`` (c-shim ``aoti_torch_mps_randint_low_out``), which ExecuTorch's Metal runtime
lacks: every random model stopped there. This plugin ships it as ``kernel/randint.metal`` (SplitMix64 of
seed and index, mapped to ``[low, high)`` as ATen maps its bits), dispatched by
``kernel/randint_shim_mps.mm`` on the Mac and by :func:`launch_randint_low_out` here.

``aten::uniform`` is a fallback of its own, and so is ``aten::rrelu`` in training, which Inductor expands
into ``uniform``: on mps both are decomposed into ``rand_like`` and pointwise code, which Inductor writes
as Metal code seeded the same way.

Random values cannot equal eager's: the references are :class:`~shimkit.registry.RandomReference`, so
``shimkit.testing`` checks the kernel and the decomposition by distribution (two-sample
Kolmogorov-Smirnov), with shapes and dtypes exact.
"""

from __future__ import annotations

from pathlib import Path

import torch

from shimkit.registry import (DecompositionDeclined, Kernel, MslKernel, OpCall, OpPlugin, RandomReference, Shim,
                              hookimpl)

RANDINT_LOW_OUT = "aten::randint.low_out"
UNIFORM = "aten::uniform.default"
RRELU = "aten::rrelu.default"
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1


def launch_randint_low_out(library, low: int, high: int, size, *, out: torch.Tensor) -> torch.Tensor:
    """``randint.low_out`` through ``library``'s ``randint_low_out_long``, as ``randint_shim_mps.mm`` dispatches
    it: one thread per element of a contiguous int64 ``out`` of shape ``size``, from a 64-bit seed drawn from
    torch's default generator (the Mac shim keeps a generator of its own)."""
    if low >= high:
        raise ValueError(f"{RANDINT_LOW_OUT}: random_ expects 'from' to be less than 'to', but got from={low} >= "
                         f"to={high}")
    if out.dtype != torch.int64:
        raise TypeError(f"{RANDINT_LOW_OUT}: out must be int64 (the seeds Inductor draws), got {out.dtype}")
    if tuple(out.shape) != tuple(size) or not out.is_contiguous():
        raise ValueError(f"{RANDINT_LOW_OUT}: out must be contiguous with shape size={list(size)}, got "
                         f"{tuple(out.shape)} with strides {out.stride()} (resizing out is not supported)")
    if out.numel():
        seed = int(torch.randint(INT64_MIN, INT64_MAX, (), dtype=torch.int64))
        library.randint_low_out_long(out, low, high, seed, threads=out.numel())
    return out


KERNEL = Kernel(
    name="randint",
    directory=str(Path(__file__).resolve().parent / "kernel"),
    runtime_sources=("randint.metal", "randint_shim_mps.mm"),
    msl=MslKernel(source="randint.metal", function="randint_low_out", dtypes=("long",),
                  launch=launch_randint_low_out),
    uses_sdk=False,
)


def uniform_decomposition(self: torch.Tensor, low: float = 0.0, high: float = 1.0, *,
                          generator: torch.Generator | None = None) -> torch.Tensor:
    if generator is not None:
        raise DecompositionDeclined(f"{UNIFORM} with an explicit generator: Inductor's Metal code draws from its "
                                    f"own seeds only")
    return torch.rand_like(self) * (high - low) + low


def rrelu_decomposition(self: torch.Tensor, lower: float = 1.0 / 8.0, upper: float = 1.0 / 3.0,
                        training: bool = False, generator: torch.Generator | None = None) -> torch.Tensor:
    """As ATen's ``rrelu_with_noise``: in training each element that is not positive is scaled by its own
    slope drawn from ``uniform(lower, upper)``; in evaluation by their mean (``leaky_relu``)."""
    if generator is not None:
        raise DecompositionDeclined(f"{RRELU} with an explicit generator: Inductor's Metal code draws from its "
                                    f"own seeds only")
    if not training:
        return torch.nn.functional.leaky_relu(self, (lower + upper) / 2)
    slopes = torch.rand_like(self) * (upper - lower) + lower
    return torch.where(self > 0, self, self * slopes)


def randint_calls():
    """Ranges small (ATen's 32-bit path), around 2^32 and the full int64 range Inductor asks for; 0 to 64
    elements a call."""
    from hypothesis import strategies as st

    ranges = st.sampled_from([(0, 2), (0, 10), (-5, 7), (3, 2**32 - 1), (-(2**31), 2**32 + 5), (0, 2**40),
                              (INT64_MIN, INT64_MAX), (INT64_MIN, 0)])
    sizes = st.lists(st.integers(0, 4), min_size=1, max_size=3)

    return st.builds(lambda bounds, size: OpCall((*bounds, size), {"out": torch.empty(size, dtype=torch.int64)}),
                     ranges, sizes)


def uniform_calls():
    """float32 tensors (their values are ignored) with bounds in either order of magnitude."""
    from hypothesis import strategies as st

    bounds = st.sampled_from([(0.0, 1.0), (-1.0, 1.0), (-3.5, 100.0), (2.0, 2.5)])
    sizes = st.lists(st.integers(0, 5), min_size=0, max_size=3)
    return st.builds(lambda size, b: OpCall((torch.zeros(size), *b)), sizes, bounds)


def rrelu_calls():
    """float32 tensors with negative, zero, positive, NaN and infinite elements; slopes and both modes."""
    from hypothesis import strategies as st
    from hypothesis.extra import numpy as hnp
    import numpy as np

    elements = st.sampled_from([-2.0, -0.5, -0.0, 0.0, 0.25, 3.0, np.nan, -np.inf, np.inf])
    arrays = hnp.arrays(np.float32, hnp.array_shapes(min_dims=0, max_dims=3, min_side=0, max_side=5),
                        elements=elements)
    slopes = st.sampled_from([(1.0 / 8.0, 1.0 / 3.0), (0.0, 1.0), (0.2, 0.2), (-1.0, 0.5)])
    return st.builds(lambda a, bounds, training: OpCall((torch.from_numpy(a), *bounds, training)),
                     arrays, slopes, st.booleans())


@hookimpl
def shimkit_op_plugins():
    yield OpPlugin(
        name="random",
        ops=(RANDINT_LOW_OUT, UNIFORM, RRELU),
        shims=(Shim(op=RANDINT_LOW_OUT, device="mps", symbol="aoti_torch_mps_randint_low_out",
                    recorded_names=("aoti_torch_mps_randint_low_out",), kernel=KERNEL),),
        decompositions={UNIFORM: uniform_decomposition, RRELU: rrelu_decomposition},
        decomposition_devices=("mps",),
        references={RANDINT_LOW_OUT: RandomReference(torch.ops.aten.randint.low_out),
                    UNIFORM: RandomReference(torch.ops.aten.uniform.default),
                    RRELU: RandomReference(torch.ops.aten.rrelu.default)},
        input_strategies={RANDINT_LOW_OUT: randint_calls, UNIFORM: uniform_calls, RRELU: rrelu_calls},
        doc="Random numbers on mps: aoti_torch_mps_randint_low_out (the seeds of Inductor's Metal Philox code) "
            "as an MSL kernel; uniform and rrelu through rand_like.",
    )

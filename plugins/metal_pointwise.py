"""Pointwise ops Inductor's Metal code generator has no function for: ``sinh``, ``cosh``, ``asinh``,
``acosh``, ``logical_xor`` and ``hypot`` (which is not core ATen either, so it is decomposed before
``to_edge``: ``OpPlugin.pre_edge``).

``torch._inductor.codegen.mps.MetalOverrides`` (torch 2.13) writes ``metal::precise::tanh`` and
``atanh`` but none of these, so Inductor stops in codegen with a bare ``NotImplementedError`` (found by
the OpInfo sweep, docs/coverage.md); on a Mac the same. Each is rewritten here into functions it does
generate (``exp``, ``expm1``, ``log``, ``log1p``, ``sqrt``, comparisons and ``where``), on Metal only:
CUDA generates them natively.

Numerics follow ATen's: half and bfloat16 are computed in float32 and rounded once; NaN propagates;
``±inf`` and ``±0.0`` come out as ATen's; and the forms avoid the textbook ones' failures: no
cancellation near zero (``sinh`` through ``expm1``, ``asinh``/``acosh`` through ``log1p``), no overflow
before the result overflows (``e**|x| / 2`` as ``h * (h / 2)`` with ``h = e**(|x| / 2)``; ``log(2|x|)``
for huge arguments instead of squaring them; ``hypot`` scaled by its larger side, inf wherever a side is
infinite, NaN or not).
"""

from __future__ import annotations

import math

import torch

from shimkit.registry import OpPlugin, hookimpl

SINH = "aten::sinh.default"
COSH = "aten::cosh.default"
ASINH = "aten::asinh.default"
ACOSH = "aten::acosh.default"
LOGICAL_XOR = "aten::logical_xor.default"
HYPOT = "aten::hypot.default"

_LN2 = math.log(2.0)
# Past this, e**-|x| is below float32's resolution of e**|x| and the large-argument forms are exact.
_EXP_SPLIT = 20.0
# Past this, x*x/(1 + sqrt(1 + x*x)) is x to float32 precision: the log(2|x|) form takes over before
# the square could overflow.
_LOG_SPLIT = 2.0 ** 28


def _in_float32(x: torch.Tensor) -> torch.Tensor:
    if not x.is_floating_point():  # integer and bool inputs give the default float dtype, as ATen's do
        return x.to(torch.get_default_dtype())
    return x.float() if x.dtype in (torch.float16, torch.bfloat16) else x


def _result_dtype(x: torch.Tensor) -> torch.dtype:
    return x.dtype if x.is_floating_point() else torch.get_default_dtype()


def _half_exp_squared(a: torch.Tensor) -> torch.Tensor:
    """``e**a / 2`` for ``a >= 0``, finite wherever the result is."""
    h = torch.exp(a * 0.5)
    return h * (h * 0.5)


def sinh_decomposition(self: torch.Tensor) -> torch.Tensor:
    x = _in_float32(self)
    a = x.abs()
    small = (torch.expm1(x) - torch.expm1(-x)) * 0.5  # opposite signs: a sum of magnitudes, no cancellation
    large = torch.where(x < 0, -_half_exp_squared(a), _half_exp_squared(a))
    return torch.where(a < _EXP_SPLIT, small, large).to(_result_dtype(self))


def cosh_decomposition(self: torch.Tensor) -> torch.Tensor:
    x = _in_float32(self)
    a = x.abs()
    small = (torch.exp(a) + torch.exp(-a)) * 0.5
    return torch.where(a < _EXP_SPLIT, small, _half_exp_squared(a)).to(_result_dtype(self))


def asinh_decomposition(self: torch.Tensor) -> torch.Tensor:
    x = _in_float32(self)
    a = x.abs()
    squared = a * a
    moderate = torch.log1p(a + squared / (1.0 + torch.sqrt(1.0 + squared)))
    magnitude = torch.where(a < _LOG_SPLIT, moderate, torch.log(a) + _LN2)
    # Odd, and ±0.0 as given (ATen's asinh(-0.0) is -0.0).
    signed = torch.where(x < 0, -magnitude, torch.where(x == 0, x, magnitude))
    return signed.to(_result_dtype(self))


def acosh_decomposition(self: torch.Tensor) -> torch.Tensor:
    x = _in_float32(self)
    t = x - 1.0
    moderate = torch.log1p(t + torch.sqrt(t * (x + 1.0)))
    value = torch.where(x < _LOG_SPLIT, moderate, torch.log(x) + _LN2)
    # Below the domain (x < 1) ATen gives NaN; NaN in gives NaN out through either branch.
    value = torch.where(x < 1.0, torch.full_like(value, math.nan), value)
    return value.to(_result_dtype(self))


def hypot_decomposition(self: torch.Tensor, other: torch.Tensor) -> torch.Tensor:
    dtype = torch.promote_types(self.dtype, other.dtype)
    a, b = _in_float32(self.to(dtype)).abs(), _in_float32(other.to(dtype)).abs()
    larger, smaller = torch.maximum(a, b), torch.minimum(a, b)  # NaN in either gives NaN in both
    ratio = smaller / larger
    # Scaled by the larger side, so nothing squares past float32's range before the result does.
    value = torch.where(larger == 0, larger, larger * torch.sqrt(1.0 + ratio * ratio))
    # IEEE and ATen: an infinite side gives inf, even when the other is NaN.
    value = torch.where(torch.isinf(a) | torch.isinf(b), torch.full_like(value, math.inf), value)
    return value.to(_result_dtype(torch.empty((), dtype=dtype)))


def logical_xor_decomposition(self: torch.Tensor, other: torch.Tensor) -> torch.Tensor:
    return torch.ne(self, 0) != torch.ne(other, 0)


def pointwise_inputs():
    """One float32 tensor from every range the forms split on: tiny, moderate, past each split, ±0.0,
    ±inf and NaN; empty and 0-d tensors too."""
    from hypothesis import strategies as st

    specials = st.sampled_from([0.0, -0.0, math.inf, -math.inf, math.nan, 1.0, -1.0, 1e-30, 88.5, 89.3, 3e30])
    values = st.one_of(st.floats(-30, 30, width=32), st.floats(-2.0 ** -10, 2.0 ** -10, width=32),
                       st.floats(allow_nan=True, allow_infinity=True, width=32), specials)
    shapes = st.sampled_from([(0,), (), (1,), (5,), (2, 3)])

    def tensor(shape: tuple[int, ...]):
        count = math.prod(shape)
        return st.lists(values, min_size=count, max_size=count).map(
            lambda v: (torch.tensor(v, dtype=torch.float32).reshape(shape),))

    return shapes.flatmap(tensor)


def hypot_inputs():
    """Two broadcasting float32 tensors from :func:`pointwise_inputs`' ranges and huge values whose
    squares overflow float32."""
    from hypothesis import strategies as st

    specials = st.sampled_from([0.0, -0.0, math.inf, -math.inf, math.nan, 3e30, -2e38, 1e-30, 1e-40])
    values = st.one_of(st.floats(-30, 30, width=32), st.floats(width=32), specials)
    shapes = st.sampled_from([((3,), (3,)), ((2, 3), (3,)), ((0,), (1,)), ((), (4,)), ((), ())])

    def tensor(shape: tuple[int, ...]):
        count = math.prod(shape)
        return st.lists(values, min_size=count, max_size=count).map(
            lambda v: torch.tensor(v, dtype=torch.float32).reshape(shape))

    return shapes.flatmap(lambda pair: st.tuples(tensor(pair[0]), tensor(pair[1])))


def logical_xor_inputs():
    """Two broadcasting tensors of mixed dtypes (float with NaN and ±0.0, int, bool)."""
    from hypothesis import strategies as st

    def tensor(shape: tuple[int, ...], dtype: torch.dtype):
        count = math.prod(shape)
        values = st.sampled_from([0.0, -0.0, 1.0, -2.5, math.nan, math.inf])

        def build(v: list[float]) -> torch.Tensor:
            floats = torch.tensor(v, dtype=torch.float32).reshape(shape)
            return floats if dtype.is_floating_point else floats.nan_to_num(nan=1.0, posinf=3.0).to(dtype)

        return st.lists(values, min_size=count, max_size=count).map(build)

    dtypes = st.sampled_from([torch.float32, torch.int64, torch.bool])
    shapes = st.sampled_from([((3,), (3,)), ((2, 3), (3,)), ((0,), (1,)), ((), (4,))])
    return st.tuples(shapes, dtypes, dtypes).flatmap(
        lambda c: st.tuples(tensor(c[0][0], c[1]), tensor(c[0][1], c[2])))


@hookimpl
def shimkit_op_plugins():
    yield OpPlugin(
        name="metal-pointwise",
        ops=(SINH, COSH, ASINH, ACOSH, LOGICAL_XOR, HYPOT),
        decompositions={SINH: sinh_decomposition, COSH: cosh_decomposition, ASINH: asinh_decomposition,
                        ACOSH: acosh_decomposition, LOGICAL_XOR: logical_xor_decomposition,
                        HYPOT: hypot_decomposition},
        references={SINH: torch.sinh, COSH: torch.cosh, ASINH: torch.asinh, ACOSH: torch.acosh,
                    LOGICAL_XOR: torch.logical_xor, HYPOT: torch.hypot},
        input_strategies={SINH: pointwise_inputs, COSH: pointwise_inputs, ASINH: pointwise_inputs,
                          ACOSH: pointwise_inputs, LOGICAL_XOR: logical_xor_inputs, HYPOT: hypot_inputs},
        # hypot is not core ATen either: stock stops it in to_edge, so it is decomposed before.
        pre_edge=(HYPOT,),
        decomposition_devices=("mps",),
        doc="sinh, cosh, asinh, acosh, logical_xor and hypot in functions Inductor's Metal codegen has.",
    )

"""Ops Inductor's Metal code generator compiles although they are not core ATen: Bessel functions,
Chebyshev and Hermite polynomials, the incomplete gamma functions, ``erfinv``, ``i0``, and pointwise
``erfc``, ``exp2``, ``signbit``, ``fmax``/``fmin`` and ``round(decimals=)``.

Stock, each of them stops in ``to_edge`` (``SpecViolationError: ... aten.special_bessel_j0.default is not
in Core ATen opset``): the AOTI partitioner keeps ops undecomposed, these have no decomposition into
core ATen, and the edge verifier rejects them before ``MetalBackend`` sees them. Yet
``torch._inductor.codegen.mps.MetalOverrides`` writes each one as Metal code (``c10::metal::bessel_j0_forward``
from ``c10/metal/special_math.h``, which ships with torch and is compiled into every kernel that uses
it; the pointwise ones through Inductor's own lowerings). ``generated_on`` says so, and
``BackendConfig.edge_compile_config()`` lets them through the verifier. There is no decomposition and no
kernel here: the numbers are Inductor's and c10's, checked on Linux by running Inductor's generated
Metal code (``shimkit.metal.inductor``) against eager CPU on OpInfo samples and hypothesis inputs.

Held back, because that check found Inductor's Metal code disagreeing with ATen (docs/coverage.md):
``special_erfcx`` (computed as ``exp(x*x) * erfc(x)``: 0 from x = 4.4 on, where ATen gives 0.11),
``digamma`` and ``lgamma`` (from ``-1e-20`` to 0 Metal's give 2e7 and inf, ATen's 1e30 and 69),
``polygamma`` (relative error 1e-4 below -20, and NaN where ATen is finite), ``special_zeta`` (NaN where
ATen gives 0 for large arguments) and ``special_hermite_polynomial_he`` (NaN where ATen overflows to
-inf). The Chebyshev polynomials ``v`` and ``w`` and the shifted ones: for a NaN ``x`` Metal's give 0 or
1, ATen's NaN (and ATen's own CPU kernels disagree with each other there). ``ldexp``: Inductor's Metal
code generator has no ``ldexp`` for the integer exponents it is called with. ``special_airy_ai``,
``special_ndtri``, ``special_laguerre_polynomial_l``, ``special_legendre_polynomial_p``, ``copysign`` and
``nextafter`` have no Metal code in Inductor at all (``hypot`` neither: ``plugins/metal_pointwise.py``
decomposes it).
"""

from __future__ import annotations

import torch

from shimkit.plugins.shared import float32_tensors
from shimkit.registry import OpCall, OpPlugin, hookimpl

UNARY = {
    "erfinv": torch.erfinv, "i0": torch.i0, "special_i0e": torch.special.i0e, "special_i1": torch.special.i1,
    "special_i1e": torch.special.i1e, "special_spherical_bessel_j0": torch.special.spherical_bessel_j0,
    "special_bessel_j0": torch.special.bessel_j0, "special_bessel_j1": torch.special.bessel_j1,
    "special_bessel_y0": torch.special.bessel_y0, "special_bessel_y1": torch.special.bessel_y1,
    "special_modified_bessel_i0": torch.special.modified_bessel_i0,
    "special_modified_bessel_i1": torch.special.modified_bessel_i1,
    "special_modified_bessel_k0": torch.special.modified_bessel_k0,
    "special_modified_bessel_k1": torch.special.modified_bessel_k1,
    "special_scaled_modified_bessel_k0": torch.special.scaled_modified_bessel_k0,
    "special_scaled_modified_bessel_k1": torch.special.scaled_modified_bessel_k1,
    "erfc": torch.erfc, "exp2": torch.exp2, "signbit": torch.signbit,
}
BINARY = {"igamma": torch.igamma, "igammac": torch.igammac, "fmax": torch.fmax, "fmin": torch.fmin}
# Polynomials p_n(x): overloads ``default`` (both tensors), ``x_scalar`` and ``n_scalar``.
POLYNOMIALS = {
    "special_chebyshev_polynomial_t": torch.special.chebyshev_polynomial_t,
    "special_chebyshev_polynomial_u": torch.special.chebyshev_polynomial_u,
    "special_hermite_polynomial_h": torch.special.hermite_polynomial_h,
}
ROUND_DECIMALS = "aten::round.decimals"

_SPECIAL_VALUES = [0.0, -0.0, float("nan"), float("inf"), -float("inf")]


def _values(low: float, high: float, nan: bool = True):
    from hypothesis import strategies as st

    return st.floats(low, high, width=32) | st.sampled_from([v for v in _SPECIAL_VALUES if nan or v == v])


def _shapes():
    from hypothesis import strategies as st

    return st.lists(st.integers(0, 4), min_size=0, max_size=2).map(tuple)


def unary_calls(low: float = -60.0, high: float = 60.0):
    """One tensor (sizes from 0, scalars too) of values in ``[low, high]``, signed zeros, NaN and inf."""
    return lambda: _shapes().flatmap(lambda shape: float32_tensors(shape, _values(low, high)).map(lambda x: (x,)))


def binary_calls(low: float = -30.0, high: float = 30.0):
    """Two tensors of one shape, values as :func:`unary_calls`' (the incomplete gamma functions are NaN
    for negative arguments, which is part of what is checked)."""
    def calls():
        from hypothesis import strategies as st

        return _shapes().flatmap(lambda shape: st.tuples(float32_tensors(shape, _values(low, high)),
                                                         float32_tensors(shape, _values(low, high))))
    return calls


def polynomial_calls(overload: str, nan: bool = True):
    """``p_n(x)``: degrees -2..12 (negative degrees are 0), ``x`` in ``[-2, 2]`` (Chebyshev's interval and
    beyond it), inf and, with ``nan``, NaN; for the scalar overloads one side a Python number."""
    def calls():
        from hypothesis import strategies as st

        xs = _values(-2.0, 2.0, nan)
        degrees = st.integers(-2, 12)
        shapes = _shapes()
        if overload == "x_scalar":
            return shapes.flatmap(lambda shape: st.tuples(
                st.floats(-2.0, 2.0), float32_tensors(shape, degrees.map(float))))
        if overload == "n_scalar":
            return shapes.flatmap(lambda shape: st.tuples(float32_tensors(shape, xs), degrees))
        return shapes.flatmap(lambda shape: st.tuples(float32_tensors(shape, xs),
                                                      float32_tensors(shape, degrees.map(float))))
    return calls


def round_calls():
    """``round(x, decimals=)``: decimals -3..3, halves included (ATen rounds half to even)."""
    from hypothesis import strategies as st

    elements = _values(-1e4, 1e4) | st.sampled_from([0.5, 1.5, 2.5, -0.5, 0.125, 12.345, 1250.0])
    return st.builds(lambda x, decimals: OpCall((x,), {"decimals": decimals}),
                     _shapes().flatmap(lambda shape: float32_tensors(shape, elements)), st.integers(-3, 3))


def _ops():
    references, strategies = {}, {}
    for name, function in UNARY.items():
        op = f"aten::{name}.default"
        references[op] = function
        # i0, i1 and the scaled/modified Bessel functions overflow float32 past ~88; beyond, both say inf.
        strategies[op] = unary_calls(-1.0, 1.0) if name == "erfinv" else unary_calls()
    for name, function in BINARY.items():
        op = f"aten::{name}.default"
        references[op] = function
        strategies[op] = binary_calls()
    for name, function in POLYNOMIALS.items():
        for overload in ("default", "x_scalar", "n_scalar"):
            op = f"aten::{name}.{overload}"
            references[op] = function
            # For a NaN x of degree 2 and up both sides return an uninitialised value: ATen's CPU
            # chebyshev_polynomial_u (9e-41 one call, 4e21 the next) and c10/metal's special_math.h for
            # T and U alike (its recurrence `for (k = 2; k <= n && !isnan(q); ...)` never assigns `r`;
            # 2.3e30 in one CI run). There is nothing to compare with, so Chebyshev draws no NaN.
            strategies[op] = polynomial_calls(overload, nan="chebyshev" not in name)
    references[ROUND_DECIMALS], strategies[ROUND_DECIMALS] = torch.round, round_calls
    return references, strategies


REFERENCES, INPUT_STRATEGIES = _ops()


@hookimpl
def shimkit_op_plugins():
    yield OpPlugin(
        name="metal-generated",
        ops=tuple(REFERENCES),
        generated_on={op: ("mps",) for op in REFERENCES},
        references=REFERENCES,
        input_strategies=INPUT_STRATEGIES,
        doc="Bessel functions, orthogonal polynomials, incomplete gamma, erfinv, i0, erfc, exp2, signbit, "
            "fmax/fmin and round(decimals=): Inductor writes Metal code for them; let through to_edge.",
    )

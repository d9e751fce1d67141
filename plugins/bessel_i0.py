"""``aten::i0`` (``torch.i0``, ``torch.special.i0``) as ATen's own Cephes approximation in pointwise ops, on CUDA.

``aten.i0`` is not core ATen and has no decomposition in ``to_edge``'s table, so on CUDA a model calling it
stops in ``to_edge`` (``SpecViolationError``), and so does every Kaiser window built in ``forward``, which
``plugins/window_functions.py`` writes with ``i0``. (Inductor's Triton code generator would compile it, as
``libdevice.cyl_bessel_i0``; it is the edge verifier, not a missing kernel, that stops it.) Metal needs
nothing: Inductor's Metal code generator compiles ``i0`` and ``plugins/metal_generated.py`` lets it through
the verifier there, so this decomposition is limited to CUDA.

The approximation is ATen's ``calc_i0`` (``aten/src/ATen/native/Math.h``, from the Cephes Math Library,
3-clause BSD): ``|x| <= 8``: ``exp(x) * chbevl(x / 2 - 2, A)``, above: ``exp(x) * chbevl(32 / x - 2, B) /
sqrt(x)``, where ``chbevl(y, c)`` is the Chebyshev series ``c'_0 / 2 + sum c'_k T_k(y / 2)`` (``c'`` the table
reversed) and ``A`` (30) and ``B`` (25) are the coefficient tables of ``exp(-x) I0(x)`` on ``[0, 8]`` and of
``exp(-x) sqrt(x) I0(x)`` on the inverted interval ``[8, inf]``. ATen sums the series by Clenshaw's
recurrence; here each term is summed on its own, ``T_k(t) = cos(k acos t)`` (``|t| <= 1`` in both branches):
Inductor inlines a two-term recurrence whose input reads no buffer (a window built from ``arange``, ``i0`` of
a constant: exactly a Kaiser window) into an expression tree that doubles with every step, and the Kaiser
window's CUDA lowering did not finish in 280 s on an H200 (Inductor on the CPU: not in 200 s); summed term
by term, the same model compiles in 20 s on a CPU. Each element's angle is its own branch's, and the terms
``cos(k angle)`` are shared by the two series.

Semantics kept from ATen's CPU kernel: even in ``x``; NaN gives NaN; ``inf`` gives NaN (``exp(inf) * c /
sqrt(inf)``), as ATen's CPU ``i0`` does; values past ``exp``'s overflow (88.7 in float32, 709.8 in float64) are
``inf`` although ``I0`` itself overflows a little later, as in ATen; float32 and float64 are computed in their
own dtype with the tables rounded to it, half and bfloat16 in float32 and rounded once (ATen's
``calc_i0(c10::Half)``), integer and bool inputs as the default float dtype (ATen's int-to-float promotion).
Results agree with ATen's to its own error, not bit for bit: in float32 within 6e-7 relative of ATen's (whose
own distance to float64 is 4e-6 at large ``x``, from rounding ``x`` and ``exp``), in float64 within 2e-15.
Complex inputs, which ATen refuses, are declined.
"""

from __future__ import annotations

import torch

from shimkit.plugins.shared import ACCUMULATE_IN_FLOAT32
from shimkit.registry import DecompositionDeclined, OpPlugin, hookimpl

I0 = "aten::i0.default"

# Chebyshev coefficients for exp(-x) I0(x) on [0, 8] (Cephes i0.c, ATen's chebyshev_coefficients_i0e_A).
A = (
    -4.41534164647933937950E-18, 3.33079451882223809783E-17, -2.43127984654795469359E-16,
    1.71539128555513303061E-15, -1.16853328779934516808E-14, 7.67618549860493561688E-14,
    -4.85644678311192946090E-13, 2.95505266312963983461E-12, -1.72682629144155570723E-11,
    9.67580903537323691224E-11, -5.18979560163526290666E-10, 2.65982372468238665035E-9,
    -1.30002500998624804212E-8, 6.04699502254191894932E-8, -2.67079385394061173391E-7,
    1.11738753912010371815E-6, -4.41673835845875056359E-6, 1.64484480707288970893E-5,
    -5.75419501008210370398E-5, 1.88502885095841655729E-4, -5.76375574538582365885E-4,
    1.63947561694133579842E-3, -4.32430999505057594430E-3, 1.05464603945949983183E-2,
    -2.37374148058994688156E-2, 4.93052842396707084878E-2, -9.49010970480476444210E-2,
    1.71620901522208775349E-1, -3.04682672343198398683E-1, 6.76795274409476084995E-1,
)

# Chebyshev coefficients for exp(-x) sqrt(x) I0(x) on the inverted interval [8, inf] (ATen's
# chebyshev_coefficients_i0e_B).
B = (
    -7.23318048787475395456E-18, -4.83050448594418207126E-18, 4.46562142029675999901E-17,
    3.46122286769746109310E-17, -2.82762398051658348494E-16, -3.42548561967721913462E-16,
    1.77256013305652638360E-15, 3.81168066935262242075E-15, -9.55484669882830764870E-15,
    -4.15056934728722208663E-14, 1.54008621752140982691E-14, 3.85277838274214270114E-13,
    7.18012445138366623367E-13, -1.79417853150680611778E-12, -1.32158118404477131188E-11,
    -3.14991652796324136454E-11, 1.18891471078464383424E-11, 4.94060238822496958910E-10,
    3.39623202570838634515E-9, 2.26666899049817806459E-8, 2.04891858946906374183E-7,
    2.89137052083475648297E-6, 6.88975834691682398426E-5, 3.36911647825569408990E-3,
    8.04490411014108831608E-1,
)


def chebyshev_series(terms: list[torch.Tensor], coefficients: tuple[float, ...]) -> torch.Tensor:
    """Cephes' ``chbevl(2t, coefficients)``: ``c'_0 / 2 + sum c'_k T_k(t)`` (``c'`` the table reversed, lowest
    order first), summed term by term from ``terms[k - 1] = T_k(t)``."""
    lowest_first = coefficients[::-1]
    total = terms[0] * lowest_first[1] + lowest_first[0] * 0.5
    for term, coefficient in zip(terms[1:], lowest_first[2:]):
        total = total + term * coefficient
    return total


def i0_decomposition(self: torch.Tensor) -> torch.Tensor:
    if self.is_complex():
        raise DecompositionDeclined(f"i0 of {self.dtype} values: ATen has no complex i0 to match")
    dtype = self.dtype if self.is_floating_point() else torch.get_default_dtype()
    computed = torch.float32 if dtype in ACCUMULATE_IN_FLOAT32 else dtype
    x = self.to(computed).abs()
    small = x <= 8
    # ATen's: x <= 8: exp(x) * chbevl(x / 2 - 2, A); above: exp(x) * chbevl(32 / x - 2, B) / sqrt(x).
    # One angle per element, its own branch's; T_k(t) = cos(k acos t) serves both series, each element keeps its
    # own branch's sum.
    angle = torch.acos(torch.where(small, x / 2 - 2, 32 / x - 2) / 2)
    terms = [torch.cos(angle * order) for order in range(1, len(A))]
    exp = x.exp()
    return torch.where(small, exp * chebyshev_series(terms, A),
                       exp * chebyshev_series(terms, B) / x.sqrt()).to(dtype)


def i0_inputs():
    """``i0(self)``: 0-d to 2-d tensors of values in [-100, 100] (both branches, the boundary at 8 and float32's
    overflow past 88.7), signed zeros, NaN and infinities; float32, float64, half, bfloat16 or int64."""
    from hypothesis import strategies as st
    from hypothesis.extra import numpy as hnp
    import numpy as np

    elements = (st.floats(-100, 100, width=32) | st.floats(-9, 9, width=32)
                | st.sampled_from([0.0, -0.0, 8.0, -8.0, 7.999999, 8.000001, 88.5, 89.0, float("nan"),
                                   float("inf"), -float("inf")]))
    shapes = hnp.array_shapes(min_dims=0, max_dims=2, min_side=0, max_side=6)
    dtypes = st.sampled_from([torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int64])

    def cast(values, dtype):
        tensor = torch.from_numpy(values)
        if not dtype.is_floating_point:
            tensor = torch.nan_to_num(tensor, nan=0.0, posinf=50.0, neginf=-50.0)
        return (tensor.to(dtype),)

    return st.builds(cast, hnp.arrays(np.float32, shapes, elements=elements), dtypes)


def _i0_reference(self: torch.Tensor) -> torch.Tensor:
    return torch.i0(self)


@hookimpl
def shimkit_op_plugins():
    yield OpPlugin(
        name="bessel-i0",
        ops=(I0,),
        decompositions={I0: i0_decomposition},
        # Not core ATen: on CUDA torch.i0 (and a kaiser_window built in forward) stops in to_edge otherwise.
        pre_edge=(I0,),
        # Metal's code generator compiles i0 (plugins/metal_generated.py lets it through to_edge there).
        decomposition_devices=("cuda",),
        references={I0: _i0_reference},
        input_strategies={I0: i0_inputs},
        doc="i0 on CUDA as ATen's Cephes Chebyshev series (calc_i0's tables), summed term by term in pointwise ops.",
    )

"""``aten::addmv``: ``beta * self + alpha * (mat @ vec)``, decomposed before ``to_edge``.

``torch.addmv`` never reaches a backend stock: ``aten.addmv`` is not core ATen, the AOTI partitioner keeps
every op undecomposed, and ``to_edge`` stops with ``SpecViolationError: ... aten.addmv.default is not in
Core ATen opset``. The decomposition is therefore a *pre-edge* one (``OpPlugin.pre_edge``), applied to
the exported program by ``BackendConfig.prepare_for_edge`` (and by ``shimkit audit``): ``mm`` against
the vector as a one-column matrix (``aoti_torch_mps_mm_out``, which the Metal runtime has), then the
scaled add Inductor generates.

The rules are ``addmm``'s (``plugins/addmm``), which are ATen's: half and bfloat16 are computed in float32
and rounded once; ``beta == 0`` ignores ``self``; ``alpha == 0`` ignores the product in float32 and float64
(ATen's BLAS path) and multiplies it by zero in half precision and complex (NaN shows); integer tensors take
``beta``/``alpha`` converted to their dtype first.
"""

from __future__ import annotations

import torch

from shimkit.plugins.addmm import BLAS_DTYPES, aten_reference, scaled_product_sum
from shimkit.plugins.shared import float32_tensors
from shimkit.registry import OpCall, OpPlugin, hookimpl

ADDMV = "aten::addmv.default"


def _matrix_vector(mat: torch.Tensor, vec: torch.Tensor) -> torch.Tensor:
    return torch.mm(mat, vec.unsqueeze(1)).squeeze(1)


def addmv_decomposition(self, mat, vec, *, beta=1, alpha=1):
    return scaled_product_sum(self, mat, vec, _matrix_vector, lambda a, b: (a.shape[0],), beta=beta, alpha=alpha,
                              zero_alpha_skips=BLAS_DTYPES)


addmv_reference = aten_reference(torch.addmv)


def addmv_inputs():
    """``addmv(self, mat, vec, beta=, alpha=)`` calls: sizes from 0, ``self`` full or broadcast, NaN and inf included
    (where the zero-``beta``/``alpha`` rules show), ``beta``/``alpha`` 0, 1 or other.

    ``self`` broadcasts only when ``mat`` has elements: for an empty ``mat`` ATen's eager kernel returns
    ``self``'s own shape (with a resize warning) instead of the ``(n,)`` its meta function and the
    exported program declare, which is what the decomposition returns."""
    from hypothesis import strategies as st

    elements = st.floats(-8, 8, width=32) | st.sampled_from([float("nan"), float("inf"), -float("inf")])

    def tensor(shape):
        return float32_tensors(shape, elements)

    def calls(sizes):
        n, m = sizes
        scalars = st.sampled_from([0, 1, 0.5, -2.0])
        self_shapes = [(n,), (1,), ()] if n and m else [(n,)]
        return st.builds(lambda self, mat, vec, beta, alpha: OpCall((self, mat, vec), {"beta": beta, "alpha": alpha}),
                         st.sampled_from(self_shapes).flatmap(tensor), tensor((n, m)), tensor((m,)), scalars,
                         scalars)

    return st.tuples(st.integers(0, 5), st.integers(0, 5)).flatmap(calls)


@hookimpl
def shimkit_op_plugins():
    yield OpPlugin(
        name="addmv",
        ops=(ADDMV,),
        decompositions={ADDMV: addmv_decomposition},
        pre_edge=(ADDMV,),
        references={ADDMV: addmv_reference},
        input_strategies={ADDMV: addmv_inputs},
        doc="addmv as mm against a one-column matrix plus a scaled add, applied before to_edge (not core ATen).",
    )

"""Dense linear algebra on mps: LU (with partial pivoting) and Cholesky factorizations, solves from them,
and ATen's info checks, shipped as MSL kernels behind c-shims for ops of shimkit's own.

``torch.linalg.{det, slogdet, inv, solve, cholesky, lu_factor}``, ``torch.logdet``, ``torch.lu``,
``torch.lu_solve`` and ``torch.linalg.tensor{inv,solve}`` reach Inductor as ``aten::_linalg_det``,
``_linalg_slogdet``, ``linalg_inv_ex``, ``_linalg_solve_ex``, ``linalg_cholesky_ex``,
``linalg_lu_factor_ex``, ``linalg_lu_solve`` and ``_linalg_check_errors``. None has a c-shim (torchgen
leaves them to the proxy executor, which the libtorch-free runtime lacks), so no plugin can provide them
under their own names. They are decomposed instead into ops of the ``shimkit`` namespace, which do have
c-shims (``aot_inductor.custom_ops_to_c_shims``, derived from the shims' prototypes), plus the elementwise
arithmetic Inductor writes Metal code for:

- ``shimkit::lu_factor(A) -> (LU, pivots, info)``: LAPACK ``getrf``'s answer (row-major ``LU``; ``pivots``
  1-based, int32; ``info`` the first zero pivot, 1-based, else 0), rectangular and batched;
- ``shimkit::lu_solve(LU, pivots, B, adjoint) -> X``: ``A X = B`` (or ``A^T X = B``) from that factorization;
- ``shimkit::cholesky(A) -> (L, info)``: LAPACK ``potrf``'s lower factor of the lower triangle, upper
  triangle zero, ``info`` the order of the first leading minor that is not positive definite;
- ``shimkit::eigh(A) -> (values, vectors, info)``: the eigenvalues (ascending) and eigenvectors of the
  symmetric matrix given by A's lower triangle, each eigenvector's sign fixed so that its entry of largest
  magnitude (the first such) is positive; ``info`` is ``n`` where the Jacobi iteration does not converge
  (NaN or infinite entries);
- ``shimkit::svd(A) -> (U, S, Vh, info)``: the thin SVD of a tall matrix (``m >= n``; the decomposition
  hands a wide one over transposed), singular values descending, each column of ``U`` with its entry of
  largest magnitude positive (``Vh``'s rows signed to match), ``U`` completed to orthonormal columns where
  a singular value is zero; ``info`` is ``n`` for non-finite input;
- ``shimkit::qr(A, complete) -> (Q, R)``: LAPACK ``geqrf``/``orgqr``'s factors (Householder reflections with
  ``dlarfg``'s signs, so equal to ATen's up to rounding), reduced or complete;
- ``shimkit::ldl_factor(A) -> (LD, pivots, info)``: LAPACK ``sytf2``'s Bunch-Kaufman ``L D L^T`` of the lower
  triangle (``LD`` with its strict upper triangle zero, ``pivots`` LAPACK's ``ipiv``, ``info`` the first zero
  pivot);
- ``shimkit::linalg_check_errors(info, api_name, is_matrix)``: ATen's error for a nonzero ``info``.

Eigenvectors are unique only up to sign (LAPACK's choice differs between builds, and ATen's own tests
compare them through ``A V = V diag(values)``): ``_linalg_eigh`` decomposed through ``shimkit::eigh`` returns
the canonical sign on every device, and it is checked against ATen's result brought to that sign; so do
singular vectors through ``shimkit::svd``. ``full_matrices=True`` is decomposed for square matrices only (the
completed basis of a non-square one is not unique): declined, not different, elsewhere.

The kernels (``kernel/*.metal``, one thread per matrix or per right-hand side: the small, batched matrices
models carry) run on Linux through ``shimkit.metal`` against ``torch.linalg``; ``kernel/linalg_shim_mps.mm``
dispatches them on ExecuTorch's Metal runtime (on Linux, inside whole programs: ``shimkit audit --execute``).
Only float32, like PyTorch's own mps linear algebra. On the CPU the ops are ``torch.linalg`` itself, so each
decomposition is checked against ATen with the kernels' reference semantics, and each kernel against that
reference.

The plugin is this module: its records and its hook. What they name lives beside it, one idea a module:
``ops`` (the custom ops, their CPU references and fake kernels), ``decompositions`` (ATen's ops written in
them, and the references with canonical signs), ``launchers`` (each kernel run through ``shimkit.metal`` as
the Mac dispatches it, and its ``Kernel`` record) and ``samples`` (the hypothesis inputs of every op).
"""

from __future__ import annotations

from typing import Any, Callable

import torch

from shimkit.plugins.linalg.decompositions import (
    check_errors_decomposition, cholesky_ex_decomposition, det_decomposition, eigh_decomposition,
    eigh_with_canonical_signs, inv_ex_decomposition, ldl_factor_ex_decomposition, linalg_eigh_decomposition,
    linalg_eigh_with_canonical_signs, linalg_svd_decomposition, linalg_svd_with_canonical_signs,
    lu_factor_ex_decomposition, lu_solve_decomposition, pinv_decomposition, qr_decomposition, slogdet_decomposition,
    solve_ex_decomposition, static_sizes_only, svd_decomposition, svd_with_canonical_signs, torch_svd_decomposition,
    torch_svd_with_canonical_signs)
from shimkit.plugins.linalg.launchers import (CHECK_ERRORS_KERNEL, CHOLESKY_KERNEL, EIGH_KERNEL, LDL_FACTOR_KERNEL,
                                              LU_FACTOR_KERNEL, LU_SOLVE_KERNEL, QR_KERNEL, SVD_KERNEL,
                                              launch_lu_factor)
from shimkit.plugins.linalg.ops import (CHECK_ERRORS, CHOLESKY, EIGH, LDL_FACTOR, LU_FACTOR, LU_SOLVE, QR, SVD,
                                        canonical_signs)
from shimkit.plugins.linalg.samples import (_random_matrices, check_errors_calls, cholesky_calls, eigh_calls,
                                            full_rank, inv_calls, ldl_calls, lu_factor_calls, lu_solve_calls,
                                            lu_solve_kernel_calls, matrix_inputs, pinv_calls,
                                            positive_definite_inputs, qr_calls, solve_calls, square_matrix_calls,
                                            svd_calls, symmetric_inputs, tall_matrix_inputs, tensorinv_calls,
                                            tensorsolve_calls, without_keywords)
from shimkit.registry import Kernel, OpCall, OpPlugin, Shim, hookimpl, resolve_op, through_aten_composite

# The hook, and what other code reaches through the package (tests/test_plugin_linalg.py).
__all__ = ["CHOLESKY_KERNEL", "EIGH_KERNEL", "LDL_FACTOR_KERNEL", "LU_FACTOR", "LU_FACTOR_KERNEL", "LU_SOLVE_KERNEL",
           "QR_KERNEL", "SHIMS", "SVD_KERNEL", "_random_matrices", "canonical_signs", "check_errors_decomposition",
           "eigh_decomposition", "launch_lu_factor", "lu_factor_ex_decomposition", "matrix_inputs",
           "shimkit_op_plugins", "svd_decomposition"]

ATEN_LU_FACTOR = "aten::linalg_lu_factor_ex.default"
ATEN_LU_SOLVE = "aten::linalg_lu_solve.default"
ATEN_SOLVE = "aten::_linalg_solve_ex.default"
ATEN_INV = "aten::linalg_inv_ex.default"
ATEN_DET = "aten::_linalg_det.default"
ATEN_SLOGDET = "aten::_linalg_slogdet.default"
ATEN_CHOLESKY = "aten::linalg_cholesky_ex.default"
ATEN_CHECK_ERRORS = "aten::_linalg_check_errors.default"
ATEN_EIGH = "aten::_linalg_eigh.default"
ATEN_SVD = "aten::_linalg_svd.default"
ATEN_QR = "aten::linalg_qr.default"
ATEN_LDL_FACTOR = "aten::linalg_ldl_factor_ex.default"


def _shim(op: str, parameters: str, kernel: Kernel) -> Shim:
    symbol = f"aoti_torch_mps_{op.split('::')[1].split('.')[0]}"
    return Shim(op=op, device="mps", symbol=symbol, recorded_names=(op,),
                c_prototype=f"AOTITorchError {symbol}({parameters})", kernel=kernel)


SHIMS = (
    _shim(LU_FACTOR, "AtenTensorHandle A, AtenTensorHandle* ret0, AtenTensorHandle* ret1, AtenTensorHandle* ret2",
          LU_FACTOR_KERNEL),
    _shim(LU_SOLVE, "AtenTensorHandle LU, AtenTensorHandle pivots, AtenTensorHandle B, int32_t adjoint, "
          "AtenTensorHandle* ret0", LU_SOLVE_KERNEL),
    _shim(CHOLESKY, "AtenTensorHandle A, AtenTensorHandle* ret0, AtenTensorHandle* ret1", CHOLESKY_KERNEL),
    _shim(EIGH, "AtenTensorHandle A, AtenTensorHandle* ret0, AtenTensorHandle* ret1, AtenTensorHandle* ret2",
          EIGH_KERNEL),
    _shim(SVD, "AtenTensorHandle A, AtenTensorHandle* ret0, AtenTensorHandle* ret1, AtenTensorHandle* ret2, "
          "AtenTensorHandle* ret3", SVD_KERNEL),
    _shim(QR, "AtenTensorHandle A, int32_t complete, AtenTensorHandle* ret0, AtenTensorHandle* ret1", QR_KERNEL),
    _shim(LDL_FACTOR, "AtenTensorHandle A, AtenTensorHandle* ret0, AtenTensorHandle* ret1, AtenTensorHandle* ret2",
          LDL_FACTOR_KERNEL),
    # Inductor passes an op that returns nothing one output argument all the same, nullptr (its None result).
    _shim(CHECK_ERRORS, "AtenTensorHandle info, const char* api_name, int32_t is_matrix, AtenTensorHandle* none",
          CHECK_ERRORS_KERNEL),
)


DECOMPOSITIONS = {
    ATEN_LU_FACTOR: (lu_factor_ex_decomposition, lu_factor_calls),
    ATEN_LU_SOLVE: (lu_solve_decomposition, lu_solve_calls),
    ATEN_SOLVE: (solve_ex_decomposition, solve_calls),
    ATEN_INV: (inv_ex_decomposition, inv_calls),
    ATEN_DET: (det_decomposition, square_matrix_calls),
    ATEN_SLOGDET: (slogdet_decomposition, square_matrix_calls),
    ATEN_CHOLESKY: (cholesky_ex_decomposition, cholesky_calls),
    ATEN_CHECK_ERRORS: (check_errors_decomposition, check_errors_calls),
    ATEN_EIGH: (eigh_decomposition, eigh_calls),
    "aten::linalg_eigh.default": (linalg_eigh_decomposition, lambda: eigh_calls().map(lambda c: c[:2])),
    ATEN_SVD: (svd_decomposition, svd_calls),
    "aten::linalg_svd.default": (linalg_svd_decomposition, lambda: svd_calls().map(lambda c: c[:2])),
    "aten::linalg_pinv.atol_rtol_tensor": (pinv_decomposition, lambda: pinv_calls()),
    ATEN_QR: (qr_decomposition, qr_calls),
    ATEN_LDL_FACTOR: (ldl_factor_ex_decomposition, lambda: ldl_calls()),
    "aten::svd.default": (torch_svd_decomposition,
                          lambda: svd_calls().map(lambda c: (c[0], not c[1] or c[0].shape[-2] == c[0].shape[-1],
                                                             c[2]))),
}
SINGULAR_VECTOR_REFERENCES: dict[str, Callable[..., Any]] = {
    ATEN_SVD: svd_with_canonical_signs,
    "aten::linalg_svd.default": linalg_svd_with_canonical_signs,
    "aten::svd.default": torch_svd_with_canonical_signs,
}

# The CompositeImplicitAutograd ops models call. ExecuTorch's AOTI partitioner keeps them whole, so they
# reach the backend as themselves and Inductor would expand them after shimkit's passes: each is expanded
# here, through ATen's own composite, with the decompositions above applied to what it expands into.
COMPOSITES = {
    "aten::linalg_det.default": square_matrix_calls,
    "aten::det.default": square_matrix_calls,
    "aten::logdet.default": square_matrix_calls,
    "aten::linalg_slogdet.default": square_matrix_calls,
    "aten::linalg_inv.default": without_keywords(inv_calls),
    "aten::inverse.default": without_keywords(inv_calls),
    "aten::linalg_solve.default": lambda: solve_calls().map(lambda c: OpCall(c.args, {"left": c.kwargs["left"]})),
    "aten::linalg_solve_ex.default": solve_calls,
    "aten::linalg_cholesky.default": lambda: cholesky_calls().map(lambda c: OpCall(c.args,
                                                                                  {"upper": c.kwargs["upper"]})),
    "aten::linalg_lu_factor.default": lambda: matrix_inputs(invertible=True).map(lambda A: (A,)),
    "aten::_lu_with_info.default": lambda: matrix_inputs(invertible=True).map(lambda A: (A, True, False)),
    "aten::lu_solve.default": lambda: lu_solve_calls().filter(lambda c: c.kwargs["left"] and not c.kwargs["adjoint"])
    .map(lambda c: (c.args[2], c.args[0], c.args[1])),
    "aten::linalg_tensorinv.default": tensorinv_calls,
    "aten::linalg_tensorsolve.default": tensorsolve_calls,
    "aten::linalg_eigvalsh.default": lambda: eigh_calls().map(lambda c: c[:2]),
    "aten::linalg_matrix_rank.atol_rtol_tensor": lambda: symmetric_inputs().map(
        lambda A: OpCall((A,), {"hermitian": True})) | matrix_inputs(square=False).map(lambda A: (A,)),
    "aten::linalg_matrix_rank.atol_rtol_float": lambda: matrix_inputs(square=False).map(
        lambda A: OpCall((A,), {"atol": None, "rtol": 0.1})),
    "aten::linalg_svdvals.default": lambda: matrix_inputs(square=False).map(lambda A: (A,)),
    "aten::qr.default": lambda: qr_calls().map(lambda c: (c[0], c[1] != "complete")),
    "aten::linalg_ldl_factor.default": lambda: ldl_calls().map(lambda c: OpCall(c.args, {"hermitian": False})),
    "aten::linalg_cond.default": lambda: matrix_inputs(invertible=True).map(lambda A: (A,)),
    "aten::linalg_matrix_norm.str_ord": lambda: matrix_inputs(square=False).map(lambda A: (A, "nuc")),
    "aten::pinverse.default": lambda: matrix_inputs(square=False).filter(full_rank).map(lambda A: (A,)),
}
STATIC_COMPOSITES = ("aten::linalg_tensorinv.default", "aten::linalg_tensorsolve.default")


@hookimpl
def shimkit_op_plugins():
    yield OpPlugin(
        name="linalg",
        ops=(*DECOMPOSITIONS, *COMPOSITES, LU_FACTOR, LU_SOLVE, CHOLESKY, EIGH, SVD, QR, LDL_FACTOR, CHECK_ERRORS),
        shims=SHIMS,
        decompositions={**{op: decomposition for op, (decomposition, _) in DECOMPOSITIONS.items()},
                        **{op: (static_sizes_only(op) if op in STATIC_COMPOSITES else through_aten_composite(op))
                           for op in COMPOSITES}},
        decomposition_devices=("mps",),
        # The edge verifier rejects these (not core ATen) before any backend sees them.
        pre_edge=("aten::linalg_pinv.atol_rtol_tensor", ATEN_QR, ATEN_LDL_FACTOR),
        references={**{op: resolve_op(op) for op in (*DECOMPOSITIONS, *COMPOSITES)},
                    ATEN_EIGH: eigh_with_canonical_signs, **SINGULAR_VECTOR_REFERENCES,
                    "aten::linalg_eigh.default": linalg_eigh_with_canonical_signs,
                    LU_FACTOR: torch.ops.shimkit.lu_factor.default, LU_SOLVE: torch.ops.shimkit.lu_solve.default,
                    CHOLESKY: torch.ops.shimkit.cholesky.default, EIGH: torch.ops.shimkit.eigh.default,
                    SVD: torch.ops.shimkit.svd.default, QR: torch.ops.shimkit.qr.default,
                    LDL_FACTOR: torch.ops.shimkit.ldl_factor.default},
        input_strategies={**{op: calls for op, (_, calls) in DECOMPOSITIONS.items()}, **COMPOSITES,
                          LU_FACTOR: lambda: matrix_inputs(square=False).map(lambda A: (A,)),
                          LU_SOLVE: lu_solve_kernel_calls,
                          CHOLESKY: lambda: positive_definite_inputs().map(lambda A: (A,)),
                          EIGH: lambda: symmetric_inputs().map(lambda A: (A,)),
                          SVD: lambda: tall_matrix_inputs().map(lambda A: (A,)),
                          QR: lambda: qr_calls().map(lambda c: (c[0], c[1] == "complete")),
                          LDL_FACTOR: lambda: ldl_calls().map(lambda c: c.args)},
        doc="det, slogdet, inv, solve, cholesky, lu_factor, lu_solve, eigh, svd and what builds on them on mps, "
            "through MSL LU, Cholesky, Bunch-Kaufman LDL, Householder QR, Jacobi eigenvalue and one-sided Jacobi SVD "
            "kernels (float32).",
    )

"""Dense linear algebra on mps: LU (with partial pivoting) and Cholesky factorizations, solves from them,
and ATen's info checks, shipped as MSL kernels behind c-shims for ops of shimkit's own.

``torch.linalg.{det, slogdet, inv, solve, cholesky, lu_factor}``, ``torch.logdet``, ``torch.lu``,
``torch.lu_solve`` and ``torch.linalg.tensor{inv,solve}`` reach Inductor as ``aten::_linalg_det``,
``_linalg_slogdet``, ``linalg_inv_ex``, ``_linalg_solve_ex``, ``linalg_cholesky_ex``,
``linalg_lu_factor_ex``, ``linalg_lu_solve`` and ``_linalg_check_errors``. None has a c-shim (torchgen
leaves them to the proxy executor, which the libtorch-free runtime lacks), so no plugin can provide them
under their own names. They are decomposed instead into three factorization/solve ops of the
``shimkit`` namespace, which do have c-shims (``aot_inductor.custom_ops_to_c_shims``, derived from the
shims' prototypes), plus the elementwise arithmetic Inductor writes Metal code for:

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
dispatches them on ExecuTorch's Metal runtime (on Linux, inside whole programs: ``shimkit audit --execute``). Only float32, like
PyTorch's own mps linear algebra. On the CPU the ops are ``torch.linalg`` itself, so each decomposition is
checked against ATen with the kernels' reference semantics, and each kernel against that reference.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

import torch
from torch import Tensor
from torch._prims_common import is_contiguous_or_false
from torch.fx.experimental.symbolic_shapes import statically_known_false, statically_known_true, sym_eq

from shimkit.registry import (DecompositionDeclined, Kernel, MslKernel, OpCall, OpPlugin, Shim, hookimpl, resolve_op,
                              through_aten_composite)

KERNEL_DIR = Path(__file__).resolve().parent / "kernel"

LU_FACTOR = "shimkit::lu_factor"
LU_SOLVE = "shimkit::lu_solve"
CHOLESKY = "shimkit::cholesky"
CHECK_ERRORS = "shimkit::linalg_check_errors"
EIGH = "shimkit::eigh"
SVD = "shimkit::svd"
QR = "shimkit::qr"
LDL_FACTOR = "shimkit::ldl_factor"

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


def _batch(A: Tensor) -> tuple[int, ...]:
    return tuple(A.shape[:-2])


@torch.library.custom_op(LU_FACTOR, mutates_args=())
def lu_factor(A: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    LU, pivots, info = torch.linalg.lu_factor_ex(A)
    return LU.contiguous(), pivots.contiguous(), info.contiguous()


@lu_factor.register_fake
def _lu_factor_fake(A: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    k = torch.sym_min(A.shape[-2], A.shape[-1])
    return (A.new_empty(A.shape), A.new_empty((*_batch(A), k), dtype=torch.int32),
            A.new_empty(_batch(A), dtype=torch.int32))


@torch.library.custom_op(LU_SOLVE, mutates_args=())
def lu_solve(LU: Tensor, pivots: Tensor, B: Tensor, adjoint: bool) -> Tensor:
    return torch.linalg.lu_solve(LU, pivots, B, adjoint=adjoint).contiguous()


@lu_solve.register_fake
def _lu_solve_fake(LU: Tensor, pivots: Tensor, B: Tensor, adjoint: bool) -> Tensor:
    return B.new_empty(B.shape)


@torch.library.custom_op(CHOLESKY, mutates_args=())
def cholesky(A: Tensor) -> tuple[Tensor, Tensor]:
    L, info = torch.linalg.cholesky_ex(A)
    return L.contiguous(), info.contiguous()


@cholesky.register_fake
def _cholesky_fake(A: Tensor) -> tuple[Tensor, Tensor]:
    return A.new_empty(A.shape), A.new_empty(_batch(A), dtype=torch.int32)


def canonical_signs(vectors: Tensor) -> Tensor:
    """``vectors`` with each column negated where its entry of largest magnitude (the first such) is negative."""
    if vectors.shape[-2] == 0:
        return vectors
    largest = vectors.abs().argmax(-2, keepdim=True)
    return vectors * torch.where(vectors.gather(-2, largest) < 0, -1.0, 1.0).to(vectors.dtype)


@torch.library.custom_op(EIGH, mutates_args=())
def eigh(A: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    finite = A.tril().isfinite().flatten(-2).all(-1)
    values, vectors = torch.linalg.eigh(torch.where(finite[..., None, None], A, 0.0), UPLO="L")
    nan = torch.tensor(float("nan"), dtype=A.dtype)
    info = torch.where(finite, 0, A.shape[-1]).to(torch.int32)
    return (torch.where(finite[..., None], values, nan).contiguous(),
            torch.where(finite[..., None, None], canonical_signs(vectors), nan).contiguous(), info.contiguous())


@eigh.register_fake
def _eigh_fake(A: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    return A.new_empty(A.shape[:-1]), A.new_empty(A.shape), A.new_empty(_batch(A), dtype=torch.int32)


def canonical_svd_signs(U: Tensor, S: Tensor, Vh: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """Each pair of singular vectors signed so that the column of ``U`` has its entry of largest magnitude
    (the first such) positive; ``U`` has at least as many columns as ``Vh`` has rows."""
    k = Vh.shape[-2]
    if U.shape[-2] == 0 or k == 0:
        return U, S, Vh
    largest = U[..., :k].abs().argmax(-2, keepdim=True)
    signs = torch.where(U[..., :k].gather(-2, largest) < 0, -1.0, 1.0).to(U.dtype)  # [..., 1, k]
    return torch.cat([U[..., :k] * signs, U[..., k:]], -1), S, Vh * signs.mT


@torch.library.custom_op(SVD, mutates_args=())
def svd(A: Tensor) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    finite = A.isfinite().flatten(-2).all(-1)
    U, S, Vh = torch.linalg.svd(torch.where(finite[..., None, None], A, 0.0), full_matrices=False)
    U, S, Vh = canonical_svd_signs(U, S, Vh)
    info = torch.where(finite, 0, A.shape[-1]).to(torch.int32)
    nan = torch.tensor(float("nan"), dtype=A.dtype)
    return (torch.where(finite[..., None, None], U, nan).contiguous(),
            torch.where(finite[..., None], S, nan).contiguous(),
            torch.where(finite[..., None, None], Vh, nan).contiguous(), info.contiguous())


@svd.register_fake
def _svd_fake(A: Tensor) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    n = A.shape[-1]
    return (A.new_empty(A.shape), A.new_empty((*_batch(A), n)), A.new_empty((*_batch(A), n, n)),
            A.new_empty(_batch(A), dtype=torch.int32))


@torch.library.custom_op(QR, mutates_args=())
def qr(A: Tensor, complete: bool) -> tuple[Tensor, Tensor]:
    Q, R = torch.linalg.qr(A, mode="complete" if complete else "reduced")
    return Q.contiguous(), R.contiguous()


@qr.register_fake
def _qr_fake(A: Tensor, complete: bool) -> tuple[Tensor, Tensor]:
    m, n = A.shape[-2], A.shape[-1]
    columns = m if complete else torch.sym_min(m, n)
    return A.new_empty((*_batch(A), m, columns)), A.new_empty((*_batch(A), columns, n))


@torch.library.custom_op(LDL_FACTOR, mutates_args=())
def ldl_factor(A: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    LD, pivots, info = torch.linalg.ldl_factor_ex(A)
    return LD.contiguous(), pivots.contiguous(), info.contiguous()


@ldl_factor.register_fake
def _ldl_factor_fake(A: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    return (A.new_empty(A.shape), A.new_empty(A.shape[:-1], dtype=torch.int32),
            A.new_empty(_batch(A), dtype=torch.int32))


@torch.library.custom_op(CHECK_ERRORS, mutates_args=())
def linalg_check_errors(info: Tensor, api_name: str, is_matrix: bool) -> None:
    torch._linalg_check_errors(info, api_name, is_matrix=is_matrix)


@linalg_check_errors.register_fake
def _linalg_check_errors_fake(info: Tensor, api_name: str, is_matrix: bool) -> None:
    return None


# Its only effect is the error: dead-code elimination must keep it although nothing uses its result.
torch.fx.node.has_side_effect(torch.ops.shimkit.linalg_check_errors.default)


def _known_equal(a, b) -> bool:
    """``a == b`` for sizes, without a guard: under symbolic sizes the exported program has already
    unified (or told apart) the sizes ATen's own shape check compared, so the answer is known or the call
    is declined."""
    if statically_known_true(sym_eq(tuple(a), tuple(b))):
        return True
    if statically_known_false(sym_eq(tuple(a), tuple(b))):
        return False
    raise DecompositionDeclined(f"cannot tell without a guard whether sizes {tuple(a)} and {tuple(b)} are equal")


def _permutation_sign(pivots: Tensor) -> Tensor:
    """(-1) ** (the number of rows ``pivots`` swapped), as ATen's ``lu_det_P``."""
    k = pivots.shape[-1]
    swaps = (pivots != torch.arange(1, k + 1, dtype=pivots.dtype, device=pivots.device)).sum(-1)
    return 1 - 2 * (swaps % 2)


# Every tensor handed to a shimkit op is made contiguous: the c-shims take row-major buffers and refuse
# anything else (Inductor passes a custom op's inputs with the strides the trace gave them).
def lu_factor_ex_decomposition(A, *, pivot=True, check_errors=False):
    if not pivot:
        raise DecompositionDeclined("only LU with partial pivoting (pivot=True) has a Metal kernel")
    LU, pivots, info = torch.ops.shimkit.lu_factor(A.contiguous())
    if check_errors:
        torch.ops.shimkit.linalg_check_errors(info, "torch.linalg.lu_factor_ex", A.dim() == 2)
    return LU, pivots, info


def _broadcast_batches(*tensors_and_cores):
    batch = torch.broadcast_shapes(*(t.shape[:-core] for t, core in tensors_and_cores))
    return [t.expand(*batch, *t.shape[t.dim() - core:]).contiguous() for t, core in tensors_and_cores]


def lu_solve_decomposition(LU, pivots, B, *, left=True, adjoint=False):
    LU, pivots, B = _broadcast_batches((LU, 2), (pivots, 1), (B, 2))
    if left:
        return torch.ops.shimkit.lu_solve(LU, pivots, B, adjoint)
    # X A = B is A^T X^T = B^T: ATen's own reduction of the right-hand case.
    return torch.ops.shimkit.lu_solve(LU, pivots, B.mT.contiguous(), not adjoint).mT


def solve_ex_decomposition(A, B, *, left=True, check_errors=False):
    LU, pivots, info = torch.ops.shimkit.lu_factor(A.contiguous())
    if check_errors:
        torch.ops.shimkit.linalg_check_errors(info, "torch.linalg.solve_ex", A.dim() == 2)
    vector_case = B.dim() == 1 or (A.dim() - 1 == B.dim() and _known_equal(B.shape, A.shape[:-1]))
    B_ = B.unsqueeze(-1) if vector_case else B
    result = lu_solve_decomposition(LU, pivots, B_, left=left)
    return (result.squeeze(-1) if vector_case else result), LU, pivots, info


def inv_ex_decomposition(A, *, check_errors=False):
    eye = torch.eye(A.shape[-1], dtype=A.dtype, device=A.device).expand(A.shape)
    inverse, _, _, info = solve_ex_decomposition(A, eye)
    if check_errors:
        torch.ops.shimkit.linalg_check_errors(info, "torch.linalg.inv_ex", A.dim() == 2)
    return inverse, info


def _factor_for_determinant(A: Tensor) -> tuple[Tensor, Tensor]:
    # det(A^T) = det(A): ATen factorizes A^T when A is contiguous (saving a copy into column-major
    # order), so the factors it returns, and their rounding, are A^T's. Asked without a guard: a layout
    # that symbolic sizes leave unknown counts as not contiguous (the factors are then A's, equally exact).
    LU, pivots, _ = torch.ops.shimkit.lu_factor((A.mT if is_contiguous_or_false(A) else A).contiguous())
    return LU, pivots


def det_decomposition(A):
    LU, pivots = _factor_for_determinant(A)
    det = LU.diagonal(0, -2, -1).prod(-1) * _permutation_sign(pivots)
    return det, LU, pivots


def slogdet_decomposition(A):
    LU, pivots = _factor_for_determinant(A)
    diagonal = LU.diagonal(0, -2, -1)
    sign = diagonal.sgn().prod(-1) * _permutation_sign(pivots)
    return sign, diagonal.abs().log().sum(-1), LU, pivots


def eigh_decomposition(A, UPLO="L", compute_v=True):
    if UPLO not in ("L", "U"):
        raise RuntimeError(f"Expected UPLO argument to be 'L' or 'U', but got {UPLO}")
    # The upper triangle of A is the lower triangle of A^T: the same symmetric matrix.
    values, vectors, info = torch.ops.shimkit.eigh((A if UPLO == "L" else A.mT).contiguous())
    torch.ops.shimkit.linalg_check_errors(info, "linalg.eigh", A.dim() == 2)
    return values, (vectors if compute_v else A.new_empty(0))


def eigh_with_canonical_signs(A, UPLO="L", compute_v=True):
    """ATen's ``_linalg_eigh`` with its eigenvectors brought to shimkit::eigh's canonical sign."""
    values, vectors = torch.ops.aten._linalg_eigh(A, UPLO, compute_v)
    return values, (canonical_signs(vectors) if compute_v else vectors)


def linalg_eigh_decomposition(A, UPLO="L"):
    # Directly, not through ATen's composite: that would give eager LAPACK's signs wherever it runs eagerly.
    return eigh_decomposition(A, UPLO, True)


def linalg_eigh_with_canonical_signs(A, UPLO="L"):
    values, vectors = torch.linalg.eigh(A, UPLO)
    return values, canonical_signs(vectors)


def svd_decomposition(A, full_matrices=False, compute_uv=True, *, driver=None):
    m, n = A.shape[-2], A.shape[-1]
    if compute_uv and full_matrices and not statically_known_true(sym_eq(m, n)):
        raise DecompositionDeclined("full_matrices=True on a matrix that may not be square: the completed basis "
                                    "is not unique, and only the thin SVD has a Metal kernel")
    if statically_known_true(m >= n):
        tall = True
    elif statically_known_true(m < n):
        tall = False
    else:
        raise DecompositionDeclined("cannot tell without a guard whether the matrix is tall or wide")
    U, S, Vh, info = torch.ops.shimkit.svd((A if tall else A.mT).contiguous())
    torch.ops.shimkit.linalg_check_errors(info, "linalg.svd", A.dim() == 2)
    if not compute_uv:
        return A.new_empty(0), S, A.new_empty(0)
    if not tall:  # A^T = U' S Vh' gives A = Vh'^T S U'^T
        U, Vh = Vh.mT, U.mT
    return canonical_svd_signs(U, S, Vh)


def svd_with_canonical_signs(A, full_matrices=False, compute_uv=True, *, driver=None):
    """ATen's ``_linalg_svd`` with its singular vectors brought to shimkit::svd's canonical sign."""
    U, S, Vh = torch.ops.aten._linalg_svd(A, full_matrices, compute_uv, driver=driver)
    return canonical_svd_signs(U, S, Vh) if compute_uv else (U, S, Vh)


def linalg_svd_decomposition(A, full_matrices=True, *, driver=None):
    # Directly, not through ATen's composite: that would give eager LAPACK's signs wherever it runs eagerly.
    return svd_decomposition(A, full_matrices, True, driver=driver)


def linalg_svd_with_canonical_signs(A, full_matrices=True, *, driver=None):
    return svd_with_canonical_signs(A, full_matrices, True, driver=driver)


def torch_svd_decomposition(A, some=True, compute_uv=True):
    """``torch.svd``: V rather than Vh, and zero-filled square U and V without ``compute_uv``."""
    if not compute_uv:
        S = svd_decomposition(A, False, False)[1]
        m, n = A.shape[-2], A.shape[-1]
        return A.new_zeros((*A.shape[:-2], m, m)), S, A.new_zeros((*A.shape[:-2], n, n))
    U, S, Vh = svd_decomposition(A, not some, True)
    return U, S, Vh.mT


def pinv_decomposition(A, atol=None, rtol=None, hermitian=False):
    """ATen's ``linalg_pinv`` (LinearAlgebra.cpp), through shimkit::svd, or shimkit::eigh when ``hermitian``.
    ATen computes the tolerances in float64, which Metal lacks: here they are float32, so a singular value
    within float32 rounding of the cut-off may fall on the other side."""
    m, n = A.shape[-2], A.shape[-1]
    default_rtol = torch.finfo(A.dtype).eps * torch.sym_max(m, n)
    atol_ = torch.zeros((), dtype=A.dtype, device=A.device) if atol is None else atol.to(A.dtype)
    if rtol is not None:
        rtol_ = rtol.to(A.dtype)
    elif atol is not None:
        rtol_ = torch.where(atol > 0, 0.0, default_rtol).to(A.dtype)
    else:
        rtol_ = torch.full((), default_rtol, dtype=A.dtype, device=A.device)
    if hermitian:
        if not statically_known_true(sym_eq(m, n)):
            raise DecompositionDeclined("linalg_pinv(hermitian=True) of a matrix not known to be square")
        S, U = eigh_decomposition(A)
        S_abs = S.abs()
        # The largest |eigenvalue|, 0 for an empty matrix (0 is below every |eigenvalue|).
        largest = torch.cat([S_abs, S_abs.new_zeros((*S_abs.shape[:-1], 1))], -1).amax(-1, keepdim=True)
        tol = torch.maximum(atol_.unsqueeze(-1), rtol_.unsqueeze(-1) * largest)
        inverse = torch.where(S_abs > tol, S.reciprocal(), 0.0)
        return (U * inverse.unsqueeze(-2)) @ U.mT
    U, S, Vh = svd_decomposition(A, False)
    tol = torch.maximum(atol_.unsqueeze(-1), rtol_.unsqueeze(-1) * S[..., :1])
    inverse = torch.where(S > tol, S.reciprocal(), 0.0)
    return Vh.mT @ (inverse.unsqueeze(-1) * U.mT)


def torch_svd_with_canonical_signs(A, some=True, compute_uv=True):
    U, S, V = torch.svd(A, some=some, compute_uv=compute_uv)
    if not compute_uv:
        return U, S, V
    U, S, Vh = canonical_svd_signs(U, S, V.mT)
    return U, S, Vh.mT


def qr_decomposition(A, mode="reduced"):
    if mode not in ("reduced", "complete", "r"):
        raise RuntimeError(f"qr received unrecognized mode '{mode}' but expected one of 'reduced' (default), 'r', "
                           f"or 'complete'")
    Q, R = torch.ops.shimkit.qr(A.contiguous(), mode == "complete")
    return (A.new_empty(0) if mode == "r" else Q), R


def ldl_factor_ex_decomposition(A, *, hermitian=False, check_errors=False):
    # For real matrices LAPACK's hermitian and symmetric factorizations are the same algorithm.
    LD, pivots, info = torch.ops.shimkit.ldl_factor(A.contiguous())
    if check_errors:
        torch.ops.shimkit.linalg_check_errors(info, "torch.linalg.ldl_factor_ex", A.dim() == 2)
    return LD, pivots, info


def cholesky_ex_decomposition(A, *, upper=False, check_errors=False):
    # The upper factor reads A's upper triangle: it is the lower factor of A^T, transposed.
    L, info = torch.ops.shimkit.cholesky((A.mT if upper else A).contiguous())
    if check_errors:
        torch.ops.shimkit.linalg_check_errors(info, "torch.linalg.cholesky_ex", A.dim() == 2)
    return (L.mT if upper else L), info


def check_errors_decomposition(info, api_name, *, is_matrix):
    torch.ops.shimkit.linalg_check_errors(info, api_name, is_matrix)


def _float32_matrices(argument: str, A: Tensor, op: str) -> Tensor:
    if A.dim() < 2:
        raise ValueError(f"{op}: {argument} must have 2 or more dimensions (a batch of matrices), got shape "
                         f"{tuple(A.shape)}")
    if A.dtype != torch.float32:
        raise TypeError(f"{op}: {argument} must be float32 (the only dtype of the Metal kernels), got {A.dtype}")
    return A.contiguous()


def launch_lu_factor(library, A: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """``shimkit::lu_factor`` through ``library``'s ``lu_factor_float``, as ``linalg_shim_mps.mm`` dispatches
    it: one thread per matrix of a contiguous ``A``."""
    A = _float32_matrices("A", A, LU_FACTOR)
    m, n = A.shape[-2:]
    LU, pivots, info = _lu_factor_fake(A)
    info.zero_()
    if LU.numel():
        library.lu_factor_float(LU, pivots, info, A, m, n, threads=info.numel())
    return LU, pivots, info


def launch_lu_solve(library, LU: Tensor, pivots: Tensor, B: Tensor, adjoint: bool) -> Tensor:
    """``shimkit::lu_solve`` through ``library``'s ``lu_solve_float``, as ``linalg_shim_mps.mm`` dispatches
    it: one thread per column of every right-hand side."""
    LU = _float32_matrices("LU", LU, LU_SOLVE)
    B = _float32_matrices("B", B, LU_SOLVE)
    n = LU.shape[-1]
    if LU.shape[-2] != n or pivots.shape != LU.shape[:-1] or B.shape[:-2] != LU.shape[:-2] or B.shape[-2] != n:
        raise ValueError(f"{LU_SOLVE}: expected LU [*, n, n], pivots [*, n] and B [*, n, k] with one batch, got "
                         f"{tuple(LU.shape)}, {tuple(pivots.shape)} and {tuple(B.shape)}")
    if pivots.dtype != torch.int32:  # as the c-shim: shimkit::lu_factor's pivots, never converted
        raise TypeError(f"{LU_SOLVE}: pivots must be int32 (as shimkit::lu_factor returns them), got {pivots.dtype}")
    X = torch.empty_like(B)
    if X.numel():
        library.lu_solve_float(X, LU, pivots.contiguous(), B, n, B.shape[-1], bool(adjoint),
                               threads=X.numel() // n)
    return X


def launch_cholesky(library, A: Tensor) -> tuple[Tensor, Tensor]:
    """``shimkit::cholesky`` through ``library``'s ``cholesky_float``, as ``linalg_shim_mps.mm`` dispatches
    it: one thread per matrix of a contiguous, square ``A``."""
    A = _float32_matrices("A", A, CHOLESKY)
    if A.shape[-2] != A.shape[-1]:
        raise ValueError(f"{CHOLESKY}: A must be batches of square matrices, got shape {tuple(A.shape)}")
    L, info = _cholesky_fake(A)
    info.zero_()
    if L.numel():
        library.cholesky_float(L, info, A, A.shape[-1], threads=info.numel())
    return L, info


def launch_eigh(library, A: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """``shimkit::eigh`` through ``library``'s ``eigh_float``, as ``linalg_shim_mps.mm`` dispatches it: one
    thread per matrix of a contiguous, square ``A``, with a scratch copy of each matrix."""
    A = _float32_matrices("A", A, EIGH)
    if A.shape[-2] != A.shape[-1]:
        raise ValueError(f"{EIGH}: A must be batches of square matrices, got shape {tuple(A.shape)}")
    values, vectors, info = _eigh_fake(A)
    if vectors.numel():
        library.eigh_float(values, vectors, info, torch.empty_like(A), A, A.shape[-1], threads=info.numel())
    else:
        info.zero_()
    return values, vectors, info


def launch_svd(library, A: Tensor) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """``shimkit::svd`` through ``library``'s ``svd_float``, as ``linalg_shim_mps.mm`` dispatches it: one thread
    per matrix of a contiguous, tall (``m >= n``) ``A``."""
    A = _float32_matrices("A", A, SVD)
    m, n = A.shape[-2:]
    if m < n:
        raise ValueError(f"{SVD}: A must be tall (m >= n; pass a wide matrix transposed), got shape "
                         f"{tuple(A.shape)}")
    U, S, Vh, info = _svd_fake(A)
    if U.numel() and n:
        library.svd_float(U, S, Vh, info, A, m, n, threads=info.numel())
    else:
        info.zero_()
        S.zero_()
        Vh.copy_(torch.eye(n).expand_as(Vh))
    return U, S, Vh, info


def launch_qr(library, A: Tensor, complete: bool) -> tuple[Tensor, Tensor]:
    """``shimkit::qr`` through ``library``'s ``qr_float``, as ``linalg_shim_mps.mm`` dispatches it: one thread
    per matrix of a contiguous ``A``, with scratch for the reflectors and their scales."""
    A = _float32_matrices("A", A, QR)
    m, n = A.shape[-2:]
    Q, R = _qr_fake(A, complete)
    matrices = A[..., 0, 0].numel() if m and n else 0
    if matrices:
        library.qr_float(Q, R, torch.empty_like(A), A.new_empty((*A.shape[:-2], min(m, n))), A, m, n, Q.shape[-1],
                         threads=matrices)
    else:  # no entries to reflect: Q is the identity's first columns, R is empty or zero
        Q.copy_(torch.eye(m, Q.shape[-1]).expand_as(Q))
        R.zero_()
    return Q, R


def launch_ldl_factor(library, A: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """``shimkit::ldl_factor`` through ``library``'s ``ldl_factor_float``, as ``linalg_shim_mps.mm`` dispatches
    it: one thread per matrix of a contiguous, square ``A``."""
    A = _float32_matrices("A", A, LDL_FACTOR)
    if A.shape[-2] != A.shape[-1]:
        raise ValueError(f"{LDL_FACTOR}: A must be batches of square matrices, got shape {tuple(A.shape)}")
    LD, pivots, info = _ldl_factor_fake(A)
    info.zero_()
    if LD.numel():
        library.ldl_factor_float(LD, pivots, info, A, A.shape[-1], threads=info.numel())
    return LD, pivots, info


def _kernel(name: str, launch) -> Kernel:
    return Kernel(name=name, directory=str(KERNEL_DIR), runtime_sources=(f"{name}.metal", "linalg_shim_mps.mm"),
                  msl=MslKernel(source=f"{name}.metal", function=name, dtypes=("float",), launch=launch),
                  uses_sdk=False)


LU_FACTOR_KERNEL = _kernel("lu_factor", launch_lu_factor)
LU_SOLVE_KERNEL = _kernel("lu_solve", launch_lu_solve)
CHOLESKY_KERNEL = _kernel("cholesky", launch_cholesky)
EIGH_KERNEL = _kernel("eigh", launch_eigh)
SVD_KERNEL = _kernel("svd", launch_svd)
QR_KERNEL = _kernel("qr", launch_qr)
LDL_FACTOR_KERNEL = _kernel("ldl_factor", launch_ldl_factor)
# The info check reads `info` on the host and needs no MSL of its own.
CHECK_ERRORS_KERNEL = Kernel(name="linalg_check_errors", directory=str(KERNEL_DIR),
                             runtime_sources=("linalg_shim_mps.mm",), uses_sdk=False)


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


def _random_matrices(batch, m, n, seed, *, singular_column=None):
    """Standard normal ``[*batch, m, n]`` float32 matrices from ``seed``: distinct magnitudes, so the pivot
    order is the one any correct elimination finds; ``singular_column`` zeroes one column (an exact zero
    pivot for every algorithm)."""
    generator = torch.Generator().manual_seed(seed)
    A = torch.randn(*batch, m, n, generator=generator)
    if singular_column is not None and n:
        A[..., singular_column % n] = 0
    return A


def _well_conditioned(A: Tensor) -> bool:
    return A.shape[-1] == 0 or bool((torch.linalg.cond(A.double()) < 200).all())


def _shapes(min_side=0, max_side=6, square=True):
    from hypothesis import strategies as st

    batches = st.sampled_from([(), (1,), (3,), (2, 2), (0,)])
    if square:
        return st.tuples(batches, st.integers(min_side, max_side)).map(lambda s: (s[0], s[1], s[1]))
    return st.tuples(batches, st.integers(min_side, max_side), st.integers(min_side, max_side))


def matrix_inputs(*, square=True, invertible=False, singular=True):
    """``[*batch, m, n]`` float32 matrices, batches empty to two dims, sides 0 to 6; ``invertible`` keeps
    them well-conditioned, ``singular`` mixes in some with a zero column."""
    from hypothesis import strategies as st

    def build(shape_seed_zero):
        (batch, m, n), seed, zero = shape_seed_zero
        return _random_matrices(batch, m, n, seed, singular_column=zero)

    zero_columns = st.none() | st.integers(0, 5) if singular and not invertible else st.none()
    matrices = st.tuples(_shapes(square=square), st.integers(0, 2**32 - 1), zero_columns).map(build)
    return matrices.filter(_well_conditioned) if invertible else matrices


def symmetric_inputs():
    """Random matrices whose lower (and upper) triangle gives a symmetric matrix with well-separated
    eigenvalues (gaps above 1e-2 of the spectrum's scale): there each eigenvector is determined up to sign,
    and float32 rounding moves it by far less than the check's tolerance. The other triangle is garbage
    on purpose: it must not be read."""
    from hypothesis import strategies as st

    def build(shape_seed):
        (batch, n, _), seed = shape_seed
        A = _random_matrices(batch, n, n, seed)
        return A + A.mT

    def separated(A):
        if A.shape[-1] < 2 or not A.numel():
            return True
        values = torch.linalg.eigvalsh(A.double())
        scale = values.abs().amax(-1, keepdim=True).clamp(min=1)
        return bool((values.diff(dim=-1) / scale > 1e-2).all())

    def lower_only(A):
        return A.tril() + torch.triu(torch.full_like(A, 7.0), 1)

    return st.tuples(_shapes(), st.integers(0, 2**32 - 1)).map(build).filter(separated).map(lower_only)


def eigh_calls():
    from hypothesis import strategies as st

    return st.builds(lambda A, upper, compute_v: (A.mT if upper else A, "U" if upper else "L", compute_v),
                     symmetric_inputs(), st.booleans(), st.booleans())


def _full_rank(A: Tensor) -> bool:
    """Singular values apart from 0 and from each other: each pair of singular vectors then determined up
    to sign, and moved by float32 rounding far less than the check's tolerance."""
    if min(A.shape[-2:]) == 0:
        return True
    values = torch.linalg.svdvals(A.double())
    scale = values.amax(-1, keepdim=True).clamp(min=1)
    return bool((values / scale > 1e-2).all() and (-values.diff(dim=-1) / scale > 1e-2).all())


def svd_calls():
    from hypothesis import strategies as st

    return st.builds(lambda A, full, compute_uv: (A, full and A.shape[-2] == A.shape[-1], compute_uv),
                     matrix_inputs(square=False, singular=False).filter(_full_rank), st.booleans(), st.booleans())


def pinv_calls():
    from hypothesis import strategies as st

    general = matrix_inputs(square=False).map(lambda A: OpCall((A,), {}))
    hermitian = symmetric_inputs().map(lambda A: OpCall((A.tril() + A.tril(-1).mT,), {"hermitian": True}))
    with_tolerances = st.builds(lambda A, atol, rtol: OpCall((A,), {"atol": atol, "rtol": rtol}),
                                matrix_inputs(square=False), st.none() | st.sampled_from([0.0, 0.5]).map(torch.tensor),
                                st.none() | st.sampled_from([0.0, 0.1]).map(torch.tensor))
    return general | hermitian | with_tolerances


def qr_calls():
    from hypothesis import strategies as st

    return st.builds(lambda A, mode: (A, mode), matrix_inputs(square=False), st.sampled_from(["reduced", "complete",
                                                                                             "r"]))


def ldl_calls():
    """Symmetric matrices (lower triangle read), some indefinite enough for 2x2 pivots, some singular."""
    from hypothesis import strategies as st

    def build(shape_seed_zero):
        (batch, n, _), seed, zero = shape_seed_zero
        A = _random_matrices(batch, n, n, seed, singular_column=zero)
        return A + A.mT

    matrices = st.tuples(_shapes(), st.integers(0, 2**32 - 1), st.none() | st.integers(0, 5)).map(build)
    return st.builds(lambda A, hermitian, check: OpCall((A,), {"hermitian": hermitian, "check_errors": check}),
                     matrices, st.booleans(), st.just(False))


def tall_matrix_inputs():
    return matrix_inputs(square=False, singular=False).map(lambda A: A if A.shape[-2] >= A.shape[-1] else A.mT) \
        .filter(_full_rank)


def positive_definite_inputs():
    """``A A^T + n I`` for random ``A``: symmetric positive-definite, the lower and upper triangles equal."""
    from hypothesis import strategies as st

    def build(shape_seed):
        (batch, n, _), seed = shape_seed
        A = _random_matrices(batch, n, n, seed)
        return A @ A.mT + n * torch.eye(n)

    return st.tuples(_shapes(), st.integers(0, 2**32 - 1)).map(build)


def _factored(invertible_inputs):
    """``(LU, pivots)`` of the given matrices, contiguous as the kernels take them."""
    def factor(A):
        LU, pivots = torch.linalg.lu_factor(A)
        return LU.contiguous(), pivots.contiguous()
    return invertible_inputs.map(lambda A: (A, *factor(A)))


def _right_hand_sides(A: Tensor, seed: int, k: int, *, batch_drop: int = 0, vector: bool = False) -> Tensor:
    generator = torch.Generator().manual_seed(seed)
    batch = A.shape[batch_drop:-2]
    return torch.randn(*batch, A.shape[-1], *(() if vector else (k,)), generator=generator)


def lu_factor_calls():
    from hypothesis import strategies as st

    return st.builds(lambda A, transpose: OpCall((A.mT if transpose else A,), {"pivot": True, "check_errors": False}),
                     matrix_inputs(square=False), st.booleans())


def lu_solve_kernel_calls():
    from hypothesis import strategies as st

    return st.builds(lambda factored, seed, k, adjoint: (factored[1], factored[2],
                                                         _right_hand_sides(factored[0], seed, k), adjoint),
                     _factored(matrix_inputs(invertible=True)), st.integers(0, 2**32 - 1), st.integers(0, 3),
                     st.booleans())


def lu_solve_calls():
    """``linalg_lu_solve`` calls: B's batch broadcast against LU's (one dim fewer), left and right solves,
    plain and adjoint."""
    from hypothesis import strategies as st

    def call(factored, seed, k, left, adjoint, drop):
        A, LU, pivots = factored
        B = _right_hand_sides(A, seed, k, batch_drop=min(drop, A.dim() - 2))
        return OpCall((LU, pivots, B if left else B.mT.contiguous()), {"left": left, "adjoint": adjoint})

    return st.builds(call, _factored(matrix_inputs(invertible=True)), st.integers(0, 2**32 - 1),
                     st.integers(0, 3), st.booleans(), st.booleans(), st.integers(0, 1))


def solve_calls():
    from hypothesis import strategies as st

    def call(A, seed, k, vector, left, check_errors):
        B = _right_hand_sides(A, seed, k, vector=vector and left)  # ATen has vectors on the left only
        return OpCall((A, B if left else B.mT.contiguous()), {"left": left, "check_errors": check_errors})

    return st.builds(call, matrix_inputs(invertible=True), st.integers(0, 2**32 - 1), st.integers(0, 3),
                     st.booleans(), st.booleans(), st.booleans())


def square_matrix_calls():
    from hypothesis import strategies as st

    return st.builds(lambda A, transpose: (A.mT if transpose else A,), matrix_inputs(), st.booleans())


def inv_calls():
    from hypothesis import strategies as st

    return st.builds(lambda A, check_errors: OpCall((A,), {"check_errors": check_errors}),
                     matrix_inputs(invertible=True), st.booleans())


def cholesky_calls():
    from hypothesis import strategies as st

    return st.builds(lambda A, upper, check_errors: OpCall((A,), {"upper": upper, "check_errors": check_errors}),
                     positive_definite_inputs(), st.booleans(), st.booleans())


def check_errors_calls():
    """Calls that pass: every ``info`` zero (the raising ones are checked by name in the tests)."""
    from hypothesis import strategies as st

    return st.builds(lambda batch, api_name: OpCall((torch.zeros(batch, dtype=torch.int32), api_name),
                                                    {"is_matrix": batch == ()}),
                     st.sampled_from([(), (3,), (2, 2)]), st.sampled_from(["torch.linalg.inv", "linalg.solve"]))


def _invertible_square(n: int):
    from hypothesis import strategies as st

    return st.integers(0, 2**32 - 1).map(lambda seed: _random_matrices((), n, n, seed)).filter(_well_conditioned)


def tensorinv_calls():
    """``tensorinv(A, ind)``: an invertible ``n x n`` matrix reshaped so that ``A.shape[:ind]`` and
    ``A.shape[ind:]`` both hold ``n`` elements."""
    from hypothesis import strategies as st

    shapes = st.sampled_from([((2, 2, 4), 2), ((4, 2, 2), 1), ((2, 3, 6), 2), ((1, 1), 1)])
    return shapes.flatmap(lambda shape_ind: _invertible_square(torch.Size(shape_ind[0][shape_ind[1]:]).numel())
                          .map(lambda A: OpCall((A.reshape(shape_ind[0]),), {"ind": shape_ind[1]})))


def tensorsolve_calls():
    """``tensorsolve(A, B)``: ``A`` of shape ``B.shape + X.shape`` from an invertible square matrix."""
    from hypothesis import strategies as st

    def call(A, b_shape, x_shape, seed):
        return (A.reshape(*b_shape, *x_shape), _random_matrices((), A.shape[0], 1, seed).reshape(b_shape))

    shapes = st.sampled_from([((2, 2), (4,)), ((4,), (2, 2)), ((3,), (3,)), ((2, 3), (3, 2))])
    return shapes.flatmap(lambda bx: st.builds(call, _invertible_square(torch.Size(bx[0]).numel()), st.just(bx[0]),
                                               st.just(bx[1]), st.integers(0, 2**32 - 1)))


def _static_sizes_only(op: str):
    """ATen's composite for ``op``, expanded only where every size is static: ``tensorinv`` and
    ``tensorsolve`` compare products of sizes to choose their reshapes, which under symbolic sizes would be
    a guard the spliced program never checks."""
    composite = through_aten_composite(op)

    def decomposition(*args, **kwargs):
        tensors = [a for a in (*args, *kwargs.values()) if isinstance(a, Tensor)]
        if any(isinstance(size, torch.SymInt) for t in tensors for size in t.shape):
            raise DecompositionDeclined(f"{op}'s ATen composite compares sizes: it is expanded only at static "
                                        f"sizes")
        return composite(*args, **kwargs)

    decomposition.__qualname__ = f"static-size {composite.__qualname__}"
    return decomposition


def _positional(calls, keys=()):
    return lambda: calls().map(lambda call: (*call.args, *(call.kwargs[k] for k in keys)))


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
    "aten::linalg_inv.default": _positional(inv_calls),
    "aten::inverse.default": _positional(inv_calls),
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
    "aten::pinverse.default": lambda: matrix_inputs(square=False).filter(_full_rank).map(lambda A: (A,)),
}
STATIC_COMPOSITES = ("aten::linalg_tensorinv.default", "aten::linalg_tensorsolve.default")


@hookimpl
def shimkit_op_plugins():
    yield OpPlugin(
        name="linalg",
        ops=(*DECOMPOSITIONS, *COMPOSITES, LU_FACTOR, LU_SOLVE, CHOLESKY, EIGH, SVD, QR, LDL_FACTOR, CHECK_ERRORS),
        shims=SHIMS,
        decompositions={**{op: decomposition for op, (decomposition, _) in DECOMPOSITIONS.items()},
                        **{op: (_static_sizes_only(op) if op in STATIC_COMPOSITES else through_aten_composite(op))
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

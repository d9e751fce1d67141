"""ATen's linear-algebra ops written in shimkit's ops (``ops``) and the elementwise arithmetic Inductor
writes Metal code for, each with ATen's signature; the references they are checked against where ATen's own
answer holds eigenvectors or singular vectors of whichever sign LAPACK chose; and ATen's composites that
compare sizes, expanded only at static sizes.

Every tensor handed to a shimkit op is made contiguous: the c-shims take row-major buffers and refuse
anything else (Inductor passes a custom op's inputs with the strides the trace gave them).
"""

from __future__ import annotations

import torch
from torch import Tensor
from torch._prims_common import is_contiguous_or_false
from torch.fx.experimental.symbolic_shapes import statically_known_false, statically_known_true, sym_eq

from shimkit.plugins.linalg.ops import canonical_signs, canonical_svd_signs
from shimkit.registry import DecompositionDeclined, through_aten_composite


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


def static_sizes_only(op: str):
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

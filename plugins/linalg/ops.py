"""shimkit's linear-algebra ops, registered with ``torch.library`` as this module is imported.

Each op's CPU implementation is ``torch.linalg`` itself, brought to the semantics its MSL kernel has (the
reference every kernel and decomposition is checked against): contiguous outputs, ``info`` for non-finite
input, eigenvectors and singular vectors with the canonical sign. Each fake kernel gives the outputs' shapes
and dtypes, for tracing and for the launchers that allocate the kernels' outputs.
"""

from __future__ import annotations

import torch
from torch import Tensor

LU_FACTOR = "shimkit::lu_factor"
LU_SOLVE = "shimkit::lu_solve"
CHOLESKY = "shimkit::cholesky"
CHECK_ERRORS = "shimkit::linalg_check_errors"
EIGH = "shimkit::eigh"
SVD = "shimkit::svd"
QR = "shimkit::qr"
LDL_FACTOR = "shimkit::ldl_factor"


def _batch(A: Tensor) -> tuple[int, ...]:
    return tuple(A.shape[:-2])


@torch.library.custom_op(LU_FACTOR, mutates_args=())
def lu_factor(A: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    LU, pivots, info = torch.linalg.lu_factor_ex(A)
    return LU.contiguous(), pivots.contiguous(), info.contiguous()


@lu_factor.register_fake
def lu_factor_fake(A: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    k = torch.sym_min(A.shape[-2], A.shape[-1])
    return (A.new_empty(A.shape), A.new_empty((*_batch(A), k), dtype=torch.int32),
            A.new_empty(_batch(A), dtype=torch.int32))


@torch.library.custom_op(LU_SOLVE, mutates_args=())
def lu_solve(LU: Tensor, pivots: Tensor, B: Tensor, adjoint: bool) -> Tensor:
    return torch.linalg.lu_solve(LU, pivots, B, adjoint=adjoint).contiguous()


@lu_solve.register_fake
def lu_solve_fake(LU: Tensor, pivots: Tensor, B: Tensor, adjoint: bool) -> Tensor:
    return B.new_empty(B.shape)


@torch.library.custom_op(CHOLESKY, mutates_args=())
def cholesky(A: Tensor) -> tuple[Tensor, Tensor]:
    L, info = torch.linalg.cholesky_ex(A)
    return L.contiguous(), info.contiguous()


@cholesky.register_fake
def cholesky_fake(A: Tensor) -> tuple[Tensor, Tensor]:
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
def eigh_fake(A: Tensor) -> tuple[Tensor, Tensor, Tensor]:
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
def svd_fake(A: Tensor) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    n = A.shape[-1]
    return (A.new_empty(A.shape), A.new_empty((*_batch(A), n)), A.new_empty((*_batch(A), n, n)),
            A.new_empty(_batch(A), dtype=torch.int32))


@torch.library.custom_op(QR, mutates_args=())
def qr(A: Tensor, complete: bool) -> tuple[Tensor, Tensor]:
    Q, R = torch.linalg.qr(A, mode="complete" if complete else "reduced")
    return Q.contiguous(), R.contiguous()


@qr.register_fake
def qr_fake(A: Tensor, complete: bool) -> tuple[Tensor, Tensor]:
    m, n = A.shape[-2], A.shape[-1]
    columns = m if complete else torch.sym_min(m, n)
    return A.new_empty((*_batch(A), m, columns)), A.new_empty((*_batch(A), columns, n))


@torch.library.custom_op(LDL_FACTOR, mutates_args=())
def ldl_factor(A: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    LD, pivots, info = torch.linalg.ldl_factor_ex(A)
    return LD.contiguous(), pivots.contiguous(), info.contiguous()


@ldl_factor.register_fake
def ldl_factor_fake(A: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    return (A.new_empty(A.shape), A.new_empty(A.shape[:-1], dtype=torch.int32),
            A.new_empty(_batch(A), dtype=torch.int32))


@torch.library.custom_op(CHECK_ERRORS, mutates_args=())
def linalg_check_errors(info: Tensor, api_name: str, is_matrix: bool) -> None:
    torch._linalg_check_errors(info, api_name, is_matrix=is_matrix)


@linalg_check_errors.register_fake
def linalg_check_errors_fake(info: Tensor, api_name: str, is_matrix: bool) -> None:
    return None


# Its only effect is the error: dead-code elimination must keep it although nothing uses its result.
torch.fx.node.has_side_effect(torch.ops.shimkit.linalg_check_errors.default)

"""shimkit's linear-algebra ops through their MSL kernels (``kernel/*.metal``) on a ``shimkit.metal``
library, each launched as ``kernel/linalg_shim_mps.mm`` dispatches it on the Mac, and the ``Kernel``
records that name each kernel's sources and launcher.
"""

from __future__ import annotations

from pathlib import Path

import torch
from torch import Tensor

from shimkit.plugins.linalg.ops import (CHOLESKY, EIGH, LDL_FACTOR, LU_FACTOR, LU_SOLVE, QR, SVD, cholesky_fake,
                                        eigh_fake, ldl_factor_fake, lu_factor_fake, qr_fake, svd_fake)
from shimkit.registry import Kernel, MslKernel

KERNEL_DIR = Path(__file__).resolve().parent / "kernel"


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
    LU, pivots, info = lu_factor_fake(A)
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
    L, info = cholesky_fake(A)
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
    values, vectors, info = eigh_fake(A)
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
    U, S, Vh, info = svd_fake(A)
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
    Q, R = qr_fake(A, complete)
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
    LD, pivots, info = ldl_factor_fake(A)
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

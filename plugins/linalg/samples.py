"""Hypothesis strategies for the plugin's checks: float32 matrices (batched, rectangular, empty, with exact
zero pivots, well-conditioned, symmetric with separated eigenvalues, positive definite) and the calls of each
op built from them. Hypothesis is imported inside each strategy: it is a test dependency, and the plugin is
imported without it.
"""

from __future__ import annotations

import torch
from torch import Tensor

from shimkit.registry import OpCall


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


def full_rank(A: Tensor) -> bool:
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
                     matrix_inputs(square=False, singular=False).filter(full_rank), st.booleans(), st.booleans())


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
        .filter(full_rank)


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


def without_keywords(calls):
    """``calls`` with their keyword arguments dropped, for an op that has none of them."""
    return lambda: calls().map(lambda call: (*call.args,))

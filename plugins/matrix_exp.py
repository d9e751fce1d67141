"""``aten::linalg_matrix_exp`` (``torch.linalg.matrix_exp``, ``torch.matrix_exp``) as scaling and squaring
with a Taylor polynomial: matrix products and elementwise code only.

ATen (``LinearAlgebra.cpp``, ``mexp_impl``) picks a polynomial degree from the matrix's 1-norm and, above
its largest threshold, scales ``A`` by ``2^-s`` (``s = ceil(log2(norm / theta_18))``), evaluates the degree-18
approximation and squares the result ``s`` times, in a loop whose count it reads from the data: a kernel
Inductor cannot write, so it stayed a missing fallback. Here the same scaling uses ``theta_18`` for every
matrix (ATen does so for every batch larger than one) and a degree-18 Taylor polynomial by Horner's rule
(truncation error below ``3.02^19 / 19!``, about ``1e-8`` of the norm: float32's rounding dominates), and the
squarings run a fixed ``MAX_SQUARINGS`` times, each applied only where ``s`` asks for it. That covers
1-norms up to ``theta_18 * 2^64`` (about ``5.6e19``); beyond, the result is what 64 squarings give, where
ATen's exponential has long overflowed float32 for any matrix with a positive eigenvalue of that size.
NaN propagates; an empty matrix is returned as it is.
"""

from __future__ import annotations

import torch

from shimkit.registry import OpCall, OpPlugin, hookimpl, through_aten_composite

MATRIX_EXP = "aten::linalg_matrix_exp.default"
# torch.matrix_exp reaches the backend as this composite of linalg_matrix_exp.
MATRIX_EXP_COMPOSITE = "aten::matrix_exp.default"
# ATen's thetas[5] for float (mexp_impl): the 1-norm up to which the degree-18 approximation is accurate.
THETA_18 = 3.010066362817634e+00
MAX_SQUARINGS = 64
TAYLOR_DEGREE = 18


def matrix_exp_decomposition(self: torch.Tensor) -> torch.Tensor:
    if self.dim() < 2 or self.shape[-1] != self.shape[-2]:
        raise RuntimeError(f"linalg.matrix_exp: A must be batches of square matrices, but they are "
                           f"{self.shape[-2] if self.dim() >= 2 else 1} by {self.shape[-1]} matrices")
    if self.numel() == 0:
        return self.clone()
    n = self.shape[-1]
    # One batch dimension, so that each of the 82 products is one bmm: `@` is matmul's composite, whose
    # reshapes and expands of batched operands were traced and spliced again for every product (a batch
    # of matrices: 800 nodes instead of 392).
    matrices = self.reshape(-1, n, n)
    norm = matrices.abs().sum(-2).amax(-1)  # the operator 1-norm: the largest column sum
    squarings = torch.clamp(torch.ceil(torch.log2(norm / THETA_18)), min=0, max=MAX_SQUARINGS)
    squarings = torch.where(norm.isnan(), 0.0, squarings)
    scaled = matrices / torch.exp2(squarings)[:, None, None]
    identity = torch.eye(n, dtype=self.dtype, device=self.device).expand_as(matrices)
    result = identity
    for k in range(TAYLOR_DEGREE, 0, -1):  # I + A/1 (I + A/2 (I + ... (I + A/18)))
        result = identity + torch.bmm(scaled, result) / k
    for step in range(MAX_SQUARINGS):
        result = torch.where((step < squarings)[:, None, None], torch.bmm(result, result), result)
    return result.reshape(self.shape)


def matrix_exp_calls():
    """Square float32 matrices, batched and empty, with 1-norms from tiny to a few squarings' worth. Each
    squaring doubles the relative rounding error, in ATen as here: at the dozen squarings of larger norms the
    two differ beyond torch's default float32 tolerance (tests/test_plugin_long_tail.py checks those at 1e-4)."""
    from hypothesis import strategies as st

    def build(batch, n, scale, seed):
        generator = torch.Generator().manual_seed(seed)
        A = torch.randn(*batch, n, n, generator=generator)
        return (A * scale / max(1, n),)

    return st.builds(build, st.sampled_from([(), (2,), (2, 3), (0,)]), st.integers(0, 6),
                     st.sampled_from([1e-6, 0.1, 1.0, 3.0]), st.integers(0, 2**32 - 1))


@hookimpl
def shimkit_op_plugins():
    yield OpPlugin(
        name="matrix-exp",
        ops=(MATRIX_EXP, MATRIX_EXP_COMPOSITE),
        decompositions={MATRIX_EXP: matrix_exp_decomposition,
                        MATRIX_EXP_COMPOSITE: through_aten_composite(MATRIX_EXP_COMPOSITE)},
        decomposition_devices=("mps",),
        references={MATRIX_EXP: torch.ops.aten.linalg_matrix_exp.default,
                    MATRIX_EXP_COMPOSITE: torch.ops.aten.matrix_exp.default},
        input_strategies={MATRIX_EXP: matrix_exp_calls, MATRIX_EXP_COMPOSITE: matrix_exp_calls},
        doc="matrix_exp as scaling and squaring with a degree-18 Taylor polynomial (no data-dependent loop).",
    )

"""The built-in linalg plugin: LU and Cholesky MSL kernels behind c-shims of shimkit's own ops, checked on Linux
through shimkit.metal against LAPACK (torch.linalg), on hypothesis inputs and on PyTorch's OpInfo samples run
through the decomposed program, and the audit's verdict on models calling them."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from hypothesis import settings
from torch.testing._internal.common_methods_invocations import op_db

import shimkit.plugins.linalg as linalg
from shimkit.audit.coverage import audit_op
from shimkit.backend import backend_config
from shimkit.passes import DecomposeInPlace
from shimkit.registry import DecompositionDeclined, Kernel, MslKernel, OpPlugin
from shimkit.testing import PropertyFailure, assert_plugin_matches_reference
from shimkit.testing.kernels import msl_kernel

OPS = {(op.name, op.variant_test_name): op for op in op_db}
# The OpInfo entries the plugin makes lower on Metal, each the sweep found missing a kernel stock.
OPINFO_OPS = ["linalg.det", "linalg.slogdet", "logdet", "linalg.inv", "linalg.inv_ex", "linalg.solve",
              "linalg.solve_ex", "linalg.cholesky", "linalg.cholesky_ex", "linalg.lu_factor", "linalg.lu_factor_ex",
              "lu", "lu_solve", "linalg.lu_solve", "linalg.tensorinv", "linalg.tensorsolve", "linalg.qr", "qr",
              "linalg.ldl_factor", "linalg.ldl_factor_ex"]


def test_kernels_and_decompositions_match_lapack():
    assert_plugin_matches_reference("linalg", rtol=1e-4, atol=1e-4,
                                    settings=settings(max_examples=150, derandomize=True, deadline=None,
                                                      database=None))


@pytest.fixture(scope="module")
def metal_kernels():
    """shimkit's linear-algebra ops as the Metal runtime runs them: the MSL kernels, through shimkit.metal."""
    return {torch.ops.shimkit.lu_factor.default: msl_kernel(linalg.LU_FACTOR_KERNEL, "float"),
            torch.ops.shimkit.lu_solve.default: msl_kernel(linalg.LU_SOLVE_KERNEL, "float"),
            torch.ops.shimkit.cholesky.default: msl_kernel(linalg.CHOLESKY_KERNEL, "float"),
            torch.ops.shimkit.eigh.default: msl_kernel(linalg.EIGH_KERNEL, "float"),
            torch.ops.shimkit.svd.default: msl_kernel(linalg.SVD_KERNEL, "float"),
            torch.ops.shimkit.qr.default: msl_kernel(linalg.QR_KERNEL, "float"),
            torch.ops.shimkit.ldl_factor.default: msl_kernel(linalg.LDL_FACTOR_KERNEL, "float")}


class _Sample(torch.nn.Module):
    def __init__(self, op, sample):
        super().__init__()
        self.op, self.sample = op, sample

    def forward(self, *tensors):
        inputs = list(tensors)
        first = inputs.pop(0)
        args = [inputs.pop(0) if isinstance(a, torch.Tensor) else a for a in self.sample.args]
        return self.op(first, *args, **self.sample.kwargs)


def _metal_program(op, sample, metal_kernels):
    """The sample's call exported, decomposed by the mps backend's table and with each shimkit op's node
    calling its MSL kernel: what the Metal runtime would run, minus Inductor's generated elementwise code."""
    tensors = (sample.input, *(a for a in sample.args if isinstance(a, torch.Tensor)))
    program = torch.export.export(_Sample(op, sample), tensors, strict=False)
    config = backend_config("mps")  # linalg_qr, linalg_pinv and linalg_ldl_factor_ex: before to_edge
    table = {**config.pre_edge_decomposition_table, **config.decomposition_table}
    DecomposeInPlace(table)(program)
    module = program.module()
    called = set()
    for node in module.graph.nodes:
        assert node.target not in table, f"{node.format_node()} was left in place"
        if node.target in metal_kernels:
            called.add(node.target)
            node.target = metal_kernels[node.target]
    module.recompile()
    return module, tensors, called


@pytest.mark.parametrize("name", OPINFO_OPS)
def test_opinfo_samples_through_the_metal_kernels(name, metal_kernels):
    op = OPS[(name, "")]
    cases = list(op.sample_inputs("cpu", torch.float32, requires_grad=False))
    assert cases
    for sample in cases:
        module, tensors, called = _metal_program(op.op, sample, metal_kernels)
        assert called, f"{name}: no shimkit kernel in the decomposed program"
        expected = op.op(sample.input, *sample.args, **sample.kwargs)
        torch.testing.assert_close(module(*tensors), expected, rtol=1e-4, atol=1e-4, equal_nan=True,
                                   msg=lambda m, s=sample: f"{name} on {s}: {m}")


EIGEN_OPINFO_OPS = [("linalg.eigh", ""), ("linalg.eigvalsh", ""), ("linalg.matrix_rank", "hermitian")]


@pytest.mark.parametrize("name, variant", EIGEN_OPINFO_OPS)
def test_opinfo_eigen_samples_through_the_jacobi_kernel(name, variant, metal_kernels):
    """PyTorch's samples (symmetric or not: only the triangle UPLO names is read) through the MSL Jacobi
    kernel. Eigenvectors are compared as ATen's own tests compare them, A V = V diag(values) with V
    orthonormal, and after bringing eager's to the canonical sign; eigenvalues and ranks directly."""
    op = OPS[(name, variant)]
    cases = list(op.sample_inputs("cpu", torch.float32, requires_grad=False))
    assert cases
    for sample in cases:
        module, tensors, called = _metal_program(op.op, sample, metal_kernels)
        # ATen's matrix_rank answers an empty matrix without an eigen-decomposition.
        assert torch.ops.shimkit.eigh.default in called or not sample.input.numel()
        got, expected = module(*tensors), op.op(sample.input, *sample.args, **sample.kwargs)
        if name != "linalg.eigh":
            torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-4, msg=lambda m, s=sample: f"{s}: {m}")
            continue
        (values, vectors), uplo = got, sample.kwargs.get("UPLO", "L")
        A = sample.input.tril() if uplo == "L" else sample.input.triu()
        A = A + A.mT - A.diagonal(0, -2, -1).diag_embed()
        scale = max(1.0, float(A.abs().max())) if A.numel() else 1.0
        torch.testing.assert_close(values, expected.eigenvalues, rtol=1e-4, atol=1e-4 * scale)
        torch.testing.assert_close(A @ vectors, vectors * values.unsqueeze(-2), rtol=0, atol=1e-4 * scale)
        torch.testing.assert_close(vectors.mT @ vectors, torch.eye(A.shape[-1]).expand_as(A), rtol=0, atol=1e-5)
        gaps = expected.eigenvalues.diff(dim=-1).abs()
        if not gaps.numel() or float(gaps.min()) > 1e-2 * scale:  # distinct: unique up to sign
            torch.testing.assert_close(vectors, linalg.canonical_signs(expected.eigenvectors), rtol=0, atol=1e-3)


SVD_OPINFO_OPS = [("linalg.svdvals", ""), ("linalg.cond", ""), ("linalg.matrix_rank", ""), ("norm", "nuc"),
                  ("pinverse", ""), ("linalg.svd", ""), ("svd", "")]


@pytest.mark.parametrize("name, variant", SVD_OPINFO_OPS)
def test_opinfo_svd_samples_through_the_jacobi_kernel(name, variant, metal_kernels):
    """PyTorch's samples through the MSL one-sided Jacobi kernel. Singular vectors are compared as ATen's
    tests compare them (A = U diag(S) Vh, orthonormal U and V) and, where the singular values are
    distinct, with eager's brought to the canonical sign; everything else directly."""
    op = OPS[(name, variant)]
    cases = list(op.sample_inputs("cpu", torch.float32, requires_grad=False))
    assert cases
    for sample in cases:
        full = sample.kwargs.get("full_matrices", True) if name == "linalg.svd" else not sample.kwargs.get("some", True)
        if full and name in ("linalg.svd", "svd") and sample.input.shape[-2] != sample.input.shape[-1]:
            with pytest.raises(DecompositionDeclined, match="full_matrices=True"):  # the basis is not unique
                linalg.svd_decomposition(sample.input, True)
            continue
        module, tensors, called = _metal_program(op.op, sample, metal_kernels)
        assert torch.ops.shimkit.svd.default in called or not sample.input.numel()
        got, expected = module(*tensors), op.op(sample.input, *sample.args, **sample.kwargs)
        if name not in ("linalg.svd", "svd"):
            torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-4, msg=lambda m, s=sample: f"{s}: {m}")
            continue
        U, S, V = got
        Vh = V.mT if name == "svd" else V
        A = sample.input
        k = min(A.shape[-2:])
        scale = max(1.0, float(A.abs().max())) if A.numel() else 1.0
        torch.testing.assert_close(S, expected[1], rtol=1e-4, atol=1e-4 * scale)
        torch.testing.assert_close(U[..., :k] * S.unsqueeze(-2) @ Vh[..., :k, :], A, rtol=0, atol=1e-4 * scale)
        for Q in (U, Vh.mT):
            torch.testing.assert_close(Q.mT @ Q, torch.eye(Q.shape[-1]).expand(*Q.shape[:-2], -1, -1), rtol=0,
                                       atol=1e-5)


def test_svd_of_a_rank_deficient_matrix_keeps_u_orthonormal(metal_kernels):
    svd = metal_kernels[torch.ops.shimkit.svd.default]
    A = linalg._random_matrices((2,), 6, 4, seed=5)
    A[0, :, 2] = 0
    A[1] = 0
    U, S, Vh, info = svd(A)
    assert info.tolist() == [0, 0] and S[0, -1] == 0 and (S[1] == 0).all()
    torch.testing.assert_close(U.mT @ U, torch.eye(4).expand(2, 4, 4), rtol=0, atol=1e-6)
    torch.testing.assert_close(U * S.unsqueeze(-2) @ Vh, A, rtol=0, atol=1e-5)
    torch.testing.assert_close(S, torch.linalg.svdvals(A), rtol=1e-5, atol=1e-5)
    A[0, 1, 1] = float("inf")
    assert svd(A)[3].tolist() == torch.ops.shimkit.svd(A)[3].tolist() == [4, 0]
    with pytest.raises(RuntimeError, match=r"linalg.svd: \(Batch element 0\): The algorithm failed to converge"):
        linalg.svd_decomposition(A)
    with pytest.raises(Exception, match="full_matrices=True on a matrix that may not be square"):
        linalg.svd_decomposition(A, True)


def test_eigh_reads_one_triangle_and_reports_non_finite_input_as_atens_error(metal_kernels):
    eigh = metal_kernels[torch.ops.shimkit.eigh.default]
    A = linalg._random_matrices((2,), 4, 4, seed=3)
    values, _, info = eigh(A)
    torch.testing.assert_close(values, torch.linalg.eigvalsh(A), rtol=1e-5, atol=1e-5)
    A[1, 2, 0] = float("nan")  # read
    A[0, 0, 3] = float("nan")  # the other triangle: ignored
    assert eigh(A)[2].tolist() == torch.ops.shimkit.eigh(A)[2].tolist() == [0, 4]
    with pytest.raises(RuntimeError, match=r"linalg.eigh: \(Batch element 1\): The algorithm failed to converge"):
        linalg.eigh_decomposition(A)
    with pytest.raises(RuntimeError, match="Expected UPLO argument to be 'L' or 'U', but got X"):
        linalg.eigh_decomposition(A, "X")


@pytest.mark.parametrize("api_name, info, is_matrix, message", [
    ("linalg.inv", [0, 2, 3], False, r"linalg.inv: \(Batch element 1\): The diagonal element 2 is zero"),
    ("torch.linalg.solve_ex", [1], True, r"torch.linalg.solve_ex: The solver failed because the input matrix is "
                                         r"singular"),
    ("torch.linalg.cholesky_ex", [0, 0, 4], False, r"\(Batch element 2\): .*leading minor of order 4"),
])
def test_the_info_check_raises_atens_error(api_name, info, is_matrix, message):
    infos = torch.tensor(info if not is_matrix else info[0], dtype=torch.int32)
    with pytest.raises(RuntimeError, match=message):
        torch._linalg_check_errors(infos, api_name, is_matrix=is_matrix)
    with pytest.raises(RuntimeError, match=message):
        linalg.check_errors_decomposition(infos, api_name, is_matrix=is_matrix)


def test_singular_and_non_positive_definite_inputs_report_atens_info(metal_kernels):
    lu_factor = metal_kernels[torch.ops.shimkit.lu_factor.default]
    cholesky = metal_kernels[torch.ops.shimkit.cholesky.default]
    A = linalg._random_matrices((3,), 5, 5, seed=1)
    A[1, :, 3] = 0  # an exact zero pivot in column 4
    A[2] = 0
    LU, pivots, info = lu_factor(A)
    expected = torch.linalg.lu_factor_ex(A)
    assert info.tolist() == expected.info.tolist() == [0, 4, 1]
    assert torch.equal(pivots, expected.pivots)
    torch.testing.assert_close(LU, expected.LU)
    P = A[0] @ A[0].mT + torch.eye(5)
    not_definite = torch.stack([P, P - 100 * torch.eye(5), P.clone().fill_(float("nan"))])
    assert cholesky(not_definite)[1].tolist() == torch.linalg.cholesky_ex(not_definite).info.tolist() == [0, 1, 1]


def test_a_model_with_a_singular_matrix_raises_like_eager(metal_kernels):
    class Inverse(torch.nn.Module):
        def forward(self, A):
            return torch.linalg.inv(A)

    singular = torch.zeros(2, 3, 3)
    singular[0] = torch.eye(3)
    program = torch.export.export(Inverse(), (torch.eye(3).expand(2, 3, 3).clone(),), strict=False)
    DecomposeInPlace(backend_config("mps").decomposition_table)(program)
    targets = {node.target for node in program.graph.nodes if node.op == "call_function"}
    assert torch.ops.shimkit.linalg_check_errors.default in targets
    with pytest.raises(RuntimeError, match=r"linalg.inv: \(Batch element 1\): The diagonal element 1 is zero"):
        program.module()(singular)


@pytest.mark.parametrize("call, message", [
    (lambda k: k[torch.ops.shimkit.lu_factor.default](torch.zeros(3)), r"shimkit::lu_factor: A must have 2 or more"),
    (lambda k: k[torch.ops.shimkit.lu_factor.default](torch.zeros(2, 2, dtype=torch.float64)), r"must be float32"),
    (lambda k: k[torch.ops.shimkit.cholesky.default](torch.zeros(2, 3)), r"shimkit::cholesky: A must be batches of"),
    (lambda k: k[torch.ops.shimkit.lu_solve.default](torch.eye(3), torch.ones(2, dtype=torch.int32),
                                                      torch.ones(3, 1), False), r"shimkit::lu_solve: expected LU"),
    (lambda k: k[torch.ops.shimkit.lu_solve.default](torch.eye(3), torch.ones(3, dtype=torch.int64),
                                                      torch.ones(3, 1), False), r"pivots must be int32"),
])
def test_bad_arguments_name_the_op_and_argument(metal_kernels, call, message):
    with pytest.raises((ValueError, TypeError), match=message):
        call(metal_kernels)


def test_lu_without_pivoting_is_declined_not_wrong():
    with pytest.raises(Exception, match="pivot=True"):
        linalg.lu_factor_ex_decomposition(torch.eye(2), pivot=False)


def test_a_kernel_that_does_not_pivot_is_caught(tmp_path, register_plugin):
    """The property check can fail: the same LU kernel never swapping rows is caught against LAPACK."""
    folder = Path(linalg.LU_FACTOR_KERNEL.directory)
    source = (folder / "lu_factor.metal").read_text()
    assert source.count("if (magnitude > largest) {") == 1
    (tmp_path / "lu_factor.metal").write_text(source.replace("if (magnitude > largest) {", "if (false) {"))
    (tmp_path / "adapter.mm").write_text("// the Mac adapter is not under test here\n")
    kernel = Kernel(name="unpivoted_lu", directory=str(tmp_path), runtime_sources=("lu_factor.metal", "adapter.mm"),
                    msl=MslKernel(source="lu_factor.metal", function="lu_factor", dtypes=("float",),
                                  launch=linalg.launch_lu_factor), uses_sdk=False)
    shim = linalg.SHIMS[0]
    register_plugin(OpPlugin(
        name="unpivoted-lu", ops=(linalg.LU_FACTOR,),
        shims=(type(shim)(op=shim.op, device="mps", symbol=shim.symbol, recorded_names=shim.recorded_names,
                          c_prototype=shim.c_prototype, kernel=kernel),),
        references={linalg.LU_FACTOR: torch.ops.shimkit.lu_factor.default},
        input_strategies={linalg.LU_FACTOR: lambda: linalg.matrix_inputs(square=False).map(lambda A: (A,))}))
    with pytest.raises(PropertyFailure, match="lu_factor_float"):
        assert_plugin_matches_reference("unpivoted-lu", settings=settings(max_examples=50, derandomize=True,
                                                                          deadline=None, database=None))


@pytest.mark.parametrize("name", ["linalg.det", "linalg.solve", "linalg.cholesky", "linalg.eigh", "linalg.svd",
                                  "pinverse", "qr", "linalg.ldl_factor"])
def test_the_sweep_finds_these_missing_stock_and_clean_with_shimkit(name):
    result = audit_op(name, "float32")
    assert (result.stock, result.shimkit) == ("missing", "clean"), result

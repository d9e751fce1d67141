"""Inductor's own Metal kernels (its mps codegen, unchanged) run through shimkit.metal on CPU tensors and
compared with eager CPU: elementwise in three dtypes, row and full reductions, softmax, layer norm,
argmax, gather and indexing, where, pow/erf and special functions, broadcasting, non-contiguous inputs."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from shimkit.metal import compile_shader
from shimkit.metal.inductor import inductor_metal_on_cpu

TOLERANCES = {torch.float32: dict(rtol=1e-5, atol=1e-5), torch.float16: dict(rtol=2e-3, atol=2e-3),
              torch.bfloat16: dict(rtol=1.6e-2, atol=1.6e-2)}


def rand(*shape, dtype=torch.float32, seed=0):
    generator = torch.Generator().manual_seed(seed + sum(shape))
    return torch.randn(*shape, generator=generator).to(dtype)


CASES = {
    "add_mul": (lambda x, y: x * y + x, lambda d: (rand(37, dtype=d), rand(37, dtype=d, seed=1))),
    "relu_sigmoid_tanh": (lambda x: torch.relu(x) + torch.sigmoid(x) * torch.tanh(x), lambda d: (rand(5, 13, dtype=d),)),
    "exp_log1p": (lambda x: torch.exp(x) - torch.log1p(x.abs()), lambda d: (rand(64, dtype=d),)),
    "sqrt_rsqrt": (lambda x: torch.sqrt(x.abs() + 1) + torch.rsqrt(x.abs() + 1), lambda d: (rand(40, dtype=d),)),
    "pow": (lambda x: torch.pow(x.abs(), 1.7) + x ** 2, lambda d: (rand(33, dtype=d),)),
    "erf_gelu": (lambda x: torch.erf(x) + F.gelu(x), lambda d: (rand(50, dtype=d),)),
    "special": (lambda x: torch.special.i0(x) + torch.special.erfinv(x.clamp(-0.9, 0.9)) + torch.lgamma(x.abs() + 1),
                lambda d: (rand(30, dtype=d),)),
    "gammainc": (lambda x: torch.special.gammainc(x.abs() + 1, x.abs()), lambda d: (rand(24, dtype=d),)),
    "bessel_zeta_digamma": (lambda x: torch.special.bessel_j0(x) + torch.special.zeta(x.abs() + 2, 1.0)
                            + torch.digamma(x.abs() + 1) + torch.polygamma(1, x.abs() + 1), lambda d: (rand(24, dtype=d),)),
    "i1e_erfcx_chebyshev": (lambda x: torch.special.i1e(x) + torch.special.erfcx(x)
                            + torch.special.chebyshev_polynomial_t(x, 3), lambda d: (rand(24, dtype=d),)),
    "where": (lambda x, y: torch.where(x > y, x, y * 2), lambda d: (rand(6, 7, dtype=d), rand(6, 7, dtype=d, seed=1))),
    "broadcast": (lambda x, y: x + y * 3, lambda d: (rand(4, 1, 5, dtype=d), rand(3, 1, dtype=d))),
    "noncontiguous": (lambda x: x.t() * 2 + 1, lambda d: (rand(9, 11, dtype=d),)),
    "sliced": (lambda x: x[::2, 1:] * x[1::2, :-1], lambda d: (rand(10, 8, dtype=d),)),
    "row_sum": (lambda x: x.sum(-1), lambda d: (rand(16, 100, dtype=d),)),
    "row_max": (lambda x: x.amax(-1), lambda d: (rand(8, 77, dtype=d),)),
    "full_sum": (lambda x: x.sum(), lambda d: (rand(1000, dtype=d),)),
    "mean_var": (lambda x: x.mean(0) + x.var(0), lambda d: (rand(50, 6, dtype=d),)),
    "softmax": (lambda x: torch.softmax(x, -1), lambda d: (rand(8, 33, dtype=d),)),
    "log_softmax": (lambda x: torch.log_softmax(x, 0), lambda d: (rand(20, 5, dtype=d),)),
    "layer_norm": (lambda x, w, b: F.layer_norm(x, (24,), w, b), lambda d: (rand(6, 24, dtype=d), rand(24, dtype=d, seed=1),
                                                                            rand(24, dtype=d, seed=2))),
    "rms_norm": (lambda x: x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6), lambda d: (rand(4, 64, dtype=d),)),
    "argmax": (lambda x: torch.argmax(x, -1), lambda d: (rand(7, 45, dtype=d),)),
    "argmin_dim0": (lambda x: torch.argmin(x, 0), lambda d: (rand(30, 4, dtype=d),)),
    "gather": (lambda x, i: torch.gather(x, 1, i), lambda d: (rand(5, 9, dtype=d), torch.randint(0, 9, (5, 4),
                                                                                                generator=torch.Generator().manual_seed(3)))),
    "index_select": (lambda x, i: x[i] * 2, lambda d: (rand(12, 3, dtype=d), torch.tensor([3, 0, 11, 3]))),
    "embedding": (lambda w, i: F.embedding(i, w), lambda d: (rand(20, 8, dtype=d), torch.tensor([[1, 19], [0, 7]]))),
    "logsumexp": (lambda x: torch.logsumexp(x, -1), lambda d: (rand(4, 20, dtype=d),)),
    "scatter_add": (lambda x, i, src: x.scatter_add(0, i, src), lambda d: (
        rand(6, dtype=d), torch.tensor([0, 2, 2, 5, 0, 2]), rand(6, dtype=d, seed=5))),
    "clamp_abs": (lambda x: x.clamp(-0.5, 0.5).abs() - x.sign(), lambda d: (rand(41, dtype=d),)),
    "min_max_pair": (lambda x, y: torch.maximum(x, y) - torch.minimum(x, y), lambda d: (rand(17, dtype=d), rand(17, dtype=d, seed=4))),
    "integer_ops": (lambda a, b: (a * 3 + b) // 2 % 7, lambda d: (torch.arange(-20, 20), torch.arange(40, 0, -1))),
    "bool_logic": (lambda x: ((x > 0) & (x < 1)) | (x < -1), lambda d: (rand(30, dtype=d),)),
    "cast_chain": (lambda x: (x * 100).to(torch.int32).to(x.dtype) / 3, lambda d: (rand(25, dtype=d),)),
    "nan_inf": (lambda x: torch.nan_to_num(x / (x - x.round()), nan=0.0, posinf=1.0, neginf=-1.0),
                lambda d: (torch.tensor([0.0, 1.0, 2.5, -3.0, float("inf"), float("nan")], dtype=d),)),
}
DTYPE_CASES = ["add_mul", "relu_sigmoid_tanh", "exp_log1p", "row_sum", "softmax", "layer_norm", "argmax", "where",
               "broadcast", "noncontiguous"]
PARAMS = [(name, torch.float32) for name in CASES] + [
    (name, dtype) for name in DTYPE_CASES for dtype in (torch.float16, torch.bfloat16)]


@pytest.mark.parametrize("name,dtype", PARAMS, ids=[f"{n}-{str(d).split('.')[1]}" for n, d in PARAMS])
def test_inductors_metal_kernels_match_eager(name, dtype):
    fn, make_inputs = CASES[name]
    inputs = make_inputs(dtype)
    expected = fn(*inputs)
    with inductor_metal_on_cpu() as sources:
        got = torch.compile(fn, fullgraph=True, dynamic=False)(*inputs)
    assert sources, "Inductor generated no Metal kernel: nothing was checked"
    # Every kernel Inductor writes runs as a plain loop or, reductions (c10's threadgroup helpers, inlined),
    # split into loops at their barriers: none on fibers (issue 30).
    on_fibers = {kernel: getattr(library, kernel).fibers_because for library in map(compile_shader, sources)
                 for kernel in dir(library) if getattr(library, kernel).execution == "fibers"}
    assert not on_fibers, f"{on_fibers} run as fibers"
    assert got.dtype == expected.dtype and got.shape == expected.shape
    if expected.dtype.is_floating_point:
        torch.testing.assert_close(got, expected, equal_nan=True, **TOLERANCES[dtype])
    else:
        assert torch.equal(got, expected)


def test_the_block_leaves_inductors_metal_kernel_headers_as_it_found_them():
    """Inductor's MetalKernel keeps its headers in one set on the class; a bounds check (gather) adds "error",
    and every later Metal kernel of the process would declare an error_buf that AOTInductor never binds."""
    from torch._inductor.codegen.mps import MetalKernel

    before = set(MetalKernel.headers)
    fn, make_inputs = CASES["gather"]
    with inductor_metal_on_cpu() as sources:
        torch.compile(fn, fullgraph=True, dynamic=False)(*make_inputs(torch.float32))
    assert any("error_buf" in source for source in sources)
    assert set(MetalKernel.headers) == before

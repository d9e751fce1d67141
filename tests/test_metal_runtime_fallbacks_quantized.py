"""The Linux Metal runtime's CPU fallback kernels for 4-bit weights (linear, gathered experts) and the gated
delta rule (runtime/native/fallbacks/), called by their C symbols with real AtenTensorHandles, against
torch and ExecuTorch's references applied to what upstream's op_*.mm read (every operand as a dense buffer
from its data pointer); how the library is built and numbers judged: tests/fallback_helpers.py."""

from __future__ import annotations

import ctypes
import math

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from fallback_helpers import (EXAMPLES, FEW_EXAMPLES, H, LAYOUTS, METAL_DTYPES, SEEDS, U32, assert_fails,
                              assert_rounded_once, call, last_error, library, product_exact, random, read_densely,
                              steal, strided)
from shimkit.testing.kernels import AOTI_TORCH_SUCCESS, tensor_handles


@pytest.fixture(scope="module", autouse=True)
def _built():
    library()  # built before any hypothesis example runs


# ---------------------------------------------------------------------------------------------- 4-bit weights


def packed_nibbles(codes: torch.Tensor) -> torch.Tensor:
    """uint8 codes in [0, 16) along the last dim packed two to a byte, the even element in the low nibble."""
    return (codes[..., 0::2] | (codes[..., 1::2] << 4)).to(torch.uint8)


def dequantized(packed: torch.Tensor, scales: torch.Tensor, zeros: torch.Tensor, group_size: int,
                tile_dtype: torch.dtype = torch.float64) -> torch.Tensor:
    """float64 weights scale * code + zero from packed nibbles (the inverse of packed_nibbles), each operation
    rounded to ``tile_dtype`` as affine_qmm_t's dequantize does into its tile (exact by default)."""
    codes = torch.stack([packed & 0x0F, packed >> 4], dim=-1).flatten(-2).to(tile_dtype)
    return (codes * scales.to(tile_dtype).repeat_interleave(group_size, -1)
            + zeros.to(tile_dtype).repeat_interleave(group_size, -1)).double()


def test_the_nibble_order_is_executorchs():
    from executorch.backends.apple.metal.ops.gather_qmv import _dequantize_int4_affine

    codes = torch.randint(0, 16, (3, 64), generator=torch.Generator().manual_seed(0), dtype=torch.uint8)
    scales, zeros = torch.rand(3, 2) + 0.5, torch.rand(3, 2)
    ours = dequantized(packed_nibbles(codes), scales, zeros, 32)
    theirs = _dequantize_int4_affine(packed_nibbles(codes), scales, zeros, 64, 32)
    torch.testing.assert_close(ours.float(), theirs)


def linear_4bit_call(a, b, group_size, s, z):
    result = H()
    with tensor_handles(a, b, s, z) as handles:
        status = call("aoti_torch_mps__linear_fp_act_4bit_weight", handles[0], handles[1], group_size, handles[2],
                      handles[3], ctypes.byref(result))
    return status, result


@EXAMPLES
@given(dtype=st.sampled_from(METAL_DTYPES), m=st.integers(1, 3), quads=st.integers(1, 3),
       group_size=st.sampled_from((32, 64, 128, 256)), groups=st.integers(1, 2), seed=SEEDS, specials=st.booleans())
def test_linear_4bit_matches_its_dequantized_product(dtype, m, quads, group_size, groups, seed, specials):
    n, k = 4 * quads - (1 if m == 1 and quads > 1 else 0), group_size * groups  # N % 4 == 0 unless M == 1
    generator = torch.Generator().manual_seed(seed)
    codes = torch.randint(0, 16, (n, k), generator=generator, dtype=torch.uint8)
    a = random((m, k), dtype, seed)
    if specials and a.numel():
        a.view(-1)[0] = math.inf
    s = (torch.rand(n, groups, generator=generator, dtype=torch.float64) * 0.2 + 0.01).to(dtype)
    z = random((n, groups), dtype, seed + 1, scale=0.5)
    status, result = linear_4bit_call(a, packed_nibbles(codes), group_size, s, z)
    assert status == AOTI_TORCH_SUCCESS, last_error()
    output = steal(result)
    assert output.shape == (m, n) and output.dtype == dtype and output.is_contiguous()
    # M > 1 runs affine_qmm_t, whose tiles hold the dequantized weights in A's dtype (op_linear_4bit.mm:995-1003)
    weight = dequantized(packed_nibbles(codes), s, z, group_size, dtype if m > 1 else torch.float64)
    exact, magnitude = product_exact(a, weight.t())
    assert_rounded_once(output, exact, (k + 4) * U32 * magnitude)


@pytest.mark.parametrize("case, words", [
    ("group_size", ("Invalid group_size 48 (must be 32, 64, 128, or 256)",)),
    ("b_dtype", ("expect B to be uint8 tensor, got dtype int8",)),
    ("b_columns", ("expect B.size(1) == 32, got 16",)),
    ("k8", ("expect K to be multiple of 8, got 68",)),
    ("n4", ("expect N to be multiple of 4 when M != 1, got M=2, N=6",)),
    ("k_group", ("K = 96 is not a multiple of group_size 64",)),
    ("a_dtype", ("expect A to be 32-bit or 16-bit float tensor, got dtype float16",)),
    ("a_contiguous", ("expect A to be contiguous, strides=[1, 2]",)),
    ("a_one_row", ("expect A to be contiguous, strides=[128, 1]",)),  # contiguous to ATen, not to op_linear_4bit.mm
    ("s_dtype", ("expect S dtype to match A dtype bfloat16, got float32",)),
    ("z_shape", ("Z must be [N, K / group_size] = [8, 2]",)),
    ("no_rows", ("No suitable kernel found for M=0, N=8, K=64",)),
])
def test_linear_4bit_refuses_what_upstream_refuses(case, words):
    a, b = torch.ones(2, 64), torch.zeros(8, 32, dtype=torch.uint8)
    group_size, s, z = 32, torch.ones(8, 2), torch.zeros(8, 2)
    if case == "group_size":
        group_size = 48
    elif case == "b_dtype":
        b = b.to(torch.int8)
    elif case == "b_columns":
        b = torch.zeros(8, 16, dtype=torch.uint8)
    elif case == "k8":
        a, b = torch.ones(2, 68), torch.zeros(8, 32, dtype=torch.uint8)
    elif case == "n4":
        b, s, z = b[:6], s[:6], z[:6]
    elif case == "k_group":
        a, b, group_size = torch.ones(2, 96), torch.zeros(8, 48, dtype=torch.uint8), 64
    elif case == "a_dtype":
        a = a.half()
    elif case == "a_contiguous":
        a = torch.ones(64, 2).t()
    elif case == "a_one_row":
        a = torch.ones(1, 128)[:, :64]
    elif case == "no_rows":
        a = torch.ones(0, 64)
    elif case == "s_dtype":
        a, z = a.bfloat16(), z.bfloat16()
    elif case == "z_shape":
        z = torch.zeros(8, 3)
    status, result = linear_4bit_call(a, b, group_size, s, z)
    assert_fails(status, "aoti_torch_mps__linear_fp_act_4bit_weight: ", *words)
    assert result.value is None


def gather_qmv_call(x, w, scales, biases, indices, group_size):
    result = H()
    with tensor_handles(x, w, scales, biases, indices) as handles:
        status = call("aoti_torch_mps_gather_qmv", *handles, group_size, ctypes.byref(result))
    return status, result


@EXAMPLES
@given(dtype=st.sampled_from(METAL_DTYPES), pairs=st.integers(1, 4), experts=st.integers(1, 3), n=st.integers(1, 5),
       group_size=st.sampled_from((32, 64, 128)), groups=st.integers(1, 2), seed=SEEDS, layout=LAYOUTS)
def test_gather_qmv_matches_executorchs_reference(dtype, pairs, experts, n, group_size, groups, seed, layout):
    from executorch.backends.apple.metal.ops.gather_qmv import gather_qmv as reference

    k = group_size * groups
    generator = torch.Generator().manual_seed(seed)
    w = packed_nibbles(torch.randint(0, 16, (experts, n, k), generator=generator, dtype=torch.uint8))
    scales = (torch.rand(experts, n, groups, generator=generator, dtype=torch.float64) * 0.2 + 0.01).to(dtype)
    biases = random((experts, n, groups), dtype, seed + 1, scale=0.5)
    indices = torch.randint(0, experts, (pairs,), generator=generator, dtype=torch.int32)
    x = random((pairs, k), dtype, seed + 2)
    x, w, scales = strided(x, layout), strided(w, layout), strided(scales, layout)
    status, result = gather_qmv_call(x, w, scales, biases, indices, group_size)
    assert status == AOTI_TORCH_SUCCESS, last_error()
    output = steal(result)
    assert output.shape == (pairs, n) and output.dtype == dtype and output.is_contiguous()
    x, w, scales = read_densely(x), read_densely(w), read_densely(scales)  # what op_gather_qmv.mm reads
    weights = dequantized(w, scales, biases, group_size)[indices.long()]  # [P, N, K]
    exact = (weights * x.double().unsqueeze(1)).sum(-1)
    magnitude = (weights.abs() * x.double().abs().unsqueeze(1)).sum(-1)
    assert_rounded_once(output, exact, (k + 4) * U32 * magnitude)
    if dtype == torch.float32:  # ExecuTorch's own reference, which rounds the weights to the scales' dtype first
        torch.testing.assert_close(output, reference(x, w, scales, biases, indices, group_size), rtol=1e-5, atol=1e-5,
                                   equal_nan=True)


@pytest.mark.parametrize("case, words", [
    ("group_size", ("Invalid group_size 256 (must be 32, 64, or 128)",)),
    ("int64_indices", ("expert_indices has dtype int64", "int32")),
    ("index_range", ("expert_indices[1] = 3 is not an expert index in [0, 3)",)),
    # read densely, as upstream reads them: the filler between the elements is an index out of range
    ("sliced_indices", ("expert_indices[1] = 2147483647 is not an expert index in [0, 3)",)),
    ("index_count", ("expert_indices size 1 != P=2",)),
    ("scales_dtype", ("scales is bfloat16 but x is float32", "reinterpret")),
    ("biases_shape", ("biases must be [E, N, K / group_size] = [3, 4, 2]",)),
    ("w_bytes", ("K_packed=16 != K/2=32",)),
    ("x_dtype", ("Unsupported dtype float16 of x",)),
    ("w_rank", ("w must be 3D [E, N, K_packed], got 2",)),
    ("short_scales", ("scales", "spans fewer elements than op_gather_qmv.mm reads", "past its end")),
    ("no_pairs", ("aoti_torch_mps_malloc did not register buffer in map", "0-byte output")),
])
def test_gather_qmv_refuses_what_it_cannot_compute(case, words):
    x, w = torch.ones(2, 64), torch.zeros(3, 4, 32, dtype=torch.uint8)
    scales, biases, indices, group_size = torch.ones(3, 4, 2), torch.zeros(3, 4, 2), torch.tensor([0, 2], dtype=torch.int32), 32
    if case == "group_size":
        group_size = 256
    elif case == "int64_indices":
        indices = indices.long()
    elif case == "index_range":
        indices = torch.tensor([0, 3], dtype=torch.int32)
    elif case == "sliced_indices":
        indices = strided(indices, "sliced")
    elif case == "index_count":
        indices = indices[:1]
    elif case == "no_pairs":
        x, indices = x[:0], indices[:0]
    elif case == "short_scales":  # the expert stride 0: ATen broadcasts one expert's scales, the dense read overruns
        scales = torch.ones(1, 4, 2).expand(3, 4, 2)
    elif case == "scales_dtype":
        scales = scales.bfloat16()
    elif case == "biases_shape":
        biases = torch.zeros(3, 4, 1)
    elif case == "w_bytes":
        w = torch.zeros(3, 4, 16, dtype=torch.uint8)
    elif case == "x_dtype":
        x, scales, biases = x.half(), scales.half(), biases.half()
    elif case == "w_rank":
        w = w[0]
    status, result = gather_qmv_call(x, w, scales, biases, indices, group_size)
    assert_fails(status, "aoti_torch_mps_gather_qmv: ", *words)
    assert result.value is None


# ---------------------------------------------------------------------------------------------- gated delta rule


def gated_delta_inputs(batch, steps, hk, dk, hv, dv, dtype, seed):
    q = torch.nn.functional.normalize(random((batch, steps, hk, dk), torch.float64, seed), dim=-1).to(dtype)
    k = torch.nn.functional.normalize(random((batch, steps, hk, dk), torch.float64, seed + 1), dim=-1).to(dtype)
    v = random((batch, steps, hv, dv), dtype, seed + 2)
    generator = torch.Generator().manual_seed(seed + 3)
    g = (torch.rand(batch, steps, hv, generator=generator, dtype=torch.float64) * 0.5 + 0.5).to(dtype)
    beta = torch.rand(batch, steps, hv, generator=generator, dtype=torch.float64).to(dtype)
    state = random((batch, hv, dv, dk), dtype, seed + 4, scale=0.1)
    return q, k, v, g, beta, state


def gated_delta_call(q, k, v, g, beta, state):
    result = H()
    with tensor_handles(q, k, v, g, beta, state) as handles:
        status = call("aoti_torch_mps_gated_delta_rule", *handles, ctypes.byref(result))
    return status, result


def check_gated_delta(q, k, v, g, beta, state, layout="contiguous"):
    from executorch.backends.apple.metal.ops.gated_delta_rule import gated_delta_rule as reference

    dtype = q.dtype
    q, k, v, state_in = (strided(t, layout) for t in (q, k, v, state))
    # what op_gated_delta_rule.mm reads: each operand as a dense buffer from its data pointer
    q_read, k_read, v_read = read_densely(q), read_densely(k), read_densely(v)
    expected_state = read_densely(state_in).clone()
    if q.shape[1]:  # ExecuTorch's own recurrence (float32, state mutated)
        expected = reference(q_read, k_read, v_read, g, beta, expected_state)
    else:  # which cannot stack no steps
        expected = torch.empty_like(v)
    status, result = gated_delta_call(q, k, v, g, beta, state_in)
    assert status == AOTI_TORCH_SUCCESS, last_error()
    y = steal(result)
    assert y.shape == v.shape and y.dtype == dtype and y.is_contiguous()
    # Both run the recurrence in float32 and round once; the orders of their sums differ.
    tolerance = {"rtol": 1e-5, "atol": 1e-5} if dtype == torch.float32 else {"rtol": 2 ** -7, "atol": 1e-4}
    torch.testing.assert_close(y, expected, equal_nan=True, **tolerance)
    # the state written back densely, whatever its strides
    torch.testing.assert_close(read_densely(state_in), expected_state, equal_nan=True, **tolerance)


@FEW_EXAMPLES
@given(dtype=st.sampled_from(METAL_DTYPES), batch=st.integers(1, 2), steps=st.integers(0, 3), seed=SEEDS,
       layout=LAYOUTS)
def test_gated_delta_rule_matches_executorchs_reference(dtype, batch, steps, seed, layout):
    check_gated_delta(*gated_delta_inputs(batch, steps, 4, 64, 4, 64, dtype, seed), layout=layout)


def test_gated_delta_rule_at_the_qwen_shape():
    check_gated_delta(*gated_delta_inputs(1, 2, 32, 128, 32, 128, torch.float32, 5))


@pytest.mark.parametrize("case, words", [
    ("dk", ("Dk=48 must be multiple of 32",)),
    ("no_kernel", ("Kernel not found: gated_delta_step_float_dk32_dv64_hk4_hv4",)),
    ("gqa_no_kernel", ("Kernel not found: gated_delta_step_float_dk64_dv64_hk2_hv4",)),
    ("float16", ("Unsupported dtype float16 of q",)),
    ("state_dtype", ("state is bfloat16 but q is float32", "reinterpret")),
    ("g_shape", ("g must be [B, T, Hv] = [1, 2, 4]",)),
    ("state_shape", ("state must be [B, Hv, Dv, Dk] = [1, 4, 64, 64]",)),
    ("k_shape", ("k must be [B, T, Hk, Dk] like q",)),
    ("rank", ("q/v must be 4D, state must be 4D",)),
])
def test_gated_delta_rule_refuses_what_upstream_refuses(case, words):
    q, k, v, g, beta, state = gated_delta_inputs(1, 2, 4, 64, 4, 64, torch.float32, 0)
    if case == "dk":
        q, k, state = q[..., :48], k[..., :48], state[..., :48]
    elif case == "no_kernel":
        q, k, state = q[..., :32], k[..., :32], state[..., :32]
    elif case == "gqa_no_kernel":
        q, k = q[:, :, :2], k[:, :, :2]
    elif case == "float16":
        q, k, v, g, beta, state = (t.half() for t in (q, k, v, g, beta, state))
    elif case == "state_dtype":
        state = state.bfloat16()
    elif case == "g_shape":
        g = g[..., :2]
    elif case == "state_shape":
        state = state[:, :2]
    elif case == "k_shape":
        k = k[:, :1]
    elif case == "rank":
        v = v[0]
    before = state.clone()
    status, result = gated_delta_call(q, k, v, g, beta, state)
    assert_fails(status, "aoti_torch_mps_gated_delta_rule: ", *words)
    assert result.value is None and torch.equal(state, before)


@pytest.mark.parametrize("n, diverges", [(4, False), (5, True), (7, True), (8, False)])
def test_gather_qmv_notes_upstreams_undefined_small_n_path_in_the_runtime(n, diverges):
    """In the runtime programs link, an N between 4 and 8 is a divergence (upstream's small-N path writes past its
    4-element result[] and races: op_gather_qmv.mm:270-300), which makes a program's verdict wrong."""
    from shimkit.runtime import program

    runtime = program.load_runtime(program.runtime_library(None))
    runtime.aoti_torch_mps_gather_qmv.argtypes = [H] * 5 + [ctypes.c_int64, ctypes.POINTER(H)]
    x, w = torch.ones(2, 32), torch.zeros(1, n, 16, dtype=torch.uint8)
    scales, biases, indices = torch.ones(1, n, 1), torch.zeros(1, n, 1), torch.zeros(2, dtype=torch.int32)
    handles = [program.tensor_handle(runtime, tensor) for tensor in (x, w, scales, biases, indices)]
    result = H()
    program.take_divergences(runtime)
    try:
        assert runtime.aoti_torch_mps_gather_qmv(*handles, 32, ctypes.byref(result)) == 0, program.take_failure(runtime)
        met = program.take_divergences(runtime)
        assert torch.equal(program.tensor_from_handle(runtime, result.value), torch.zeros(2, n))
    finally:
        for handle in (*handles, result.value):
            if handle:
                runtime.aoti_torch_delete_tensor_object(handle)
    assert [symbol for symbol, _, _ in met] == (["aoti_torch_mps_gather_qmv"] if diverges else [])
    if diverges:
        assert "small-N path" in met[0][1] and met[0][2] == f"N = {n}"

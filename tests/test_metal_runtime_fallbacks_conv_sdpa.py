"""The Linux Metal runtime's CPU fallback kernels for convolution and attention (runtime/native/fallbacks/),
called by their C symbols with real AtenTensorHandles, against torch; how the library is built and numbers
judged: tests/fallback_helpers.py."""

from __future__ import annotations

import ctypes
import math

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from fallback_helpers import (F64, FEW_EXAMPLES, H, LAYOUTS, METAL_DTYPES, SEEDS, U32, UNIT_ROUNDOFF, assert_fails,
                              assert_rounded_once, call, int_array, last_error, library, optional, random,
                              read_densely, steal, strided)
from shimkit.testing.kernels import AOTI_TORCH_SUCCESS, tensor_handles


@pytest.fixture(scope="module", autouse=True)
def _built():
    library()  # built before any hypothesis example runs


# ---------------------------------------------------------------------------------------------- convolution


def conv_call(input_, weight, bias, stride, padding, dilation, groups, *, transposed=0, bias_pointer="handle"):
    result = H()
    tensors_ = [input_, weight] + ([bias] if bias is not None else [])
    with tensor_handles(*tensors_) as handles:
        if bias is not None:
            bias_argument = optional(handles[2])
        else:
            bias_argument = None if bias_pointer == "null" else optional(None)
        status = call("aoti_torch_mps_convolution", handles[0], handles[1], bias_argument,
                      int_array(stride), len(stride), int_array(padding), len(padding), int_array(dilation),
                      len(dilation), transposed, int_array([0] * len(stride)), len(stride), groups,
                      ctypes.byref(result))
    return status, result


@FEW_EXAMPLES
@given(data=st.data(), dtype=st.sampled_from(METAL_DTYPES), spatial=st.integers(1, 3), batched=st.booleans(),
       groups=st.integers(1, 2), has_bias=st.booleans(), layout=LAYOUTS, seed=SEEDS, specials=st.booleans())
def test_convolution_matches_torch(data, dtype, spatial, batched, groups, has_bias, layout, seed, specials):
    batch = data.draw(st.integers(0 if batched else 1, 2))
    group_in, group_out = data.draw(st.integers(0, 2)), data.draw(st.integers(1, 2))
    kernel = [data.draw(st.integers(1, 3)) for _ in range(spatial)]
    given_values = 1 if data.draw(st.booleans()) else spatial  # one value stands for every dim, as in ATen
    stride = [data.draw(st.integers(1, 2)) for _ in range(given_values)]
    padding = [data.draw(st.integers(0, 2)) for _ in range(given_values)]
    dilation = [data.draw(st.integers(1, 2)) for _ in range(given_values)]
    # Spatial sizes the dilated kernel fits into once padded.
    sizes = [max(1, dilation[i % given_values] * (kk - 1) + 1 - 2 * padding[i % given_values]
                 + data.draw(st.integers(0, 3))) for i, kk in enumerate(kernel)]
    input_ = random((batch, group_in * groups, *sizes), dtype, seed)
    weight = random((group_out * groups, group_in, *kernel), dtype, seed + 1)
    bias = random((group_out * groups,), dtype, seed + 2) if has_bias else None
    if specials and input_.numel():
        flat = input_.view(-1)
        flat[data.draw(st.integers(0, flat.numel() - 1))] = data.draw(st.sampled_from((math.nan, math.inf, -math.inf)))
    given_input = strided(input_ if batched else input_[0], layout)
    # Not 'sliced': read densely, its NaN filler would be weights, and whether a NaN weight reaches the outputs of
    # padded positions (ATen multiplies the padding's zeros by it) is MPSGraph's to say, not this test's.
    given_weight = strided(weight, data.draw(LAYOUTS.filter(lambda how: how != "sliced")))
    # What op_convolution.mm computes: each operand's memory read as a contiguous NCHW / OIHW buffer of its sizes.
    read_input = read_densely(given_input) if batched else read_densely(given_input)[None]
    read_weight = read_densely(given_weight)
    arguments = (stride, padding, dilation, False, [0] * given_values, groups)
    expected = torch.convolution(read_input, read_weight, None, *arguments)
    exact = torch.convolution(read_input.double(), read_weight.double(), None, *arguments)
    magnitude = torch.convolution(read_input.double().abs(), read_weight.double().abs(), None, *arguments)
    if not batched:
        expected, exact, magnitude = expected[0], exact[0], magnitude[0]
    status, result = conv_call(given_input, given_weight, bias, stride, padding, dilation, groups,
                               bias_pointer=data.draw(st.sampled_from(["null", "handle"])))
    if spatial == 3:
        assert_fails(status, "conv2d expects 3D or 4D input", "no 3-D path")
        return
    if batch == 0:
        assert_fails(status, "Invalid output dimensions N=0", "refuses an empty batch")
        return
    out_channels = group_out * groups
    if bias is not None and out_channels != 1 and exact.shape[-1] != out_channels:
        assert_fails(status, "does not broadcast against the result's last dimension")
        return
    assert status == AOTI_TORCH_SUCCESS, last_error()
    output = steal(result)
    assert output.is_contiguous() and output.dtype == dtype
    taps = group_in * math.prod(kernel)
    bound = (taps + 3) * U32 * magnitude
    if bias is not None:  # MPSGraph's broadcasting addition, a second rounding: along the last dim (op_convolution.mm)
        exact = exact + bias.double() if out_channels != 1 else exact + bias.double().view(-1, *[1] * spatial)
        expected = expected + bias if out_channels != 1 else expected + bias.view(-1, *[1] * spatial)
        magnitude = magnitude + bias.double().abs()
        bound = bound + UNIT_ROUNDOFF[dtype] * magnitude
    # NaN and inf where float64 has them: ATen's bfloat16 CPU convolution spreads a NaN to outputs whose window
    # holds none (found by hypothesis: a NaN at input[0, 0, 1] gave NaN at output [0, 0, 0] too).
    assert_rounded_once(output, exact, bound, pattern=exact if dtype == torch.bfloat16 else expected)


def test_convolution_adds_the_bias_along_the_last_dimension_as_op_convolution_mm():
    """MPSGraph's broadcasting addition aligns the [C_out] bias with the last dimension of the NCHW result: where
    W_out == C_out, column w gets bias[w] whatever its channel (op_convolution.mm:335-348)."""
    input_, weight = random((1, 2, 3, 4), torch.float32, 1), random((4, 2, 1, 1), torch.float32, 2)
    bias = torch.tensor([1.0, 10.0, 100.0, 1000.0])
    status, result = conv_call(input_, weight, bias, [1], [0], [1], 1)
    assert status == AOTI_TORCH_SUCCESS, last_error()
    convolved = torch.convolution(input_, weight, None, [1], [0], [1], False, [0], 1)
    torch.testing.assert_close(steal(result), convolved + bias, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("bias", [None, torch.arange(4.0)])
def test_convolution_of_zero_input_channels_has_zero_channels_as_in_aten(bias):
    input_, weight = torch.ones(2, 0, 5), torch.ones(4, 0, 2)
    status, result = conv_call(input_, weight, bias, [1], [0], [1], 1)
    assert status == AOTI_TORCH_SUCCESS, last_error()
    expected = torch.convolution(input_, weight, bias, [1], [0], [1], False, [0], 1)
    assert steal(result).shape == expected.shape == (2, 0, 4)  # ATen's (and its meta function's) shape


@pytest.mark.parametrize("case, words", [
    ("transposed", ("transposed convolution is not supported",)),
    ("float16", ("input has dtype float16",)),
    ("weight_dtype", ("weight is bfloat16", "input is float32")),
    ("channels", ("expects input to have 4 channels", "has 3")),
    ("groups", ("divisible by groups=3",)),
    ("bias", ("bias must be 1-D with 4 elements",)),
    ("stride_len", ("expected stride to be a single integer value or a list of 2 values",)),
    ("stride_zero", ("stride must be positive",)),
    ("padding_negative", ("padding must be non-negative",)),
    ("too_small", ("smaller than the dilated kernel size",)),
    ("weight_rank", ("weight must be 3-D, 4-D or 5-D",)),
    ("three_d", ("conv2d expects 3D or 4D input, got 5",)),
    ("empty_batch", ("Invalid output dimensions N=0, C_out=4, H_out=3, W_out=3",)),
    ("bias_axis", ("bias of 4 elements does not broadcast against the result's last dimension of 3",)),
    ("input_rank", ("input must be 3-D or 4-D",)),
    ("empty_spatial", ("empty in a non-batch dimension",)),
    ("overlapping", ("input float32[1, 4, 5, 5] strides [20, 5, 0, 1] spans fewer elements than op_convolution.mm "
                     "reads from it as a contiguous NCHW buffer",)),
])
def test_convolution_errors_name_the_argument(case, words):
    input_, weight, bias = torch.ones(1, 4, 5, 5), torch.ones(4, 4, 3, 3), None
    stride, padding, dilation, groups, transposed = [1, 1], [0, 0], [1, 1], 1, 0
    if case == "transposed":
        transposed = 1
    elif case == "float16":
        input_, weight = input_.half(), weight.half()
    elif case == "weight_dtype":
        weight = weight.bfloat16()
    elif case == "channels":
        input_ = torch.ones(1, 3, 5, 5)
    elif case == "groups":
        groups = 3
        weight = torch.ones(4, 1, 3, 3)
        input_ = torch.ones(1, 3, 5, 5)
    elif case == "bias":
        bias = torch.ones(3)
    elif case == "stride_len":
        stride = [1, 1, 1]
    elif case == "stride_zero":
        stride = [0, 1]
    elif case == "padding_negative":
        padding = [-1, 0]
    elif case == "too_small":
        input_ = torch.ones(1, 4, 2, 5)
    elif case == "weight_rank":
        weight = torch.ones(4, 4)
    elif case == "three_d":
        input_, weight = torch.ones(1, 4, 5, 5, 5), torch.ones(4, 4, 3, 3, 3)
        stride, padding, dilation = [1, 1, 1], [0, 0, 0], [1, 1, 1]
    elif case == "empty_batch":
        input_ = torch.ones(0, 4, 5, 5)
    elif case == "bias_axis":
        bias = torch.ones(4)
    elif case == "input_rank":
        input_ = torch.ones(4, 5)
    elif case == "empty_spatial":
        input_ = torch.ones(1, 4, 0, 5)
        padding = [2, 0]
    elif case == "overlapping":  # read densely, as upstream reads it, an expanded view runs past its memory
        input_ = torch.ones(1, 4, 1, 5).expand(1, 4, 5, 5)
    status, result = conv_call(input_, weight, bias, stride, padding, dilation, groups, transposed=transposed)
    assert_fails(status, "aoti_torch_mps_convolution: ", *words)
    assert result.value is None


# ---------------------------------------------------------------------------------------------- sdpa


def sdpa_call(query, key, value, mask, *, is_causal=False, scale=None, enable_gqa=None, dropout_p=0.0,
              dropout_mask=None):
    out, weights = H(), H()
    extra = [m for m in (mask, dropout_mask) if m is not None]
    with tensor_handles(query, key, value, *extra) as handles:
        mask_handle = handles[3] if mask is not None else None
        dropout_handle = handles[-1] if dropout_mask is not None else None
        scale_argument = ctypes.byref(F64(scale)) if scale is not None else None
        args = [handles[0], handles[1], handles[2], optional(mask_handle), dropout_p, int(is_causal),
                optional(dropout_handle), scale_argument]
        if enable_gqa is None:
            status = call("aoti_torch_mps__scaled_dot_product_attention_math_for_mps", *args, ctypes.byref(out),
                          ctypes.byref(weights))
        else:
            status = call("aoti_torch_mps__scaled_dot_product_attention_math_for_mps_v2", *args, int(enable_gqa),
                          ctypes.byref(out), ctypes.byref(weights))
    return status, out, weights


def every_other_position(tensor: torch.Tensor) -> torch.Tensor:
    """The same [B, H, S, D] values at every other position of a NaN-filled buffer, at an offset."""
    batch, heads, length, dim = tensor.shape
    buffer = torch.full((batch, heads, 2 * length + 1, dim), math.nan, dtype=tensor.dtype)
    view = buffer[:, :, 1::2]
    view.copy_(tensor)
    return view


def bshd(tensor: torch.Tensor) -> torch.Tensor:
    """The same [B, H, S, D] values stored as [B, S, H, D] (a transpose of dims 1 and 2), as models keep them."""
    return tensor.transpose(1, 2).contiguous().transpose(1, 2)


def upstream_mask(mask: torch.Tensor, batch: int, heads: int, q_length: int, kv_length: int) -> torch.Tensor:
    """The [B, H, Q, N] mask values op_sdpa.mm reads: its last three dims' strides (0 where a dim has size 1), the
    batch and heads flattened into one index times the third-last dim's stride."""
    def stride_of(from_end):
        return mask.stride(-from_end) if mask.dim() >= from_end and mask.shape[-from_end] > 1 else 0
    read = mask.as_strided((batch * heads, q_length, kv_length), (stride_of(3), stride_of(2), stride_of(1)),
                           mask.storage_offset())
    return read.reshape(batch, heads, q_length, kv_length)


def upstream_attention(query, key, value, mask, *, is_causal, scale):
    """What op_sdpa.mm's kernel computes, in float64: a key is used only where its mask value is > -1e9 and, with
    is_causal, where j <= N - Q + i as unsigned 32-bit; a query without a used key is NaN; GQA by h // (Hq / Hkv)."""
    batch, heads, q_length, head_dim = query.shape
    kv_length = key.shape[2]
    heads_of = torch.arange(heads) // (heads // key.shape[1])
    k, v = key.double().expand(batch, -1, -1, -1)[:, heads_of], value.double().expand(batch, -1, -1, -1)[:, heads_of]
    factor = scale if scale is not None else 1 / math.sqrt(head_dim)
    scores = factor * query.double() @ k.mT
    used = torch.ones(batch, heads, q_length, kv_length, dtype=torch.bool)
    read_mask = None
    if mask is not None:
        read_mask = upstream_mask(mask, batch, heads, q_length, kv_length).double()
        used &= read_mask > -1e9
        scores = scores + read_mask
    if is_causal:
        ends = torch.tensor([(kv_length - q_length + i) % 2 ** 32 for i in range(q_length)], dtype=torch.int64)
        used &= torch.arange(kv_length).view(1, -1) <= ends.view(-1, 1)
    weights = scores.masked_fill(~used, -math.inf).softmax(-1).masked_fill(~used, 0.0)
    unused_row = ~used.any(-1, keepdim=True)
    out = (weights @ v).masked_fill(unused_row, math.nan)  # no key at all (an empty N included)
    return out, weights.masked_fill(unused_row, math.nan), read_mask


@FEW_EXAMPLES
@given(data=st.data(), dtype=st.sampled_from(METAL_DTYPES), batch=st.integers(1, 2), heads=st.sampled_from((1, 2, 4)),
       q_length=st.integers(0, 4), kv_length=st.integers(0, 5), head_dim=st.sampled_from((64, 96)), seed=SEEDS,
       v2=st.booleans(), mask_kind=st.sampled_from(["none", "causal", "full", "rows", "per_batch", "per_head"]))
def test_sdpa_computes_what_op_sdpa_mm_computes(data, dtype, batch, heads, q_length, kv_length, head_dim, seed, v2,
                                                mask_kind):
    kv_heads = data.draw(st.sampled_from([h for h in (1, 2, 4) if heads % h == 0]))
    key = random((batch, kv_heads, kv_length, head_dim), dtype, seed + 1)
    value = random((batch, kv_heads, kv_length, head_dim), dtype, seed + 2)
    if data.draw(st.booleans()):  # one batch of keys shared by every query batch, as an expanded (stride 0) view
        key, value = key[:1].expand_as(key), value[:1].expand_as(value)
    query = random((batch, heads, q_length, head_dim), dtype, seed)
    mask = None
    mask_shape = {"full": (batch, heads, q_length, kv_length), "rows": (q_length, kv_length),
                  "per_batch": (batch, 1, q_length, kv_length), "per_head": (heads, 1, kv_length)}.get(mask_kind)
    if mask_shape is not None:
        mask = random(mask_shape, dtype, seed + 3)
        hidden = torch.rand(mask_shape, generator=torch.Generator().manual_seed(seed + 4)) < 0.3
        mask = mask.masked_fill(hidden, -math.inf)  # whole rows masked out included, now and then
    scale = data.draw(st.sampled_from((None, 0.3)))
    is_causal = mask_kind == "causal"
    q_in = data.draw(st.sampled_from([query, bshd(query)]))
    k_in = data.draw(st.sampled_from([key, bshd(key), every_other_position(key)]))
    status, out_handle, weights_handle = sdpa_call(q_in, k_in, bshd(value), mask, is_causal=is_causal, scale=scale,
                                                   enable_gqa=(kv_heads != heads) if v2 else None)
    if mask_kind == "per_head" and batch > 1 and heads > 1 and q_length * kv_length > 0:
        # [H, 1, N] addressed by batch * heads + head: batch 1 would be read past the mask's end
        assert_fails(status, "attn_mask", "would be read past its end", "batch and heads flattened")
        return
    assert status == AOTI_TORCH_SUCCESS, last_error()
    out, weights = steal(out_handle), steal(weights_handle)
    assert out.shape == (batch, heads, q_length, head_dim) and weights.shape == (batch, heads, q_length, kv_length)
    assert out.dtype == weights.dtype == dtype and out.is_contiguous() and weights.is_contiguous()
    assert weights.isnan().all()  # allocated, never written: the poison shows any read
    exact_out, exact_weights, read_mask = upstream_attention(query, key, value, mask, is_causal=is_causal, scale=scale)
    _, out_bound = sdpa_error_bounds(query, key, value, read_mask, exact_weights.nan_to_num(0.0), scale)
    assert_rounded_once(out, exact_out, out_bound, what="output")


def sdpa_error_bounds(query, key, value, mask, exact_weights, scale):
    """What float32 arithmetic may change in the weights and the output: an error e_j in score j moves
    weight j by at most w_j (2 max_j e_j) plus the roundings of exp, the sum and the division."""
    q, k, v = query.double(), key.double(), value.double()
    repeat = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(repeat, 1), v.repeat_interleave(repeat, 1)  # kv heads of each query head
    head_dim, kv_length = q.shape[-1], k.shape[-2]
    factor = scale if scale is not None else 1 / math.sqrt(head_dim)
    scores = factor * q.abs() @ k.abs().mT
    score_error = (head_dim + 3) * U32 * scores
    if mask is not None:
        score_error = score_error + U32 * (scores + mask.double().abs().nan_to_num(posinf=0.0))
    row_error = score_error.amax(-1, keepdim=True) if kv_length else score_error.sum(-1, keepdim=True)
    relative = 2 * row_error + (kv_length + 4) * U32
    return exact_weights * relative, (exact_weights @ v.abs()) * (relative + (kv_length + 2) * U32)


def test_sdpa_skips_masked_keys_and_gives_nan_where_no_key_is_left_as_op_sdpa_mm_does():
    query = random((1, 1, 4, 64), torch.float32, 7)
    key = random((1, 1, 4, 64), torch.float32, 8)
    value = random((1, 1, 4, 64), torch.float32, 9)
    key[0, 0, 3, 5] = math.nan     # masked out in every row: never reaches one (ATen's rows would all be NaN)
    mask = torch.zeros(4, 4)
    mask[:, 3] = -math.inf
    mask[2] = -math.inf            # a fully masked row
    mask[3] = -1e9                 # masked at -1e9, finite: a softmax in ATen, no key at all upstream
    status, out_handle, weights_handle = sdpa_call(query, key, value, mask)
    assert status == AOTI_TORCH_SUCCESS, last_error()
    out = steal(out_handle)
    steal(weights_handle)
    assert out[0, 0, 2:].isnan().all()
    expected, _ = torch.ops.aten._scaled_dot_product_attention_math(query[:, :, :2], key[:, :, :3], value[:, :, :3])
    torch.testing.assert_close(out[:, :, :2], expected, rtol=1e-5, atol=1e-5)


def test_sdpa_causal_is_bottom_right_aligned_as_op_sdpa_mm():
    query = random((1, 2, 3, 64), torch.float32, 1)
    key = random((1, 2, 5, 64), torch.float32, 2)
    value = random((1, 2, 5, 64), torch.float32, 3)
    status, out_handle, weights_handle = sdpa_call(query, key, value, None, is_causal=True)
    assert status == AOTI_TORCH_SUCCESS, last_error()
    out = steal(out_handle)
    steal(weights_handle)
    future = torch.arange(5).view(1, 5) > torch.arange(3).view(3, 1) + 2  # query i sees keys 0..i + 5 - 3
    mask = torch.zeros(3, 5).masked_fill(future, -math.inf)
    expected, _ = torch.ops.aten._scaled_dot_product_attention_math(query, key, value, mask)
    torch.testing.assert_close(out, expected, rtol=1e-5, atol=1e-5)
    top_left, _ = torch.ops.aten._scaled_dot_product_attention_math(query, key, value, is_causal=True)
    assert not torch.allclose(out, top_left, atol=1e-3)


def test_sdpa_flattens_a_per_batch_mask_as_op_sdpa_mm_does():
    """[B, 1, Q, N]: op_sdpa.mm's head stride is 0 for the size-1 heads dim, so every batch reads batch 0's mask."""
    query, key, value = (random((2, 2, 3, 64), torch.float32, s) for s in (1, 2, 3))
    mask = torch.zeros(2, 1, 3, 4)
    key, value = key[:, :, :1].expand(2, 2, 4, 64).contiguous() + random((2, 2, 4, 64), torch.float32, 4), \
        random((2, 2, 4, 64), torch.float32, 5)
    mask[1, :, :, 0] = -math.inf  # batch 1 hides key 0; upstream never reads it
    status, out_handle, weights_handle = sdpa_call(query, key, value, mask)
    assert status == AOTI_TORCH_SUCCESS, last_error()
    out = steal(out_handle)
    steal(weights_handle)
    as_batch_0, _ = torch.ops.aten._scaled_dot_product_attention_math(query, key, value, mask[:1].expand_as(mask))
    torch.testing.assert_close(out, as_batch_0, rtol=1e-5, atol=1e-5)
    per_batch, _ = torch.ops.aten._scaled_dot_product_attention_math(query, key, value, mask)
    assert not torch.allclose(out, per_batch, atol=1e-3)


@pytest.mark.parametrize("case, words", [
    ("dropout", ("dropout_p=0.1", "not supported")),
    ("dropout_mask", ("dropout_mask is not supported",)),
    ("head_dim", ("query has head_dim 32", "64, 96, 128 and 256")),
    ("value_head_dim", ("value has head_dim 128",)),
    ("float16", ("query has dtype float16",)),
    ("key_dtype", ("key is bfloat16",)),
    ("bool_mask", ("attn_mask has dtype bool",)),
    ("mask_shape", ("attn_mask of shape [3, 4] does not broadcast",)),
    ("mask_and_causal", ("attn_mask must not be given with is_causal",)),
    ("gqa_multiple", ("not a multiple of key's 3",)),
    ("kv_batch", ("key float32[1, 4, 5, 64]", "has batch 1 under query's batch 2", "past its end")),
    ("rank", ("query must be 4-D",)),
    ("last_stride", ("key must have a unit stride along head_dim",)),
])
def test_sdpa_errors_name_the_argument(case, words):
    query, key, value = torch.ones(1, 4, 3, 64), torch.ones(1, 4, 5, 64), torch.ones(1, 4, 5, 64)
    mask, kwargs = None, {}
    if case == "dropout":
        kwargs["dropout_p"] = 0.1
    elif case == "dropout_mask":
        kwargs["dropout_mask"] = torch.ones(1, 4, 3, 5)
    elif case == "head_dim":
        query, key, value = query[..., :32], key[..., :32], value[..., :32]
    elif case == "value_head_dim":
        value = torch.ones(1, 4, 5, 128)
    elif case == "float16":
        query, key, value = query.half(), key.half(), value.half()
    elif case == "key_dtype":
        key = key.bfloat16()
    elif case == "bool_mask":
        mask = torch.ones(3, 5, dtype=torch.bool)
    elif case == "mask_shape":
        mask = torch.ones(3, 4)
    elif case == "mask_and_causal":
        mask, kwargs["is_causal"] = torch.zeros(3, 5), True
    elif case == "kv_batch":
        query = torch.ones(2, 4, 3, 64)
    elif case == "gqa_multiple":
        key, value, kwargs["enable_gqa"] = torch.ones(1, 3, 5, 64), torch.ones(1, 3, 5, 64), True
    elif case == "rank":
        query = query[0]
    elif case == "last_stride":
        key = torch.ones(1, 4, 5, 128)[..., ::2]
    status, out, weights = sdpa_call(query, key, value, mask, **kwargs)
    symbol = "aoti_torch_mps__scaled_dot_product_attention_math_for_mps" + ("_v2" if "enable_gqa" in kwargs else "")
    assert_fails(status, symbol + ": ", *words)
    assert out.value is None and weights.value is None

"""The SDK's matrix product (csrc/sdk/matrix_product.cpp), behind the Metal runtime's mm, bmm, addmm, the 4-bit
linear and gather_qmv: every element is the float32 sum over k in order, from 0, of one fused multiply-add per term,
to the bit, on every instruction set the product is compiled for (AVX-512, AVX2 with FMA, portable std::fma) and on
any number of threads, at sizes that cross its register tiles and its packed blocks (256 steps of k, 2048 columns).

The reference is written independently here: a float32 fused multiply-add computed exactly in float64 (the product of
two floats is exact there; the sum is rounded to odd, then to float32, which rounds the exact value once)."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from fallback_helpers import FEW_EXAMPLES, METAL_DTYPES, SEEDS, call, last_error, library, random, steal, strided
from shimkit.testing.kernels import AOTI_TORCH_SUCCESS, tensor_handles
from test_metal_runtime_fallbacks_conv_sdpa import conv_call

ISAS = ("", "avx2", "portable")  # "" is the widest the CPU runs; the others fall back where a CPU lacks them


def fma32(x: torch.Tensor, y: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
    """float32 x * y + z rounded once, elementwise (broadcasting), for finite float32 operands."""
    product = x.double() * y.double()  # exact: 48 significant bits
    addend = z.double()
    total = product + addend
    # TwoSum: the exact rounding error of the float64 sum.
    back = total - product
    error = (product - (total - back)) + (addend - back)
    # Round to odd: an inexact sum takes the odd one of its two float64 neighbours, so rounding that to float32
    # (24 bits, fewer than 53 - 1) is the single rounding of the exact value.
    even = (total.view(torch.int64) & 1) == 0
    toward = torch.where(error > 0, torch.full_like(total, float("inf")), torch.full_like(total, float("-inf")))
    total = torch.where((error != 0) & even, torch.nextafter(total, toward), total)
    return total.float()


def sequential_fma_product(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """a @ b ([..., m, k] @ [..., k, n]) as the fallbacks document it: float32, k in order from 0, fused terms."""
    a, b = a.float(), b.float()
    acc = torch.zeros((*a.shape[:-1], b.shape[-1]), dtype=torch.float32)
    for p in range(a.shape[-1]):
        acc = fma32(a[..., p:p + 1], b[..., p:p + 1, :], acc)
    return acc


def mm(out: torch.Tensor, a: torch.Tensor, b: torch.Tensor) -> None:
    with tensor_handles(out, a, b) as handles:
        assert call("aoti_torch_mps_mm_out", *handles) == AOTI_TORCH_SUCCESS, last_error()


def bmm(out: torch.Tensor, a: torch.Tensor, b: torch.Tensor) -> None:
    with tensor_handles(out, a, b) as handles:
        assert call("aoti_torch_mps_bmm_out", *handles) == AOTI_TORCH_SUCCESS, last_error()


def setup_module():
    library()  # built before any hypothesis example runs


@FEW_EXAMPLES
@given(m=st.integers(1, 20), k=st.sampled_from([0, 1, 7, 40, 255, 256, 257, 600]), n=st.integers(1, 70),
       dtype=st.sampled_from(METAL_DTYPES), transposed=st.booleans(), seed=SEEDS)
def test_mm_is_the_sequential_fused_sum_on_every_instruction_set(m, k, n, dtype, transposed, seed):
    a, b = random((m, k), dtype, seed), random((k, n), dtype, seed + 1)
    b = strided(b, "transposed" if transposed else "contiguous")  # a linear layer's weight is the transposed case
    expected = sequential_fma_product(a, b).to(dtype)
    for isa in ISAS:
        out = torch.full((m, n), float("nan"), dtype=dtype)
        with pytest.MonkeyPatch.context() as patch:
            patch.setenv("SHIMKIT_CPU_ISA", isa)
            mm(out, a, b)
        assert torch.equal(out, expected), f"{isa or 'widest'}: {(out.double() - expected.double()).abs().max()}"


@FEW_EXAMPLES
@given(batch=st.integers(1, 4), m=st.integers(1, 13), k=st.integers(1, 300), n=st.integers(1, 40),
       dtype=st.sampled_from(METAL_DTYPES), seed=SEEDS)
def test_bmm_is_the_sequential_fused_sum_per_matrix(batch, m, k, n, dtype, seed):
    a, b = random((batch, m, k), dtype, seed), random((batch, k, n), dtype, seed + 1)
    expected = sequential_fma_product(a, b).to(dtype)
    for isa in ISAS:
        out = torch.empty((batch, m, n), dtype=dtype)
        with pytest.MonkeyPatch.context() as patch:
            patch.setenv("SHIMKIT_CPU_ISA", isa)
            bmm(out, a, b)
        assert torch.equal(out, expected), f"{isa or 'widest'}: {(out.double() - expected.double()).abs().max()}"


def test_threads_and_blocks_never_change_a_bit(monkeypatch):
    """Large enough for several threads, several packed column blocks (2048 columns) and row blocks (192 rows):
    every split gives the bits one thread gives, and the reference's."""
    a, b = random((200, 300), torch.float32, 1), random((300, 2100), torch.float32, 2)
    expected = sequential_fma_product(a, b)
    for threads in ("1", "3", "8"):
        monkeypatch.setenv("SHIMKIT_CPU_THREADS", threads)
        out = torch.empty((200, 2100))
        mm(out, a, b)
        assert torch.equal(out, expected), f"{threads} threads"


@FEW_EXAMPLES
@given(channels_in=st.integers(1, 5), channels_out=st.integers(2, 5), height=st.integers(2, 6),
       width=st.integers(3, 40), kernel=st.integers(1, 4), stride=st.integers(1, 3), padding=st.integers(0, 2),
       non_finite_weight=st.booleans(), dtype=st.sampled_from(METAL_DTYPES), seed=SEEDS)
def test_convolution_is_the_sequential_fused_sum_of_its_taps(channels_in, channels_out, height, width, kernel, stride,
                                                              padding, non_finite_weight, dtype, seed):
    """Lowered to matrix products (finite weights) or summed directly (a non-finite weight anywhere), every output
    is its taps' fused sum in order (input channel, then kernel rows and columns), padded taps adding nothing: the
    reference unfolds the input with zeros there, which only a non-finite weight would tell from skipping them."""
    x = random((1, channels_in, height, width), dtype, seed)
    weight = random((channels_out, channels_in, 2, kernel), dtype, seed + 1)
    if non_finite_weight:
        weight[0, 0, 0, 0] = float("inf")  # channel 0 is then left out of the comparison
    unfolded = torch.nn.functional.unfold(x.float(), (2, kernel), padding=(1, padding), stride=(1, stride))[0]
    out_height, out_width = height + 1, (width + 2 * padding - kernel) // stride + 1
    expected = sequential_fma_product(weight.float().reshape(channels_out, -1), unfolded).to(dtype)
    status, result = conv_call(x, weight, None, [1, stride], [1, padding], [1, 1], 1)
    assert status == AOTI_TORCH_SUCCESS, last_error()
    got = steal(result).reshape(channels_out, out_height * out_width)
    first = 1 if non_finite_weight else 0
    assert torch.equal(got[first:], expected[first:]), (got[first:].double() - expected[first:].double()).abs().max()

"""Public MSL kernels from a real project, run through shimkit.metal and checked against that project's
own results: the Metal kernels of PyTorch's MPS backend that torch ships as headers
(``torch/include/ATen/native/mps/kernels/``, read from the installed torch 2.13.0, the same files as
pytorch/pytorch at the v2.13.0 tag):

* ``SortMerge.h`` ``sort_block``: one threadgroup sorts a row in threadgroup memory (SIMD bitonic
  networks, then merges); checked against ``torch.sort`` (stable: the indices too, NaN last);
* ``SortMerge.h`` ``mb_sort_block`` + ``mb_merge``: rows longer than a threadgroup, sorted per block and
  merged pass by pass, the buffers ping-ponged as ATen's host code does; checked against ``torch.sort``;
* ``DecodeAttention.h`` ``sdpa_vector`` (adapted by PyTorch from MLX's scaled_dot_product_attention.metal):
  decode attention with one 1024-thread group per (batch, head, query); checked against
  ``F.scaled_dot_product_attention``, with grouped-query heads and causal masking.

The kernels are included from the installed torch, as ``torch.mps.compile_shader`` resolves includes; this
repository holds only the instantiations and the calls.
"""

from __future__ import annotations

import functools
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

from shimkit.metal import compile_shader

PRELUDE = "#include <c10/metal/utils.h>\n#include <metal_stdlib>\nusing namespace metal;\n"


KERNEL_HEADERS = Path(torch.__file__).parent / "include" / "ATen" / "native" / "mps" / "kernels"


def installed_kernels(header: str) -> str:
    """The source including ``header`` of the installed torch; a release that does not ship it (torch 2.11
    has neither header) has no such kernel to test."""
    if not (KERNEL_HEADERS / header).is_file():
        pytest.skip(f"torch {torch.__version__} does not ship ATen/native/mps/kernels/{header}")
    return f"{PRELUDE}#include <ATen/native/mps/kernels/{header}>\n"


@functools.lru_cache(maxsize=None)
def sort_library():
    return compile_shader(installed_kernels("SortMerge.h"))


@functools.lru_cache(maxsize=None)
def attention_library():
    return compile_shader(installed_kernels("DecodeAttention.h"))


TYPE_NAMES = {torch.float32: "float", torch.float16: "half", torch.int32: "int", torch.int64: "long"}
ROWS = st.integers(1, 4)
VALUES = st.floats(-50, 50, width=16) | st.sampled_from([float("nan"), float("inf"), -float("inf"), 0.0, -0.0])


def rows_of(dtype, rows, size, draw_values):
    data = torch.tensor(draw_values, dtype=torch.float32)[: rows * size].reshape(rows, size)
    return data.to(dtype) if dtype.is_floating_point else data.nan_to_num(0, 50, -50).to(dtype)


@settings(max_examples=25)
@given(st.sampled_from(list(TYPE_NAMES)), ROWS, st.integers(1, 128), st.booleans(), st.data())
def test_single_block_sort_matches_torch_sort(dtype, rows, size, descending, data):
    values = data.draw(st.lists(VALUES, min_size=rows * size, max_size=rows * size))
    x = rows_of(dtype, rows, size, values)
    out, indices = torch.empty_like(x), torch.empty(rows, size, dtype=torch.long)
    kernel = getattr(sort_library(), f"sort_block_{TYPE_NAMES[dtype]}_tptg32_stable")
    kernel(x, out, indices, size, [1, size], descending, threads=(32, rows), group_size=(32, 1),
           arg_casts={3: "int32"})
    expected = torch.sort(x, dim=-1, descending=descending, stable=True)
    torch.testing.assert_close(out, expected.values, equal_nan=True, rtol=0, atol=0)
    assert torch.equal(indices, expected.indices)


def multi_block_sort(x: torch.Tensor, descending: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """ATen's multi-block path for one row: sort 128-element blocks, then merge runs of doubling length."""
    lib = sort_library()
    size, tptg, per_group = x.numel(), 32, 128
    blocks = -(-size // per_group)
    values, indices = torch.empty_like(x), torch.empty(size, dtype=torch.int32)
    lib.mb_sort_block_float_tptg32_stable(x, values, indices, size, [1, size], descending,
                                          threads=(tptg * blocks, 1), group_size=(tptg, 1), arg_casts={3: "int32"})
    run = per_group
    while run < size:
        # Each merge group joins two runs into 2*run elements, merge_tiles threadgroups of 128 per group;
        # the grid's x covers the row's blocks, its y the rows.
        tiles = 2 * run // per_group
        last = 2 * run >= size
        out_values = torch.empty_like(values)
        out_indices = torch.empty(size, dtype=torch.long if last else torch.int32)
        kernel = lib.mb_merge_final_float_tptg32 if last else lib.mb_merge_float_tptg32
        kernel(values, indices, out_values, out_indices, [size, tiles, run], descending,
               threads=(tptg * blocks, 1), group_size=(tptg, 1), arg_casts={4: "int32"})
        values, indices, run = out_values, out_indices, run * 2
    return values, indices.long()


@pytest.mark.parametrize("size", [129, 300, 512, 1000])
@pytest.mark.parametrize("descending", [False, True])
def test_multi_block_sort_matches_torch_sort(size, descending):
    generator = torch.Generator().manual_seed(size)
    x = torch.randint(-20, 20, (size,), generator=generator).float()  # many ties: stability shows
    x[::37] = float("nan")
    values, indices = multi_block_sort(x, descending)
    expected = torch.sort(x, descending=descending, stable=True)
    torch.testing.assert_close(values, expected.values, equal_nan=True, rtol=0, atol=0)
    assert torch.equal(indices, expected.indices)


@pytest.mark.parametrize("dtype,tolerance", [(torch.float32, 2e-5), (torch.float16, 2e-3)])
@pytest.mark.parametrize("causal", [False, True])
def test_decode_attention_matches_scaled_dot_product_attention(dtype, tolerance, causal):
    batch, heads, kv_heads, queries, keys, dim = 2, 4, 2, 3, 70, 64
    generator = torch.Generator().manual_seed(7)
    q = torch.randn(batch, heads, queries, dim, generator=generator).to(dtype)
    k = torch.randn(batch, kv_heads, keys, dim, generator=generator).to(dtype)
    v = torch.randn(batch, kv_heads, keys, dim, generator=generator).to(dtype)
    out = torch.empty_like(q)
    scale = dim ** -0.5
    name = f"sdpa_vector_{TYPE_NAMES[dtype]}_{dim}_{dim}_masknone" + ("_causal" if causal else "")
    getattr(attention_library(), name)(
        q, k, v, out, heads // kv_heads, keys, [queries * dim, keys * dim, keys * dim], [dim, dim, dim], scale,
        torch.zeros(1), [0, 0, 0, 0], [heads * queries * dim, kv_heads * keys * dim, kv_heads * keys * dim, heads],
        threads=(batch * heads * 1024, queries), group_size=(1024, 1),
        arg_casts={index: "int32" for index in (4, 5, 6, 7, 10, 11)})  # uint, uint3, uint4 arguments
    k_full = k.float().repeat_interleave(heads // kv_heads, dim=1)
    v_full = v.float().repeat_interleave(heads // kv_heads, dim=1)
    # ATen's decode kernel masks key i for query row q when i > q (queries aligned to the first keys).
    mask = torch.arange(keys)[None, :] <= torch.arange(queries)[:, None] if causal else None
    expected = F.scaled_dot_product_attention(q.float(), k_full, v_full, attn_mask=mask, scale=scale)
    torch.testing.assert_close(out.float(), expected, rtol=tolerance, atol=tolerance)


def test_which_of_atens_kernels_run_split_into_loops_and_which_still_on_fibers():
    """Issue 30's census of PyTorch's MPS kernels: every decode-attention kernel (simdgroup reductions and
    barriers in the kernel's body) runs split; the sort kernels stay on fibers, each saying why: they are
    templates whose calls to the functions with barriers (sort_block_body, block_merge_sort,
    mb_merge_body) depend on their template parameters, which Clang resolves only per instantiation."""
    attention = attention_library().executions()
    assert attention and {execution for execution, _ in attention.values()} == {"split"}
    sort = sort_library().executions()
    assert len(sort) == 700 and {execution for execution, _ in sort.values()} == {"fibers"}
    callees = {why.split("it calls ")[1].split(",")[0] for _, why in sort.values()}
    assert callees == {"sort_block_body", "block_merge_sort", "mb_merge_body"}

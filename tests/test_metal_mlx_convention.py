"""shimkit.metal.metal_kernel: MLX's mx.fast.metal_kernel calling convention (mlx/fast.cpp's write_signature)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

# MLX is a test dependency here (requirements-dev.txt); the GPU machine's image has none (docs/cuda.md).
mx = pytest.importorskip("mlx.core")

from shimkit.metal import MetalKernelError, MetalSourceError, metal_kernel

GRID = (8, 1, 1)
GROUP = (4, 1, 1)


def test_the_signature_is_mlxs(capsys):
    kernel = metal_kernel(name="sig", input_names=["big", "small", "scale"], output_names=["out"],
                          source="uint i = thread_position_in_grid.x;\n"
                                 "out[i] = big[i] * scale + small[i % small_shape[0]] + big_ndim;")
    out, = kernel(inputs=[torch.arange(8.0), torch.ones(3), 2.0], grid=GRID, threadgroup=GROUP,
                  output_shapes=[(8,)], output_dtypes=[torch.float32], verbose=True)
    torch.testing.assert_close(out, torch.arange(8.0) * 2 + 1 + 1)
    printed = capsys.readouterr().out
    assert "const device float* big [[buffer(0)]]" in printed
    assert "const constant int& big_ndim [[buffer(1)]]" in printed
    assert "const constant float* small [[buffer(2)]]" in printed  # fewer than 8 elements: constant
    assert "const constant int* small_shape [[buffer(3)]]" in printed
    assert "const constant float& scale [[buffer(4)]]" in printed  # a Python float is a 0-d float32
    assert "device float* out [[buffer(5)]]" in printed
    assert "uint3 thread_position_in_grid [[thread_position_in_grid]]" in printed
    assert "custom_kernel_sig_float_floatc_floats_float" in printed  # MLX's kernel name


def test_template_arguments_are_written_as_mlx_writes_them(capsys):
    kernel = metal_kernel(name="tmpl", input_names=["x"], output_names=["y"],
                          source="uint i = thread_position_in_grid.x; y[i] = static_cast<T>(x[i] * N + (FLAG ? 1 : 0));")
    y, = kernel(inputs=[torch.arange(8, dtype=torch.int32)], template=[("T", torch.float16), ("N", 3), ("FLAG", True)],
                grid=GRID, threadgroup=GROUP, output_shapes=[(8,)], output_dtypes=[torch.float16], verbose=True)
    torch.testing.assert_close(y, (torch.arange(8) * 3 + 1).half())
    printed = capsys.readouterr().out
    assert "template <typename T, int N, bool FLAG>" in printed
    assert "<float16_t, 3, 1>" in printed


def test_strided_inputs_without_a_row_contiguous_copy_are_read_through_their_strides():
    source = """
        uint2 p = thread_position_in_grid.xy;
        out[p.y * x_shape[1] + p.x] = x[p.y * x_strides[0] + p.x * x_strides[1]];
    """
    x = torch.arange(12.0).reshape(3, 4).t()  # (4, 3), strides (1, 4)
    for contiguous in (True, False):
        kernel = metal_kernel(name="strided", input_names=["x"], output_names=["out"], source=source,
                              ensure_row_contiguous=contiguous)
        out, = kernel(inputs=[x], grid=(3, 4, 1), threadgroup=(2, 2, 1), output_shapes=[(4, 3)],
                      output_dtypes=[torch.float32])
        torch.testing.assert_close(out, x.contiguous())


def test_atomic_outputs_and_init_value_make_a_histogram():
    kernel = metal_kernel(name="hist", input_names=["values"], output_names=["counts"], atomic_outputs=True,
                          source="uint i = thread_position_in_grid.x;\n"
                                 "atomic_fetch_add_explicit(&counts[values[i]], 1, memory_order_relaxed);")
    values = torch.tensor([0, 1, 1, 3, 3, 3, 2, 1, 0, 3], dtype=torch.int32)
    counts, = kernel(inputs=[values], grid=(10, 1, 1), threadgroup=(4, 1, 1), output_shapes=[(5,)],
                     output_dtypes=[torch.int32], init_value=2)
    assert counts.tolist() == [4, 5, 3, 6, 2]


def test_mlx_arrays_in_give_mlx_arrays_out_in_every_float_dtype():
    kernel = metal_kernel(name="axpb", input_names=["x"], output_names=["y"],
                          source="uint i = thread_position_in_grid.x; y[i] = x[i] * T(2) + T(1);")
    for dtype in (mx.float32, mx.float16, mx.bfloat16):
        x = mx.arange(8).astype(dtype)
        y, = kernel(inputs=[x], template=[("T", dtype)], grid=GRID, threadgroup=GROUP, output_shapes=[(8,)],
                    output_dtypes=[dtype])
        assert isinstance(y, mx.array) and y.dtype == dtype
        np.testing.assert_array_equal(np.array(y.astype(mx.float32)), np.arange(8) * 2 + 1)


def test_an_empty_grid_launches_nothing():
    kernel = metal_kernel(name="nothing", input_names=["x"], output_names=["y"],
                          source="y[thread_position_in_grid.x] = x[0];")
    y, = kernel(inputs=[torch.ones(1)], grid=(0, 1, 1), threadgroup=GROUP, output_shapes=[(0,)],
                output_dtypes=[torch.float32])
    assert y.shape == (0,)


def test_bad_calls_are_refused_naming_the_kernel_and_argument():
    kernel = metal_kernel(name="k", input_names=["x"], output_names=["y"], source="y[0] = x[0];")
    call = dict(inputs=[torch.ones(8)], grid=GRID, threadgroup=GROUP, output_shapes=[(8,)],
                output_dtypes=[torch.float32])
    with pytest.raises(MetalKernelError, match=r"\[metal_kernel\] k: Expected `inputs` to have size 1 but got size 2"):
        kernel(**{**call, "inputs": [torch.ones(8), torch.ones(8)]})
    with pytest.raises(MetalKernelError, match=r"Thread group size \(2048\) is greater than"):
        kernel(**{**call, "threadgroup": (1024, 2, 1)})
    with pytest.raises(MetalKernelError, match="`grid` must be three non-negative ints"):
        kernel(**{**call, "grid": (8, 1)})
    with pytest.raises(MetalKernelError, match=r"input 'x' has dtype torch.float64"):
        kernel(**{**call, "inputs": [torch.ones(8, dtype=torch.float64)]})
    with pytest.raises(MetalKernelError, match=r"output_dtypes\[0\] 'complex' is not a dtype"):
        kernel(**{**call, "output_dtypes": ["complex"]})
    with pytest.raises(MetalKernelError, match="input_names entry 'x; y' is not an identifier"):
        metal_kernel(name="k", input_names=["x; y"], output_names=["y"], source="")
    with pytest.raises(MetalKernelError, match="Must specify at least one output"):
        metal_kernel(name="k", input_names=["x"], output_names=[], source="")
    texture = metal_kernel(name="tex", input_names=["x"], output_names=["y"],
                           source="texture2d<float> t; y[0] = x[0];")
    with pytest.raises(MetalSourceError, match="textures"):
        texture(**call)

"""PyTorch's own Metal-library tests, run through shimkit.metal on the CPU.

Ported from pytorch/pytorch ``aten/src/ATen/test/mps_test_metal_library.cpp`` (ShaderCreation,
SyntaxErrorThrows, ArangeShader, ArangeWithArgsShader, Arange2DShader; read at commit
364e8c19eb73d276ed6ba91ea9d7282a3eb4f923) and from the ``torch.mps.compile_shader`` tests of
``test/test_mps.py`` (arange in every dtype, 3-D dispatch, scalar arguments and ``arg_casts``, error
checking, including c10's Metal headers). The kernels are torch's; tensors live on the CPU, which is
where shimkit.metal runs them (torch's "a CPU tensor is refused" check becomes "a non-CPU tensor is").
"""

from __future__ import annotations

import pytest
import torch

from shimkit.metal import MetalCompileError, compile_shader


def test_shader_creation_of_an_empty_library():
    assert dir(compile_shader("// Empty library")) == []


def test_syntax_error_throws():
    with pytest.raises(SyntaxError):
        compile_shader("printf(x);")


def test_arange_shader():
    lib = compile_shader("""
    kernel void foo(device float* t, uint idx [[thread_position_in_grid]]) {
      t[idx] = idx;
    }
    """)
    x = torch.empty(10)
    lib.foo(x)
    assert torch.equal(x, torch.arange(10.0))


def test_arange_with_args_shader():
    lib = compile_shader("""
    kernel void foo(device float* t, constant float& start, constant float& step, uint idx [[thread_position_in_grid]]) {
      t[idx] = start + idx * step;
    }
    """)
    x = torch.empty(10)
    lib.foo(x, 0.25, 0.4)
    # torch compares with MPS's arange, which computes start + idx * step in float32 as the kernel does.
    start, step = torch.tensor(0.25), torch.tensor(0.4)
    assert torch.equal(x, start + torch.arange(10, dtype=torch.float32) * step)


def test_arange_2d_shader():
    lib = compile_shader("""
    kernel void full(device float* t, constant ulong2& strides, uint2 idx [[thread_position_in_grid]]) {
      t[idx.x*strides.x + idx.y*strides.y] = idx.x + 33.0 * idx.y;
    }
    """)
    x = torch.empty(16, 16)
    lib.full(x, list(x.stride()), threads=(16, 16))
    assert int(x.sum().item()) == 65280


@pytest.mark.parametrize("dtype,type_name", [(torch.float32, "float"), (torch.float16, "half"),
                                             (torch.bfloat16, "bfloat"), (torch.int32, "int"),
                                             (torch.int64, "long"), (torch.uint8, "uchar"),
                                             (torch.int16, "short")])
def test_metal_arange(dtype, type_name):
    x = torch.zeros(12, dtype=dtype)
    lib = compile_shader(f"""
    kernel void arange(device {type_name}* x, uint idx [[thread_position_in_grid]]) {{
        x[idx] = idx;
    }}
    """)
    lib.arange(x)
    assert torch.equal(x, torch.arange(x.numel(), dtype=dtype))


def test_metal_dispatch_3d():
    x, y, z = torch.empty(12), torch.empty(12), torch.empty(12)
    lib = compile_shader("""
    kernel void arange_x(device float* x, uint3 idx [[thread_position_in_grid]]) {
        x[idx.x + idx.y + idx.z] = idx.x;
    }
    kernel void arange_y(device float* x, uint3 idx [[thread_position_in_grid]]) {
        x[idx.x + idx.y + idx.z] = idx.y;
    }
    kernel void arange_z(device float* x, uint3 idx [[thread_position_in_grid]]) {
        x[idx.x + idx.y + idx.z] = idx.z;
    }
    """)
    lib.arange_x(x)
    lib.arange_y(y, threads=(1, y.numel()))
    lib.arange_z(z, threads=(1, 1, z.numel()))
    assert torch.equal(x, torch.arange(12.0))
    assert torch.equal(y, torch.arange(12.0))
    assert torch.equal(z, torch.arange(12.0))


def test_metal_arange_with_arg():
    x = torch.zeros(12)
    lib = compile_shader("""
    kernel void arange(device float* x, constant float& start, constant float& step,
                       uint idx [[thread_position_in_grid]]) {
        x[idx] = start + idx * step;
    }
    """)
    lib.arange(x, 3.14, 0.5)
    torch.testing.assert_close(x, torch.arange(3.14, 8.66, 0.5))


def test_metal_arange_with_arg_and_cast():
    x = torch.zeros(12, dtype=torch.half)
    y = torch.zeros(12, dtype=torch.half)
    lib = compile_shader("""
    kernel void arange_all_half(device half* x, constant half2& start_step, uint idx [[thread_position_in_grid]]) {
        x[idx] = start_step.x + idx * start_step.y;
    }
    kernel void arange_half(device half* x, constant half& start, constant half& step,
                            uint idx [[thread_position_in_grid]]) {
        x[idx] = start + idx * step;
    }
    """)
    lib.arange_all_half(x, [3.14, 0.5], arg_casts="fp16")
    lib.arange_half(y, 3.14, 0.5, arg_casts={1: "fp16", 2: "fp16"})
    expected = torch.arange(3.14, 8.66, 0.5, dtype=torch.half)
    torch.testing.assert_close(x, expected)
    torch.testing.assert_close(y, expected)


def test_metal_error_checking():
    with pytest.raises(SyntaxError):
        compile_shader("Syntax error")
    cs = compile_shader("kernel void foo(device float* x, uint i [[thread_position_in_grid]]) {}")
    with pytest.raises(AttributeError, match="no kernel 'bar'"):
        cs.bar()
    with pytest.raises(TypeError, match="takes 1 buffer argument"):
        cs.foo()
    max_thread_group_size = cs.foo.max_threads_per_threadgroup
    x = torch.empty(2 * max_thread_group_size)
    with pytest.raises(ValueError, match="exceeds its max_threads_per_threadgroup"):
        cs.foo(x, group_size=max_thread_group_size + 1)
    with pytest.raises(ValueError, match="argument 0 is a meta tensor"):
        cs.foo(torch.empty(16, device="meta"))


def test_metal_include():
    assert compile_shader("#include <c10/metal/special_math.h>") is not None


def test_a_compile_error_quotes_the_compiler_and_the_msl_line():
    with pytest.raises(MetalCompileError) as caught:
        compile_shader("kernel void f(device float* x, uint i [[thread_position_in_grid]]) {\n"
                       "  x[i] = undefined_name;\n}\n")
    message = str(caught.value)
    assert "<msl>:2:" in message and "undefined_name" in message
    assert "x[i] = undefined_name;" in message

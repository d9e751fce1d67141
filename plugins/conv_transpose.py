"""Transposed convolution on CUDA as one matrix product and shifted sums.

ExecuTorch's ``CudaBackend`` has Inductor tune convolutions with Triton templates alone
(``max_autotune_conv_backends="TRITON"``), and Inductor's Triton convolution template takes no transposed
convolution: a model's ``ConvTranspose2d`` fails with ``NoValidChoicesError``, stock too (docs/cuda.md). A
transposed convolution scatters each input position, times each tap of the kernel, to output position
``i * stride + t * dilation - padding``. Written that way, as ATen's own CPU kernel computes it (a matrix
product, then ``col2im``): one matrix product per group gives every tap of every output channel at every input
position, and for each tap its slice, spread ``stride`` apart with zeros and shifted into place by padding
(cropped where it falls outside), is summed into the output. Inductor generates Triton code for all of it.
Writing it as an ordinary convolution over a zero-stuffed input instead ran on Inductor's convolution template,
which computes in TF32 (``torch.backends.cudnn``'s default): 1.6e-04 from float64 on the H200 where eager's
cuDNN kernel was 5.6e-08. Matrix products stay float32 (``torch.backends.cuda.matmul``'s default). Every size
is the input's times a static stride plus constants, so batch and spatial sizes may be dynamic.

Semantics kept from ATen: each output is the sum of the same products ATen forms (input times weight tap,
never a product with an inserted zero, so non-finite values meet only what they meet in ATen), added in tap
order; float16 and bfloat16 are multiplied and summed in float32 and rounded once, with the bias; NaN and inf
propagate to the outputs that read them; an empty batch gives an empty result.
"""

from __future__ import annotations

import itertools
import math

import torch

from shimkit.registry import DecompositionDeclined, OpCall, OpPlugin, hookimpl

CONV_TRANSPOSE_1D = "aten::conv_transpose1d.default"
CONV_TRANSPOSE_2D = "aten::conv_transpose2d.input"
CONV_TRANSPOSE_3D = "aten::conv_transpose3d.input"


def _per_dim(value: int | list[int], dims: int) -> list[int]:
    values = list(value) if isinstance(value, (list, tuple)) else [value]
    return values * dims if len(values) == 1 else values


def _spread(tensor: torch.Tensor, dim: int, step: int) -> torch.Tensor:
    """``tensor`` with ``step - 1`` zeros after every element along ``dim`` (after the last one too)."""
    if step == 1:
        return tensor
    trailing = tensor.dim() - dim - 1
    slots = torch.constant_pad_nd(tensor.unsqueeze(dim + 1), [0, 0] * trailing + [0, step - 1])
    # Not flatten: it reshapes with -1, which a tensor of no elements cannot resolve.
    return slots.reshape(*tensor.shape[:dim], tensor.shape[dim] * step, *tensor.shape[dim + 1:])


def conv_transpose(input: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None,
                   stride: int | list[int] = 1, padding: int | list[int] = 0,
                   output_padding: int | list[int] = 0, groups: int = 1,
                   dilation: int | list[int] = 1) -> torch.Tensor:
    if any(isinstance(size, torch.SymInt) for size in weight.shape):
        # Regrouping a dynamic channel count would guard on its value: a model's weights are static.
        raise DecompositionDeclined("the weight's channel and tap counts must be static")
    dims = weight.dim() - 2
    batched = input.dim() == dims + 2
    x = input if batched else input.unsqueeze(0)
    stride, padding = _per_dim(stride, dims), _per_dim(padding, dims)
    output_padding, dilation = _per_dim(output_padding, dims), _per_dim(dilation, dims)
    in_channels, out_per_group, *taps = weight.shape
    batch, spatial = x.shape[0], list(x.shape[2:])
    accumulate = torch.float32 if x.dtype in (torch.float16, torch.bfloat16) else x.dtype
    # Every tap of every output channel times every input position, in one matrix product per group.
    columns = x.to(accumulate).reshape(batch, groups, in_channels // groups, math.prod(spatial))
    kernels = weight.to(accumulate).reshape(groups, in_channels // groups, out_per_group * math.prod(taps))
    products = torch.matmul(kernels.transpose(1, 2), columns)
    products = products.reshape(batch, groups * out_per_group, *taps, *spatial)
    result = None
    for tap in itertools.product(*(range(count) for count in taps)):
        # Tap t of input position i lands on output position i * stride + t * dilation - padding.
        placed = products[(slice(None), slice(None), *tap)]
        pads: list[int] = []
        for axis in range(dims):
            placed = _spread(placed, axis + 2, stride[axis])
            reach = dilation[axis] * (taps[axis] - 1)
            before = tap[axis] * dilation[axis] - padding[axis]
            after = reach - tap[axis] * dilation[axis] + 1 - stride[axis] + output_padding[axis] - padding[axis]
            pads = [before, after] + pads  # constant_pad_nd lists the last dimension first
        # Grown first, then cropped: a tap whose positions all fall in the padding is cropped whole.
        placed = torch.constant_pad_nd(placed, [max(pad, 0) for pad in pads])
        if any(pad < 0 for pad in pads):
            placed = torch.constant_pad_nd(placed, [min(pad, 0) for pad in pads])
        result = placed if result is None else result + placed
    assert result is not None  # a weight has at least one tap per dimension
    if bias is not None:
        result = result + bias.to(accumulate).reshape(-1, *[1] * dims)
    result = result.to(x.dtype)
    return result if batched else result.squeeze(0)


def conv_transpose_inputs(dims: int):
    """``conv_transpose{dims}d`` calls: 1 or 2 groups, 1 to 3 channels per group each way, 1 to 3 taps,
    stride and dilation up to 2 (``output_padding`` below the larger of the two, as ATen requires), padding
    up to what leaves one output position (past the kernel's reach too: taps are then cropped whole), with
    and without bias, batches down to 0, an unbatched input a quarter of the time, float32 values with NaN
    and inf in the input and bias (finite weights: an infinite tap summed with another in a different order
    than ATen's can overflow differently), and float16/bfloat16."""
    from hypothesis import strategies as st

    finite = st.floats(-4, 4, width=16)
    values = finite | st.sampled_from([0.0, float("nan"), float("inf"), -float("inf")])

    @st.composite
    def call(draw):
        groups, per_group_in, per_group_out = draw(st.integers(1, 2)), draw(st.integers(1, 3)), draw(st.integers(1, 3))
        taps = [draw(st.integers(1, 3)) for _ in range(dims)]
        stride = [draw(st.integers(1, 2)) for _ in range(dims)]
        dilation = [draw(st.integers(1, 2)) for _ in range(dims)]
        output_padding = [draw(st.integers(0, max(s, d) - 1)) for s, d in zip(stride, dilation)]
        sizes = [draw(st.integers(1, 4)) for _ in range(dims)]
        # At most what leaves one output position: (size - 1) * stride + reach + 1 + output_padding - 2 * padding.
        padding = [draw(st.integers(0, ((n - 1) * s + d * (k - 1) + o) // 2))
                   for n, s, d, k, o in zip(sizes, stride, dilation, taps, output_padding)]
        batch = draw(st.integers(0, 2))
        dtype = draw(st.sampled_from([torch.float32, torch.float32, torch.float16, torch.bfloat16]))

        def tensor(elements, *shape):
            flat = draw(st.lists(elements, min_size=math.prod(shape), max_size=math.prod(shape)))
            return torch.tensor(flat, dtype=torch.float32).reshape(shape).to(dtype)

        x = tensor(values, batch, groups * per_group_in, *sizes)
        if batch == 1 and draw(st.integers(0, 3)) == 0:
            x = x[0]
        weight = tensor(finite, groups * per_group_in, per_group_out, *taps)
        bias = tensor(values, groups * per_group_out) if draw(st.booleans()) else None
        return OpCall((x, weight, bias, stride, padding, output_padding, groups, dilation), {})

    return call()


def _reference(op):
    """ATen's ``op`` with float16 and bfloat16 computed in float32 and rounded once, the semantics this
    decomposition keeps: ATen's CPU ``conv_transpose3d`` sums half in half (``col2im``), a rounding per add."""
    def reference(input, weight, bias=None, *args):
        low = input.dtype in (torch.float16, torch.bfloat16)
        widen = (lambda t: t.float() if t is not None else None) if low else (lambda t: t)
        result = op(widen(input), widen(weight), widen(bias), *args)
        return result.to(input.dtype) if low else result

    return reference


@hookimpl
def shimkit_op_plugins():
    yield OpPlugin(
        name="conv-transpose",
        ops=(CONV_TRANSPOSE_1D, CONV_TRANSPOSE_2D, CONV_TRANSPOSE_3D),
        decompositions={op: conv_transpose for op in (CONV_TRANSPOSE_1D, CONV_TRANSPOSE_2D, CONV_TRANSPOSE_3D)},
        references={CONV_TRANSPOSE_1D: _reference(torch.ops.aten.conv_transpose1d.default),
                    CONV_TRANSPOSE_2D: _reference(torch.ops.aten.conv_transpose2d.input),
                    CONV_TRANSPOSE_3D: _reference(torch.ops.aten.conv_transpose3d.input)},
        input_strategies={CONV_TRANSPOSE_1D: lambda: conv_transpose_inputs(1),
                          CONV_TRANSPOSE_2D: lambda: conv_transpose_inputs(2),
                          CONV_TRANSPOSE_3D: lambda: conv_transpose_inputs(3)},
        # Metal's convolution kernel takes transposed ones (plugins/convolution.py); CUDA's Triton
        # convolution template does not.
        decomposition_devices=("cuda",),
        doc="Transposed convolution on CUDA as one matrix product and shifted sums (Inductor's Triton "
            "convolution template takes no transposed convolution).",
    )
